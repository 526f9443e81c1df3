"""``publish_batch``: append an Arrow table as pipelined publishes, awaiting every PubAck.

The protocol lines of the rows are built in bulk (``protocol.pub_lines``: a chunk's
lines written as one byte array from the table's Arrow buffers, or their pieces joined
where rows have header blocks of their own) and each chunk written with one call
(``fastpath.raw_writer``), each row with its own reply subject under one wildcard inbox;
up to ``publish_window`` PubAcks are in flight and all are awaited, read a run at a time
(``protocol.pubacks``; what that leaves, one by one).  Rows are checked first as the engine checks them (captured
subjects, max_msg_size, sealed), so the common refusals store nothing; what
the server refuses later raises with a note naming the row.
"""

from __future__ import annotations

import asyncio
import json
from typing import Optional

import numpy as np
import pyarrow as pa

from jetspark import validate as V
from jetspark.api import BatchAck, PubAck
from jetspark.err_codes import STREAM_MESSAGE_EXCEEDS_MAXIMUM, STREAM_SEALED
from jetspark.errors import (
    APIError,
    JetSparkError,
    NoStreamResponseError,
    add_note,
    api_error,
    error_from_response,
)
from jetspark.protocol import headers as H
from jetspark.protocol.ack_frames import stand_down, stand_in
from jetspark.protocol.pub_lines import PubBatch, join_rows
from jetspark.protocol.pubacks import read_pubacks
from jetspark.remote import jsapi
from jetspark.remote.fastpath import FrameInbox, frame_feed, raw_writer, status_of
from jetspark.remote.reads import from_numpy
from jetspark.remote.retry import TRANSIENT_ERR_CODES, Retrier
from jetspark.remote.session import PROGRESS, Session

# Rows per protocol write (at most CHUNK_BYTES of payloads and headers, and at least one row),
# and rows whose lines' pieces are built at once where ``PubBatch.lines`` cannot build a chunk
# (bounds on the memory they take besides the table's).
PUBLISH_CHUNK = 4096
CHUNK_BYTES = 2 << 20
PIECES_ROWS = 4 * PUBLISH_CHUNK


def publish_batch(
    session: Session, table: pa.Table, stream: str, msg_ids: Optional[tuple[str, int]] = None
) -> BatchAck:
    """``table`` as ``jetspark.validate.batch_table`` returns it (subject string, data binary);
    ``msg_ids=(prefix, start)``: row i gets the Nats-Msg-Id ``f"{prefix}{start + i}"``."""
    n = table.num_rows
    subjects = table.column("subject")
    info = session.run_retrying(lambda: jsapi.stream_info(session, stream), what=f"stream_info {stream!r}")
    c = info.config
    if n == 0:
        return BatchAck(c.name, pa.array([], pa.int64()), pa.array([], pa.bool_()))
    if c.sealed:
        raise api_error(STREAM_SEALED)
    uniq, ids = V.batch_subjects(subjects, c.subjects or [c.name], c.name)
    hdr_col = table.column("headers") if "headers" in table.column_names else None
    id_col = table.column("msg_id") if "msg_id" in table.column_names else None
    hdr_list = hdr_col.to_pylist() if hdr_col is not None and hdr_col.null_count < n else None
    batch = PubBatch([u.encode() for u in uniq], ids, table.column("data"))
    if hdr_list is None and msg_ids is not None:
        batch.generated_ids(msg_ids[0].encode(), msg_ids[1])  # the Spark sink's case
    elif hdr_list is None and id_col is not None and (plain := _plain_ids(id_col)) is not None:
        batch.msg_ids(plain)  # every row's msg_id as it is (the common case, checked in bulk)
    elif hdr_list is not None or (id_col is not None and id_col.null_count < n):
        id_list = id_col.to_pylist() if id_col is not None else None
        blocks = []
        for i in range(n):
            h = V.row_headers(hdr_list[i], i) if hdr_list else {}
            if id_list:
                msg_id = V.row_msg_id(id_list[i], i)
            else:
                msg_id = None if msg_ids is None else f"{msg_ids[0]}{msg_ids[1] + i}"
            if msg_id is not None:
                h[H.MSG_ID] = msg_id
            blocks.append(H.encode(h) if h else b"")
        batch.header_blocks(blocks)
    max_payload = session.max_payload
    lens = batch.dlen + batch.hlen
    for limit, what in ((c.max_msg_size or -1, "max_msg_size"), (max_payload or -1, "the server's max_payload")):
        if limit > 0 and (lens > limit).any():
            row = int(np.flatnonzero(lens > limit)[0])
            err = api_error(STREAM_MESSAGE_EXCEEDS_MAXIMUM)
            add_note(err, f"row {row} of the batch is {int(lens[row])} bytes; {what} is {limit}; nothing was stored")
            raise err
    acks = _Acks(n)
    what = f"publish_batch of {n} rows to {stream!r}"
    # Through a leader election: rows the server certainly did not store (no stream leader
    # answered, a "try again" err_code) are sent again; rows left unanswered only when every
    # row carries a msg id, which the stream deduplicates (jetspark.remote.retry).
    with_ids = msg_ids is not None or (id_col is not None and id_col.null_count == 0)
    retrier = Retrier(session.retry_budget, what, idempotent=with_ids)
    while True:
        before = int(acks.done.sum())
        try:
            session.run(_publish_rows(session, batch, acks), what=what, timeout=PROGRESS)
            if acks.done.all():
                break
            raise acks.why_not_done()
        except JetSparkError as err:
            if int(acks.done.sum()) > before:
                retrier.succeeded()  # progress: the next failure gets a budget of its own
            try:
                # No responders for rows whose subjects the stream takes: its leader is gone.
                retrier.failed(err, also=lambda e: isinstance(e, NoStreamResponseError))
            except JetSparkError as final:
                if not acks.noted:
                    add_note(
                        final,
                        f"{int(acks.done.sum())} of {n} rows were stored (see the error's batch_ack); "
                        "the others are unknown or not stored",
                    )
                final.batch_ack = BatchAck(  # type: ignore[attr-defined]
                    c.name, from_numpy(pa.int64(), acks.seqs), pa.array(acks.dups.tolist(), pa.bool_())
                )
                raise
    seqs, dups = acks.seqs, acks.dups
    return BatchAck(
        c.name, from_numpy(pa.int64(), seqs), pa.array(dups.tolist(), pa.bool_()) if dups.any() else _false(n)
    )


def _plain_ids(col: pa.ChunkedArray) -> Optional[pa.Array]:
    """The ``msg_id`` column (a string array, its ids read in place by ``PubBatch.msg_ids``) when
    every id is what ``validate.row_msg_id`` accepts and the header codec writes unchanged: not
    null, not empty, no CR or LF, and a printable ASCII byte at each end (nothing for
    ``str.strip`` to take); else None, and the rows are checked one by one (the same errors
    as ever)."""
    if col.null_count:
        return None
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_string(arr.type):
        arr = arr.cast(pa.string())
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
    lo, hi = offsets[:-1], offsets[1:]
    if not (hi > lo).all():
        return None
    body = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[int(offsets[0]) : int(offsets[-1])]
    if (body == 13).any() or (body == 10).any():
        return None
    ends = np.concatenate([body[lo - offsets[0]], body[hi - 1 - offsets[0]]])
    if ((ends < 0x21) | (ends > 0x7E)).any():
        return None
    return arr


class _Acks:
    """What the server acknowledged of a batch so far, row by row, across attempts."""

    def __init__(self, n: int) -> None:
        self.seqs = np.zeros(n, dtype=np.int64)
        self.dups = np.zeros(n, dtype=bool)
        self.done = np.zeros(n, dtype=bool)
        self.refusal: Optional[JetSparkError] = None  # the last "not stored, try again" answer
        self.noted = False  # the error raised already says how many rows were stored

    def why_not_done(self) -> JetSparkError:
        """Why rows are left not done after ``_publish_rows`` returned: a row it sent that was
        neither stored nor refused for good was answered "try again", which it notes here."""
        assert self.refusal is not None
        return self.refusal


def _false(n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(np.zeros((n + 7) // 8, dtype=np.uint8))])


async def _publish_rows(session: Session, batch: PubBatch, acks: _Acks) -> None:
    """Publish every row ``acks`` does not hold yet, with reply subject ``<inbox>.<row>``, up to
    publish_window in flight, and collect their PubAcks into ``acks``.  Raises the error of
    the first row refused for good; a row refused as "not stored, try again" (no responders,
    TRANSIENT_ERR_CODES) stops the sending, stays not done, and is ``acks.refusal``."""
    nc = await session.ready()
    n = batch.n
    todo = np.flatnonzero(~acks.done)
    m = len(todo)
    seqs, dups, done = acks.seqs, acks.dups, acks.done
    answered = np.zeros(n, dtype=bool)
    inbox_subject = nc.new_inbox()
    prefix = inbox_subject.encode() + b"."
    slen = len(prefix)
    inbox = await FrameInbox(public=session.public_path).open(nc, inbox_subject + ".*")
    window = session.options.publish_window
    write = raw_writer(nc, public=session.public_path)
    sent = got = 0
    first_error: Optional[tuple[int, JetSparkError]] = None
    acks.refusal = None
    timeout = session.timeout
    # The lines' pieces of up to PIECES_ROWS rows at a time, built at once; each chunk joins its slice.
    pieces: list = []
    lo = hi = 0
    upto = np.cumsum(batch.dlen[todo] + batch.hlen[todo])  # (the bytes of rows todo[:k + 1])
    template = None  # the stream's PubAck up to its seq, learnt from the first run (protocol.pubacks)
    # While the PubAcks come, the connection's frames go through protocol.ack_frames, which frames
    # runs of PubAcks by their shape and any other frame as before (the reader of fastpath's FrameFeed,
    # which fastpath.Client puts in place of nats-py's parser).
    feed = frame_feed(nc) if inbox.fast else None
    framer = stand_in(feed) if feed is not None else None
    try:
        while got < sent or (sent < m and first_error is None and acks.refusal is None):
            # Write as much as the window allows, one protocol write per chunk of rows.
            while sent < m and first_error is None and acks.refusal is None and sent - got < window:
                end = min(m, sent + PUBLISH_CHUNK, got + window)
                if int(upto[end - 1]) - (int(upto[sent - 1]) if sent else 0) > CHUNK_BYTES:
                    limit = (int(upto[sent - 1]) if sent else 0) + CHUNK_BYTES
                    end = max(sent + 1, int(np.searchsorted(upto, limit, side="right")))
                if not nc.is_connected:
                    await session.ready(timeout)
                if write is not None:
                    chunk = batch.lines(todo[sent:end], prefix) if sent >= hi else None
                    if chunk is None:  # (rows with header blocks of their own, payloads of many lengths)
                        if sent >= hi:
                            lo, hi = sent, min(m, sent + PIECES_ROWS)
                            pieces = batch.pieces(todo[lo:hi], prefix)
                        end = min(end, hi)
                        chunk = join_rows([p[sent - lo : end - lo] for p in pieces], end - sent)
                    await asyncio.wait_for(write(chunk), timeout)
                else:  # nats-py's public API: one publish per row
                    for i in todo[sent:end].tolist():
                        block = batch.block(i)
                        hdrs = H.decode(block) if block else None
                        data = batch.datas[i]
                        await nc.publish(batch.subject(i).decode(), data, reply=f"{inbox_subject}.{i}", headers=hdrs)
                sent = end
            if got >= sent:
                continue
            try:
                runs = await inbox.take(timeout)
            except asyncio.TimeoutError as exc:
                raise session.silence(f"PubAcks of publish_batch ({sent - got} outstanding)", timeout) from exc
            for buf, f in runs:
                at, rows_, seq, dup, plain, template = read_pubacks(buf, f, slen, n, template)
                new = ~answered[rows_]
                # (a row answered twice counts once: the first answer stands)
                fast = new & plain
                idx = rows_[fast]
                seqs[idx], dups[idx], done[idx], answered[idx] = seq[fast], dup[fast], True, True
                got += int(fast.sum())
                for k in np.flatnonzero(new & ~plain).tolist():
                    i = int(rows_[k])
                    if answered[i]:
                        continue
                    answered[i] = True
                    got += 1
                    d = buf[f.data_lo[at[k]] : f.data_hi[at[k]]]
                    hdr = buf[f.hdr_lo[at[k]] : f.data_lo[at[k]]]
                    err = _slow_puback(i, d, hdr, batch.subject(i), seqs, dups, done, acks)
                    if err is not None and (first_error is None or i < first_error[0]):
                        first_error = (i, err)
    finally:
        if framer is not None:
            stand_down(feed, framer)
        await inbox.close()
    if first_error is not None:
        row, refused = first_error
        stored = int(done.sum())
        add_note(
            refused, f"row {row} of the batch was refused; {stored} of {n} rows were stored, {m - sent} were not sent"
        )
        acks.noted = True
        raise refused


def _slow_puback(
    i: int, d: bytes, hdr: bytes, subject: bytes, seqs, dups, done, acks: _Acks
) -> Optional[JetSparkError]:
    """A PubAck the array reading left (an error, a status, another layout): the row's
    outcome recorded; the error that refuses it for good, if any."""
    j = d.find(b'"seq":')
    if j >= 0 and b'"error"' not in d:
        j += 6
        k = d.find(b",", j)
        if k < 0:
            k = d.find(b"}", j)
        seqs[i] = int(d[j:k])
        done[i] = True
        if b'"duplicate":' in d and (b'"duplicate": true' in d or b'"duplicate":true' in d):
            dups[i] = True
        return None
    if hdr and (status_of(hdr) or (b"",))[0] == b"503":
        if acks.refusal is None:  # (the rows were checked against the stream's subjects: its leader is gone)
            acks.refusal = NoStreamResponseError(subject.decode())
        return None
    if b'"error"' in d:
        err = error_from_response(json.loads(d)["error"])
        if isinstance(err, APIError) and err.err_code in TRANSIENT_ERR_CODES:
            if acks.refusal is None:
                acks.refusal = err
            return None
        return err
    return JetSparkError(f"unexpected PubAck for row {i}: {d[:200]!r}")


async def publish_one_raw(session: Session, subject: str, payload: bytes, hdr: bytes) -> PubAck:
    """One publish with a ready header block (repeated keys, which nats-py's header dict
    cannot say), awaiting its PubAck."""
    acks = _Acks(1)
    batch = PubBatch([subject.encode()], np.zeros(1, dtype=np.int64), [payload])
    if hdr:
        batch.header_blocks([hdr])
    await _publish_rows(session, batch, acks)
    if not acks.done[0]:
        raise acks.why_not_done()
    streams = await jsapi.streams_with_subject(session, subject)
    return PubAck(stream=streams[0] if streams else "", seq=int(acks.seqs[0]), duplicate=True if acks.dups[0] else None)
