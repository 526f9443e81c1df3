"""A Spark application with separate executor JVMs (``local-cluster[2,1,1024]``) reading
from and writing to the 3-node NATS cluster; run by tests/cluster/test_spark_cluster.py
in a process of its own (a process holds one SparkContext, and the test run's shared
session is ``local[2,2]``).

    python -m tests.cluster.spark_cluster_job <cluster url> <work dir>

The streaming query's first task kills its own executor JVM (SIGKILL) once: Spark
launches another and runs the task again; the output is still exactly once.
Prints one JSON line: what the checks saw.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def spark_home_farm(work: Path) -> Path:
    """A SPARK_HOME of symlinks to pip's pyspark: executors write their work dirs under
    $SPARK_HOME/work, which must not be inside the venv."""
    import pyspark

    real = Path(pyspark.__file__).resolve().parent
    farm = work / "spark-home"
    farm.mkdir(parents=True, exist_ok=True)
    for entry in real.iterdir():
        link = farm / entry.name
        if not link.exists():
            link.symlink_to(entry)
    (farm / "work").mkdir(exist_ok=True)
    return farm


def executor_jvm_pid(_rows) -> list[int]:
    """In a Python worker: the pid of the JVM that started it (its nearest java ancestor)."""
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        parent = int(fields[1])
        with open(f"/proc/{parent}/comm") as f:
            if f.read().strip() == "java":
                return [parent]
        pid = parent
    return [-1]


def kill_my_executor_once(marker: str):
    """A UDF body that, the first time any task calls it, kills its own executor JVM with
    SIGKILL (an executor lost mid-task); it returns its input unchanged."""

    def identity(value):
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return value
        os.close(fd)
        jvm = executor_jvm_pid(None)[0]
        if jvm > 1:
            os.kill(jvm, 9)
        return value

    return identity


def main(url: str, work: Path) -> dict:
    os.environ["SPARK_HOME"] = str(spark_home_farm(work))
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from chispa import assert_df_equality

    import jetspark
    from jetspark.connector.session import local_session

    spark = local_session(
        "jetspark-cluster-job",
        master="local-cluster[2,1,1024]",
        **{"spark.executor.memory": "512m", "spark.task.maxFailures": "2"},
    )
    try:
        driver_pid = spark.sparkContext._jvm.ProcessHandle.current().pid()
        src = spark.read.format("jetstream").option("store", url).option("stream", "SPK_IN").load()
        # One job: each partition's row count and the JVM its Python worker runs under.
        seen = src.rdd.mapPartitions(lambda rows: [(executor_jvm_pid(None)[0], sum(1 for _ in rows))]).collect()
        pids = {pid for pid, _ in seen}
        rows = sum(n for _, n in seen)

        from pyspark.sql import functions as F

        marker = str(work / "executor-killed")
        survive = F.udf(kill_my_executor_once(marker), "binary")
        query = (
            spark.readStream.format("jetstream")
            .option("store", url)
            .option("stream", "SPK_IN")
            .option("consumer", "spark")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 500)
            .load()
            .select(F.concat(F.lit("spk.out."), "subject").alias("subject"), survive("data").alias("data"))
            .writeStream.format("jetstream")
            .option("store", url)
            .option("checkpointLocation", str(work / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        got = (
            spark.read.format("jetstream")
            .option("store", url)
            .option("stream", "SPK_OUT")
            .load()
            .selectExpr("CAST(data AS STRING) AS data")
        )
        want = spark.createDataFrame([(f"m{i:04d}",) for i in range(1000)], "data STRING")
        assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
        with jetspark.connect(url, timeout=15) as js:
            floor = js.consumer_info("SPK_IN", "spark").ack_floor.stream_seq
        return {
            "driver_jvm": driver_pid, "executor_jvms": sorted(pids), "batch_rows": rows, "exactly_once": True,
            "ack_floor": floor,
            "executor_killed": os.path.exists(marker),
        }  # fmt: skip
    finally:
        spark.stop()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], Path(sys.argv[2]))))
