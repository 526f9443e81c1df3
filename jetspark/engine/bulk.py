"""Bulk paths for Spark: range reads into Arrow, Arrow batch appends, time -> sequence.

A range read never touches messages one by one in Python: per block it
reads the index entries for the range with one ``pread``, the payload bytes
with another, and hands Arrow an offsets buffer computed with NumPy plus the
payload bytes as they lie on disk (payloads are stored back to back, so the
``data`` column needs no gather).  Removed sequences and subject filters are
applied with one Arrow ``filter``.  Memory stays bounded by the batch size.
"""

from __future__ import annotations

import datetime as _dt
from typing import Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jetspark import validate as V
from jetspark.api import BatchAck, DiscardPolicy, RetentionPolicy, datetime_to_ns
from jetspark.engine.records import SID_NONE, msgid_hash, runs_of, template_crcs
from jetspark.engine.stream import Stream, last_id_key
from jetspark.err_codes import BAD_REQUEST, STREAM_MESSAGE_EXCEEDS_MAXIMUM, STREAM_SEALED
from jetspark.errors import BadRequestError, add_note, api_error
from jetspark.protocol import headers as H
from jetspark.protocol import msg_ids
from jetspark.protocol import subjects as subj
from jetspark.protocol.arrow import HEADERS_TYPE, schema

# Keep each batch's payload bytes well inside Arrow's 32-bit binary offsets.
MAX_BATCH_BYTES = 64 << 20


# ---------------------------------------------------------------------- reading


def subject_mask(stream: Stream, filters: Optional[Sequence[str]]) -> Optional[np.ndarray]:
    """A boolean array over subject ids: which subjects pass the filters (None = all)."""
    if not filters or ">" in filters:
        return None
    names = stream.storage.subjects
    mask = np.zeros(len(names) + 1, dtype=bool)
    for i, name in enumerate(names):
        if subj.matches_any(filters, name):
            mask[i] = True
    return mask


def read_batches(
    stream: Stream,
    start_seq: int,
    end_seq: Optional[int] = None,
    subjects: Optional[Sequence[str]] = None,
    batch_size: int = 65536,
    headers: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Stored messages with start_seq <= seq <= end_seq, in sequence order, as Arrow batches.

    The arguments come checked (HandleBase.read_batches); the range is fixed when this is
    called, as on the nats:// backend: without ``end_seq`` the read stops at the last
    sequence of that moment (tests/contract/test_bulk.py)."""
    stream.refresh()
    lo, hi = clamp(stream, start_seq, end_seq)
    return _read_range(stream, lo, hi, subjects, batch_size, headers)


def clamp(stream: Stream, start_seq: Optional[int], end_seq: Optional[int]) -> tuple[int, int]:
    """start_seq..end_seq within what the stream holds (lo > hi: nothing)."""
    s = stream.storage
    lo = max(int(start_seq or 1), s.header.first_seq)
    hi = s.header.last_seq if end_seq is None else min(int(end_seq), s.header.last_seq)
    return lo, hi


def count_range(stream: Stream, lo: int, hi: int, subjects: Optional[Sequence[str]]) -> int:
    """How many stored messages in lo..hi match ``subjects``: from the index and the removed
    sequences alone, no payload read."""
    s = stream.storage
    mask = subject_mask(stream, subjects)
    n = 0
    for _blk, a, b in s.block_spans(lo, hi):
        for seq in range(a, b + 1, 1 << 16):
            end = min(b, seq + (1 << 16) - 1)
            keep = _kept(s, s.entries(seq, end)["sid"], seq, end, mask)
            n += int(keep.sum())
    return n


def _kept(s, sids: np.ndarray, a: int, b: int, mask: Optional[np.ndarray]) -> np.ndarray:
    """Which of sequences a..b are stored and match the subject mask (None: all subjects)."""
    keep = ~s.dead_mask(a, b) & (sids != SID_NONE)
    if mask is not None:
        safe = np.where(sids == SID_NONE, len(mask) - 1, np.minimum(sids, len(mask) - 1)).astype(np.int64)
        keep &= mask[safe]
    return keep


def _read_range(stream: Stream, lo: int, hi: int, subjects, batch_size: int, headers: bool) -> Iterator[pa.RecordBatch]:
    if lo > hi:
        return
    s = stream.storage
    mask = subject_mask(stream, subjects)
    names = _strings(s.subjects)
    name = stream.name
    for blk, a, b in s.block_spans(lo, hi):
        seq = a
        while seq <= b:
            end = min(b, seq + batch_size - 1)
            e = s.entries(seq, end)
            # Shrink the batch if its payloads would be too many bytes.
            span = e["doff"] + e["dlen"] - e["doff"][0]
            if int(span[-1]) > MAX_BATCH_BYTES:
                k = max(1, int(np.searchsorted(span, MAX_BATCH_BYTES, side="right")))
                e = e[:k]
                end = seq + k - 1
            batch = _batch(stream, blk, e, seq, end, mask, names, name, headers)
            if batch is not None and batch.num_rows:
                yield batch
            seq = end + 1
        if len(names) != len(s.subjects):
            names = _strings(s.subjects)


def _batch(stream, blk, e, a, b, mask, names, name, headers) -> Optional[pa.RecordBatch]:
    s = stream.storage
    sids = e["sid"]
    keep = _kept(s, sids, a, b, mask)
    n_keep = int(keep.sum())
    if n_keep == 0:
        return None
    n = len(e)
    d0 = int(e["doff"][0])
    # Payloads are back to back: offsets from the lengths (verify checks each record at its own offset).
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(e["dlen"], out=offsets[1:])
    raw = blk.read_data(d0, int(offsets[n]))
    s.verify(blk, a, b, raw, e)
    data = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])
    # Columns from NumPy buffers directly (pa.array() on NumPy would import pandas).
    ids = np.where(sids == SID_NONE, 0, sids).astype(np.int32)
    subject = names.take(_from_numpy(pa.int32(), ids))
    seqs = _from_numpy(pa.int64(), np.arange(a, b + 1, dtype=np.int64))
    ts = _from_numpy(pa.timestamp("us", tz="UTC"), e["ts"] // 1000)
    columns = [subject, seqs, ts, data]
    if headers:
        columns.append(_headers_column(s, blk, e))
    if n_keep != n:
        flt = _bool_array(keep)
        columns = [c.filter(flt) for c in columns]
    stream_col = _repeat_string(name, n_keep)
    return pa.RecordBatch.from_arrays([stream_col, *columns], schema=schema(headers))


def _from_numpy(type_: pa.DataType, values: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def _repeat_string(value: str, n: int) -> pa.Array:
    b = value.encode()
    offsets = np.arange(0, (n + 1) * len(b), len(b) or 1, dtype=np.int32)[: n + 1] if b else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b * n)])


def _strings(values: list[str]) -> pa.Array:
    encoded = [v.encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return pa.Array.from_buffers(
        pa.string(), len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )


def _bool_array(mask: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(np.packbits(mask, bitorder="little"))])


def _headers_column(s, blk, e) -> pa.Array:
    hlen = e["hlen"]
    if not hlen.any():
        return pa.nulls(len(e), HEADERS_TYPE)
    h0 = int(e["hoff"][0])
    raw = blk.read_hdrs(h0, int(e["hoff"][-1]) + int(e["hlen"][-1]) - h0)
    out = []
    for off, n in zip((e["hoff"] - h0).tolist(), hlen.tolist()):
        out.append(list(H.decode_multi(raw[off : off + n]).items()) if n else None)
    return pa.array(out, type=HEADERS_TYPE)


def seq_for_bytes(stream: Stream, lo: int, hi: int, max_bytes: int) -> int:
    stream.refresh()
    s = stream.storage
    lo = max(lo, s.header.first_seq)
    hi = min(hi, s.header.last_seq)
    if lo >= hi:
        return max(hi, lo) if lo <= s.header.last_seq else hi
    total, seq = 0, lo
    step = 1 << 16
    while seq <= hi:
        end = min(hi, seq + step - 1)
        e = s.entries(seq, end)
        sizes = np.where(~s.dead_mask(seq, end) & (e["sid"] != SID_NONE), s.sizes(e), 0)
        cum = total + np.cumsum(sizes)
        k = int(np.searchsorted(cum, max_bytes, side="right"))
        if k < len(cum):
            return max(seq + k - 1, lo)
        total = int(cum[-1])
        seq = end + 1
    return hi


def seq_for_time(stream: Stream, when) -> int:
    """The first sequence stored at or after ``when`` (datetime or ns); last_seq + 1 if none."""
    stream.refresh()
    ns = datetime_to_ns(when) if isinstance(when, _dt.datetime) else int(when)
    seq = stream.seq_at_time(ns)
    # seq_at_time searches every entry's time, removed ones too (their times stay in
    # order); the answer is the first one still stored, as the server's (test_bulk.py).
    s = stream.storage
    while seq <= s.header.last_seq:
        end = min(s.header.last_seq, seq + 4095)
        dead = s.dead_mask(seq, end)
        if not dead.all():
            return seq + int(np.argmin(dead))
        seq = end + 1
    return seq


# ---------------------------------------------------------------------- appending


def _column(table: pa.Table, name: str) -> Optional[pa.ChunkedArray]:
    if name not in table.column_names:
        return None
    col = table.column(name)
    return None if col.null_count == len(col) else col


def publish_batch(
    stream: Stream, table: pa.Table, msg_id_prefix: Optional[str] = None, msg_id_start: int = 0
) -> BatchAck:
    """Append every row as one publish would, all or nothing.

    ``table`` is checked by ``jetspark.validate.batch_table`` (subject string, data binary).
    Every row's subject must be one the stream captures, on every path.
    With ``msg_id_prefix``, row i carries the Nats-Msg-Id ``f"{msg_id_prefix}{msg_id_start + i}"``
    and the batch is deduplicated as a range (one record, not one per row).
    """
    c = stream.config
    subjects = table.column("subject")
    data = table.column("data")
    hdr_col = _column(table, "headers")
    id_col = _column(table, "msg_id")
    n = table.num_rows
    if n == 0:
        return BatchAck(stream.name, pa.array([], pa.int64()), pa.array([], pa.bool_()))
    if msg_id_prefix is not None:
        if hdr_col is not None or c.retention == RetentionPolicy.INTEREST or c.discard == DiscardPolicy.NEW:
            ids = pa.array([f"{msg_id_prefix}{msg_id_start + i}" for i in range(n)], pa.string())
            return _publish_rows(stream, subjects, data, hdr_col, ids)
        return _publish_fast(stream, subjects, data, id_range=(msg_id_prefix, int(msg_id_start)))
    # A null msg_id means "no id" for its row, which only the row path can say.
    partial_ids = id_col is not None and id_col.null_count > 0
    if hdr_col is not None or partial_ids or c.retention == RetentionPolicy.INTEREST or c.discard == DiscardPolicy.NEW:
        return _publish_rows(stream, subjects, data, hdr_col, id_col)
    return _publish_fast(stream, subjects, data, id_col)


def _publish_rows(stream, subjects, data, hdr_col, id_col) -> BatchAck:
    """Rows with headers, ids, interest retention or discard new: the single-publish rules, row by row."""
    subj_list = subjects.to_pylist()
    data_list = data.to_pylist()
    hdr_list = hdr_col.to_pylist() if hdr_col is not None else None
    id_list = id_col.to_pylist() if id_col is not None else None
    # Every row's headers are checked before the first is stored.
    blocks = []
    for i in range(len(subj_list)):
        headers = V.row_headers(hdr_list[i], i) if hdr_list else {}
        msg_id = V.row_msg_id(id_list[i], i) if id_list else None
        if msg_id is not None:
            headers[H.MSG_ID] = msg_id
        blocks.append(H.encode(headers))
    seqs, dups = [], []
    with stream.locked():
        c = stream.config
        V.batch_subjects(subjects, c.subjects or [c.name], c.name)
        for i, subject in enumerate(subj_list):
            try:
                ack = stream._publish_locked(subject, data_list[i] or b"", blocks[i])
            except Exception as exc:
                add_note(exc, f"row {i} of the batch was refused; nothing from the batch was stored")
                raise
            seqs.append(ack.seq)
            dups.append(bool(ack.duplicate))
    return BatchAck(stream.name, pa.array(seqs, pa.int64()), pa.array(dups, pa.bool_()))


def _publish_fast(stream, subjects, data, id_col=None, id_range=None) -> BatchAck:
    """Limits retention, discard old, no headers (ids allowed): one write per file for the batch."""
    s, c = stream.storage, stream.config
    subjects = subjects.combine_chunks() if isinstance(subjects, pa.ChunkedArray) else subjects
    data = data.combine_chunks() if isinstance(data, pa.ChunkedArray) else data
    if data.null_count:
        data = data.fill_null(b"")
    lens = pc.binary_length(data).to_numpy(zero_copy_only=False).astype(np.int64)
    if c.max_msg_size > 0 and (lens > c.max_msg_size).any():
        row = int(np.flatnonzero(lens > c.max_msg_size)[0])
        err = api_error(STREAM_MESSAGE_EXCEEDS_MAXIMUM)
        add_note(
            err, f"row {row} of the batch is {lens[row]} bytes; max_msg_size is {c.max_msg_size}; nothing was stored"
        )
        raise err
    offsets = np.frombuffer(data.buffers()[1], dtype=np.int32, count=len(data) + 1, offset=data.offset * 4)
    payload = data.buffers()[2]
    buf = memoryview(payload) if payload is not None else memoryview(b"")
    base = int(offsets[0])
    data_offsets = (offsets - base).astype(np.int64)
    body = buf[base : int(offsets[-1])]
    ids = [V.row_msg_id(m, i) for i, m in enumerate(id_col.to_pylist())] if id_col is not None else None
    n = len(data)
    with stream.locked():
        c = stream.config
        if c.sealed:
            raise api_error(STREAM_SEALED)
        uniq, idx = V.batch_subjects(subjects, c.subjects or [c.name], c.name)
        keep = None
        hdr, hdr_offsets = b"", np.zeros(n + 1, dtype=np.int64)
        hdr_crcs = None
        if id_range is not None:
            keep, dup_seq, hdr, hdr_offsets, hdr_crcs = _dedup_range(stream, id_range, n)
            hashes = None
        if ids is not None:
            keep, dup_seq, hashes, hdr, hdr_offsets = _dedup_rows(stream, ids)
        if keep is not None:
            if c.max_msg_size > 0:
                hl = np.diff(hdr_offsets)
                bad = (hl > c.max_msg_size) | (hl + lens[keep] > c.max_msg_size)
                if bad.any():
                    err = api_error(STREAM_MESSAGE_EXCEEDS_MAXIMUM)
                    add_note(err, "a row's Nats-Msg-Id header makes it larger than max_msg_size; nothing was stored")
                    raise err
        sid_of = np.array([s.subject_id(u) for u in uniq], dtype=np.uint32)
        sids = sid_of[idx]
        ts = stream.now()
        if keep is None:
            first = s.append_many(sids, body, data_offsets, hdr, hdr_offsets, ts)
            seqs = np.arange(first, first + n, dtype=np.int64)
            dup = np.zeros(n, dtype=bool)
        else:
            k_sids = sids[keep]
            k_body, k_offsets = _gather(body, data_offsets, keep)
            seqs = dup_seq.copy()
            if len(k_sids):
                first = s.append_many(k_sids, k_body, k_offsets, hdr, hdr_offsets, ts, hdr_crcs)
                new = np.arange(first, first + len(k_sids), dtype=np.int64)
                seqs[keep] = new
                # Rows repeating an id of this same batch point at its first row's sequence.
                inner = dup_seq < 0
                seqs[inner & ~keep] = seqs[-dup_seq[inner & ~keep] - 1]
                kept_rows = np.flatnonzero(keep)
                if hashes is not None:
                    s.add_dedup_many([hashes[i] for i in kept_rows], new, ts)
                    assert ids is not None  # (hashes are the ids')
                    last_id = ids[int(kept_rows[-1])]
                    assert last_id is not None  # a batch with null ids takes the row path (publish_batch)
                    s.header.last_id = _id_bytes(last_id)
                else:
                    prefix, start = id_range
                    ph = msgid_hash(prefix)
                    for a, b in runs_of(kept_rows):  # consecutive rows were stored at consecutive seqs
                        s.add_range(ph, start + a, start + b, int(seqs[a]), ts)
                    s.header.last_id = _id_bytes(f"{prefix}{start + int(kept_rows[-1])}")
                s.compact_journals(stream.clock(), int(c.duplicate_window * 1_000_000_000))
            dup = ~keep
        stream.enforce_limits()
    return BatchAck(c.name, _from_numpy(pa.int64(), seqs.astype(np.int64)), _bool_array(dup))


def _dedup_range(stream: Stream, id_range: tuple[str, int], n: int):
    """Rows of a generated-id batch that are new: overlaps with recorded ranges (and, if
    any single ids are remembered, those) are duplicates; their header blocks, built by Arrow."""
    prefix, start = id_range
    window = _window_ns(stream)
    now = stream.clock()
    keep = np.ones(n, dtype=bool)
    dup_seq = np.zeros(n, dtype=np.int64)
    for first, last, seq, ts in stream.storage.ensure_ranges(now, window).get(msgid_hash(prefix), ()):
        if now - ts >= window:
            continue
        a, b = max(first, start), min(last, start + n - 1)
        if a <= b:
            keep[a - start : b - start + 1] = False
            dup_seq[a - start : b - start + 1] = np.arange(seq + a - first, seq + b - first + 1)
    known = stream.storage.ensure_dedup(now, window)
    if known:
        for i in np.flatnonzero(keep).tolist():
            hit = known.get(msgid_hash(f"{prefix}{start + i}"))
            if hit is not None and now - hit[1] < window:
                keep[i], dup_seq[i] = False, hit[0]
    hdr, offsets, crcs = id_header_blocks(prefix, np.flatnonzero(keep) + start)
    return keep, dup_seq, hdr, offsets, crcs


def id_header_blocks(prefix: str, numbers: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The Nats-Msg-Id header blocks of ``numbers`` (protocol.msg_ids.blocks), their
    offsets, and each block's CRC-32 from the digits (records.template_crcs)."""
    crcs: list[np.ndarray] = []
    blocks, offsets = msg_ids.blocks(
        prefix, numbers, lambda head, tail, digits: crcs.append(template_crcs(head, tail, digits))
    )
    return blocks, offsets, (np.concatenate(crcs) if crcs else np.zeros(0, dtype=np.uint32))


def _window_ns(stream: Stream) -> int:
    """The stream's duplicate window in ns (a stored config always has one: config.py's defaults)."""
    window = stream.config.duplicate_window
    assert window is not None
    return int(window * 1_000_000_000)


def _id_bytes(msg_id: str) -> bytes:
    return last_id_key(msg_id)


def _dedup_rows(stream: Stream, ids: list):
    """Which rows are new (by Nats-Msg-Id, within the window and within the batch), their
    id hashes, and their header blocks back to back."""
    window = _window_ns(stream)
    now = stream.clock()
    known = stream.storage.ensure_dedup(now, window)
    n = len(ids)
    keep = np.ones(n, dtype=bool)
    dup_seq = np.zeros(n, dtype=np.int64)  # original seq, or -(first row index + 1) within the batch
    hashes = []
    seen: dict[bytes, int] = {}
    blocks = []
    for i, msg_id in enumerate(ids):
        if not msg_id:
            raise BadRequestError(400, BAD_REQUEST, f"row {i} of the batch has an empty msg_id")
        h = msgid_hash(msg_id)
        hashes.append(h)
        hit = known.get(h)
        if hit is not None and now - hit[1] < window:
            keep[i] = False
            dup_seq[i] = hit[0]
        elif h in seen:
            keep[i] = False
            dup_seq[i] = -(seen[h] + 1)
        else:
            seen[h] = i
            blocks.append(b"NATS/1.0\r\nNats-Msg-Id: " + msg_id.encode() + b"\r\n\r\n")
    lens = np.fromiter(map(len, blocks), dtype=np.int64, count=len(blocks))
    offsets = np.zeros(len(blocks) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    return keep, dup_seq, hashes, b"".join(blocks), offsets


def _gather(body, offsets: np.ndarray, keep: np.ndarray):
    """The kept rows' payloads back to back, and their offsets."""
    if keep.all():
        return body, offsets
    arr = pa.Array.from_buffers(
        pa.binary(), len(keep), [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(body)]
    )
    kept = arr.filter(pa.array(keep))
    o = np.frombuffer(kept.buffers()[1], dtype=np.int32, count=len(kept) + 1).astype(np.int64)
    data = kept.buffers()[2]
    return (memoryview(data)[o[0] : o[-1]] if data is not None else memoryview(b"")), o - o[0]
