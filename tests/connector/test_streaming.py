"""Micro-batch reads: spark.readStream.format("jetstream") with trigger(availableNow=True)."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality

from tests.connector.support import batch_sizes, error_text, ms_at, run_available_now, run_to_out

pytestmark = pytest.mark.spark


def table_seqs(spark, query) -> list[int]:
    return sorted(r.seq for r in spark.table(query.name).select("seq").collect())


def test_available_now_reads_everything(store, spark):
    store.js.add_stream(name="S", subjects=["a.>"])
    store.publish(["a.x", "a.y.z"], 25)
    q = run_available_now(store.read_stream(startingOffsets="earliest"))
    assert sum(batch_sizes(q)) == 25
    # What the stream gives equals a batch read of the same stream, column for column.
    assert_df_equality(spark.table(q.name), store.read(), ignore_row_order=True, ignore_nullable=True)


def test_subjects_option_in_a_stream(store, spark):
    store.js.add_stream(name="S", subjects=["a.>"])
    store.publish(["a.x", "a.y", "a.x.z"], 12)
    q = run_available_now(store.read_stream(startingOffsets="earliest", subjects="a.x.>,a.y", maxOffsetsPerTrigger="5"))
    # Offsets are stream sequences: batches cover 5 sequences each (1-5, 6-10, 11-12),
    # filtered to the subjects (a.y and a.x.z: every sequence but 1, 4, 7, 10).
    assert batch_sizes(q) == [3, 3, 2]
    assert table_seqs(spark, q) == [s for s in range(1, 13) if (s - 1) % 3 != 0]


# ---------------------------------------------------------------------- read limits


@pytest.fixture
def ten(store):
    """Stream S with 10 messages of the same size (subject l.a, data m0..m9)."""
    store.js.add_stream(name="S", subjects=["l.>"])
    store.publish("l.a", 10)
    state = store.js.stream_info("S").state
    assert state.bytes % 10 == 0
    store.msg_bytes = state.bytes // 10
    return store


# The source applies the limits from the stream's state; only maxBytesPerTrigger asks the
# store something of its own (seq_for_bytes), so the count limits run on the engine alone.
COUNT_LIMITS = [
    ({"maxOffsetsPerTrigger": "4"}, [4, 4, 2]),
    ({"maxOffsetsPerTrigger": "1000"}, [10]),
    # availableNow ends the query, however far below the minimum the rest is;
    # what is there when it starts is read, the last batch below the minimum.
    ({"minOffsetsPerTrigger": "4"}, [10]),
    ({"minOffsetsPerTrigger": "40", "maxTriggerDelay": "1h"}, [10]),
    ({"minOffsetsPerTrigger": "3", "maxOffsetsPerTrigger": "7"}, [7, 3]),
]
BYTE_LIMITS = [
    ({"maxBytesPerTrigger": "3 messages"}, [3, 3, 3, 1]),
    ({"maxBytesPerTrigger": "3.5 messages"}, [3, 3, 3, 1]),
    # Smaller than one message: each batch still takes one, so the query moves.
    ({"maxBytesPerTrigger": "1"}, [1] * 10),
    # Several limits at once: each batch honours all of them.
    ({"maxOffsetsPerTrigger": "4", "maxBytesPerTrigger": "2 messages"}, [2] * 5),
]


def _limits_id(v):
    return "+".join(f"{k}={x}" for k, x in v.items()).replace(" ", "") if isinstance(v, dict) else str(len(v))


@pytest.mark.parametrize("store", ["engine"], indirect=True)
@pytest.mark.parametrize("limits, sizes", COUNT_LIMITS, ids=_limits_id)
def test_count_read_limits(ten, spark, limits, sizes):
    check_read_limits(ten, spark, limits, sizes)


@pytest.mark.parametrize("limits, sizes", BYTE_LIMITS, ids=_limits_id)
def test_byte_read_limits(ten, spark, limits, sizes):
    check_read_limits(ten, spark, limits, sizes)


def check_read_limits(ten, spark, limits, sizes):
    options = {}
    for k, v in limits.items():
        if v.endswith("messages"):
            v = str(int(float(v.split()[0]) * ten.msg_bytes))
        options[k] = v
    q = run_available_now(ten.read_stream(startingOffsets="earliest", **options))
    assert batch_sizes(q) == sizes
    assert table_seqs(spark, q) == list(range(1, 11))


def test_a_restart_goes_on_from_the_checkpoint(ten):
    q = run_to_out(ten, ten.read_stream(startingOffsets="earliest", maxOffsetsPerTrigger="3"), ten.checkpoint())
    assert batch_sizes(q) == [3, 3, 3, 1]
    ten.publish("l.a", 5, start=10)
    q = run_to_out(ten, ten.read_stream(startingOffsets="earliest", maxOffsetsPerTrigger="3"), ten.checkpoint())
    assert batch_sizes(q) == [3, 2]
    assert q.new_seqs == list(range(11, 16))


# ---------------------------------------------------------------------- starting points


@pytest.mark.parametrize(
    "options, first",
    [
        ({}, 6),  # latest is the default for a stream
        ({"startingOffsets": "earliest"}, 1),
        ({"startingOffsets": '{"seq": 3}'}, 3),
    ],
)
def test_starting_offsets(store, options, first):
    store.js.add_stream(name="S", subjects=["s.>"])
    store.publish("s.a", 5)
    ckpt = store.checkpoint()
    q = run_to_out(store, store.read_stream(**options), ckpt)
    assert q.new_seqs == list(range(first, 6))
    # The starting point applies to a new query only; a restart goes on from its checkpoint.
    store.publish("s.a", 3, start=5)
    q = run_to_out(store, store.read_stream(**options), ckpt)
    assert q.new_seqs == [6, 7, 8]


@pytest.mark.parametrize("where, first", [("after", 5), ("beyond", None)])
def test_starting_timestamp(store, timeline, spark, where, first):
    store.js.add_stream(name="S", subjects=["s.>"])
    times = timeline("s.a", 10)
    q = run_available_now(store.read_stream(startingTimestamp=str(ms_at(times, where))))
    assert table_seqs(spark, q) == ([] if first is None else list(range(first, 11)))


# ---------------------------------------------------------------------- failOnDataLoss


@pytest.mark.parametrize("fail", [True, False])
def test_fail_on_data_loss(store, fail):
    store.js.add_stream(name="S", subjects=["d.>"], max_msgs=5)
    store.publish("d.a", 5)
    ckpt = store.checkpoint()
    options = {"startingOffsets": "earliest", "failOnDataLoss": str(fail).lower()}
    q = run_to_out(store, store.read_stream(**options), ckpt)
    assert q.new_seqs == [1, 2, 3, 4, 5]
    # 10 more: max_msgs keeps 11..15, so 6..10 go before this query read them.
    store.publish("d.a", 10, start=5)
    assert store.js.stream_info("S").state.first_seq == 11
    if fail:
        with pytest.raises(Exception) as info:
            run_to_out(store, store.read_stream(**options), ckpt)
        text = error_text(info.value)
        assert "DataLossError" in text
        assert "sequences 6..10 of stream 'S' were removed by retention before this query read them" in text
        assert 'set .option("failOnDataLoss", "false") to skip them and go on' in text
    else:
        q = run_to_out(store, store.read_stream(**options), ckpt)
        assert q.new_seqs == [11, 12, 13, 14, 15]


def test_a_window_with_a_watermark_closes_without_more_data(store, spark):
    """An event-time window with a watermark is emitted once the watermark passes its end,
    in the no-data batch Spark runs for that (a session from local_session keeps Spark's
    default): an availableNow run emits every window the watermark has closed, not only
    after more data comes.  The ack floor still reaches the last message."""
    from pyspark.sql import functions as F

    store.js.add_stream(name="S", subjects=["e.>"])
    # Event times (seconds) in the payload: 0..24, then 40.
    for t in list(range(25)) + [40]:
        store.js.publish("e.x", str(t).encode())
    windowed = lambda df: (  # noqa: E731
        df.withColumn("event", F.timestamp_seconds(F.col("data").cast("string").cast("long")))
        .withWatermark("event", "5 seconds")
        .groupBy(F.window("event", "10 seconds"))
        .count()
        .select(F.col("window.start").alias("start"), "count")
    )
    q = run_available_now(windowed(store.read_stream(startingOffsets="earliest", consumer="spark")))
    # The watermark is 40 - 5 = 35 s: the windows ending at 10, 20 and 30 s are closed.
    expected = windowed(store.read()).where(
        F.col("start") + F.expr("INTERVAL 10 SECONDS") <= F.lit("1970-01-01 00:00:35").cast("timestamp")
    )
    assert expected.count() == 3
    assert_df_equality(spark.table(q.name), expected, ignore_row_order=True, ignore_nullable=True)
    assert sorted(r["count"] for r in spark.table(q.name).collect()) == [5, 10, 10]
    assert store.js.consumer_info("S", "spark").ack_floor.stream_seq == 26
