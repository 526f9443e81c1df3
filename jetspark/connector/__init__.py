"""The Spark data source ``jetstream`` (pyspark.sql.datasource, Spark >= 4.2).

Register it once per session, then read and write streams::

    import jetspark
    jetspark.register(spark)

    df = (spark.readStream.format("jetstream")
          .option("store", "./jetspark-data")      # or load("./jetspark-data")
          .option("stream", "ORDERS")
          .option("consumer", "spark-orders")      # optional durable consumer: commits advance its ack floor
          .load())

    spark.read.format("jetstream").option("stream", "ORDERS").load()          # batch
    df.writeStream.format("jetstream").option("checkpointLocation", ...).start()

Source schema: ``stream string, subject string, seq long, timestamp timestamp,
data binary`` plus ``headers map<string, array<string>>`` with
``includeHeaders``.  Offsets are ``{"stream": ..., "seq": <last sequence
processed>}``.  ``help(JetStreamDataSource)`` lists every option.

Modules: ``options`` (the options, parsed once); ``store`` (one API handle per
store per process); ``source`` (batch and micro-batch reads) and ``release`` (the
consumer's ack floor advanced in the background); ``sink`` (rows
to messages, exactly once) and ``registry`` (the sink's committed micro-batches);
``session`` (a local SparkSession set up for jetspark).
"""

from __future__ import annotations

from jetspark._extras import require_spark

# Without the spark extra, say which one to install rather than "No module named 'pyspark'".
require_spark("jetspark.connector (the Spark data source)")

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from jetspark.connector import options as _options

SOURCE_SCHEMA = StructType(
    [
        StructField("stream", StringType(), False),
        StructField("subject", StringType(), False),
        StructField("seq", LongType(), False),
        StructField("timestamp", TimestampType(), False),
        StructField("data", BinaryType(), False),
    ]
)
# Nullable map values and array elements: the engine's Arrow headers type is
# map<string, list<string>> with nullable children, and Spark checks a returned
# RecordBatch's schema for equality (nullability included).
HEADERS_FIELD = StructField("headers", MapType(StringType(), ArrayType(StringType(), True), True), True)


class JetStreamDataSource(DataSource):
    """``format("jetstream")``: batch and micro-batch source, batch and streaming sink.

    (The options are appended below at import, from ``jetspark.connector.options.OPTIONS``.)
    """

    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def schema(self) -> StructType:
        from jetspark.connector.options import _bool

        if _bool(self.options, "includeHeaders", False):
            return StructType(SOURCE_SCHEMA.fields + [HEADERS_FIELD])
        return SOURCE_SCHEMA

    def reader(self, schema):
        from jetspark.connector.options import reader_options
        from jetspark.connector.source import BatchReader, FilteringBatchReader, user_schema

        opts = reader_options(self.options, streaming=False)
        cast = user_schema(schema, self.schema())
        return FilteringBatchReader(opts, cast) if opts.push_filters else BatchReader(opts, cast)

    def streamReader(self, schema):
        from jetspark.connector.options import reader_options
        from jetspark.connector.source import StreamReader, user_schema

        opts = reader_options(self.options, streaming=True)
        return StreamReader(opts, user_schema(schema, self.schema()))

    def writer(self, schema, overwrite: bool):
        from jetspark.connector.options import writer_options
        from jetspark.connector.sink import BatchWriter, check_schema, new_write_id
        from jetspark.errors import OptionError

        opts = writer_options(self.options)
        if overwrite:
            # As Spark's Kafka sink: a log is appended to, never overwritten.
            raise OptionError(
                'the jetstream sink appends messages to streams: use mode("append"); '
                "a stream cannot be overwritten (purge it through the API if that is the intent)"
            )
        check_schema(schema, opts)
        _open_store(opts)
        return BatchWriter(opts, new_write_id())

    def streamWriter(self, schema, overwrite: bool):
        from jetspark.connector.options import writer_options
        from jetspark.connector.sink import StreamWriter, check_schema

        opts = writer_options(self.options)
        check_schema(schema, opts)
        _open_store(opts)
        return StreamWriter(opts)


# help() and the API reference show the options from the one place they are declared.
JetStreamDataSource.__doc__ = f"""``format("jetstream")``: batch and micro-batch source, batch and streaming sink.

Read with ``spark.read`` / ``spark.readStream``, write with ``df.write`` /
``df.writeStream``, after ``jetspark.register(spark)``.  Options are given with
``.option(name, value)``; names are case-insensitive.  An unknown option is
refused with ``OptionError`` listing the accepted ones, and one that does not
apply there (``endingOffsets`` on a stream) with one saying why.

Source columns: ``stream``, ``subject``, ``seq``, ``timestamp``, ``data``, and
``headers`` with ``includeHeaders``.  Sink columns: ``subject``, ``data``,
optionally ``headers`` and ``msg_id``.

Options:

{_options.options_table()}
"""


def _open_store(opts) -> None:
    """Open the sink's store on the driver, so a store that does not exist (or a server
    that cannot be reached), or a ``stream`` option naming no stream there, fails the
    write before any task runs."""
    from jetspark.connector.source import named_stream_info
    from jetspark.connector.store import handle

    js = handle(opts.store, opts.connection)
    if opts.stream is not None:
        named_stream_info(js, opts.store, opts.stream)


# Spark refuses a batch read of a Python data source that takes filters (ours, with the
# pushFilters option: subject, seq and timestamp ranges are read exactly) unless this is on:
# DATA_SOURCE_PUSHDOWN_DISABLED.
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark) -> None:
    """Make ``format("jetstream")`` available in this Spark session, and switch on the
    filter pushdown its batch reads with ``pushFilters`` need (``PUSHDOWN_CONF``, a session
    setting)."""
    spark.dataSource.register(JetStreamDataSource)
    if str(spark.conf.get(PUSHDOWN_CONF, "false")).lower() != "true":
        spark.conf.set(PUSHDOWN_CONF, "true")
