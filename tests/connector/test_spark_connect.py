"""Spark Connect: a batch read (with a pushed-down filter), an AvailableNow streaming read and
the jetstream sink through a Connect session (docs/guides/spark-connect.md).

A process has one JVM, and the suite's own (classic) session holds this one, so the
Connect session runs in a child process: ``SPARK_REMOTE=local[2]`` there makes
``jetspark.local_session()`` start a local Connect server and connect to it; the
format is registered from the client, the server runs this interpreter's Python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jetspark

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
sys.path.insert(0, {root!r})
import jetspark
from pyspark.sql import functions as F

store, checkpoint = sys.argv[1], sys.argv[2]
spark = jetspark.local_session("jetspark-connect-test")
out = {{"session": type(spark).__module__}}
def read(**o):
    return spark.read.format("jetstream").option("store", store).option("stream", "S").options(**o).load()
# A filter the source takes (Spark lets it once register() has run); load() again per query.
s1 = read(pushFilters="true").where(F.col("subject") == "s.1")
out["batch_s1"] = sorted(r.seq for r in s1.select("seq").collect())
out["batch_count"] = read().count()
events = (
    spark.readStream.format("jetstream").option("store", store).option("stream", "S")
    .option("consumer", "connect").option("startingOffsets", "earliest").load()
)
q = events.writeStream.format("memory").queryName("connect_seen").trigger(availableNow=True).start()
q.awaitTermination()
out["stream_seqs"] = sorted(r.seq for r in spark.table("connect_seen").select("seq").collect())
plain = (
    spark.readStream.format("jetstream").option("store", store).option("stream", "S")
    .option("startingOffsets", "earliest").load()
)
q = (
    plain.selectExpr("concat('out.', subject) AS subject", "data", "concat('m-', CAST(seq AS STRING)) AS msg_id")
    .writeStream.format("jetstream").option("store", store).option("checkpointLocation", checkpoint)
    .trigger(availableNow=True).start()
)
q.awaitTermination()
spark.stop()
print("RESULT " + json.dumps(out))
"""


def test_batch_stream_and_sink_through_spark_connect(tmp_path):
    store = str(tmp_path / "store")
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s.>"])
        js.add_stream(name="OUT", subjects=["out.>"])
        for i in range(10):
            js.publish(f"s.{i % 2}", f"m{i}".encode())
    script = tmp_path / "connect_child.py"
    script.write_text(CHILD.format(root=str(ROOT)))
    env = {**os.environ, "SPARK_REMOTE": "local[2]"}
    proc = subprocess.run(
        [sys.executable, str(script), store, str(tmp_path / "ckpt")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"the Connect child failed ({proc.returncode}): {proc.stderr[-3000:]}"
    out = json.loads(lines[-1].removeprefix("RESULT "))
    assert out["session"].startswith("pyspark.sql.connect")  # really a Connect session
    assert out["batch_s1"] == [2, 4, 6, 8, 10] and out["batch_count"] == 10
    assert out["stream_seqs"] == list(range(1, 11))
    with jetspark.connect(store) as js:
        got = sorted(
            (m.subject, m.data, m.headers.get("Nats-Msg-Id")) for m in (js.get_msg("OUT", q) for q in range(1, 11))
        )
        assert got == sorted((f"out.s.{i % 2}", f"m{i}".encode(), f"m-{i + 1}") for i in range(10))
        # The streaming read's durable consumer follows what Spark processed.
        assert js.consumer_info("S", "connect").ack_floor.stream_seq == 10
