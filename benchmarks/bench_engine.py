"""Throughput and latency of the embedded engine, against a local nats-server measured in the same run.

    .venv/bin/python benchmarks/bench_engine.py [--quick] [--dir DIR] [--only 1,3,...]

Every row uses 100-byte payloads, file storage and the default sync setting
on both sides (jetspark ``sync="os"``; nats-server's default, which fsyncs
every two minutes).  The machine this runs on is shared and noisy, so each
figure is the median of several repetitions, printed with its spread, and
every comparison is a ratio against the anchor measured in this same run,
never against a number from another day.

Rows (see benchmarks/README.md for what each one means):

1. single publish: ``js.publish(subject, payload)`` in a loop, vs nats-py
   ``js.publish_async`` + ``publish_async_completed()`` to nats-server;
   1b: ``js.publish_async`` in a loop + ``publish_async_completed()`` against
   the same anchor and against row 1; 1c: both with ``sync="fsync"``
2. Arrow batch append: ``js.publish_batch(table, stream=...)``
3. range read into Arrow, warm: ``js.read_batches(stream, 1, 1_000_000)``,
   vs a nats-py pull consumer (ack none) doing ``fetch(batch=1000)``;
   3b: a new handle's first read, which verifies every record's checksum
4. 1,000 messages from the middle of a 10,000,000-message stream
5. peak RSS of a separate process scanning those 10,000,000 messages
6. consumers (skipped on an engine without ``js.add_consumer``): fetch +
   explicit ack, and advancing a durable consumer's ack floor; 6c: the
   redeliveries of a consumer with 50,000 deliveries pending against its
   own first deliveries of the same messages; 6d-6g (``--only 6d``): one
   operation at a time beside 50,000 pending deliveries (an ack under ack
   policy all, a publish at max_msgs on an interest stream that removes a
   pending message, an explicit ack on an interest stream, a purge of 100
   pending messages) against the same operations with little or nothing pending
7. bounded growth: single publish at a max_msgs=1000 limit against the
   unlimited rate, and a stream's disk size and fresh-open time after
   1,000,000 publishes with unique Nats-Msg-Ids at max_msgs=1000

A row whose engine method does not exist yet prints "not available"; the
script exits 1 only when a row fails with an error, never for a missed
target (targets are what the engine aims at, not assertions).
"""

from __future__ import annotations

# Only the standard library is imported at the top: the RSS children of row 5
# are spawned before numpy, pyarrow, nats-py and jetspark are loaded (see
# RssChild), and _load_heavy_modules() imports those afterwards.
import argparse
import asyncio
import gc
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402  (the helpers every benchmark shares)
    PAYLOAD_SIZE,
    ROOT,
    SUBJECTS_PER_TABLE,
    NatsServer,
    Row,
    chosen_rows,
    exit_on_sigterm,
    log,
    machine_info,
    message_table,
    not_available,
    payloads,
    print_table,
    publish_table,
    rate,
    read_rate,
    read_text,
    run_rows,
    spread,
    verdict,
)


@dataclass(frozen=True)
class Sizes:
    publish_msgs: int  # row 1, per repetition, each side
    publish_reps: int
    batch_msgs: int  # row 2, per repetition
    batch_rows: int  # rows per publish_batch call
    batch_reps: int
    read_msgs: int  # row 3, engine
    read_reps: int  # warm passes
    anchor_read_msgs: int  # row 3, nats-py
    anchor_read_reps: int
    big_msgs: int  # rows 4 and 5
    mid_reads: int
    rss_reps: int
    consumer_msgs: int  # row 6, engine
    anchor_consumer_msgs: int  # row 6, nats-py
    fsync_publish_msgs: int  # row 1c, js.publish per repetition
    fsync_async_msgs: int  # row 1c, js.publish_async per repetition
    limit_msgs: int  # row 7a, per repetition, each side
    limit_reps: int
    growth_msgs: int  # row 7b


FULL = Sizes(
    publish_msgs=100_000, publish_reps=7, fsync_publish_msgs=1_000, fsync_async_msgs=20_000,
    batch_msgs=1_000_000, batch_rows=100_000, batch_reps=5,
    read_msgs=1_000_000, read_reps=5, anchor_read_msgs=200_000, anchor_read_reps=3,
    big_msgs=10_000_000, mid_reads=200, rss_reps=3,
    consumer_msgs=1_000_000, anchor_consumer_msgs=200_000,
    limit_msgs=50_000, limit_reps=7, growth_msgs=1_000_000,
)  # fmt: skip
QUICK = Sizes(
    publish_msgs=20_000, publish_reps=3, fsync_publish_msgs=200, fsync_async_msgs=5_000,
    batch_msgs=200_000, batch_rows=100_000, batch_reps=3,
    read_msgs=200_000, read_reps=3, anchor_read_msgs=50_000, anchor_read_reps=3,
    big_msgs=1_000_000, mid_reads=50, rss_reps=1,
    consumer_msgs=100_000, anchor_consumer_msgs=50_000,
    limit_msgs=10_000, limit_reps=5, growth_msgs=100_000,
)  # fmt: skip

# Spark's default Arrow batch (spark.sql.execution.arrow.maxRecordsPerBatch),
# measured as an extra row next to the main publish_batch figure.
SPARK_BATCH_ROWS = 10_000

np = pa = nats = jetspark = None  # set by _load_heavy_modules()


def _load_heavy_modules() -> None:
    global np, pa, nats, jetspark
    import nats  # noqa: F811
    import numpy as np  # noqa: F811
    import pyarrow as pa  # noqa: F811

    import jetspark  # noqa: F811


# --------------------------------------------------------------------------- the nats-server anchor


class Anchor:
    """nats-py on an event loop in this thread, connected to our own nats-server.

    The loop only runs while an anchor measurement runs, so it does not
    compete with the engine's measurements for the CPU.
    """

    def __init__(self, base: Path) -> None:
        self.server = NatsServer(base)
        self.loop = asyncio.new_event_loop()
        self.nc = None
        try:
            self.server.start()
            self.nc = self.run(nats.connect(self.server.url, allow_reconnect=False))
        except BaseException:
            self.close()
            raise
        self.js = self.nc.jetstream()

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        try:
            if self.nc is not None and not self.nc.is_closed:
                self.run(asyncio.wait_for(self.nc.close(), 10))
        except Exception:
            pass
        self.loop.close()
        self.server.stop()

    async def fill(self, subject: str, n: int, payload: bytes) -> None:
        """Put n messages on the server as fast as it takes them (not timed)."""
        for _ in range(n):
            await self.js.publish_async(subject, payload)
        await self.js.publish_async_completed()

    async def messages(self, stream: str) -> int:
        return (await self.js.stream_info(stream)).state.messages


# --------------------------------------------------------------------------- row 5's children


_RSS_CHILD = r"""
import json, resource, sys, time

def vm_hwm_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1

line = sys.stdin.readline()
if not line.strip():
    sys.exit(0)  # the parent did not need us
req = json.loads(line)
t = time.perf_counter()
import jetspark
import jetspark.engine.bulk  # pyarrow and the read path: imported by the first read_batches otherwise

out = {"import_ms": (time.perf_counter() - t) * 1e3}
t = time.perf_counter()
js = jetspark.connect(req["store"])
try:
    stream, mid = req["stream"], req["mid"]
    out["open_ms"] = (time.perf_counter() - t) * 1e3
    had_pandas = "pandas" in sys.modules
    t = time.perf_counter()
    out["mid_rows"] = sum(b.num_rows for b in js.read_batches(stream, mid, mid + 999))
    out["first_mid_read_ms"] = (time.perf_counter() - t) * 1e3
    out["first_read_imported_pandas"] = not had_pandas and "pandas" in sys.modules
    out["baseline_maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows = 0
    t = time.perf_counter()
    for batch in js.read_batches(stream, 1):  # from the first stored message to the last
        rows += batch.num_rows
        del batch  # discard each batch before the next one is made
    out["scan_s"] = time.perf_counter() - t
    out["rows"] = rows
    out["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["vmhwm_kb"] = vm_hwm_kb()
    # Not part of the scan: what the first stream_info on this fresh handle costs.
    t = time.perf_counter()
    js.stream_info(stream)
    out["info_ms"] = (time.perf_counter() - t) * 1e3
    out["info_maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
finally:
    js.close()
print(json.dumps(out))
"""


class RssChild:
    """A Python process that waits for a store path, then scans one stream and reports its peak RSS.

    Linux carries ``ru_maxrss`` across fork and exec (exec records the old
    address space's high-water mark), so a child spawned from this process
    after it has grown would report *our* peak, not its own.  These children
    are therefore spawned first thing, while this process is a bare
    interpreter, and sit idle on stdin until row 5 sends them work.  They
    also report ``VmHWM`` (the high-water mark of their own address space
    only) as a cross-check.
    """

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RSS_CHILD],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip

    def scan(self, store: Path, stream: str, mid: int, timeout: float = 1800) -> dict:
        out, err = self.proc.communicate(
            json.dumps({"store": str(store), "stream": stream, "mid": mid}) + "\n", timeout=timeout
        )
        if self.proc.returncode != 0:
            raise RuntimeError(f"RSS child exited with {self.proc.returncode}: {err.strip()[-2000:]}")
        return json.loads(out.strip().splitlines()[-1])

    def dismiss(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.communicate("", timeout=10)
            except (subprocess.TimeoutExpired, OSError, ValueError):
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


# --------------------------------------------------------------------------- the run


class Bench:
    def __init__(self, args, sizes: Sizes, base: Path, children: list[RssChild]) -> None:
        self.args = args
        self.sizes = sizes
        self.base = base
        self.children = children
        self.store = Path(tempfile.mkdtemp(prefix="store-", dir=base))
        self.js = jetspark.connect(self.store)
        self.anchor: Optional[Anchor] = None
        self.payload = bytes(payloads(1, seed=1)[0].as_py())
        self.big_table: Optional[pa.Table] = None
        self.big_msgs = 0  # messages in the engine's BIG stream so far

    def close(self) -> None:
        for child in self.children:
            child.dismiss()
        try:
            self.js.close()
        finally:
            if self.anchor is not None:
                self.anchor.close()

    def get_anchor(self) -> Anchor:
        if self.anchor is None:
            log("starting nats-server")
            self.anchor = Anchor(self.base)
        return self.anchor

    def has(self, method: str) -> bool:
        return callable(getattr(self.js, method, None))

    # ---- row 1 ------------------------------------------------------------------

    def row_publish(self) -> list[Row]:
        name = "single publish: js.publish(subject, payload) loop"
        target = ">= 100,000 msg/s and >= 2x anchor"
        n, reps, js, payload = self.sizes.publish_msgs, self.sizes.publish_reps, self.js, self.payload
        anchor = self.get_anchor()
        njs = anchor.js
        use_async = callable(getattr(njs, "publish_async", None)) and callable(
            getattr(njs, "publish_async_completed", None)
        )
        window = 1000

        async def anchor_publish(subject: str, count: int) -> None:
            if use_async:
                for _ in range(count):
                    await njs.publish_async(subject, payload)
                await njs.publish_async_completed()
            else:  # pipelined js.publish, `window` requests in flight
                for off in range(0, count, window):
                    await asyncio.gather(*(njs.publish(subject, payload) for _ in range(min(window, count - off))))

        def engine_rep(r: int, count: int, use_async: bool = False) -> float:
            """js.publish in a loop (publish_async then publish_async_completed() with
            ``use_async``) into a fresh stream; msgs/s, after checking all were stored."""
            stream = f"{'APUB' if use_async else 'PUB'}{r}"
            js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
            subject = f"{stream.lower()}.x"
            gc.collect()
            t = time.perf_counter()
            if use_async:
                for _ in range(count):
                    js.publish_async(subject, payload)
                js.publish_async_completed()
            else:
                for _ in range(count):
                    js.publish(subject, payload)
            dt = time.perf_counter() - t
            got = js.stream_info(stream).state.messages
            js.delete_stream(stream)
            if got != count:
                raise AssertionError(
                    f"engine stored {got} of {count} messages{' with publish_async' if use_async else ''}"
                )
            return count / dt

        def anchor_rep(r: int, count: int) -> float:
            stream = f"PUB{r}"
            anchor.run(njs.add_stream(name=stream, subjects=[f"pub{r}.>"]))
            gc.collect()
            t = time.perf_counter()
            anchor.run(anchor_publish(f"pub{r}.x", count))
            dt = time.perf_counter() - t
            got = anchor.run(anchor.messages(stream))
            anchor.run(njs.delete_stream(stream))
            if got != count:
                raise AssertionError(f"nats-server stored {got} of {count} messages")
            return count / dt

        with_async = self.has("publish_async")
        engine_rep(999, 2000)  # warm-up, not measured
        anchor_rep(999, 2000)
        if with_async:
            engine_rep(999, 2000, use_async=True)
        eng, anc, eng_async = [], [], []
        for r in range(reps):  # interleaved, so drift in machine load hits both sides alike
            eng.append(engine_rep(r, n))
            anc.append(anchor_rep(r, n))
            if with_async:
                eng_async.append(engine_rep(r, n, use_async=True))
            log(
                f"1 single publish {r + 1}/{reps}: engine {rate(eng[-1])}, anchor {rate(anc[-1])}"
                + (f", engine publish_async {rate(eng_async[-1])}" if with_async else "")
            )
        e, a = statistics.median(eng), statistics.median(anc)
        ratios = [x / y for x, y in zip(eng, anc)]
        how = (
            "nats-py js.publish_async + publish_async_completed()"
            if use_async
            else f"nats-py js.publish pipelined via asyncio.gather, {window} in flight"
        )
        return [
            Row(
                "1",
                name,
                rate(e),
                rate(a) + (" (publish_async)" if use_async else " (gathered publish)"),
                f"{e / a:.2f}x",
                target,
                verdict([(e >= 100_000, "< 100,000 msg/s"), (e / a >= 2, "< 2x anchor")]),
                f"engine {spread(eng)}; anchor {spread(anc)}",
                [
                    f"{reps} interleaved repetitions of {n:,} messages per side, each on a fresh stream, "
                    "after a 2,000-message warm-up; "
                    f"anchor: {how}; per-repetition ratios {min(ratios):.2f}x-{max(ratios):.2f}x."
                ],
            ),
            *self._rows_publish_async(eng, eng_async, anc, use_async),
        ]

    def _rows_publish_async(
        self, eng: list[float], eng_async: list[float], anc: list[float], anchor_async: bool
    ) -> list[Row]:
        """Rows 1b and 1c: publish_async on the engine, against the anchor and against publish."""
        name = "publish_async: js.publish_async(subject, payload) loop + publish_async_completed()"
        if not eng_async:
            return [not_available("1b", name, "-", "js.publish_async missing")]
        n, reps = self.sizes.publish_msgs, self.sizes.publish_reps
        e, a, p = statistics.median(eng_async), statistics.median(anc), statistics.median(eng)
        rows = [
            Row(
                "1b", name, rate(e), rate(a) + (" (publish_async)" if anchor_async else " (gathered publish)"),
                f"{e / a:.2f}x", "-", "info", f"engine {spread(eng_async)}; anchor {spread(anc)}",
                [f"measured with row 1, interleaved ({reps} x {n:,} messages, a fresh stream each); "
                 f"against the engine's own js.publish loop (row 1): {e / p:.2f}x (per repetition "
                 f"{min(x / y for x, y in zip(eng_async, eng)):.2f}x-"
                 f"{max(x / y for x, y in zip(eng_async, eng)):.2f}x)."],
            )
        ]  # fmt: skip
        # 1c: with sync="fsync" every publish waits for the disk; publish_async groups many messages per flush.
        n_sync, n_async = self.sizes.fsync_publish_msgs, self.sizes.fsync_async_msgs
        store = Path(tempfile.mkdtemp(prefix="store-fsync-", dir=self.base))
        sync_rates, async_rates = [], []
        with jetspark.connect(store, sync="fsync") as fjs:
            for r in range(3):
                fjs.add_stream(name=f"F{r}", subjects=[f"f{r}.>"])
                t = time.perf_counter()
                for _ in range(n_sync):
                    fjs.publish(f"f{r}.x", self.payload)
                sync_rates.append(n_sync / (time.perf_counter() - t))
                t = time.perf_counter()
                for _ in range(n_async):
                    fjs.publish_async(f"f{r}.y", self.payload)
                fjs.publish_async_completed()
                async_rates.append(n_async / (time.perf_counter() - t))
                got = fjs.stream_info(f"F{r}").state.messages
                fjs.delete_stream(f"F{r}")
                if got != n_sync + n_async:
                    raise AssertionError(f"engine (fsync) stored {got} of {n_sync + n_async} messages")
                log(f"1c sync='fsync' {r + 1}/3: publish {rate(sync_rates[-1])}, publish_async {rate(async_rates[-1])}")
        shutil.rmtree(store, ignore_errors=True)
        fa, fs = statistics.median(async_rates), statistics.median(sync_rates)
        rows.append(
            Row(
                "1c", 'publish_async with sync="fsync" (anchor: js.publish with sync="fsync")', rate(fa),
                rate(fs) + " (engine publish)", f"{fa / fs:.1f}x", "-", "info",
                f"publish_async {spread(async_rates)}; publish {spread(sync_rates)}",
                [f"one handle with sync='fsync', 3 repetitions of {n_sync:,} js.publish then {n_async:,} "
                 "js.publish_async on a fresh stream: each publish flushes to the disk; publish_async's writer "
                 "flushes once per group of queued messages."],
            )
        )  # fmt: skip
        return rows

    # ---- row 2 ------------------------------------------------------------------

    def row_publish_batch(self) -> list[Row]:
        name = "Arrow batch append: js.publish_batch(table, stream=)"
        target = ">= 1,500,000 msg/s"
        if not self.has("publish_batch"):
            return [not_available("2", name, target, "js.publish_batch missing")]
        js, n = self.js, self.sizes.batch_msgs
        table = message_table(n, "bat")

        def rep(rows_per_call: int) -> float:
            js.add_stream(name="BATCH", subjects=["bat.>"])
            gc.collect()
            t = time.perf_counter()
            publish_table(js, table, "BATCH", rows_per_call)
            dt = time.perf_counter() - t
            got = js.stream_info("BATCH").state.messages
            js.delete_stream("BATCH")
            if got != n:
                raise AssertionError(f"engine stored {got} of {n} messages")
            return n / dt

        rows = []
        for key, rows_per_call, tgt in (("2", self.sizes.batch_rows, target), ("2b", SPARK_BATCH_ROWS, "")):
            rep(rows_per_call)  # warm-up
            vals = []
            for r in range(self.sizes.batch_reps):
                vals.append(rep(rows_per_call))
                log(
                    f"{key} publish_batch ({rows_per_call:,} rows/call) {r + 1}/{self.sizes.batch_reps}: "
                    f"{rate(vals[-1])}"
                )
            m = statistics.median(vals)
            rows.append(
                Row(
                    key,
                    f"{name}, {rows_per_call:,} rows/call" + (" (Spark's Arrow batch)" if not tgt else ""),
                    rate(m),
                    target=tgt or "-",
                    result=verdict([(m >= 1_500_000, "< 1,500,000 msg/s")]) if tgt else "info",
                    spread=spread(vals),
                )  # fmt: skip
            )
        rows[0].notes.append(
            f"{n:,} messages per repetition on {SUBJECTS_PER_TABLE} subjects, a fresh stream each time; "
            f"median of {self.sizes.batch_reps} after one warm-up; the table is built before the clock starts."
        )
        return rows

    # ---- the BIG stream (rows 3, 4, 5) -------------------------------------------

    def ensure_big(self, n: int) -> None:
        """Grow the engine's stream BIG to n messages with publish_batch (1,000,000-row tables)."""
        if self.big_msgs >= n:
            return
        if self.big_msgs == 0:
            self.js.add_stream(name="BIG", subjects=["big.>"])
        if self.big_table is None:
            self.big_table = message_table(min(1_000_000, self.sizes.big_msgs), "big")
        t = time.perf_counter()
        start = self.big_msgs
        while self.big_msgs < n:
            chunk = self.big_table.slice(0, min(self.big_table.num_rows, n - self.big_msgs))
            publish_table(self.js, chunk, "BIG", self.sizes.batch_rows)
            self.big_msgs += chunk.num_rows
            if self.big_msgs % 1_000_000 == 0 or self.big_msgs == n:
                log(f"BIG stream: {self.big_msgs:,} / {n:,} messages")
        got = self.js.stream_info("BIG").state.messages
        if got != n:
            raise AssertionError(f"BIG holds {got} messages, expected {n}")
        self.big_build_s = getattr(self, "big_build_s", 0.0) + time.perf_counter() - t
        self.big_build_msgs = getattr(self, "big_build_msgs", 0) + n - start

    def _missing_bulk(self) -> Optional[str]:
        missing = [m for m in ("read_batches", "publish_batch") if not self.has(m)]
        return " and ".join(f"js.{m}" for m in missing) + " missing" if missing else None

    # ---- row 3 ------------------------------------------------------------------

    def row_read(self) -> list[Row]:
        n = self.sizes.read_msgs
        name = f"range read into Arrow, warm: js.read_batches, {n:,} msgs"
        target = ">= 5,000,000 msg/s and >= 100x anchor"
        why = self._missing_bulk()
        if why:
            return [not_available("3", name, target, why + "; no anchor run")]
        js = self.js
        self.ensure_big(n)

        first = next(iter(js.read_batches("BIG", 1, 10)))
        want = ["stream", "subject", "seq", "timestamp", "data"]
        if first.schema.names[:5] != want:
            raise AssertionError(f"read_batches columns {first.schema.names}, expected {want}")
        cold = read_rate(js, "BIG", n)
        warm = []
        for r in range(self.sizes.read_reps):
            warm.append(read_rate(js, "BIG", n))
            log(f"3 read_batches warm {r + 1}/{self.sizes.read_reps}: {rate(warm[-1])}")

        anc = self.anchor_pull_fetch()
        e, a = statistics.median(warm), statistics.median(anc)
        return [
            Row(
                "3",
                name,
                rate(e),
                rate(a) + " (pull fetch)",
                f"{e / a:.0f}x",
                target,
                verdict([(e >= 5_000_000, "< 5,000,000 msg/s"), (e / a >= 100, "< 100x anchor")]),
                f"engine {spread(warm)}; anchor {spread(anc)}",
                [
                    f"engine: sequences 1..{n:,} of BIG, first pass {rate(cold)} (not counted), "
                    f"then the median of {len(warm)} warm passes; "
                    "anchor: nats-py pull_subscribe with an ephemeral ack-none "
                    "consumer (nats-py 2.16 has no ordered pull consumer), "
                    f"fetch(batch=1000) until {self.sizes.anchor_read_msgs:,} messages, median of {len(anc)} consumers."
                ],
            )
        ]

    def row_read_verify(self) -> list[Row]:
        """What checking record checksums costs: a handle's first read of a range verifies
        every record (once per process, see StreamStorage.verify); later reads do not."""
        import jetspark

        n = self.sizes.read_msgs
        name = f"range read, first pass of a new handle (checksums verified), {n:,} msgs"
        self.ensure_big(n)

        first, warm = [], []
        for r in range(self.sizes.read_reps):
            with jetspark.connect(self.store) as js:
                first.append(read_rate(js, "BIG", n))
                warm.append(read_rate(js, "BIG", n))
            log(f"3b first read {r + 1}/{self.sizes.read_reps}: {rate(first[-1])}, then warm {rate(warm[-1])}")
        f, w = statistics.median(first), statistics.median(warm)
        return [
            Row(
                "3b",
                name,
                rate(f),
                rate(w) + " (warm, same handle)",
                f"{f / w:.2f}x",
                "info: verified once per process",
                "info",
                f"first {spread(first)}; warm {spread(warm)}",
                [
                    f"{len(first)} fresh handles on the same store (page cache warm); each reads 1..{n:,} twice. "
                    "The first pass checks every record's CRC-32; "
                    "the ratio is what that costs against a read of verified blocks."
                ],
            )
        ]

    def anchor_pull_fetch(self) -> list[float]:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        anchor = self.get_anchor()
        njs, n = anchor.js, self.sizes.anchor_read_msgs
        anchor.run(njs.add_stream(name="READ", subjects=["read.>"]))
        log(f"filling nats-server stream READ with {n:,} messages")
        anchor.run(anchor.fill("read.x", n, self.payload))
        if anchor.run(anchor.messages("READ")) != n:
            raise AssertionError("nats-server READ stream is short")

        async def drain() -> float:
            sub = await njs.pull_subscribe(
                "read.>", stream="READ",
                config=ConsumerConfig(
                    ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=30.0
                ),
            )  # fmt: skip
            got = 0
            t = time.perf_counter()
            while got < n:
                got += len(await sub.fetch(batch=1000, timeout=10))
            dt = time.perf_counter() - t
            await sub.unsubscribe()
            if got != n:
                raise AssertionError(f"fetched {got} of {n}")
            return n / dt

        out = []
        for r in range(self.sizes.anchor_read_reps):
            gc.collect()
            out.append(anchor.run(drain()))
            log(f"3 anchor pull fetch {r + 1}/{self.sizes.anchor_read_reps}: {rate(out[-1])}")
        anchor.run(njs.delete_stream("READ"))
        return out

    # ---- row 4 ------------------------------------------------------------------

    def row_mid_read(self) -> list[Row]:
        n = self.sizes.big_msgs
        name = f"1,000 msgs from the middle of {n:,}: list(js.read_batches(...))"
        target = "< 5 ms"
        why = self._missing_bulk()
        if why:
            return [not_available("4", name, target, why)]
        js = self.js
        self.ensure_big(n)
        rng = random.Random(4)
        mid = n // 2
        times = []
        for i in range(self.sizes.mid_reads):
            start = mid + rng.randrange(-n // 100, n // 100)  # within 1% of the middle
            gc.collect()
            t = time.perf_counter()
            batches = list(js.read_batches("BIG", start, start + 999))
            times.append((time.perf_counter() - t) * 1e3)
            if i == 0 and sum(b.num_rows for b in batches) != 1000:
                raise AssertionError("read_batches did not return 1,000 rows")
        m = statistics.median(times)
        q = statistics.quantiles(times, n=10) if len(times) >= 10 else [min(times)] * 9
        notes = [
            f"{len(times)} reads at random starts within 1% of seq {mid:,}, "
            f"after the first row-3 reads warmed this handle; p10 {q[0]:.2f} ms, p90 {q[-1]:.2f} ms."
        ]
        if n < 10_000_000:
            notes.append(f"--quick: the stream holds {n:,} messages, not 10,000,000.")
        if getattr(self, "big_build_msgs", 0):
            notes.append(
                f"building BIG with publish_batch ({self.sizes.batch_rows:,} rows/call): {self.big_build_msgs:,} "
                f"msgs in {self.big_build_s:.1f} s ({rate(self.big_build_msgs / self.big_build_s)})."
            )
        return [
            Row(
                "4",
                name,
                f"{m:.2f} ms",
                target=target,
                result=verdict([(m < 5, ">= 5 ms")]),
                spread=f"{len(times)} runs: {min(times):.2f}-{max(times):.2f} ms",
                notes=notes,
            )
        ]

    # ---- row 5 ------------------------------------------------------------------

    def row_rss(self) -> list[Row]:
        n = self.sizes.big_msgs
        name = f"peak RSS, child process scanning {n:,} msgs with read_batches"
        target = "< 500 MB"
        why = self._missing_bulk()
        if why:
            return [not_available("5", name, target, why)]
        self.ensure_big(n)
        results = []
        for i, child in enumerate(self.children):
            results.append(child.scan(self.store, "BIG", n // 2))
            r = results[-1]
            if r["rows"] != n or r["mid_rows"] != 1000:
                raise AssertionError(f"RSS child read {r['rows']} rows (mid read {r['mid_rows']}), expected {n}")
            log(
                f"5 scan {i + 1}/{len(self.children)}: ru_maxrss {r['maxrss_kb'] / 1024:.0f} MB, "
                f"VmHWM {r['vmhwm_kb'] / 1024:.0f} MB, {rate(n / r['scan_s'])}"
            )
        peaks = [r["maxrss_kb"] / 1024 for r in results]
        m = statistics.median(peaks)
        pick = results[peaks.index(sorted(peaks)[len(peaks) // 2])]
        notes = [
            "ru_maxrss of a child process (spawned before this process grew: "
            "Linux carries ru_maxrss across fork+exec); "
            f"median of {len(results)} child process{'es' if len(results) > 1 else ''}; "
            f"its VmHWM {pick['vmhwm_kb'] / 1024:.0f} MB; "
            "peak before the scan (after import, open and one 1,000-msg read) "
            f"{pick['baseline_maxrss_kb'] / 1024:.0f} MB.",
            f"the same child: imported jetspark and pyarrow in {pick['import_ms']:.0f} ms, "
            f"opened the store in {pick['open_ms']:.1f} ms, "
            f"first 1,000-msg read from the middle on the fresh handle "
            f"{pick['first_mid_read_ms']:.2f} ms"
            f"{' (pandas got imported during it)' if pick.get('first_read_imported_pandas') else ''}, "
            f"full scan {pick['scan_s']:.2f} s ({rate(n / pick['scan_s'])}); "
            f"after the scan, its first stream_info took {pick['info_ms']:.0f} ms and its "
            f"peak RSS became {pick['info_maxrss_kb'] / 1024:.0f} MB (not counted above).",
        ]
        if n < 10_000_000:
            notes.append(f"--quick: the stream holds {n:,} messages, not 10,000,000.")
        return [
            Row(
                "5",
                name,
                f"{m:.0f} MB",
                target=target,
                result=verdict([(m < 500, ">= 500 MB")]),
                spread=spread(peaks, "MB", lambda v: f"{v:.0f}"),
                notes=notes,
            )
        ]

    # ---- row 6: consumers ---------------------------------------------------------
    #
    # Kept apart from rows 1-5: it was written before the consumers landed, and
    # is skipped ("not available") on an engine without js.add_consumer.  It
    # uses nats-py's shape: js.add_consumer(stream, config), js.pull_subscribe(
    # subject, durable=..., stream=...).fetch(batch), msg.ack(), plus the bulk
    # ack-floor call Spark's commit uses.

    ACK_FLOOR_METHOD = "advance_ack_floor"  # js.advance_ack_floor(stream, durable, seq)

    def row_consumers(self) -> list[Row]:
        n = self.sizes.consumer_msgs
        fetch_name = f"consumer fetch(batch=1000) + explicit ack, {n:,} msgs"
        floor_name = f"advance a durable's ack floor over {n:,} msgs (interest)"
        if not self.has("add_consumer"):
            why = "js.add_consumer missing: consumers issue"
            return [
                not_available("6a", fetch_name, "ratio only", why),
                not_available("6b", floor_name, "ratio only", why),
                not_available("6c", "redeliveries", ">= 0.5x", why),
            ]
        if not self.has("publish_batch"):
            why = "js.publish_batch missing"
            return [
                not_available("6a", fetch_name, "ratio only", why),
                not_available("6b", floor_name, "ratio only", why),
                not_available("6c", "redeliveries", ">= 0.5x", why),
            ]
        return [self._row_fetch_ack(fetch_name), self._row_ack_floor(floor_name), self._row_redelivery()]

    def _row_fetch_ack(self, name: str) -> Row:
        from jetspark import AckPolicy, ConsumerConfig

        js, n = self.js, self.sizes.consumer_msgs
        js.add_stream(name="CONS", subjects=["cons.>"])
        publish_table(js, message_table(n, "cons"), "CONS", self.sizes.batch_rows)
        vals = []
        for r in range(3):
            durable = f"bench{r}"
            js.add_consumer("CONS", ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT))
            sub = js.pull_subscribe("cons.>", durable=durable, stream="CONS")
            gc.collect()
            got = 0
            t = time.perf_counter()
            while got < n:
                msgs = sub.fetch(batch=1000)
                for msg in msgs:
                    msg.ack()
                got += len(msgs)
            # msg.ack() is fire-and-forget, as in nats-py; the clock stops once the acks are applied.
            floor = js.consumer_info("CONS", durable).ack_floor.stream_seq
            vals.append(n / (time.perf_counter() - t))
            js.delete_consumer("CONS", durable)
            if got != n or floor != n:
                raise AssertionError(f"fetched {got} and ack floor {floor}, expected {n}")
            log(f"6a engine fetch+ack {r + 1}/3: {rate(vals[-1])}")
        js.delete_stream("CONS")
        anc = self.anchor_fetch_ack(ack="explicit")
        e, a = statistics.median(vals), statistics.median(anc)
        return Row(
            "6a", name, rate(e), rate(a) + " (fetch + ack)", f"{e / a:.1f}x", "ratio only", "info",
            f"engine {spread(vals)}; anchor {spread(anc)}",
            [f"engine: {n:,} msgs, 3 fresh durables; anchor: nats-py pull_subscribe durable, explicit ack, "
             f"fetch(1000) + msg.ack() over {self.sizes.anchor_consumer_msgs:,} msgs."],
        )  # fmt: skip

    def _row_ack_floor(self, name: str) -> Row:
        from jetspark import AckPolicy, ConsumerConfig, RetentionPolicy

        js, n = self.js, self.sizes.consumer_msgs
        advance = getattr(js, self.ACK_FLOOR_METHOD, None)
        if advance is None:
            return not_available("6b", name, "ratio only", f"js.{self.ACK_FLOOR_METHOD} missing")
        table = message_table(n, "int")
        vals = []
        for r in range(3):
            js.add_stream(name="INT", subjects=["int.>"], retention=RetentionPolicy.INTEREST)
            js.add_consumer("INT", ConsumerConfig(durable_name="floor", ack_policy=AckPolicy.ALL))
            publish_table(js, table, "INT", self.sizes.batch_rows)
            last = js.stream_info("INT").state.last_seq
            gc.collect()
            t = time.perf_counter()
            advance("INT", "floor", last)
            vals.append(n / (time.perf_counter() - t))
            left = js.stream_info("INT").state.messages
            js.delete_stream("INT")
            if left:
                raise AssertionError(f"{left} messages left on the interest stream after the ack floor passed them")
            log(f"6b engine ack floor {r + 1}/3: {rate(vals[-1])}")
        anc = self.anchor_fetch_ack(ack="all")
        e, a = statistics.median(vals), statistics.median(anc)
        return Row(
            "6b", name, rate(e), rate(a) + " (fetch + ack last, ack all)", f"{e / a:.0f}x", "ratio only", "info",
            f"engine {spread(vals)}; anchor {spread(anc)}",
            [f"engine: one js.{self.ACK_FLOOR_METHOD}(stream, durable, last_seq) over {n:,} msgs; "
             "anchor: nats-py durable with ack_policy=all on an interest stream, fetch(1000) and ack the last msg "
             f"of each batch, {self.sizes.anchor_consumer_msgs:,} msgs."],
        )  # fmt: skip

    REDELIVERY_PENDING = 50_000  # row 6c, whatever the sizes: the case it measures

    def _row_redelivery(self) -> Row:
        """6c: every delivery of a consumer past its ack wait at once, 50,000 of them, fetched
        again, against the first fetch of the same messages by the same consumer.  The clock
        is the engine's injected one (jetspark.connect(clock=...)): no waiting for ack_wait."""
        from jetspark import AckPolicy, ConsumerConfig

        n = self.REDELIVERY_PENDING
        name = f"redeliveries, {n:,} pending, fetch(batch=1000)"
        table = message_table(n, "re")
        now = [time.time_ns()]
        first, again = [], []
        reps = 5
        for r in range(reps):
            store = Path(tempfile.mkdtemp(prefix="redeliver-", dir=self.base))
            with jetspark.connect(store, clock=lambda: now[0]) as js:
                js.add_stream(name="RE", subjects=["re.>"])
                publish_table(js, table, "RE", self.sizes.batch_rows)
                cfg = ConsumerConfig(durable_name="re", ack_policy=AckPolicy.EXPLICIT, ack_wait=30, max_ack_pending=-1)
                js.add_consumer("RE", cfg)
                sub = js.pull_subscribe("re.>", durable="re", stream="RE")
                for rates, times in ((first, 1), (again, 2)):
                    gc.collect()
                    got = []
                    t = time.perf_counter()
                    while len(got) < n:
                        got += sub.fetch(batch=1000)
                    rates.append(n / (time.perf_counter() - t))
                    if [m.metadata.num_delivered for m in got] != [times] * n:
                        raise AssertionError(f"fetch {times}: not every message delivered {times} times")
                    now[0] += 31 * 1_000_000_000  # past every delivery's ack wait
            shutil.rmtree(store, ignore_errors=True)
            log(f"6c engine first delivery / redelivery {r + 1}/{reps}: {rate(first[-1])} / {rate(again[-1])}")
        e, a = statistics.median(again), statistics.median(first)
        ratio = statistics.median(x / y for x, y in zip(again, first))
        return Row(
            "6c", name, rate(e), rate(a) + " (first delivery)", f"{ratio:.2f}x", ">= 0.5x",
            verdict([(ratio >= 0.5, "< 0.5x")]), f"redelivery {spread(again)}; first {spread(first)}",
            [f"engine only: one durable (explicit ack, ack_wait 30 s, no max_ack_pending) fetches {n:,} msgs, "
             "none acked; the injected clock moves 31 s; it fetches them all again (num_delivered 2). "
             f"Ratio: the median of each repetition's redelivery / first-delivery rate, {reps} fresh stores."],
        )  # fmt: skip

    # ---- rows 6d-6g: what one operation costs beside 50,000 pending deliveries -----------
    #
    # Each times one kind of operation, one call at a time, on a consumer with 50,000
    # deliveries pending, against the same operations with nothing (or only the 2,000
    # acked) pending, in the same store in the same repetition.  An operation that cost
    # every pending delivery (a copy of the consumer's state, a read of every pending
    # delivery) shows as a ratio far below 1; one that costs what it changes, near 1.

    COST_PENDING = 50_000  # the pending deliveries each operation works beside
    COST_OPS = 2_000  # operations timed per repetition (acks, publishes)
    COST_PURGES = 200  # purges timed per repetition, each removing COST_PURGE_MSGS messages
    COST_PURGE_MSGS = 100

    def row_pending_costs(self) -> list[Row]:
        keys = ("6d", "6e", "6f", "6g")
        if not self.has("add_consumer") or not self.has("publish_batch"):
            return [
                not_available(k, "beside 50,000 pending", ">= 0.5x", "consumers or publish_batch missing") for k in keys
            ]
        reps = 3
        runs: dict[str, list[tuple[float, float]]] = {k: [] for k in keys}
        for r in range(reps):
            for key, fn in zip(keys, (self._cost_ack_all, self._cost_publish_at_limit, self._cost_interest_acks,
                                      self._cost_purge)):  # fmt: skip
                store = Path(tempfile.mkdtemp(prefix=f"cost{key}-", dir=self.base))
                with jetspark.connect(store) as js:
                    gc.collect()
                    runs[key].append(fn(js))
                shutil.rmtree(store, ignore_errors=True)
                log(f"{key} engine {r + 1}/{reps}: {rate(runs[key][-1][0])} / anchor {rate(runs[key][-1][1])}")
        n, k = self.COST_PENDING, self.COST_OPS
        p, pm = self.COST_PURGES, self.COST_PURGE_MSGS
        what = {
            "6d": (f"ack all, one ack_sync at a time, {n:,} pending ({k:,} acks)", f"({k:,} pending)",
                   f"one durable (ack policy all) fetches {n:,} msgs, then acks the first {k:,} in order with "
                   f"ack_sync (each ack moves the floor by one); anchor: the same acks by a durable that fetched "
                   f"{k:,}."),
            "6e": (f"publish at max_msgs on an interest stream, {n:,} pending ({k:,} publishes)", "(nothing pending)",
                   f"an interest stream at max_msgs={n:,} whose durable (explicit ack) holds all {n:,} pending: "
                   f"each of {k:,} publishes removes the oldest, a pending delivery; anchor: the same publishes "
                   "into the same stream before the durable fetched anything."),
            "6f": (f"explicit ack_sync on an interest stream, {n:,} pending ({k:,} acks)", f"({k:,} pending)",
                   f"a durable (explicit ack) fetches {n:,} msgs of an interest stream and acks the first {k:,} "
                   f"with ack_sync (each removes its message); anchor: the same acks by a durable that fetched {k:,}."),
            "6g": (f"purge of {pm} msgs, {n:,}+ pending ({p} purges)", "(nothing pending)",
                   f"{p} purge_stream(seq=...) calls each removing the {pm} oldest msgs, all pending deliveries of a "
                   f"durable (explicit ack) holding {n + p * pm:,} down to {n:,}; anchor: the same purges before it "
                   "fetched."),
        }  # fmt: skip
        rows = []
        for key in keys:
            name, anchor, note = what[key]
            vals = [m for m, _ in runs[key]]
            anc = [a for _, a in runs[key]]
            ratio = statistics.median(m / a for m, a in runs[key])
            rows.append(Row(
                key, name, rate(statistics.median(vals)).replace("msg/s", "ops/s"),
                rate(statistics.median(anc)).replace("msg/s", "ops/s") + f" {anchor}", f"{ratio:.2f}x", ">= 0.5x",
                verdict([(ratio >= 0.5, "< 0.5x")]), f"engine {spread(vals)}; anchor {spread(anc)}",
                [f"engine only, {reps} fresh stores: {note} Ratio: the median of each repetition's ratio."],
            ))  # fmt: skip
        return rows

    def _cost_fetch_all(self, sub, n: int) -> list:
        msgs: list = []
        while len(msgs) < n:
            msgs += sub.fetch(batch=min(1000, n - len(msgs)))
        return msgs

    def _cost_acks(self, js, name: str, policy, retention, fetched: int) -> float:
        """ack_sync of the first COST_OPS of ``fetched`` deliveries, one at a time, per second."""
        from jetspark import ConsumerConfig

        n, k = self.COST_PENDING, self.COST_OPS
        js.add_stream(name=name, subjects=[f"{name}.>"], retention=retention)
        js.add_consumer(name, ConsumerConfig(durable_name="d", ack_policy=policy, ack_wait=3600, max_ack_pending=-1))
        publish_table(js, message_table(n, name), name, self.sizes.batch_rows)
        msgs = self._cost_fetch_all(js.pull_subscribe(f"{name}.>", durable="d", stream=name), fetched)
        gc.collect()
        t = time.perf_counter()
        for m in msgs[:k]:
            m.ack_sync()
        acks = k / (time.perf_counter() - t)
        info, left = js.consumer_info(name, "d"), js.stream_info(name).state.messages
        if (info.ack_floor.stream_seq, info.num_ack_pending, left) != (
            k,
            fetched - k,
            n - k if retention.value == "interest" else n,
        ):
            raise AssertionError(
                f"{name}: ack floor {info.ack_floor.stream_seq}, {info.num_ack_pending} pending, {left} left"
            )
        return acks

    def _cost_ack_all(self, js) -> tuple[float, float]:
        from jetspark import AckPolicy, RetentionPolicy

        n, k = self.COST_PENDING, self.COST_OPS
        busy = self._cost_acks(js, "BUSY", AckPolicy.ALL, RetentionPolicy.LIMITS, n)
        return busy, self._cost_acks(js, "IDLE", AckPolicy.ALL, RetentionPolicy.LIMITS, k)

    def _cost_interest_acks(self, js) -> tuple[float, float]:
        from jetspark import AckPolicy, RetentionPolicy

        n, k = self.COST_PENDING, self.COST_OPS
        busy = self._cost_acks(js, "BUSY", AckPolicy.EXPLICIT, RetentionPolicy.INTEREST, n)
        return busy, self._cost_acks(js, "IDLE", AckPolicy.EXPLICIT, RetentionPolicy.INTEREST, k)

    def _cost_publish_at_limit(self, js) -> tuple[float, float]:
        from jetspark import AckPolicy, ConsumerConfig, RetentionPolicy

        n, k = self.COST_PENDING, self.COST_OPS
        js.add_stream(name="C", subjects=["c.>"], retention=RetentionPolicy.INTEREST, max_msgs=n)
        js.add_consumer("C", ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT, ack_wait=3600,
                                            max_ack_pending=-1))  # fmt: skip
        publish_table(js, message_table(n, "c"), "C", self.sizes.batch_rows)

        def publishes() -> float:
            t = time.perf_counter()
            for _ in range(k):
                js.publish("c.x", b"x" * PAYLOAD_SIZE)
            return k / (time.perf_counter() - t)

        idle = publishes()  # the oldest go with nothing pending
        self._cost_fetch_all(js.pull_subscribe("c.>", durable="d", stream="C"), n)
        busy = publishes()  # each takes a pending delivery along
        info = js.consumer_info("C", "d")
        if info.num_ack_pending != n - k or js.stream_info("C").state.messages != n:
            raise AssertionError(f"{info.num_ack_pending} pending after {k} publishes at the limit")
        return busy, idle

    def _cost_purge(self, js) -> tuple[float, float]:
        from jetspark import AckPolicy, ConsumerConfig

        n, p, pm = self.COST_PENDING, self.COST_PURGES, self.COST_PURGE_MSGS
        js.add_stream(name="C", subjects=["c.>"])
        publish_table(js, message_table(n + 2 * p * pm, "c"), "C", self.sizes.batch_rows)
        js.add_consumer("C", ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT, ack_wait=3600,
                                            max_ack_pending=-1))  # fmt: skip

        def purges() -> float:
            t = time.perf_counter()
            for _ in range(p):
                js.purge_stream("C", seq=js.stream_info("C").state.first_seq + pm)
            return p / (time.perf_counter() - t)

        idle = purges()
        self._cost_fetch_all(js.pull_subscribe("c.>", durable="d", stream="C"), n + p * pm)
        busy = purges()  # each terms the 100 pending deliveries it removes
        info = js.consumer_info("C", "d")
        if info.num_ack_pending != n or info.ack_floor.stream_seq != 2 * p * pm:
            raise AssertionError(f"{info.num_ack_pending} pending, floor {info.ack_floor.stream_seq} after the purges")
        return busy, idle

    def anchor_fetch_ack(self, ack: str) -> list[float]:
        """nats-py durable pull consumer: fetch(batch=1000), then ack every msg (explicit) or the last (all)."""
        from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy

        anchor = self.get_anchor()
        njs, n = anchor.js, self.sizes.anchor_consumer_msgs
        explicit = ack == "explicit"
        out = []
        for r in range(3):
            stream = f"ACK{r}"
            subject = f"ack{r}.x"
            retention = RetentionPolicy.LIMITS if explicit else RetentionPolicy.INTEREST
            anchor.run(njs.add_stream(name=stream, subjects=[f"ack{r}.>"], retention=retention))

            # The coroutines run inside this iteration: binding the loop's names as defaults says so.
            async def settle(stream=stream) -> None:
                # Acks are fire-and-forget publishes: the clock stops when the server has applied all of them.
                while (await njs.consumer_info(stream, "bench")).ack_floor.stream_seq < n:
                    await asyncio.sleep(0.001)

            async def run(stream=stream, subject=subject) -> float:
                durable = "bench"
                cfg = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT if explicit else AckPolicy.ALL, max_ack_pending=-1)
                sub = await njs.pull_subscribe(subject, durable=durable, stream=stream, config=cfg)
                await anchor.fill(
                    subject, n, self.payload
                )  # after the durable exists: interest streams keep only what has interest
                got = 0
                t = time.perf_counter()
                while got < n:
                    msgs = await sub.fetch(batch=1000, timeout=10)
                    if explicit:
                        for msg in msgs:
                            await msg.ack()
                    else:
                        await msgs[-1].ack()
                    got += len(msgs)
                await settle()
                dt = time.perf_counter() - t
                await sub.unsubscribe()
                return n / dt

            gc.collect()
            out.append(anchor.run(run()))
            anchor.run(njs.delete_stream(stream))
            log(f"6 anchor fetch+ack ({ack}) {r + 1}/3: {rate(out[-1])}")
        return out

    # ---- row 7: bounded growth -------------------------------------------------------

    def row_growth(self) -> list[Row]:
        return [self._row_publish_at_limit(), self._row_unique_ids()]

    def _row_publish_at_limit(self) -> Row:
        """7a: publishing into a stream at its max_msgs limit removes the oldest message
        each time; the anchor is the unlimited rate of the same loop, in this run."""
        name = "single publish at max_msgs=1000 (discard old) vs unlimited"
        n, reps, js, payload = self.sizes.limit_msgs, self.sizes.limit_reps, self.js, self.payload

        def rep(r: int, limit: bool, count: int) -> float:
            stream = f"LIM{r}{'L' if limit else 'U'}"
            js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], max_msgs=1000 if limit else -1)
            subject = f"{stream.lower()}.x"
            if limit:
                for _ in range(1000):  # at the limit before the clock starts
                    js.publish(subject, payload)
            gc.collect()
            t = time.perf_counter()
            for _ in range(count):
                js.publish(subject, payload)
            dt = time.perf_counter() - t
            st = js.stream_info(stream).state
            js.delete_stream(stream)
            want = (1000, 1000 + count) if limit else (count, count)
            if (st.messages, st.last_seq) != want:
                raise AssertionError(f"stream {stream} holds {st.messages} msgs up to {st.last_seq}, expected {want}")
            return count / dt

        rep(999, False, 2000)  # warm-up, not measured
        rep(999, True, 2000)
        lim, unl = [], []
        for r in range(reps):  # interleaved, so drift in machine load hits both sides alike
            unl.append(rep(r, False, n))
            lim.append(rep(r, True, n))
            log(f"7a publish at the limit {r + 1}/{reps}: {rate(lim[-1])}, unlimited {rate(unl[-1])}")
        e, a = statistics.median(lim), statistics.median(unl)
        ratios = [x / y for x, y in zip(lim, unl)]
        return Row(
            "7a", name, rate(e), rate(a) + " (unlimited, this run)", f"{e / a:.2f}x", ">= 0.8x unlimited",
            verdict([(e / a >= 0.8, "< 0.8x unlimited")]), f"limit {spread(lim)}; unlimited {spread(unl)}",
            [f"{reps} interleaved repetitions of {n:,} js.publish calls per side (no headers), each on a fresh "
             f"stream, the limited one filled to its 1,000 first; per-repetition ratios "
             f"{min(ratios):.2f}x-{max(ratios):.2f}x."],
        )  # fmt: skip

    def _row_unique_ids(self) -> Row:
        """7b: the reported growth case: every publish with a new Nats-Msg-Id, max_msgs=1000,
        a 1 s duplicate window.  The store must stay at what the stream retains."""
        n, js, payload = self.sizes.growth_msgs, self.js, self.payload
        name = f"store after {n:,} unique-id publishes, max_msgs=1000, 1 s window: disk / fresh open"
        target = "<= 16 MiB and open < 0.2 s"
        js.add_stream(name="GROW", subjects=["grow.>"], max_msgs=1000, duplicate_window=1.0)
        data_dir = self.store / "streams" / "GROW" / "data"
        rss = []
        t = time.perf_counter()
        for i in range(n):
            js.publish("grow.x", payload, headers={"Nats-Msg-Id": f"id-{i}"})
            if (i + 1) % (n // 10) == 0:
                rss.append(vm_rss_kb())
        dt = time.perf_counter() - t
        st = js.stream_info("GROW").state
        if (st.messages, st.last_seq) != (1000, n):
            raise AssertionError(f"GROW holds {st.messages} msgs up to {st.last_seq}, expected 1000 up to {n}")
        alloc, apparent, files = disk_usage(data_dir)
        opens = [fresh_open(self.store, "GROW", f"fresh-{k}") for k in range(3)]
        open_s = statistics.median(o["open_s"] for o in opens)
        js.delete_stream("GROW")
        mib = alloc / 2**20
        return Row(
            "7b", name, f"{mib:.1f} MiB, open {open_s * 1e3:.0f} ms", target=target,
            result=verdict([(mib <= 16, "> 16 MiB"), (open_s < 0.2, "open >= 0.2 s")]),
            spread=f"open {len(opens)} runs: {min(o['open_s'] for o in opens) * 1e3:.0f}-"
            f"{max(o['open_s'] for o in opens) * 1e3:.0f} ms",
            notes=[
                f"{n:,} js.publish calls with headers={{'Nats-Msg-Id': 'id-<i>'}} at {rate(n / dt)}; "
                "disk = st_blocks * 512 of the stream's "
                f"{files} files ({apparent / 2**20:.1f} MiB apparent: "
                "block files are sparse up to their mapped capacity); "
                f"this process's VmRSS at 10% of the run {rss[0] / 1024:.0f} MB, at the end {rss[-1] / 1024:.0f} MB.",
                "fresh open: a new Python process that has imported jetspark's "
                f"engine ({statistics.median(o['import_s'] for o in opens):.2f} s, "
                f"not counted) times connect + stream_info + one publish with a new msg id; median of {len(opens)}.",
            ],
        )  # fmt: skip


def vm_rss_kb() -> int:
    for line in read_text("/proc/self/status").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def disk_usage(path: Path) -> tuple[int, int, int]:
    """(allocated bytes, apparent bytes, files) under path: st_blocks * 512 and st_size."""
    alloc = apparent = files = 0
    for root, _, names in os.walk(path):
        for f in names:
            st = os.stat(os.path.join(root, f))
            alloc += st.st_blocks * 512
            apparent += st.st_size
            files += 1
    return alloc, apparent, files


_FRESH_OPEN = r"""
import json, sys, time
t = time.perf_counter()
import jetspark
import jetspark.engine.handle  # the engine and numpy: imported by the first connect otherwise
import_s = time.perf_counter() - t
t = time.perf_counter()
js = jetspark.connect(sys.argv[1])
js.stream_info(sys.argv[2])
ack = js.publish("grow.x", b"fresh", headers={"Nats-Msg-Id": sys.argv[3]})
open_s = time.perf_counter() - t
js.close()
print(json.dumps({"import_s": import_s, "open_s": open_s, "duplicate": bool(ack.duplicate)}))
"""


def fresh_open(store: Path, stream: str, msg_id: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _FRESH_OPEN, str(store), stream, msg_id],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    if out.returncode != 0:
        raise RuntimeError(f"fresh-open child exited with {out.returncode}: {out.stderr.strip()[-2000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if res["duplicate"]:
        raise AssertionError(f"a new msg id {msg_id!r} was taken for a duplicate")
    return res


# --------------------------------------------------------------------------- main

SECTIONS = ("1", "2", "3", "4", "5", "6", "6d", "7")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller sizes and fewer repetitions (a 1,000,000-msg stream for rows 4 and 5)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the temporary store and nats-server data go (default: the system temp dir)",
    )
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help="comma-separated rows to run, e.g. --only 1,3 (default: all)"
    )
    args = parser.parse_args(argv)
    only = chosen_rows(parser, args.only, SECTIONS)
    sizes = QUICK if args.quick else FULL

    # Before anything else grows this process (see RssChild).
    children = [RssChild() for _ in range(sizes.rss_reps)] if "5" in only else []
    base = None
    bench = None

    exit_on_sigterm()
    rows: list[Row] = []
    errors = 0
    try:
        _load_heavy_modules()
        if args.dir is not None:
            args.dir.mkdir(parents=True, exist_ok=True)
        base = Path(tempfile.mkdtemp(prefix="jetspark-bench-", dir=args.dir))
        header = machine_info(
            base,
            "jetspark engine benchmark",
            f"{PAYLOAD_SIZE}-byte payloads, file storage, default sync (jetspark sync='os'; nats-server default)",
            sizes,
            args.quick,
        )
        bench = Bench(args, sizes, base, children)
        errors += run_rows([
            ("1", "single publish", bench.row_publish),
            ("2", "publish_batch", bench.row_publish_batch),
            ("3", "range read", lambda: bench.row_read() + bench.row_read_verify()),
            ("4", "read from the middle", bench.row_mid_read),
            ("5", "peak RSS", bench.row_rss),
            ("6", "consumers", bench.row_consumers),
            ("6d", "consumer operations beside 50,000 pending", bench.row_pending_costs),
            ("7", "bounded growth", bench.row_growth),
        ], only, rows)  # fmt: skip
        header.append(f"- load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print("\n".join(header))
        print()
        print_table(rows)
    finally:
        if bench is not None:
            bench.close()
        else:
            for child in children:
                child.dismiss()
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
