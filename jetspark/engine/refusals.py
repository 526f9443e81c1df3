"""Publish headers for server features the embedded engine does not implement.

nats-server refuses a message that asks, through a header, for a feature its
stream does not have enabled; the engine refuses such a message as the server
refuses it on a stream without the feature: same ``code``, ``err_code`` and
description, at the same point of the server's order of checks
(docs/semantics.md §3.6), so nothing is stored and no ``Nats-Msg-Id`` is
recorded.  The features and their headers:

- per-message TTL (``allow_msg_ttl``, which the engine implements: msg_ttl.py):
  ``Nats-TTL`` on a stream without it -> 10166; 10165 when the value is not a TTL,
  on any stream;
- counters (``allow_msg_counter``): ``Nats-Incr`` -> 10168, 10171 when the value
  is not an integer;
- message schedules (``allow_msg_schedules``): ``Nats-Schedule``,
  ``Nats-Schedule-Time-Zone`` (when it names no time zone) -> 10188;
  ``Nats-Schedule-Next``/``Nats-Scheduler`` -> 10212 (or 10188 for a
  well-formed purge);
- atomic batches (``allow_atomic``): ``Nats-Batch-Id`` -> 10174;
- ``Nats-Stream-Source``, which only a stream's own sourcing may set -> 10227.

A header block longer than 64 KiB is refused too (10097), as the server keeps
its length in 16 bits.

A header with an empty value counts as absent, as on the server.  Message
tracing (``Nats-Trace-Dest``) has no server error to give: the engine cannot
send trace events, so it refuses the message with a ``BadRequestError`` that
says so.  ``Nats-Request-Info`` is removed before the message is stored, as
the server removes it.  Tests: tests/contract/test_refused_features.py.
"""

from __future__ import annotations

import re
from typing import Optional

from jetspark import err_codes as E
from jetspark.engine.msg_ttl import TTL, parse_ttl
from jetspark.errors import BadRequestError
from jetspark.protocol import headers as H

INCR = "Nats-Incr"
SCHEDULE = "Nats-Schedule"
SCHEDULE_TIME_ZONE = "Nats-Schedule-Time-Zone"
SCHEDULE_NEXT = "Nats-Schedule-Next"
SCHEDULER = "Nats-Scheduler"
BATCH_ID = "Nats-Batch-Id"
STREAM_SOURCE = "Nats-Stream-Source"
TRACE_DEST = "Nats-Trace-Dest"
REQUEST_INFO = "Nats-Request-Info"

# The server's descriptions (HTTP 400 each).
_ERRORS = {
    E.MESSAGE_TTL_INVALID: "invalid per-message TTL",
    E.MESSAGE_TTL_DISABLED: "per-message TTL is disabled",
    E.MESSAGE_INCR_DISABLED: "message counters is disabled",
    E.MESSAGE_INCR_INVALID: "message counter increment is invalid",
    E.ATOMIC_PUBLISH_DISABLED: "atomic publish is disabled",
    E.MESSAGE_SCHEDULES_DISABLED: "message schedules is disabled",
    E.MESSAGE_SCHEDULES_SCHEDULER_INVALID: "message schedules invalid scheduler",
    E.MESSAGE_STREAM_SOURCE_HEADER_NOT_ALLOWED: "message stream source header is not allowed",
    E.STREAM_HEADER_EXCEEDS_MAXIMUM: "header size exceeds maximum allowed of 64k",
}
MAX_HEADER = 65535  # the server keeps a header block's length in 16 bits


def refused(err_code: int) -> BadRequestError:
    return BadRequestError(400, err_code, _ERRORS[err_code])


def _value(hdr: bytes, key: str) -> Optional[str]:
    """The header's value, None when absent or empty (the server's test is its length)."""
    return H.lookup(hdr, key) or None


# ---------------------------------------------------------------------- the checks, in the server's order


def strip_request_info(hdr: bytes) -> bytes:
    """The header block without ``Nats-Request-Info`` lines (the server drops them on arrival)."""
    needle = ("\r\n" + REQUEST_INFO + ":").encode()
    if needle not in hdr:
        return hdr
    lines = hdr.split(b"\r\n")
    kept = [ln for ln in lines[1:] if not ln.startswith(needle[2:])]
    return b"\r\n".join([lines[0], *kept])


def check_trace(hdr: bytes) -> None:
    if _value(hdr, TRACE_DEST) is not None:
        raise BadRequestError(
            400,
            E.BAD_REQUEST,
            f"message tracing ({TRACE_DEST} header) is not supported by the embedded engine; "
            "publish without it, or trace on a nats-server",
        )


def check_batch(hdr: bytes) -> None:
    """After sealed and size: a message of an atomic batch."""
    if _value(hdr, BATCH_ID) is not None:
        raise refused(E.ATOMIC_PUBLISH_DISABLED)


def check_incr(hdr: bytes) -> None:
    """First of the header checks: a counter increment."""
    value = _value(hdr, INCR)
    if value is None:
        return
    if not re.fullmatch(r"[+-]?[0-9]+", value):
        raise refused(E.MESSAGE_INCR_INVALID)
    raise refused(E.MESSAGE_INCR_DISABLED)


def check_ttl_enabled(hdr: bytes) -> None:
    """After Nats-Expected-Stream, on a stream without ``allow_msg_ttl``: a valid TTL asks for
    a feature the stream lacks."""
    value = _value(hdr, TTL)
    if value is not None and parse_ttl(value) not in (0, None):
        raise refused(E.MESSAGE_TTL_DISABLED)


def check_schedules(hdr: bytes, subject: str) -> None:
    """After the expected sequences: schedules, then Nats-Stream-Source."""
    if _value(hdr, SCHEDULE) is not None:
        raise refused(E.MESSAGE_SCHEDULES_DISABLED)
    zone = H.lookup(hdr, SCHEDULE_TIME_ZONE)
    if zone is not None and not _known_zone(zone):
        raise refused(E.MESSAGE_SCHEDULES_DISABLED)
    nxt = _value(hdr, SCHEDULE_NEXT)
    scheduler = _value(hdr, SCHEDULER)
    if nxt is not None:
        if nxt != "purge" or scheduler is None or scheduler == subject or not _publish_subject(scheduler):
            raise refused(E.MESSAGE_SCHEDULES_SCHEDULER_INVALID)
        raise refused(E.MESSAGE_SCHEDULES_DISABLED)
    if scheduler is not None:
        raise refused(E.MESSAGE_SCHEDULES_SCHEDULER_INVALID)
    if _value(hdr, STREAM_SOURCE) is not None:
        raise refused(E.MESSAGE_STREAM_SOURCE_HEADER_NOT_ALLOWED)


def check_header_size(hdr: bytes) -> None:
    """After the size limit and an atomic batch, before every other header check: a header
    block the server cannot store."""
    if len(hdr) > MAX_HEADER:
        raise refused(E.STREAM_HEADER_EXCEEDS_MAXIMUM)


def check_ttl_valid(hdr: bytes) -> int:
    """Before the discard-new limits: a Nats-TTL that is not a TTL.  Returns the TTL (parse_ttl's
    value; 0: none), which the publish then uses rather than parse it again."""
    value = _value(hdr, TTL)
    if value is None:
        return 0
    ttl = parse_ttl(value)
    if ttl is None:
        raise refused(E.MESSAGE_TTL_INVALID)
    return ttl


# ---------------------------------------------------------------------- values as the server reads them


def _known_zone(name: str) -> bool:
    """A time zone Go's time.LoadLocation knows (an empty one is refused)."""
    if not name:
        return False
    if name in ("UTC", "Local"):
        return True
    try:
        import zoneinfo

        zoneinfo.ZoneInfo(name)
    except (ValueError, OSError, zoneinfo.ZoneInfoNotFoundError):
        return False
    return True


def _publish_subject(subject: str) -> bool:
    tokens = subject.split(".")
    return all(t and t not in ("*", ">") and not any(c.isspace() for c in t) for t in tokens)
