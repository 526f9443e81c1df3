"""jetspark's nats:// backend on a 3-node JetStream cluster: replicated (R3) streams
beside unreplicated (R1) ones on the same cluster, and beside one lone server.

    .venv/bin/python benchmarks/bench_cluster.py [--quick] [--dir DIR]

The script starts a 3-node cluster (natsdev/servers.py ``NatsCluster``) and one
server of the same ``nats-server`` binary, on 127.0.0.1 and free ports:

1. range read into Arrow: ``js.read_batches`` of an R3 stream vs an R1 stream
   (goal >= 0.9x: a read is served by one node either way); the lone
   server's R1 read for scale, and the reader's CPU time per message
2. batch append: ``js.publish_batch`` into an R3 stream vs an R1 stream
   (information: every R3 append waits for a quorum of two nodes)
3. work-queue read: ``read_batches`` of an R3 work-queue stream with
   ``allow_direct`` beside its durable, vs the lone server's

100-byte payloads, file storage; medians of interleaved repetitions with their
spread; every ratio is against a figure measured in the same run.  The
machine is shared: the three nodes, the lone server and the client share
its cores.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _common as be  # noqa: E402
from _common import Row, log, rate, spread, verdict  # noqa: E402

import jetspark  # noqa: E402
from jetspark import AckPolicy, RetentionPolicy  # noqa: E402
from natsdev.servers import NatsCluster  # noqa: E402


@dataclass(frozen=True)
class Sizes:
    read_msgs: int
    publish_msgs: int
    wq_msgs: int
    reps: int


FULL = Sizes(read_msgs=300_000, publish_msgs=100_000, wq_msgs=100_000, reps=3)
QUICK = Sizes(read_msgs=100_000, publish_msgs=50_000, wq_msgs=50_000, reps=3)


def fill(js, name: str, n: int, **config) -> None:
    js.add_stream(name=name, subjects=[f"{name.lower()}.>"], **config)
    for off in range(0, n, 50_000):
        js.publish_batch(be.message_table(min(50_000, n - off), name.lower()), stream=name)


def cpu_read(js, stream: str, n: int) -> tuple[float, float]:
    """(msgs/s, the calling process's CPU µs per message) of one read of 1..n."""
    t, c = time.perf_counter(), time.process_time()
    got = sum(b.num_rows for b in js.read_batches(stream, 1, n))
    dt, dc = time.perf_counter() - t, time.process_time() - c
    if got != n:
        raise AssertionError(f"read {got} of {n} messages of {stream}")
    return n / dt, dc / n * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the servers' data goes (default: the system temp dir)"
    )
    args = parser.parse_args(argv)
    s = QUICK if args.quick else FULL
    base = Path(tempfile.mkdtemp(prefix="jetspark-bench-cluster-", dir=args.dir))
    cluster = lone = None
    rows: list[Row] = []
    try:
        header = be.machine_info(
            base,
            "jetspark on a 3-node NATS cluster",
            "100-byte payloads, file storage; a 3-node cluster and one server on this machine",
            s,
            args.quick,
        )
        cluster = NatsCluster(base=str(base)).start()
        lone = be.NatsServer(base).start()
        js = jetspark.connect(cluster.url, timeout=30)
        one = jetspark.connect(lone.url, timeout=30)

        # ---- 1: range read
        n = s.read_msgs
        fill(js, "R3", n, num_replicas=3)
        fill(js, "R1", n, num_replicas=1)
        fill(one, "LONE", n)
        log(f"1 filled R3, R1 (cluster) and LONE (one server) with {n:,} messages")
        cpu_read(js, "R3", 10_000)
        r3, r1, lo, cpu = [], [], [], []
        for r in range(s.reps):
            v, c = cpu_read(js, "R3", n)
            r3.append(v)
            cpu.append(c)
            r1.append(cpu_read(js, "R1", n)[0])
            lo.append(cpu_read(one, "LONE", n)[0])
            log(
                f"1 read {r + 1}/{s.reps}: R3 {rate(r3[-1])} ({cpu[-1]:.1f} µs CPU/msg), R1 {rate(r1[-1])}, "
                f"one server {rate(lo[-1])}"
            )
        m3, m1, ml = statistics.median(r3), statistics.median(r1), statistics.median(lo)
        rows.append(
            Row("1", f"range read into Arrow, R3 stream ({n:,} msgs)", rate(m3), rate(m1) + " (R1 on the cluster)",
                f"{m3 / m1:.2f}x", ">= 0.9x R1", verdict([(m3 / m1 >= 0.9, "< 0.9x R1")]),
                f"R3 {spread(r3)}; R1 {spread(r1)}",
                [f"one server, R1: {rate(ml)} (R3 {m3 / ml:.2f}x of it); "
                 f"the reader's CPU: {statistics.median(cpu):.1f} µs per message (R3)"])
        )  # fmt: skip
        for name, h in (("R3", js), ("R1", js), ("LONE", one)):
            h.delete_stream(name)

        # ---- 2: batch append
        n = s.publish_msgs
        table = be.message_table(n, "p3")
        a3, a1 = [], []
        for r in range(s.reps):
            for name, replicas, out in (("P3", 3, a3), ("P1", 1, a1)):
                js.add_stream(name=name, subjects=["p3.>"], num_replicas=replicas)
                t = time.perf_counter()
                be.publish_table(js, table, name, 25_000)
                out.append(n / (time.perf_counter() - t))
                js.delete_stream(name)
            log(f"2 append {r + 1}/{s.reps}: R3 {rate(a3[-1])}, R1 {rate(a1[-1])}")
        m3, m1 = statistics.median(a3), statistics.median(a1)
        rows.append(Row("2", f"batch append: publish_batch into an R3 stream ({n:,} rows)", rate(m3),
                        rate(m1) + " (R1 on the cluster)", f"{m3 / m1:.2f}x", "", "info",
                        f"R3 {spread(a3)}; R1 {spread(a1)}",
                        ["every R3 row is acknowledged once two of the three nodes stored it"]))  # fmt: skip

        # ---- 3: work-queue read
        n = s.wq_msgs
        for h, name, replicas in ((js, "WQ3", 3), (one, "WQ1", 1)):
            fill(h, name, n, retention=RetentionPolicy.WORK_QUEUE, allow_direct=True, num_replicas=replicas)
            h.add_consumer(name, durable_name="spark", ack_policy=AckPolicy.EXPLICIT)
        w3, w1 = [], []
        for r in range(s.reps):
            w3.append(be.read_rate(js, "WQ3", n))
            w1.append(be.read_rate(one, "WQ1", n))
            log(f"3 work-queue read {r + 1}/{s.reps}: R3 {rate(w3[-1])}, one server {rate(w1[-1])}")
        m3, m1 = statistics.median(w3), statistics.median(w1)
        rows.append(Row("3", f"work-queue read (direct gets), R3 stream ({n:,} msgs)", rate(m3),
                        rate(m1) + " (one server)", f"{m3 / m1:.2f}x", ">= 200,000 msg/s on one server",
                        verdict([(m1 >= 200_000, "< 200,000 msg/s on one server")]),
                        f"R3 {spread(w3)}; one server {spread(w1)}", []))  # fmt: skip
        js.close()
        one.close()
        print("\n".join(header))
        print()
        be.print_table(rows, anchor="anchor (median)", value="jetspark (median)")
    finally:
        for stopper in (cluster, lone):
            if stopper is not None:
                stopper.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
