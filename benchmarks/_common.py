"""What every benchmark script shares: the result table, the machine header, data builders
and the nats-server launcher (the tests' own, natsdev/servers.py).

Only the standard library is imported at the top: bench_engine spawns its RSS
children (row 5) before numpy, pyarrow, nats-py and jetspark are loaded, so
the functions that need those import them when called.  The Makefile's
``make bench`` skips ``_*.py`` files, so this module is not run as a benchmark.
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # jetspark and natsdev/ from this checkout

from natsdev.servers import NatsServer as _TestServer  # noqa: E402
from natsdev.servers import nats_server_binary  # noqa: E402

PAYLOAD_SIZE = 100
SUBJECTS_PER_TABLE = 16


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- results


@dataclass
class Row:
    key: str
    name: str
    value: str = ""
    anchor: str = ""
    ratio: str = ""
    target: str = ""
    result: str = ""
    spread: str = ""
    notes: list[str] = field(default_factory=list)


def not_available(key: str, name: str, target: str, why: str) -> Row:
    return Row(key, name, value=f"not available ({why})", target=target, result="n/a")


def rate(v: float) -> str:
    return f"{v:,.0f} msg/s"


def short(v: float) -> str:
    """1234567 -> 1.23M, for spreads."""
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if abs(v) >= div:
            return f"{v / div:.3g}{unit}"
    return f"{v:.3g}"


def spread(vals: list[float], unit: str = "", fmt: Callable[[float], str] = short) -> str:
    if len(vals) == 1:
        return f"1 run: {fmt(vals[0])}{unit and ' ' + unit}"
    return f"{len(vals)} runs: {fmt(min(vals))}-{fmt(max(vals))}{unit and ' ' + unit}"


def verdict(checks: list[tuple[bool, str]]) -> str:
    failed = [why for ok, why in checks if not ok]
    return "PASS" if not failed else "FAIL (" + "; ".join(failed) + ")"


def chosen_rows(parser, only: str, sections) -> list[str]:
    """The rows ``--only`` names, in its order; an unknown one is a usage error naming the choices."""
    rows = [s.strip() for s in only.split(",") if s.strip()]
    unknown = sorted(set(rows) - set(sections))
    if unknown:
        parser.error(f"--only: unknown rows {unknown}; choose from {', '.join(sections)}")
    return rows


def exit_on_sigterm() -> None:
    """A SIGTERM (a CI timeout, kill) ends the script through its ``finally`` blocks, so
    servers it started are stopped and its temporary directories removed."""

    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)


def run_rows(sections: list[tuple[str, str, Callable[[], list[Row]]]], only: set[str], rows: list[Row]) -> int:
    """Run each wanted row; a row that raises becomes an ERROR row. Returns the error count."""
    errors = 0
    for key, title, fn in sections:
        if key not in only:
            continue
        log(f"row {key}: {title}")
        try:
            rows.extend(fn())
        except Exception as exc:
            errors += 1
            traceback.print_exc()
            rows.append(Row(key, title, value=f"error: {type(exc).__name__}: {exc}"[:160], result="ERROR"))
    return errors


def print_table(rows: list[Row], anchor: str = "nats-server anchor (median)", value: str = "jetspark (median)") -> None:
    head = ["#", "benchmark", value, anchor, "ratio", "target", "result", "spread (min-max)"]
    body = [
        [r.key, r.name, r.value, r.anchor or "-", r.ratio or "-", r.target or "-", r.result, r.spread] for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"

    print(line(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for cells in body:
        print(line(cells))
    notes = [(r.key, n) for r in rows for n in r.notes]
    if notes:
        print()
        for key, n in notes:
            print(f"- ({key}) {n}")


# --------------------------------------------------------------------------- machine


def read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def machine_info(base: Path, title: str, setup: str, sizes: object, quick: bool) -> list[str]:
    """The header every benchmark prints: when, where, which versions, and how it was set up."""
    import numpy as np
    import pyarrow as pa

    import jetspark

    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in read_text("/proc/cpuinfo").splitlines() if ln.startswith("model name")),
        platform.processor() or "?",
    )
    mem_kb = next(
        (int(ln.split()[1]) for ln in read_text("/proc/meminfo").splitlines() if ln.startswith("MemTotal:")), 0
    )
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        server = subprocess.run(
            [nats_server_binary(), "--version"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        server = "?"
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = "?"
    mounts = [ln.split() for ln in read_text("/proc/mounts").splitlines()]
    fs = max(
        (m for m in mounts if len(m) > 2 and str(base).startswith(m[1])),
        key=lambda m: len(m[1]),
        default=["?", "?", "?"],
    )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return [
        f"{title}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, mode: {'--quick' if quick else 'full'}",
        "",
        f"- machine: {os.cpu_count()} cores ({usable} usable), {cpu}, {mem_kb / 1048576:.1f} GiB RAM, "
        f"{platform.system()} {platform.release()}",
        f"- load average at start: {load}",
        f"- python {platform.python_version()}, pyarrow {pa.__version__}, numpy {np.__version__}, "
        f"nats-py {metadata.version('nats-py')}, {server}",
        f"- jetspark {jetspark.__version__} at {rev}; store and server data under {base} ({fs[2]})",
        f"- {setup}",
        f"- sizes: {sizes}",
    ]


# --------------------------------------------------------------------------- the nats-server anchor


class NatsServer(_TestServer):
    """The tests' nats-server launcher (natsdev/servers.py), its store under the benchmark's directory."""

    def __init__(self, base: Optional[Path] = None) -> None:
        super().__init__(base=None if base is None else str(base))


# --------------------------------------------------------------------------- data


def payloads(n: int, seed: int = 0):
    """n random 100-byte payloads as an Arrow binary column, built without Python objects."""
    import numpy as np
    import pyarrow as pa

    raw = np.random.default_rng(seed).bytes(n * PAYLOAD_SIZE)
    offsets = np.arange(0, (n + 1) * PAYLOAD_SIZE, PAYLOAD_SIZE, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])


def message_table(n: int, prefix: str):
    """subject (string: <prefix>.0 .. <prefix>.15, round robin), data (binary, 100 bytes)."""
    import numpy as np
    import pyarrow as pa

    names = pa.array([f"{prefix}.{i}" for i in range(SUBJECTS_PER_TABLE)], pa.string())
    subject = names.take(pa.array(np.arange(n, dtype=np.int64) % SUBJECTS_PER_TABLE))
    return pa.table({"subject": subject, "data": payloads(n)})


def read_rate(js, stream: str, n: int) -> float:
    """Messages per second of one ``read_batches(stream, 1, n)`` pass, checked to return n rows."""
    import gc

    gc.collect()
    t = time.perf_counter()
    rows = sum(b.num_rows for b in js.read_batches(stream, 1, n))
    dt = time.perf_counter() - t
    if rows != n:
        raise AssertionError(f"read_batches returned {rows} rows for {n} sequences of {stream}")
    return n / dt


def publish_table(js, table, stream: str, rows_per_call: int) -> None:
    for off in range(0, table.num_rows, rows_per_call):
        chunk = table.slice(off, rows_per_call)
        res = js.publish_batch(chunk, stream=stream)
        if len(res.seqs) != chunk.num_rows:
            raise AssertionError(f"publish_batch returned {len(res.seqs)} seqs for {chunk.num_rows} rows")
