"""The sink: df.write / df.writeStream .format("jetstream")."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from pyspark.sql import functions as F

from tests.connector.support import error_text, run_available_now

pytestmark = pytest.mark.spark


def stored(js, stream="W") -> list[dict]:
    """Every message of the stream: subject, data, headers (key -> every value)."""
    out = []
    for batch in js.read_batches(stream, headers=True):
        for row in batch.to_pylist():
            row["headers"] = {k: v for k, v in row["headers"] or []}
            out.append(row)
    return out


def write(store, df, **options):
    df.write.format("jetstream").option("store", store.path).options(**options).mode("append").save()


@pytest.fixture
def sink(store):
    store.js.add_stream(name="W", subjects=["w.>"])
    return store


def test_subject_data_headers_msg_id(sink, spark):
    df = spark.createDataFrame(
        [
            ("w.a", b"one", None, None),
            ("w.b", b"two", {"k": ["1", "2"], "h": ["x"]}, "id-2"),
            ("w.a", b"", {"x": []}, None),
            ("w.b", b"same id again", None, "id-2"),  # a duplicate: dropped
            ("w.c", bytes(range(256)), None, "id-5"),
        ],
        "subject string, data binary, headers map<string, array<string>>, msg_id string",
    ).coalesce(1)
    write(sink, df)
    msgs = stored(sink.js)
    assert [(m["seq"], m["subject"], m["data"]) for m in msgs] == [
        (1, "w.a", b"one"),
        (2, "w.b", b"two"),
        (3, "w.a", b""),
        (4, "w.c", bytes(range(256))),
    ]
    ids = [m["headers"].pop("Nats-Msg-Id") for m in msgs]
    assert ids[1] == ["id-2"] and ids[3] == ["id-5"]
    # Rows without msg_id get a generated, distinct id each.
    assert len({tuple(i) for i in ids}) == 4
    assert [m["headers"] for m in msgs] == [{}, {"k": ["1", "2"], "h": ["x"]}, {}, {}]


def test_string_data_and_subject_option(sink, spark):
    # No subject column: every row goes to the subject option.
    write(sink, spark.createDataFrame([("héllo",), ("",), ("x" * 1000,)], "data string").coalesce(1), subject="w.fixed")
    # A subject column with nulls: the option fills them in.
    write(
        sink,
        spark.createDataFrame([("w.own", "a"), (None, "b")], "subject string, data string").coalesce(1),
        subject="w.fixed",
    )
    # Headers as map<string, string>.
    write(
        sink,
        spark.createDataFrame([("w.h", "c", {"k": "v"})], "subject string, data string, headers map<string, string>"),
    )
    msgs = stored(sink.js)
    assert [(m["subject"], m["data"]) for m in msgs] == [
        ("w.fixed", "héllo".encode()),
        ("w.fixed", b""),
        ("w.fixed", b"x" * 1000),
        ("w.own", b"a"),
        ("w.fixed", b"b"),
        ("w.h", b"c"),
    ]
    assert msgs[-1]["headers"]["k"] == ["v"]


def test_stream_option(sink, spark):
    sink.js.add_stream(name="V", subjects=["v.>"])
    write(sink, spark.createDataFrame([("v.1", "a"), ("v.2", "b")], "subject string, data string"), stream="V")
    assert sorted(m["data"] for m in stored(sink.js, "V")) == [b"a", b"b"]


def test_rows_for_several_streams_in_one_partition(sink, spark):
    # Each row goes where its subject routes, as a publish would.
    sink.js.add_stream(name="V", subjects=["v.>"])
    df = spark.createDataFrame([("w.1", "a"), ("v.1", "b"), ("w.2", "c"), ("v.2", "d")], "subject string, data string")
    write(sink, df.coalesce(1))
    assert [(m["subject"], m["data"]) for m in stored(sink.js, "W")] == [("w.1", b"a"), ("w.2", b"c")]
    assert [(m["subject"], m["data"]) for m in stored(sink.js, "V")] == [("v.1", b"b"), ("v.2", b"d")]


@pytest.mark.parametrize(
    "ddl, options, expected",
    [
        (
            "subject string, data string, extra int",
            {},
            "column 'extra' cannot be written to a stream; the sink takes columns subject, data, headers, msg_id",
        ),
        ("subject string, payload string", {}, "column 'payload' cannot be written"),
        ("subject string", {}, "the sink needs a 'data' column (binary or string)"),
        ("data string", {}, """the sink needs a 'subject' column or .option("subject", "...")"""),
        (
            "subject string, data string",
            {"subjects": "w.a"},
            "unknown write option 'subjects'; accepted: checkpointLocation, path, ",
        ),
    ],
)
def test_schema_and_option_errors(sink, spark, ddl, options, expected):
    values = {"subject": "w.a", "data": "x", "extra": 1, "payload": "p"}
    row = tuple(values[c.split()[0]] for c in ddl.split(", "))
    with pytest.raises(Exception) as info:
        write(sink, spark.createDataFrame([row], ddl), **options)
    assert expected in error_text(info.value)
    assert sink.js.stream_info("W").state.messages == 0


def test_overwrite_is_refused(sink, spark):
    df = spark.createDataFrame([("w.a", "x")], "subject string, data string")
    with pytest.raises(Exception) as info:
        df.write.format("jetstream").option("store", sink.path).mode("overwrite").save()
    assert 'the jetstream sink appends messages to streams: use mode("append")' in error_text(info.value)
    assert sink.js.stream_info("W").state.messages == 0


@pytest.mark.parametrize(
    "subject, data, options, expected",
    [
        ("zz.1", "x", {}, ["NoStreamResponseError", "no stream captures subject 'zz.1'"]),
        ("w.big", "x" * 20, {}, ["err_code=10054", "message size exceeds maximum allowed"]),
        ("v.1", "x", {"stream": "W"}, ["err_code=10003", "not captured by stream 'W'"]),
        (None, "x", {}, ['a row has a null subject and the sink has no .option("subject", "...") to use instead']),
    ],
    # A stream option naming no stream: test_input_errors.py, refused before any task.
    ids=["no-stream-for-subject", "max-msg-size", "subject-not-in-stream-option", "null-subject"],
)
def test_publish_errors_fail_the_write(store, spark, subject, data, options, expected):
    store.js.add_stream(name="W", subjects=["w.>"], max_msg_size=10)
    store.js.add_stream(name="V", subjects=["v.>"])
    df = spark.createDataFrame([("w.ok", "fine"), (subject, data)], "subject string, data string").coalesce(1)
    with pytest.raises(Exception) as info:
        write(store, df, **options)
    text = error_text(info.value)
    for part in expected:
        assert part in text
    # A refused batch stores nothing of itself.
    assert store.js.stream_info("W").state.messages == 0
    assert store.js.stream_info("V").state.messages == 0


def test_publish_error_fails_a_streaming_query(store):
    store.js.add_stream(name="S", subjects=["s.>"])
    store.js.add_stream(name="W", subjects=["w.>"], max_msg_size=10)
    store.js.publish("s.a", b"x" * 20)
    df = store.read_stream(startingOffsets="earliest").select(F.lit("w.out").alias("subject"), "data")
    with pytest.raises(Exception) as info:
        run_available_now(df, sink="jetstream", checkpoint=store.checkpoint(), store=store.path)
    text = error_text(info.value)
    assert "err_code=10054" in text and "message size exceeds maximum allowed" in text
    assert store.js.stream_info("W").state.messages == 0


def test_task_retry_writes_no_duplicates(sink, spark, tmp_path):
    """Partition 0 fails once, after some of its rows were published; the retry publishes
    the same rows with the same message ids, and the stream drops the repeats."""
    store_path, markers = sink.path, str(tmp_path)

    def fail_once(i):
        import time

        from pyspark import TaskContext

        import jetspark

        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and i == 150 and ctx.attemptNumber() == 0:
            # Wait (bounded) until the sink has published rows of this attempt, so the
            # retry has something to duplicate; then fail the task.
            with jetspark.connect(store_path) as js:
                deadline = time.monotonic() + 30
                while not js.stream_info("W", subjects_filter="w.p0").state.subjects and time.monotonic() < deadline:
                    time.sleep(0.02)
                done = (js.stream_info("W", subjects_filter="w.p0").state.subjects or {}).get("w.p0", 0)
            open(os.path.join(markers, "attempt0"), "w").write(str(done))
            raise RuntimeError("injected task failure")
        return f"row {i} " + "x" * 4000  # big rows: Spark's buffers pass them on promptly

    udf = F.udf(fail_once, "string")
    df = spark.range(0, 400, 1, 2).select(
        F.concat(F.lit("w.p"), F.spark_partition_id().cast("string")).alias("subject"),
        udf("id").alias("data"),
    )
    old = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")  # the sink gets rows 10 at a time
    try:
        write(sink, df)
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", old)
    published_before_failure = int(open(os.path.join(markers, "attempt0")).read())
    assert 0 < published_before_failure < 200
    data = [m["data"] for m in stored(sink.js)]
    assert len(data) == 400
    assert Counter(int(d.split(b" ")[1]) for d in data) == Counter(range(400))


def test_a_copy_keeps_the_msg_ids_its_headers_carry(sink, spark):
    """A stream copied through Spark with its headers keeps each message's Nats-Msg-Id, as a
    publish carrying that header would: copying it again (a batch write, then a streaming
    query of its own) stores nothing twice.  A message without one gets a generated id, new
    for each write; a msg_id column wins over the header."""
    js = sink.js
    js.add_stream(name="S", subjects=["s.>"])
    js.publish("s.a", b"a", headers={"Nats-Msg-Id": "id-a"})
    js.publish("s.b", b"b", headers={"Nats-Msg-Id": "id-b", "k": ["1", "2"]})
    js.publish("s.c", b"no id")
    js.publish("s.d", b"d", headers={"Nats-Msg-Id": "id-d"})
    copy = lambda df: df.select(F.concat(F.lit("w."), "subject").alias("subject"), "data", "headers")  # noqa: E731

    write(sink, copy(sink.read(includeHeaders="true")).coalesce(2))
    msgs = stored(js)
    assert sorted(m["data"] for m in msgs) == [b"a", b"b", b"d", b"no id"]
    ids = {m["data"]: m["headers"]["Nats-Msg-Id"] for m in msgs}
    assert ids[b"a"] == ["id-a"] and ids[b"b"] == ["id-b"] and ids[b"d"] == ["id-d"]
    assert ids[b"no id"][0] not in ("id-a", "id-b", "id-d")
    assert next(m for m in msgs if m["data"] == b"b")["headers"]["k"] == ["1", "2"]

    df = copy(sink.read_stream(startingOffsets="earliest", includeHeaders="true"))
    run_available_now(df, sink="jetstream", checkpoint=sink.checkpoint(), store=sink.path)
    again = stored(js)[len(msgs) :]
    # Only the message without an id of its own is there twice.
    assert [m["data"] for m in again] == [b"no id"]
    assert again[0]["headers"]["Nats-Msg-Id"] != ids[b"no id"]

    # A msg_id column is the row's id, whatever the headers carry.
    df = spark.createDataFrame(
        [("w.x", "x", {"Nats-Msg-Id": "id-a"}, "own-x")],
        "subject string, data string, headers map<string, string>, msg_id string",
    )
    write(sink, df)
    last = stored(js)[-1]
    assert last["data"] == b"x" and last["headers"]["Nats-Msg-Id"] == ["own-x"]
