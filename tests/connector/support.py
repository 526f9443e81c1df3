"""Helpers for the connector tests (fixtures are in conftest.py)."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import functions as F

from jetspark.connector import registry


@dataclass
class Store:
    """A fresh store: its path (a directory, or a nats:// URL), an open handle, and
    short-hands for the connector."""

    path: str
    js: object
    tmp: Path
    spark: object = None
    backend: str = "engine"

    def read(self, stream: str = "S", **options):
        return (
            self.spark.read.format("jetstream")
            .option("store", self.path)
            .option("stream", stream)
            .options(**options)
            .load()
        )

    def read_stream(self, stream: str = "S", **options):
        return (
            self.spark.readStream.format("jetstream")
            .option("store", self.path)
            .option("stream", stream)
            .options(**options)
            .load()
        )

    def checkpoint(self, name: str = "ckpt") -> str:
        return str(self.tmp / name)

    def publish(self, stream_subjects, n: int, *, start: int = 0, prefix: str = "m") -> None:
        """Publish n messages ``<prefix><i>`` round-robin over the given subjects."""
        subjects = [stream_subjects] if isinstance(stream_subjects, str) else list(stream_subjects)
        for i in range(start, start + n):
            self.js.publish(subjects[i % len(subjects)], f"{prefix}{i}".encode())

    def stream_list(self) -> str:
        """How the connector names the store's streams in an error: "S" or "KEEPER, S"."""
        return ", ".join(sorted(self.js.stream_names()))

    def sink_records(self) -> int:
        """How many streaming queries the store records committed sink batches for: the
        subjects of the sink's registry stream (jetspark/connector/registry.py)."""
        return len(self.js.stream_info(registry.REGISTRY_STREAM, subjects_filter=">").state.subjects or {})

    def remove_sink_records(self) -> None:
        self.js.purge_stream(registry.REGISTRY_STREAM)

    def payloads(self, stream: str) -> list[bytes]:
        """Every stored message's data, in sequence order."""
        out = []
        for batch in self.js.read_batches(stream):
            out.extend(batch.column("data").to_pylist())
        return out


BASE = dt.datetime(2024, 3, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


class Clock:
    """An injectable engine clock (ns since the epoch) at BASE + chosen seconds."""

    def __init__(self) -> None:
        self.ns = to_ns(BASE)

    def __call__(self) -> int:
        return self.ns

    def at(self, seconds: float) -> dt.datetime:
        """Move to BASE + seconds; returns that time."""
        self.ns = to_ns(BASE) + int(round(seconds * 1_000_000)) * 1000
        return BASE + dt.timedelta(seconds=seconds)


def to_ns(when: dt.datetime) -> int:
    return (int(when.timestamp()) * 1_000_000 + when.microsecond) * 1000


def to_us(when: dt.datetime) -> int:
    return to_ns(when) // 1000


def ms_at(times, where: str) -> int:
    """startingTimestamp (ms) ``at`` message 3's millisecond, just ``after`` message 3
    (the next millisecond: message 4's is later still), or ``beyond`` the last message."""
    ms = to_us(times[3]) // 1000
    return {"at": ms, "after": ms + 1, "beyond": to_us(times[-1]) // 1000 + 1000}[where]


# ---------------------------------------------------------------------- Spark


def unique_name(prefix: str = "q") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def run_available_now(df, *, sink: str = "memory", checkpoint=None, query_name=None, **options):
    """Start ``df`` with ``trigger(availableNow=True)``, wait for it to end, return the query.

    ``sink="memory"`` names the in-memory table after the query (``spark.table(q.name)``).
    """
    writer = df.writeStream.format(sink).trigger(availableNow=True).options(**options)
    if sink == "memory":
        writer = writer.queryName(query_name or unique_name())
    if checkpoint is not None:
        writer = writer.option("checkpointLocation", str(checkpoint))
    q = writer.start()
    try:
        q.awaitTermination()
    finally:
        if q.isActive:
            q.stop()
    return q


def batch_sizes(query) -> list[int]:
    """Rows per micro-batch of a finished query."""
    return [int(p["numInputRows"]) for p in query.recentProgress]


def executed_plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def has_filter(df) -> bool:
    """Does Spark still filter rows after the scan?  (``RuntimeFilters: []`` is no Filter node.)"""
    return re.search(r"\bFilter\b", executed_plan(df)) is not None


def error_text(exc: BaseException) -> str:
    """Spark wraps Python errors in Py4J / AnalysisException / StreamingQueryException text."""
    parts = [str(exc)]
    for attr in ("desc", "stackTrace"):
        v = getattr(exc, attr, None)
        if isinstance(v, str):
            parts.append(v)
    return "\n".join(parts)


def run_to_out(store, df, checkpoint):
    """Run ``df`` into stream OUT (created if needed) with the jetstream sink: Spark's memory
    sink cannot restart from a checkpoint.  Each row becomes a message whose data is its seq."""
    store.js.add_stream(name="OUT", subjects=["out.>"])
    before = store.js.stream_info("OUT").state.last_seq
    out = df.select(F.lit("out.seq").alias("subject"), F.col("seq").cast("string").alias("data"))
    q = run_available_now(out, sink="jetstream", checkpoint=checkpoint, store=store.path)
    q.new_seqs = sorted(int(d) for d in store.payloads("OUT")[before:])
    return q
