"""Per-message TTL and subject delete markers: the values, as nats-server 2.15 reads and writes them.

Pure functions, no store: what a ``Nats-TTL`` value means (``parse_ttl``), when a
message with one expires (``deadline``), the header a stream with
``subject_delete_marker_ttl`` puts on a short TTL (``raise_ttl``), and the marker it
leaves when expiry removes a subject's last message (``marker_header``, ``is_marker``).
Where the engine applies them: expiry.py (when), ttl_index.py (which messages), stream.py
(the publish checks).  Each value here is the server's, pinned by
tests/contract/test_msg_ttl.py and tests/engine/test_msg_ttl_parse.py.
"""

from __future__ import annotations

import re
from typing import Optional

from jetspark.protocol import headers as H

TTL = "Nats-TTL"
MARKER_REASON = "Nats-Marker-Reason"
# The reason the server writes: an expiry (max_age or a TTL) removed the subject's last message.
MAX_AGE_REASON = "MaxAge"
KV_OPERATION = "KV-Operation"  # a key-value bucket's PURGE is a marker of its own

NEVER = -1  # parse_ttl's "never expires"
_NS = 1_000_000_000
_I64 = 1 << 64

_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def go_duration(text: str) -> Optional[float]:
    """Seconds, as Go's time.ParseDuration reads ``text`` ("1h30m", "1.5s", "0"), or None."""
    sign = 1.0
    if text[:1] in ("+", "-"):
        sign, text = (-1.0 if text[0] == "-" else 1.0), text[1:]
    if text == "0":
        return 0.0
    if not text:
        return None
    total, pos = 0.0, 0
    while pos < len(text):
        m = _GO_PART.match(text, pos)
        if not m or m.group(1) in ("", "."):
            return None
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    if total * 1e9 > 2**63 - 1:
        return None
    return sign * total


def parse_ttl(value: str) -> Optional[int]:
    """A Nats-TTL value as the server reads it: ``NEVER`` for "never" (any case), the whole
    seconds of a Go duration of at least 1 s ("1s", "1.5s" -> 1, "1h30m") or of a plain
    decimal number ("60"), 0 for a plain number that is 0 ("00": no TTL); None when it is
    not a TTL (the server's 10165: "0", "500ms", "-1", "+5", "1e3", past int64)."""
    if value.lower() == "never":
        return NEVER
    dur = go_duration(value)
    if dur is not None:
        return int(dur) if dur >= 1 else None
    if value.isascii() and value.isdigit() and int(value) <= 2**63 - 1:
        return int(value)
    return None


def header_ttl(hdr: bytes) -> int:
    """The TTL of a stored message's header block: seconds, ``NEVER``, or 0 (none, or a value
    that is not a TTL: the server stores none of those on a TTL stream)."""
    value = H.lookup(hdr, TTL) if hdr else None
    if not value:
        return 0
    ttl = parse_ttl(value)
    return ttl if ttl is not None else 0


def _wrap(n: int) -> int:
    """``n`` as Go's int64 arithmetic leaves it (two's complement wrap-around)."""
    n %= _I64
    return n - _I64 if n >= 1 << 63 else n


def deadline(ts: int, ttl: int) -> int:
    """When a message stored at ``ts`` (ns) with a TTL of ``ttl`` seconds (> 0) expires: the
    server adds them in int64 nanoseconds, so a TTL past ~292 years wraps around (a TTL of
    9223372036854775807 s expires at once; tests/contract/test_msg_ttl.py)."""
    return _wrap(ts + _wrap(ttl * _NS))


def raise_ttl(hdr: bytes, ttl: int) -> bytes:
    """``hdr`` with its Nats-TTL lines replaced by ``Nats-TTL: <ttl>`` at the end, as the server
    rewrites a TTL shorter than the stream's subject_delete_marker_ttl."""
    lines = hdr.split(b"\r\n")
    key = TTL.encode() + b":"
    kept = [ln for ln in lines[1:] if ln and not ln.startswith(key)]
    return b"\r\n".join([b"NATS/1.0", *kept, f"{TTL}: {ttl}".encode(), b"", b""])


def go_seconds(seconds: int) -> str:
    """Whole seconds as Go's time.Duration prints them: "1s", "1m0s", "1h0m0s"."""
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{s}s"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"


def marker_header(marker_ttl: float) -> bytes:
    """The header block of the marker the server stores when an expiry removes a subject's last
    message: its reason, its own TTL (the stream's subject_delete_marker_ttl in whole seconds)
    and a subject rollup, which removes the expired message."""
    return (
        f"NATS/1.0\r\n{MARKER_REASON}: {MAX_AGE_REASON}\r\n{TTL}: {go_seconds(int(marker_ttl))}\r\n"
        f"{H.ROLLUP}: sub\r\n\r\n"
    ).encode()


def is_marker(hdr: bytes) -> bool:
    """Is a message a delete marker (its expiry leaves no new marker)?  A Nats-Marker-Reason,
    or a key-value bucket's purge (``KV-Operation: PURGE``), as the server tells them."""
    if not hdr:
        return False
    return bool(H.lookup(hdr, MARKER_REASON)) or H.lookup(hdr, KV_OPERATION) == "PURGE"
