"""The range reads of the nats:// backend, built for throughput (over ``range_reader``).

- ``read_batches``: a range into Arrow batches with the engine's exact schema.
- ``ordered_consumer``: a range as ``Msg`` objects in order, no acks.
- ``seq_for_time``: the server's get-message-by-time (``start_time``).
- ``seq_for_bytes``: a headers-only read over the range, adding up each
  message's size as the server accounts it.
"""

from __future__ import annotations

import datetime as _dt
from contextlib import closing
from typing import Generator, Iterator, Optional

import numpy as np
import pyarrow as pa

from jetspark.api import RetentionPolicy, StorageType, StreamInfo, datetime_to_ns
from jetspark.err_codes import BAD_REQUEST
from jetspark.errors import BadRequestError, JetSparkError, MsgNotFoundError
from jetspark.protocol import headers as H
from jetspark.protocol import subjects as subj
from jetspark.protocol.arrow import HEADERS_TYPE, schema
from jetspark.protocol.deliveries import FrameChunk
from jetspark.remote import jsapi, wire
from jetspark.remote.direct import DirectRead
from jetspark.remote.pull import Msg
from jetspark.remote.range_reader import (
    PULL_BATCH,
    Chunk,
    GetRead,
    RangeRead,
    count_from,
)
from jetspark.remote.retry import Retrier
from jetspark.remote.session import PROGRESS, Session


def _stream_info(session: Session, stream: str) -> StreamInfo:
    return session.run_retrying(lambda: jsapi.stream_info(session, stream), what=f"stream_info {stream!r}")


def _check_filters(subjects) -> Optional[list[str]]:
    if subjects is None:
        return None
    if isinstance(subjects, str):
        subjects = [subjects]
    out = list(subjects)
    for f in out:
        if not subj.is_valid(f):
            raise BadRequestError(400, BAD_REQUEST, f"invalid subject filter {f!r}")
    return out or None


def read_batches(
    session: Session,
    stream: str,
    start_seq: int,
    end_seq: Optional[int],
    *,
    subjects=None,
    batch_size: int = 65536,
    headers: bool = False,
) -> Iterator[pa.RecordBatch]:
    if batch_size <= 0:
        raise BadRequestError(400, BAD_REQUEST, f"batch_size must be positive, not {batch_size}")
    filters = _check_filters(subjects)
    info = _stream_info(session, stream)  # the stream must exist now; its last_seq bounds the read
    lo = max(int(start_seq or 1), info.state.first_seq, 1)
    hi = info.state.last_seq if end_seq is None else min(int(end_seq), info.state.last_seq)
    return _read_gen(session, info, lo, hi, filters, batch_size, headers)


def range_reader(
    session: Session, info: StreamInfo, lo: int, hi: int, filters, *, replies: bool, headers_only: bool = False
):
    """The reader for a range of ``info``'s stream: an ephemeral consumer (range_reader.RangeRead,
    its chunks with each delivery's reply subject if ``replies``); on a work-queue stream,
    which takes none, batched direct gets where the stream allows them (direct.DirectRead),
    plain gets otherwise (range_reader.GetRead)."""
    name = info.config.name
    if name is None:  # (the server names the stream in every stream info)
        raise JetSparkError(f"a stream info without the stream's name: {info.config!r}")
    if info.config.retention == RetentionPolicy.WORK_QUEUE:
        if info.config.allow_direct:
            return DirectRead(session, name, lo, hi, filters)
        return GetRead(session, name, lo, hi, filters)
    return RangeRead(session, name, lo, hi, filters, replies=replies, headers_only=headers_only)


def _read_gen(session, info, lo, hi, filters, batch_size, headers) -> Iterator[pa.RecordBatch]:
    if lo > hi:
        return
    stream = info.config.name
    reader = range_reader(session, info, lo, hi, filters, replies=False)
    for chunk in _chunks(session, reader, batch_size, f"read_batches of {stream!r}"):
        yield _to_batch(stream, chunk, headers)


def _chunks(session: Session, reader, batch_size: int, what: str) -> Generator[Chunk, None, None]:
    """A range reader's chunks until the range is read; the reader is closed at the end, also
    when the caller stops early.

    Through a leader election or a lost node (the reader's consumer placed on a node that
    is gone, its pulls unanswered) the read goes on where the last chunk ended, on a
    fresh consumer (``reader.resume``), within the session's retry budget."""
    retrier = Retrier(session.retry_budget, what)
    try:
        session.run_retrying(reader.open, what=what)
        resume = False
        while True:
            try:
                if resume:
                    session.run(reader.resume(), what=what)
                    resume = False
                chunk = session.run(reader.next_chunk(batch_size), what=what, timeout=PROGRESS)
            except JetSparkError as err:
                retrier.failed(err)
                resume = True
                continue
            retrier.succeeded()
            if not chunk:
                return
            yield chunk
    finally:
        if not session.closed:
            try:
                session.run(reader.close(), what=what, settle=False)
            except JetSparkError:
                pass


def _binary(values: list[bytes], type_: pa.DataType) -> pa.Array:
    """A binary/string Arrow array from Python bytes, without pa.array (which imports pandas)."""
    n = len(values)
    offsets = np.zeros(n + 1, dtype=np.int64)
    if n:
        np.cumsum(np.fromiter(map(len, values), dtype=np.int64, count=n), out=offsets[1:])
    body = pa.py_buffer(b"".join(values))
    if offsets[-1] < (1 << 31) - 1:
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(offsets.astype(np.int32)), body])
    large = pa.large_binary() if type_ == pa.binary() else pa.large_string()
    return pa.Array.from_buffers(large, n, [None, pa.py_buffer(offsets), body]).cast(type_)


def _repeated(value: bytes, n: int) -> pa.Array:
    """A string column of ``value`` ``n`` times (its buffers made directly: pyarrow's ``take``
    of a one-row array costs ~10 ns a row)."""
    if len(value) * n >= (1 << 31) - 1:
        return _binary([value], pa.string()).take(from_numpy(pa.int32(), np.zeros(n, dtype=np.int32)))
    offsets = np.arange(0, (n + 1) * len(value), len(value), dtype=np.int32) if value else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(value * n)])


def from_numpy(type_: pa.DataType, values: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def _column(offsets: np.ndarray, body: bytes, type_: pa.DataType) -> pa.Array:
    """A binary/string Arrow array from joined bytes and their offsets."""
    n = len(offsets) - 1
    if offsets[-1] < (1 << 31) - 1:
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(body)])
    large = pa.large_binary() if type_ == pa.binary() else pa.large_string()
    return pa.Array.from_buffers(large, n, [None, pa.py_buffer(offsets), pa.py_buffer(body)]).cast(type_)


def _frames_to_batch(stream: str, chunk: FrameChunk, headers: bool) -> pa.RecordBatch:
    """A range read's chunk of frames into Arrow: its spans joined straight into column buffers."""
    n = len(chunk)
    columns = [
        _repeated(stream.encode(), n),
        _column(*chunk.column("subject"), pa.string()),
        from_numpy(pa.int64(), chunk.seq_array),
        from_numpy(pa.timestamp("us", tz="UTC"), chunk.time_array // 1000),
        _column(*chunk.column("data"), pa.binary()),
    ]
    if headers:
        rows = [list(H.decode_multi(h).items()) if h else None for h in chunk.headers]
        columns.append(
            pa.array(rows, type=HEADERS_TYPE) if any(r is not None for r in rows) else pa.nulls(n, HEADERS_TYPE)
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema(headers))


def _to_batch(stream: str, chunk: Chunk, headers: bool) -> pa.RecordBatch:
    if isinstance(chunk, FrameChunk):
        return _frames_to_batch(stream, chunk, headers)
    n = len(chunk)
    seqs = np.array(chunk.seqs, dtype=np.int64)
    ts = np.array(chunk.times, dtype=np.int64)
    uniq: dict[bytes, int] = {}
    ids = np.fromiter((uniq.setdefault(s, len(uniq)) for s in chunk.subjects), dtype=np.int32, count=n)
    columns = [
        _repeated(stream.encode(), n),
        _binary(list(uniq), pa.string()).take(from_numpy(pa.int32(), ids)),
        from_numpy(pa.int64(), seqs),
        from_numpy(pa.timestamp("us", tz="UTC"), ts // 1000),
        _binary(chunk.datas, pa.binary()),
    ]
    if headers:
        rows = [list(H.decode_multi(h).items()) if h else None for h in chunk.headers]
        columns.append(
            pa.array(rows, type=HEADERS_TYPE) if any(r is not None for r in rows) else pa.nulls(n, HEADERS_TYPE)
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema(headers))


# ====================================================================== ordered_consumer


def ordered_consumer(session: Session, stream: str, subjects, start_seq, end_seq, batch_size: int) -> Iterator[Msg]:
    filters = _check_filters(subjects)
    info = _stream_info(session, stream)
    lo = max(int(start_seq or 1), info.state.first_seq, 1)
    hi = info.state.last_seq if end_seq is None else min(int(end_seq), info.state.last_seq)
    return _ordered_gen(session, info, lo, hi, filters, max(int(batch_size), 1))


def _ordered_gen(session, info, lo, hi, filters, batch_size) -> Iterator[Msg]:
    if lo > hi:
        return
    stream = info.config.name
    what = f"ordered_consumer on {stream!r}"
    total = 0

    def count(reader) -> None:
        # num_pending counts down the messages in the range.  A reader consumer knows how
        # many it matches from lo on; less what lies past hi.  A work-queue stream, read with
        # gets (direct.DirectRead, range_reader.GetRead), has no consumer to ask: a first pass counts them.
        # Asked once the first chunk is in: on a cluster a reader consumer placed on a lagging
        # replica can say 0 at first, and the read then opens another one at lo (EndCheck).
        nonlocal total
        if not isinstance(reader, RangeRead):
            total = sum(
                len(c)
                for c in _chunks(session, range_reader(session, info, lo, hi, filters, replies=False), batch_size, what)
            )
        else:
            beyond = hi < info.state.last_seq and reader.pending_at_start
            after = (
                session.run_retrying(lambda: count_from(session, stream, hi + 1, filters), what=what) if beyond else 0
            )
            total = reader.pending_at_start - after

    cseq = 0
    reader = range_reader(session, info, lo, hi, filters, replies=True)
    for chunk in _chunks(session, reader, batch_size, what):
        if not cseq:
            count(reader)
        replies = chunk.replies or [b""] * len(chunk)  # gets have no delivery subjects
        for subject, data, reply, hdr, sseq, ts in zip(
            chunk.subjects, chunk.datas, replies, chunk.headers, chunk.seqs, chunk.times
        ):
            cseq += 1
            meta = (stream, "", 1, sseq, cseq, ts, max(total - cseq, 0), None)
            yield Msg(None, subject.decode(), data, H.decode(hdr) if hdr else None, reply.decode(), meta)


# ====================================================================== seq_for_time / seq_for_bytes


def seq_for_time(session: Session, stream: str, when) -> int:
    ns = datetime_to_ns(when) if isinstance(when, _dt.datetime) else int(when)
    subject = session.stream_subject("MSG.GET", stream)

    async def find() -> int:
        try:
            resp = await session.api(subject, {"start_time": wire.rfc3339_ns(ns)}, what=f"seq_for_time on {stream!r}")
            return int(resp["message"]["seq"])
        except MsgNotFoundError:
            info = await jsapi.stream_info(session, stream)
            return info.state.last_seq + 1

    return session.run_retrying(find, what=f"seq_for_time on {stream!r}", timeout=2 * session.timeout)


def _msg_size(storage: StorageType, subject: bytes, hdr_len: int, data_len: int) -> int:
    """A message's bytes as the server accounts them (file: 22 + subject + 4 + headers + data + 8)."""
    s = len(subject)
    if storage == StorageType.MEMORY:
        return s + hdr_len + data_len + 16
    return 22 + s + (4 + hdr_len if hdr_len else 0) + data_len + 8


def _headers_only_sizes(hdr: Optional[bytes]) -> tuple[int, int]:
    """(stored header bytes, payload bytes) of a headers-only delivery, whose block is the
    stored headers plus a ``Nats-Msg-Size`` line."""
    if not hdr:
        return 0, 0
    size = int(H.lookup(hdr, "Nats-Msg-Size") or 0)
    n = len(hdr) - len(b"Nats-Msg-Size: %d\r\n" % size)
    return (0 if n <= len(b"NATS/1.0\r\n\r\n") else n), size


def seq_for_bytes(session: Session, stream: str, lo: int, hi: int, max_bytes: int) -> int:
    info = _stream_info(session, stream)
    st = info.state
    lo = max(int(lo), st.first_seq)
    hi = min(int(hi), st.last_seq)
    if lo >= hi:
        return max(hi, lo) if lo <= st.last_seq else hi
    if lo <= st.first_seq and hi >= st.last_seq and st.bytes <= max_bytes:
        return hi
    storage = info.config.storage or StorageType.FILE
    reader = range_reader(session, info, lo, hi, None, replies=False, headers_only=True)
    what = f"seq_for_bytes on {stream!r}"
    total = 0
    with closing(_chunks(session, reader, PULL_BATCH, what)) as chunks:
        for chunk in chunks:
            for subject, data, hdr, seq in zip(chunk.subjects, chunk.datas, chunk.headers, chunk.seqs):
                sizes = _headers_only_sizes(hdr) if reader.headers_only else (len(hdr or b""), len(data))
                total += _msg_size(storage, subject, *sizes)
                if total > max_bytes:
                    return max(seq - 1, lo)
    return hi
