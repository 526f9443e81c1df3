"""Every bad option is refused with an error that names the option and what it accepts.

Spark wraps the connector's Python error (AnalysisException for a batch read or
write, StreamingQueryException for a query): the tests look for the text.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from tests.connector.support import error_text, run_available_now

pytestmark = pytest.mark.spark

STARTING = 'option startingOffsets must be "earliest", "latest" or JSON like {"seq": 42} (or {"S": 42})'
ENDING = 'option endingOffsets must be "latest" or JSON like {"seq": 42} (or {"S": 42})'

# (how, options, every text the error must hold).  "stream": "S" is added unless a case sets it
# (None: left out); "{streams}" stands for the store's streams.  Batch and stream reads parse options
# with the same code, and a batch read parses the read limits too before it refuses them, so most cases
# are batch reads
# (a fraction of a second each); the stream cases (a query start each, a second or two)
# are those only a stream reaches, plus a few to show the text survives Spark's wrapping.
CASES = [
    ("read", {"stream": None}, ['option stream is required: .option("stream", "ORDERS")']),
    ("read", {"stream": "NOPE"}, ["option stream: there is no stream 'NOPE' in the store", "(streams: {streams})"]),
    ("stream", {"stream": "NOPE"}, ["option stream: there is no stream 'NOPE'", "(streams: {streams})"]),
    (
        "read",
        {"bogus": "1"},
        ["unknown read option 'bogus'; accepted: ", "startingOffsets", "includeHeaders", "subjects"],
    ),
    # Spark hands a stream's option keys lower-cased; the accepted names are spelled out.
    (
        "stream",
        {"maxOffsetPerTrigger": "5"},
        ["unknown read option 'maxoffsetpertrigger'", "accepted: ", "maxOffsetsPerTrigger"],
    ),
    ("read", {"subjects": "a..b"}, ["option subjects must be comma-separated subject filters", "'a..b' is not one"]),
    ("read", {"subjects": "a.>.b, a.c"}, ["option subjects must be", "'a.>.b' is not one"]),
    ("read", {"startingOffsets": "first"}, [STARTING + ", not 'first'"]),
    ("read", {"startingOffsets": "{bad json"}, [STARTING + ", not '{bad json'"]),
    ("read", {"startingOffsets": '{"seq": -1}'}, [STARTING]),
    ("read", {"startingOffsets": '{"sequence": 3}'}, [STARTING]),
    ("read", {"startingOffsets": '{"seq": "3"}'}, [STARTING]),
    (
        "read",
        {"startingOffsets": "earliest", "startingTimestamp": "0"},
        ["options startingOffsets and startingTimestamp exclude each other"],
    ),
    (
        "read",
        {"startingTimestamp": "yesterday"},
        ["option startingTimestamp must be milliseconds since the epoch, not 'yesterday'"],
    ),
    (
        "read",
        {"endingOffsets": "earliest"},
        ['option endingOffsets must be "latest" or JSON like {"seq": 42}, not "earliest"'],
    ),
    ("read", {"endingOffsets": "{}"}, [ENDING + ", not '{}'"]),
    (
        "stream",
        {"endingOffsets": '{"seq": 3}'},
        ["option endingOffsets is for batch reads (spark.read); a stream has no end"],
    ),
    ("read", {"maxOffsetsPerTrigger": "10"}, ["option maxOffsetsPerTrigger is for streaming reads (spark.readStream)"]),
    ("read", {"minOffsetsPerTrigger": "10"}, ["option minOffsetsPerTrigger is for streaming reads"]),
    ("stream", {"maxOffsetsPerTrigger": "0"}, ["option maxOffsetsPerTrigger must be a positive integer, not '0'"]),
    ("read", {"maxOffsetsPerTrigger": "-1"}, ["option maxOffsetsPerTrigger must be a positive integer, not '-1'"]),
    ("read", {"maxOffsetsPerTrigger": "abc"}, ["option maxOffsetsPerTrigger must be a positive integer, not 'abc'"]),
    ("read", {"maxOffsetsPerTrigger": "1.5"}, ["option maxOffsetsPerTrigger must be a positive integer, not '1.5'"]),
    ("read", {"maxBytesPerTrigger": "0"}, ["option maxBytesPerTrigger must be a positive integer, not '0'"]),
    ("read", {"minOffsetsPerTrigger": "lots"}, ["option minOffsetsPerTrigger must be a positive integer, not 'lots'"]),
    ("stream", {"maxTriggerDelay": "5m"}, ["option maxTriggerDelay only applies together with minOffsetsPerTrigger"]),
    (
        "stream",
        {"minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"},
        ["option maxTriggerDelay must be a duration like 500ms, 30s, 15m or 1h, not 'soon'"],
    ),
    ("stream", {"failOnDataLoss": "maybe"}, ["option failOnDataLoss must be true or false, not 'maybe'"]),
    ("read", {"includeHeaders": "maybe"}, ["option includeHeaders must be true or false, not 'maybe'"]),
    ("read", {"pushFilters": "sometimes"}, ["option pushFilters must be true or false, not 'sometimes'"]),
    (
        "stream",
        {"pushFilters": "true"},
        ["option pushFilters is for batch reads (spark.read); a streaming read takes every message of its range"],
    ),
    ("read", {"minPartitions": "0"}, ["option minPartitions must be a positive integer, not '0'"]),
    ("read", {"rowsPerPartition": "many"}, ["option rowsPerPartition must be a positive integer, not 'many'"]),
    (
        "write",
        {"bogus": "1"},
        ["unknown write option 'bogus'; accepted: checkpointLocation, path, ", "store, stream, subject"],
    ),
    ("writeStream", {"maxOffsetsPerTrigger": "5"}, ["unknown write option 'maxoffsetspertrigger'", "accepted: "]),
]


def _id(case):
    how, options, _ = case
    return how + ":" + ",".join(f"{k}={v}" for k, v in options.items())


def _touches_store(case) -> bool:
    """Whether the error depends on the store (its streams); the others are refused by the
    option parsing, the same code whatever the store, before the store is opened."""
    how, options, texts = case
    return "stream" in options or any("{streams}" in t for t in texts)


STORE_CASES = [c for c in CASES if _touches_store(c)]
PARSE_CASES = [c for c in CASES if not _touches_store(c)]


@pytest.mark.parametrize("how, options, texts", STORE_CASES, ids=[_id(c) for c in STORE_CASES])
def test_bad_option_on_every_store(store, spark, how, options, texts):
    check_bad_option(store, spark, how, options, texts)


@pytest.mark.parametrize("store", ["engine"], indirect=True)
@pytest.mark.parametrize("how, options, texts", PARSE_CASES, ids=[_id(c) for c in PARSE_CASES])
def test_bad_option(store, spark, how, options, texts):
    check_bad_option(store, spark, how, options, texts)


def check_bad_option(store, spark, how, options, texts):
    store.js.add_stream(name="S", subjects=["s.>"])
    store.js.publish("s.a", b"x")
    options = {"stream": "S", **options}
    if options["stream"] is None:
        del options["stream"]
    with pytest.raises(Exception) as info:
        if how == "read":
            spark.read.format("jetstream").option("store", store.path).options(**options).load().collect()
        elif how == "stream":
            run_available_now(
                spark.readStream.format("jetstream").option("store", store.path).options(**options).load()
            )
        elif how == "write":
            df = spark.createDataFrame([("s.a", "x")], "subject string, data string")
            df.write.format("jetstream").option("store", store.path).options(**options).mode("append").save()
        else:
            options.pop("stream")
            df = store.read_stream(startingOffsets="earliest").select("subject", "data")
            run_available_now(df, sink="jetstream", checkpoint=store.checkpoint(), store=store.path, **options)
    text = error_text(info.value)
    for t in texts:
        assert t.replace("{streams}", store.stream_list()) in text


def test_option_keys_are_case_insensitive(store, spark):
    store.js.add_stream(name="S", subjects=["s.>"])
    store.publish("s.a", 5)
    df = (
        spark.read.format("jetstream")
        .option("STORE", store.path)
        .option("Stream", "S")
        .option("STARTINGOFFSETS", '{"seq": 4}')
        .load()
    )
    assert sorted(r.seq for r in df.select(F.col("seq")).collect()) == [4, 5]
