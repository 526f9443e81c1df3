"""The checks of single arguments, configs and requests (``jetspark.validate``'s rules,
stated in its docstring); publish_batch's table is ``jetspark.validate.batch``'s."""

from __future__ import annotations

import datetime as _dt
import math
import numbers
import os
import re
from enum import Enum
from typing import Any, Literal, Mapping, Optional, overload

from jetspark.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    ReplayPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    datetime_to_ns,
    with_params,
)
from jetspark.err_codes import BAD_REQUEST, CONSUMER_NOT_FOUND, INVALID_JSON
from jetspark.errors import BadRequestError, api_error
from jetspark.protocol import headers as hdr
from jetspark.protocol import subjects as subj

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
_NS = 1_000_000_000
# Header names as nats-py accepts them (RFC 7230 token characters).
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Times whose nanoseconds since the epoch fit in int64 (what the engine stores).
_MIN_TIME = _dt.datetime(1677, 9, 22, tzinfo=_dt.timezone.utc)
_MAX_TIME = _dt.datetime(2262, 4, 11, tzinfo=_dt.timezone.utc)


def show(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut short: error messages must stay readable whatever was passed."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_int(value: Any) -> bool:
    """An integer, NumPy's included, but not a bool (JSON would send ``true``)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _float(value: Any) -> float:
    """``float(value)``; an integer too large for a float is infinity (refused as such)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _refuse(name: str, expected: str, value: Any, api: bool, *, type_error: bool = True) -> Exception:
    text = f"{name} must be {expected}, not {show(value)}"
    if api:
        return api_error(INVALID_JSON, err=text)
    return TypeError(text) if type_error else ValueError(text)


# ---------------------------------------------------------------------- scalars


# (overloads: the type checker knows a call that may not return None returns an int)
@overload
def integer(value: Any, name: str, lo: int, hi: int, *, api: bool = ..., optional: Literal[False] = ...) -> int: ...
@overload
def integer(value: Any, name: str, lo: int, hi: int, *, api: bool = ..., optional: bool) -> Optional[int]: ...
def integer(value: Any, name: str, lo: int, hi: int, *, api: bool = False, optional: bool = False) -> Optional[int]:
    """An integer within lo..hi (None passes when optional)."""
    if value is None and optional:
        return None
    what = f"an integer from {lo} to {hi}"
    if not is_int(value):
        raise _refuse(name, what, value, api)
    if not lo <= value <= hi:
        raise _refuse(name, what, value, api, type_error=False)
    return int(value)


@overload
def seq(value: Any, name: str, *, api: bool = ..., optional: Literal[False], hi: int = ...) -> int: ...
@overload
def seq(value: Any, name: str, *, api: bool = ..., optional: bool = ..., hi: int = ...) -> Optional[int]: ...
def seq(value: Any, name: str, *, api: bool = False, optional: bool = True, hi: int = INT64_MAX) -> Optional[int]:
    """A stream sequence: 0..2**63-1 (or up to ``hi``).  Through the API, a value the
    server's uint64 field would take but jetspark cannot hold is 10003."""
    if value is None and optional:
        return None
    if api and is_int(value) and hi < value <= UINT64_MAX:
        raise BadRequestError(
            400, BAD_REQUEST, f"{name} must be at most {hi} (jetspark's sequences are int64), not {value}"
        )
    return integer(value, name, 0, hi, api=api)


def duration(value: Any, name: str, *, api: bool = True) -> Optional[float]:
    """Seconds, sent as int64 nanoseconds: a finite number within that range (None passes).
    Its sign is the caller's rule (the server has its own errors for negatives)."""
    if value is None:
        return None
    what = "a finite number of seconds"
    if not is_real(value):
        raise _refuse(name, what, value, api)
    f = _float(value)
    if not math.isfinite(f) or abs(f * _NS) > INT64_MAX:
        raise _refuse(name, f"{what} (at most {INT64_MAX // _NS} in size)", value, api, type_error=False)
    return f


def timeout(value: Any, name: str = "timeout", *, default: Optional[float] = None) -> float:
    """A wait in seconds: a finite number >= 0 (None is ``default`` when there is one)."""
    if value is None and default is not None:
        return default
    what = "a finite number of seconds >= 0"
    if not is_real(value):
        raise TypeError(f"{name} must be {what}, not {show(value)}")
    f = _float(value)
    if not math.isfinite(f) or f < 0 or f * _NS > INT64_MAX:
        raise ValueError(f"{name} must be {what}, not {show(value)}")
    return f


@overload
def boolean(value: Any, name: str, *, api: bool = ..., optional: Literal[False] = ...) -> bool: ...
@overload
def boolean(value: Any, name: str, *, api: bool = ..., optional: bool) -> Optional[bool]: ...
def boolean(value: Any, name: str, *, api: bool = False, optional: bool = False) -> Optional[bool]:
    if value is None and optional:
        return None
    if not isinstance(value, bool):
        raise _refuse(name, "True or False", value, api)
    return value


def text(value: Any, name: str, *, api: bool = False, optional: bool = True) -> Optional[str]:
    """A str that UTF-8 can encode (no lone surrogates), or None when optional."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _refuse(name, "a str", value, api)
    if not _encodable(value):
        raise _refuse(name, "valid Unicode text (it has a lone surrogate)", value, api, type_error=False)
    return value


def _encodable(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def text_list(value: Any, name: str, *, api: bool = False) -> Optional[list[str]]:
    """A list (or tuple) of str, or None; a lone str is refused, not split into characters."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise _refuse(name, "a list of str", value, api)
    for i, item in enumerate(value):
        text(item, f"{name}[{i}]", api=api, optional=False)
    return list(value)


def string_map(value: Any, name: str, *, api: bool = False) -> Optional[dict[str, str]]:
    """A dict of str to str (metadata), or None."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _refuse(name, "a dict of str to str", value, api)
    for k, v in value.items():
        text(k, f"{name} key {show(k, 30)}", api=api, optional=False)
        text(v, f"{name}[{show(k, 30)}]", api=api, optional=False)
    return dict(value)


def enum(value: Any, cls: type[Enum], name: str) -> Optional[Enum]:
    """An enum member or its value ("limits"), as nats-py takes them; None passes."""
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls(value)
        except ValueError:
            pass
    accepted = ", ".join(repr(m.value) for m in cls)
    raise api_error(INVALID_JSON, err=f"{name} must be one of {accepted} (or {cls.__name__}), not {show(value)}")


def start_time(value: Any, name: str = "opt_start_time") -> Optional[_dt.datetime]:
    """A datetime (naive means UTC, as nats-py assumes) or an RFC 3339 string, as nats-py
    passes it through; returned as an aware UTC datetime the engine can store (int64 ns)."""
    if value is None:
        return None
    if isinstance(value, str):
        parsed = _parse_rfc3339(value)
        if parsed is None:
            raise api_error(INVALID_JSON, err=f"{name} must be a datetime or an RFC 3339 time, not {show(value)}")
        value = parsed
    if not isinstance(value, _dt.datetime):
        raise api_error(INVALID_JSON, err=f"{name} must be a datetime or an RFC 3339 time, not {show(value)}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    value = value.astimezone(_dt.timezone.utc)
    if not _MIN_TIME <= value <= _MAX_TIME:
        raise api_error(
            INVALID_JSON,
            err=f"{name} must be between {_MIN_TIME:%Y-%m-%d} and {_MAX_TIME:%Y-%m-%d}, not {value.isoformat()}",
        )
    return value


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d)[Tt](\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?([Zz]|[+-]\d\d:\d\d)")


def _parse_rfc3339(value: str) -> Optional[_dt.datetime]:
    """RFC 3339 as the server parses it (up to nanoseconds; kept to microseconds)."""
    m = _RFC3339.fullmatch(value)
    if not m:
        return None
    date, clock, frac, tz = m.groups()
    tz = "+00:00" if tz in ("Z", "z") else tz
    try:
        return _dt.datetime.fromisoformat(f"{date}T{clock}.{(frac or '').ljust(6, '0')[:6]}{tz}")
    except ValueError:
        return None


# ---------------------------------------------------------------------- configs

# The server's Go types (nats-server StreamConfig / ConsumerConfig): a number
# outside them is "invalid JSON" there.
_STREAM_INTS = {
    "max_consumers": INT64,
    "max_msgs": INT64,
    "max_bytes": INT64,
    "max_msgs_per_subject": INT64,
    "max_msg_size": INT32,
    "num_replicas": INT64,
}
_STREAM_BOOLS = (
    "discard_new_per_subject",
    "no_ack",
    "sealed",
    "deny_delete",
    "deny_purge",
    "allow_rollup_hdrs",
    "allow_direct",
)
_STREAM_ENUMS: dict[str, type[Enum]] = {"retention": RetentionPolicy, "storage": StorageType, "discard": DiscardPolicy}
_CONSUMER_INTS = {"max_deliver": INT64, "max_waiting": INT64, "max_ack_pending": INT64, "num_replicas": INT64}
_CONSUMER_ENUMS: dict[str, type[Enum]] = {
    "deliver_policy": DeliverPolicy,
    "ack_policy": AckPolicy,
    "replay_policy": ReplayPolicy,
}


def _config_arg(cls, config: Any, params: dict):
    if config is not None and not isinstance(config, (cls, dict)):
        raise TypeError(f"config must be a {cls.__name__}, a dict or None, not {show(config)}")
    return with_params(cls, config, params)


def stream_config(config: Any, params: dict) -> StreamConfig:
    """``add_stream``/``update_stream``'s ``config`` and ``**params`` as one checked
    ``StreamConfig``, every field of the type the server reads (plain ints and floats,
    enum members): the server's 10025 otherwise."""
    c = _config_arg(StreamConfig, config, params)
    out: dict[str, Any] = {
        "name": text(c.name, "name", api=True),
        "description": text(c.description, "description", api=True),
        "subjects": text_list(c.subjects, "subjects", api=True),
        "metadata": string_map(c.metadata, "metadata", api=True),
        "max_age": duration(c.max_age, "max_age"),
        "duplicate_window": duration(c.duplicate_window, "duplicate_window"),
        "first_seq": seq(c.first_seq, "first_seq", api=True),
    }
    for name, (lo, hi) in _STREAM_INTS.items():
        out[name] = integer(getattr(c, name), name, lo, hi, api=True, optional=True)
    for name in _STREAM_BOOLS:
        value = getattr(c, name)
        out[name] = False if value is None else boolean(value, name, api=True)
    for name, cls in _STREAM_ENUMS.items():
        out[name] = enum(getattr(c, name), cls, name)
    return c.evolve(**out)


def consumer_config(config: Any, params: dict) -> ConsumerConfig:
    """``add_consumer``'s ``config`` and ``**params`` as one checked ``ConsumerConfig``
    (see ``stream_config``); ``opt_start_time`` may be an RFC 3339 string, as nats-py allows."""
    c = _config_arg(ConsumerConfig, config, params)
    backoff = c.backoff
    if backoff is not None:
        if not isinstance(backoff, (list, tuple)):
            raise api_error(INVALID_JSON, err=f"backoff must be a list of seconds, not {show(backoff)}")
        backoff = [duration(b, f"backoff[{i}]") for i, b in enumerate(backoff)]
    out: dict[str, Any] = {
        "name": text(c.name, "name", api=True),
        "durable_name": text(c.durable_name, "durable_name", api=True),
        "description": text(c.description, "description", api=True),
        "filter_subject": text(c.filter_subject, "filter_subject", api=True),
        "filter_subjects": text_list(c.filter_subjects, "filter_subjects", api=True),
        "deliver_subject": text(c.deliver_subject, "deliver_subject", api=True),
        "deliver_group": text(c.deliver_group, "deliver_group", api=True),
        "metadata": string_map(c.metadata, "metadata", api=True),
        "opt_start_seq": seq(c.opt_start_seq, "opt_start_seq", api=True),
        "opt_start_time": start_time(c.opt_start_time),
        "ack_wait": duration(c.ack_wait, "ack_wait"),
        "inactive_threshold": duration(c.inactive_threshold, "inactive_threshold"),
        "idle_heartbeat": duration(c.idle_heartbeat, "idle_heartbeat"),
        "backoff": backoff,
        "headers_only": boolean(c.headers_only, "headers_only", api=True, optional=True),
        "mem_storage": boolean(c.mem_storage, "mem_storage", api=True, optional=True),
        "flow_control": boolean(c.flow_control, "flow_control", api=True, optional=True),
    }
    for name, (lo, hi) in _CONSUMER_INTS.items():
        out[name] = integer(getattr(c, name), name, lo, hi, api=True, optional=True)
    for name, cls in _CONSUMER_ENUMS.items():
        out[name] = enum(getattr(c, name), cls, name)
    return c.evolve(**out)


def consumer_name(value: Any) -> str:
    """A consumer argument: a str, else the server's "consumer not found"."""
    if not isinstance(value, str) or not value:
        raise api_error(CONSUMER_NOT_FOUND)
    return value


# ---------------------------------------------------------------------- requests


def filter_subject(value: Any, name: str) -> Optional[str]:
    """An optional subject filter in a request (purge, get, info): a str or None; the
    server's 10025 for anything else."""
    return text(value, name, api=True)


def purge_args(subject: Any, seq_: Any, keep: Any) -> tuple[Optional[str], Optional[int], Optional[int]]:
    """purge_stream's options as the server reads them: filter a str, seq and keep uint64
    (keep may be any uint64: it is a count); an empty filter means none, as on the server;
    a malformed one is refused (the server would purge nothing and report success)."""
    subject = filter_subject(subject, "subject") or None
    if subject is not None and not subj.is_valid(subject):
        raise BadRequestError(
            400, BAD_REQUEST, f"subject {show(subject)} is not a valid subject filter: purge_stream would match nothing"
        )
    return subject, seq(seq_, "seq", api=True), seq(keep, "keep", api=True, hi=UINT64_MAX)


def get_msg_args(seq_: Any, last_by_subj: Any, next_by_subj: Any) -> tuple[Optional[int], Optional[str], Optional[str]]:
    return (
        seq(seq_, "seq", api=True, hi=UINT64_MAX),
        filter_subject(last_by_subj, "last_by_subj"),
        filter_subject(next_by_subj, "next_by_subj"),
    )


# ---------------------------------------------------------------------- publish


def publish_subject_ok(subject: Any) -> bool:
    return isinstance(subject, str) and bool(subject) and not subj.has_whitespace(subject) and _encodable(subject)


def publish_subject(subject: Any, name: str = "subject") -> str:
    """A subject a message can be published to: non-empty text without whitespace
    (the server's 10003 otherwise; empty tokens are left to routing, which finds no stream)."""
    if not publish_subject_ok(subject):
        raise BadRequestError(
            400,
            BAD_REQUEST,
            f"invalid publish {name} {show(subject)}: a subject is non-empty dot-separated tokens without whitespace",
        )
    return subject


def payload(value: Any, name: str = "payload") -> bytes:
    """A message payload: bytes, bytearray or memoryview (as nats-py takes it)."""
    if type(value) is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{name} must be bytes, bytearray or memoryview, not {type(value).__name__}")


def header_value(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {show(value)}")
    if "\r" in value or "\n" in value:
        # A line break would end the header line and start another (a forged Nats-Msg-Id, say).
        raise ValueError(f"{name} must not contain CR or LF: {show(value)}")
    if not _encodable(value):
        raise ValueError(f"{name} must be valid Unicode text (it has a lone surrogate): {show(value)}")
    return value


def header_name(key: Any, name: str = "headers") -> str:
    if not isinstance(key, str):
        raise TypeError(f"{name}: a header name must be a str, not {show(key)}")
    if not _HEADER_NAME.fullmatch(key.strip()):
        raise ValueError(
            f"{name}: invalid header name {show(key)}: use letters, digits and !#$%&'*+-.^_`|~ "
            "(no spaces, colons or line breaks)"
        )
    return key


def headers(value: Any, name: str = "headers") -> Optional[dict]:
    """Message headers: a mapping of names to str values (a list or tuple of str repeats the
    name); None or empty means none.  Names are HTTP tokens and values hold no CR or LF."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict of header names to str values, not {show(value)}")
    for key, v in value.items():
        header_name(key, name)
        if isinstance(v, (list, tuple)):
            for item in v:
                header_value(item, f"{name}[{key!r}]")
        else:
            header_value(v, f"{name}[{key!r}]")
    return dict(value) or None


def publish_headers(value: Any, stream: Any) -> Optional[dict]:
    """publish's ``headers`` and ``stream``: the checked headers, with ``stream`` as the
    ``Nats-Expected-Stream`` header when given (None when there are none)."""
    out = headers(value)
    if stream is not None:
        out = dict(out or {})
        out[hdr.EXPECTED_STREAM] = header_value(text(stream, "stream", optional=False), "stream")
    return out


# ---------------------------------------------------------------------- reads and consumers


def positive(value: Any, name: str, hi: int = INT64_MAX) -> int:
    """A count of at least 1 (batch sizes)."""
    return integer(value, name, 1, hi)


def subject_filters(value: Any, name: str = "subjects") -> Optional[list[str]]:
    """Subject filters of a read: a list of valid subjects (wildcards allowed), or None."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list of subjects, not {show(value)}")
    for i, f in enumerate(value):
        text(f, f"{name}[{i}]", optional=False)
        if not subj.is_valid(f):
            raise BadRequestError(400, BAD_REQUEST, f"{name}[{i}]: invalid subject filter {show(f)}")
    return list(value)


def when(value: Any, name: str = "when") -> int:
    """A point in time: a datetime (naive means UTC) or nanoseconds since the epoch (int64)."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        ns = datetime_to_ns(value)
        return max(INT64[0], min(ns, INT64_MAX))
    return integer(value, name, *INT64)


def path(value: Any, name: str = "url") -> None:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike) or a nats:// URL, not {show(value)}")


def read_args(start_seq: Any, end_seq: Any, subjects: Any, batch_size: Any, headers_: Any):
    """read_batches / ordered_consumer: sequences 0..2**63-1 (or None), subject filters,
    a positive batch size and a bool."""
    return (
        seq(start_seq, "start_seq"),
        seq(end_seq, "end_seq"),
        subject_filters(subjects),
        positive(batch_size, "batch_size"),
        boolean(headers_, "headers"),
    )


def seq_for_bytes_args(lo: Any, hi: Any, max_bytes: Any) -> tuple[int, int, int]:
    return seq(lo, "lo", optional=False), seq(hi, "hi", optional=False), integer(max_bytes, "max_bytes", 0, INT64_MAX)


def pull_subscribe_args(subject: Any, durable: Any, stream: Any, config: Any) -> None:
    text(subject, "subject")
    text(durable, "durable")
    text(stream, "stream")
    if config is not None and not isinstance(config, (ConsumerConfig, dict)):
        raise TypeError(f"config must be a ConsumerConfig, a dict or None, not {show(config)}")


def bind_args(durable: Any, stream: Any, consumer: Any) -> str:
    """pull_subscribe_bind's stream and consumer name (``durable`` or ``consumer``)."""
    text(durable, "durable")
    text(consumer, "consumer")
    if not text(stream, "stream"):
        raise BadRequestError(400, BAD_REQUEST, "pull_subscribe_bind needs stream=")
    name = durable or consumer
    if not name:
        raise BadRequestError(400, BAD_REQUEST, "pull_subscribe_bind needs durable= or consumer=")
    return name


def subscribe_args(
    subject: Any, queue: Any, cb: Any, durable: Any, stream: Any, config: Any, manual_ack: Any, ordered_consumer: Any
) -> None:
    """subscribe's own arguments (the consumer fields it passes on are checked with the config)."""
    text(subject, "subject", optional=False)
    text(queue, "queue")
    text(durable, "durable")
    text(stream, "stream")
    callback(cb)
    if config is not None and not isinstance(config, (ConsumerConfig, dict)):
        raise TypeError(f"config must be a ConsumerConfig, a dict or None, not {show(config)}")
    boolean(manual_ack, "manual_ack")
    if boolean(ordered_consumer, "ordered_consumer") and (durable or queue):
        raise ValueError(
            "ordered_consumer=True takes no durable and no queue: an ordered consumer is an ephemeral of its own"
        )


def callback(value: Any) -> None:
    """A subscription's ``cb``: None or a callable taking the message."""
    if value is not None and not callable(value):
        raise TypeError(f"cb must be a callable taking the message, or None, not {show(value)}")


def subscribe_bind_args(stream: Any, consumer: Any, cb: Any, manual_ack: Any) -> None:
    if not text(stream, "stream"):
        raise BadRequestError(400, BAD_REQUEST, "subscribe_bind needs stream=")
    if not text(consumer, "consumer"):
        raise BadRequestError(400, BAD_REQUEST, "subscribe_bind needs consumer=")
    callback(cb)
    boolean(manual_ack, "manual_ack")


def next_msg_timeout(value: Any) -> Optional[float]:
    """next_msg's wait: None (no limit, as nats-py) or seconds >= 0."""
    return None if value is None else timeout(value)


def fetch_args(batch: Any, timeout_: Any, no_wait: Any, max_bytes: Any) -> tuple[int, float, bool, int]:
    """fetch: a batch of 1..2**31-1 messages, a finite timeout (None: 5 s, nats-py's
    default), no_wait a bool, max_bytes a byte count (None or 0: no limit)."""
    return (
        integer(batch, "batch", 1, INT32[1]),
        timeout(timeout_, "timeout", default=5.0),
        boolean(no_wait, "no_wait"),
        integer(max_bytes, "max_bytes", 0, INT64_MAX, optional=True) or 0,
    )


def nak_delay(value: Any) -> Optional[float]:
    """Msg.nak's delay: None, or seconds >= 0 that fit the server's int64 nanoseconds."""
    if value is None:
        return None
    return timeout(value, "delay")


def query_id(value: Any) -> str:
    """A streaming query's id in the sink registry: non-empty text."""
    text(value, "query_id", optional=False)
    if not value:
        raise ValueError("query_id must be a non-empty str")
    return value
