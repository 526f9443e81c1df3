"""What the commands print: aligned tables and key/value blocks for people, JSON for machines,
progress bars on terminals.

Every read command takes the flags of ``output_options`` (today ``--json``);
long work takes those of ``progress_options``.  JSON output is the public
dataclasses' ``as_dict()`` made JSON-safe: durations stay float seconds,
times become RFC 3339 strings in UTC, enums their wire values, and message
bodies UTF-8 text, or base64 with ``"data_encoding": "base64"`` when they are
not text.  Listing commands print one JSON document (an array); commands that
stream messages or acks print JSON Lines, one object per line.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import json
import sys
import threading
from enum import Enum
from typing import Any, Callable, Iterator, Optional, Sequence

import click

from jetspark.api import rfc3339
from jetspark.cli.parse import format_duration, format_size

__all__ = [
    "Progress",
    "body_fields",
    "cluster_pairs",
    "emit_json",
    "emit_json_line",
    "fmt_age",
    "fmt_ago",
    "fmt_count",
    "fmt_date",
    "fmt_limit",
    "fmt_time",
    "jsonable",
    "kv_block",
    "output_options",
    "pair_diff",
    "plural",
    "progress",
    "progress_options",
    "replicas_text",
    "rfc3339",
    "table",
    "wants_progress",
]


# ---------------------------------------------------------------------- shared flags


def output_options(fn: Callable) -> Callable:
    """The output flags every read command shares: ``--json``."""
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of text.")(fn)


def progress_options(fn: Callable) -> Callable:
    """The flag every long-running command shares: ``--progress/--no-progress``."""
    return click.option(
        "--progress/--no-progress",
        "show_progress",
        default=None,
        help="Show a progress bar with rate and ETA on stderr (default: only when stderr is a terminal).",
    )(fn)


# ---------------------------------------------------------------------- JSON


def jsonable(value: Any) -> Any:
    """Dataclasses, enums, datetimes and bytes -> plain JSON values."""
    if hasattr(value, "as_dict") and callable(value.as_dict):
        return jsonable(value.as_dict())
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, _dt.datetime):
        return rfc3339(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return body_fields(bytes(value))["data"]
    return value


def body_fields(data: Optional[bytes]) -> dict:
    """A message body for JSON: text as is, anything else base64 with ``data_encoding``."""
    data = data or b""
    try:
        return {"data": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"data": base64.b64encode(data).decode("ascii"), "data_encoding": "base64"}


def emit_json(value: Any) -> None:
    click.echo(json.dumps(jsonable(value), indent=2))


def emit_json_line(value: Any) -> None:
    click.echo(json.dumps(jsonable(value), separators=(",", ":")))


# ---------------------------------------------------------------------- human output


def table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = (), title: Optional[str] = None
) -> str:
    """Columns aligned under their headers; the columns numbered in ``right`` are right-aligned (numbers)."""
    cells = [[str(c) for c in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        return "  ".join(parts).rstrip()

    out = []
    if title:
        out += [title, ""]
    out.append(line(cells[0]))
    out.append("  ".join("─" * w for w in widths))
    out.extend(line(r) for r in cells[1:])
    return "\n".join(out)


def kv_block(pairs: Sequence[tuple[str, Any]], indent: int = 2) -> str:
    """``key: value`` lines with the keys right-aligned on the colon, as ``nats stream info`` prints them."""
    pairs = [(k, v) for k, v in pairs if v is not None]
    if not pairs:
        return ""
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{' ' * indent}{k.rjust(width)}: {v}" for k, v in pairs)


def pair_diff(old: list[tuple[str, Any]], new: list[tuple[str, Any]]) -> list[str]:
    """``  Label: old -> new`` for each label whose value differs (in the order shown)."""
    a, b = dict(old), dict(new)
    labels = list(a) + [k for k in b if k not in a]
    return [f"  {k}: {a.get(k, '-')} -> {b.get(k, '-')}" for k in labels if a.get(k, "-") != b.get(k, "-")]


def fmt_count(n: Optional[int]) -> str:
    return "-" if n is None else f"{n:,}"


def plural(n: int, word: str) -> str:
    """``1 message``, ``2 messages``, with thousands separators."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def fmt_limit(n: Optional[int], kind: str = "count") -> str:
    """A limit where -1 (or 0) means unlimited."""
    if n is None or n <= 0:
        return "unlimited"
    return format_size(n) if kind == "bytes" else fmt_count(n)


def fmt_age(seconds: Optional[float]) -> str:
    return "unlimited" if not seconds else format_duration(seconds)


def fmt_date(when: Optional[_dt.datetime]) -> str:
    return "-" if when is None else f"{when.astimezone(_dt.timezone.utc):%Y-%m-%d %H:%M:%S}"


def cluster_pairs(cluster) -> list[tuple[str, Any]]:
    """The "Cluster Information" lines of ``nats stream info`` / ``consumer info`` for a
    ``ClusterInfo`` (empty when there is no cluster to show: a lone server, the engine)."""
    if cluster is None or (cluster.name is None and not cluster.replicas):
        return []
    pairs: list[tuple[str, Any]] = [("Name", cluster.name), ("Leader", cluster.leader)]
    for peer in sorted(cluster.replicas or [], key=lambda p: p.name or ""):
        parts = [peer.name or "?", "current" if peer.current else "outdated"]
        if peer.offline:
            parts.append("OFFLINE")
        if peer.active is not None:
            parts.append(f"seen {peer.active / 1e9:.2f}s ago")
        if peer.lag:
            parts.append(f"{peer.lag:,} operations behind")
        pairs.append(("Replica", ", ".join(parts)))
    return pairs


def replicas_text(cluster) -> str:
    """``n1*, n2, n3`` (the leader starred), as ``nats stream report`` lists a stream's replicas."""
    if cluster is None or (cluster.name is None and not cluster.replicas):
        return ""
    names = [f"{cluster.leader}*"] if cluster.leader else []
    names += [
        (p.name or "?") + ("!" if p.offline else "") for p in sorted(cluster.replicas or [], key=lambda p: p.name or "")
    ]
    return ", ".join(names)


def fmt_ago(when: Optional[_dt.datetime], now: Optional[_dt.datetime] = None) -> str:
    """``5m3s ago``."""
    if when is None:
        return "-"
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"{format_duration(round(max((now - when).total_seconds(), 0.0)))} ago"


def fmt_time(when: Optional[_dt.datetime], now: Optional[_dt.datetime] = None) -> str:
    """``2026-01-02 03:04:05 UTC (5m ago)``."""
    if when is None:
        return "-"
    return f"{fmt_date(when)} UTC ({fmt_ago(when, now)})"


# ---------------------------------------------------------------------- progress


class Progress:
    """A progress bar on stderr (tqdm), or nothing when it is off.

    ``update(n)`` adds work done; ``ticking()`` keeps the elapsed time moving
    while one long call runs that cannot report progress itself.
    """

    def __init__(self, bar=None) -> None:
        self._bar = bar

    @property
    def enabled(self) -> bool:
        return self._bar is not None

    def update(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def move_to(self, done: int, total: Optional[int] = None) -> None:
        """Set the work done to ``done`` (of ``total``, once it is known): for calls that
        report progress as ``progress(done, total)`` (backup_stream, restore_stream)."""
        if self._bar is not None:
            if total is not None and self._bar.total != total:
                self._bar.total = total
            self._bar.update(done - self._bar.n)

    def set_description(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_description_str(text, refresh=True)

    def write(self, text: str) -> None:
        """A line above the bar (or straight to stderr without one)."""
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        else:
            click.echo(text, err=True)

    @contextlib.contextmanager
    def ticking(self, interval: float = 0.2) -> Iterator[None]:
        if self._bar is None:
            yield
            return
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(interval):
                self._bar.refresh()

        t = threading.Thread(target=tick, name="jetspark-progress", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join()


def wants_progress(show: Optional[bool]) -> bool:
    """``--progress`` forces the bar, ``--no-progress`` hides it; by default it shows only on a terminal."""
    if show is not None:
        return show
    stream = sys.stderr
    return bool(getattr(stream, "isatty", None) and stream.isatty())


@contextlib.contextmanager
def progress(
    total: Optional[int], desc: str, unit: str = "msg", show: Optional[bool] = None, delay: float = 0.3
) -> Iterator[Progress]:
    """A tqdm bar with rate and ETA on stderr, shown after ``delay`` seconds of work
    so quick runs do not flash one; nothing at all when piped."""
    if not wants_progress(show):
        yield Progress()
        return
    from tqdm import tqdm

    bar = tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=total is not None or unit == "B",
        unit_divisor=1024 if unit == "B" else 1000,
        file=sys.stderr,
        dynamic_ncols=True,
        delay=delay if show is None else 0,
        leave=False,
        mininterval=0.1,
    )
    try:
        yield Progress(bar)
    finally:
        bar.close()
