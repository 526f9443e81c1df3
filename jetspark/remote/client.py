"""``NatsJetStream``: the embedded engine's synchronous API, served by a real NATS JetStream server.

Every verb of ``jetspark.backend.JetStreamAPI`` is here, as on the engine,
returning the same dataclasses and raising the same jetspark
errors, which carry the server's own ``code``, ``err_code`` and
``description``.  nats-py runs on an event loop in a private daemon thread
(``jetspark.remote.loop``); each call blocks its caller for at most the
handle's ``timeout`` (default 5 s, a ``connect`` option), so a dead server
is a clear ``ServerConnectionError`` within it, never a hang.

The JetStream JSON API is spoken directly (``$JS.API.*`` requests), as
nats-py's manager does, so configs and infos map one to one; the bulk paths
(``jetspark.remote.bulk``) bypass nats-py's per-message objects where
throughput matters.
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
from typing import Any, Iterator, Mapping, Optional, Sequence

import nats.errors as nerr
from nats.aio.client import Client as NATS

from jetspark import validate as V
from jetspark.api import (
    ConsumerConfig,
    ConsumerInfo,
    PubAck,
    RawStreamMsg,
    SequenceInfo,
    StreamConfig,
    StreamInfo,
)
from jetspark.protocol import subjects as subj
from jetspark.errors import (
    AuthenticationError,
    BadRequestError,
    ClosedError,
    JetSparkError,
    NoStreamResponseError,
    PermissionDeniedError,
    RequestTimeoutError,
    ServerConnectionError,
    ServiceUnavailableError,
    api_error,
    error_from_response,
)
from jetspark.backend.base import HandleBase
from jetspark.remote import wire
from jetspark.remote.inbox import FAST_PATH, Client
from jetspark.remote.loop import Loop, LoopTimeout
from jetspark.connect_options import ConnectOptions
from jetspark.remote.pull import Msg, PullSubscription

__all__ = ["NatsJetStream"]


log = logging.getLogger("jetspark.remote")

# Acks sent by Msg.ack() that the server has not confirmed within this long are given
# up on (the server ignores, without a reply, an ack for a sequence its consumer has
# not delivered yet, e.g. one from an earlier consumer of the same name).
_ACK_SETTLE = 1.0
_PAGE_GUARD = 10_000
# The server answers a publish or subscription the user's permissions deny with
# -ERR 'Permissions Violation for Publish to "<subject>"' and no reply; nats-py
# hands that, lowercased, to error_cb only, so the request would wait out its
# timeout.  Requests watch for it (_nats_request).
_VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "([^"]*)"')


class NatsJetStream(HandleBase):
    """A synchronous JetStream handle on a NATS server (see ``jetspark.connect``).

    Its verbs and their contracts: ``jetspark.backend.JetStreamAPI``; what both
    backends share is in ``jetspark.backend.base.HandleBase``."""

    _subscription_class = PullSubscription

    def __init__(self, url: str, **options: Any) -> None:
        self.options = options.pop("_options", None) or ConnectOptions.build(url, **options)
        self.url = self.options.display_url
        self.timeout = float(self.options.timeout)
        self._api = self.options.api_prefix
        self._no_fast_path = False  # tests set it to exercise the bulk paths through nats-py's queues
        self._closed = False
        self._abandoned: list = []
        self._start()

    @classmethod
    def from_options(cls, options: ConnectOptions) -> "NatsJetStream":
        return cls(",".join(options.servers), _options=options)

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
        self._loop = Loop()
        budget = max(self.timeout, self.options.connect_timeout or 0.0)
        try:
            self._nc = self._loop.run(self._connect(budget), budget + 5)
        except LoopTimeout:
            self._loop.stop()
            raise ServerConnectionError(f"cannot connect to {self.url} within {budget:g} s{self._last_error_text()}") from None
        except BaseException:
            self._loop.stop()
            raise

    async def _connect(self, budget: float) -> NATS:
        o = self.options
        kw = o.nats_kwargs()
        kw.update(
            # Weak: the loop thread must not keep a dropped handle alive (its __del__ closes it).
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
            raise self._connect_error(exc, budget) from None
        nc.options["max_reconnect_attempts"] = o.max_reconnect_attempts
        nc.options["reconnect_time_wait"] = o.reconnect_time_wait
        self._connect_errors = []
        return nc

    def _connect_error(self, exc: BaseException, budget: float) -> JetSparkError:
        last = self._last_error or exc
        auth = [e for e in self._connect_errors if isinstance(e, nerr.AuthorizationError) or "authorization" in str(e).lower()]
        if auth:
            last = auth[-1]
            who = f" as user {self.options.user!r}" if self.options.user else ""
            return AuthenticationError(
                f"authentication failed: the server at {self.url} refused the credentials{who} "
                f"({_describe(last)}); check user/password, token, nkey or credentials file"
            )
        if isinstance(last, ConnectionResetError) and self.options.has_credentials:
            return ServerConnectionError(f"cannot connect to {self.url}: {_describe(last)} (if the server requires authentication, check the credentials)")
        if isinstance(last, ModuleNotFoundError) and "nkeys" in str(last):
            return ServerConnectionError("nkey and credentials-file authentication need the nkeys package: pip install 'nats-py[nkeys]'")
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
        log.info("disconnected from %s", self.url)

    async def _on_reconnected(self) -> None:
        log.info("reconnected to %s", self.url)
        self._inbox_denied = False  # permissions may have changed; a denial comes again if not

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
        return PermissionDeniedError(f"permission denied: {self.url} does not allow {who} to {action} {subject!r}{why}", subject)

    async def _nats_request(self, nc: NATS, subject: str, data: bytes, timeout: float, headers: dict | None = None):
        """``nc.request``, except that a subject the user's permissions deny is a
        ``PermissionDeniedError`` as soon as the server says so, not a timeout."""
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
        return reply.result()

    async def _ready_nc(self, timeout: float) -> NATS:
        """The connection, once it is up: waits up to ``timeout`` for a reconnect in progress."""
        nc = self._nc
        if nc.is_connected:
            return nc
        deadline = time.monotonic() + timeout
        while not nc.is_connected:
            if nc.is_closed:
                raise ServerConnectionError(f"the connection to {self.url} is closed{self._last_error_text()}")
            if time.monotonic() >= deadline:
                raise ServerConnectionError(
                    f"lost the connection to {self.url}{self._last_error_text()}; it did not come back within {timeout:g} s"
                )
            await asyncio.sleep(0.01)
        return nc

    def _silence(self, what: str, timeout: float) -> JetSparkError:
        nc = self._nc
        if not nc.is_connected:
            return ServerConnectionError(f"lost the connection to {self.url} while waiting {timeout:g} s for {what}{self._last_error_text()}")
        hint = ""
        if self._last_violation and time.monotonic() - self._last_violation[0] <= min(timeout, self.timeout) + 1:
            # The bulk paths publish without _nats_request's watch: say what the server refused
            # meanwhile (the subject lowercased, as nats-py reports it).
            _, kind, subject = self._last_violation
            hint = f" (meanwhile the server reported a permissions violation for {kind} to {subject!r}: the user's permissions deny it)"
        return RequestTimeoutError(f"{self.url} did not answer {what} within {timeout:g} s{hint}")

    def _check(self) -> None:
        if self._closed:
            raise ClosedError(f"the JetStream handle on {self.url} is closed")
        if os.getpid() != self._pid:
            # A forked child: the loop thread and the socket belong to the parent.
            self._abandoned.append((self._loop, self._nc))
            self._start()

    def _run(self, coro, *, what: str, timeout: Optional[float] = None, settle: bool = True) -> Any:
        """Run ``coro`` on the loop; every failure becomes a jetspark error, within the timeout."""
        try:
            self._check()
        except BaseException:
            coro.close()
            raise
        if settle and self._acks_pending():
            self._settle_acks()
        limit = (timeout if timeout is not None else self.timeout) + 1.0
        try:
            return self._loop.run(coro, None if limit == math.inf else limit)
        except LoopTimeout:
            raise self._silence(what, limit) from None
        except JetSparkError:
            raise
        except nerr.TimeoutError:
            raise self._silence(what, timeout or self.timeout) from None
        except (nerr.ConnectionClosedError, nerr.OutboundBufferLimitError, nerr.ConnectionReconnectingError, nerr.StaleConnectionError, nerr.UnexpectedEOF) as exc:
            raise ServerConnectionError(f"lost the connection to {self.url} during {what}: {_describe(exc)}") from None
        except nerr.MaxPayloadError:
            limit_bytes = getattr(self._nc, "max_payload", None)
            raise BadRequestError(400, 10054, f"message size exceeds maximum allowed (the server's max_payload is {limit_bytes} bytes)") from None
        except nerr.BadSubjectError:
            raise BadRequestError(400, 10003, f"invalid subject in {what}") from None
        except nerr.Error as exc:
            raise JetSparkError(f"nats error during {what}: {_describe(exc)}") from None

    # ------------------------------------------------------------------ requests

    async def _areq(self, subject: str, payload: Any = None, *, what: str, timeout: Optional[float] = None, raw: Optional[bytes] = None) -> dict:
        timeout = timeout or self.timeout
        nc = await self._ready_nc(timeout)
        data = raw if raw is not None else (b"" if payload is None else json.dumps(payload).encode())
        try:
            msg = await self._nats_request(nc, subject, data, timeout)
        except nerr.NoRespondersError:
            raise ServiceUnavailableError(
                503, 10076, f"jetstream not enabled: nothing at {self.url} answers {'.'.join(subject.split('.')[:3])} requests (is JetStream on, and the domain right?)"
            ) from None
        except nerr.TimeoutError:
            raise self._silence(what, timeout) from None
        resp = json.loads(msg.data)
        if "error" in resp:
            raise error_from_response(resp["error"])
        return resp

    def _request(self, subject: str, payload: Any = None, *, what: str) -> dict:
        return self._run(self._areq(subject, payload, what=what), what=what)

    async def _apaged(self, subject: str, key: str, payload: Optional[dict], *, what: str) -> list:
        out: list = []
        offset = 0
        for _ in range(_PAGE_GUARD):
            req = dict(payload or {})
            req["offset"] = offset
            resp = await self._areq(subject, req, what=what)
            page = resp.get(key) or []
            out.extend(page)
            offset += len(page)
            if not page or offset >= int(resp.get("total", 0)):
                break
        return out

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self._closed:
            return
        try:
            if os.getpid() == self._pid and self._loop.alive:
                try:
                    if self._acks_pending():
                        self._settle_acks()
                except JetSparkError:
                    pass
                try:
                    self._loop.run(self._nc.close(), min(self.timeout, 5.0))
                except BaseException:
                    pass
        finally:
            self._closed = True
            if os.getpid() == self._pid:
                self._loop.stop()

    def __repr__(self) -> str:
        if self._closed:
            state = "closed"
        else:
            nc = getattr(self, "_nc", None)
            state = "connected" if nc is not None and nc.is_connected else "disconnected"
        who = f" user={self.options.user!r}" if self.options.user else ""
        return f"<NatsJetStream {self.url}{who} timeout={self.timeout:g}s {state}>"

    def __del__(self) -> None:
        # Dropped without close(): close the connection on the loop, then stop it.
        try:
            if not self._closed and os.getpid() == self._pid and self._loop.alive:
                nc, loop = self._nc, self._loop

                async def shut() -> None:
                    try:
                        await asyncio.wait_for(nc.close(), 2)
                    finally:
                        loop.loop.stop()

                loop.spawn(shut())
        except Exception:
            pass

    # ------------------------------------------------------------------ streams

    def _add_stream(self, config: StreamConfig) -> StreamInfo:
        """Create a stream; creating an existing one with the same config is a no-op."""
        self._check_stream_name(config.name)
        resp = self._request(f"{self._api}.STREAM.CREATE.{config.name}", wire.stream_config_to_wire(config), what=f"add_stream {config.name!r}")
        return wire.stream_info_from_wire(resp)

    def _update_stream(self, config: StreamConfig) -> StreamInfo:
        """Replace a stream's config as a whole (omitted fields return to their defaults)."""
        if not wire.token_ok(config.name):
            raise api_error(10059)
        resp = self._request(f"{self._api}.STREAM.UPDATE.{config.name}", wire.stream_config_to_wire(config), what=f"update_stream {config.name!r}")
        return wire.stream_info_from_wire(resp)

    @staticmethod
    def _check_stream_name(name: Any) -> None:
        if not wire.token_ok(name):
            # The server never answers a request whose subject carries such a name;
            # for a name it can read ("a*") its answer is this.
            raise api_error(10052, err="stream name is required and can not contain '.', '*', '>', '\\', '/'")

    def _stream_subject(self, verb: str, name: Any) -> str:
        if not wire.token_ok(name):
            raise api_error(10059)
        return f"{self._api}.STREAM.{verb}.{name}"

    def delete_stream(self, name: str) -> bool:
        return self._request(self._stream_subject("DELETE", name), what=f"delete_stream {name!r}")["success"]

    def stream_info(self, name: str, subjects_filter: Optional[str] = None, deleted_details: bool = False) -> StreamInfo:
        V.filter_subject(subjects_filter, "subjects_filter")
        V.boolean(deleted_details, "deleted_details", api=True)
        subject = self._stream_subject("INFO", name)
        return self._run(self._astream_info(subject, subjects_filter, deleted_details), what=f"stream_info {name!r}")

    async def _astream_info(self, subject: str, subjects_filter: Optional[str] = None, deleted_details: bool = False) -> StreamInfo:
        req: dict = {}
        if subjects_filter:
            req["subjects_filter"] = subjects_filter
        if deleted_details:
            req["deleted_details"] = True
        resp = await self._areq(subject, req or None, what="stream_info")
        subjects = (resp.get("state") or {}).get("subjects")
        total = int(resp.get("total", 0) or 0)
        if subjects_filter and subjects is not None and total > len(subjects):
            # The server pages per-subject counts.
            subjects = dict(subjects)
            for _ in range(_PAGE_GUARD):
                more = await self._areq(subject, dict(req, offset=len(subjects)), what="stream_info")
                page = (more.get("state") or {}).get("subjects") or {}
                if not page:
                    break
                subjects.update(page)
                if len(subjects) >= total:
                    break
            resp["state"]["subjects"] = subjects
        return wire.stream_info_from_wire(resp)

    def streams_info(self) -> list[StreamInfo]:
        items = self._run(self._apaged(f"{self._api}.STREAM.LIST", "streams", None, what="streams_info"), what="streams_info")
        return sorted((wire.stream_info_from_wire(s) for s in items), key=lambda i: i.config.name)

    def stream_names(self) -> list[str]:
        return sorted(self._run(self._apaged(f"{self._api}.STREAM.NAMES", "streams", None, what="stream_names"), what="stream_names"))

    def find_stream_name_by_subject(self, subject: str) -> str:
        if not isinstance(subject, str) or not subj.is_valid(subject):
            raise api_error(10059)
        streams = self._request(f"{self._api}.STREAM.NAMES", {"subject": subject}, what=f"find_stream_name_by_subject {subject!r}").get("streams") or []
        if not streams:
            raise api_error(10059)
        return streams[0]

    def purge_stream(self, name: str, subject: Optional[str] = None, seq: Optional[int] = None, keep: Optional[int] = None) -> bool:
        subject, seq, keep = V.purge_args(subject, seq, keep)
        req: dict = {}
        if subject:
            req["filter"] = subject
        if seq is not None:
            req["seq"] = seq
        if keep is not None:
            req["keep"] = keep
        return self._request(self._stream_subject("PURGE", name), req or None, what=f"purge_stream {name!r}")["success"]

    # ------------------------------------------------------------------ messages

    def publish(self, subject: str, payload: bytes = b"", headers: Optional[Mapping[str, object]] = None, stream: Optional[str] = None) -> PubAck:
        """Store one message; returns the PubAck (``duplicate=True`` for a repeated Nats-Msg-Id)."""
        payload = V.payload(payload)
        hdrs: Optional[dict] = None
        if headers is not None or stream is not None:
            hdrs = V.publish_headers(headers, stream)
        V.publish_subject(subject)
        if not subj.is_valid(subject):
            raise NoStreamResponseError(subject)  # empty tokens: no stream can capture it
        return self._run(self._apublish(subject, payload, hdrs), what=f"publish to {subject!r}")

    async def _apublish(self, subject: str, payload: bytes, headers: Optional[dict]) -> PubAck:
        nc = await self._ready_nc(self.timeout)
        if headers and any(isinstance(v, (list, tuple)) for v in headers.values()):
            # Repeated header keys: nats-py's dict cannot say them; send the block ourselves.
            from jetspark.remote import bulk

            return await bulk.publish_one_raw(self, nc, subject, payload, wire.encode_headers(headers))
        try:
            msg = await self._nats_request(nc, subject, payload, self.timeout, {k: wire.header_str(v) for k, v in headers.items()} if headers else None)
        except nerr.NoRespondersError:
            raise NoStreamResponseError(subject) from None
        except nerr.TimeoutError:
            raise self._silence(f"the PubAck of a publish to {subject!r}", self.timeout) from None
        resp = json.loads(msg.data)
        if "error" in resp:
            raise error_from_response(resp["error"])
        return PubAck.from_response(resp)

    def get_msg(self, stream: str, seq: Optional[int] = None, last_by_subj: Optional[str] = None, next_by_subj: Optional[str] = None) -> RawStreamMsg:
        seq, last_by_subj, next_by_subj = V.get_msg_args(seq, last_by_subj, next_by_subj)
        req: dict = {}
        if seq is not None:
            req["seq"] = seq
        if last_by_subj is not None:
            req["last_by_subj"] = last_by_subj
        if next_by_subj is not None:
            req["next_by_subj"] = next_by_subj
        m = self._request(self._stream_subject("MSG.GET", stream), req, what=f"get_msg from {stream!r}")["message"]
        return wire.raw_msg_from_wire(stream, m)

    def delete_msg(self, stream: str, seq: int) -> bool:
        seq = V.seq(seq, "seq", api=True, optional=False, hi=V.UINT64_MAX)
        return self._request(self._stream_subject("MSG.DELETE", stream), {"seq": seq, "no_erase": True}, what=f"delete_msg {seq} from {stream!r}")["success"]

    # ------------------------------------------------------------------ bulk paths for Spark

    def read_batches(
        self,
        stream: str,
        start_seq: int = 1,
        end_seq: Optional[int] = None,
        subjects: Optional[Sequence[str]] = None,
        batch_size: int = 65536,
        headers: bool = False,
    ) -> Iterator["pa.RecordBatch"]:  # noqa: F821
        """Messages with start_seq <= seq <= end_seq (inclusive, optionally filtered by
        subjects, wildcards allowed) as Arrow batches with the engine's columns
        stream, subject, seq, timestamp, data (and headers when asked).

        Without ``end_seq`` the read stops at the stream's last sequence when the
        call is made.  The server streams the range to an ephemeral, ack-less pull
        consumer (deleted at the end), in large pipelined pull requests."""
        from jetspark.remote import bulk

        start_seq, end_seq, subjects, batch_size, headers = V.read_args(start_seq, end_seq, subjects, batch_size, headers)
        return bulk.read_batches(self, stream, start_seq, end_seq, subjects=subjects, batch_size=batch_size, headers=headers)

    def _publish_batch(self, table, stream: str, msg_id_prefix: Optional[str], msg_id_start: int):
        """Pipelined publishes, awaiting every PubAck.  Unlike the engine it is not all
        or nothing: a refused row raises its error (with a note naming the row) and rows
        the server accepted stay stored.  The ids of ``msg_id_prefix`` go as a msg_id
        column (a server deduplicates them one by one)."""
        import pyarrow as pa

        from jetspark.remote import bulk

        if msg_id_prefix is not None:
            ids = pa.array([f"{msg_id_prefix}{msg_id_start + i}" for i in range(table.num_rows)], pa.string())
            table = table.append_column("msg_id", ids)
        return bulk.publish_batch(self, table, stream)

    def seq_for_bytes(self, stream: str, lo: int, hi: int, max_bytes: int) -> int:
        """The last sequence in lo..hi such that the messages lo..it hold at most ``max_bytes``
        (counted as the server counts a stream's bytes; at least lo, so a read always moves)."""
        from jetspark.remote import bulk

        lo, hi, max_bytes = V.seq_for_bytes_args(lo, hi, max_bytes)
        return bulk.seq_for_bytes(self, stream, lo, hi, max_bytes)

    def seq_for_time(self, stream: str, when) -> int:
        """The first sequence stored at or after ``when`` (a datetime, or ns since the epoch);
        last_seq + 1 if none."""
        from jetspark.remote import bulk

        return bulk.seq_for_time(self, stream, V.when(when))

    # ------------------------------------------------------------------ consumers

    def _put_consumer(self, stream: str, config: ConsumerConfig, action: str) -> ConsumerInfo:
        if not wire.token_ok(stream):
            raise api_error(10059)
        req: dict = {"stream_name": stream, "config": wire.consumer_config_to_wire(config)}
        if action:
            req["action"] = action
        name = config.name or config.durable_name
        if name and not wire.token_ok(name):
            # A name the API subject cannot carry ("a.b", "a b") is invalid anyway; the
            # server judges it from the request body, where it checks name and
            # durable_name by the same rule.
            req["config"].pop("durable_name", None)
            req["config"]["name"] = name
            subject = f"{self._api}.CONSUMER.CREATE.{stream}"
        elif config.name:
            subject = f"{self._api}.CONSUMER.CREATE.{stream}.{config.name}"
        elif config.durable_name:
            subject = f"{self._api}.CONSUMER.DURABLE.CREATE.{stream}.{config.durable_name}"
        else:
            subject = f"{self._api}.CONSUMER.CREATE.{stream}"
        return wire.consumer_info_from_wire(self._request(subject, req, what=f"{action or 'add'}_consumer on {stream!r}"))

    def delete_consumer(self, stream: str, consumer: str) -> bool:
        return self._request(self._consumer_subject("DELETE", stream, consumer), what=f"delete_consumer {consumer!r}")["success"]

    def _consumer_subject(self, verb: str, stream: Any, consumer: Any) -> str:
        if not wire.token_ok(stream):
            raise api_error(10059)
        if not wire.token_ok(consumer):
            raise api_error(10014)
        return f"{self._api}.CONSUMER.{verb}.{stream}.{consumer}"

    def consumer_info(self, stream: str, consumer: str) -> ConsumerInfo:
        return wire.consumer_info_from_wire(self._request(self._consumer_subject("INFO", stream, consumer), what=f"consumer_info {consumer!r}"))

    async def _aconsumer_info(self, stream: str, consumer: str) -> ConsumerInfo:
        return wire.consumer_info_from_wire(await self._areq(self._consumer_subject("INFO", stream, consumer), what=f"consumer_info {consumer!r}"))

    def consumers_info(self, stream: str) -> list[ConsumerInfo]:
        if not wire.token_ok(stream):
            raise api_error(10059)
        subject = f"{self._api}.CONSUMER.LIST.{stream}"
        items = self._run(self._apaged(subject, "consumers", None, what=f"consumers_info of {stream!r}"), what=f"consumers_info of {stream!r}")
        return sorted((wire.consumer_info_from_wire(c) for c in items), key=lambda i: i.name)

    # ------------------------------------------------------------------ acks (Msg)

    def _acks_pending(self) -> bool:
        return bool(self._ack_queue) or self._acks_sent != self._acks_done

    def _ack_nowait(self, reply: str, payload: bytes) -> None:
        self._check()
        with self._ack_lock:
            self._ack_queue.append((reply, payload))
            if self._ack_scheduled:
                return
            self._ack_scheduled = True
        self._loop.call_soon(self._kick_acks)

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
                if FAST_PATH and not self._no_fast_path:
                    sub = await nc.subscribe(inbox)
                    nc._fast[sub._id] = _weak_sync(self, "_on_ack_reply_raw")
                else:
                    await nc.subscribe(inbox, cb=_weak_async(self, "_on_ack_reply"))
                self._ack_inbox = inbox
            for reply, payload in items:
                await nc.publish(reply, payload, reply=self._ack_inbox)
                sent += 1
        except Exception as exc:  # the connection went away: those acks are lost, as nats-py's would be
            log.debug("acks not sent to %s: %s", self.url, _describe(exc))
            self._acks_done += len(items) - sent
            if self._ack_event is not None and self._acks_done >= self._acks_sent:
                self._ack_event.set()

    async def _on_ack_reply(self, msg) -> None:
        self._on_ack_reply_raw()

    def _on_ack_reply_raw(self, *raw) -> None:
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

    def _settle_acks(self, timeout: Optional[float] = None) -> None:
        """Wait (at most ``timeout``, default 1 s) until every ack sent so far is confirmed."""
        t = min(_ACK_SETTLE, self.timeout) if timeout is None else timeout
        self._run(self._settle(t), what="settling acks", timeout=t + 1, settle=False)

    def _ack_wait(self, reply: str, payload: bytes, timeout: float = _ACK_SETTLE) -> None:
        self._run(self._aack_request(reply, payload, timeout), what="an ack", timeout=timeout + 1)

    async def _aack_request(self, reply: str, payload: bytes, timeout: float) -> None:
        nc = await self._ready_nc(self.timeout)
        try:
            await self._nats_request(nc, reply, payload, timeout)
        except nerr.NoRespondersError:
            pass  # nothing takes acks (ack policy none, or the consumer is gone)
        except nerr.TimeoutError:
            pass  # the server ignores acks for sequences its consumer has not delivered

    # ------------------------------------------------------------------ for the Spark connector

    def advance_ack_floor(self, stream: str, durable: str, seq: int) -> SequenceInfo:
        """Acknowledge what the durable consumer matches up to stream sequence ``seq``
        by fetching exactly those messages and acknowledging them (the last one under
        ack policy all), releasing them on interest and work-queue streams; returns the
        new ack floor.  Cheapest with ack policy all (one ack per call)."""
        from jetspark.remote import bulk

        return bulk.advance_ack_floor(self, stream, durable, V.seq(seq, "seq", optional=False))

    def ordered_consumer(self, stream: str, subjects: Optional[Sequence[str]] = None, start_seq: Optional[int] = None, end_seq: Optional[int] = None, batch_size: int = 4096) -> Iterator[Msg]:
        """Read a (filtered) range in order with no acks, like nats-py's ordered consumer.

        Messages carry metadata (stream and consumer sequences, num_pending within
        the range); their ack methods do nothing.
        """
        from jetspark.remote import bulk

        start_seq, end_seq, subjects, batch_size, _ = V.read_args(start_seq, end_seq, subjects, batch_size, False)
        return bulk.ordered_consumer(self, stream, subjects, start_seq, end_seq, batch_size)


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

