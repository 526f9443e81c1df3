"""Batch reads: spark.read.format("jetstream")."""

from __future__ import annotations

import json

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BinaryType, LongType, MapType, StringType, StructField, StructType

from jetspark import MsgNotFoundError
from jetspark.connector import SOURCE_SCHEMA
from jetspark.protocol import subjects as subj
from tests.connector.support import has_filter, ms_at, to_us

pytestmark = pytest.mark.spark

# Subjects chosen so a prefix without a trailing dot ("x") also matches "xy.z",
# and a literal "*" token ("x.*", stored as published) is not a wildcard here.
SUBJECTS = ["x.a", "x.b", "x.b.c", "y.c", "xy.z", "x.a", "y.d", "x.*"]
N = 24


@pytest.fixture
def filled(store):
    """Stream S with N messages over SUBJECTS (message i on SUBJECTS[i % 8], data b"m<i>")."""
    store.js.add_stream(name="S", subjects=["x.>", "y.*", "xy.*"])
    store.publish(SUBJECTS, N)
    return store


def published(js, stream="S"):
    """(stream, subject, seq, µs since the epoch, data) for every stored message, from get_msg."""
    out = []
    for seq in range(js.stream_info(stream).state.first_seq, js.stream_info(stream).state.last_seq + 1):
        try:
            m = js.get_msg(stream, seq)
        except MsgNotFoundError:
            continue  # deleted
        out.append((m.stream, m.subject, m.seq, to_us(m.time), bytearray(m.data)))
    return out


def seqs(df) -> list[int]:
    return sorted(r.seq for r in df.select("seq").collect())


def expected_seqs(pred) -> list[int]:
    """Sequences of the `filled` stream whose (subject, seq) satisfy pred."""
    return [i + 1 for i in range(N) if pred(SUBJECTS[i % len(SUBJECTS)], i + 1)]


# ---------------------------------------------------------------------- full read


def test_full_read_equals_what_was_published(filled, spark):
    filled.js.delete_msg("S", 5)  # a hole in the sequence is skipped, not returned
    df = filled.read()
    assert df.schema == SOURCE_SCHEMA
    actual = df.select("stream", "subject", "seq", F.unix_micros("timestamp").alias("ts_us"), "data")
    schema = StructType(
        [
            StructField("stream", StringType()),
            StructField("subject", StringType()),
            StructField("seq", LongType()),
            StructField("ts_us", LongType()),
            StructField("data", BinaryType()),
        ]
    )
    rows = published(filled.js)
    assert len(rows) == N - 1 and 5 not in [r[2] for r in rows]
    expected = spark.createDataFrame(rows, schema)
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_store_as_load_path(filled, spark):
    df = spark.read.format("jetstream").option("stream", "S").load(filled.path)
    assert seqs(df) == list(range(1, N + 1))


def test_register_makes_batch_reads_work_in_a_session_of_ones_own(filled, spark):
    # A session not made by local_session(): the pushdown setting is off, as Spark ships it,
    # which only reads with pushFilters need.
    import jetspark
    from jetspark.connector import PUSHDOWN_CONF

    spark.conf.unset(PUSHDOWN_CONF)
    try:
        read = lambda **o: spark.read.format("jetstream").option("stream", "S").options(**o).load(filled.path)  # noqa: E731
        assert seqs(read().where("seq > 20")) == [21, 22, 23, 24]  # Spark filters: no setting needed
        with pytest.raises(Exception, match="DATA_SOURCE_PUSHDOWN_DISABLED"):
            read(pushFilters="true").count()
        jetspark.register(spark)
        assert spark.conf.get(PUSHDOWN_CONF) == "true"
        assert seqs(read(pushFilters="true")) == list(range(1, N + 1))
        assert seqs(read(pushFilters="true").where("seq > 20")) == [21, 22, 23, 24]
    finally:
        spark.conf.set(PUSHDOWN_CONF, "true")


def test_empty_stream_reads_no_rows(store):
    store.js.add_stream(name="S", subjects=["e.>"])
    df = store.read()
    assert df.schema == SOURCE_SCHEMA
    assert df.count() == 0


@pytest.mark.parametrize("subjects", ["x.*", "x.>", "y.c, x.b.c, *.d"])
def test_subjects_option_with_wildcards(filled, subjects):
    filters = [s.strip() for s in subjects.split(",")]
    df = filled.read(subjects=subjects)
    assert seqs(df) == expected_seqs(lambda s, q: subj.matches_any(filters, s))


# ---------------------------------------------------------------------- filter pushdown


def test_without_push_filters_spark_filters_and_a_dataframe_answers_every_query(filled):
    # The default: the source reads the options' range and Spark applies every filter, so
    # one DataFrame answers a filtered query and then an unfiltered one right.
    df = filled.read(rowsPerPartition="1")
    narrowed = df.where("subject = 'x.b' AND seq > 10")
    assert has_filter(narrowed)
    assert seqs(narrowed) == expected_seqs(lambda s, q: s == "x.b" and q > 10)
    assert narrowed.rdd.getNumPartitions() == N  # nothing narrowed the read
    assert df.count() == N
    assert seqs(df.where("seq <= 3")) == [1, 2, 3]
    assert df.count() == N


def test_spark_keeps_a_dataframes_pushed_read_for_its_next_query(filled):
    # Why pushFilters is opt-in: Spark (4.2, 4.3) keeps the read it planned with pushed
    # filters on the DataFrame's data source, and a later query with no filter it hands to
    # Python runs that read again -- a count of only the first query's rows.  This pins
    # Spark's behaviour: once it fails, Spark plans each scan afresh, and pushFilters can
    # be the default (jetspark/connector/source.py, FilteringBatchReader).
    df = filled.read(pushFilters="true")
    assert df.where("subject = 'x.b'").count() == len(expected_seqs(lambda s, q: s == "x.b"))
    assert df.count() == len(expected_seqs(lambda s, q: s == "x.b"))  # not N
    assert filled.read(pushFilters="true").count() == N  # a DataFrame per query


PUSHED = {
    "subject = 'x.b'": lambda s, q: s == "x.b",
    "subject IN ('x.a', 'y.c', 'nope.z')": lambda s, q: s in ("x.a", "y.c"),
    "startswith(subject, 'x.')": lambda s, q: s.startswith("x."),
    "subject LIKE 'x.%'": lambda s, q: s.startswith("x."),
    "seq BETWEEN 4 AND 9": lambda s, q: 4 <= q <= 9,
    "seq > 20": lambda s, q: q > 20,
    "seq = 7": lambda s, q: q == 7,
    "seq < 3": lambda s, q: q < 3,
    "subject = 'x.a' AND seq >= 9": lambda s, q: s == "x.a" and q >= 9,
    "subject IN ('x.b', 'y.d') AND seq > 5 AND seq < 20": lambda s, q: s in ("x.b", "y.d") and 5 < q < 20,
    "seq > 10 AND seq < 5": lambda s, q: False,
}


@pytest.mark.parametrize("condition", list(PUSHED))
def test_pushed_filters_leave_no_filter_and_read_right(filled, condition):
    df = filled.read(pushFilters="true").where(condition)
    assert not has_filter(df), f"{condition} should be fully pushed to the source"
    assert seqs(df) == expected_seqs(PUSHED[condition])


@pytest.mark.parametrize(
    "condition, n_read",
    [("seq BETWEEN 4 AND 9", 6), ("seq > 30", 1)],  # an empty range is one empty partition
)
def test_seq_filters_narrow_the_range_read(filled, condition, n_read):
    # One sequence per partition: the partition count is the number of sequences read.
    df = filled.read(rowsPerPartition="1", pushFilters="true").where(condition)
    assert df.rdd.getNumPartitions() == n_read


NOT_PUSHED = {
    # A prefix without a trailing dot is not a subject filter: "x" also starts "xy.z".
    "startswith(subject, 'x')": lambda s, q: s.startswith("x"),
    "subject LIKE 'x.%c'": lambda s, q: s.startswith("x.") and s.endswith("c"),
    "contains(subject, 'b')": lambda s, q: "b" in s,
    "subject != 'x.a'": lambda s, q: s != "x.a",
    "NOT (subject IN ('x.a', 'y.c'))": lambda s, q: s not in ("x.a", "y.c"),
    # Not well-formed subjects: Spark compares the strings (no rows), the source must not choke.
    "subject = 'x.'": lambda s, q: False,
    "subject IN ('x..b', 'x.a')": lambda s, q: s == "x.a",
    "startswith(subject, 'x..')": lambda s, q: False,
    # A literal "*" token: equality is with that literal subject only, not a wildcard.
    "subject = 'x.*'": lambda s, q: s == "x.*",
    "subject = 'x.a' OR seq = 3": lambda s, q: s == "x.a" or q == 3,
}


@pytest.mark.parametrize("condition", list(NOT_PUSHED))
def test_filters_spark_keeps_still_read_right(filled, condition):
    df = filled.read(pushFilters="true").where(condition)
    assert has_filter(df), f"{condition} cannot be answered by the source alone"
    assert seqs(df) == expected_seqs(NOT_PUSHED[condition])


def test_subject_filter_on_top_of_subjects_option(filled):
    # The option already filters; Spark intersects with the condition.
    df = filled.read(subjects="x.*", pushFilters="true").where("subject IN ('x.a', 'y.c')")
    assert seqs(df) == expected_seqs(lambda s, q: s == "x.a")
    df = filled.read(subjects="x.*,y.*", pushFilters="true").where("subject = 'y.d' AND seq > 10")
    assert seqs(df) == expected_seqs(lambda s, q: s == "y.d" and q > 10)


# ---------------------------------------------------------------------- time


@pytest.fixture
def timed(store, timeline):
    """Stream S with 10 messages at distinct, increasing times; returns (store, times)."""
    store.js.add_stream(name="S", subjects=["t.>"])
    return store, timeline(["t.0", "t.1"], 10)


def test_timestamps_are_the_stored_times(timed):
    store, times = timed
    rows = store.read().select("seq", F.unix_micros("timestamp").alias("us")).collect()
    assert sorted((r.seq, r.us) for r in rows) == [(i + 1, to_us(t)) for i, t in enumerate(times)]


@pytest.mark.parametrize(
    "op, k, expected",
    [
        # At and just past a message's exact time.
        (">", 3, range(5, 11)),
        ("<", 7, range(1, 8)),
        ("<=", 7, range(1, 9)),
        ("between", (2, 5), range(3, 7)),
    ],
)
def test_timestamp_filters_narrow_the_read_and_stay_right(timed, op, k, expected):
    store, times = timed
    ts = F.col("timestamp")
    if op == "between":
        cond = ts.between(F.lit(times[k[0]]), F.lit(times[k[1]]))
    else:
        cond = {
            ">=": ts >= F.lit(times[k]),
            ">": ts > F.lit(times[k]),
            "<": ts < F.lit(times[k]),
            "<=": ts <= F.lit(times[k]),
        }[op]
    df = store.read(rowsPerPartition="1", pushFilters="true").where(cond)
    assert seqs(df) == list(expected)
    # The source reads only the matching sequence range (one per partition here)...
    assert df.rdd.getNumPartitions() == len(expected)
    # ...and Spark still checks the condition (timestamps are only pushed as a range hint).
    assert has_filter(df)


@pytest.mark.parametrize("where, first", [("at", 4), ("after", 5), ("beyond", None)])
def test_starting_timestamp(timed, where, first):
    store, times = timed
    got = seqs(store.read(startingTimestamp=str(ms_at(times, where))))
    assert got == ([] if first is None else list(range(first, 11)))


# ---------------------------------------------------------------------- ranges, headers, partitions


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"startingOffsets": '{"seq": 3}'}, range(3, 11)),
        ({"endingOffsets": '{"seq": 6}'}, range(1, 7)),
        ({"startingOffsets": '{"seq": 3}', "endingOffsets": '{"S": 6}'}, range(3, 7)),
        ({"startingOffsets": "latest"}, []),
        ({"endingOffsets": '{"seq": 100}'}, range(1, 11)),
        ({"startingOffsets": '{"seq": 7}', "endingOffsets": '{"seq": 6}'}, []),
    ],
)
def test_starting_and_ending_offsets(store, options, expected):
    # startingOffsets names the first sequence read, endingOffsets the last (both inclusive).
    store.js.add_stream(name="S", subjects=["o.>"])
    store.publish("o.a", 10)
    assert seqs(store.read(**options)) == list(expected)


def test_starting_offsets_before_first_seq_are_clamped(store):
    store.js.add_stream(name="S", subjects=["o.>"])
    store.publish("o.a", 10)
    store.js.purge_stream("S", keep=4)  # first_seq is now 7
    assert seqs(store.read(startingOffsets=json.dumps({"seq": 2}))) == list(range(7, 11))
    assert seqs(store.read()) == list(range(7, 11))


def test_include_headers(store, spark):
    store.js.add_stream(name="S", subjects=["h.>"])
    store.js.publish("h.a", b"none")
    store.js.publish("h.a", b"one", headers={"k": "v"})
    store.js.publish("h.b", b"multi", headers={"k": ["1", "2"], "Other": "x"})
    store.js.publish("h.b", b"none again")
    df = store.read(includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["stream", "subject", "seq", "timestamp", "data", "headers"]
    htype = df.schema["headers"].dataType
    assert (
        isinstance(htype, MapType)
        and htype.keyType == StringType()
        and htype.valueType == ArrayType(StringType(), True)
    )
    expected = spark.createDataFrame(
        [(1, None), (2, {"k": ["v"]}), (3, {"k": ["1", "2"], "Other": ["x"]}), (4, None)],
        StructType(
            [StructField("seq", LongType()), StructField("headers", MapType(StringType(), ArrayType(StringType())))]
        ),
    )
    # (Map columns cannot be sorted on: order by seq instead of ignore_row_order.)
    assert_df_equality(df.select("seq", "headers").orderBy("seq"), expected, ignore_nullable=True)
    # Without the option there is no headers column.
    assert "headers" not in store.read().columns


@pytest.mark.parametrize(
    "options, partitions",
    [
        ({}, 1),
        ({"rowsPerPartition": "4"}, 3),
        ({"minPartitions": "2", "rowsPerPartition": "2"}, 5),
        ({"minPartitions": "20"}, 10),  # never more partitions than sequences
    ],
)
def test_partitions(store, options, partitions):
    store.js.add_stream(name="S", subjects=["p.>"])
    store.publish("p.a", 10)
    assert store.read(**options).rdd.getNumPartitions() == partitions


def test_partitions_cover_each_message_once(store):
    store.js.add_stream(name="S", subjects=["p.>"])
    store.publish(["p.a", "p.b"], 25)
    df = store.read(minPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    rows = df.select("seq", F.col("data").cast("string").alias("d")).collect()
    assert sorted((r.seq, r.d) for r in rows) == [(i + 1, f"m{i}") for i in range(25)]
