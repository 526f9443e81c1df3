"""Bad input to the connector: a store that does not exist, sink columns of the wrong
type, nulls where a message needs a value, a sink stream that does not exist, a schema
given to the reader that is not the source's.  Each fails with an error that names what is
wrong and what is accepted, and writes nothing (docs/guides/spark-sink.md, docs/reference/options.md)."""

from __future__ import annotations

import os
import shutil

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

import jetspark
from tests.connector.support import error_text, run_available_now

pytestmark = pytest.mark.spark


# ---------------------------------------------------------------- a store that does not exist


def _missing(tmp_path, where: str) -> tuple[str, str]:
    """(the store option, the absolute directory the error names)."""
    if where == "missing":
        path = tmp_path / "no" / "such" / "store"
        return str(path), str(path)
    if where == "empty-dir":
        path = tmp_path / "empty"
        path.mkdir()
        return str(path), str(path)
    path = tmp_path / "no-store"
    return f"file://{path}", str(path)


def _attempt(spark, tmp_path, how: str, option: str) -> None:
    if how == "read":
        spark.read.format("jetstream").option("store", option).option("stream", "S").load().collect()
    elif how == "readStream":
        run_available_now(spark.readStream.format("jetstream").option("store", option).option("stream", "S").load())
    elif how == "write":
        df = spark.createDataFrame([("s.a", "x")], "subject string, data string")
        df.write.format("jetstream").option("store", option).mode("append").save()
    else:
        # A streaming write from a store that exists to one that does not.
        source = tmp_path / "source"
        with jetspark.connect(source) as js:
            js.add_stream(name="S", subjects=["s.>"])
            js.publish("s.a", b"x")
        df = (
            spark.readStream.format("jetstream")
            .option("store", str(source))
            .option("stream", "S")
            .option("startingOffsets", "earliest")
            .load()
        )
        run_available_now(df.select("subject", "data"), sink="jetstream", checkpoint=tmp_path / "ckpt", store=option)


# Every way in with a missing directory; the other kinds of path with a batch read
# (the connector opens every store the same way: jetspark/connector/store.py).
MISSING = [(how, "missing") for how in ("read", "readStream", "write", "writeStream")] + [
    ("read", "empty-dir"),
    ("read", "file-url"),
]


@pytest.mark.parametrize("how, where", MISSING, ids=[f"{h}-{w}" for h, w in MISSING])
def test_a_store_that_does_not_exist_is_an_error_and_is_not_created(spark, tmp_path, how, where):
    """Reads and writes open an existing store only: a mistyped path must fail, not leave
    an empty store behind (the sink's streams must exist anyway)."""
    option, path = _missing(tmp_path, where)
    with pytest.raises(Exception) as info:
        _attempt(spark, tmp_path, how, option)
    text = error_text(info.value)
    assert "StoreError" in text and f"no jetspark store at {path}" in text
    if where == "empty-dir":
        assert os.listdir(path) == []
    else:
        assert not os.path.exists(path)


def test_a_store_removed_under_a_query_is_not_recreated(spark, tmp_path):
    path = tmp_path / "store"
    with jetspark.connect(path) as js:
        js.add_stream(name="S", subjects=["s.>"])
        js.publish("s.a", b"x")
    ckpt = str(tmp_path / "ckpt")
    read = lambda: (
        spark.readStream.format("jetstream")
        .option("store", str(path))
        .option("stream", "S")
        .option("startingOffsets", "earliest")
        .load()
    )  # noqa: E731
    run_available_now(read(), sink="noop", checkpoint=ckpt)
    shutil.rmtree(path)
    with pytest.raises(Exception) as info:
        run_available_now(read(), sink="noop", checkpoint=ckpt)
    assert f"no jetspark store at {path}" in error_text(info.value)
    assert not path.exists()


# ---------------------------------------------------------------- sink column types


@pytest.fixture
def sink(store):
    store.js.add_stream(name="W", subjects=["w.>"])
    return store


CAST = 'cast it first: F.col("{c}").cast("string")'
SERIALIZE = 'serialize it first, e.g. F.to_json("{c}").alias("{c}")'
HEADERS = 'build it as a map of strings, e.g. F.col("headers").cast("map<string,string>") or F.create_map(...)'

# (column, a Spark SQL expression of the wrong type, its type as Spark spells it, accepted, hint)
WRONG_TYPES = [
    ("data", "42", "int", "binary or string", CAST),
    ("data", "array(1, 2)", "array<int>", "binary or string", SERIALIZE),
    ("subject", "7L", "bigint", "string", CAST),
    ("msg_id", "3", "int", "string", CAST),
    ("headers", "'k: v'", "string", "map<string, string> or map<string, array<string>>", HEADERS),
    ("headers", "map('k', 1)", "map<string,int>", "map<string, string> or map<string, array<string>>", HEADERS),
    ("headers", "map(1, 'v')", "map<int,string>", "map<string, string> or map<string, array<string>>", HEADERS),
    (
        "headers",
        "map('k', array(1))",
        "map<string,array<int>>",
        "map<string, string> or map<string, array<string>>",
        HEADERS,
    ),
]


def _wrong(spark, column: str, expr: str):
    """One row: good subject and data, then ``column`` as ``expr``.  The other of subject
    and data raises when computed, so a task that ran would fail with "a task ran": the
    error the test expects can only come from the driver."""
    cols = {"subject": "'w.a'", "data": "'x'"}
    guarded = "data" if column == "subject" else "subject"
    cols[guarded] = f"CASE WHEN raise_error('a task ran') IS NULL THEN {cols[guarded]} END"
    cols[column] = expr
    return spark.range(1).selectExpr(*(f"{e} AS {c}" for c, e in cols.items()))


@pytest.mark.parametrize(
    "column, expr, typ, accepted, hint", WRONG_TYPES, ids=[f"{c}-{t}" for c, _, t, _, _ in WRONG_TYPES]
)
def test_a_column_of_the_wrong_type_is_refused_before_any_task(sink, spark, column, expr, typ, accepted, hint):
    df = _wrong(spark, column, expr)
    assert df.schema[column].dataType.simpleString() == typ
    with pytest.raises(Exception) as info:
        df.write.format("jetstream").option("store", sink.path).mode("append").save()
    text = error_text(info.value)
    expected = (
        f"ColumnTypeError: column '{column}' has type {typ}; the sink takes {accepted} for it ({hint.format(c=column)})"
    )
    assert expected in text
    assert "a task ran" not in text
    assert sink.js.stream_info("W").state.messages == 0


def test_a_column_of_the_wrong_type_stops_a_streaming_write(sink):
    sink.js.add_stream(name="S", subjects=["s.>"])
    sink.js.publish("s.a", b"x")
    df = sink.read_stream(startingOffsets="earliest").select(F.lit("w.a").alias("subject"), F.col("seq").alias("data"))
    with pytest.raises(Exception) as info:
        run_available_now(df, sink="jetstream", checkpoint=sink.checkpoint(), store=sink.path)
    assert "column 'data' has type bigint; the sink takes binary or string for it" in error_text(info.value)
    assert sink.js.stream_info("W").state.messages == 0


# ---------------------------------------------------------------- nulls


# A null subject without the subject option: test_sink.py, test_publish_errors_fail_the_write.
NULLS = [
    # (id, schema, a good row, the row with the null, the error)
    ("data-binary", "subject string, data binary", ("w.ok", b"x"), ("w.a", None),
     "NullValueError: a row has a null data column; a message needs a payload"),
    ("header-value", "subject string, data string, headers map<string, string>", ("w.ok", "x", {"k": "v"}),
     ("w.a", "x", {"k": None}), "NullValueError: a row's headers map has a null value; a header needs a value"),
    ("header-list", "subject string, data string, headers map<string, array<string>>", ("w.ok", "x", {"k": ["v"]}),
     ("w.a", "x", {"k": None}), "NullValueError: a row's headers map has a null value"),
    ("header-list-element", "subject string, data string, headers map<string, array<string>>",
     ("w.ok", "x", {"k": ["v"]}), ("w.a", "x", {"k": ["1", None]}),
     "NullValueError: a row's headers map has a null value"),
]  # fmt: skip


@pytest.mark.parametrize("ddl, good, bad, expected", [n[1:] for n in NULLS], ids=[n[0] for n in NULLS])
def test_a_null_where_a_message_needs_a_value_fails_and_writes_nothing(sink, spark, ddl, good, bad, expected):
    df = spark.createDataFrame([good, bad], ddl).coalesce(1)  # one task, one Arrow batch
    with pytest.raises(Exception) as info:
        df.write.format("jetstream").option("store", sink.path).mode("append").save()
    assert expected in error_text(info.value)
    assert sink.js.stream_info("W").state.messages == 0


# ---------------------------------------------------------------- a sink stream that does not exist


GUARD = "CASE WHEN raise_error('a task ran') IS NULL THEN 'x' END"


@pytest.mark.parametrize("how", ["write", "writeStream"])
def test_a_sink_stream_that_does_not_exist_is_refused_before_any_task(sink, spark, how):
    """The stream option of the sink is checked on the driver, with the source's words for
    it; a task would only know the server's 'stream not found'."""
    if how == "write":
        df = spark.range(1).selectExpr("'w.a' AS subject", f"{GUARD} AS data")
        with pytest.raises(Exception) as info:
            df.write.format("jetstream").option("store", sink.path).option("stream", "NOPE").mode("append").save()
    else:
        sink.js.add_stream(name="S", subjects=["s.>"])
        sink.js.publish("s.a", b"x")
        df = sink.read_stream(startingOffsets="earliest").selectExpr("'w.a' AS subject", f"{GUARD} AS data")
        with pytest.raises(Exception) as info:
            run_available_now(df, sink="jetstream", checkpoint=sink.checkpoint(), store=sink.path, stream="NOPE")
    text = error_text(info.value)
    assert (
        f"OptionError: option stream: there is no stream 'NOPE' in the store {sink.path} (streams: "
        f"{sink.stream_list()})" in text
    )
    assert (
        "] a task ran" not in text
    )  # the guard's error, "[USER_RAISED_EXCEPTION] a task ran" (the plan shown names it too)
    assert sink.js.stream_info("W").state.messages == 0
    assert "NOPE" not in sink.js.stream_names()


# ---------------------------------------------------------------- a schema given to the reader


SOURCE_COLUMNS = "stream string, subject string, seq bigint, timestamp timestamp, data binary"
# (a schema given with .schema(...), how it differs)
OTHER_SCHEMAS = [
    (
        "stream string, subject string, seq bigint, timestamp timestamp, data string",
        "column 'data' is string, the source's is binary",
    ),
    ("stream string, subject string, seq bigint, timestamp timestamp", "it has no column 'data'"),
    (SOURCE_COLUMNS + ", key string", "column 'key' is not one of the source's"),
    (
        "subject string, stream string, seq bigint, timestamp timestamp, data binary",
        "its columns are in another order: subject, stream, seq, timestamp, data",
    ),
]


@pytest.mark.parametrize("how", ["read", "readStream"])
@pytest.mark.parametrize("ddl, difference", OTHER_SCHEMAS, ids=["type", "missing", "extra", "order"])
def test_a_schema_given_to_the_reader_that_differs_is_an_option_error(store, spark, how, ddl, difference):
    store.js.add_stream(name="S", subjects=["s.>"])
    store.publish("s.a", 3)
    reader = (spark.read if how == "read" else spark.readStream).format("jetstream").schema(ddl)
    df = reader.option("store", store.path).option("stream", "S").option("startingOffsets", "earliest").load()
    with pytest.raises(Exception) as info:
        df.collect() if how == "read" else run_available_now(df)
    text = error_text(info.value)
    assert (
        "OptionError: the jetstream source's schema is fixed: "
        f"{SOURCE_COLUMNS} (headers is added with includeHeaders); " in text
    )
    assert f"the schema given to the reader differs ({difference}): leave out .schema(...)" in text
    assert "DATA_SOURCE_RETURN_SCHEMA_MISMATCH" not in text


def test_a_schema_given_to_the_reader_as_the_source_has_it_reads(store, spark):
    """The source's own columns as DDL (every column nullable, as DDL makes them) read as
    without .schema(...); so do they with headers."""
    store.js.add_stream(name="S", subjects=["s.>"])
    store.js.publish("s.a", b"x", headers={"k": ["1", "2"]})
    store.publish("s.b", 2)
    plain = store.read()
    given = (
        spark.read.format("jetstream").schema(SOURCE_COLUMNS).option("store", store.path).option("stream", "S").load()
    )
    assert given.schema != plain.schema
    assert_df_equality(given, plain, ignore_nullable=True)
    with_headers = store.read(includeHeaders="true")
    given = spark.read.format("jetstream").schema(SOURCE_COLUMNS + ", headers map<string, array<string>>")
    given = given.option("store", store.path).option("stream", "S").option("includeHeaders", "true").load()
    assert_df_equality(given, with_headers, ignore_nullable=True)
    assert given.where("seq = 1").first().headers == {"k": ["1", "2"]}
