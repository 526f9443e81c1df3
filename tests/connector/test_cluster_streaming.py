"""A streaming query on the 3-node cluster (R3 streams: a durable consumer in, the
jetstream sink out) keeps running, without a restart, when the node leading one of the
streams it uses is killed with SIGKILL and later restarted; its output is exactly once.

The query runs on a processing-time trigger; ``processAllAvailable()`` returns once
everything published so far is processed and committed, or raises if the query
failed, so nothing sleeps.  The handles inside the query retry through the election
(retry_budget, docs/semantics.md §8).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from chispa import assert_df_equality

import jetspark
from jetspark import AckPolicy

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

SRC, OUT, DURABLE = "CIN", "COUT", "spark"
PHASE = 200  # messages published before the kill, while the node is down, after its restart


def publish(js, phase: int) -> None:
    q = range(phase * PHASE, (phase + 1) * PHASE)
    js.publish_batch(
        pa.table({"subject": [f"cin.{i % 2}" for i in q], "data": [b"m%04d" % i for i in q]}),
        stream=SRC,
        msg_id_prefix=f"p{phase}-",
    )


def leader_of(cluster, role: str) -> int:
    return cluster.stream_leader({"source": SRC, "sink": OUT, "registry": "JETSPARK_SINKS"}[role])


@pytest.fixture
def streams(cluster):
    with jetspark.connect(cluster.url, timeout=15) as js:
        js.add_stream(name=SRC, subjects=["cin.>"], num_replicas=3)
        js.add_stream(name=OUT, subjects=["cout.>"], num_replicas=3)
        js.add_consumer(SRC, durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT)
        try:
            yield js
        finally:
            for name in (SRC, OUT, "JETSPARK_SINKS"):
                if name in js.stream_names():
                    js.delete_stream(name)


@pytest.mark.parametrize("role", ["source", "sink", "registry"])
def test_a_node_killed_under_a_running_query(spark, cluster, streams, tmp_path, role):
    js, url = streams, cluster.url
    query = (
        spark.readStream.format("jetstream")
        .option("store", url)
        .option("stream", SRC)
        .option("consumer", DURABLE)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 100)
        .load()
        .selectExpr("concat('cout.', subject) AS subject", "data")
        .writeStream.format("jetstream")
        .option("store", url)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        publish(js, 0)
        query.processAllAvailable()
        victim = leader_of(cluster, role)
        cluster.kill(victim)
        try:
            publish(js, 1)  # retried through the election too
            query.processAllAvailable()
        finally:
            # Back, but not waited for: phase 3 runs while it catches up.  A reader consumer
            # placed on it once saw a replica short of the range, and the batch came out
            # empty; a read now checks the end of its range with the stream's leader.
            cluster.restart(victim, ready=False)
        publish(js, 2)  # while the node rejoins and catches up
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
        cluster.wait_ready()  # the next test gets the whole cluster back

    got = (
        spark.read.format("jetstream")
        .option("store", url)
        .option("stream", OUT)
        .load()
        .selectExpr("CAST(data AS STRING) AS data")
    )
    want = spark.createDataFrame([(f"m{i:04d}",) for i in range(3 * PHASE)], "data STRING")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    # The releases moved the durable past the kill, exactly to a batch's end (the last
    # batch's is released at the next trigger, which processAllAvailable may not wait for).
    info = js.consumer_info(SRC, DURABLE)
    assert info.ack_floor.stream_seq in range(2 * PHASE, 3 * PHASE + 1, 100) and info.num_ack_pending == 0


@pytest.mark.slow
def test_a_node_frozen_under_a_running_query_longer_than_the_retry_budget(spark, cluster, streams, tmp_path):
    """The source stream's leader frozen (SIGSTOP, SIGCONT after) under a running query while
    messages keep coming, for longer than the query's retry budget: batches with rows are
    committed while the node is still frozen (the two others elect a leader, the query's
    connections on the frozen node notice its silence and move), the query never fails,
    and its output is exactly once."""
    import threading
    import time

    from pyspark.sql.streaming import StreamingQueryListener

    budget, freeze = 10.0, 20.0
    commits: list[tuple[float, int]] = []  # (when, rows) of each batch Spark reports done

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            commits.append((time.monotonic(), event.progress.numInputRows))

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

    js, url = streams, cluster.url
    listener = Progress()
    spark.streams.addListener(listener)
    nats = {"nats.retry_budget": str(budget)}
    query = (
        spark.readStream.format("jetstream").option("store", url).option("stream", SRC).options(**nats)
        .option("consumer", DURABLE).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 100)
        .load()
        .selectExpr("concat('cout.', subject) AS subject", "data")
        .writeStream.format("jetstream").option("store", url).options(**nats)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )  # fmt: skip
    phases = 0
    try:
        publish(js, 0)
        query.processAllAvailable()
        phases = 1
        done = threading.Event()
        failed: list[BaseException] = []

        def keep_publishing() -> None:
            # A phase at a time while the node is frozen (with msg ids: retried, stored once),
            # five at most: the query is to have work during the freeze, not hours after it.
            nonlocal phases
            try:
                with jetspark.connect(url, retry_budget=120) as feeder:
                    while not done.is_set() and phases < 6:
                        publish(feeder, phases)
                        phases += 1
            except BaseException as exc:  # reported by the test
                failed.append(exc)

        feeder = threading.Thread(target=keep_publishing, daemon=True)
        node = leader_of(cluster, "source")
        with cluster.frozen(node):
            frozen_at = time.monotonic()
            feeder.start()
            time.sleep(freeze)  # the fault's length, not a wait for a result
            thawed_at = time.monotonic()
            done.set()
        feeder.join(120)
        assert not feeder.is_alive() and not failed, f"publishing during the freeze: {failed!r}"
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
        spark.streams.removeListener(listener)
        cluster.wait_ready()

    during = [rows for when, rows in commits if frozen_at < when < thawed_at and rows > 0]
    assert during, (
        "no batch with rows was committed while the source's "
        f"leader ({cluster.names[node]}) was frozen for {freeze:g} s"
    )
    got = (
        spark.read.format("jetstream")
        .option("store", url)
        .option("stream", OUT)
        .load()
        .selectExpr("CAST(data AS STRING) AS data")
    )
    want = spark.createDataFrame([(f"m{i:04d}",) for i in range(phases * PHASE)], "data STRING")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
