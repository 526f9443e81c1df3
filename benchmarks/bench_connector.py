"""Throughput of the Spark connector (``format("jetstream")``), against a synthetic in-memory source and
the noop sink in the same run.

    .venv/bin/python benchmarks/bench_connector.py [--quick] [--dir DIR] [--only 1,2,3]

One SparkSession (``jetspark.local_session(master="local[2]")``) serves every
row.  Throughput is messages / wall time of the Spark action (``save()`` for
a batch query; ``start()`` to the return of ``awaitTermination()`` for a
stream).  The machine this runs on is shared and noisy, so each figure is
the median of several repetitions, printed with its spread; the jetspark
and anchor repetitions are interleaved, and every comparison is a ratio
against the anchor measured in this same run.

Rows (see benchmarks/README.md for what each one means):

1. batch read of the store into the noop sink, vs a synthetic in-memory
   Python data source yielding the same Arrow batches (schema, batch sizes,
   partitions)
2. streaming read (maxOffsetsPerTrigger, Trigger.AvailableNow) into the
   noop sink, vs the synthetic source as a stream with the same offsets
3. streaming write through the jetstream sink (synthetic stream source,
   columns subject and data), vs the same query writing to noop

The script exits 1 only when a row fails with an error, never for a missed
target (targets are what the connector aims at, not assertions).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # jetspark from this checkout when run as a script

import _common as be  # noqa: E402  (the table helpers every benchmark shares)
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from _common import Row, chosen_rows, exit_on_sigterm, rate, spread, verdict  # noqa: E402
from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow  # noqa: E402

import jetspark  # noqa: E402

PAYLOAD_SIZE = 100
SUBJECTS = 16  # subjects <prefix>.0 .. <prefix>.15, round robin by sequence
READ_BATCH = 65536  # the connector's read_batches batch size (the engine's default)
BIG_TABLE_ROWS = 1_000_000  # the store is built from one table of this many rows, repeated
PUBLISH_ROWS = 100_000  # rows per publish_batch call while building the store


@dataclass(frozen=True)
class Sizes:
    read_msgs: int  # rows 1 and 2: messages in the store's stream
    read_reps: int
    stream_reps: int
    per_trigger: int  # maxOffsetsPerTrigger, rows 2 and 3
    write_msgs: int  # row 3
    write_reps: int


FULL = Sizes(
    read_msgs=10_000_000, read_reps=5, stream_reps=3, per_trigger=1_000_000, write_msgs=5_000_000, write_reps=3
)
QUICK = Sizes(read_msgs=1_000_000, read_reps=3, stream_reps=2, per_trigger=100_000, write_msgs=500_000, write_reps=2)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- results (_common.py)


def print_table(rows: list[Row]) -> None:
    be.print_table(rows, anchor="anchor (median)")


# --------------------------------------------------------------------------- machine


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _run(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (out.stdout or out.stderr).strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def machine_info(base: Path, sizes: Sizes, quick: bool, spark) -> list[str]:
    import pyspark

    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in _read("/proc/cpuinfo").splitlines() if ln.startswith("model name")),
        platform.processor() or "?",
    )
    mem_kb = next((int(ln.split()[1]) for ln in _read("/proc/meminfo").splitlines() if ln.startswith("MemTotal:")), 0)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    rev = _run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"])
    java = spark.sparkContext._jvm.java.lang.System.getProperty("java.version")
    mounts = [ln.split() for ln in _read("/proc/mounts").splitlines()]
    fs = max(
        (m for m in mounts if len(m) > 2 and str(base).startswith(m[1])),
        key=lambda m: len(m[1]),
        default=["?", "?", "?"],
    )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    conf = spark.sparkContext.getConf()
    return [
        f"jetspark connector benchmark, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, mode: "
        f"{'--quick' if quick else 'full'}",
        "",
        f"- machine: {os.cpu_count()} cores ({usable} usable), {cpu}, {mem_kb / 1048576:.1f} GiB RAM, "
        f"{platform.system()} {platform.release()}",
        f"- load average at start: {load}",
        f"- python {platform.python_version()}, pyspark {pyspark.__version__}, java {java}, pyarrow {pa.__version__}, "
        f"numpy {np.__version__}",
        f"- jetspark {jetspark.__version__} at {rev}; store and checkpoints under {base} ({fs[2]})",
        f"- spark: master {spark.sparkContext.master}, driver memory {conf.get('spark.driver.memory', '?')}, "
        f"arrow maxRecordsPerBatch {spark.conf.get('spark.sql.execution.arrow.maxRecordsPerBatch')}",
        f"- {PAYLOAD_SIZE}-byte random payloads on {SUBJECTS} subjects, file storage, default sync (sync='os')",
        f"- sizes: {sizes}",
    ]


# --------------------------------------------------------------------------- the synthetic source (the anchor)
#
# Defined here, in __main__, so Spark pickles it by value into its Python
# workers.  Its batches have the connector's Arrow schema (the engine's
# bulk.SCHEMA), its partitions are the connector's split() of the same
# sequence range, and each partition yields batches of exactly the sizes the
# engine's read_batches yields for that range (computed once, before any
# clock starts, and passed in the "layout" option).  The columns are built
# the way the engine builds them, from NumPy buffers, but from memory: a
# template of random payloads and round-robin subjects made once per worker
# process.  Nothing is read from disk.

SYNTH_CACHE_MODULE = "_jetspark_bench_synthetic_cache"


@dataclass(frozen=True)
class SynthRange(InputPartition):
    lo: int
    hi: int
    sizes: tuple  # rows per Arrow batch, summing to hi - lo + 1


def _synth_opts(options) -> dict:
    o = {k.lower(): v for k, v in options.items()}
    return {
        "stream": o.get("stream", "SYNTH"),
        "prefix": o.get("prefix", "synth"),
        "rows": int(o["rows"]),
        "max_offsets": int(o["maxoffsetspertrigger"]) if "maxoffsetspertrigger" in o else None,
        "layout": json.loads(o.get("layout", "{}")),
    }


def _synth_split(opts: dict, lo: int, hi: int) -> list:
    """The connector's partitioning of lo..hi, each part with the engine's batch sizes for it."""
    from jetspark.connector.options import reader_options
    from jetspark.connector.source import split

    ro = reader_options({"stream": opts["stream"]}, streaming=False)  # default minPartitions, rowsPerPartition
    parts = []
    for p in split(ro, lo, hi, ()):
        sizes = opts["layout"].get(f"{p.lo}-{p.hi}")
        if sizes is None:  # no recorded layout: the engine's batch size, as if the range were one block
            n = p.hi - p.lo + 1
            sizes = [READ_BATCH] * (n // READ_BATCH) + ([n % READ_BATCH] if n % READ_BATCH else [])
        parts.append(SynthRange(p.lo, p.hi, tuple(sizes)))
    return parts


def _synth_template(prefix: str) -> dict:
    """Per worker process: READ_BATCH random payloads and round-robin subjects, as Arrow arrays."""
    import types

    mod = sys.modules.get(SYNTH_CACHE_MODULE)
    if mod is None:
        mod = sys.modules.setdefault(SYNTH_CACHE_MODULE, types.ModuleType(SYNTH_CACHE_MODULE))
        mod.templates = {}
    t = mod.templates.get(prefix)
    if t is None:
        n = READ_BATCH
        raw = np.random.default_rng(7).bytes(n * PAYLOAD_SIZE)
        offsets = np.arange(0, (n + 1) * PAYLOAD_SIZE, PAYLOAD_SIZE, dtype=np.int32)
        data = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])
        names = pa.array([f"{prefix}.{i}" for i in range(SUBJECTS)], pa.string())
        subject = names.take(pa.array(np.arange(n + SUBJECTS, dtype=np.int64) % SUBJECTS))
        t = mod.templates[prefix] = {"data": data, "subject": subject, "stream": {}}
    return t


def _synth_batches(stream: str, prefix: str, part: SynthRange):
    from jetspark.protocol.arrow import SCHEMA

    t = _synth_template(prefix)
    ts0 = 1_750_000_000_000_000  # µs since the epoch
    seq = part.lo
    for n in part.sizes:
        col = t["stream"].get((stream, n))
        if col is None:
            b = stream.encode()
            offsets = np.arange(0, (n + 1) * len(b), len(b), dtype=np.int32)
            col = t["stream"][(stream, n)] = pa.Array.from_buffers(
                pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b * n)]
            )
        seqs = np.arange(seq, seq + n, dtype=np.int64)
        yield pa.RecordBatch.from_arrays(
            [
                col,
                t["subject"].slice(
                    (seq - 1) % SUBJECTS, n
                ),  # the subject of seq s is <prefix>.((s - 1) % 16), as in the store
                pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(seqs)]),
                pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(seqs + ts0)]),
                t["data"].slice(0, n),
            ],
            schema=SCHEMA,
        )
        seq += n


class SynthBatchReader(DataSourceReader):
    def __init__(self, opts: dict) -> None:
        self.opts = opts

    def partitions(self):
        return _synth_split(self.opts, 1, self.opts["rows"])

    def read(self, partition):
        return _synth_batches(self.opts["stream"], self.opts["prefix"], partition)


class SynthStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The connector's StreamReader without a store: offsets {"stream", "seq"}, ReadMaxRows, AvailableNow."""

    def __init__(self, opts: dict) -> None:
        self.opts = opts
        self._target: Optional[int] = None

    def initialOffset(self) -> dict:
        return {"stream": self.opts["stream"], "seq": 0}

    def getDefaultReadLimit(self):
        m = self.opts["max_offsets"]
        return ReadMaxRows(m) if m else ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        begin = int(start["seq"])
        end = self.opts["rows"] if self._target is None else min(self.opts["rows"], self._target)
        if end <= begin:
            return start
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + limit.max_rows)
        return {"stream": self.opts["stream"], "seq": end}

    def reportLatestOffset(self) -> dict:
        return {"stream": self.opts["stream"], "seq": self.opts["rows"]}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.opts["rows"]

    def partitions(self, start: dict, end: dict):
        return _synth_split(self.opts, int(start["seq"]) + 1, int(end["seq"]))

    def read(self, partition):
        return _synth_batches(self.opts["stream"], self.opts["prefix"], partition)

    def commit(self, end: dict) -> None:
        pass


class SynthDataSource(DataSource):
    """format("jetspark_bench_synthetic"): rows 1..N of the connector's schema from memory."""

    @classmethod
    def name(cls) -> str:
        return "jetspark_bench_synthetic"

    def schema(self):
        from jetspark.connector import SOURCE_SCHEMA

        return SOURCE_SCHEMA

    def reader(self, schema):
        return SynthBatchReader(_synth_opts(self.options))

    def streamReader(self, schema):
        return SynthStreamReader(_synth_opts(self.options))


class NullArrowWriter(DataSourceStreamArrowWriter):
    """Takes every Arrow batch Spark hands a Python sink and drops it: the JVM -> Python hop alone."""

    def write(self, iterator):
        rows = 0
        for batch in iterator:
            rows += batch.num_rows
        return WriterCommitMessage()

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass


class NullSink(DataSource):
    """format("jetspark_bench_null"): a streaming Python Arrow sink that writes nothing."""

    @classmethod
    def name(cls) -> str:
        return "jetspark_bench_null"

    def streamWriter(self, schema, overwrite: bool):
        return NullArrowWriter()


# --------------------------------------------------------------------------- the run


class Bench:
    def __init__(self, args, sizes: Sizes, base: Path, spark) -> None:
        self.args = args
        self.sizes = sizes
        self.base = base
        self.spark = spark
        self.store = str(base / "store")
        self.js = jetspark.connect(self.store)
        self.big_msgs = 0
        self.build_s = 0.0
        self.layout: Optional[dict] = None
        self.layout_s = 0.0
        self.runs = 0
        spark.dataSource.register(SynthDataSource)
        spark.dataSource.register(NullSink)

    def close(self) -> None:
        self.js.close()

    def checkpoint(self) -> str:
        self.runs += 1
        return str(self.base / "checkpoints" / f"q{self.runs}")

    # ---- the store -------------------------------------------------------------

    def build_store(self) -> None:
        """The stream BIG: sizes.read_msgs messages (subjects big.0..15 round robin), with publish_batch, once."""
        n = self.sizes.read_msgs
        if self.big_msgs >= n:
            return
        js = self.js
        js.add_stream(name="BIG", subjects=["big.>"])
        rows = min(BIG_TABLE_ROWS, n)
        t = time.perf_counter()
        table = message_table(rows, "big")
        table_s = time.perf_counter() - t
        t = time.perf_counter()
        done = 0
        while done < n:
            chunk = table.slice(0, min(rows, n - done))
            for off in range(0, chunk.num_rows, PUBLISH_ROWS):
                part = chunk.slice(off, PUBLISH_ROWS)
                res = js.publish_batch(part, stream="BIG")
                if len(res.seqs) != part.num_rows:
                    raise AssertionError("publish_batch returned a short ack")
            done += chunk.num_rows
            if done % 2_000_000 == 0 or done == n:
                log(f"BIG: {done:,} / {n:,} messages")
        self.build_s = time.perf_counter() - t
        self.table_s = table_s
        state = js.stream_info("BIG").state
        if state.messages != n or state.last_seq != n:
            raise AssertionError(f"BIG holds {state.messages} messages (last seq {state.last_seq}), expected {n}")
        self.big_msgs = n
        # The engine's batch sizes for every 1,000,000-sequence range the connector reads: batch read
        # partitions and micro-batches alike (rowsPerPartition and maxOffsetsPerTrigger are both 1M).
        t = time.perf_counter()
        self.layout = {}
        ranges = set()
        from jetspark.connector.options import reader_options
        from jetspark.connector.source import split

        ropts = reader_options({"stream": "BIG"}, streaming=False)
        for p in split(ropts, 1, n, ()):
            ranges.add((p.lo, p.hi))
        per = self.sizes.per_trigger
        for lo in range(1, n + 1, per):
            hi = min(lo + per - 1, n)
            for p in split(ropts, lo, hi, ()):
                ranges.add((p.lo, p.hi))
        for lo, hi in sorted(ranges):
            self.layout[f"{lo}-{hi}"] = [b.num_rows for b in js.read_batches("BIG", lo, hi)]
            if sum(self.layout[f"{lo}-{hi}"]) != hi - lo + 1:
                raise AssertionError(f"read_batches returned {sum(self.layout[f'{lo}-{hi}'])} rows for {lo}..{hi}")
        self.layout_s = time.perf_counter() - t
        self.check_identical()

    def store_note(self) -> Optional[str]:
        if not self.big_msgs:
            return None
        n = self.big_msgs
        return (
            f"- store: stream BIG, {n:,} msgs built once with publish_batch "
            f"({PUBLISH_ROWS:,} rows/call from a {min(BIG_TABLE_ROWS, n):,}-row table) "
            f"in {self.build_s:.1f} s ({rate(n / self.build_s)}), plus {self.table_s:.1f} s to make the table; "
            f"recording the engine's batch sizes for the synthetic source (one read_batches pass) {self.layout_s:.1f} s"
        )

    def check_identical(self) -> None:
        """The synthetic source's first partition against the engine's read of the same range."""
        from jetspark.connector.source import SeqRange, read_range

        opts = _synth_opts(self.synth_options(self.sizes.read_msgs, "BIG", "big"))
        part = _synth_split(opts, 1, self.sizes.read_msgs)[0]
        mine = list(_synth_batches("BIG", "big", part))
        theirs = list(read_range(SeqRange(self.store, "BIG", part.lo, part.hi, (), False)))
        if [b.num_rows for b in mine] != [b.num_rows for b in theirs]:
            raise AssertionError("synthetic batch sizes differ from the engine's")
        for a, b in zip(mine, theirs):
            if not a.schema.equals(b.schema, check_metadata=True):
                raise AssertionError(f"synthetic schema {a.schema} differs from the engine's {b.schema}")
            for name in ("stream", "subject", "seq"):
                if not a.column(name).equals(b.column(name)):
                    raise AssertionError(f"synthetic column {name} differs from the engine's")
            if a.column("data").nbytes != b.column("data").nbytes:
                raise AssertionError("synthetic payload bytes differ in size from the engine's")

    def synth_options(self, rows: int, stream: str, prefix: str, per_trigger: Optional[int] = None) -> dict:
        o = {"rows": str(rows), "stream": stream, "prefix": prefix, "layout": json.dumps(self.layout or {})}
        if per_trigger:
            o["maxOffsetsPerTrigger"] = str(per_trigger)
        return o

    # ---- helpers -----------------------------------------------------------------

    def timed_stream(self, df, fmt: str, options: dict, n: int) -> tuple[float, dict]:
        """Run df.writeStream with availableNow to the end; returns (msg/s, progress summary)."""
        gc.collect()
        t = time.perf_counter()
        q = (
            df.writeStream.format(fmt).options(**options).option("checkpointLocation", self.checkpoint())
            .trigger(availableNow=True).start()
        )  # fmt: skip
        try:
            q.awaitTermination()
        finally:
            if q.isActive:
                q.stop()
        dt = time.perf_counter() - t
        if q.exception() is not None:
            raise RuntimeError(f"query failed: {q.exception()}")
        progress = q.recentProgress
        rows = sum(int(p["numInputRows"]) for p in progress)
        if rows != n:
            raise AssertionError(f"the query read {rows} rows, expected {n}")
        durations: dict[str, float] = {}
        for p in progress:
            for k, v in (p["durationMs"] or {}).items():
                durations[k] = durations.get(k, 0.0) + float(v) / 1e3
        return n / dt, {"wall_s": dt, "batches": len(progress), "durations": durations}

    def interleave(
        self, key: str, reps: int, a: Callable[[], float], b: Callable[[], float], what: tuple[str, str]
    ) -> tuple[list[float], list[float]]:
        av, bv = [], []
        for r in range(reps):  # interleaved, so drift in machine load hits both sides alike
            av.append(a())
            bv.append(b())
            log(f"{key} {r + 1}/{reps}: {what[0]} {rate(av[-1])}, {what[1]} {rate(bv[-1])}")
        return av, bv

    # ---- row 1 -------------------------------------------------------------------

    def row_batch_read(self) -> list[Row]:
        n = self.sizes.read_msgs
        name = f"batch read of {n:,} msgs into noop: spark.read.format('jetstream')"
        target = ">= 80% of anchor"
        self.build_store()
        spark = self.spark

        def jet_df():
            return spark.read.format("jetstream").option("store", self.store).option("stream", "BIG").load()

        def synth_df():
            return spark.read.format(SynthDataSource.name()).options(**self.synth_options(n, "BIG", "big")).load()

        def timed(make) -> float:
            df = make()
            gc.collect()
            t = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            return n / (time.perf_counter() - t)

        # Warm-up, not timed, and the row counts: count() reads every batch of every partition.
        for label, make in (("jetspark", jet_df), ("synthetic", synth_df)):
            got = make().count()
            if got != n:
                raise AssertionError(f"{label} source: count() = {got}, expected {n}")
        ranges = _synth_split(_synth_opts(self.synth_options(n, "BIG", "big")), 1, n)
        parts = len(ranges)
        jparts = jet_df().rdd.getNumPartitions()
        if jparts != parts:
            raise AssertionError(f"the jetstream source planned {jparts} partitions, the synthetic one {parts}")
        jet, syn = self.interleave(
            "1 batch read",
            self.sizes.read_reps,
            lambda: timed(jet_df),
            lambda: timed(synth_df),
            ("jetspark", "synthetic"),
        )
        e, a = statistics.median(jet), statistics.median(syn)
        ratios = [x / y for x, y in zip(jet, syn)]
        notes = [
            f"{self.sizes.read_reps} interleaved repetitions per source "
            "after one untimed count() of each (warm-up and row check); "
            f"{parts} partition{'s' if parts > 1 else ''} of <= 1,000,000 sequences "
            "(the connector's rowsPerPartition default), run 2 at a time on local[2]; "
            f"per-repetition ratios {min(ratios):.0%}-{max(ratios):.0%}.",
            "anchor: a Python DataSource defined in the script, "
            "yielding from memory Arrow batches with the connector's schema, "
            f"the same partitions and the same batch sizes as the engine's read_batches for each range "
            f"({_layout_summary(self.layout, ranges)}); stream, subject and seq columns equal, "
            "payloads random 100-byte, timestamps synthetic.",
        ]
        if n < 10_000_000:
            notes.append(f"--quick: {n:,} messages, not 10,000,000, and {self.sizes.read_reps} repetitions.")
        return [
            Row(
                "1", name, rate(e), rate(a) + " (synthetic source)", f"{e / a:.0%}", target,
                verdict([(e / a >= 0.8, "< 80% of anchor")]), f"jetspark {spread(jet)}; anchor {spread(syn)}", notes,
            )
        ]  # fmt: skip

    # ---- row 2 -------------------------------------------------------------------

    def row_stream_read(self) -> list[Row]:
        n, per = self.sizes.read_msgs, self.sizes.per_trigger
        name = f"streaming read of {n:,} msgs, maxOffsetsPerTrigger {per:,}, AvailableNow, into noop"
        target = ">= 70% of anchor"
        self.build_store()
        spark = self.spark

        def jet() -> float:
            df = (
                spark.readStream.format("jetstream").option("store", self.store).option("stream", "BIG")
                .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(per)).load()
            )  # fmt: skip
            v, info = self.timed_stream(df, "noop", {}, n)
            jinfo.append(info)
            return v

        def synth() -> float:
            df = (
                spark.readStream.format(SynthDataSource.name())
                .options(**self.synth_options(n, "BIG", "big", per))
                .load()
            )
            v, info = self.timed_stream(df, "noop", {}, n)
            sinfo.append(info)
            return v

        jinfo: list[dict] = []
        sinfo: list[dict] = []
        # Warm-up (not timed): a short query on each side.
        self._warm_stream(min(n, 2 * per), per)
        jet_v, syn_v = self.interleave(
            "2 streaming read", self.sizes.stream_reps, jet, synth, ("jetspark", "synthetic")
        )
        e, a = statistics.median(jet_v), statistics.median(syn_v)
        ratios = [x / y for x, y in zip(jet_v, syn_v)]
        notes = [
            f"{self.sizes.stream_reps} interleaved repetitions per source, fresh checkpoint each, "
            "after a short untimed query on each side; "
            f"time = start() to the return of awaitTermination(); {jinfo[0]['batches']} micro-batches of {per:,} msgs, "
            f"{len(_synth_split(_synth_opts(self.synth_options(n, 'BIG', 'big')), 1, per))} "
            "partition(s) each (the connector's split of a micro-batch); "
            f"per-repetition ratios {min(ratios):.0%}-{max(ratios):.0%}.",
            "where the time goes (sum of the micro-batches' durationMs, median run): jetspark "
            + _durations(jinfo)
            + "; anchor "
            + _durations(sinfo)
            + ".",
            "anchor: the synthetic source as a DataSourceStreamReader (offsets {stream, seq}, "
            "ReadMaxRows from maxOffsetsPerTrigger, "
            "SupportsTriggerAvailableNow), the same partitions and batch sizes as row 1's.",
        ]
        if n < 10_000_000:
            notes.append(
                f"--quick: {n:,} messages and maxOffsetsPerTrigger {per:,} (10 micro-batches, as the full run), "
                f"{self.sizes.stream_reps} repetitions."
            )
        return [
            Row(
                "2", name, rate(e), rate(a) + " (synthetic stream)", f"{e / a:.0%}", target,
                verdict([(e / a >= 0.7, "< 70% of anchor")]), f"jetspark {spread(jet_v)}; anchor {spread(syn_v)}",
                notes,
            )
        ]  # fmt: skip

    def _warm_stream(self, n: int, per: int) -> None:
        spark = self.spark
        df = (
            spark.readStream.format("jetstream").option("store", self.store).option("stream", "BIG")
            .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(per)).load()
        )  # fmt: skip
        # endingOffsets is batch-only, so the jetstream warm-up reads everything once; fine, it is not timed.
        self.timed_stream(df, "noop", {}, self.sizes.read_msgs)
        df = spark.readStream.format(SynthDataSource.name()).options(**self.synth_options(n, "BIG", "big", per)).load()
        self.timed_stream(df, "noop", {}, n)

    # ---- row 3 -------------------------------------------------------------------

    def row_stream_write(self) -> list[Row]:
        n, per = self.sizes.write_msgs, self.sizes.per_trigger
        name = f"streaming write of {n:,} msgs: writeStream.format('jetstream'), AvailableNow"
        target = ">= 50% of anchor"
        spark, js = self.spark, self.js
        opts = self.synth_options(n, "SRC", "out", per)
        opts["layout"] = "{}"  # plain 65,536-row batches: there is no store behind this source
        sink_opts = {"store": self.store, "stream": "OUT"}

        def source(rows: int):
            return (
                spark.readStream.format(SynthDataSource.name())
                .options(**dict(opts, rows=str(rows)))
                .load()
                .select("subject", "data")
            )

        def jet(rows: int = n) -> float:
            js.add_stream(name="OUT", subjects=["out.>"])
            try:
                v, info = self.timed_stream(source(rows), "jetstream", sink_opts, rows)
                got = js.stream_info("OUT").state.messages
                if got != rows:
                    raise AssertionError(f"the sink stored {got} messages, expected {rows}")
            finally:
                js.delete_stream("OUT")
            infos["jetstream"].append(info)
            return v

        def other(fmt: str, rows: int = n) -> float:
            v, info = self.timed_stream(source(rows), fmt, {}, rows)
            infos[fmt].append(info)
            return v

        infos: dict[str, list[dict]] = {"jetstream": [], "noop": [], NullSink.name(): []}
        # Warm-up (not timed): one micro-batch into each sink.
        jet(per), other("noop", per), other(NullSink.name(), per)
        for v in infos.values():
            v.clear()
        jet_v, noop_v, null_v = [], [], []
        for r in range(self.sizes.write_reps):  # interleaved, so drift in machine load hits every side alike
            jet_v.append(jet())
            noop_v.append(other("noop"))
            null_v.append(other(NullSink.name()))
            log(
                f"3 streaming write {r + 1}/{self.sizes.write_reps}: jetstream sink {rate(jet_v[-1])}, "
                f"noop {rate(noop_v[-1])}, null Python sink {rate(null_v[-1])}"
            )
        e, a, z = statistics.median(jet_v), statistics.median(noop_v), statistics.median(null_v)
        ratios = [x / y for x, y in zip(jet_v, noop_v)]
        t_jet, t_noop, t_null = n / e, n / a, n / z
        notes = [
            f"{self.sizes.write_reps} interleaved repetitions per sink, "
            "a fresh stream OUT (subjects out.>) and checkpoint each, after one untimed micro-batch into each; "
            "source: the synthetic stream (in memory, so no store read competes with the sink), "
            f"maxOffsetsPerTrigger {per:,}, "
            f"{infos['jetstream'][0]['batches']} micro-batches of 1 partition each, .select('subject', 'data'); "
            "sink options store and stream=OUT (no per-batch routing by subject); no msg_id column, "
            "so the sink makes one Nats-Msg-Id per row "
            f"and the engine de-duplicates every row; per-repetition ratios {min(ratios):.0%}-{max(ratios):.0%}.",
            f"the medians as time per 1,000,000 msgs: noop {1e6 * t_noop / n:.2f} s; "
            "the JVM -> Python Arrow hop any Python sink pays "
            f"(row 3b minus noop) {1e6 * (t_null - t_noop) / n:.2f} s; "
            f"the jetstream sink's own work (jetstream minus row 3b) {1e6 * (t_jet - t_null) / n:.2f} s.",
            "where the time goes (sum of the micro-batches' durationMs, median run): jetstream sink "
            + _durations(infos["jetstream"])
            + "; noop "
            + _durations(infos["noop"])
            + "; null Python sink "
            + _durations(infos[NullSink.name()])
            + ".",
        ]
        if n < 5_000_000:
            notes.append(
                f"--quick: {n:,} messages, maxOffsetsPerTrigger {per:,}, {self.sizes.write_reps} repetitions; "
                "at this size the fixed cost "
                "of a query (start, stop, a checkpoint commit per micro-batch) is most of the anchor's time, "
                "so the ratio flatters the sink: "
                "judge the sink by the full run."
            )
        return [
            Row(
                "3", name, rate(e), rate(a) + " (same query into noop)", f"{e / a:.0%}", target,
                verdict([(e / a >= 0.5, "< 50% of anchor")]), f"jetspark {spread(jet_v)}; anchor {spread(noop_v)}",
                notes,
            ),
            Row(
                "3b", "the same query into a do-nothing Python Arrow stream writer (the JVM -> Python hop alone)",
                rate(z), rate(a) + " (noop)", f"{z / a:.0%}", "-", "info", f"null sink {spread(null_v)}",
                ["a DataSourceStreamArrowWriter defined in the script that counts the rows of each batch "
                 "Spark hands it and drops them: "
                 f"the ceiling for any Python sink on this query; the jetstream sink reaches {e / z:.0%} of it."],
            ),
        ]  # fmt: skip


def _layout_summary(layout: dict, ranges: list) -> str:
    sizes = [s for p in ranges for s in layout[f"{p.lo}-{p.hi}"]]
    parts = len(ranges)
    full = sum(1 for s in sizes if s == READ_BATCH)
    return (
        f"{len(sizes)} batches over the {parts} partition{'s' if parts > 1 else ''}: {full} of {READ_BATCH:,} rows, "
        f"{len(sizes) - full} shorter at partition and block ends"
    )


def _durations(infos: list[dict]) -> str:
    if not infos:
        return "-"
    pick = sorted(infos, key=lambda i: i["wall_s"])[len(infos) // 2]
    d = pick["durations"]
    keys = ["addBatch", "latestOffset", "queryPlanning", "walCommit", "commitOffsets", "getBatch"]
    parts = [f"{k} {d[k]:.1f} s" for k in keys if d.get(k, 0) >= 0.05]
    return (
        f"wall {pick['wall_s']:.1f} s = "
        + ", ".join(parts)
        + f", rest {pick['wall_s'] - sum(d.get(k, 0) for k in keys):.1f} s"
    )


# --------------------------------------------------------------------------- data


def payloads(n: int, seed: int = 0) -> pa.Array:
    raw = np.random.default_rng(seed).bytes(n * PAYLOAD_SIZE)
    offsets = np.arange(0, (n + 1) * PAYLOAD_SIZE, PAYLOAD_SIZE, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])


def message_table(n: int, prefix: str) -> pa.Table:
    """subject (<prefix>.0 .. <prefix>.15, round robin), data (random, 100 bytes)."""
    names = pa.array([f"{prefix}.{i}" for i in range(SUBJECTS)], pa.string())
    subject = names.take(pa.array(np.arange(n, dtype=np.int64) % SUBJECTS))
    return pa.table({"subject": subject, "data": payloads(n)})


# --------------------------------------------------------------------------- main

SECTIONS = ("1", "2", "3")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="1,000,000 msgs to read, 500,000 to write, fewer repetitions"
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the temporary store and checkpoints go (default: the system temp dir)",
    )
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help="comma-separated rows to run, e.g. --only 1,3 (default: all)"
    )
    args = parser.parse_args(argv)
    only = chosen_rows(parser, args.only, SECTIONS)
    sizes = QUICK if args.quick else FULL

    exit_on_sigterm()
    rows: list[Row] = []
    errors = 0
    base = None
    spark = None
    bench = None
    started = time.perf_counter()
    try:
        if args.dir is not None:
            args.dir.mkdir(parents=True, exist_ok=True)
        base = Path(tempfile.mkdtemp(prefix="jetspark-bench-connector-", dir=args.dir))
        log("starting Spark (local[2])")
        t = time.perf_counter()
        spark = jetspark.local_session(
            "jetspark-bench-connector", master="local[2]", **{"spark.local.dir": str(base / "spark-local")}
        )
        spark_s = time.perf_counter() - t
        header = machine_info(base, sizes, args.quick, spark)
        header.append(f"- SparkSession up in {spark_s:.1f} s")
        bench = Bench(args, sizes, base, spark)
        errors += be.run_rows([
            ("1", "batch read", bench.row_batch_read),
            ("2", "streaming read", bench.row_stream_read),
            ("3", "streaming write", bench.row_stream_write),
        ], only, rows)  # fmt: skip
        if bench.store_note():
            header.append(bench.store_note())
        header.append(
            f"- load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
            f"whole run {time.perf_counter() - started:.0f} s"
        )
        print("\n".join(header))
        print()
        print_table(rows)
    finally:
        if spark is not None:
            for q in spark.streams.active:
                q.stop()
            spark.stop()
        if bench is not None:
            bench.close()
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
