"""``Session``: one nats:// connection and everything that is plumbing about it.

A ``Session`` owns the private event-loop thread (``jetspark.remote.loop``),
the nats-py connection, its reconnects and callbacks, the JetStream JSON API
requests (with their timeouts and the permissions-violation watch), the
batching of fire-and-forget acks, and the re-connection of a forked child.

It is also the one place where nats-py's exceptions become jetspark errors:
``Session.run`` (every synchronous call goes through it) translates what a
coroutine raised (``translate``), and ``Session.request`` turns a request's
"no responders" and timeout into what they mean for the caller.  The cause
is kept (``raise ... from exc``) so ``--debug`` shows nats-py's own error.

The handle (``jetspark.remote.client``), the pull subscriptions
(``pull``) and the bulk paths (``reads``, ``appends``, ``ack_floor``)
use a session; the session imports none of them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import threading
import time
import weakref
from typing import Any, Callable, Optional

import nats.errors as nerr
from nats.aio.client import Client as NATS

from jetspark.connect_options import ConnectOptions
from jetspark.err_codes import (
    BAD_REQUEST,
    CONSUMER_NOT_FOUND,
    NOT_ENABLED,
    STREAM_MESSAGE_EXCEEDS_MAXIMUM,
    STREAM_NOT_FOUND,
)
from jetspark.errors import (
    AuthenticationError,
    BadRequestError,
    ClosedError,
    JetSparkError,
    PermissionDeniedError,
    RequestTimeoutError,
    ServerConnectionError,
    ServiceUnavailableError,
    api_error,
    error_from_response,
)
from jetspark.remote import wire
from jetspark.remote.fastpath import Client, subscribe_raw
from jetspark.remote.loop import Loop, LoopTimeout
from jetspark.remote.retry import ConnectionGoneError, NotSentError, retrying

__all__ = ["Session"]

log = logging.getLogger("jetspark.remote")

# Acks sent by Msg.ack() that the server has not confirmed within this long are given
# up on (the server ignores, without a reply, an ack for a sequence its consumer has
# not delivered yet, e.g. one from an earlier consumer of the same name).
ACK_SETTLE = 1.0
_PAGE_GUARD = 10_000
# The timeout of calls whose length grows with the data: they are bounded by progress
# instead (every wait inside them, for a pull, a PubAck, a write, gives up after the
# session's timeout).
PROGRESS = math.inf
# The server answers a publish or subscription the user's permissions deny with
# -ERR 'Permissions Violation for Publish to "<subject>"' and no reply; nats-py
# hands that, lowercased, to error_cb only, so the request would wait out its
# timeout.  Requests watch for it (Session.request).
_VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "([^"]*)"')
# nats-py errors that mean the connection went away under a call.
_CONNECTION_LOST = (
    nerr.ConnectionClosedError,
    nerr.OutboundBufferLimitError,
    nerr.ConnectionReconnectingError,
    nerr.StaleConnectionError,
    nerr.UnexpectedEOF,
)


class Session:
    """A connection to a NATS server, used synchronously through ``run``."""

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options
        self.url = options.display_url
        self.timeout = float(options.timeout)
        self.api_prefix = options.api_prefix  # "$JS.API", or a domain's / prefix's
        self.retry_budget = float(options.retry_budget)
        # Tests set it to run the bulk paths through nats-py's public subscription API
        # instead of the raw fast path (jetspark.remote.fastpath).
        self.public_path = False
        self.closed = False
        self._closing = False  # close() has begun: the disconnect that follows is expected
        self._abandoned: list = []  # (loop, connection) pairs a forked child left to its parent
        # Continuous pulls under way (jetspark.remote.pull_messages.Messages): told of reconnects and close.
        self.live: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._start()

    # ------------------------------------------------------------------ connection

    def _start(self) -> None:
        self._pid = os.getpid()
        self._ack_lock = threading.Lock()
        self._last_error: Optional[BaseException] = None
        self._connect_errors: list[BaseException] = []
        self._ack_queue: list[tuple[str, bytes]] = []
        self._ack_scheduled = False
        self._acks_sent = 0
        self._acks_done = 0
        self._ack_event: Optional[asyncio.Event] = None
        self._ack_inbox: Optional[str] = None
        self._awaiting: dict[asyncio.Future, str] = {}  # a request's denial watch -> its subject
        self._inbox_denied = False  # the server refuses our reply subscriptions: no request can succeed
        self._last_violation: tuple[float, str, str] | None = None  # (when, kind, subject)
        self.loop = Loop()
        # Each server an attempt of its own (nats-py bounds one by connect_timeout): a first
        # server that accepts the connection and then hangs must not use up the others' time.
        attempt = self.options.connect_timeout or self.timeout
        budget = max(self.timeout, attempt * len(self.options.servers))
        try:
            self._nc = self.loop.run(self._connect(budget), budget + 5)
        except LoopTimeout:
            self.loop.stop()
            # LoopTimeout is our own marker with nothing to say: the message says it all.
            raise ServerConnectionError(
                f"cannot connect to {self.url} within {budget:g} s{self._last_error_text()}"
            ) from None
        except BaseException:
            self.loop.stop()
            raise

    async def _connect(self, budget: float) -> NATS:
        o = self.options
        kw = o.nats_kwargs()
        kw.update(
            # Weak: the loop thread must not keep a dropped session alive (its __del__ closes it).
            error_cb=_weak_async(self, "_on_error"),
            disconnected_cb=_weak_async(self, "_on_disconnected"),
            reconnected_cb=_weak_async(self, "_on_reconnected"),
            allow_reconnect=True,
            # The first connect tries each server three times, briefly (a refused login
            # can reach us as a reset connection rather than the server's -ERR); the
            # reconnect policy of the options applies once connected.
            max_reconnect_attempts=2,
            reconnect_time_wait=min(o.reconnect_time_wait, 0.2),
        )
        nc = Client()
        try:
            await asyncio.wait_for(nc.connect(**kw), budget)
        except BaseException as exc:
            try:
                await asyncio.wait_for(nc.close(), 1)
            except BaseException:
                pass
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise self._connect_error(exc, budget) from exc
        nc.options["max_reconnect_attempts"] = o.max_reconnect_attempts
        nc.options["reconnect_time_wait"] = o.reconnect_time_wait
        self._connect_errors = []
        return nc

    def _connect_error(self, exc: BaseException, budget: float) -> JetSparkError:
        last = self._last_error or exc
        auth = [
            e
            for e in self._connect_errors
            if isinstance(e, nerr.AuthorizationError) or "authorization" in str(e).lower()
        ]
        if auth:
            last = auth[-1]
            who = f" as user {self.options.user!r}" if self.options.user else ""
            return AuthenticationError(
                f"authentication failed: the server at {self.url} refused the credentials{who} "
                f"({_describe(last)}); check user/password, token, nkey or credentials file"
            )
        if isinstance(last, ConnectionResetError) and self.options.has_credentials:
            return ServerConnectionError(
                f"cannot connect to {self.url}: {_describe(last)} (if the server requires authentication, "
                "check the credentials)"
            )
        if isinstance(last, ModuleNotFoundError) and "nkeys" in str(last):
            return ServerConnectionError(
                "nkey and credentials-file authentication need the nkeys package: pip install 'nats-py[nkeys]'"
            )
        if isinstance(exc, asyncio.TimeoutError) and self._last_error is None:
            return ServerConnectionError(f"cannot connect to {self.url}: no connection within {budget:g} s")
        return ServerConnectionError(f"cannot connect to {self.url}: {_describe(last)}")

    def _last_error_text(self) -> str:
        return f" ({_describe(self._last_error)})" if self._last_error else ""

    async def _on_error(self, exc: BaseException) -> None:
        violation = _VIOLATION.search(str(exc))
        if violation:
            self._on_violation(violation.group(1), violation.group(2))
            return
        self._last_error = exc
        if len(self._connect_errors) < 100:
            self._connect_errors.append(exc)
        if isinstance(exc, nerr.SlowConsumerError):
            log.warning("nats: slow consumer on %s: messages dropped", getattr(exc, "subject", "?"))
        else:
            log.debug("nats connection to %s: %s", self.url, _describe(exc))

    async def _on_disconnected(self) -> None:
        if self.closed or self._closing:  # an ordinary close says nothing at INFO
            log.debug("disconnected from %s (closed)", self.url)
        else:
            log.info("disconnected from %s", self.url)

    async def _on_reconnected(self) -> None:
        log.info("reconnected to %s", self.url)
        self._inbox_denied = False  # permissions may have changed; a denial comes again if not
        for it in list(self.live):
            it._reconnected()  # the server forgot their pull requests

    def _on_violation(self, kind: str, subject: str) -> None:
        """A permission violation (``subject`` lowercased, as nats-py gives it): fail the requests it dooms."""
        log.debug("nats: permissions violation for %s to %s on %s", kind, subject, self.url)
        self._last_violation = (time.monotonic(), kind, subject)
        if kind == "publish":
            for watch, requested in self._awaiting.items():
                if requested.lower() == subject and not watch.done():
                    watch.set_result(self._permission_error("publish to", requested))
        elif subject.startswith("_inbox."):
            # Replies come to the connection's _INBOX subscription: no request can succeed.
            self._inbox_denied = True
            for watch in self._awaiting:
                if not watch.done():
                    watch.set_result(self._permission_error("subscribe to", "_INBOX.>"))

    def _permission_error(self, action: str, subject: str) -> PermissionDeniedError:
        who = f"user {self.options.user!r}" if self.options.user else "this connection"
        why = ", where the replies to its requests arrive" if action == "subscribe to" else ""
        return PermissionDeniedError(
            f"permission denied: {self.url} does not allow {who} to {action} {subject!r}{why}", subject
        )

    @property
    def connected(self) -> bool:
        nc = getattr(self, "_nc", None)
        return nc is not None and nc.is_connected

    @property
    def gone(self) -> bool:
        """The connection is closed for good: its client gave up reconnecting."""
        nc = getattr(self, "_nc", None)
        return nc is not None and nc.is_closed

    def new_inbox(self) -> str:
        """A new inbox subject of this connection's (its inbox prefix, as nats-py makes them)."""
        return self._nc.new_inbox()

    @property
    def max_payload(self) -> int:
        """The server's max_payload (0 if unknown)."""
        return int(getattr(self._nc, "max_payload", 0) or 0)

    async def ready(self, timeout: Optional[float] = None) -> NATS:
        """The nats-py connection, once it is up: waits up to ``timeout`` (default: the
        session's) for a reconnect in progress."""
        nc = self._nc
        if nc.is_connected:
            return nc
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while not nc.is_connected:
            if nc.is_closed:
                raise ConnectionGoneError(f"the connection to {self.url} is closed{self._last_error_text()}")
            if time.monotonic() >= deadline:
                raise NotSentError(
                    f"lost the connection to {self.url}{self._last_error_text()}; "
                    f"it did not come back within {timeout:g} s"
                )
            await asyncio.sleep(0.01)
        return nc

    # ------------------------------------------------------------------ errors

    def silence(self, what: str, timeout: float) -> JetSparkError:
        """The error for ``what`` not answered within ``timeout``: the connection is gone, or the server is silent."""
        if not self._nc.is_connected:
            return ServerConnectionError(
                f"lost the connection to {self.url} while waiting {timeout:g} s for {what}{self._last_error_text()}"
            )
        hint = ""
        if self._last_violation and time.monotonic() - self._last_violation[0] <= min(timeout, self.timeout) + 1:
            # The bulk paths publish without request()'s watch: say what the server refused
            # meanwhile (the subject lowercased, as nats-py reports it).
            _, kind, subject = self._last_violation
            hint = (
                f" (meanwhile the server reported a permissions violation for {kind} to {subject!r}: "
                "the user's permissions deny it)"
            )
        return RequestTimeoutError(f"{self.url} did not answer {what} within {timeout:g} s{hint}")

    def translate(self, exc: BaseException, what: str, timeout: float) -> Optional[JetSparkError]:
        """The jetspark error for what nats-py (or a wait on it) raised during ``what``; None if it is none of ours."""
        if isinstance(exc, JetSparkError):
            return exc
        if isinstance(exc, (nerr.TimeoutError, asyncio.TimeoutError)):
            return self.silence(what, timeout)
        if isinstance(exc, _CONNECTION_LOST):
            # (closed for good once its client gave up reconnecting: no retry brings it back)
            lost = ConnectionGoneError if self.gone else ServerConnectionError
            return lost(f"lost the connection to {self.url} during {what}: {_describe(exc)}")
        if isinstance(exc, nerr.MaxPayloadError):
            return BadRequestError(
                400,
                STREAM_MESSAGE_EXCEEDS_MAXIMUM,
                f"message size exceeds maximum allowed (the server's max_payload is {self.max_payload} bytes)",
            )
        if isinstance(exc, nerr.BadSubjectError):
            return BadRequestError(400, BAD_REQUEST, f"invalid subject in {what}")
        if isinstance(exc, nerr.Error):
            return JetSparkError(f"nats error during {what}: {_describe(exc)}")
        return None

    # ------------------------------------------------------------------ running calls

    def check(self) -> None:
        """Refuse a closed session; in a forked child, connect afresh (the loop thread and
        the socket belong to the parent)."""
        if self.closed:
            raise ClosedError(f"the JetStream handle on {self.url} is closed")
        if os.getpid() != self._pid:
            self._abandoned.append((self.loop, self._nc))
            self._start()

    def run(self, coro, *, what: str, timeout: Optional[float] = None, settle: bool = True) -> Any:
        """Run ``coro`` on the loop; every failure becomes a jetspark error, within the timeout
        (``math.inf`` for calls that bound themselves by progress).  ``settle``: first wait for
        the confirmations of acks sent so far, so the call sees them applied."""
        try:
            self.check()
        except BaseException:
            coro.close()
            raise
        if settle and self.acks_pending():
            self.settle_acks()
        limit = (timeout if timeout is not None else self.timeout) + 1.0
        try:
            return self.loop.run(coro, None if limit == math.inf else limit)
        except LoopTimeout:
            # Our own marker (the loop gave up waiting): nothing to chain.
            raise self.silence(what, limit) from None
        except JetSparkError:
            raise
        except Exception as exc:
            err = self.translate(exc, what, timeout or self.timeout)
            if err is None:
                raise
            raise err from exc

    def run_retrying(self, make: Callable[[], Any], *, what: str, idempotent: bool = True,
                     timeout: Optional[float] = None,
                     also: Optional[Callable[[JetSparkError], bool]] = None) -> Any:  # fmt: skip
        """``run(make())``, repeated while the server cannot answer for a while (a leader
        election, a cold cluster), within ``retry_budget`` (jetspark.remote.retry): every
        call made with ``idempotent=False`` raises on no answer, saying it may have been applied."""
        return retrying(
            lambda: self.run(make(), what=what, timeout=timeout),
            budget=self.retry_budget,
            what=what,
            idempotent=idempotent,
            also=also,
        )

    async def request(self, subject: str, data: bytes, *, what: str, timeout: Optional[float] = None,
                      headers: Optional[dict] = None,
                      no_responders: Optional[Callable[[], JetSparkError]] = None):  # fmt: skip
        """``nc.request``'s reply message.  A subject the user's permissions deny is a
        ``PermissionDeniedError`` as soon as the server says so, not a timeout; no answer
        is ``silence``; no responders is ``no_responders()`` (default: JetStream is not
        enabled, or the API prefix is wrong)."""
        timeout = timeout or self.timeout
        nc = await self.ready(timeout)
        if self._inbox_denied:
            raise self._permission_error("subscribe to", "_INBOX.>")
        watch = asyncio.get_running_loop().create_future()
        self._awaiting[watch] = subject
        reply = asyncio.ensure_future(nc.request(subject, data, timeout=timeout, headers=headers))
        try:
            await asyncio.wait((reply, watch), return_when=asyncio.FIRST_COMPLETED)
        finally:
            del self._awaiting[watch]
            reply.cancel()  # nothing if it is done
        if watch.done():
            raise watch.result()
        try:
            return reply.result()
        except nerr.NoRespondersError as exc:
            if no_responders is not None:
                raise no_responders() from exc
            raise ServiceUnavailableError(
                503,
                NOT_ENABLED,
                f"jetstream not enabled: nothing at {self.url} answers "
                f"{'.'.join(subject.split('.')[:3])} requests (is JetStream on, and the domain right?)",
            ) from exc
        except nerr.TimeoutError as exc:
            raise self.silence(what, timeout) from exc

    async def api(self, subject: str, payload: Any = None, *, what: str, timeout: Optional[float] = None) -> dict:
        """A JetStream JSON API request: the response, or the server's error as a jetspark error."""
        data = b"" if payload is None else json.dumps(payload).encode()
        msg = await self.request(subject, data, what=what, timeout=timeout)
        resp = json.loads(msg.data)
        if "error" in resp:
            raise error_from_response(resp["error"])
        return resp

    def call(self, subject: str, payload: Any = None, *, what: str, idempotent: bool = True) -> dict:
        """``api`` from a synchronous caller, retried as ``run_retrying`` says."""
        return self.run_retrying(lambda: self.api(subject, payload, what=what), what=what, idempotent=idempotent)

    async def paged(self, subject: str, key: str, payload: Optional[dict], *, what: str) -> list:
        """Every item of a paged API list (``key`` of each page)."""
        out: list = []
        offset = 0
        for _ in range(_PAGE_GUARD):
            req = dict(payload or {})
            req["offset"] = offset
            resp = await self.api(subject, req, what=what)
            page = resp.get(key) or []
            out.extend(page)
            offset += len(page)
            if not page or offset >= int(resp.get("total", 0)):
                break
        return out

    def stream_subject(self, verb: str, name: Any) -> str:
        """``$JS.API.STREAM.<verb>.<name>``; a name no subject can carry is 'stream not found'."""
        if not wire.token_ok(name):
            raise api_error(STREAM_NOT_FOUND)
        return f"{self.api_prefix}.STREAM.{verb}.{name}"

    def consumer_subject(self, verb: str, stream: Any, consumer: Any) -> str:
        if not wire.token_ok(stream):
            raise api_error(STREAM_NOT_FOUND)
        if not wire.token_ok(consumer):
            raise api_error(CONSUMER_NOT_FOUND)
        return f"{self.api_prefix}.CONSUMER.{verb}.{stream}.{consumer}"

    # ------------------------------------------------------------------ acks

    def acks_pending(self) -> bool:
        return bool(self._ack_queue) or self._acks_sent != self._acks_done

    def ack_nowait(self, reply: str, payload: bytes) -> None:
        """Send an ack without waiting; ``run`` waits for its confirmation before the next call."""
        self.check()
        with self._ack_lock:
            self._ack_queue.append((reply, payload))
            if self._ack_scheduled:
                return
            self._ack_scheduled = True
        self.loop.call_soon(self._kick_acks)

    def _kick_acks(self) -> None:
        asyncio.ensure_future(self._send_acks())

    async def _send_acks(self) -> None:
        with self._ack_lock:
            items, self._ack_queue = self._ack_queue, []
            self._ack_scheduled = False
        if not items:
            return
        nc = self._nc
        self._acks_sent += len(items)
        sent = 0
        try:
            if self._ack_inbox is None:
                self._ack_event = asyncio.Event()
                inbox = nc.new_inbox()
                await subscribe_raw(nc, inbox, _weak_sync(self, "_on_ack_reply"), public=self.public_path)
                self._ack_inbox = inbox
            for reply, payload in items:
                await nc.publish(reply, payload, reply=self._ack_inbox)
                sent += 1
        except Exception as exc:  # the connection went away: those acks are lost, as nats-py's would be
            log.debug("acks not sent to %s: %s", self.url, _describe(exc))
            self._acks_done += len(items) - sent
            if self._ack_event is not None and self._acks_done >= self._acks_sent:
                self._ack_event.set()

    def _on_ack_reply(self, *raw) -> None:
        self._acks_done += 1
        if self._acks_done >= self._acks_sent and self._ack_event is not None:
            self._ack_event.set()

    async def _settle(self, timeout: float) -> None:
        await self._send_acks()
        deadline = time.monotonic() + timeout
        while self._acks_done < self._acks_sent:
            left = deadline - time.monotonic()
            if left <= 0 or self._ack_event is None:
                log.debug("%d acks to %s unconfirmed after %g s", self._acks_sent - self._acks_done, self.url, timeout)
                self._acks_done = self._acks_sent
                break
            self._ack_event.clear()
            if self._acks_done >= self._acks_sent:
                break
            try:
                await asyncio.wait_for(self._ack_event.wait(), left)
            except asyncio.TimeoutError:
                pass

    def settle_acks(self, timeout: Optional[float] = None) -> None:
        """Wait (at most ``timeout``, default 1 s) until every ack sent so far is confirmed."""
        t = min(ACK_SETTLE, self.timeout) if timeout is None else timeout
        self.run(self._settle(t), what="settling acks", timeout=t + 1, settle=False)

    def ack_wait(self, reply: str, payload: bytes, timeout: float = ACK_SETTLE) -> None:
        """Send an ack (or nak, term, in-progress) and wait for the server's confirmation."""
        self.run(self.ack(reply, payload, timeout), what="an ack", timeout=timeout + 1)

    async def ack(self, reply: str, payload: bytes, timeout: float) -> None:
        """An ack as a request, waiting up to ``timeout`` for the server to confirm it.  No
        confirmation is not an error: nothing takes acks (ack policy none, the consumer is
        gone), or the server ignores acks for sequences its consumer has not delivered."""
        await self.ready()
        try:
            await self.request(reply, payload, what="an ack", timeout=timeout, no_responders=_NoAnswer)
        except (_NoAnswer, RequestTimeoutError):
            pass  # (silence() while the connection is down is a ServerConnectionError: that one is raised)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self.closed:
            return
        self._closing = True
        try:
            if os.getpid() == self._pid and self.loop.alive:
                try:
                    if self.acks_pending():
                        self.settle_acks()
                except JetSparkError:
                    pass
                try:
                    self.loop.run(self._nc.close(), min(self.timeout, 5.0))
                except BaseException:
                    pass
        finally:
            self.closed = True
            for it in list(self.live):
                it._session_closed()
            if os.getpid() == self._pid:
                self.loop.stop()

    def __del__(self) -> None:
        # Dropped without close(): close the connection on the loop, then stop it.
        try:
            if not self.closed and os.getpid() == self._pid and self.loop.alive:
                nc, loop = self._nc, self.loop

                async def shut() -> None:
                    try:
                        await asyncio.wait_for(nc.close(), 2)
                    finally:
                        loop.loop.stop()

                loop.spawn(shut())
        except Exception:
            pass


class _NoAnswer(JetSparkError):
    """Nothing answered an ack request (Session.ack ignores it)."""


def _weak_async(obj: object, method: str):
    ref = weakref.ref(obj)

    async def callback(*args) -> None:
        target = ref()
        if target is not None:
            await getattr(target, method)(*args)

    return callback


def _weak_sync(obj: object, method: str):
    ref = weakref.ref(obj)

    def callback(*args) -> None:
        target = ref()
        if target is not None:
            getattr(target, method)(*args)

    return callback


def _describe(exc: Optional[BaseException]) -> str:
    if exc is None:
        return "unknown error"
    text = str(exc).strip()
    if isinstance(exc, nerr.AuthorizationError):
        text = "Authorization Violation"
    elif isinstance(exc, ConnectionRefusedError) or "Connect call failed" in text:
        text = f"connection refused ({text})" if text else "connection refused"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
