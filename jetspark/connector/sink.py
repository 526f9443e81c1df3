"""The sink: DataFrame rows become messages, exactly once.

Rows carry ``subject`` (or the ``subject`` option), ``data`` (binary or
string), and optionally ``headers`` (map) and ``msg_id``.  A row's ``Nats-Msg-Id`` is its
``msg_id``, else the one its ``headers`` carry (``_given_ids``), else a
deterministic id built from (query id, batch id, partition, row), so a retried
task or a replayed micro-batch is dropped
by the stream's duplicate window; a micro-batch the store's registry
(registry.py, stream ``JETSPARK_SINKS``) records as committed for the query
is skipped outright, even after the window.

Column names and types are checked on the driver, from the schema Spark
plans the write with, before any task runs (``check_schema``).  Nulls can
only be seen in the rows: a null ``subject`` (without the ``subject``
option), a null ``data`` or a null header value fails the task before the
Arrow batch holding it is published.  A null ``headers`` map is a message
without headers, a null ``msg_id`` gets the generated id, as does an empty or
blank-only one (``_given_ids``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from jetspark.connector import registry
from jetspark.connector.options import WriterOptions
from jetspark.connector.store import handle
from jetspark.errors import JetSparkError, OptionError

ALLOWED = ("subject", "data", "headers", "msg_id")
MSG_ID_HEADER = "Nats-Msg-Id"


class ColumnTypeError(JetSparkError, TypeError):
    """A column the sink takes has a Spark type it cannot write."""


class NullValueError(JetSparkError, ValueError):
    """A row has a null where the message needs a value."""


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    query_id: str
    batch_id: int
    rows: int
    skipped: bool = False


def _string(t) -> bool:
    from pyspark.sql.types import CharType, StringType, VarcharType

    return isinstance(t, (StringType, CharType, VarcharType))


def _binary_or_string(t) -> bool:
    from pyspark.sql.types import BinaryType

    return isinstance(t, BinaryType) or _string(t)


def _headers(t) -> bool:
    from pyspark.sql.types import ArrayType, MapType

    if not isinstance(t, MapType) or not _string(t.keyType):
        return False
    v = t.valueType
    return _string(v) or (isinstance(v, ArrayType) and _string(v.elementType))


# column -> (the Spark types it takes, as the error says them; the check)
COLUMN_TYPES = {
    "subject": ("string", _string),
    "data": ("binary or string", _binary_or_string),
    "headers": ("map<string, string> or map<string, array<string>>", _headers),
    "msg_id": ("string", _string),
}


def _type_hint(name: str, t) -> str:
    from pyspark.sql.types import ArrayType, MapType, StructType

    if name == "headers":
        return 'build it as a map of strings, e.g. F.col("headers").cast("map<string,string>") or F.create_map(...)'
    if isinstance(t, (ArrayType, MapType, StructType)):
        return f'serialize it first, e.g. F.to_json("{name}").alias("{name}")'
    return f'cast it first: F.col("{name}").cast("string")'


def check_schema(schema, opts: WriterOptions) -> None:
    """Refuse, on the driver and before anything is written, a schema the sink cannot write."""
    names = [f.name for f in schema.fields]
    for n in names:
        if n not in ALLOWED:
            raise OptionError(
                f"column {n!r} cannot be written to a stream; the sink takes columns {', '.join(ALLOWED)} (select "
                "or rename them first)"
            )
    if "data" not in names:
        raise OptionError("the sink needs a 'data' column (binary or string)")
    if "subject" not in names and not opts.subject:
        raise OptionError('the sink needs a \'subject\' column or .option("subject", "...")')
    for f in schema.fields:
        accepted, ok = COLUMN_TYPES[f.name]
        if not ok(f.dataType):
            raise ColumnTypeError(
                f"column {f.name!r} has type {f.dataType.simpleString()}; the sink takes {accepted} for it "
                f"({_type_hint(f.name, f.dataType)})"
            )


def _task():
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx, (ctx.partitionId() if ctx else 0)


def write_batches(opts: WriterOptions, batches: Iterator[pa.RecordBatch], id_prefix: str) -> int:
    """Publish every batch through the API's batch append; returns the row count."""
    js = handle(opts.store, opts.connection)
    rows = 0
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        cols = {}
        if "subject" in batch.schema.names:
            cols["subject"] = batch.column("subject")
            if cols["subject"].null_count and opts.subject:
                cols["subject"] = pc.fill_null(cols["subject"], opts.subject)
            if cols["subject"].null_count:
                raise NullValueError(
                    'a row has a null subject and the sink has no .option("subject", "...") to use instead'
                )
        else:
            cols["subject"] = pa.repeat(pa.scalar(opts.subject, pa.string()), n)
        cols["data"] = batch.column("data")
        if cols["data"].null_count:
            # NATS has no null payload, and turning null into an empty one would hide
            # the bug upstream: the user chooses.
            raise NullValueError(
                "a row has a null data column; a message needs a payload: filter such rows out, "
                "or give them an empty one (F.coalesce with an empty value of the column's type)"
            )
        if "headers" in batch.schema.names:
            cols["headers"] = batch.column("headers")
            if _null_header_value(cols["headers"]):
                raise NullValueError(
                    "a row's headers map has a null value; a header needs a value (an empty string is one), and a "
                    "row without headers has a null map"
                )
        given = _given_ids(batch)
        own_ids = given is not None and given.null_count < n
        if not own_ids:
            table = pa.table(cols)
            parts = [(opts.stream, table)] if opts.stream is not None else _by_stream(js, table)
            if len(parts) == 1:
                # Row i's id is f"{id_prefix}:{rows + i}": the engine dedups the batch as one range.
                js.publish_batch(table, stream=parts[0][0], msg_id_prefix=f"{id_prefix}:", msg_id_start=rows)
                rows += n
                continue
        ids = _msg_ids(id_prefix, rows, n)
        cols["msg_id"] = ids if given is None else pc.coalesce(given, ids)
        table = pa.table(cols)
        if opts.stream is not None:
            js.publish_batch(table, stream=opts.stream)
        else:
            for name, part in _by_stream(js, table):
                js.publish_batch(part, stream=name)
        rows += n
    return rows


def _given_ids(batch: pa.RecordBatch) -> Optional[pa.Array]:
    """Each row's own message id, null where it has none: its ``msg_id``, else the
    ``Nats-Msg-Id`` its headers carry (the first value), as a publish with that header is
    deduplicated by it.  An empty or blank-only value is none (``_no_blank_ids``).  A copy of
    a stream read with includeHeaders keeps its ids, so copying it again stores nothing
    twice.  None when the batch has neither column."""
    ids = _no_blank_ids(batch.column("msg_id")) if "msg_id" in batch.schema.names else None
    if "headers" in batch.schema.names and (ids is None or ids.null_count):
        found = pc.map_lookup(batch.column("headers"), pa.scalar(MSG_ID_HEADER, pa.string()), "first")
        if found.null_count < len(found):
            if pa.types.is_list(found.type):
                carried = pa.array([v[0] if v else None for v in found.to_pylist()], pa.string())
            else:
                carried = found
            carried = _no_blank_ids(carried)
            ids = carried if ids is None else pc.coalesce(ids, carried)
    return ids


# An empty value, or one made only of what str.strip takes from a header value's ends, is no
# id: the header codec sends it as an empty Nats-Msg-Id, which a server reads as none
# (docs/semantics.md, 3.5).  CR and LF are left out: publish_batch refuses an id holding one,
# as it does any header value with a line break.  (str.isspace is true of nothing past U+3000.)
BLANKS = "".join(chr(c) for c in range(0x3001) if chr(c).isspace() and chr(c) not in "\r\n")
_BLANK_ONLY = "^[" + "".join(f"\\x{{{ord(b):x}}}" for b in BLANKS) + "]*$"


def _no_blank_ids(ids: pa.Array) -> pa.Array:
    """``ids`` with its empty and blank-only values made null, so such a row gets the
    generated id like a row without one; an id with blanks at its ends stays as it is
    (publish_batch strips them, so ``" a "`` is ``"a"``)."""
    blank = pc.match_substring_regex(ids, _BLANK_ONLY)
    if not pc.any(blank).as_py():
        return ids
    return pc.if_else(blank, pa.scalar(None, ids.type), ids)


def _null_header_value(column: pa.Array) -> bool:
    """Does a map<string, string> or map<string, list<string>> hold a null value (or list element)?"""
    if column.null_count == len(column):
        return False
    offsets = column.offsets  # .items ignores a slice: cut the values to this one's
    lo = offsets[0].as_py()
    values = column.items.slice(lo, offsets[-1].as_py() - lo)
    if values.null_count:
        return True
    return pa.types.is_list(values.type) and pc.list_flatten(values).null_count > 0


def _msg_ids(prefix: str, first: int, n: int) -> pa.Array:
    """``f"{prefix}:{first + i}"`` for i in range(n), built in Arrow rather than row by row in Python."""
    nums = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(np.arange(first, first + n, dtype=np.int64))])
    return pc.binary_join_element_wise(pa.scalar(prefix + ":", pa.string()), pc.cast(nums, pa.string()), "")


def _by_stream(js, table: pa.Table) -> list[tuple[Optional[str], pa.Table]]:
    """The rows grouped by the stream each one's subject routes to, as a publish routes it.

    A batch whose subjects all go to one stream (the common case) stays whole;
    a subject no stream captures raises NoStreamResponseError before anything
    of the batch is stored.
    """
    from jetspark.errors import NoStreamResponseError, StreamNotFoundError
    from jetspark.protocol import subjects as subj

    subjects = table.column("subject")
    route: dict[str, str] = {}
    for s in pc.unique(subjects).to_pylist():
        name: Optional[str] = None
        if isinstance(s, str) and subj.is_valid(s):
            try:
                name = js.find_stream_name_by_subject(s)
            except StreamNotFoundError:
                pass
        if name is None:
            raise NoStreamResponseError(s)
        route[s] = name
    names = sorted(set(route.values()))
    if len(names) <= 1:
        return [(names[0] if names else None, table)]
    return [
        (
            name,
            table.filter(
                pc.is_in(subjects, value_set=pa.array([s for s, n in route.items() if n == name], subjects.type))
            ),
        )
        for name in names
    ]


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriterOptions, write_id: str) -> None:
        self.opts = opts
        self.write_id = write_id

    def write(self, iterator) -> SinkCommit:
        _, part = _task()
        rows = write_batches(self.opts, iterator, f"{self.write_id}:{part}")
        return SinkCommit(self.write_id, 0, rows)


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriterOptions) -> None:
        self.opts = opts

    def write(self, iterator) -> SinkCommit:
        ctx, part = _task()
        query_id = (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or "adhoc"
        batch_id = int((ctx.getLocalProperty("streaming.sql.batchId") if ctx else None) or 0)
        js = handle(self.opts.store, self.opts.connection)
        if registry.last_batch(js, query_id) >= batch_id:
            # A replay of a batch this query already committed: nothing to write.
            for _ in iterator:
                pass
            return SinkCommit(query_id, batch_id, 0, skipped=True)
        rows = write_batches(self.opts, iterator, f"{query_id}:{batch_id}:{part}")
        return SinkCommit(query_id, batch_id, rows)

    def commit(self, messages: list[Optional[SinkCommit]], batchId: int) -> None:  # type: ignore[override]  # (Spark hands back what write() returned)
        queries = {m.query_id for m in messages if m is not None}
        js = handle(self.opts.store, self.opts.connection)
        for q in queries:
            registry.commit_batch(js, q, batchId, replicas=self.opts.registry_replicas)

    def abort(self, messages, batchId: int) -> None:
        """Rows of an aborted batch stay; the replay's ids make them duplicates."""


def new_write_id() -> str:
    return uuid.uuid4().hex
