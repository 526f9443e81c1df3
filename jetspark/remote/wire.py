"""The JetStream JSON API <-> jetspark's dataclasses.

On the wire durations are integer nanoseconds and times RFC 3339 strings;
in the dataclasses durations are float seconds and times aware UTC
datetimes (see ``jetspark.api``).  Keys the dataclasses do not know are
ignored, and the server's own ``_nats.*`` metadata is not part of a config.
"""

from __future__ import annotations

import base64
import copy
import datetime as _dt
import json
import re
from typing import Any, Optional

from jetspark import api
from jetspark import err_codes as E
from jetspark.backend.hooks import token_ok as token_ok  # (the API subject's token rule, one for both backends)
from jetspark.errors import api_error
from jetspark.protocol import headers as H

NS = 1_000_000_000
_DURATIONS_STREAM = ("max_age", "duplicate_window", "subject_delete_marker_ttl")
_DURATIONS_CONSUMER = ("ack_wait", "inactive_threshold", "idle_heartbeat")
_ZERO_TIME = "0001-01-01T00:00:00Z"
_TIME_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


# ---------------------------------------------------------------------- scalars


def s_to_ns(v: Optional[float]) -> Optional[int]:
    return None if v is None else int(round(v * NS))


def ns_to_s(v: Optional[int]) -> Optional[float]:
    return None if v is None else v / NS


def parse_time(v: Optional[str]) -> Optional[_dt.datetime]:
    """An RFC 3339 time from the server (nanosecond precision) -> aware UTC datetime (microseconds)."""
    if not v or v == _ZERO_TIME:
        return None
    return api.parse_rfc3339(v)


def time_to_ns(v: Optional[str]) -> Optional[int]:
    """An RFC 3339 time from the server -> nanoseconds since the epoch (full precision)."""
    if not v or v == _ZERO_TIME:
        return None
    m = _TIME_RE.match(v)
    if not m:
        return api.datetime_to_ns(api.parse_rfc3339(v))
    base, frac, tz = m.groups()
    whole = _dt.datetime.fromisoformat(base + ("+00:00" if tz == "Z" else tz))
    return api.datetime_to_ns(whole) + int((frac or "0")[:9].ljust(9, "0"))


def rfc3339_ns(ns: int) -> str:
    """Nanoseconds since the epoch -> RFC 3339 with all nine digits (the server parses RFC3339Nano)."""
    secs, frac = divmod(int(ns), NS)
    base = (api.EPOCH + _dt.timedelta(seconds=secs)).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{frac:09d}Z"


def strip_server_metadata(meta: Optional[dict]) -> Optional[dict]:
    meta = {k: v for k, v in (meta or {}).items() if not k.startswith("_nats.")}
    return meta or None


# ---------------------------------------------------------------------- streams


def _scaled(value: Any, convert) -> Any:
    """A number converted (s <-> ns); anything else as it is, for the server to judge."""
    return convert(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def stream_config_to_wire(config: api.StreamConfig) -> dict:
    """Every field that is set goes to the server, which decides (nested parts too)."""
    d = config.as_dict()
    for k in _DURATIONS_STREAM:
        if k in d:
            d[k] = _scaled(d[k], s_to_ns)
    limits = d.get("consumer_limits")
    if isinstance(limits, dict) and "inactive_threshold" in limits:
        limits["inactive_threshold"] = _scaled(limits["inactive_threshold"], s_to_ns)
    return _sendable(d)  # (a source's start time: RFC 3339 already, see api.StreamSource)


def _sendable(d: dict) -> dict:
    """``d`` if JSON can carry every field; else the server's 10025 naming the first that it
    cannot (a field the server alone checks, given bytes or an object, would not reach it)."""
    for k, v in d.items():
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            raise api_error(E.INVALID_JSON, err=f"{k} cannot be sent as JSON: {v!r}") from None
    return d


def stream_config_from_wire(d: dict) -> api.StreamConfig:
    d = copy.deepcopy(d)
    for k in _DURATIONS_STREAM:
        if k in d:
            d[k] = ns_to_s(d[k])
    limits = d.get("consumer_limits")
    if isinstance(limits, dict) and limits.get("inactive_threshold") is not None:
        limits["inactive_threshold"] = ns_to_s(limits["inactive_threshold"])
    d["metadata"] = strip_server_metadata(d.get("metadata"))
    return api.StreamConfig.from_response(d)


def stream_state_from_wire(state: dict) -> api.StreamState:
    state = dict(state)
    state["first_ts"] = parse_time(state.get("first_ts"))
    state["last_ts"] = parse_time(state.get("last_ts"))
    state.setdefault("num_deleted", 0)
    state.setdefault("num_subjects", 0)
    return api.StreamState.from_response(state)


def stream_info_from_wire(d: dict) -> api.StreamInfo:
    return api.StreamInfo(
        config=stream_config_from_wire(d["config"]),
        state=stream_state_from_wire(d["state"]),
        created=parse_time(d.get("created")),
        did_create=d.get("did_create"),
        cluster=cluster_info_from_wire(d.get("cluster")),
        mirror=None if d.get("mirror") is None else api.StreamSourceInfo.from_response(d["mirror"]),
        sources=None if d.get("sources") is None else [api.StreamSourceInfo.from_response(s) for s in d["sources"]],
    )


def cluster_info_from_wire(d: Optional[dict]) -> Optional[api.ClusterInfo]:
    if not d:
        return None
    peers = d.get("replicas")
    return api.ClusterInfo(
        leader=d.get("leader"),
        name=d.get("name"),
        replicas=None if peers is None else [api.PeerInfo.from_response(p) for p in peers],
        leader_since=parse_time(d.get("leader_since")),
    )


# ---------------------------------------------------------------------- consumers


def consumer_config_to_wire(config: api.ConsumerConfig) -> dict:
    d = config.as_dict()
    for k in _DURATIONS_CONSUMER:
        if k in d:
            d[k] = s_to_ns(d[k])
    if "backoff" in d:
        d["backoff"] = [s_to_ns(b) for b in d["backoff"]]
    for k in ("opt_start_time", "pause_until"):
        v = getattr(config, k)
        if isinstance(v, _dt.datetime):
            d[k] = api.rfc3339(v)
    return _sendable(d)


def consumer_config_from_wire(d: dict) -> api.ConsumerConfig:
    d = dict(d)
    for k in _DURATIONS_CONSUMER:
        if k in d:
            d[k] = ns_to_s(d[k])
    if d.get("backoff") is not None:
        d["backoff"] = [ns_to_s(b) for b in d["backoff"]]
    for k in ("opt_start_time", "pause_until"):
        if k in d:
            d[k] = parse_time(d[k])
    d["metadata"] = strip_server_metadata(d.get("metadata"))
    return api.ConsumerConfig.from_response(d)


def sequence_info_from_wire(d: Optional[dict]) -> api.SequenceInfo:
    d = d or {}
    return api.SequenceInfo(
        consumer_seq=d.get("consumer_seq", 0),
        stream_seq=d.get("stream_seq", 0),
        last_active=parse_time(d.get("last_active")),
    )


def consumer_info_from_wire(d: dict) -> api.ConsumerInfo:
    return api.ConsumerInfo(
        name=d["name"],
        stream_name=d["stream_name"],
        config=consumer_config_from_wire(d["config"]),
        created=parse_time(d.get("created")),
        delivered=sequence_info_from_wire(d.get("delivered")),
        ack_floor=sequence_info_from_wire(d.get("ack_floor")),
        num_ack_pending=d.get("num_ack_pending", 0),
        num_redelivered=d.get("num_redelivered", 0),
        num_waiting=d.get("num_waiting", 0),
        num_pending=d.get("num_pending", 0),
        cluster=cluster_info_from_wire(d.get("cluster")),
        push_bound=d.get("push_bound") or None,
        paused=d.get("paused") or None,
        pause_remaining=d.get("pause_remaining"),
    )


# ---------------------------------------------------------------------- messages


def raw_msg_from_wire(stream: str, m: dict) -> api.RawStreamMsg:
    hdrs = base64.b64decode(m["hdrs"]) if m.get("hdrs") else None
    return api.RawStreamMsg(
        subject=m["subject"],
        seq=m["seq"],
        data=base64.b64decode(m["data"]) if m.get("data") else b"",
        hdrs=hdrs,
        headers=H.decode(hdrs) if hdrs else None,
        stream=stream,
        time=parse_time(m.get("time")),
    )


def header_str(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def encode_headers(headers: Optional[dict]) -> bytes:
    """A header block as nats-py writes it (list values repeat the key)."""
    return H.encode(headers) if headers else b""
