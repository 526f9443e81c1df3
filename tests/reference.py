"""The reference side of the conformance suite: a real nats-server behind jetspark's API.

``ServerJS`` speaks to a nats-server through nats-py (its JSON API requests,
on an event loop in a private thread) and answers with jetspark's own
dataclasses and error classes, so one behavioural test runs unchanged
against the embedded engine and against the server, and the server decides
what is right.  Pull consumers: ``PullSubscription.fetch`` sends its own
pull requests and returns ``Msg`` objects whose acks wait for the server.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from dataclasses import dataclass
from email.parser import BytesParser
from typing import Any, Optional

import nats
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from jetspark import api
from tests.servers import NatsServer  # noqa: F401  (the launcher the fixtures use)
from jetspark.errors import ConsumerNotFoundError, FetchTimeoutError, NoStreamResponseError, api_error, error_from_response

_NS = 1_000_000_000
_DURATIONS_STREAM = ("max_age", "duplicate_window")
_DURATIONS_CONSUMER = ("ack_wait", "inactive_threshold")
_ZERO_TIME = "0001-01-01T00:00:00Z"


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


# ---------------------------------------------------------------- wire <-> dataclasses


def _ns_to_s(v):
    return None if v is None else v / _NS


def _time(v: Optional[str]):
    if not v or v == _ZERO_TIME:
        return None
    return _parse_iso(v)


def _parse_iso(v: str):
    import datetime as dt

    s = v.replace("Z", "+00:00")
    if "." in s:
        date_part, frac_tz = s.split(".", 1)
        frac, tz = frac_tz.split("+")
        s = f"{date_part}.{frac[:6].ljust(6, '0')}+{tz}"
    return dt.datetime.fromisoformat(s).astimezone(dt.timezone.utc)


def stream_config_to_wire(config: api.StreamConfig) -> dict:
    d = config.as_dict()
    for k in _DURATIONS_STREAM:
        if k in d:
            d[k] = int(round(d[k] * _NS))
    return d


def stream_config_from_wire(d: dict) -> api.StreamConfig:
    d = dict(d)
    for k in _DURATIONS_STREAM:
        if k in d:
            d[k] = _ns_to_s(d[k])
    for k, enum in (("retention", api.RetentionPolicy), ("storage", api.StorageType), ("discard", api.DiscardPolicy)):
        if k in d:
            d[k] = enum(d[k])
    # The server stamps its own version into metadata; it is not part of the user's config.
    meta = {k: v for k, v in (d.get("metadata") or {}).items() if not k.startswith("_nats.")}
    d["metadata"] = meta or None
    return api.StreamConfig.from_response(d)


def stream_info_from_wire(d: dict) -> api.StreamInfo:
    state = dict(d["state"])
    state["first_ts"] = _time(state.get("first_ts"))
    state["last_ts"] = _time(state.get("last_ts"))
    state.setdefault("num_deleted", 0)
    state.setdefault("num_subjects", 0)
    return api.StreamInfo(
        config=stream_config_from_wire(d["config"]),
        state=api.StreamState.from_response(state),
        created=_time(d.get("created")),
        did_create=d.get("did_create"),
    )


def _rfc3339(value) -> str:
    import datetime as dt

    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _strip_server_metadata(meta: Optional[dict]) -> Optional[dict]:
    # The server stamps its own version into metadata; it is not part of the user's config.
    meta = {k: v for k, v in (meta or {}).items() if not k.startswith("_nats.")}
    return meta or None


def _subject_token_ok(name: str) -> bool:
    return name not in ("*", ">") and "." not in name and not any(c.isspace() for c in name)


def consumer_config_to_wire(config: api.ConsumerConfig) -> dict:
    d = config.as_dict()
    for k in _DURATIONS_CONSUMER:
        if k in d:
            d[k] = int(round(d[k] * _NS))
    if "backoff" in d:
        d["backoff"] = [int(round(b * _NS)) for b in d["backoff"]]
    if "opt_start_time" in d:
        d["opt_start_time"] = _rfc3339(d["opt_start_time"])
    return d


def consumer_config_from_wire(d: dict) -> api.ConsumerConfig:
    d = dict(d)
    for k in _DURATIONS_CONSUMER:
        if k in d:
            d[k] = _ns_to_s(d[k])
    if d.get("backoff") is not None:
        d["backoff"] = [_ns_to_s(b) for b in d["backoff"]]
    if "opt_start_time" in d:
        d["opt_start_time"] = _time(d["opt_start_time"])
    for k, enum in (("deliver_policy", api.DeliverPolicy), ("ack_policy", api.AckPolicy), ("replay_policy", api.ReplayPolicy)):
        if k in d:
            d[k] = enum(d[k])
    d["metadata"] = _strip_server_metadata(d.get("metadata"))
    return api.ConsumerConfig.from_response(d)


def _sequence_info(d: Optional[dict]) -> api.SequenceInfo:
    d = d or {}
    return api.SequenceInfo(
        consumer_seq=d.get("consumer_seq", 0),
        stream_seq=d.get("stream_seq", 0),
        last_active=_time(d.get("last_active")),
    )


def consumer_info_from_wire(d: dict) -> api.ConsumerInfo:
    return api.ConsumerInfo(
        name=d["name"],
        stream_name=d["stream_name"],
        config=consumer_config_from_wire(d["config"]),
        created=_time(d.get("created")),
        delivered=_sequence_info(d.get("delivered")),
        ack_floor=_sequence_info(d.get("ack_floor")),
        num_ack_pending=d.get("num_ack_pending", 0),
        num_redelivered=d.get("num_redelivered", 0),
        num_waiting=d.get("num_waiting", 0),
        num_pending=d.get("num_pending", 0),
    )


def _parse_headers(hdrs: bytes) -> Optional[dict]:
    # "NATS/1.0\r\nKey: value\r\n...\r\n\r\n"
    _, _, rest = hdrs.partition(b"\r\n")
    parsed = BytesParser().parsebytes(rest)
    return dict(parsed.items()) or None


# ---------------------------------------------------------------- pull consumers

_ACK_TIMEOUT = 1.0
# How long past a fetch's own timeout we wait for the server's 408 that ends
# the lingering pull request (so no late message goes to a dead inbox).
_FETCH_GRACE = 2.0
# A no_wait fetch still needs an expiry (see PullSubscription._fetch).
_NO_WAIT_EXPIRES = 0.05
_END_STATUSES = ("404", "408", "409")


@dataclass(frozen=True)
class SequencePair:
    consumer: int
    stream: int


@dataclass(frozen=True)
class MsgMetadata:
    """nats-py's ``Msg.Metadata``: parsed from the reply subject
    ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts_ns>.<pending>``."""

    sequence: SequencePair
    num_pending: int
    num_delivered: int
    timestamp: Any  # datetime
    stream: str
    consumer: str
    domain: Optional[str] = None

    @classmethod
    def from_reply(cls, reply: str) -> "MsgMetadata":
        tokens = reply.split(".")
        if len(tokens) == 9:  # v1: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
            domain, rest = None, tokens[2:]
        elif len(tokens) >= 11:  # v2: $JS.ACK.<domain>.<account hash>.<stream>...
            domain, rest = (None if tokens[2] == "_" else tokens[2]), tokens[4:11]
        else:
            raise ValueError(f"not a JetStream reply subject: {reply!r}")
        stream, consumer, delivered, sseq, cseq, ts, pending = rest[:7]
        return cls(
            sequence=SequencePair(consumer=int(cseq), stream=int(sseq)),
            num_pending=int(pending),
            num_delivered=int(delivered),
            timestamp=api.ns_to_datetime(int(ts)),
            stream=stream,
            consumer=consumer,
            domain=domain,
        )


class Msg:
    """A message delivered by a pull consumer; every ack kind waits for the server.

    Each ack is sent as a request, and nats-server answers an ack's reply
    subject only after it has processed the ack, so the next consumer_info
    (or stream_info) already reflects it.  A repeated ack is sent again (the
    server ignores acks of settled messages); an ack nobody listens for (ack
    policy none, deleted consumer) is dropped, as nats-py's publish drops it.
    """

    def __init__(self, js: "ServerJS", subject: str, data: bytes, headers: Optional[dict], reply: str) -> None:
        self._js = js
        self.subject = subject
        self.data = data
        self.headers = headers
        self.reply = reply
        self.metadata = MsgMetadata.from_reply(reply)

    def __repr__(self) -> str:
        return f"<Msg subject={self.subject!r} data={self.data!r} reply={self.reply!r}>"

    def _send(self, payload: bytes, timeout: float = _ACK_TIMEOUT) -> None:
        try:
            self._js._loop.run(self._js._nc.request(self.reply, payload, timeout=timeout))
        except NoRespondersError:
            # Nothing listens for acks (ack policy none, or the consumer is
            # gone): nats-py's fire-and-forget ack would vanish the same way.
            pass
        except NatsTimeoutError:
            # The server ignores, without a reply, an ack for a stream seq at
            # or past the consumer's next one (e.g. from an earlier consumer
            # of the same name); anything it processes it answers at once.
            pass

    def ack(self) -> None:
        self._send(b"+ACK")

    def ack_sync(self, timeout: float = 1.0) -> None:
        self._send(b"+ACK", timeout)

    def nak(self, delay: Optional[float] = None) -> None:
        payload = b"-NAK"
        if delay:
            payload += b" " + json.dumps({"delay": int(round(delay * _NS))}).encode()
        self._send(payload)

    def in_progress(self) -> None:
        self._send(b"+WPI")

    def term(self) -> None:
        self._send(b"+TERM")


class PullSubscription:
    """nats-py's pull subscription, synchronous: ``fetch`` sends the pull requests itself."""

    def __init__(self, js: "ServerJS", stream: str, consumer: str) -> None:
        self._js = js
        self.stream = stream
        self.consumer = consumer

    def consumer_info(self) -> api.ConsumerInfo:
        return self._js.consumer_info(self.stream, self.consumer)

    def unsubscribe(self) -> None:
        pass  # no standing subscription: each fetch uses its own inbox

    def fetch(self, batch: int = 1, timeout: Optional[float] = 5.0, no_wait: bool = False, max_bytes: Optional[int] = None) -> list:
        """Up to ``batch`` messages: whatever is available now, else wait up to
        ``timeout`` for the first one (then take what else is available).
        ``no_wait`` waits at most a moment.  Nothing → ``FetchTimeoutError``
        (as nats-py raises ``TimeoutError``)."""
        if batch < 1:
            raise ValueError("nats: invalid batch size")
        msgs = self._js._loop.run(self._fetch(batch, timeout or 5.0, no_wait, max_bytes), timeout=(timeout or 5.0) + 3 * _FETCH_GRACE + 10)
        if not msgs:
            raise FetchTimeoutError(f"no message from consumer {self.consumer!r} of stream {self.stream!r}")
        return msgs

    async def _fetch(self, batch: int, timeout: float, no_wait: bool, max_bytes: Optional[int]) -> list:
        # One "one-shot" pull request: no_wait plus expires.  nats-server
        # answers it with what is available now (then 404 if fewer than
        # ``batch``); with nothing available it waits, up to expires, for the
        # first message and returns as soon as it has any.  When the
        # consumer is at max_ack_pending the server holds the request until
        # it expires (408), so it always carries an expiry: an open request
        # would later deliver into this fetch's inbox after it is gone.
        nc = self._js._nc
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.consumer}"
        expires = _NO_WAIT_EXPIRES if no_wait else timeout
        request: dict = {"batch": batch, "no_wait": True, "expires": int(expires * _NS)}
        if max_bytes is not None:
            request["max_bytes"] = max_bytes
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        msgs: list = []
        try:
            await nc.publish(subject, json.dumps(request).encode(), reply=inbox)
            deadline = time.monotonic() + expires + _FETCH_GRACE
            while len(msgs) < batch:
                m = await sub.next_msg(timeout=max(deadline - time.monotonic(), 0.001))
                status = (m.headers or {}).get("Status")
                if status:
                    if status == "100":  # idle heartbeat
                        continue
                    if status in _END_STATUSES:
                        break
                    if status == "503":  # no responders: the consumer does not exist
                        raise api_error(10014)
                    raise RuntimeError(f"unexpected pull status {status} {m.headers!r}")
                msgs.append(self._js._wrap(m))
            return msgs
        finally:
            await sub.unsubscribe()


class ServerJS:
    """jetspark's synchronous JetStream API over nats-py and a real server."""

    def __init__(self, url: str) -> None:
        self._loop = _Loop()
        self._nc = self._loop.run(nats.connect(url))
        self._js = self._nc.jetstream()

    # -- plumbing
    def close(self) -> None:
        self._loop.run(self._nc.close())
        self._loop.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _request(self, subject: str, payload: Any = None) -> dict:
        data = b"" if payload is None else json.dumps(payload).encode()
        msg = self._loop.run(self._nc.request(subject, data, timeout=5))
        resp = json.loads(msg.data)
        if "error" in resp:
            raise error_from_response(resp["error"])
        return resp

    # -- streams
    def add_stream(self, config: Optional[api.StreamConfig] = None, **params) -> api.StreamInfo:
        config = (config or api.StreamConfig()).evolve(**params)
        resp = self._request(f"$JS.API.STREAM.CREATE.{config.name}", stream_config_to_wire(config))
        return stream_info_from_wire(resp)

    def update_stream(self, config: Optional[api.StreamConfig] = None, **params) -> api.StreamInfo:
        config = (config or api.StreamConfig()).evolve(**params)
        resp = self._request(f"$JS.API.STREAM.UPDATE.{config.name}", stream_config_to_wire(config))
        return stream_info_from_wire(resp)

    def delete_stream(self, name: str) -> bool:
        return self._request(f"$JS.API.STREAM.DELETE.{name}")["success"]

    def stream_info(self, name: str, subjects_filter: Optional[str] = None, deleted_details: bool = False) -> api.StreamInfo:
        req = {}
        if subjects_filter:
            req["subjects_filter"] = subjects_filter
        if deleted_details:
            req["deleted_details"] = True
        return stream_info_from_wire(self._request(f"$JS.API.STREAM.INFO.{name}", req or None))

    def streams_info(self) -> list[api.StreamInfo]:
        return [stream_info_from_wire(s) for s in self._request("$JS.API.STREAM.LIST", {"offset": 0})["streams"] or []]

    def stream_names(self) -> list[str]:
        return sorted(self._request("$JS.API.STREAM.NAMES", {"offset": 0})["streams"] or [])

    def purge_stream(self, name: str, subject: Optional[str] = None, seq: Optional[int] = None, keep: Optional[int] = None) -> bool:
        req = {}
        if subject:
            req["filter"] = subject
        if seq is not None:
            req["seq"] = seq
        if keep is not None:
            req["keep"] = keep
        return self._request(f"$JS.API.STREAM.PURGE.{name}", req or None)["success"]

    def publish(self, subject: str, payload: bytes = b"", headers: Optional[dict] = None, stream: Optional[str] = None) -> api.PubAck:
        headers = dict(headers or {})
        if stream is not None:
            headers["Nats-Expected-Stream"] = stream
        try:
            msg = self._loop.run(self._nc.request(subject, payload, timeout=5, headers=headers or None))
        except NoRespondersError:
            raise NoStreamResponseError(subject) from None
        resp = json.loads(msg.data)
        if "error" in resp:
            raise error_from_response(resp["error"])
        return api.PubAck.from_response(resp)

    def get_msg(self, stream: str, seq: Optional[int] = None, last_by_subj: Optional[str] = None, next_by_subj: Optional[str] = None) -> api.RawStreamMsg:
        req: dict = {}
        if seq is not None:
            req["seq"] = seq
        if last_by_subj is not None:
            req["last_by_subj"] = last_by_subj
        if next_by_subj is not None:
            req["next_by_subj"] = next_by_subj
        m = self._request(f"$JS.API.STREAM.MSG.GET.{stream}", req)["message"]
        hdrs = base64.b64decode(m["hdrs"]) if m.get("hdrs") else None
        return api.RawStreamMsg(
            subject=m["subject"],
            seq=m["seq"],
            data=base64.b64decode(m["data"]) if m.get("data") else b"",
            hdrs=hdrs,
            headers=_parse_headers(hdrs) if hdrs else None,
            stream=stream,
            time=_time(m.get("time")),
        )

    def get_last_msg(self, stream: str, subject: str) -> api.RawStreamMsg:
        return self.get_msg(stream, last_by_subj=subject)

    def delete_msg(self, stream: str, seq: int) -> bool:
        return self._request(f"$JS.API.STREAM.MSG.DELETE.{stream}", {"seq": seq})["success"]

    # -- consumers
    def _consumer_request(self, stream: str, config: Optional[api.ConsumerConfig], params: dict, action: Optional[str]) -> api.ConsumerInfo:
        config = (config or api.ConsumerConfig()).evolve(**params)
        req: dict = {"stream_name": stream, "config": consumer_config_to_wire(config)}
        if action:
            req["action"] = action
        name = config.name or config.durable_name
        if name and not _subject_token_ok(name):
            # A name the API subject cannot carry ("a.b", "a b") is invalid
            # anyway; let the server judge it from the request body, where it
            # checks name and durable_name by the same rule (see test_consumer_config).
            req["config"].pop("durable_name", None)
            req["config"]["name"] = name
            subject = f"$JS.API.CONSUMER.CREATE.{stream}"
        elif config.name:
            subject = f"$JS.API.CONSUMER.CREATE.{stream}.{config.name}"
        elif config.durable_name:
            subject = f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{config.durable_name}"
        else:
            subject = f"$JS.API.CONSUMER.CREATE.{stream}"
        return consumer_info_from_wire(self._request(subject, req))

    def add_consumer(self, stream: str, config: Optional[api.ConsumerConfig] = None, **params) -> api.ConsumerInfo:
        """Create or update (nats-py's add_consumer: no action in the request)."""
        return self._consumer_request(stream, config, params, None)

    def create_consumer(self, stream: str, config: Optional[api.ConsumerConfig] = None, **params) -> api.ConsumerInfo:
        """Create only: an existing consumer with a different config -> 10148."""
        return self._consumer_request(stream, config, params, "create")

    def update_consumer(self, stream: str, config: Optional[api.ConsumerConfig] = None, **params) -> api.ConsumerInfo:
        """Update only: a missing consumer -> 10149."""
        return self._consumer_request(stream, config, params, "update")

    def delete_consumer(self, stream: str, consumer: str) -> bool:
        return self._request(f"$JS.API.CONSUMER.DELETE.{stream}.{consumer}")["success"]

    def consumer_info(self, stream: str, consumer: str) -> api.ConsumerInfo:
        return consumer_info_from_wire(self._request(f"$JS.API.CONSUMER.INFO.{stream}.{consumer}"))

    def consumers_info(self, stream: str) -> list[api.ConsumerInfo]:
        resp = self._request(f"$JS.API.CONSUMER.LIST.{stream}", {"offset": 0})
        return [consumer_info_from_wire(c) for c in resp.get("consumers") or []]

    def find_stream_name_by_subject(self, subject: str) -> str:
        streams = self._request("$JS.API.STREAM.NAMES", {"subject": subject}).get("streams") or []
        if not streams:
            raise api_error(10059)
        return streams[0]

    def pull_subscribe(self, subject: str, durable: Optional[str] = None, stream: Optional[str] = None, config: Optional[api.ConsumerConfig] = None) -> PullSubscription:
        """nats-py's pull_subscribe: bind ``durable`` if it exists, else create
        it (or an ephemeral with a generated name) filtered on ``subject``
        unless ``config`` sets filter_subjects."""
        if stream is None:
            stream = self.find_stream_name_by_subject(subject)
        if durable:
            try:
                self.consumer_info(stream, durable)
                return PullSubscription(self, stream, durable)
            except ConsumerNotFoundError:
                pass
        config = config or api.ConsumerConfig()
        if not config.filter_subjects:
            config = config.evolve(filter_subject=subject)
        if durable:
            config = config.evolve(name=durable, durable_name=durable)
        else:
            config = config.evolve(name=self._nc._nuid.next().decode())
        info = self.add_consumer(stream, config)
        return PullSubscription(self, stream, info.name)

    def pull_subscribe_bind(self, consumer: Optional[str] = None, stream: Optional[str] = None, durable: Optional[str] = None) -> PullSubscription:
        if not stream:
            raise ValueError("nats: stream name is required")
        name = durable or consumer
        if not name:
            raise ValueError("nats: consumer name is required")
        return PullSubscription(self, stream, name)

    def _wrap(self, m) -> Msg:
        return Msg(self, m.subject, m.data, dict(m.headers) if m.headers else None, m.reply)
