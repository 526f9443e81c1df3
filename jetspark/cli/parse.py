"""Durations, sizes and the other small values the command line reads, parsed like the ``nats`` CLI.

Durations (``--max-age 1h30m``, ``--wait 500ms``) are Go duration strings
with the ``nats`` CLI's extra units (choria-io/fisk ``ParseDuration``)::

    ns  us (µs)  ms  s  m  h       as Go's time.ParseDuration
    d / D        a day of 24 hours
    w / W        a week of 7 days
    M            a month of 30 days (m is minutes)
    y / Y        a year of 365 days

Parts add up (``1h30m``, ``1d12h``, ``1.5h``); ``0`` alone is zero.  The
result is float seconds, jetspark's unit for every duration.

Sizes (``--max-bytes 10MB``, ``--max-msg-size 1GiB``) are 1024-based like
the ``nats`` CLI (``ParseStringAsBytes``): ``B``, ``K``/``KB``/``KiB``,
``M``/``MB``/``MiB``, ``G``/``GB``/``GiB``, ``T``/``TB``/``TiB``, any case,
so ``10MB`` is 10 × 2**20 bytes.  A plain number is bytes; a negative number
means unlimited (-1).
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Iterable, Optional

import click

__all__ = [
    "DURATION",
    "SIZE",
    "Deliver",
    "DeliverType",
    "format_duration",
    "format_size",
    "parse_deliver",
    "parse_duration",
    "parse_header",
    "parse_size",
    "split_list",
]

_UNITS = r"(ns|us|µs|μs|ms|s|m|h|d|D|w|W|M|y|Y)"
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_DURATION_PART = re.compile(_NUMBER + r"\s*" + _UNITS)
_DURATION = re.compile(r"(?:\s*" + _NUMBER + r"\s*" + _UNITS + r")+\s*")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "D": 86400.0,
    "w": 7 * 86400.0,
    "W": 7 * 86400.0,
    "M": 30 * 86400.0,
    "y": 365 * 86400.0,
    "Y": 365 * 86400.0,
}


def parse_duration(text: str) -> float:
    """``"1h30m"`` -> 5400.0 seconds; raises ValueError naming the accepted units."""
    s = text.strip()
    if s in ("0", "0.0"):
        return 0.0
    sign = 1.0
    if s and s[0] in "+-":
        sign, s = (-1.0 if s[0] == "-" else 1.0), s[1:].lstrip()
    if not _DURATION.fullmatch(s):
        raise ValueError(
            f"invalid duration {text!r}: use a number with a unit, e.g. 500ms, 30s, 5m, 1h30m, 1d, 1w (units ns, us, "
            "ms, s, m, h, d, w, M for months, y)"
        )
    total = sum(float(m.group(1)) * _UNIT_SECONDS[m.group(2)] for m in _DURATION_PART.finditer(s))
    # The float sum of 0.1 + 0.2 style parts would print as 0.30000000000000004;
    # nanoseconds are the finest unit, so round there.
    return sign * round(total, 9)


def format_duration(seconds: Optional[float]) -> str:
    """Seconds -> the shortest duration string ``parse_duration`` reads back: 5400 -> ``1h30m``."""
    if seconds is None:
        return "-"
    if seconds < 0:
        return "-" + format_duration(-seconds)
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86400 * 10**9), ("h", 3600 * 10**9), ("m", 60 * 10**9), ("s", 10**9)):
        if ns >= size:
            n, ns = divmod(ns, size)
            out.append(f"{n}{unit}")
    for unit, size in (("ms", 10**6), ("us", 10**3), ("ns", 1)):
        if ns >= size:
            n, ns = divmod(ns, size)
            out.append(f"{n}{unit}")
    return "".join(out)


_SIZE = re.compile(r"(\d+)\s*([A-Za-z]+)")
_SIZE_SHIFT = {
    "B": 0,
    "K": 10,
    "KB": 10,
    "KIB": 10,
    "M": 20,
    "MB": 20,
    "MIB": 20,
    "G": 30,
    "GB": 30,
    "GIB": 30,
    "T": 40,
    "TB": 40,
    "TIB": 40,
}


def parse_size(text: str) -> int:
    """``"10MB"`` -> 10485760 (1024-based, as the nats CLI); negative -> -1 (unlimited)."""
    s = text.strip()
    if s.startswith("-"):
        if re.fullmatch(r"-\d+", s):
            return -1
        raise ValueError(f"invalid size {text!r}: a negative size must be a plain number (-1 means unlimited)")
    if s.isdigit():
        return int(s)
    m = _SIZE.fullmatch(s)
    if not m or m.group(2).upper() not in _SIZE_SHIFT:
        raise ValueError(
            f"invalid size {text!r}: use a number of bytes or one ending in B, K, KB, KiB, M, MB, MiB, G, GB, GiB, T, "
            "TB or TiB (1024-based)"
        )
    return int(m.group(1)) << _SIZE_SHIFT[m.group(2).upper()]


def format_size(n: Optional[int]) -> str:
    """Bytes -> ``"1.5 KiB"`` (IEC units, as the nats CLI prints them); -1 -> ``unlimited``."""
    if n is None:
        return "-"
    if n < 0:
        return "unlimited"
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


class _Duration(click.ParamType):
    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class _Size(click.ParamType):
    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = _Duration()
SIZE = _Size()


def split_list(values: Iterable[str]) -> list[str]:
    """Repeated and comma/space separated values -> one list: ``("a,b", "c")`` -> ``[a, b, c]``."""
    out: list[str] = []
    for v in values:
        out.extend(p for p in re.split(r"[,\s]+", v) if p)
    return out


def parse_header(text: str) -> tuple[str, str]:
    """``"K:V"`` (or ``K=V``) -> ``(K, V)``; the nats CLI's ``-H K:V`` form."""
    for sep in (":", "="):
        key, found, value = text.partition(sep)
        if found and key.strip():
            return key.strip(), value.strip()
    raise ValueError(f"invalid header {text!r}: use KEY:VALUE")


class Deliver:
    """Where a consumer or a stream read starts: one of DeliverPolicy's values plus its option."""

    __slots__ = ("policy", "seq", "time")

    def __init__(self, policy: str, seq: Optional[int] = None, time: Optional[_dt.datetime] = None) -> None:
        self.policy, self.seq, self.time = policy, seq, time

    def __repr__(self) -> str:
        return f"Deliver({self.policy!r}, seq={self.seq}, time={self.time})"


_DELIVER_WORDS = {
    "all": "all",
    "last": "last",
    "new": "new",
    "subject": "last_per_subject",
    "last_per_subject": "last_per_subject",
    "last-per-subject": "last_per_subject",
}


def parse_deliver(text: str, now: Optional[_dt.datetime] = None) -> Deliver:
    """The nats CLI's ``--deliver``: all, last, new, subject (last per subject), a
    start sequence (``100``), a duration back from now (``1h``) or an RFC 3339 time."""
    s = text.strip()
    word = _DELIVER_WORDS.get(s.lower())
    if word:
        return Deliver(word)
    if s.isdigit():
        if int(s) < 1:
            raise ValueError("a start sequence is 1 or more")
        return Deliver("by_start_sequence", seq=int(s))
    now = now or _dt.datetime.now(_dt.timezone.utc)
    try:
        return Deliver("by_start_time", time=now - _dt.timedelta(seconds=parse_duration(s)))
    except ValueError:
        pass
    try:
        when = _dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"invalid start {text!r}: use all, last, new, subject, a sequence number, "
            "a duration back from now (1h) or an RFC 3339 time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return Deliver("by_start_time", time=when)


class DeliverType(click.ParamType):
    name = "deliver"

    def convert(self, value, param, ctx):
        if isinstance(value, Deliver):
            return value
        try:
            return parse_deliver(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def parse_metadata(items) -> dict[str, str]:
    """``--metadata`` values (``KEY=VALUE``, or ``KEY: VALUE`` as a header) as a dict, for
    streams and consumers alike."""
    meta = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            try:
                key, value = parse_header(item)
            except ValueError:
                raise click.BadParameter(f"{item!r}: use KEY=VALUE", param_hint="--metadata") from None
        meta[key.strip()] = value.strip()
    return meta
