"""Spark with separate executor JVMs (``local-cluster[2,1,1024]``) on the 3-node cluster:
a batch read of an R3 stream and a streaming query (durable consumer in, jetstream sink
out) run in executor JVMs, not the driver's, and the output is exactly once, though
the query's first task kills its executor JVM.  The
application runs in a process of its own: tests/cluster/spark_cluster_job.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import jetspark
from jetspark import AckPolicy
from tests.cluster.conftest import TIMEOUT

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]


def test_executor_jvms_read_and_write_the_cluster(cluster, tmp_path):
    with jetspark.connect(cluster.url, timeout=TIMEOUT) as js:
        js.add_stream(name="SPK_IN", subjects=["spk.in.>"], num_replicas=3)
        js.add_stream(name="SPK_OUT", subjects=["spk.out.>"], num_replicas=3)
        js.add_consumer("SPK_IN", durable_name="spark", ack_policy=AckPolicy.EXPLICIT)
        js.publish_batch(
            pa.table(
                {"subject": [f"spk.in.{i % 3}" for i in range(1000)], "data": [b"m%04d" % i for i in range(1000)]}
            ),
            stream="SPK_IN",
        )
        try:
            env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
            done = subprocess.run(
                [sys.executable, "-m", "tests.cluster.spark_cluster_job", cluster.url, str(tmp_path)],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr[-4000:]
            seen = json.loads(done.stdout.strip().splitlines()[-1])
        finally:
            for name in ("SPK_IN", "SPK_OUT", "JETSPARK_SINKS"):
                if name in js.stream_names():
                    js.delete_stream(name)
    assert seen["batch_rows"] == 1000 and seen["exactly_once"] and seen["executor_killed"]
    assert seen["executor_jvms"] and seen["driver_jvm"] not in seen["executor_jvms"] and -1 not in seen["executor_jvms"]
    assert seen["ack_floor"] in (500, 1000)  # the releases reached the durable (the last one at the next trigger)
