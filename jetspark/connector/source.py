"""The source: batch and micro-batch reads of a stream as sequence ranges.

An offset is the last stream sequence processed: ``{"stream": "ORDERS",
"seq": 1234}``.  A micro-batch (start, end] is split into sequence-range
partitions, each read with the API's Arrow range read, so any batch re-reads
identically after a failure.  With a ``consumer``, the durable consumer's ack
floor follows what Spark has durably processed: interest and work-queue
retention then remove exactly that, within one trigger (see ``latestOffset``).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Iterator, Optional

from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from jetspark.connection import is_server_url
from jetspark.connector.options import ReaderOptions
from jetspark.connector.release import Releases
from jetspark.connector.store import handle
from jetspark.errors import DataLossError, OptionError

log = logging.getLogger("jetspark.connector")


@dataclass(frozen=True)
class SeqRange(InputPartition):
    """One Spark task's work: stream sequences lo..hi inclusive."""

    store: str
    stream: str
    lo: int
    hi: int
    subjects: tuple[str, ...]
    include_headers: bool
    connection: tuple[tuple[str, str], ...] = ()


def split(opts: ReaderOptions, lo: int, hi: int, subjects: tuple[str, ...]) -> list[SeqRange]:
    """Equal sequence ranges: at least minPartitions, at most rowsPerPartition sequences each."""
    if lo > hi:
        return []
    total = hi - lo + 1
    n = max(opts.min_partitions, math.ceil(total / opts.rows_per_partition))
    n = min(n, total)
    step = math.ceil(total / n)
    return [
        SeqRange(opts.store, opts.stream, a, min(a + step - 1, hi), subjects, opts.include_headers, opts.connection)
        for a in range(lo, hi + 1, step)
    ]


# The rows of an Arrow batch a read from a server hands Spark: smaller than a read's
# default, so Spark takes a task's first rows while the rest still come from the server.
SERVER_BATCH = 8192


def read_range(p: SeqRange) -> Iterator:
    js = handle(p.store, p.connection)
    # From a server, smaller batches than a read's default (SERVER_BATCH).
    size = {"batch_size": SERVER_BATCH} if is_server_url(p.store) else {}
    yield from js.read_batches(
        p.stream, p.lo, p.hi, subjects=list(p.subjects) or None, headers=p.include_headers, **size
    )


def named_stream_info(js, store: str, stream: str):
    """``stream``'s info; a stream that does not exist is an option error that names it, the
    store and the streams there are (the source's and the sink's ``stream`` option alike)."""
    from jetspark.errors import StreamNotFoundError

    try:
        return js.stream_info(stream)
    except StreamNotFoundError:
        names = ", ".join(sorted(js.stream_names())) or "none"
        raise OptionError(
            f"option stream: there is no stream {stream!r} in the store {store} (streams: {names})"
        ) from None


def _stream_info(js, opts: ReaderOptions):
    return named_stream_info(js, opts.store, opts.stream)


def _start_seq(js, opts: ReaderOptions) -> int:
    """The first sequence to read from the starting option."""
    state = js.stream_info(opts.stream).state
    kind = opts.starting.kind
    if kind == "earliest":
        return max(state.first_seq, 1)
    if kind == "latest":
        return state.last_seq + 1
    if kind == "seq":
        return max(opts.starting.value, 1)
    return js.seq_for_time(opts.stream, opts.starting.value * 1_000_000)


def user_schema(given, fixed):
    """The Arrow schema to hand Spark batches in when a ``.schema(...)`` given to the reader
    differs from the source's own (``fixed``) in nullability alone; None when it is the
    source's.  Any other difference is an OptionError naming the source's columns and the
    first difference, raised while Spark plans the read (on the driver): Spark's own check,
    in the tasks, only says the returned batches do not match."""
    if given is None or given == fixed:
        return None
    shape = lambda schema: [(f.name, f.dataType.simpleString()) for f in schema.fields]  # noqa: E731
    if shape(given) == shape(fixed):
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(given, timezone="UTC")
    columns = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in fixed.fields)
    raise OptionError(
        f"the jetstream source's schema is fixed: {columns} (headers is added with includeHeaders); "
        f"the schema given to the reader differs ({_first_difference(given, fixed)}): leave out .schema(...), "
        "then select, rename or cast columns after load()"
    )


def _first_difference(given, fixed) -> str:
    theirs = {f.name: f for f in fixed.fields}
    mine = {f.name: f for f in given.fields}
    for f in given.fields:
        if f.name not in theirs:
            return f"column {f.name!r} is not one of the source's"
        if f.dataType.simpleString() != theirs[f.name].dataType.simpleString():
            ours = theirs[f.name].dataType.simpleString()
            return f"column {f.name!r} is {f.dataType.simpleString()}, the source's is {ours}"
    for f in fixed.fields:
        if f.name not in mine:
            return f"it has no column {f.name!r}"
    return f"its columns are in another order: {', '.join(mine)}"


def _cast(batches, schema) -> Iterator:
    return batches if schema is None else (b.cast(schema) for b in batches)


# ---------------------------------------------------------------------- batch


class BatchReader(DataSourceReader):
    """A batch read of the options' range; Spark applies every filter after it."""

    def __init__(self, opts: ReaderOptions, cast=None) -> None:
        self.opts = opts
        self.cast = cast  # user_schema's
        self.subjects = opts.subjects
        self.lo: Optional[int] = None
        self.hi: Optional[int] = None
        self.ts_bounds: list[tuple[str, int]] = []

    def partitions(self):
        js = handle(self.opts.store, self.opts.connection)
        state = _stream_info(js, self.opts).state
        lo = _start_seq(js, self.opts)
        hi = state.last_seq if self.opts.ending is None else min(self.opts.ending, state.last_seq)
        if self.lo is not None:
            lo = max(lo, self.lo)
        if self.hi is not None:
            hi = min(hi, self.hi)
        for kind, us in self.ts_bounds:
            # Timestamps never decrease along a stream, so a time bound is a sequence bound.
            if kind == "GreaterThan":
                lo = max(lo, js.seq_for_time(self.opts.stream, (us + 1) * 1000))
            elif kind == "GreaterThanOrEqual":
                lo = max(lo, js.seq_for_time(self.opts.stream, us * 1000))
            elif kind == "LessThan":
                hi = min(hi, js.seq_for_time(self.opts.stream, us * 1000) - 1)
            else:
                hi = min(hi, js.seq_for_time(self.opts.stream, (us + 1) * 1000) - 1)
        return split(self.opts, max(lo, state.first_seq, 1), hi, self.subjects) or [
            SeqRange(
                self.opts.store, self.opts.stream, 1, 0, self.subjects, self.opts.include_headers, self.opts.connection
            )
        ]

    def read(self, partition: SeqRange):  # type: ignore[override]  # (Spark hands back the SeqRanges partitions() made)
        if partition.lo > partition.hi:
            return iter(())
        return _cast(read_range(partition), self.cast)


class FilteringBatchReader(BatchReader):
    """A batch read that takes Spark's filters on subject, seq and timestamp into the
    range it reads (``.option("pushFilters", "true")``).

    Opt-in, because Spark 4.2 and 4.3 keep a DataFrame's planned read on its data source
    (``PythonDataSourceV2.readInfo``): a later query of the same DataFrame with no filter
    Spark hands to Python (a plain ``count()``) reuses it, pushed filters and all, and
    counts only the rows the earlier query's filters kept, without a word.  With this
    option, ``load()`` a DataFrame per query (tests/connector/test_batch_read.py pins the
    behaviour, so a Spark that plans each scan afresh shows up there)."""

    def pushFilters(self, filters):
        """Subject equality / IN / prefix and seq ranges are read exactly; timestamp
        ranges narrow the sequences read and Spark still checks them."""
        # Spark may reuse a reader for another query of the same DataFrame: start afresh.
        self.subjects, self.lo, self.hi, self.ts_bounds = self.opts.subjects, None, None, []
        for f in filters:
            attr = getattr(f, "attribute", None)  # Not(...) has a child instead
            col = attr[0] if attr is not None and len(attr) == 1 else None
            if col == "subject" and not self._narrowed_subjects() and self._push_subject(f):
                continue
            if col == "seq" and isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
                self._push_seq(f)
                continue
            if col == "timestamp" and isinstance(f, (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
                self.ts_bounds.append((type(f).__name__, _micros(f.value)))
            yield f

    def _narrowed_subjects(self) -> bool:
        return self.subjects != self.opts.subjects

    def _push_subject(self, f) -> bool:
        if self.opts.subjects:
            return False  # already filtered by the option; let Spark intersect
        if isinstance(f, EqualTo) and isinstance(f.value, str) and _literal(f.value):
            self.subjects = (f.value,)
            return True
        if isinstance(f, In) and f.value and all(isinstance(v, str) and _literal(v) for v in f.value):
            self.subjects = tuple(sorted(set(f.value)))
            return True
        if isinstance(f, StringStartsWith) and f.value.endswith(".") and _literal(f.value[:-1]):
            # "orders." matches exactly what "orders.>" matches.
            self.subjects = (f.value + ">",)
            return True
        return False

    def _push_seq(self, f) -> None:
        v = int(f.value)
        lo, hi = {
            EqualTo: (v, v), GreaterThan: (v + 1, None), GreaterThanOrEqual: (v, None),
            LessThan: (None, v - 1), LessThanOrEqual: (None, v),
        }[type(f)]  # fmt: skip
        if lo is not None:
            self.lo = lo if self.lo is None else max(self.lo, lo)
        if hi is not None:
            self.hi = hi if self.hi is None else min(self.hi, hi)


def _literal(s: str) -> bool:
    """A well-formed literal subject: usable as a read filter that matches exactly itself.
    Anything else ("x.", "a..b", "a b", "x.*") stays with Spark, which compares strings."""
    from jetspark.protocol import subjects as subj

    return subj.is_valid(s, wildcards=False)


def _micros(value) -> int:
    import datetime as dt

    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.astimezone()  # Spark hands session-local naive datetimes
        delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return int(value)


# ---------------------------------------------------------------------- streaming


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReaderOptions, cast=None) -> None:
        self.opts = opts
        self.cast = cast  # user_schema's
        self._target: Optional[int] = None
        self._seen_last: Optional[int] = None  # the last sequence latestOffset read (reportLatestOffset's)
        self._last_batch = time.monotonic()
        self._resume: Optional[int] = None
        self._initial: Optional[int] = None  # the offset initialOffset gave (no batch ended there)
        # The consumer's ack floor following the checkpoint, advanced in the background (connector.release).
        self._releases = Releases(f"stream {opts.stream!r}, consumer {opts.consumer!r}", self._advance)
        self._opened = False

    def _open(self) -> None:
        """Check the stream and bind the consumer, at the driver's first call.  Not in
        ``__init__``: Spark also makes a reader in a planning worker of its own, only to
        hand it to the tasks, and that one would connect to the store for nothing."""
        if self._opened:
            return
        opts = self.opts
        js = handle(opts.store, opts.connection)
        info = _stream_info(js, opts)
        retention = info.config.retention.value
        if retention != "limits" and not opts.consumer:
            raise OptionError(
                f"stream {opts.stream!r} has {retention} retention: messages exist only while a consumer "
                f'holds interest, so this reader needs .option("consumer", "<durable name>"); its commits '
                f"then release what Spark has processed"
            )
        if opts.consumer:
            self._resume = self._bind_consumer(js, retention)
        self._opened = True

    def _bind_consumer(self, js, retention: str) -> Optional[int]:
        """Create or bind the durable consumer; returns its ack floor if it already existed.

        Commits advance the floor cumulatively (AckAll semantics), so the consumer is
        created with ack policy "all" -- except on a work-queue stream, which (as on
        nats-server, error 10098) takes only explicit-ack consumers."""
        from jetspark.api import AckPolicy
        from jetspark.errors import ConsumerNotFoundError

        try:
            info = js.consumer_info(self.opts.stream, self.opts.consumer)
            return info.ack_floor.stream_seq
        except ConsumerNotFoundError:
            subjects = list(self.opts.subjects)
            js.add_consumer(
                self.opts.stream,
                durable_name=self.opts.consumer,
                ack_policy=AckPolicy.EXPLICIT if retention == "workqueue" else AckPolicy.ALL,
                filter_subject=subjects[0] if len(subjects) == 1 else None,
                filter_subjects=subjects if len(subjects) > 1 else None,
                max_ack_pending=-1,
            )
            return None

    def initialOffset(self) -> dict:
        self._open()
        js = handle(self.opts.store, self.opts.connection)
        if self._resume is not None and self._resume > 0:
            # A new query without a checkpoint resumes where the consumer's acks stand.
            seq = self._resume
        else:
            seq = _start_seq(js, self.opts) - 1
        self._initial = seq
        return {"stream": self.opts.stream, "seq": seq}

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.opts
        if o.max_offsets_per_trigger:
            return ReadMaxRows(o.max_offsets_per_trigger)
        if o.max_bytes_per_trigger:
            return ReadMaxBytes(o.max_bytes_per_trigger)
        if o.min_offsets_per_trigger:
            return ReadMinRows(o.min_offsets_per_trigger)
        return ReadAllAvailable()

    def _latest(self) -> int:
        last = handle(self.opts.store, self.opts.connection).stream_info(self.opts.stream).state.last_seq
        self._seen_last = last  # for reportLatestOffset, which Spark calls right after
        return last if self._target is None else min(last, self._target)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._open()
        begin = int(start["seq"])
        # Spark plans a batch from ``start`` only once the batch that ended there is in the
        # checkpoint's commit log (MicroBatchExecution: the run loop commits a batch, then
        # constructs the next from its end; on restart a batch not yet committed is run
        # again before any new offset is asked for).  So the consumer can be advanced to
        # ``start`` now, a trigger before Spark's own ``commit(start)``, which comes only
        # when a next batch is planned; a trigger that finds no new data releases the last
        # batch too.  ``start`` as initialOffset gave it ended no batch: nothing to release.
        # The release runs while the next batch does (connector.release); the next trigger
        # waits for it first, and a trigger with no batch to plan waits for its own.
        self._releases.settle()
        if begin != self._initial and self.opts.consumer:
            self._releases.start(begin)
        end = self._latest()
        if end <= begin:
            self._releases.settle()
            return start
        if not isinstance(limit, ReadAllAvailable):
            # Spark hands one limit; the options may set several: apply them all.
            o = self.opts
            if o.min_offsets_per_trigger and end - begin < o.min_offsets_per_trigger and self._target is None:
                if time.monotonic() - self._last_batch < o.max_trigger_delay_s:
                    self._releases.settle()
                    return start
            if o.max_offsets_per_trigger:
                end = min(end, begin + o.max_offsets_per_trigger)
            if o.max_bytes_per_trigger:
                end = handle(o.store, o.connection).seq_for_bytes(o.stream, begin + 1, end, o.max_bytes_per_trigger)
        self._last_batch = time.monotonic()
        return {"stream": self.opts.stream, "seq": end}

    def reportLatestOffset(self) -> dict:
        """The stream's last sequence, for the query's progress: the one latestOffset just
        read if it did (Spark asks for both in each trigger; one round trip to a server)."""
        self._open()
        last, self._seen_last = self._seen_last, None
        if last is None:
            last = handle(self.opts.store, self.opts.connection).stream_info(self.opts.stream).state.last_seq
        return {"stream": self.opts.stream, "seq": last}

    def prepareForTriggerAvailableNow(self) -> None:
        self._open()
        self._target = handle(self.opts.store, self.opts.connection).stream_info(self.opts.stream).state.last_seq

    def partitions(self, start: dict, end: dict):
        self._open()
        lo, hi = int(start["seq"]) + 1, int(end["seq"])
        if lo > hi:
            return []
        js = handle(self.opts.store, self.opts.connection)
        info = js.stream_info(self.opts.stream)
        first = info.state.first_seq
        if lo < first and info.config.retention.value == "limits":
            lost = (
                f"sequences {lo}..{min(first - 1, hi)} of stream {self.opts.stream!r} were removed by retention "
                "before this query read them"
            )
            if self.opts.fail_on_data_loss:
                raise DataLossError(lost + '; set .option("failOnDataLoss", "false") to skip them and go on')
            log.warning("%s; skipping them (failOnDataLoss=false)", lost)
        return split(self.opts, max(lo, first), hi, self.opts.subjects)

    def read(self, partition: SeqRange):  # type: ignore[override]  # (Spark hands back the SeqRanges partitions() made)
        return _cast(read_range(partition), self.cast)

    def commit(self, end: dict) -> None:
        """Spark's commit of a batch's end: released already, or being released, by ``latestOffset``."""
        self._open()
        seq = int(end["seq"])
        if self.opts.consumer and not self._releases.covered(seq):
            self._releases.now(seq)

    def stop(self) -> None:
        """The query stops: the release under way finishes (its error is logged by Spark)."""
        self._releases.settle()

    def _advance(self, seq: int) -> None:
        """Advance the consumer's ack floor to ``seq``, a batch end in the checkpoint.  A
        release that cannot take effect fails the query (Spark stops it with this error):
        left unsaid, the stream would keep (interest, work queue) or hand out again what the
        query has processed."""
        handle(self.opts.store, self.opts.connection).advance_ack_floor(self.opts.stream, self.opts.consumer, seq)
