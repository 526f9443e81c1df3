"""Pull subscriptions and delivered messages over a real server, shaped like the engine's.

``Msg.ack()`` is fire-and-forget as in nats-py and in the engine: the ack
is sent at once (as a request, so the server confirms it once applied) and
the handle waits for outstanding confirmations before its next call, so
``consumer_info`` right after a loop of ``ack()`` already shows them.
``ack_sync``, ``nak``, ``in_progress`` and ``term`` wait for the server.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Optional

from jetspark import validate as V
from jetspark.api import ConsumerInfo, MsgMetadata, SequencePair, ns_to_datetime
from jetspark.backend import live
from jetspark.err_codes import CONSUMER_NOT_FOUND
from jetspark.errors import PUSH_BASED, FetchTimeoutError, NoHeartbeatError, api_error, push_based_error
from jetspark.protocol import ack_reply
from jetspark.protocol import headers as H
from jetspark.remote import jsapi, wire
from jetspark.remote.fastpath import RawInbox, status_of
from jetspark.remote.pull_messages import Messages
from jetspark.remote.session import Session

__all__ = ["Msg", "MsgMetadata", "PullSubscription", "SequencePair"]

# A no_wait fetch still carries a short expiry, so a request the server holds (the
# consumer is at max_ack_pending) cannot deliver into an inbox that is gone.
_NO_WAIT_EXPIRES = 0.05
# How long past a fetch's expiry we wait for the server's status that ends it.
_FETCH_GRACE = 1.0
_END_STATUSES = (b"404", b"408", b"409")
# Before a pull request that found no responder goes again (the consumer has no leader yet).
_NO_LEADER_PAUSE = 0.05


class Msg:
    """A message delivered by a consumer; acknowledge it with ack/nak/in_progress/term."""

    __slots__ = (
        "subject",
        "data",
        "headers",
        "reply",
        "_session",
        "_meta",
        "_ackd",
    )  # _ackd: set by ack, nak, term (a push callback's auto-ack skips it)

    def __init__(
        self, session: Optional[Session], subject: str, data: bytes, headers, reply: str, meta: Optional[tuple] = None
    ) -> None:
        self.subject = subject
        self.data = data
        self.headers = headers
        self.reply = reply
        self._session = session
        self._meta = meta  # ack_reply.AckReply's fields, parsed lazily from the reply

    def _tokens(self) -> tuple:
        if self._meta is None:
            self._meta = ack_reply.parse(self.reply)
        return self._meta

    @property
    def metadata(self) -> MsgMetadata:
        stream, consumer, delivered, sseq, cseq, ts, pending, domain = self._tokens()
        return MsgMetadata(
            sequence=SequencePair(consumer=cseq, stream=sseq),
            num_pending=pending,
            num_delivered=delivered,
            timestamp=ns_to_datetime(ts),
            stream=stream,
            consumer=consumer,
            domain=domain,
        )

    def _acker(self) -> Optional[Session]:
        """The session this message's acks go through; None when it has none or no reply."""
        return self._session if self.reply else None

    def ack(self) -> None:
        """Acknowledge (fire-and-forget; confirmed before the handle's next call)."""
        self._ackd = True
        session = self._acker()
        if session is not None:
            session.ack_nowait(self.reply, b"+ACK")

    def ack_sync(self, timeout: float = 1.0) -> "Msg":
        """Acknowledge and wait until the server has applied it."""
        timeout = V.timeout(timeout)
        self._ackd = True
        session = self._acker()
        if session is not None:
            session.ack_nowait(self.reply, b"+ACK")
            session.settle_acks(timeout)
        return self

    def nak(self, delay: Optional[float] = None) -> None:
        """Ask for redelivery, optionally not before ``delay`` seconds."""
        delay = V.nak_delay(delay)
        self._ackd = True
        session = self._acker()
        if session is not None:
            payload = b"-NAK"
            if delay:
                payload += b" " + json.dumps({"delay": wire.s_to_ns(delay)}).encode()
            session.ack_wait(self.reply, payload)

    def in_progress(self) -> None:
        """Restart the ack_wait clock without counting a new delivery."""
        session = self._acker()
        if session is not None:
            session.ack_wait(self.reply, b"+WPI")

    def term(self) -> None:
        """Never redeliver; releases the message on interest and work-queue streams."""
        self._ackd = True
        session = self._acker()
        if session is not None:
            session.ack_wait(self.reply, b"+TERM")

    def __repr__(self) -> str:
        try:
            seq = self._tokens()[3]
        except ValueError:
            seq = None
        return f"<Msg subject={self.subject!r} seq={seq} data={self.data[:32]!r}>"


class PullSubscription(live.LivePulls):
    """A pull consumer bound to a stream (nats-py ``JetStreamContext.PullSubscription``, synchronous)."""

    def __init__(self, session: Session, stream: str, consumer: str) -> None:
        self._session = session
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
        """Up to ``batch`` messages: what is available now, else wait up to ``timeout`` for
        the first one.  Raises FetchTimeoutError (a TimeoutError) when none arrives, and
        NoHeartbeatError when ``heartbeat`` was asked for and two went missing."""
        batch, timeout, no_wait, max_bytes = V.fetch_args(batch, timeout, no_wait, max_bytes)
        heartbeat = live.fetch_heartbeat(heartbeat, timeout)
        expires = _NO_WAIT_EXPIRES if no_wait or timeout <= 0 else timeout
        msgs = self._session.run(
            self._fetch(batch, expires, max_bytes, 0.0 if no_wait else heartbeat),
            what=f"fetch from consumer {self.consumer!r} of stream {self.stream!r}",
            timeout=expires + _FETCH_GRACE + self._session.timeout,
        )
        if not msgs:
            raise FetchTimeoutError(
                f"no message from consumer {self.consumer!r} of stream {self.stream!r} within {timeout} s"
            )
        return msgs

    async def _fetch(self, batch: int, expires: float, max_bytes: Optional[int], heartbeat: float = 0.0) -> list[Msg]:
        # One "one-shot" pull request (no_wait plus expires): the server answers with
        # what is available now, or waits up to expires for the first message.  It
        # always carries an expiry, so the server drops it before this inbox goes.
        session = self._session
        nc = await session.ready()
        request: dict = {"batch": batch, "no_wait": True, "expires": wire.s_to_ns(expires)}
        if max_bytes:
            request["max_bytes"] = int(max_bytes)
        if heartbeat:
            request["idle_heartbeat"] = wire.s_to_ns(heartbeat)
        inbox_subject = nc.new_inbox()
        inbox = await RawInbox(public=session.public_path).open(nc, inbox_subject)
        msgs: list[Msg] = []
        try:
            next_subject = f"{session.api_prefix}.CONSUMER.MSG.NEXT.{self.stream}.{self.consumer}"
            await nc.publish(next_subject, json.dumps(request).encode(), reply=inbox_subject)
            deadline = time.monotonic() + expires + _FETCH_GRACE
            heard = time.monotonic()  # the last time the server said anything
            pending: list = []
            pos = 0
            while len(msgs) < batch:
                if pos >= len(pending):
                    now = time.monotonic()
                    left = deadline - now
                    if left <= 0:
                        break
                    if heartbeat:
                        silent = heard + 2 * heartbeat - now
                        if silent <= 0:
                            if msgs:
                                break
                            raise NoHeartbeatError(
                                f"no heartbeat from {session.url} for {2 * heartbeat:g} s while "
                                f"fetching from consumer {self.consumer!r} of stream {self.stream!r}"
                            )
                        left = min(left, silent)
                    try:
                        pending, pos = await inbox.take(left), 0
                    except asyncio.TimeoutError:
                        continue
                    heard = time.monotonic()
                subject, reply, data, hdr = pending[pos]
                pos += 1
                status = status_of(hdr)
                if status is None:
                    msgs.append(Msg(session, subject.decode(), data, H.decode(hdr) if hdr else None, reply.decode()))
                elif status[0] in _END_STATUSES:
                    if status[0] == b"409" and b"deleted" in status[1].lower() and not msgs:
                        raise api_error(CONSUMER_NOT_FOUND)
                    if status[0] == b"409" and status[1] == PUSH_BASED.encode() and not msgs:
                        raise push_based_error()
                    break
                elif status[0] == b"503":
                    # No responders: no such consumer (or stream), or one that has no leader to
                    # answer yet (a replicated consumer just after its creation, or through an
                    # election: tests/contract/test_consumer_delivery.py on the cluster).  Its
                    # info tells them apart (10014 / 10059 when it is gone); a consumer that is
                    # there gets the request again, for what is left of its expiry.
                    if msgs:
                        break
                    await jsapi.consumer_info(session, self.stream, self.consumer)
                    await asyncio.sleep(_NO_LEADER_PAUSE)
                    left = deadline - time.monotonic() - _NO_WAIT_EXPIRES  # it ends before the inbox does
                    if left < _NO_WAIT_EXPIRES:
                        break
                    request["expires"] = wire.s_to_ns(min(expires, left))
                    await nc.publish(next_subject, json.dumps(request).encode(), reply=inbox_subject)
                # 100: idle heartbeat; anything else: ignore
            return msgs
        finally:
            await inbox.close()

    def _messages(self, opts: live.PullOptions) -> Messages:
        return Messages(self, opts, Msg)

    def consumer_info(self) -> ConsumerInfo:
        return self._session.run_retrying(
            lambda: jsapi.consumer_info(self._session, self.stream, self.consumer),
            what=f"consumer_info {self.consumer!r}",
        )

    def _settle_acks(self) -> None:
        # (a fetch has no standing subscription to end: each has its own inbox)
        self._session.settle_acks()
