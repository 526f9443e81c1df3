"""A nats-server killed in the middle of a streaming query and started again on the
same store: after a restart from its checkpoint, the output holds every message
exactly once."""

from __future__ import annotations

import os
import signal
import time

import pyarrow as pa
import pytest

import jetspark
from tests.servers import NatsServer

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _wait_for(predicate, deadline_s: float) -> bool:
    # The query runs on Spark's threads: a bounded wait on its visible effect is the sync here.
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except jetspark.JetSparkError:
            pass  # the server is down or restarting
        time.sleep(0.1)
    return False


def test_server_restart_mid_query_then_checkpoint_restart_is_exactly_once(spark, tmp_path):
    server = NatsServer().start()
    try:
        with jetspark.connect(server.url) as js:
            js.add_stream(name="IN", subjects=["in.>"])
            js.add_stream(name="OUT", subjects=["out.>"])
            n = 3000
            js.publish_batch(pa.table({"subject": ["in.x"] * n, "data": [b"m%05d" % i for i in range(n)]}))

        def query(**trigger):
            return (
                spark.readStream.format("jetstream")
                .option("store", server.url)
                .option("stream", "IN")
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", 200)
                .load()
                .selectExpr("'out.x' AS subject", "data")
                .writeStream.format("jetstream")
                .option("store", server.url)
                .option("checkpointLocation", str(tmp_path / "ckpt"))
                .trigger(**trigger)
                .start()
            )

        def out_count():
            with jetspark.connect(server.url, timeout=1) as js:
                return js.stream_info("OUT").state.messages

        q = query(processingTime="100 milliseconds")
        assert _wait_for(lambda: out_count() >= 400, 60), "the query wrote nothing"
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        server.start()  # same port, same store directory
        try:
            # It either recovers on its own (more output appears) or fails clearly.
            _wait_for(lambda: out_count() > 600, 15)
        finally:
            try:
                q.stop()
            except Exception:
                pass  # a query that failed on the restart reports it here
        query(availableNow=True).awaitTermination(120)

        with jetspark.connect(server.url) as js:
            got = sorted(bytes(d).decode() for b in js.read_batches("OUT", 1) for d in b.column("data").to_pylist())
        assert got == [f"m{i:05d}" for i in range(n)]
    finally:
        server.stop()
