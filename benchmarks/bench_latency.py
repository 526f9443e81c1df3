"""Publish-to-callback latency across processes: a consumer process woken by a publish in another.

    .venv/bin/python benchmarks/bench_latency.py [--quick] [--dir DIR] [--only 1,2,3,4]

This process publishes, one message every ``--interval`` ms (2 by default: a latency
test, not a throughput one), each payload carrying the ``time.monotonic_ns()`` taken
just before its publish call (CLOCK_MONOTONIC: one clock for every process on the
machine).  A separate consumer process, started per repetition, records ``now -
stamp`` in its callback (or as its iterator returns the message) and acks.

1. engine: ``js.publish`` into a file store; the consumer process runs
   ``pull_subscribe_bind(...).consume(cb)`` on the same store, woken through the
   stream's notify file with inotify (jetspark/engine/wakeup.py)
1b. the same with inotify switched off: the polling fallback (information only)
2. jetspark nats://: ``js.publish`` and ``consume(cb)`` through jetspark's nats://
   backend, on the same local nats-server as the anchor
3. anchor: plain nats-py on that nats-server: ``await js.publish(...)``, and in the
   consumer process a ``pull_subscribe_bind`` loop of ``await psub.fetch(1, timeout=5)``
   (nats-py 2.16's pull API has no continuous pull), each message acked

Each repetition uses a new stream (file storage) and durable consumer; the sides take
turns within each repetition, so a change in machine load hits all of them.  Per side
and repetition the p50 and p99 of the latencies (the first ``WARMUP`` messages left
out) are taken; the table shows the median of those over the repetitions with their
min-max spread, and the ratio of the engine's and the nats:// backend's median p50 to
the anchor's.  Targets: engine p50 <= 5 ms and <= 2x the anchor's p50.  A missed target
prints FAIL; the exit status is 1 only when a row fails with an error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    ROOT,
    NatsServer,
    Row,
    chosen_rows,
    exit_on_sigterm,
    log,
    machine_info,
    print_table,
    run_rows,
    spread,
    verdict,
)  # noqa: E402

WARMUP = 20
STAMP = struct.Struct("<q")
PAYLOAD_SIZE = 100
STREAM_SUBJECT = "lat.{n}"
TARGET_P50_MS = 5.0
TARGET_RATIO = 2.0


@dataclass(frozen=True)
class Sizes:
    msgs: int  # per side and repetition, warm-up included
    reps: int


FULL = Sizes(msgs=500, reps=5)
QUICK = Sizes(msgs=150, reps=3)


# --------------------------------------------------------------------------- the consumer process


def consumer_main(kind: str, target: str, stream: str, n: int) -> None:
    """Receive ``n`` messages of the durable C of ``stream``; print "ready", then the latencies (ns) as JSON."""
    if kind == "natspy":
        lat = asyncio.run(_natspy_consume(target, stream, n))
    else:
        import threading

        import jetspark

        if kind == "engine-poll":
            from jetspark.engine import wakeup

            wakeup.INOTIFY = False
        lat: list[int] = []
        done = threading.Event()

        def cb(msg) -> None:
            lat.append(time.monotonic_ns() - STAMP.unpack_from(msg.data)[0])
            msg.ack()
            if len(lat) >= n:
                done.set()

        with jetspark.connect(target) as js:
            with js.pull_subscribe_bind("C", stream=stream).consume(cb):
                print("ready", flush=True)
                if not done.wait(600):
                    raise SystemExit(f"{kind}: {len(lat)} of {n} messages in 600 s")
    print(json.dumps(lat), flush=True)


async def _natspy_consume(url: str, stream: str, n: int) -> list[int]:
    import nats

    nc = await nats.connect(url, allow_reconnect=False)
    try:
        psub = await nc.jetstream().pull_subscribe_bind("C", stream=stream)
        print("ready", flush=True)
        lat: list[int] = []
        while len(lat) < n:
            try:
                msgs = await psub.fetch(1, timeout=5)
            except nats.errors.TimeoutError:
                continue
            for msg in msgs:
                lat.append(time.monotonic_ns() - STAMP.unpack_from(msg.data)[0])
                await msg.ack()
        return lat
    finally:
        await nc.close()


# --------------------------------------------------------------------------- the publishing side


def payload() -> bytes:
    return STAMP.pack(time.monotonic_ns()) + b"x" * (PAYLOAD_SIZE - STAMP.size)


class Bench:
    def __init__(self, args, sizes: Sizes, base: Path) -> None:
        import nats

        import jetspark

        self.args = args
        self.sizes = sizes
        self.base = base
        self.interval = args.interval / 1000
        self.store = base / "store"
        self.server = NatsServer(base).start()
        self.engine = jetspark.connect(self.store)
        self.remote = jetspark.connect(self.server.url)
        self.loop = asyncio.new_event_loop()
        self.nc = self.loop.run_until_complete(nats.connect(self.server.url, allow_reconnect=False))
        self.js = self.nc.jetstream()
        self.count = 0

    def close(self) -> None:
        for closer in (
            self.engine.close,
            self.remote.close,
            lambda: self.loop.run_until_complete(self.nc.close()),
            self.loop.close,
        ):
            try:
                closer()
            except Exception:
                pass
        self.server.stop()

    def _new_stream(self, js) -> tuple[str, str]:
        """A fresh file stream with a durable C delivering new messages; (stream, subject)."""
        self.count += 1
        name, subject = f"LAT{self.count}", STREAM_SUBJECT.format(n=self.count)
        js.add_stream(name=name, subjects=[subject], storage="file")
        js.add_consumer(name, durable_name="C", ack_wait=30)
        return name, subject

    def one(self, kind: str) -> list[int]:
        """One repetition of one side: the consumer process's latencies (ns), warm-up dropped."""
        js = (
            self.engine if kind.startswith("engine") else self.remote
        )  # streams of the anchor: made through jetspark too
        stream, subject = self._new_stream(js)
        target = str(self.store) if kind.startswith("engine") else self.server.url
        n = self.sizes.msgs
        proc = subprocess.Popen(
            [sys.executable, __file__, "--consume", kind, target, stream, str(n)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the {kind} consumer did not start (exit code {proc.wait()})")
            if kind == "natspy":
                self.loop.run_until_complete(self._natspy_publish(subject, n))
            else:
                for _ in range(n):
                    js.publish(subject, payload())
                    time.sleep(self.interval)
            out = proc.stdout.readline()
            if proc.wait(60) != 0 or not out:
                raise RuntimeError(f"the {kind} consumer failed (exit code {proc.returncode})")
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        lat = json.loads(out)
        if len(lat) != n:
            raise RuntimeError(f"the {kind} consumer received {len(lat)} of {n} messages")
        return lat[WARMUP:]

    async def _natspy_publish(self, subject: str, n: int) -> None:
        for _ in range(n):
            await self.js.publish(subject, payload())
            await asyncio.sleep(self.interval)

    def rows(self, only: set[str]) -> list[Row]:
        sides = [
            k
            for k, key in (("engine", "1"), ("engine-poll", "1b"), ("jetspark-nats", "2"), ("natspy", "3"))
            if key in only
        ]
        if "natspy" not in sides and ({"1", "2"} & only):
            sides.append("natspy")  # the anchor the targets are ratios of
        p50: dict[str, list[float]] = {k: [] for k in sides}
        p99: dict[str, list[float]] = {k: [] for k in sides}
        for rep in range(self.sizes.reps):
            for kind in sides:
                lat = sorted(self.one(kind))
                p50[kind].append(_pct(lat, 50) / 1e6)
                p99[kind].append(_pct(lat, 99) / 1e6)
                log(f"rep {rep + 1}/{self.sizes.reps} {kind}: p50 {p50[kind][-1]:.2f} ms, p99 {p99[kind][-1]:.2f} ms")
        anchor = statistics.median(p50["natspy"])
        anchor99 = statistics.median(p99["natspy"])
        out = []
        names = {
            "engine": ("1", "engine: publish -> consume(cb) in another process (inotify)"),
            "engine-poll": ("1b", "engine, inotify off: the polling fallback"),
            "jetspark-nats": ("2", "jetspark nats://: publish -> consume(cb) in another process"),
            "natspy": ("3", "anchor: nats-py publish -> nats-py fetch(1) loop in another process"),
        }
        for kind in sides:
            key, name = names[kind]
            if key not in only:
                continue
            m50, m99 = statistics.median(p50[kind]), statistics.median(p99[kind])
            row = Row(
                key,
                name,
                value=f"p50 {m50:.2f} ms, p99 {m99:.2f} ms",
                anchor=f"p50 {anchor:.2f} ms, p99 {anchor99:.2f} ms",
            )
            row.spread = f"p50 {spread(p50[kind], 'ms')}; p99 {spread(p99[kind], 'ms')}"
            if kind != "natspy":
                row.ratio = f"{m50 / anchor:.2f}x"
            if kind == "engine":
                row.target = f"p50 <= {TARGET_P50_MS:g} ms and <= {TARGET_RATIO:g}x anchor"
                row.result = verdict(
                    [
                        (m50 <= TARGET_P50_MS, f"p50 > {TARGET_P50_MS:g} ms"),
                        (m50 <= TARGET_RATIO * anchor, f"> {TARGET_RATIO:g}x anchor"),
                    ]
                )
            else:
                row.result = "info"
            row.notes.append(
                f"{self.sizes.reps} interleaved repetitions of "
                f"{self.sizes.msgs} messages (the first {WARMUP} left out), "
                f"one every {self.args.interval:g} ms; per-repetition p50 {', '.join(f'{v:.2f}' for v in p50[kind])} ms"
            )
            out.append(row)
        return out


def _pct(sorted_values: list[int], pct: float) -> float:
    i = min(len(sorted_values) - 1, max(0, round(pct / 100 * (len(sorted_values) - 1))))
    return float(sorted_values[i])


# --------------------------------------------------------------------------- main


SECTIONS = ("1", "1b", "2", "3")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages and repetitions")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the temporary store and nats-server data go (default: the system temp dir)",
    )
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help="comma-separated rows to run, e.g. --only 1,3 (default: all)"
    )
    parser.add_argument("--interval", type=float, default=2.0, help="milliseconds between two publishes (default 2)")
    args = parser.parse_args(argv)
    only = set(chosen_rows(parser, args.only, SECTIONS))
    sizes = QUICK if args.quick else FULL

    exit_on_sigterm()
    base = bench = None
    rows: list[Row] = []
    errors = 0
    try:
        if args.dir is not None:
            args.dir.mkdir(parents=True, exist_ok=True)
        base = Path(tempfile.mkdtemp(prefix="jetspark-bench-latency-", dir=args.dir))
        header = machine_info(
            base,
            "jetspark publish-to-callback latency across processes",
            f"{PAYLOAD_SIZE}-byte payloads, file storage, one publish every {args.interval:g} ms, "
            "a new consumer process per repetition",
            sizes,
            args.quick,
        )
        bench = Bench(args, sizes, base)
        errors = run_rows([("1", "latency", lambda: bench.rows(only))], {"1"}, rows)
        header.append(f"- load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print("\n".join(header))
        print()
        print_table(rows, anchor="nats-py + nats-server anchor (median)")
    finally:
        if bench is not None:
            bench.close()
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)
    return 1 if errors else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--consume":
        consumer_main(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        sys.exit(main())
