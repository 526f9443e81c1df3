"""Streaming reads bound to a durable consumer: commits advance its ack floor."""

from __future__ import annotations

import pytest

from jetspark import AckPolicy
from tests.connector.support import batch_sizes, error_text, run_available_now, run_to_out

pytestmark = pytest.mark.spark


def floor(js, stream="S", consumer="spark") -> int:
    return js.consumer_info(stream, consumer).ack_floor.stream_seq


@pytest.mark.parametrize("retention", ["limits", "interest", "workqueue"])
def test_commits_advance_the_ack_floor_and_release_messages(store, retention):
    store.js.add_stream(name="S", subjects=["c.>"], retention=retention)
    if retention == "interest":
        # An interest stream keeps only what some consumer is interested in, so the
        # consumer exists before the messages.  Elsewhere the reader creates it.
        store.js.add_consumer("S", durable_name="spark", ack_policy=AckPolicy.ALL)
    store.publish(["c.a", "c.b"], 10)
    assert store.js.stream_info("S").state.messages == 10
    read = lambda: store.read_stream(consumer="spark", startingOffsets="earliest", maxOffsetsPerTrigger="4")  # noqa: E731

    q = run_to_out(store, read(), store.checkpoint())
    assert batch_sizes(q) == [4, 4, 2] and q.new_seqs == list(range(1, 11))
    info = store.js.consumer_info("S", "spark")
    # Commits ack cumulatively; a work-queue stream takes explicit-ack consumers only.
    policy = AckPolicy.EXPLICIT if retention == "workqueue" else AckPolicy.ALL
    assert info.config.durable_name == "spark" and info.config.ack_policy == policy
    # The source advances the consumer to a batch's end once the batch is in the
    # checkpoint (Spark then asks it for the next offsets): the availableNow run's last
    # trigger, which finds nothing new, releases the last batch (9..10) too.
    assert floor(store.js) == 10
    # Retention removes exactly what was committed, never what Spark has not committed.
    assert store.js.stream_info("S").state.messages == (10 if retention == "limits" else 0)

    store.publish(["c.a", "c.b"], 3, start=10)
    q = run_to_out(store, read(), store.checkpoint())
    assert batch_sizes(q) == [3] and q.new_seqs == [11, 12, 13]
    assert floor(store.js) == 13
    state = store.js.stream_info("S").state
    assert state.messages == (13 if retention == "limits" else 0)
    if retention != "limits":
        assert state.first_seq == 14


def test_consumer_with_subject_filter(store):
    # The reader creates its consumer with the reader's subjects as the filter.
    store.js.add_stream(name="S", subjects=["c.>"])
    store.publish(["c.a", "c.b", "c.c"], 9)
    q = run_to_out(
        store,
        store.read_stream(consumer="spark", subjects="c.a,c.c", startingOffsets="earliest", maxOffsetsPerTrigger="5"),
        store.checkpoint(),
    )
    assert q.new_seqs == [1, 3, 4, 6, 7, 9]
    info = store.js.consumer_info("S", "spark")
    assert info.config.filter_subjects == ["c.a", "c.c"]
    # Both batches (1..5, 6..9) released: the floor is the last message the consumer
    # matches (9), as a server acking what it delivered reports.
    assert info.ack_floor.stream_seq == 9


def test_new_query_without_checkpoint_resumes_from_the_ack_floor(store, spark):
    store.js.add_stream(name="S", subjects=["c.>"])
    store.publish("c.a", 10)
    # A first query with a checkpoint: batches end at 4, 8, 10; the consumer's floor is 10.
    run_to_out(
        store,
        store.read_stream(consumer="spark", startingOffsets="earliest", maxOffsetsPerTrigger="4"),
        store.checkpoint(),
    )
    assert floor(store.js) == 10
    store.publish("c.a", 2, start=10)
    # A new query (no checkpoint: the memory sink's is temporary) with the same consumer
    # starts after the floor, whatever startingOffsets says.
    q = run_available_now(store.read_stream(consumer="spark", startingOffsets="earliest"))
    assert sorted(r.seq for r in spark.table(q.name).collect()) == [11, 12]


def test_existing_consumer_floor_set_by_hand(store, spark):
    store.js.add_stream(name="S", subjects=["c.>"])
    store.js.add_consumer("S", durable_name="ops", ack_policy=AckPolicy.ALL)
    store.publish("c.a", 10)
    store.js.advance_ack_floor("S", "ops", 6)
    q = run_available_now(store.read_stream(consumer="ops", startingOffsets="earliest"))
    assert sorted(r.seq for r in spark.table(q.name).collect()) == [7, 8, 9, 10]


@pytest.mark.parametrize("retention", ["interest", "workqueue"])
def test_interest_and_workqueue_streams_need_a_consumer(store, retention):
    store.js.add_stream(name="S", subjects=["c.>"], retention=retention)
    with pytest.raises(Exception) as info:
        run_available_now(store.read_stream(startingOffsets="earliest"))
    text = error_text(info.value)
    assert f"stream 'S' has {retention} retention" in text
    assert '.option("consumer", "<durable name>")' in text


def test_workqueue_commits_release_only_what_the_consumer_matches(store):
    """A work-queue reader filtered on c.a: its commits take the c.a messages, and leave
    every c.b message for whichever consumer comes for it, as a server does."""
    store.js.add_stream(name="S", subjects=["c.>"], retention="workqueue")
    store.publish(["c.a", "c.b"], 10)  # c.a at 1, 3, 5, 7, 9
    read = store.read_stream(consumer="spark", subjects="c.a", startingOffsets="earliest", maxOffsetsPerTrigger="4")
    q = run_to_out(store, read, store.checkpoint())
    assert q.new_seqs == [1, 3, 5, 7, 9]
    # Batches end at 4, 8 and 10, each released: c.a up to 10 is acked, the floor is 9.
    assert floor(store.js) == 9
    assert [seq for b in store.js.read_batches("S") for seq in b.column("seq").to_pylist()] == [2, 4, 6, 8, 10]


def test_a_commit_that_cannot_advance_the_floor_fails_the_query(store, spark):
    """The consumer is deleted while a batch runs: the release of that batch (when Spark
    asks for the next offsets) cannot take effect, and the query stops with the error."""
    from tests.connector.support import unique_name

    store.js.add_stream(name="S", subjects=["c.>"])
    store.publish(["c.a"], 12)
    js = store.js

    def drop_consumer(batch, batch_id):
        if batch_id == 0:
            js.delete_consumer("S", "spark")

    df = store.read_stream(consumer="spark", startingOffsets="earliest", maxOffsetsPerTrigger="4")
    q = (
        df.writeStream.foreachBatch(drop_consumer)
        .trigger(availableNow=True)
        .queryName(unique_name())
        .option("checkpointLocation", str(store.checkpoint()))
        .start()
    )
    with pytest.raises(Exception) as exc:
        q.awaitTermination()
    if q.isActive:
        q.stop()
    assert "consumer not found" in error_text(exc.value)
