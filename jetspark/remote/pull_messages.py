"""``PullSubscription.messages()`` on a server: pull requests kept outstanding so that a
buffer of messages stays ahead of the caller (nats.go's ``Consumer.Messages``).

Two threads share a ``Messages``: the handle's event loop (jetspark.remote.loop), which
receives the deliveries and status messages on the pull's inbox, and the caller's thread
in ``next``.  One ``threading.Condition`` guards what they share.

Accounting, as nats.go does it: ``pending`` counts the messages (and bytes) asked for and
not yet handed to the caller, buffered or still on their way.  Whenever it falls below the
threshold (checked at each ``next`` and after each status message) one pull request asks
for the rest, ``batch = max_messages - pending`` (or the bytes missing, with
``max_bytes``), with ``expires`` and ``idle_heartbeat``, and ``pending`` is the maximum
again.  A request that ends short (408 Request Timeout, 409 Batch Completed or Message
Size Exceeds MaxBytes) says how much it will not deliver (``Nats-Pending-Messages`` and
``-Bytes``), which leaves ``pending``, so the next check asks again.  A leadership change
or a reconnect (the server forgot our requests) sets ``pending`` to 0.

A caller waiting in ``next`` while nothing at all comes from the server (no message, no
heartbeat, no status) for two heartbeats gets ``NoHeartbeatError``; ``pending`` is then
0, so its next call pulls afresh.  Statuses that end the pull (409 Consumer Deleted; 400
Bad Request and a request past the consumer's max_request_* limits) are queued after the
messages that came before them and raised by ``next``, which ends the iteration; other
409s (Server Shutdown, Exceeded MaxWaiting) end one request only and are logged, as
nats.go does.  No responders (503) ends the pull only when the consumer's info says it is
gone: a replicated consumer has none for a moment after its creation or in an election.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import math
import threading
import time
import weakref
from typing import Any, Optional

from jetspark import validate as V
from jetspark.backend import live
from jetspark.err_codes import CONSUMER_NOT_FOUND
from jetspark.errors import (
    ClosedError,
    ConsumerNotFoundError,
    FetchTimeoutError,
    JetSparkError,
    NoHeartbeatError,
    ServerConnectionError,
    StreamNotFoundError,
    api_error,
    error_from_response,
)
from jetspark.protocol import headers as H
from jetspark.remote import jsapi, wire
from jetspark.remote.fastpath import status_of, subscribe_raw

__all__ = ["Messages"]

log = logging.getLogger("jetspark.remote")

_OPEN, _DRAINING, _CLOSED = range(3)
# 409 statuses that end the pull (lowercased): the others only end one request.
_FINAL_409 = (b"consumer deleted", b"exceeded maxrequest", b"consumer is push based")
# A waiting next() looks at the connection and the heartbeat clock at least this often.
_SLICE = 1.0
# Before pulling again after a request found no responder (the consumer has no leader yet).
_NO_LEADER_PAUSE = 0.05


class _Failure:
    """An error queued in delivery order; ``final`` ends the pull."""

    __slots__ = ("error", "final")

    def __init__(self, error: BaseException, final: bool = True) -> None:
        self.error = error
        self.final = final


class Messages(live.MessagesBase):
    """A continuous pull on a server (see the module docstring and ``jetspark.backend.MessagesAPI``)."""

    def __init__(self, sub, opts: live.PullOptions, msg_class: type) -> None:
        self._Msg = msg_class  # jetspark.remote.pull.Msg (that module imports this one)
        self._session = session = sub._session
        self.stream = sub.stream
        self.consumer = sub.consumer
        self._opts = opts
        self._next_subject = session.consumer_subject("MSG.NEXT", sub.stream, sub.consumer)
        self._cond = threading.Condition()
        self._items: collections.deque = collections.deque()  # (Msg, size) or _Failure
        self._pending = 0
        self._pending_bytes = 0
        self._state = _OPEN
        self._ended = False  # a final status came: no more pull requests
        self._activity = time.monotonic()
        self._inbox = ""
        self._sub: Any = None
        session.run(self._open(), what=f"subscribing to consumer {sub.consumer!r} of stream {sub.stream!r}")
        session.live.add(self)

    async def _open(self) -> None:
        nc = await self._session.ready()
        inbox = nc.new_inbox()
        ref = weakref.ref(self)

        def deliver(subject, reply, data, headers) -> None:
            it = ref()
            if it is not None:
                it._on_msg(subject, reply, data, headers)

        self._sub = await subscribe_raw(nc, inbox, deliver, public=self._session.public_path)
        self._inbox = inbox

    # ------------------------------------------------------------------ the loop's side

    def _on_msg(self, subject: bytes, reply: bytes, data: bytes, hdr: Optional[bytes]) -> None:
        self._activity = time.monotonic()
        status = status_of(hdr)
        if status is None:
            msg = self._Msg(self._session, subject.decode(), data, H.decode(hdr) if hdr else None, reply.decode())
            size = len(subject) + len(reply) + len(data) + (len(hdr) if hdr else 0)
            with self._cond:
                if self._state != _CLOSED:
                    self._items.append((msg, size))
                    self._cond.notify()
            return
        code, desc = status
        assert hdr is not None  # (a status is a header block's first line)
        if code == b"100":
            return  # an idle heartbeat: noted above
        low = desc.lower()
        with self._cond:
            if code == b"408" or (
                code == b"409" and (low.startswith(b"batch completed") or b"exceeds maxbytes" in low)
            ):
                # A request ended short: what it will not deliver leaves pending.
                self._pending = max(0, self._pending - _int(H.lookup(hdr, "Nats-Pending-Messages")))
                self._pending_bytes = max(0, self._pending_bytes - _int(H.lookup(hdr, "Nats-Pending-Bytes")))
                self._check_pending()
                self._cond.notify()
                return
            if code == b"409" and b"leadership change" in low:
                self._pending = self._pending_bytes = 0
                self._check_pending()
                self._cond.notify()
                return
            if code == b"404":
                return  # no messages: the answer to a no-wait request, not one of ours
            if code == b"409" and not low.startswith(_FINAL_409):
                # The server dropped a request for now (Server Shutdown, Exceeded MaxWaiting, ...):
                # as nats.go, carry on; a reconnect or the heartbeat clock asks again.
                log.info(
                    "messages() of consumer %r of stream %r: the server ended a pull request: %s",
                    self.consumer,
                    self.stream,
                    desc.decode(errors="replace"),
                )
                return
            if code == b"503":
                # No responders: no such consumer (or stream), or one with no leader to answer
                # yet (a replicated consumer just after its creation, or through an election).
                # Pending stays as it is (no request goes out meanwhile) until its info says.
                try:
                    self._session.loop.spawn(self._no_responders())
                except RuntimeError:  # the loop is stopped: the session is closed, next() says so
                    pass
                return
            if code == b"409" and low.startswith(b"consumer deleted"):
                err = api_error(CONSUMER_NOT_FOUND)
            else:  # 400 Bad Request, a request the consumer's limits refuse: asking again cannot help
                err = error_from_response(
                    {"code": int(code), "err_code": 0, "description": desc.decode(errors="replace")}
                )
            log.debug(
                "messages() of consumer %r of stream %r: the server ended the pull: %s %s",
                self.consumer,
                self.stream,
                code,
                desc,
            )
            self._end(err)

    def _end(self, err: BaseException) -> None:
        """A final status: no more pull requests; ``next`` raises ``err`` after what came before
        (caller holds the lock)."""
        self._ended = True
        self._items.append(_Failure(err))
        self._cond.notify()

    async def _no_responders(self) -> None:
        """A pull request found no responder: the consumer's info tells a consumer that is
        gone (its 10014 / 10059 ends the pull) from one with no leader yet, asked again
        after a pause (as pull.PullSubscription.fetch does)."""
        try:
            await jsapi.consumer_info(self._session, self.stream, self.consumer)
        except (ConsumerNotFoundError, StreamNotFoundError) as exc:
            with self._cond:
                if not self._ended:
                    self._end(exc)
            return
        except JetSparkError as exc:  # no answer either: the heartbeat clock or the next check asks again
            log.debug(
                "messages() of consumer %r of stream %r: no responder, and no consumer info: %s",
                self.consumer,
                self.stream,
                exc,
            )
        await asyncio.sleep(_NO_LEADER_PAUSE)
        with self._cond:
            self._pending = self._pending_bytes = 0
            self._check_pending()
            self._cond.notify()

    def _check_pending(self) -> None:
        """Ask for more when what is pending fell below the threshold (caller holds the lock)."""
        opts = self._opts
        if self._state != _OPEN or self._ended or not opts.below_threshold(self._pending, self._pending_bytes):
            return
        batch, max_bytes = opts.refill(self._pending, self._pending_bytes)
        if batch <= 0 or (opts.max_bytes and max_bytes <= 0):
            return
        request: dict[str, Any] = {"batch": batch, "expires": wire.s_to_ns(opts.expires)}
        if max_bytes:
            request["max_bytes"] = max_bytes
        if opts.heartbeat:
            request["idle_heartbeat"] = wire.s_to_ns(opts.heartbeat)
        self._pending, self._pending_bytes = opts.max_messages, opts.max_bytes
        self._activity = time.monotonic()  # the heartbeat clock starts with the request
        try:
            self._session.loop.spawn(self._send(json.dumps(request).encode()))
        except RuntimeError:  # the loop is stopped: the session is closed, next() says so
            self._pending = self._pending_bytes = 0

    async def _send(self, payload: bytes) -> None:
        try:
            await self._session._nc.publish(self._next_subject, payload, reply=self._inbox)
        except Exception as exc:
            # Not sent (the connection went away): ask again at the next check.
            log.debug("messages() of consumer %r: pull request not sent: %s", self.consumer, exc)
            with self._cond:
                self._pending = self._pending_bytes = 0

    def _reconnected(self) -> None:
        """The connection came back: the server forgot our pull requests (nats.go does the same)."""
        with self._cond:
            self._pending = self._pending_bytes = 0
            self._check_pending()
            self._cond.notify()

    def _session_closed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # ------------------------------------------------------------------ the caller's side

    def next(self, timeout: Optional[float] = None) -> Any:
        deadline = math.inf if timeout is None else time.monotonic() + V.timeout(timeout)
        started = time.monotonic()
        hb = self._opts.heartbeat
        with self._cond:
            while True:
                if self._state == _CLOSED:
                    raise StopIteration
                self._check_pending()
                if self._items:
                    item = self._items.popleft()
                    if isinstance(item, _Failure):
                        if item.final:
                            self._close()
                        raise item.error
                    msg, size = item
                    self._pending -= 1
                    if self._opts.max_bytes:
                        self._pending_bytes -= size
                    return msg
                if self._state == _DRAINING:
                    self._close()
                    raise StopIteration
                gone = self._gone()
                if gone is not None:
                    self._close()
                    raise gone
                now = time.monotonic()
                if hb and not self._ended and now - max(self._activity, started) > 2 * hb:
                    # Nothing from the server for two heartbeats: pull afresh at the next call.
                    self._pending = self._pending_bytes = 0
                    self._activity = now
                    raise NoHeartbeatError(
                        f"no heartbeat from {self._session.url} for {2 * hb:g} s while "
                        f"pulling from consumer {self.consumer!r} of stream {self.stream!r}"
                    )
                left = deadline - now
                if left <= 0:
                    raise FetchTimeoutError(
                        f"no message from consumer {self.consumer!r} of stream {self.stream!r} within {timeout} s"
                    )
                self._cond.wait(min(left, _SLICE, hb / 2 if hb else _SLICE))

    def _gone(self) -> Optional[Exception]:
        session = self._session
        if session.closed:
            return ClosedError(f"the JetStream handle on {session.url} is closed")
        nc = getattr(session, "_nc", None)
        if nc is not None and nc.is_closed:
            return ServerConnectionError(f"the connection to {session.url} is closed")
        return None

    def _close(self) -> None:
        """(lock held)"""
        if self._state != _CLOSED:
            self._state = _CLOSED
            self._unsubscribe()
        self._items.clear()
        self._cond.notify_all()

    def _unsubscribe(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None and self._session.loop.alive:
            try:
                self._session.loop.spawn(sub.unsubscribe())
            except RuntimeError:
                pass  # the loop stopped meanwhile: the subscription went with the connection

    def stop(self) -> None:
        with self._cond:
            self._close()

    def drain(self) -> None:
        with self._cond:
            if self._state == _OPEN:
                self._state = _DRAINING
                self._unsubscribe()  # what already came is handed out; nothing more is asked
                self._cond.notify_all()

    def __del__(self) -> None:
        try:
            if self._state != _CLOSED:
                self._unsubscribe()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"<Messages {self.stream} > {self.consumer}: {len(self._items)} buffered, {self._pending} pending>"


def _int(value: Optional[str]) -> int:
    try:
        return int(value) if value else 0
    except ValueError:
        return 0
