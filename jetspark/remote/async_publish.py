"""``AsyncPublisher``: the nats:// backend's ``publish_async``: pipelined publishes on the event loop.

A call queues its message and returns its future; one task on the session's
event loop sends the queue in order, each message with its own reply subject
``<inbox>.<n>`` under one wildcard subscription, as nats-py's
``publish_async`` does, and completes each future from its PubAck: the
``PubAck``, the server's error (code, err_code, description), or
``NoStreamResponseError`` when no stream answered.  nats-py's own
``publish_async`` is not used: nats-py 2.16 never completes a future whose
PubAck is an error (its reply handler raises instead), so a refused message
would look like a lost one (tests/contract/test_publish_async.py).

nats-py waits for a PubAck as long as it takes; here each one has the
handle's timeout, then its future fails with ``RequestTimeoutError`` (or
``ServerConnectionError`` when the connection is down), noting that the
message may or may not be stored.  The lines of everything queued are written
at once (``fastpath.raw_writer``; one nats-py ``publish`` per message on the
public path).  Nothing is retried: a retry could store a message after later ones.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import threading
from concurrent.futures import Future
from typing import Any, Optional

from jetspark.api import PubAck
from jetspark.backend.window import PublishWindow, mark_completing, settle, settle_all
from jetspark.err_codes import STREAM_MESSAGE_EXCEEDS_MAXIMUM
from jetspark.errors import (
    BadRequestError,
    ClosedError,
    JetSparkError,
    NoStreamResponseError,
    add_note,
    error_from_response,
)
from jetspark.protocol import headers as H
from jetspark.protocol import pub_lines
from jetspark.protocol import subjects as subj
from jetspark.protocol.frames import Frames
from jetspark.protocol.pubacks import read_pubacks
from jetspark.remote.fastpath import raw_writer, status_of, subscribe_frames, subscribe_raw
from jetspark.remote.session import Session

__all__ = ["AsyncPublisher"]

# Messages written per protocol write at most, and payload bytes (beyond one message).
CHUNK = 1024
CHUNK_BYTES = 1 << 20


class AsyncPublisher:
    def __init__(self, session: Session, limit: int) -> None:
        self.session = session
        self.pid = os.getpid()
        self.window = PublishWindow(limit)
        self._queue: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._scheduled = False  # a sending task is started or on its way
        self._task: Optional[asyncio.Future] = None
        # On the loop only: the reply subscription, the futures awaiting their PubAck by
        # reply token, and the tokens in the order sent with their deadlines.
        self._inbox: Optional[tuple[Any, bytes]] = None  # (nats-py connection, reply prefix)
        self._awaiting: dict[int, tuple[Future, str]] = {}
        self._sent: collections.deque = collections.deque()
        self._sweeper: Optional[asyncio.TimerHandle] = None
        self._token = 0
        self._encoded: dict[str, bytes] = {}  # subjects checked (subj.is_valid) and encoded, for the protocol lines
        self._names: dict[bytes, str] = {}  # stream names of PubAcks, decoded once
        self._template: Optional[bytes] = None  # the PubAck template of the last run (protocol.pubacks)

    # ------------------------------------------------------------------ from the caller's thread

    def submit(self, subject: str, payload: bytes, headers: Optional[dict], fut: Future) -> None:
        item = (subject, payload, headers, fut)
        with self._lock:
            self._queue.append(item)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.session.loop.call_soon(self._start)
        except RuntimeError:  # the loop is stopped: the handle is closing
            with self._lock:
                self._queue.remove(item)
                self._scheduled = False
            raise ClosedError(f"the JetStream handle on {self.session.url} is closed") from None

    def close(self, why: str) -> None:
        """Refuse new messages (``ClosedError(why)``), wait for the pending ones' PubAcks (each
        has the timeout), and fail any still pending with ``ClosedError``."""
        self.window.close(why)
        loop = self.session.loop
        if loop.alive and not loop.in_loop_thread():
            try:
                self.window.wait(self.session.timeout + 1.0)
            except TimeoutError:
                pass
        self.window.fail_pending(
            lambda: ClosedError(f"{why} before the PubAck came: the message may or may not be stored")
        )

    # ------------------------------------------------------------------ on the loop

    def _start(self) -> None:
        mark_completing()
        self._task = asyncio.ensure_future(self._send_queued())

    async def sent(self) -> None:
        """Until every message queued so far is written (a ``publish`` comes after them)."""
        while self._scheduled:
            task = self._task
            if task is None or task.done():
                await asyncio.sleep(0)  # (_start is on its way)
            else:
                await asyncio.shield(task)

    async def _send_queued(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._scheduled = False
                    return
                items: list[tuple[Any, ...]] = []
                size = 0
                while self._queue and len(items) < CHUNK and size < CHUNK_BYTES:
                    items.append(self._queue.popleft())
                    size += len(items[-1][1])
            try:
                await self._send(items)
            except BaseException as exc:  # cancelled with the loop: no message is left unanswered
                settle_all((item[3], _closed(self.session.url)) for item in items)
                with self._lock:
                    left, self._queue = list(self._queue), collections.deque()
                    self._scheduled = False
                settle_all((item[3], _closed(self.session.url)) for item in left)
                if not isinstance(exc, Exception):
                    raise
                return

    async def _send(self, items: list) -> None:
        session = self.session
        try:
            nc = await session.ready()
            prefix = await self._reply_prefix(nc)
        except Exception as exc:
            settle_all((item[3], self._error(exc, "sending publish_async")) for item in items)
            return
        write = raw_writer(nc, public=session.public_path)
        deadline = asyncio.get_running_loop().time() + session.timeout
        max_payload = session.max_payload
        lines: list[bytes] = []
        public: list[tuple] = []
        tokens: list[int] = []
        encoded = self._encoded
        for subject, payload, headers, fut in items:
            subject_bytes = encoded.get(subject)
            if subject_bytes is None:
                if not subj.is_valid(subject):
                    settle(fut, NoStreamResponseError(subject))  # empty tokens: no stream can capture it
                    continue
                if len(encoded) >= 10_000:
                    encoded.clear()
                subject_bytes = encoded[subject] = subject.encode()
            hdr = H.encode(headers) if headers else b""
            if max_payload and len(hdr) + len(payload) > max_payload:
                settle(
                    fut,
                    BadRequestError(
                        400,
                        STREAM_MESSAGE_EXCEEDS_MAXIMUM,
                        f"message size exceeds maximum allowed (the server's max_payload is {max_payload} bytes)",
                    ),
                )
                continue
            self._token += 1
            token = self._token
            self._awaiting[token] = (fut, subject)
            self._sent.append((deadline, token))
            tokens.append(token)
            reply = b"%b%d" % (prefix, token)
            if write is None:
                public.append((subject, payload, reply.decode(), H.decode(hdr) if hdr else None))
            else:
                lines.append(pub_lines.line(subject_bytes, reply, hdr or b"", payload))
        self._arm_sweeper()
        try:
            if lines and write is not None:  # (lines are written only with the raw writer)
                await asyncio.wait_for(write(b"".join(lines)), session.timeout)
            for subject, payload, reply, hdrs in public:
                await nc.publish(subject, payload, reply=reply, headers=hdrs)
        except Exception as exc:
            err = self._error(exc, "sending publish_async")
            add_note(err, "the message may or may not be stored")
            settle_all((entry[0], err) for entry in filter(None, (self._awaiting.pop(t, None) for t in tokens)))

    async def _reply_prefix(self, nc) -> bytes:
        """``<inbox>.`` of the PubAcks' subscription on this connection (made at the first use)."""
        if self._inbox is None or self._inbox[0] is not nc:
            inbox = nc.new_inbox()
            self._inbox = (nc, (inbox + ".").encode())
            if self.session.public_path or await subscribe_frames(nc, inbox + ".*", self._on_replies) is None:
                await subscribe_raw(nc, inbox + ".*", self._on_reply, public=self.session.public_path)
        return self._inbox[1]

    def _on_reply(self, subject: bytes, _reply: bytes, data: bytes, headers: Optional[bytes]) -> None:
        inbox = self._inbox
        if inbox is None:
            return  # (replies come on the subscription _reply_prefix makes after setting it)
        try:
            token = int(subject[len(inbox[1]) :])
        except (TypeError, ValueError):
            return
        entry = self._awaiting.pop(token, None)
        sent = self._sent
        while sent and sent[0][1] not in self._awaiting:
            sent.popleft()  # answered: only the oldest still awaiting sets the next deadline
        if entry is None:
            return  # given up on already
        fut, subject_ = entry
        outcome: object
        if headers and (status_of(headers) or (b"",))[0] == b"503":
            outcome = NoStreamResponseError(subject_)
        else:
            outcome = _puback(data, subject_)
        settle(fut, outcome)

    def _on_replies(self, buf: bytes, f: Frames) -> None:
        """A run of PubAcks as frames: plain ones read for the whole run at once
        (``protocol.pubacks.read_pubacks``, as publish_batch reads its own), the others as
        ``_on_reply`` reads them."""
        inbox = self._inbox
        if inbox is None:
            return  # (as in _on_reply)
        at, tokens, seqs, dups, plain, self._template = read_pubacks(buf, f, len(inbox[1]), 1 << 62, self._template)
        awaiting, names = self._awaiting, self._names
        columns = (f.data_lo[at], f.data_hi[at], f.hdr_lo[at])
        for token, seq, dup, ok, lo, hi, hl in zip(
            tokens.tolist(), seqs.tolist(), dups.tolist(), plain.tolist(), *(c.tolist() for c in columns)
        ):
            entry = awaiting.pop(token, None)
            if entry is None:
                continue  # given up on already
            fut, subject = entry
            outcome: object = None
            if ok and buf.startswith(b'{"stream":"', lo):
                q = buf.find(b'"', lo + 11, hi)
                if buf.startswith(b',"seq":', q + 1):  # (no domain)
                    key = buf[lo + 11 : q]
                    name = names.get(key)
                    if name is None:
                        if len(names) >= 1000:
                            names.clear()
                        name = names[key] = key.decode()
                    outcome = PubAck(stream=name, seq=seq, duplicate=True if dup else None)
            if outcome is None:
                if hl < lo and (status_of(buf[hl:lo]) or (b"",))[0] == b"503":
                    outcome = NoStreamResponseError(subject)
                else:
                    outcome = _puback(buf[lo:hi], subject)
            settle(fut, outcome)
        sent = self._sent
        while sent and sent[0][1] not in awaiting:
            sent.popleft()  # answered: only the oldest still awaiting sets the next deadline

    def _arm_sweeper(self) -> None:
        if self._sweeper is None and self._sent:
            self._sweeper = asyncio.get_running_loop().call_at(self._sent[0][0], self._sweep)

    def _sweep(self) -> None:
        """Fail the futures whose PubAck is overdue (the server is silent, or the connection down)."""
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        sent, awaiting = self._sent, self._awaiting
        while sent and (sent[0][1] not in awaiting or sent[0][0] <= now):
            _, token = sent.popleft()
            entry = awaiting.pop(token, None)
            if entry is not None:
                err = self.session.silence(f"the PubAck of publish_async to {entry[1]!r}", self.session.timeout)
                add_note(err, "the message may or may not be stored")
                settle(entry[0], err)
        self._arm_sweeper()

    def _error(self, exc: BaseException, what: str) -> BaseException:
        err = self.session.translate(exc, what, self.session.timeout)
        return err if err is not None else JetSparkError(f"{what} failed: {type(exc).__name__}: {exc}")


# A PubAck as nats-server writes it, read without the JSON decoder (the common case).
_PUBACK = re.compile(rb'\{"stream":"([^"\\]*)",(?:"domain":"([^"\\]*)",)?"seq":(\d+)(,"duplicate":true)?\}')


def _puback(data: bytes, subject: str) -> object:
    """The ``PubAck`` in a reply, or the error it carries."""
    m = _PUBACK.fullmatch(data)
    if m is not None:
        domain = m.group(2)
        return PubAck(
            stream=m.group(1).decode(),
            seq=int(m.group(3)),
            domain=None if domain is None else domain.decode(),
            duplicate=True if m.group(4) else None,
        )
    try:
        resp = json.loads(data)
        return error_from_response(resp["error"]) if "error" in resp else PubAck.from_response(resp)
    except (ValueError, TypeError, AttributeError, KeyError):
        return JetSparkError(f"unexpected answer to publish_async to {subject!r}: {data[:200]!r}")


def _closed(url: str) -> ClosedError:
    return ClosedError(f"the JetStream handle on {url} closed before the message was sent")
