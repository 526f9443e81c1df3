"""Push subscriptions on the engine (docs/semantics.md §5.6).

A server pushes a push consumer's messages to its subscribers; the engine
has no server, so a subscription takes them itself: the consumer delivers
to it, under the stream's lock, what it would push (``max_ack_pending``,
redeliveries after ``ack_wait`` or a nak, in the consumer's order), up to
``TAKE`` messages at a time, which the subscription then holds until it
hands them out.  Every subscriber of one consumer (threads, or processes on
the same store: a queue group) takes from the same consumer state, so each
message goes to exactly one of them.  Waiting for new messages is the wait of
a fetch (``Deliveries.fetch_wait``: woken by a commit in any process,
jetspark/engine/wakeup.py), which ``unsubscribe``, ``drain`` and the handle's
``close`` end at once through the subscription's ``wakeup.Interrupt``.

A subscription holds a binding on its consumer (bindings.py) while it
lives: the consumer shows ``push_bound`` and is not removed for inactivity.

An ordered consumer (``subscribe(..., ordered_consumer=True)``) is an
ack-none ephemeral whose messages ignore every ack verb.  When its consumer
sequence skips, or its consumer is gone (deleted, or removed while this
process was stopped longer than its inactive_threshold), the subscription
makes a new consumer that starts at the stream sequence after the last one
it took, as ADR-17 describes for a server's ordered consumer.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from typing import TYPE_CHECKING, Callable, Optional

from jetspark.api import ConsumerConfig, ConsumerInfo, DeliverPolicy
from jetspark.backend.push import Ended, PushBase, deliver, log
from jetspark.engine import wakeup
from jetspark.engine.bindings import Binding
from jetspark.engine.deliveries import Deliveries, Msg
from jetspark.errors import ClosedError, ConsumerNotFoundError, JetSparkError, NextMsgTimeoutError

if TYPE_CHECKING:
    from jetspark.backend import JetStreamAPI

# Messages a subscription takes from its consumer at a time (a server pushes up to
# max_ack_pending at once; fewer here spreads a queue group's messages wider).
TAKE = 64
# A subscription's states: taking and handing out; handing out what it holds (drain); done.
OPEN, DRAINING, CLOSED = "open", "draining", "closed"


class PushSubscription(PushBase):
    """A subscription on a push consumer of the engine (``jetspark.backend.PushSubscriptionAPI``).

    ``js``: the handle, for its public verbs (an ordered consumer is made again with them);
    the messages come through ``deliveries``."""

    def __init__(
        self,
        js: "JetStreamAPI",
        deliveries: Deliveries,
        stream: str,
        info: ConsumerInfo,
        cb: Optional[Callable],
        auto_ack: bool,
        ordered: Optional[ConsumerConfig],
        owned: bool,
    ) -> None:
        super().__init__(js, stream, info.name, cb, auto_ack, owned)
        self._deliveries = deliveries
        self._ordered = ordered  # the ordered consumer's config, to make it again
        self._interrupt = wakeup.Interrupt()  # ends a wait for messages when the subscription ends
        self._held: collections.deque[Msg] = collections.deque()
        self._taking = threading.Lock()  # one taker at a time (next_msg from several threads)
        self._finishing = threading.Lock()
        self._state = OPEN
        self._closing = False  # the handle is closing (_shutdown)
        self._last = (0, 0)  # an ordered consumer's last (stream seq, consumer seq) taken
        self._binding: Optional[Binding] = deliveries.bind(stream, info.name)  # None once released
        if cb is not None:
            self._start_thread(self._run)

    # ------------------------------------------------------------------ taking messages

    def _receive(self, timeout: Optional[float]) -> list[Msg]:
        """Messages from the consumer, waiting up to ``timeout`` (None: until some come or the
        subscription stops taking); [] when none came."""
        deadline = math.inf if timeout is None else _now() + timeout
        while self._state is OPEN:
            try:
                msgs = self._deliveries.fetch_wait(
                    self.stream, self._consumer, TAKE, 0, max(deadline - _now(), 0.0), self._interrupt, push=True
                )
            except ConsumerNotFoundError:
                if self._ordered is None:
                    raise
                self._reset("its consumer is gone")
                continue
            if not msgs:
                if _now() >= deadline:
                    return []
                continue  # interrupted: the loop looks at the state
            if self._ordered is not None:
                msgs = self._in_order(msgs)
                if not msgs:
                    continue  # made again at a gap: take from the new consumer
            return msgs
        return []

    def _in_order(self, msgs: list[Msg]) -> list[Msg]:
        """An ordered consumer's messages up to a gap in consumer sequences, after which it
        is made again (ADR-17); its messages take no acks."""
        out = []
        for m in msgs:
            cseq, d = self._last[1], m._delivery
            if d.consumer_seq != cseq + 1:
                self._reset(f"its consumer sequence went from {cseq} to {d.consumer_seq}")
                break
            self._last = (d.stream_seq, d.consumer_seq)
            m._deliveries = None
            out.append(m)
        return out

    def _reset(self, why: str) -> None:
        """Make the ordered consumer again, from the stream sequence after the last one taken."""
        js, deliveries, old, ordered = self._js, self._deliveries, self.consumer, self._ordered
        assert ordered is not None  # (called for an ordered consumer only)
        sseq = self._last[0]
        log.info(
            "ordered consumer %r of stream %r: %s; making a new one from stream seq %d", old, self.stream, why, sseq + 1
        )
        if self._binding is not None:
            deliveries.unbind(self._binding, self.stream, old)
        try:
            js.delete_consumer(self.stream, old)
        except ConsumerNotFoundError:
            pass
        config = ordered.evolve(name=None, durable_name=None, deliver_subject=deliveries.new_inbox())
        if sseq:
            config = config.evolve(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=sseq + 1, opt_start_time=None
            )
        info = js.add_consumer(self.stream, config)
        self._consumer = info.name
        self._binding = deliveries.bind(self.stream, info.name)
        self._last = (sseq, 0)

    # ------------------------------------------------------------------ handing them out

    def _run(self) -> None:
        """The callback thread: take, then call back for each message held, in order."""
        try:
            while self._state is OPEN:
                self._held.extend(self._receive(None))
                self._hand_out()
            self._hand_out()  # a drain: what is held still goes to the callback
        except ClosedError:
            pass  # the handle was closed
        except JetSparkError as exc:
            log.error("%s stopped delivering: %s", self._where, exc)
            self._state = CLOSED
        finally:
            self._finish()

    def _hand_out(self) -> None:
        cb = self._cb
        assert cb is not None  # (the callback thread's, which a subscription with a callback runs)
        while self._held and self._state is not CLOSED:
            deliver(cb, self._held.popleft(), self._auto_ack, self._where)

    def _next(self, timeout: Optional[float]) -> Msg:
        with self._taking:
            while True:
                if self._held:
                    return self._held.popleft()
                if self._state is not OPEN:
                    self._finish()
                    raise Ended()
                msgs = self._receive(timeout)
                if msgs and self._state is not CLOSED:  # (unsubscribed meanwhile: dropped, as _end drops)
                    self._held.extend(msgs)
                elif self._state is OPEN:
                    raise NextMsgTimeoutError(f"no message from {self._where} within {timeout} s")

    def _pending(self) -> int:
        return len(self._held)

    # ------------------------------------------------------------------ ending

    def _end(self, drain: bool) -> None:
        # Takes no more messages: a wait in progress ends now.
        self._state = DRAINING if drain else CLOSED
        self._interrupt.set()
        if not drain:
            self._held.clear()  # as a client drops what the server pushed: redelivered after ack_wait
        if self._thread is not None:
            self._join_thread()  # the thread finishes (unless this is the callback ending it)
        elif not self._held:
            self._finish()
        # else (drain without a callback): next_msg and messages hand out the rest, then finish.

    def _finish(self) -> None:
        """Release the consumer: unbind, apply the acks given, delete an owned ephemeral."""
        with self._finishing:
            binding, self._binding = self._binding, None
            if binding is None:
                return
            if self._closing:
                binding.release()  # the handle is closing: it is asked nothing more
                return
            self._deliveries.unbind(binding, self.stream, self.consumer)
            try:
                self._deliveries.flush()
            except JetSparkError as exc:
                log.warning("%s: applying its acks failed: %s", self._where, exc)
            self._delete_owned()

    def _shutdown(self) -> None:
        self._ended = True
        self._closing = True
        self._state = CLOSED
        self._interrupt.set()
        self._held.clear()
        self._join_thread()
        self._finish()

    def __del__(self) -> None:
        try:
            self._interrupt.close()
        except Exception:
            pass


_now = time.monotonic
