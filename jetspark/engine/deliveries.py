"""Deliveries and acks: what a consumer hands out, and what its messages' acks do.

``Deliveries`` (one per handle, on its ``StoreDirectory``) takes a consumer's
next messages under the stream's lock (``pull``), waits for them
(``fetch_wait``: woken by a commit in any process, jetspark/engine/wakeup.py,
or when the earliest pending redelivery falls due), binds push subscriptions
to their consumer (bindings.py), and applies acks.  Pull and push
subscriptions (pull.py, push.py) and the async writer (async_writer.py) use
it, never the handle.

``Msg.ack()`` is fire-and-forget as in nats-py: acks are buffered and applied
before the handle's next call (or when ``ack_sync`` asks for it), so a tight
fetch/ack loop costs one lock per batch instead of one per message.  A
process killed with acks still buffered loses them, and those messages are
redelivered after their ack_wait, exactly as acks lost on the network would.
The buffer is a deque, because appending and popping are atomic: callback
threads ack without a lock, and a flush in another thread loses none.
"""

from __future__ import annotations

import collections
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from jetspark import validate as V
from jetspark.api import AckPolicy, ConsumerInfo, MsgMetadata, SequencePair, ns_to_datetime
from jetspark.engine import consumer_config as ccfg
from jetspark.engine import wakeup
from jetspark.engine.bindings import Binding
from jetspark.err_codes import CONSUMER_NOT_FOUND
from jetspark.errors import JetSparkError, api_error, push_based_error
from jetspark.protocol import ack_reply
from jetspark.protocol import headers as H

if TYPE_CHECKING:
    from jetspark.engine.consumer import Consumer
    from jetspark.engine.store_dir import StoreDirectory
    from jetspark.engine.stream import Stream

__all__ = ["Ack", "Deliveries", "Delivery", "Msg", "consumer_of"]

log = logging.getLogger("jetspark")
ACK_BUFFER = 8192  # acks buffered before one is applied at once


class Delivery(NamedTuple):
    """One delivery of a message by a consumer: what its acks name, and its metadata."""

    stream: str
    consumer: str  # "" for an ordered read (ordered_consumer), which takes no acks
    stream_seq: int
    consumer_seq: int
    delivered: int  # how many times the consumer has delivered it, this time included
    pending: int  # the consumer's new messages still to come after it
    timestamp: int  # the message's, ns since the epoch


# An ack waiting in the buffer: (stream, consumer, stream seq, consumer seq), a plain tuple.
# A message's delivery is held in its Msg's slots rather than in a Delivery of its own: one
# more object per message for the garbage collector to track costs about a fifth of a
# fetch-and-ack loop (benchmarks/bench_engine.py row 6a).
Ack = tuple[str, str, int, int]


class Msg:
    """A message delivered by a consumer; acknowledge it with ack/nak/in_progress/term."""

    # _ackd: set by ack, nak, term (a push callback's auto-ack skips it); _stream.._ts: its Delivery.
    __slots__ = (
        "subject",
        "data",
        "headers",
        "_deliveries",
        "_stream",
        "_consumer",
        "_sseq",
        "_cseq",
        "_delivered",
        "_pending",
        "_ts",
        "_ackd",
    )

    def __init__(
        self,
        deliveries: Optional["Deliveries"],
        subject: str,
        data: bytes,
        headers: Optional[dict],
        stream: str,
        consumer: str,
        stream_seq: int,
        consumer_seq: int,
        delivered: int,
        pending: int,
        timestamp: int,
    ) -> None:
        self.subject = subject
        self.data = data
        self.headers = headers
        self._deliveries = deliveries  # None: its acks do nothing (ordered reads)
        self._stream = stream
        self._consumer = consumer
        self._sseq = stream_seq
        self._cseq = consumer_seq
        self._delivered = delivered
        self._pending = pending
        self._ts = timestamp

    @property
    def _delivery(self) -> Delivery:
        return Delivery(self._stream, self._consumer, self._sseq, self._cseq, self._delivered, self._pending, self._ts)

    @property
    def metadata(self) -> MsgMetadata:
        return MsgMetadata(
            sequence=SequencePair(consumer=self._cseq, stream=self._sseq),
            num_pending=self._pending,
            num_delivered=self._delivered,
            timestamp=ns_to_datetime(self._ts),
            stream=self._stream,
            consumer=self._consumer,
        )

    @property
    def reply(self) -> str:
        return ack_reply.build(
            self._stream, self._consumer, self._delivered, self._sseq, self._cseq, self._ts, self._pending
        )

    def ack(self) -> None:
        """Acknowledge (fire-and-forget; applied before the handle's next call)."""
        self._ackd = True
        if self._deliveries is not None:
            self._deliveries.ack((self._stream, self._consumer, self._sseq, self._cseq))

    def ack_sync(self, timeout: float = 1.0) -> "Msg":
        """Acknowledge and wait until the ack is applied."""
        V.timeout(timeout)
        self._ackd = True
        if self._deliveries is not None:
            self._deliveries.ack((self._stream, self._consumer, self._sseq, self._cseq))
            self._deliveries.flush()
        return self

    def nak(self, delay: Optional[float] = None) -> None:
        """Ask for redelivery, optionally not before ``delay`` seconds."""
        delay = V.nak_delay(delay)
        self._ackd = True
        if self._deliveries is not None:
            self._deliveries.nak(self._delivery, delay)

    def in_progress(self) -> None:
        """Restart the ack_wait clock without counting a new delivery."""
        if self._deliveries is not None:
            self._deliveries.in_progress(self._delivery)

    def term(self) -> None:
        """Never redeliver; releases the message on interest and work-queue streams."""
        self._ackd = True
        if self._deliveries is not None:
            self._deliveries.term(self._delivery)

    def __repr__(self) -> str:
        return f"<Msg subject={self.subject!r} seq={self._sseq} data={self.data[:32]!r}>"


def consumer_of(st: "Stream", name: str) -> "Consumer":
    """The consumer ``name`` of ``st`` (caller holds the stream's lock): its CorruptStoreError
    if it is damaged, 10014 if there is none."""
    c = st.consumers.by_name.get(V.consumer_name(name))
    if c is None:
        st.consumers.check_not_broken(name)  # damaged: its CorruptStoreError
        raise api_error(CONSUMER_NOT_FOUND)
    return c


class Deliveries:
    """One handle's deliveries and buffered acks (see the module docstring)."""

    def __init__(self, store: "StoreDirectory") -> None:
        self.store = store
        # Msg.ack() calls not applied yet.
        self.acks: collections.deque[Ack] = collections.deque()
        # Set by close() to end the waits of fetches under way in other threads (made on
        # the first wait; a forked child makes its own).
        self._closing: Optional[wakeup.Interrupt] = None

    def check(self) -> None:
        """ClosedError once the handle is closed; after fork(), the child's own store."""
        if self.store.check():
            # The parent's buffered acks and waits are the parent's.
            self.acks = collections.deque()
            self._closing = None

    def stream(self, name: str) -> "Stream":
        """The stream ``name``, once the acks buffered so far are applied (a verb sees them)."""
        self.check()
        if self.acks:
            self.flush()
        return self.store.stream(name)  # (a name HandleBase checked: hooks.stream_arg)

    def close(self) -> None:
        """Apply the buffered acks and close the store; fetches waiting in other threads end
        (with ClosedError)."""
        try:
            self.flush()
        finally:
            self.store.closed = True
            if self._closing is not None:
                self._closing.set()
            self.store.close()

    # ------------------------------------------------------------------ consumers

    def consumer_info(self, stream: str, consumer: str) -> ConsumerInfo:
        with self.store.lock:
            st = self.stream(stream)
            with st.locked():
                return consumer_of(st, consumer).info(st.clock())

    def new_inbox(self) -> str:
        return "_INBOX." + ccfg.new_ephemeral_name()

    def bind(self, stream: str, consumer: str) -> Binding:
        """Bind a subscription to the push consumer (bindings.py); 10014 if it is gone."""
        with self.store.lock:
            st = self.stream(stream)
            with st.locked():
                c = consumer_of(st, consumer)
                try:
                    return Binding(c.home)
                except FileNotFoundError:
                    raise api_error(CONSUMER_NOT_FOUND) from None

    def unbind(self, binding: Binding, stream: str, consumer: str) -> None:
        """Release a binding; the consumer's inactive_threshold counts from now, as the server's
        does from the moment its interest goes.  Quiet if the stream or consumer is gone."""
        binding.release()
        if self.store.closed:
            return
        try:
            with self.store.lock:
                st = self.stream(stream)
                with st.locked():
                    c = st.consumers.by_name.get(consumer)
                    if c is not None and c.config.inactive_threshold:
                        c.commit(c.plan_active(st.clock()))
        except JetSparkError as exc:  # the stream is gone, or its store refuses: the binding is released all the same
            log.debug("unbinding from consumer %r of stream %r: %s", consumer, stream, exc)

    # ------------------------------------------------------------------ delivering

    def fetch_wait(
        self,
        stream: str,
        consumer: str,
        batch: int,
        max_bytes: int,
        timeout: float,
        interrupt: Optional[wakeup.Interrupt] = None,
        push: bool = False,
    ) -> list[Msg]:
        """Up to ``batch`` messages (``pull``), waiting up to ``timeout`` seconds (``math.inf``:
        until ``interrupt``) for the first: woken by another process's commit (wakeup.py) or
        when the earliest pending redelivery falls due.  [] when none came, or on ``interrupt``."""
        wait = timeout > 0
        msgs, due, path, seen = self.pull(stream, consumer, batch, max_bytes, wait, push)
        if msgs or not wait:
            return msgs
        deadline = time.monotonic() + timeout
        with self.store.lock:
            self.check()
            if self._closing is None:
                self._closing = wakeup.Interrupt()
            interrupts = (self._closing,) if interrupt is None else (self._closing, interrupt)
        with wakeup.Waiter(path, interrupts) as waiter:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or waiter.interrupted():
                    self.check()  # closed meanwhile: ClosedError, not an empty fetch
                    return []
                waiter.wait(left if due is None else min(left, due), seen)
                msgs, due, _, seen = self.pull(stream, consumer, batch, max_bytes, True, push)
                if msgs:
                    return msgs

    def pull(
        self, stream: str, consumer: str, batch: int, max_bytes: int, arm: bool = False, push: bool = False
    ) -> tuple[list[Msg], Optional[float], Optional[Path], int]:
        """The messages of one fetch (with ``push``: of a push subscription's take).  When
        there are none, also the seconds until the consumer's earliest pending delivery is
        due again (None: none is), the path of the stream's notify file and, with ``arm``,
        the notify counter after arming it under the stream's lock (wakeup.py), for a caller
        that waits."""
        with self.store.lock:
            st = self.stream(stream)
            with st.locked():
                c = consumer_of(st, consumer)
                if c.config.deliver_subject and not push:
                    raise push_based_error()  # the server's answer to a pull request
                now = st.clock()
                # A paused consumer delivers nothing; a waiting pull takes its messages once the pause ends.
                paused = ccfg.paused_for(c.config, now)
                out = [] if paused else c.next_batch(batch, now, max_bytes)
                if not out:
                    due = now + paused if paused else c.next_due(now)
                    marker_due = st.next_marker_due()  # the delete marker an expiry stores is a message
                    if marker_due is not None and (due is None or marker_due < due):
                        due = marker_due
                    notifier = st.storage.notifier
                    if notifier is None:
                        return [], None if due is None else (due - now) / 1e9, None, 0
                    return [], None if due is None else (due - now) / 1e9, notifier.path, notifier.arm() if arm else 0
                if c.config.ack_policy == AckPolicy.NONE:
                    st.consumers.release([q for q, _, _ in out])  # with ack none, delivery is the release
                pending = c.num_pending()
                recs = st.storage.read_messages([q for q, _, _ in out])
                name, cname, headers_only = st.name, c.name, bool(c.config.headers_only)
                # num_pending after each delivery: the new messages still to come after it.
                new_after = sum(1 for _, _, n in out if n == 1)
                msgs: list = []
                append = msgs.append
                for (sseq, cseq, delivered), (subject, hdr, data, ts) in zip(out, recs):
                    if delivered == 1:
                        new_after -= 1
                    headers = H.decode(hdr) if hdr else None
                    if headers_only:
                        headers = dict(headers or {})
                        headers["Nats-Msg-Size"] = str(len(data))
                        data = b""
                    append(
                        Msg(self, subject, data, headers, name, cname, sseq, cseq, delivered, pending + new_after, ts)
                    )
                return msgs, None, None, 0

    # ------------------------------------------------------------------ acks

    def ack(self, ack: Ack) -> None:
        acks = self.acks
        acks.append(ack)
        if len(acks) >= ACK_BUFFER:
            self.flush()

    def flush(self) -> None:
        """Apply buffered Msg.ack() calls: one lock and one log record per consumer."""
        if not self.acks:
            return
        store = self.store
        with store.lock:
            acks, by_consumer = self.acks, dict[tuple, list]()
            for _ in range(len(acks)):  # those there now; later ones wait for the next flush
                stream, consumer, stream_seq, consumer_seq = acks.popleft()
                by_consumer.setdefault((stream, consumer), []).append((stream_seq, consumer_seq))
            store.sync()
            for (stream, consumer), items in by_consumer.items():
                st = store.streams.get(stream)
                if st is None:
                    continue
                with st.locked():
                    c = st.consumers.by_name.get(consumer)
                    if c is None:
                        continue
                    now = st.clock()
                    if c.is_explicit:
                        released = c.ack_many([q for q, _ in items], now)
                    else:
                        released = []
                        for q, cseq in items:
                            released.extend(c.ack(q, cseq, now))
                    st.consumers.release(released)

    def nak(self, d: Delivery, delay: Optional[float]) -> None:
        self._settle(d, lambda st, c, now: c.nak(d.stream_seq, d.consumer_seq, delay, now))

    def in_progress(self, d: Delivery) -> None:
        self._settle(d, lambda st, c, now: c.in_progress(d.stream_seq, now))

    def term(self, d: Delivery) -> None:
        self._settle(d, lambda st, c, now: st.consumers.release(c.term(d.stream_seq, d.consumer_seq, now)))

    def _settle(self, d: Delivery, apply: Any) -> None:
        """``apply(stream, consumer, now)`` under the stream's lock, after the buffered acks
        (which came first); nothing if the consumer is gone."""
        self.flush()
        with self.store.lock:
            st = self.stream(d.stream)
            with st.locked():
                c = st.consumers.by_name.get(d.consumer)
                if c is None:
                    return
                apply(st, c, st.clock())
