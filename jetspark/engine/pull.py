"""Pull subscriptions and delivered messages, shaped like nats-py's (synchronously).

``Msg.ack()`` is fire-and-forget as in nats-py: the handle batches acks and
applies them before its next call (or when ``ack_sync`` asks for it), so a
tight fetch/ack loop costs one lock per batch instead of one per message.
A process killed with acks still buffered loses them, and those messages are
redelivered after their ack_wait, exactly as acks lost on the network would.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

from jetspark import validate as V
from jetspark.api import MsgMetadata, SequencePair, ns_to_datetime
from jetspark.errors import FetchTimeoutError

if TYPE_CHECKING:
    from jetspark.engine.handle import JetStream


class Msg:
    """A message delivered by a consumer; acknowledge it with ack/nak/in_progress/term."""

    __slots__ = ("subject", "data", "headers", "_js", "_meta", "_ackd")  # _ackd: set by ack, nak, term (a push callback's auto-ack skips it)

    def __init__(self, js: Optional["JetStream"], subject: str, data: bytes, headers, meta: tuple) -> None:
        self.subject = subject
        self.data = data
        self.headers = headers
        self._js = js
        self._meta = meta  # (stream, consumer, sseq, cseq, delivered, pending, ts_ns)

    @property
    def metadata(self) -> MsgMetadata:
        stream, consumer, sseq, cseq, delivered, pending, ts = self._meta
        return MsgMetadata(
            sequence=SequencePair(consumer=cseq, stream=sseq),
            num_pending=pending,
            num_delivered=delivered,
            timestamp=ns_to_datetime(ts),
            stream=stream,
            consumer=consumer,
        )

    @property
    def reply(self) -> str:
        stream, consumer, sseq, cseq, delivered, pending, ts = self._meta
        return f"$JS.ACK.{stream}.{consumer}.{delivered}.{sseq}.{cseq}.{ts}.{pending}"

    def _ackable(self) -> bool:
        return self._js is not None

    def ack(self) -> None:
        """Acknowledge (fire-and-forget; applied before the handle's next call)."""
        self._ackd = True
        if self._ackable():
            self._js._buffer_ack(self._meta)

    def ack_sync(self, timeout: float = 1.0) -> "Msg":
        """Acknowledge and wait until the ack is applied."""
        V.timeout(timeout)
        self._ackd = True
        if self._ackable():
            self._js._buffer_ack(self._meta)
            self._js._flush_acks()
        return self

    def nak(self, delay: Optional[float] = None) -> None:
        """Ask for redelivery, optionally not before ``delay`` seconds."""
        delay = V.nak_delay(delay)
        self._ackd = True
        if self._ackable():
            self._js._consumer_action("nak", self._meta, delay)

    def in_progress(self) -> None:
        """Restart the ack_wait clock without counting a new delivery."""
        if self._ackable():
            self._js._consumer_action("progress", self._meta, None)

    def term(self) -> None:
        """Never redeliver; releases the message on interest and work-queue streams."""
        self._ackd = True
        if self._ackable():
            self._js._consumer_action("term", self._meta, None)

    def __repr__(self) -> str:
        return f"<Msg subject={self.subject!r} seq={self._meta[2]} data={self.data[:32]!r}>"


class PullSubscription:
    """A pull consumer bound to a stream (nats-py ``JetStreamContext.PullSubscription``)."""

    def __init__(self, js: "JetStream", stream: str, consumer: str) -> None:
        self._js = js
        self.stream = stream
        self.consumer = consumer

    def fetch(self, batch: int = 1, timeout: Optional[float] = 5.0, no_wait: bool = False, max_bytes: Optional[int] = None) -> list[Msg]:
        """Up to ``batch`` messages; waits up to ``timeout`` for the first one.

        Raises FetchTimeoutError (a TimeoutError) when none arrives, as nats-py does.
        """
        batch, timeout, no_wait, max_bytes = V.fetch_args(batch, timeout, no_wait, max_bytes)
        deadline = time.monotonic() + timeout
        pause = 0.001
        while True:
            msgs = self._take(batch, max_bytes or 0)
            if msgs:
                return msgs
            if no_wait or time.monotonic() >= deadline:
                raise FetchTimeoutError(f"no message from consumer {self.consumer!r} of stream {self.stream!r} within {timeout} s")
            time.sleep(min(pause, max(deadline - time.monotonic(), 0)))
            pause = min(pause * 2, 0.05)

    def _take(self, batch: int, max_bytes: int) -> list[Msg]:
        """One pull request (a push subscription's taker overrides it: jetspark/engine/push.py)."""
        return self._js._fetch(self.stream, self.consumer, batch, max_bytes)

    def consumer_info(self):
        return self._js.consumer_info(self.stream, self.consumer)

    def unsubscribe(self) -> None:
        self._js._flush_acks()
