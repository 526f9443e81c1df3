"""The contract suite's oracle: a real nats-server through nats-py's own public JetStream API.

``OracleJS`` answers jetspark's synchronous verbs by calling nats-py's
``JetStreamContext`` (``add_stream``, ``stream_info``, ``publish``,
``get_msg``, ``add_consumer``, ``pull_subscribe``, ``fetch``, ...) on an
asyncio loop in a private thread, and converts nats-py's result dataclasses
into jetspark's, field by field.  It shares no code with jetspark's own
nats:// backend (``jetspark/remote/``): the server decides, nats-py carries
the question, and the same behavioural test runs unchanged against the
embedded engine, jetspark's nats:// backend and this oracle.

nats-py is left only where it cannot say what the contract asks, and then
through raw ``$JS.API`` requests on the same connection:

- ``create_consumer``/``update_consumer``: nats-py's ``add_consumer`` sends
  no ``action``;
- ``stream_info(deleted_details=True)``, ``stream_names``, ``get_msg(seq=0)``,
  ``purge_stream(seq=0, keep=0)``: arguments nats-py does not send;
- ``StreamState.first_ts``/``last_ts``/``num_subjects``: fields nats-py's
  ``StreamState`` drops (read from the same INFO answer the server gives);
- names nats-py refuses before asking (``"a.b"``, ``"a b"``): the server
  judges them from the request (subject or body), as it would any client's;
- ``fetch(no_wait=..., max_bytes=...)``: one pull request of our own;
- acks: nats-py's ``ack``/``nak``/``term`` publish without waiting and refuse
  a second ack of a message on the client side, while the contract sends
  every ack and the next call already sees it applied.  So each ack is a
  request to the message's reply subject (what nats-py's ``ack_sync`` does),
  with nats-py's own ``Msg.Ack`` payloads.

- push subscriptions: nats-py's ``subscribe``/``subscribe_bind`` as they are;
  a synchronous callback runs in a worker thread nats-py awaits (so in order),
  ``subscribe_bind`` takes the consumer's own config (nats-py wants it as an
  argument), and a drain without a callback runs on while ``next_msg`` takes
  what the subscription holds (nats-py's drain waits for that).  nats-py's
  client-side refusals (``nats.js.errors.Error``) are ``SubscriptionError``.

nats-py's exceptions become jetspark's error tree (``error_from_response``
with the server's code, err_code and description).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import dataclasses
import datetime as dt
import json
import threading
import time
from email.parser import BytesParser
from enum import Enum
from typing import Any, Optional

import nats
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg as NatsMsg
from nats.js import api as napi

from jetspark import api
from jetspark.errors import (
    PUSH_BASED,
    ClosedError,
    FetchTimeoutError,
    MsgNotFoundError,
    NextMsgTimeoutError,
    NoStreamResponseError,
    PublishAsyncTimeoutError,
    SubscriptionError,
    TooManyStalledMsgsError,
    api_error,
    error_from_response,
    push_based_error,
)

_NS = 1_000_000_000
_TIMEOUT = 5.0
_ZERO_TIME = "0001-01-01T00:00:00Z"
# How long an ack request waits for the server's confirmation (nats-py's ack_sync default).
_ACK_TIMEOUT = 1.0
# A no_wait fetch still carries an expiry, so a request the server holds (the consumer
# is at max_ack_pending) cannot deliver into an inbox that is gone.
_NO_WAIT_EXPIRES = 0.05
_FETCH_GRACE = 2.0


class _Loop:
    """An asyncio loop on a daemon thread; ``run(coro)`` blocks for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


# ---------------------------------------------------------------- errors


def _api_error(exc: nats.js.errors.APIError) -> Exception:
    if exc.err_code is None and exc.code is None:
        return exc
    return error_from_response(
        {"code": exc.code or 0, "err_code": exc.err_code or 0, "description": exc.description or ""}
    )


@contextlib.contextmanager
def _errors():
    """nats-py's exceptions as jetspark's: API errors keep the server's code, err_code and description."""
    try:
        yield
    except nats.js.errors.NoStreamResponseError as exc:
        raise NoStreamResponseError() from exc
    except nats.js.errors.APIError as exc:
        err = _api_error(exc)
        if err is exc:
            raise
        raise err from None


# ---------------------------------------------------------------- nats-py <-> jetspark dataclasses


def _parse_time(value: Optional[str]) -> Optional[dt.datetime]:
    """The server's RFC 3339 time (nanoseconds) as an aware UTC datetime; the zero time is None."""
    if not value or value == _ZERO_TIME:
        return None
    s = value.replace("Z", "+00:00")
    if "." in s:
        date, rest = s.split(".", 1)
        frac, tz = rest[:-6], rest[-6:]
        s = f"{date}.{frac[:6].ljust(6, '0')}{tz}"
    return dt.datetime.fromisoformat(s).astimezone(dt.timezone.utc)


def _user_metadata(meta: Optional[dict]) -> Optional[dict]:
    # The server stamps its own "_nats.*" keys into metadata; they are not the user's config.
    meta = {k: v for k, v in (meta or {}).items() if not k.startswith("_nats.")}
    return meta or None


# Enum-valued config fields and the name of their enum, the same in jetspark.api and nats-py.
_ENUM_FIELDS = {
    "retention": "RetentionPolicy",
    "discard": "DiscardPolicy",
    "storage": "StorageType",
    "deliver_policy": "DeliverPolicy",
    "ack_policy": "AckPolicy",
    "replay_policy": "ReplayPolicy",
    "compression": "StoreCompression",
    "persist_mode": "PersistMode",
}
# Config fields holding a part (a dataclass, or a list of them) of the same name on both sides.
_PARTS = ("placement", "mirror", "sources", "republish", "subject_transform", "consumer_limits")


def _part(v, to_nats: bool):
    """A config part as the other side's class of the same name, field by field."""
    if isinstance(v, list):
        return [_part(x, to_nats) for x in v]
    if not dataclasses.is_dataclass(v) or isinstance(v, type):
        return v  # a dict or a wrong type goes as it is: the server judges it
    cls = getattr(napi if to_nats else api, type(v).__name__)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{f.name: _part(getattr(v, f.name), to_nats) for f in dataclasses.fields(v) if f.name in names})


def _config(c, cls):
    """A config converted field by field between jetspark.api and nats-py's ``nats.js.api``
    (``cls`` is the target class; both declare the same fields, checked by reading every
    jetspark field from ``c``).  Enums become the target's member of the same value; a
    value that is no enum member goes as it is, so the server judges it.  Unset fields
    stay None: the server fills them in as for any client that leaves them out."""
    to_nats = cls.__module__ != api.__name__
    target = napi if to_nats else api
    values = {}
    for f in dataclasses.fields(getattr(api, cls.__name__)):
        v = getattr(c, f.name)
        if f.name in _ENUM_FIELDS and v is not None:
            enum = getattr(target, _ENUM_FIELDS[f.name])
            if isinstance(v, Enum):
                v = enum(v.value)
            elif not to_nats:
                v = enum(v)
        elif f.name == "metadata" and not to_nats:
            v = _user_metadata(v)
        elif f.name in _PARTS:
            v = _part(v, to_nats)
        elif f.name == "pause_until" and v is not None:
            # nats-py's field is an RFC 3339 string, jetspark's a datetime.
            if to_nats and isinstance(v, dt.datetime):
                v = v.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            elif not to_nats and isinstance(v, str):
                v = _parse_time(v)
        values[f.name] = v
    return cls(**values)


def _source_info(i: Optional[napi.StreamSourceInfo], raw: Optional[dict]) -> Optional[api.StreamSourceInfo]:
    """nats-py's StreamSourceInfo, with the server's fields nats-py drops read from ``raw``."""
    if i is None:
        return None
    raw = raw or {}
    return api.StreamSourceInfo(
        name=i.name,
        lag=i.lag,
        active=i.active,
        error=i.error,
        filter_subject=raw.get("filter_subject"),
        subject_transforms=None
        if raw.get("subject_transforms") is None
        else [api.SubjectTransform.from_response(t) for t in raw["subject_transforms"]],
        external=None if raw.get("external") is None else api.ExternalStream.from_response(raw["external"]),
    )


def stream_info(info: napi.StreamInfo, raw_state: dict, raw: Optional[dict] = None) -> api.StreamInfo:
    """nats-py's StreamInfo; ``raw_state`` is the server's state JSON for the fields nats-py drops
    (``raw`` its whole INFO, for the sources' fields nats-py drops)."""
    raw = raw or {}
    s = info.state
    state = api.StreamState(
        messages=s.messages,
        bytes=s.bytes,
        first_seq=s.first_seq,
        last_seq=s.last_seq,
        consumer_count=s.consumer_count,
        first_ts=_parse_time(raw_state.get("first_ts")),
        last_ts=_parse_time(raw_state.get("last_ts")),
        num_subjects=raw_state.get("num_subjects", 0),
        num_deleted=s.num_deleted or 0,
        deleted=s.deleted,
        subjects=s.subjects,
        lost=None if s.lost is None else {"msgs": s.lost.msgs, "bytes": s.lost.bytes},
    )
    return api.StreamInfo(
        config=_config(info.config, api.StreamConfig),
        state=state,
        created=info.created,
        did_create=info.did_create,
        cluster=cluster_info(info.cluster),
        mirror=_source_info(info.mirror, raw.get("mirror")),
        sources=None
        if info.sources is None
        else [_source_info(i, r) for i, r in zip(info.sources, raw.get("sources") or [{}] * len(info.sources))],
    )


def cluster_info(c: Optional[napi.ClusterInfo]) -> Optional[api.ClusterInfo]:
    if c is None:
        return None
    peers = (
        None
        if c.replicas is None
        else [
            api.PeerInfo(name=p.name, current=p.current, offline=p.offline, active=p.active, lag=p.lag)
            for p in c.replicas
        ]
    )
    return api.ClusterInfo(leader=c.leader, name=c.name, replicas=peers, leader_since=c.leader_since)


def sequence_info(s: Optional[napi.SequenceInfo]) -> api.SequenceInfo:
    if s is None:
        return api.SequenceInfo()
    return api.SequenceInfo(consumer_seq=s.consumer_seq, stream_seq=s.stream_seq, last_active=s.last_active)


def consumer_info(info: napi.ConsumerInfo) -> api.ConsumerInfo:
    return api.ConsumerInfo(
        name=info.name,
        stream_name=info.stream_name,
        config=_config(info.config, api.ConsumerConfig),
        created=info.created,
        delivered=sequence_info(info.delivered),
        ack_floor=sequence_info(info.ack_floor),
        num_ack_pending=info.num_ack_pending or 0,
        num_redelivered=info.num_redelivered or 0,
        num_waiting=info.num_waiting or 0,
        num_pending=info.num_pending or 0,
        cluster=cluster_info(info.cluster),
        push_bound=info.push_bound or None,
        paused=info.paused or None,
        pause_remaining=info.pause_remaining,
    )


def _pause(p: napi.ConsumerPause) -> api.ConsumerPause:
    return api.ConsumerPause(
        paused=bool(p.paused), pause_until=_parse_time(p.pause_until), pause_remaining=p.pause_remaining
    )


def raw_msg(m: napi.RawStreamMsg, stream: str) -> api.RawStreamMsg:
    # nats-py's get_msg decodes the headers into ``headers`` but leaves ``hdrs`` base64.
    hdrs = base64.b64decode(m.hdrs) if isinstance(m.hdrs, str) else m.hdrs
    return api.RawStreamMsg(
        subject=m.subject,
        seq=m.seq,
        data=m.data or b"",
        hdrs=hdrs or None,
        headers=m.headers,
        stream=stream,
        time=m.time,
    )


def metadata(md: NatsMsg.Metadata, reply: str) -> api.MsgMetadata:
    # nats-py's timestamp is the reply's nanoseconds as a float, rounded to the nearest
    # microsecond, so it can be 1 us past the stored time get_msg shows; the contract
    # truncates, as for every time the server reports.  The nanoseconds are the reply
    # subject's token before the last ($JS.ACK.[<domain>.<hash>.]<stream>.<consumer>.
    # <delivered>.<sseq>.<cseq>.<ts>.<pending>[.<random>]).
    tokens = reply.split(".")
    ts_ns = int(tokens[7] if len(tokens) == 9 else tokens[9])
    return api.MsgMetadata(
        sequence=api.SequencePair(consumer=md.sequence.consumer, stream=md.sequence.stream),
        num_pending=md.num_pending,
        num_delivered=md.num_delivered,
        timestamp=api.ns_to_datetime(ts_ns),
        stream=md.stream,
        consumer=md.consumer,
        domain=md.domain,
    )


def _name_ok(name: Any) -> bool:
    """Whether nats-py sends a request for this name (else it raises ValueError before asking)."""
    return isinstance(name, str) and bool(name) and not any(c in ">*. /\\\t\r\n" for c in name)


# ---------------------------------------------------------------- delivered messages


class Msg:
    """A delivered message: nats-py's Msg, with every ack kind confirmed by the server."""

    def __init__(self, js: "OracleJS", msg: NatsMsg) -> None:
        self._js = js
        self._msg = msg
        self.subject = msg.subject
        self.data = msg.data
        self.headers = dict(msg.headers) if msg.headers else None
        self.reply = msg.reply

    def __repr__(self) -> str:
        return f"<Msg subject={self.subject!r} data={self.data!r} reply={self.reply!r}>"

    @property
    def metadata(self) -> api.MsgMetadata:
        return metadata(self._msg.metadata, self.reply)

    def _send(self, payload: bytes, timeout: float = _ACK_TIMEOUT) -> None:
        if payload != NatsMsg.Ack.Progress:
            self._msg._ackd = True  # as nats-py's own ack verbs mark it: its auto-ack then skips it
        try:
            self._js._loop.run(self._js._nc.request(self.reply, payload, timeout=timeout))
        except nats.errors.NoRespondersError:
            # Nothing listens for acks (ack policy none, or the consumer is gone): a
            # fire-and-forget ack would vanish the same way.
            pass
        except nats.errors.TimeoutError:
            # The server ignores, without a reply, an ack for a stream seq at or past the
            # consumer's next one (e.g. from an earlier consumer of the same name).
            pass

    def ack(self) -> None:
        self._send(NatsMsg.Ack.Ack)

    def ack_sync(self, timeout: float = _ACK_TIMEOUT) -> "Msg":
        self._send(NatsMsg.Ack.Ack, timeout)
        return self

    def nak(self, delay: Optional[float] = None) -> None:
        payload = NatsMsg.Ack.Nak
        if delay:
            payload += b" " + json.dumps({"delay": int(delay * _NS)}).encode()
        self._send(payload)

    def in_progress(self) -> None:
        self._send(NatsMsg.Ack.Progress)

    def term(self) -> None:
        self._send(NatsMsg.Ack.Term)


class PullSubscription:
    """nats-py's PullSubscription, synchronous."""

    def __init__(self, js: "OracleJS", sub, stream: str, consumer: str) -> None:
        self._js = js
        self._sub = sub
        self.stream = stream
        self.consumer = consumer

    def consumer_info(self) -> api.ConsumerInfo:
        return self._js.consumer_info(self.stream, self.consumer)

    def unsubscribe(self) -> None:
        self._js._loop.run(self._sub.unsubscribe())

    def fetch(
        self,
        batch: int = 1,
        timeout: Optional[float] = 5.0,
        heartbeat: Optional[float] = None,
        no_wait: bool = False,
        max_bytes: Optional[int] = None,
    ) -> list:
        """nats-py's fetch; FetchTimeoutError when nothing arrives."""
        run = self._js._loop.run
        wait = (timeout or _TIMEOUT) + 3 * _FETCH_GRACE + 10
        try:
            with _errors():
                if no_wait or max_bytes is not None:
                    msgs = run(self._one_shot(batch, timeout or _TIMEOUT, no_wait, max_bytes), timeout=wait)
                else:
                    msgs = run(self._sub.fetch(batch, timeout=timeout, heartbeat=heartbeat), timeout=wait)
        except (nats.errors.TimeoutError, nats.js.errors.FetchTimeoutError, asyncio.TimeoutError):
            msgs = []
        except nats.js.errors.ServiceUnavailableError:
            # The pull request's 503: nobody serves that consumer.
            raise api_error(10014) from None
        if not msgs:
            raise FetchTimeoutError(f"no message from consumer {self.consumer!r} of stream {self.stream!r}")
        return [Msg(self._js, m) for m in msgs]

    async def _one_shot(self, batch: int, timeout: float, no_wait: bool, max_bytes: Optional[int]) -> list:
        # nats-py's fetch has no no_wait or max_bytes: one pull request of our own (no_wait
        # plus an expiry: the server answers with what is available now, or waits up to the
        # expiry for the first message), on an inbox of its own.
        nc = self._js._nc
        expires = _NO_WAIT_EXPIRES if no_wait else timeout
        request: dict = {"batch": batch, "no_wait": True, "expires": int(expires * _NS)}
        if max_bytes is not None:
            request["max_bytes"] = max_bytes
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        msgs: list = []
        try:
            await nc.publish(
                f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.consumer}", json.dumps(request).encode(), reply=inbox
            )
            deadline = time.monotonic() + expires + _FETCH_GRACE
            while len(msgs) < batch:
                m = await sub.next_msg(timeout=max(deadline - time.monotonic(), 0.001))
                status = (m.headers or {}).get("Status")
                if status == "100":
                    continue
                if status == "503":
                    raise nats.js.errors.ServiceUnavailableError
                if status == "409" and (m.headers or {}).get("Description") == PUSH_BASED:
                    raise push_based_error()
                if status:
                    break
                msgs.append(m)
            return msgs
        finally:
            await sub.unsubscribe()


class _Messages:
    def __init__(self, sub: "PushSubscription") -> None:
        self._sub = sub

    def __iter__(self):
        return self

    def __next__(self) -> Msg:
        try:
            return self._sub.next_msg(None)
        except ClosedError:
            raise StopIteration from None

    def __call__(self):
        return self


class PushSubscription:
    """nats-py's PushSubscription, synchronous: a callback runs in a worker thread (awaited, so in
    order), next_msg and messages() take from nats-py's queue.  A drain without a callback runs
    on while next_msg takes what the subscription holds (nats-py's drain waits for that)."""

    def __init__(self, js: "OracleJS", psub, has_cb: bool) -> None:
        self._js = js
        self._psub = psub
        self._has_cb = has_cb
        self.stream = psub._stream
        self._getter = None
        self._drain = None  # an asyncio task: a drain without a callback

    @property
    def consumer(self) -> str:
        return self._psub._consumer

    def consumer_info(self) -> api.ConsumerInfo:
        return self._js.consumer_info(self.stream, self.consumer)

    def next_msg(self, timeout: Optional[float] = 1.0) -> Msg:
        if self._has_cb:
            raise SubscriptionError("nats: next_msg cannot be used in async subscriptions")
        m = self._js._loop.run(self._take(timeout), timeout=None if timeout is None else timeout + 10)
        if m is None:
            raise ClosedError("the subscription has ended")
        return Msg(self._js, m)

    async def _take(self, timeout):
        if self._getter is None:
            if self._psub._closed:
                return None
            self._getter = asyncio.ensure_future(self._psub.next_msg(timeout=None))
        waits = {self._getter} | ({self._drain} if self._drain is not None else set())
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if self._getter.done():
            getter, self._getter = self._getter, None
            return getter.result()
        if self._drain is not None and self._drain.done():
            self._getter.cancel()
            self._getter = None
            return None
        raise NextMsgTimeoutError(f"nothing within {timeout} s")

    @property
    def messages(self):
        # nats-py's property (an async iterator there); callable too, as jetspark's.
        if self._has_cb:
            raise SubscriptionError("nats: cannot iterate over a subscription with a callback")
        return _Messages(self)

    @property
    def pending_msgs(self) -> int:
        held = (
            self._getter is not None
            and self._getter.done()
            and not self._getter.cancelled()
            and self._getter.exception() is None
        )
        return self._psub.pending_msgs + int(held)

    def unsubscribe(self) -> None:
        async def unsubscribe():
            if self._drain is not None:
                self._drain.cancel()
            if self._getter is not None:
                self._getter.cancel()
                self._getter = None
            with contextlib.suppress(nats.errors.BadSubscriptionError):
                await self._psub.unsubscribe()

        self._js._loop.run(unsubscribe())

    def drain(self) -> None:
        if self._has_cb:
            with contextlib.suppress(nats.errors.BadSubscriptionError):
                self._js._loop.run(self._psub.drain())
            return

        async def start():
            self._drain = asyncio.ensure_future(self._psub.drain())

        self._js._loop.run(start())


# ---------------------------------------------------------------- the handle


class OracleJS:
    """jetspark's synchronous JetStream verbs, answered by nats-server through nats-py."""

    def __init__(self, url: str, timeout: float = _TIMEOUT, publish_async_max_pending: int = 4000) -> None:
        self._loop = _Loop()
        self.timeout = timeout
        # Several servers (one cluster) comma-separated, as jetspark.connect takes them.
        self._nc = self._loop.run(nats.connect([u.strip() for u in url.split(",")]))
        self._js = self._nc.jetstream(timeout=timeout, publish_async_max_pending=publish_async_max_pending)

    def close(self) -> None:
        self._loop.run(self._nc.close())
        self._loop.stop()

    def __enter__(self) -> "OracleJS":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _run(self, coro):
        with _errors():
            return self._loop.run(coro)

    def _raw(self, subject: str, payload: Any = None, timeout: Optional[float] = None) -> dict:
        """A raw $JS.API request, for what nats-py cannot say."""
        data = b"" if payload is None else json.dumps(payload).encode()
        msg = self._loop.run(self._nc.request(subject, data, timeout=timeout or self.timeout))
        resp = json.loads(msg.data)
        if "error" in resp:
            raise error_from_response(resp["error"])
        return resp

    # -- streams

    def _stream_info(self, info: napi.StreamInfo) -> api.StreamInfo:
        # nats-py's StreamState has no first_ts, last_ts or num_subjects: the server's own INFO has.
        raw = self._raw(f"$JS.API.STREAM.INFO.{info.config.name}")
        return stream_info(info, raw["state"], raw)

    def _stream_request(self, verb: str, config: api.StreamConfig) -> api.StreamInfo:
        nconfig = _config(config, napi.StreamConfig)
        if _name_ok(config.name):
            call = self._js.add_stream if verb == "CREATE" else self._js.update_stream
            return self._stream_info(self._run(call(nconfig)))
        # nats-py refuses the name before asking; the server judges it.
        resp = self._raw(f"$JS.API.STREAM.{verb}.{config.name}", nconfig.as_dict())
        return self._stream_info(napi.StreamInfo.from_response(resp))

    def add_stream(self, config: Optional[api.StreamConfig] = None, **params) -> api.StreamInfo:
        return self._stream_request("CREATE", api.with_params(api.StreamConfig, config, params))

    def update_stream(self, config: Optional[api.StreamConfig] = None, **params) -> api.StreamInfo:
        return self._stream_request("UPDATE", api.with_params(api.StreamConfig, config, params))

    def delete_stream(self, name: str) -> bool:
        if not _name_ok(name):
            return self._raw(f"$JS.API.STREAM.DELETE.{name}")["success"]
        return self._run(self._js.delete_stream(name))

    def stream_info(
        self, name: str, subjects_filter: Optional[str] = None, deleted_details: bool = False
    ) -> api.StreamInfo:
        if deleted_details or not _name_ok(name):
            # nats-py sends no deleted_details (and refuses such names before asking).
            req: dict = {}
            if subjects_filter:
                req["subjects_filter"] = subjects_filter
            if deleted_details:
                req["deleted_details"] = True
            resp = self._raw(f"$JS.API.STREAM.INFO.{name}", req or None)
            info = napi.StreamInfo.from_response(dict(resp, state=dict(resp["state"])))
            return stream_info(info, resp["state"], resp)
        info = self._run(self._js.stream_info(name, subjects_filter=subjects_filter))
        raw = self._raw(f"$JS.API.STREAM.INFO.{name}")
        return stream_info(info, raw["state"], raw)

    def streams_info(self) -> list[api.StreamInfo]:
        return [self._stream_info(i) for i in self._run(self._js.streams_info())]

    def stream_names(self) -> list[str]:
        # nats-py has no STREAM.NAMES verb; streams_info lists the same streams.
        return sorted(i.config.name for i in self._run(self._js.streams_info()))

    def find_stream_name_by_subject(self, subject: str) -> str:
        try:
            return self._run(self._js.find_stream_name_by_subject(subject))
        except nats.js.errors.NotFoundError:
            # nats-py's bare NotFoundError for "no stream has it": the server's 10059.
            raise api_error(10059) from None

    def purge_stream(
        self, name: str, subject: Optional[str] = None, seq: Optional[int] = None, keep: Optional[int] = None
    ) -> bool:
        if seq == 0 or keep == 0 or not _name_ok(name):
            # nats-py leaves a zero seq or keep out of the request.
            req: dict = {}
            if subject:
                req["filter"] = subject
            if seq is not None:
                req["seq"] = seq
            if keep is not None:
                req["keep"] = keep
            return self._raw(f"$JS.API.STREAM.PURGE.{name}", req or None)["success"]
        return self._run(self._js.purge_stream(name, seq=seq, subject=subject, keep=keep))

    def publish(
        self,
        subject: str,
        payload: bytes = b"",
        headers: Optional[dict] = None,
        stream: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
    ) -> api.PubAck:
        try:
            ack = self._run(
                self._js.publish(
                    subject, payload, timeout=timeout, stream=stream, headers=dict(headers) if headers else None
                )
            )
        except NoStreamResponseError:
            raise NoStreamResponseError(subject) from None
        return api.PubAck(stream=ack.stream, seq=ack.seq, domain=ack.domain, duplicate=ack.duplicate)

    # -- publish_async: nats-py's own (its window, wait_stall and TooManyStalledMsgsError).
    # nats-py 2.16 never completes a future whose PubAck is an error (its reply handler
    # raises instead): tests/contract/test_publish_async.py does not ask the oracle for those.

    def publish_async(
        self,
        subject: str,
        payload: bytes = b"",
        headers: Optional[dict] = None,
        stream: Optional[str] = None,
        *,
        wait_stall: Optional[float] = None,
    ) -> concurrent.futures.Future:
        async def start() -> asyncio.Future:
            return await self._js.publish_async(
                subject, payload, wait_stall=wait_stall, stream=stream, headers=dict(headers) if headers else None
            )

        try:
            answer = self._loop.run(start())
        except nats.js.errors.TooManyStalledMsgsError as exc:
            raise TooManyStalledMsgsError(str(exc)) from exc
        out: concurrent.futures.Future = concurrent.futures.Future()
        out.set_running_or_notify_cancel()

        def done(a: asyncio.Future) -> None:
            exc = a.exception()
            if isinstance(exc, nats.js.errors.NoStreamResponseError):
                out.set_exception(NoStreamResponseError(subject))
            elif isinstance(exc, nats.js.errors.APIError):
                out.set_exception(_api_error(exc))
            elif exc is not None:
                out.set_exception(exc)
            else:
                ack = a.result()
                out.set_result(api.PubAck(stream=ack.stream, seq=ack.seq, domain=ack.domain, duplicate=ack.duplicate))

        self._loop.loop.call_soon_threadsafe(answer.add_done_callback, done)
        return out

    def publish_async_pending(self) -> int:
        return self._js.publish_async_pending()

    def publish_async_completed(self, timeout: Optional[float] = None) -> None:
        try:
            self._loop.run(asyncio.wait_for(self._js.publish_async_completed(), timeout), timeout=None)
        except asyncio.TimeoutError:
            raise PublishAsyncTimeoutError(f"publish_async futures still pending after {timeout} s") from None

    def get_msg(
        self,
        stream: str,
        seq: Optional[int] = None,
        subject: Optional[str] = None,
        direct: bool = False,
        next: bool = False,
        *,
        last_by_subj: Optional[str] = None,
        next_by_subj: Optional[str] = None,
    ) -> api.RawStreamMsg:
        if subject is not None or next or direct:
            # nats-py's own arguments, as its caller gives them.
            return raw_msg(
                self._run(self._js.get_msg(stream, seq=seq, subject=subject, direct=direct, next=next)), stream
            )
        if last_by_subj is not None and next_by_subj is None and seq is None and _name_ok(stream):
            m = self._run(self._js.get_msg(stream, subject=last_by_subj))
        elif next_by_subj is not None and last_by_subj is None and seq and _name_ok(stream):
            m = self._run(self._js.get_msg(stream, seq=seq, subject=next_by_subj, next=True))
        elif seq and last_by_subj is None and next_by_subj is None and _name_ok(stream):
            m = self._run(self._js.get_msg(stream, seq=seq))
        else:
            # Combinations nats-py cannot send (a zero seq, both subjects, next without seq):
            # the server judges the request as given.
            req: dict = {}
            if seq is not None:
                req["seq"] = seq
            if last_by_subj is not None:
                req["last_by_subj"] = last_by_subj
            if next_by_subj is not None:
                req["next_by_subj"] = next_by_subj
            resp = self._raw(f"$JS.API.STREAM.MSG.GET.{stream}", req)
            m = self._lift(resp["message"])
        return raw_msg(m, stream)

    def _lift(self, message: dict) -> napi.RawStreamMsg:
        # The same decoding nats-py's get_msg does, for an answer to a raw request.
        m = napi.RawStreamMsg.from_response(dict(message))
        if m.hdrs:
            hdrs = base64.b64decode(m.hdrs)
            m.headers = dict(BytesParser().parsebytes(hdrs[len(b"NATS/1.0\r\n") :]).items()) or None
        m.data = base64.b64decode(m.data) if m.data else None
        return m

    def get_last_msg(self, stream: str, subject: str, direct: bool = False) -> api.RawStreamMsg:
        if not _name_ok(stream):
            return self.get_msg(stream, last_by_subj=subject)
        return raw_msg(self._run(self._js.get_last_msg(stream, subject, direct=direct)), stream)

    def delete_msg(self, stream: str, seq: int) -> bool:
        if not _name_ok(stream):
            return self._raw(f"$JS.API.STREAM.MSG.DELETE.{stream}", {"seq": seq})["success"]
        return self._run(self._js.delete_msg(stream, seq))

    # -- consumers

    def add_consumer(
        self, stream: str, config: Optional[api.ConsumerConfig] = None, timeout: Optional[float] = None, **params
    ) -> api.ConsumerInfo:
        """Create or update (nats-py's add_consumer sends no action)."""
        config = api.with_params(api.ConsumerConfig, config, params)
        names = [n for n in (config.name, config.durable_name) if n is not None]
        if _name_ok(stream) and all(_name_ok(n) for n in names):
            return consumer_info(
                self._run(self._js.add_consumer(stream, _config(config, napi.ConsumerConfig), timeout=timeout))
            )
        return self._consumer_request(stream, config, None, timeout)

    def create_consumer(
        self, stream: str, config: Optional[api.ConsumerConfig] = None, timeout: Optional[float] = None, **params
    ) -> api.ConsumerInfo:
        """Create only: an existing consumer with a different config -> 10148."""
        return self._consumer_request(stream, api.with_params(api.ConsumerConfig, config, params), "create", timeout)

    def update_consumer(
        self, stream: str, config: Optional[api.ConsumerConfig] = None, timeout: Optional[float] = None, **params
    ) -> api.ConsumerInfo:
        """Update only: a missing consumer -> 10149."""
        return self._consumer_request(stream, api.with_params(api.ConsumerConfig, config, params), "update", timeout)

    def _consumer_request(
        self, stream: str, config: api.ConsumerConfig, action: Optional[str], timeout: Optional[float] = None
    ) -> api.ConsumerInfo:
        # nats-py's add_consumer sends no action and refuses names a subject cannot
        # carry; this sends nats-py's own serialisation of the config, on the subject
        # nats-py would choose, and a name the subject cannot carry in the body only.
        nconfig = _config(config, napi.ConsumerConfig)
        req: dict = {"stream_name": stream, "config": nconfig.as_dict()}
        if action:
            req["action"] = action
        name = config.name or config.durable_name
        if name is not None and not _name_ok(name):
            req["config"].pop("durable_name", None)
            req["config"]["name"] = name
            subject = f"$JS.API.CONSUMER.CREATE.{stream}"
        elif config.name:
            subject = f"$JS.API.CONSUMER.CREATE.{stream}.{config.name}"
        elif config.durable_name:
            subject = f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{config.durable_name}"
        else:
            subject = f"$JS.API.CONSUMER.CREATE.{stream}"
        return consumer_info(napi.ConsumerInfo.from_response(self._raw(subject, req, timeout)))

    def delete_consumer(self, stream: str, consumer: str) -> bool:
        if not (_name_ok(stream) and _name_ok(consumer)):
            return self._raw(f"$JS.API.CONSUMER.DELETE.{stream}.{consumer}")["success"]
        return self._run(self._js.delete_consumer(stream, consumer))

    def pause_consumer(
        self, stream: str, consumer: str, pause_until: Any, timeout: Optional[float] = None
    ) -> api.ConsumerPause:
        # nats-py takes RFC 3339 text and sends whatever it is given, for the server to judge.
        until = api.rfc3339(pause_until) if isinstance(pause_until, dt.datetime) else pause_until
        return _pause(self._run(self._js.pause_consumer(stream, consumer, until, timeout=timeout)))

    def resume_consumer(self, stream: str, consumer: str, timeout: Optional[float] = None) -> api.ConsumerPause:
        return _pause(self._run(self._js.resume_consumer(stream, consumer, timeout=timeout)))

    def consumer_info(self, stream: str, consumer: str, timeout: Optional[float] = None) -> api.ConsumerInfo:
        if not (_name_ok(stream) and _name_ok(consumer)):
            return consumer_info(
                napi.ConsumerInfo.from_response(self._raw(f"$JS.API.CONSUMER.INFO.{stream}.{consumer}"))
            )
        return consumer_info(self._run(self._js.consumer_info(stream, consumer, timeout=timeout)))

    def consumers_info(self, stream: str) -> list[api.ConsumerInfo]:
        return [consumer_info(c) for c in self._run(self._js.consumers_info(stream))]

    def pull_subscribe(
        self,
        subject: str,
        durable: Optional[str] = None,
        stream: Optional[str] = None,
        config: Optional[api.ConsumerConfig] = None,
    ) -> PullSubscription:
        """nats-py's pull_subscribe: bind ``durable`` if it exists, else create it (or an
        ephemeral) filtered on ``subject`` unless ``config`` sets filter_subjects."""
        nconfig = _config(config, napi.ConsumerConfig) if config is not None else None
        try:
            sub = self._run(self._js.pull_subscribe(subject, durable=durable, stream=stream, config=nconfig))
        except nats.js.errors.NotFoundError as exc:
            if exc.err_code is None:  # find_stream_name_by_subject's "no stream has it"
                raise api_error(10059) from None
            raise
        # nats-py names an ephemeral itself; its consumer_info says which.
        info = self._run(sub.consumer_info())
        return PullSubscription(self, sub, info.stream_name, info.name)

    def subscribe(
        self, subject: str, queue: Optional[str] = None, cb=None, durable: Optional[str] = None,
        stream: Optional[str] = None, config: Optional[api.ConsumerConfig] = None, manual_ack: bool = False,
        ordered_consumer: bool = False, idle_heartbeat: Optional[float] = None, flow_control: bool = False,
        deliver_policy=None, headers_only: Optional[bool] = None, inactive_threshold: Optional[float] = None,
    ) -> PushSubscription:  # fmt: skip
        """nats-py's subscribe; nats-py's client-side refusals become SubscriptionError."""
        nconfig = _config(config, napi.ConsumerConfig) if config is not None else None
        policy = (
            napi.DeliverPolicy(getattr(deliver_policy, "value", deliver_policy)) if deliver_policy is not None else None
        )
        try:
            psub = self._run(
                self._js.subscribe(
                    subject, queue=queue, cb=self._callback(cb), durable=durable, stream=stream, config=nconfig,
                    manual_ack=manual_ack, ordered_consumer=ordered_consumer, idle_heartbeat=idle_heartbeat,
                    flow_control=flow_control, deliver_policy=policy,
                    headers_only=headers_only, inactive_threshold=inactive_threshold,
                )
            )  # fmt: skip
        except nats.js.errors.NotFoundError as exc:
            if exc.err_code is None:  # find_stream_name_by_subject's "no stream has it"
                raise api_error(10059) from None
            raise
        except TypeError as exc:  # "config.deliver_subject is required": a pull consumer
            raise SubscriptionError(str(exc)) from None
        except nats.js.errors.Error as exc:
            if isinstance(exc, nats.js.errors.APIError):
                raise
            raise SubscriptionError(str(exc)) from None
        return PushSubscription(self, psub, cb is not None)

    def subscribe_bind(self, stream: str, consumer: str, cb=None, manual_ack: bool = False) -> PushSubscription:
        """nats-py's subscribe_bind, with the consumer's own config (nats-py takes it as an argument)."""
        info = self._run(self._js.consumer_info(stream, consumer))
        if info.config.deliver_subject is None:
            raise SubscriptionError("config.deliver_subject is required")
        psub = self._run(
            self._js.subscribe_bind(
                stream=stream, config=info.config, consumer=consumer, cb=self._callback(cb), manual_ack=manual_ack
            )
        )
        return PushSubscription(self, psub, cb is not None)

    def _callback(self, cb):
        """A synchronous callback as nats-py's async one: run in a worker thread (it may call
        this handle, which runs on the loop), awaited, so messages reach it one at a time."""
        if cb is None:
            return None

        async def callback(m: NatsMsg) -> None:
            await asyncio.to_thread(cb, Msg(self, m))

        return callback

    def pull_subscribe_bind(
        self, consumer: Optional[str] = None, stream: Optional[str] = None, durable: Optional[str] = None
    ) -> PullSubscription:
        sub = self._run(self._js.pull_subscribe_bind(consumer=consumer, stream=stream, durable=durable))
        return PullSubscription(self, sub, stream, durable or consumer)


def stored(js, stream: str) -> dict:
    """seq -> RawStreamMsg of every message ``stream`` holds, read one by one with get_msg
    (through any handle: the oracle, or an engine handle as its own plain reference).

    One consistent view: if the stream's state changed while the messages were read (a
    replicated stream removes acknowledged interest or work-queue messages through its
    raft group after the ack is answered), the reading starts again; a state that did not
    change must count exactly the messages read.  A cluster under load can leave a request
    unanswered while the stream elects a leader (seen twice in full runs, right after a
    bulk publish: a stream info unanswered for 15 s); the reading then starts again, twice
    at most, as jetspark's own nats:// backend repeats such reads."""
    for _ in range(2):
        try:
            return _stored(js, stream)
        except nats.errors.TimeoutError:
            pass
    return _stored(js, stream)


def _stored(js, stream: str) -> dict:
    for _ in range(100):
        state = js.stream_info(stream).state
        out = {}
        for seq in range(max(state.first_seq, 1), state.last_seq + 1):  # (an empty stream: first_seq 0)
            try:
                out[seq] = js.get_msg(stream, seq)
            except MsgNotFoundError:
                pass
        after = js.stream_info(stream).state
        if (after.messages, after.first_seq, after.last_seq) == (state.messages, state.first_seq, state.last_seq):
            break
    assert len(out) == state.messages, (
        f"{stream}: get_msg found {len(out)} messages, stream_info counts {state.messages}"
    )
    return out
