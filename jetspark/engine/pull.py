"""Pull subscriptions on the engine, shaped like nats-py's (synchronously).

A subscription fetches through the handle's ``Deliveries`` (deliveries.py),
which also holds the delivered messages' class, ``Msg``, and applies their acks.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from typing import Optional

from jetspark import validate as V
from jetspark.api import ConsumerInfo
from jetspark.backend import live
from jetspark.engine import wakeup
from jetspark.engine.deliveries import Deliveries, Msg
from jetspark.errors import FetchTimeoutError, JetSparkError

__all__ = ["Messages", "Msg", "PullSubscription"]


class PullSubscription(live.LivePulls):
    """A pull consumer bound to a stream (nats-py ``JetStreamContext.PullSubscription``)."""

    def __init__(self, deliveries: Deliveries, stream: str, consumer: str) -> None:
        self._deliveries = deliveries
        self.stream = stream
        self.consumer = consumer

    def fetch(
        self,
        batch: int = 1,
        timeout: Optional[float] = 5.0,
        heartbeat: Optional[float] = None,
        no_wait: bool = False,
        max_bytes: Optional[int] = None,
    ) -> list[Msg]:
        """Up to ``batch`` messages; waits up to ``timeout`` for the first one, woken by a
        publish or ack in any process (jetspark.engine.wakeup).  ``heartbeat`` is checked as
        on a server and has nothing to watch here.

        Raises FetchTimeoutError (a TimeoutError) when none arrives, as nats-py does.
        """
        batch, timeout, no_wait, max_bytes = V.fetch_args(batch, timeout, no_wait, max_bytes)
        live.fetch_heartbeat(heartbeat, timeout)
        msgs = self._deliveries.fetch_wait(
            self.stream, self.consumer, batch, max_bytes or 0, 0.0 if no_wait else timeout
        )
        if not msgs:
            raise FetchTimeoutError(
                f"no message from consumer {self.consumer!r} of stream {self.stream!r} within {timeout} s"
            )
        return msgs

    def _messages(self, opts: live.PullOptions) -> "Messages":
        self._deliveries.check()
        return Messages(self, opts)

    def consumer_info(self) -> ConsumerInfo:
        return self._deliveries.consumer_info(self.stream, self.consumer)

    def _settle_acks(self) -> None:
        self._deliveries.flush()


class Messages(live.MessagesBase):
    """``PullSubscription.messages()`` on the engine: a buffer of delivered messages, topped
    up with a fetch of what is missing each time it holds fewer than the threshold (checked
    at every ``next``, as nats.go does), and a fetch that waits for the stream's wake-up when
    it is empty.  ``next`` runs in one thread at a time; ``stop``/``drain`` from any.
    """

    def __init__(self, sub: PullSubscription, opts: live.PullOptions) -> None:
        self._deliveries = sub._deliveries
        self.stream = sub.stream
        self.consumer = sub.consumer
        self._opts = opts
        self._buffer: collections.deque[Msg] = collections.deque()
        self._bytes = 0
        self._state = _OPEN
        self._error: Optional[BaseException] = None  # a final error met while messages were buffered
        self._lock = threading.Lock()
        self._interrupt = wakeup.Interrupt()

    def next(self, timeout: Optional[float] = None) -> Msg:
        deadline = math.inf if timeout is None else time.monotonic() + V.timeout(timeout)
        looked = False
        while True:
            with self._lock:
                if self._state == _CLOSED:
                    raise StopIteration
                n = len(self._buffer)
                pulling = self._state == _OPEN and self._error is None
                if n and not (pulling and self._opts.below_threshold(n, self._bytes)):
                    return self._take()
                if not n and not pulling:
                    err, self._error = self._error, None
                    self._close()
                    if err is not None:
                        raise err
                    raise StopIteration
                batch, max_bytes = self._opts.refill(n, self._bytes)
            if n:
                # Below the threshold: top the buffer up with what is there now, then deliver.
                if batch > 0 and (max_bytes > 0 or not self._opts.max_bytes):
                    self._pull(batch, max_bytes, 0.0)
                with self._lock:
                    if self._buffer:
                        return self._take()
                continue  # stopped meanwhile
            left = deadline - time.monotonic()
            if left <= 0 and looked:
                raise FetchTimeoutError(
                    f"no message from consumer {self.consumer!r} of stream {self.stream!r} within {timeout} s"
                )
            self._pull(batch, max_bytes, max(left, 0.0))
            looked = True

    def _take(self) -> Msg:
        msg = self._buffer.popleft()
        if self._opts.max_bytes:
            self._bytes -= _size(msg)
        return msg

    def _pull(self, batch: int, max_bytes: int, wait: float) -> None:
        try:
            msgs = self._deliveries.fetch_wait(self.stream, self.consumer, batch, max_bytes, wait, self._interrupt)
        except (JetSparkError, OSError) as exc:
            # The consumer or stream is gone, the handle closed, the store failed: the pull
            # is over.  What is buffered comes first; then the error, once.
            with self._lock:
                if self._state == _OPEN:
                    self._error = exc
            return
        if msgs:
            with self._lock:
                if self._state == _CLOSED:
                    return  # stopped meanwhile: redelivered after ack_wait, as buffered ones are
                self._buffer.extend(msgs)
                if self._opts.max_bytes:
                    self._bytes += sum(_size(m) for m in msgs)

    def _close(self) -> None:
        self._state = _CLOSED
        self._buffer.clear()
        self._bytes = 0
        self._interrupt.set()

    def stop(self) -> None:
        with self._lock:
            self._close()

    def drain(self) -> None:
        with self._lock:
            if self._state == _OPEN:
                self._state = _DRAINING
                self._interrupt.set()

    def __del__(self) -> None:
        try:
            self._interrupt.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"<Messages {self.stream} > {self.consumer}: {len(self._buffer)} buffered>"


_OPEN, _DRAINING, _CLOSED = range(3)


def _size(m: Msg) -> int:
    hdr = sum(len(k) + len(v) + 4 for k, v in m.headers.items()) + 12 if m.headers else 0
    return live.msg_size(m.subject, m.reply, m.data, hdr)
