"""The bulk paths of the nats:// backend, built for throughput.

- ``read_batches``: an ephemeral pull consumer (ack none, in-memory, R1,
  deliver by_start_sequence, the subject filters) drained with two large
  pull requests in flight; messages are taken off nats-py's subscription
  queue in bulk (no per-message future or task, as ``fetch`` costs) and
  turned into Arrow columns with the engine's exact schema.  It stops at
  ``end_seq``, at the stream's last sequence when called, or when the
  server says nothing matches after the last message (``num_pending`` 0).
  Consumer sequences are checked for gaps; a gap or a consumer that went
  away restarts the read after the last sequence received.
- ``publish_batch``: the protocol lines for a whole chunk of rows are built
  at once and written with one call, each row with its own reply subject
  under one wildcard inbox; up to ``publish_window`` PubAcks are in flight
  and all are awaited.  Rows are checked first as the engine checks them
  (captured subjects, max_msg_size, sealed), so the common refusals store
  nothing; what the server refuses later raises with a note naming the row.
- ``seq_for_time``: the server's get-message-by-time (``start_time``).
- ``seq_for_bytes``: a headers-only ephemeral consumer over the range,
  adding up each message's size as the server accounts it.
- ``advance_ack_floor``: fetch exactly the durable's matching messages up
  to ``seq`` and acknowledge them (the last of each pull under ack policy
  all); the count comes from ``num_pending`` of the durable and of a
  throw-away consumer starting after ``seq``.
- Work-queue streams allow no second consumer over a durable's subjects:
  ``read_batches`` and ``seq_for_bytes`` read them with plain gets
  (``_GetRead``), and ``advance_ack_floor`` bounds its pulls by the
  sequence span instead of counting.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import datetime as _dt
import json
import logging
import math
from typing import TYPE_CHECKING, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa
from nats.nuid import NUID

from jetspark import validate as V
from jetspark.api import AckPolicy, RetentionPolicy, StorageType, datetime_to_ns
from jetspark.protocol import headers as H
from jetspark.protocol import subjects as subj
from jetspark.api import BatchAck
from jetspark.protocol.arrow import HEADERS_TYPE, schema
from jetspark.errors import (
    BadRequestError,
    JetSparkError,
    MsgNotFoundError,
    NoStreamResponseError,
    ServerConnectionError,
    StreamNotFoundError,
    api_error,
    error_from_response,
)
from jetspark.remote import wire
from jetspark.remote.inbox import RawInbox, status_of
from jetspark.remote.pull import Msg

if TYPE_CHECKING:
    from jetspark.remote.client import NatsJetStream

log = logging.getLogger("jetspark.remote")

# Pull requests of a range read: this many messages (or bytes) each, two in flight.
PULL_BATCH = 16384
PULL_MAX_BYTES = 16 << 20
PULLS_IN_FLIGHT = 2
# A range read's consumer disappears this long after the reader stops pulling
# (a reader that died, or an iterator abandoned without close()).
READER_INACTIVE = 120.0
# Sequences asked for at once by a read without a consumer (_GetRead).
GET_WINDOW = 256
# Rows per protocol write in publish_batch.
PUBLISH_CHUNK = 1024
# Keep each Arrow batch's payload bytes well inside 32-bit offsets.
MAX_BATCH_BYTES = 64 << 20

# Calls whose length grows with the data are bounded by progress instead: every wait
# inside them (a pull, a PubAck, a write) gives up after the handle's timeout.
PROGRESS = math.inf
_nuid = NUID()


def _name(prefix: str) -> str:
    return f"{prefix}{_nuid.next().decode()}"


# ====================================================================== pulling


class _Chunk:
    """Messages in stream order: subjects and payloads as bytes, header blocks as received
    (None without headers), stream sequences and times (ns), and the reply subjects of
    consumer deliveries (empty for a read without a consumer)."""

    __slots__ = ("subjects", "datas", "headers", "seqs", "times", "replies")

    def __init__(self) -> None:
        self.subjects: list[bytes] = []
        self.datas: list[bytes] = []
        self.headers: list[Optional[bytes]] = []
        self.seqs: list[int] = []
        self.times: list[int] = []
        self.replies: list[bytes] = []

    def __len__(self) -> int:
        return len(self.seqs)


def _reply_offset(reply: bytes) -> int:
    """Index of the stream token in a delivery's reply subject: 2 (v1, 9 tokens) or 4 (v2)."""
    n = reply.count(b".") + 1
    if n == 9:
        return 2
    if n >= 11:
        return 4
    raise JetSparkError(f"not a JetStream delivery reply subject: {reply[:200]!r}")


class _Puller:
    """Pipelined pull requests on one consumer, taken in bulk off the wire (``RawInbox``).

    Ends when a delivery reaches stream sequence ``hi``, when ``limit``
    messages have come, when a delivery says nothing more matches
    (num_pending 0), or when the server says it has nothing (404) and a
    consumer_info confirms it.  Messages past ``hi`` are dropped.
    Every request carries max_bytes, so the server ends each one with a
    status (409 "Batch Completed" once it is served, 404 when nothing is
    left); requests are matched to statuses in order.  Runs on the
    handle's event loop.
    """

    def __init__(self, js: "NatsJetStream", stream: str, consumer: str, hi: int, *, limit: Optional[int] = None,
                 pull_batch: Optional[int] = None, in_flight: int = PULLS_IN_FLIGHT, keep_headers: bool = False,
                 next_cseq: Optional[int] = None, eager: bool = True) -> None:  # fmt: skip
        self.js = js
        self.stream = stream
        self.consumer = consumer
        self.hi = hi
        self.limit = limit
        self.pull_batch = pull_batch or PULL_BATCH
        self.in_flight = in_flight
        self.keep_headers = keep_headers
        self.next_cseq = next_cseq  # consumer sequences must follow each other (ack none, no redeliveries)
        self.eager = eager  # open the next request as soon as one is served (else: at the next next_chunk)
        self.received = 0
        self.last_sseq = 0
        self.done = False
        self.gap = False
        self.off: Optional[int] = None
        self._requests: collections.deque[int] = collections.deque()  # messages each open request may still bring
        self._served = 0  # requests served in full whose closing status has not come yet
        self._inbox: Optional[RawInbox] = None
        self._inbox_subject = ""
        self._subject = f"{js._api}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._max_bytes = PULL_MAX_BYTES
        self._buf: list = []
        self._pos = 0

    async def start(self) -> None:
        nc = await self.js._ready_nc(self.js.timeout)
        self._max_bytes = max(PULL_MAX_BYTES, 2 * int(getattr(nc, "max_payload", 0) or 0) + 65536)
        self._inbox_subject = nc.new_inbox()
        self._inbox = await RawInbox(force_queue=self.js._no_fast_path).open(nc, self._inbox_subject)
        await self._top_up()

    async def close(self) -> None:
        if self._inbox is not None:
            inbox, self._inbox = self._inbox, None
            await inbox.close()

    async def _top_up(self) -> None:
        """Keep up to ``in_flight`` pull requests open, never asking past what is left."""
        while not self.done and len(self._requests) < self.in_flight:
            # At most hi - last_sseq messages can still be in range (and limit - received).
            left = self.hi - max(self.last_sseq, 0)
            if self.limit is not None:
                left = min(left, self.limit - self.received)
            if left <= 0:
                return
            want = min(self.pull_batch, left - sum(self._requests))
            if want <= 0:
                if self._requests:
                    return
                want = 1
            req = {"batch": int(want), "no_wait": True, "max_bytes": self._max_bytes}
            await asyncio.wait_for(self.js._nc.publish(self._subject, json.dumps(req).encode(), reply=self._inbox_subject), self.js.timeout)
            self._requests.append(int(want))

    async def next_chunk(self, max_msgs: int, max_bytes: int = MAX_BATCH_BYTES) -> _Chunk:
        """Up to ``max_msgs`` messages (fewer only at the end); empty once the pull is done."""
        out = _Chunk()
        subjects, datas, replies, headers, seqs, times = out.subjects, out.datas, out.replies, out.headers, out.seqs, out.times
        keep_headers = self.keep_headers
        nbytes = 0
        n = 0
        timeout = self.js.timeout
        buf, pos = self._buf, self._pos
        try:
            while not self.done and n < max_msgs and nbytes < max_bytes:
                if pos >= len(buf):
                    if not self._requests or not self.eager:
                        await self._top_up()
                        if not self._requests:
                            self.done = True  # nothing more can be in range
                            break
                    try:
                        buf, pos = await self._inbox.take(timeout), 0
                    except asyncio.TimeoutError:
                        buf, pos = [], 0
                        raise self.js._silence(f"the messages of consumer {self.consumer!r} on stream {self.stream!r}", timeout) from None
                subject, reply, data, hdr = buf[pos]
                pos += 1
                if not reply:
                    await self._status(hdr)
                    continue
                if self.off is None:
                    self.off = _reply_offset(reply)
                t = reply.split(b".")
                o = self.off
                sseq = int(t[o + 3])
                if self.next_cseq is not None:
                    cseq = int(t[o + 4])
                    if cseq != self.next_cseq:
                        if cseq < self.next_cseq:
                            continue  # a repeat of something already received
                        self.gap = True  # lost deliveries: restart after last_sseq
                        self.done = True
                        break
                    self.next_cseq = cseq + 1
                served = False
                if self._requests:
                    self._requests[0] -= 1
                    if self._requests[0] <= 0:
                        self._requests.popleft()
                        self._served += 1
                        served = True
                if sseq > self.hi:
                    self.done = True
                    break
                subjects.append(subject)
                datas.append(data)
                replies.append(reply)
                seqs.append(sseq)
                times.append(int(t[o + 5]))
                if keep_headers:
                    headers.append(hdr)
                nbytes += len(data)
                n += 1
                self.last_sseq = sseq
                self.received += 1
                if sseq >= self.hi or t[o + 6] == b"0" or (self.limit is not None and self.received >= self.limit):
                    self.done = True
                elif served and self.eager:
                    await self._top_up()
        finally:
            self._buf, self._pos = buf, pos
        return out

    async def _status(self, hdr: Optional[bytes]) -> None:
        st = status_of(hdr)
        if st is None or st[0] == b"100":
            return  # idle heartbeat, or nothing we know
        status, desc = st[0], st[1].lower()
        if status == b"409" and b"batch completed" in desc and self._served:
            self._served -= 1  # the closing word of a request already served in full
            return
        if self._requests:
            self._requests.popleft()
        if status == b"409" and b"deleted" in desc or status == b"503":
            self.gap = True  # the consumer went away: the caller restarts after last_sseq
            self.done = True
        elif status in (b"404", b"408"):
            await self._confirm_end()
        elif self.eager:
            await self._top_up()

    async def _confirm_end(self) -> None:
        """The server had nothing for a request: finished, unless deliveries are still on their way."""
        from jetspark.errors import ConsumerNotFoundError

        try:
            info = await self.js._aconsumer_info(self.stream, self.consumer)
        except ConsumerNotFoundError:
            self.gap = True
            self.done = True
            return
        if info.num_pending == 0 and (self.next_cseq is None or info.delivered.consumer_seq < self.next_cseq):
            self.done = True
        elif self.eager:
            await self._top_up()


async def _create_reader_consumer(js: "NatsJetStream", stream: str, start: int, filters: Optional[Sequence[str]], *, headers_only: bool = False) -> tuple[str, int]:
    """An ephemeral, ack-less, in-memory R1 pull consumer from ``start``; (name, num_pending)."""
    name = _name("jspk_")
    config: dict = {
        "name": name,
        "deliver_policy": "by_start_sequence",
        "opt_start_seq": max(int(start), 1),
        "ack_policy": "none",
        "replay_policy": "instant",
        "inactive_threshold": wire.s_to_ns(max(READER_INACTIVE, js.timeout * 4)),
        "mem_storage": True,
        "num_replicas": 1,
    }
    if headers_only:
        config["headers_only"] = True
    filters = [f for f in (filters or ()) if f != ">"] if filters and ">" not in filters else []
    if len(filters) == 1:
        config["filter_subject"] = filters[0]
    elif filters:
        config["filter_subjects"] = list(filters)
    resp = await js._areq(f"{js._api}.CONSUMER.CREATE.{stream}.{name}", {"stream_name": stream, "config": config, "action": "create"},
                          what=f"creating a reader consumer on {stream!r}")  # fmt: skip
    return name, int(resp.get("num_pending", 0))


async def _delete_consumer_quietly(js: "NatsJetStream", stream: str, name: str) -> None:
    """Delete a reader's consumer, waiting for the answer but not failing (its inactive_threshold
    removes it anyway)."""
    try:
        nc = js._nc
        if nc.is_connected:
            await nc.request(f"{js._api}.CONSUMER.DELETE.{stream}.{name}", b"", timeout=js.timeout)
    except Exception:
        pass


async def _count_from(js: "NatsJetStream", stream: str, start: int, filters: Optional[Sequence[str]]) -> int:
    """How many stored messages at or after ``start`` match ``filters`` (a throw-away consumer's num_pending)."""
    name, pending = await _create_reader_consumer(js, stream, start, filters, headers_only=True)
    await _delete_consumer_quietly(js, stream, name)
    return pending


class _RangeRead:
    """One range read: creates its consumer, pulls, restarts after a gap, deletes the consumer."""

    def __init__(self, js: "NatsJetStream", stream: str, lo: int, hi: int, filters, *, keep_headers: bool, headers_only: bool = False) -> None:
        self.js = js
        self.stream = stream
        self.lo = lo
        self.hi = hi
        self.filters = filters
        self.keep_headers = keep_headers
        self.headers_only = headers_only
        self.consumer: Optional[str] = None
        self.puller: Optional[_Puller] = None
        self.pending_at_start = 0
        self.restarts = 0

    async def open(self, start: Optional[int] = None) -> None:
        start = self.lo if start is None else start
        self.consumer, pending = await _create_reader_consumer(self.js, self.stream, start, self.filters, headers_only=self.headers_only)
        if start == self.lo:
            self.pending_at_start = pending
        self.puller = _Puller(self.js, self.stream, self.consumer, self.hi, keep_headers=self.keep_headers, next_cseq=1)
        self.puller.last_sseq = start - 1  # a restart before any delivery resumes here, not at lo
        if pending == 0:
            self.puller.done = True
            return
        await self.puller.start()

    async def next_chunk(self, max_msgs: int) -> _Chunk:
        while True:
            chunk = await self.puller.next_chunk(max_msgs)
            if len(chunk) or not self.puller.done:
                if self.puller.gap and self.puller.done:
                    await self._restart()
                return chunk
            if not self.puller.gap:
                return chunk
            await self._restart()

    async def _restart(self) -> None:
        last = self.puller.last_sseq
        self.restarts += 1
        if self.restarts > 20:
            raise JetSparkError(f"range read of stream {self.stream!r} keeps losing deliveries (slow consumer?); last sequence read {last}")
        log.info("range read of %r: restarting after seq %d", self.stream, last)
        await self.puller.close()
        await _delete_consumer_quietly(self.js, self.stream, self.consumer)
        start = max(last + 1, self.lo)
        if start > self.hi:
            self.puller.gap = False
            return
        await self.open(start)

    async def close(self) -> None:
        if self.puller is not None:
            await self.puller.close()
        if self.consumer is not None:
            await _delete_consumer_quietly(self.js, self.stream, self.consumer)
            self.consumer = None


class _GetRead:
    """A range read without a consumer: one STREAM.MSG.GET per sequence, ``GET_WINDOW`` in flight.

    For work-queue streams, where the server allows no second consumer over the subjects
    a durable already covers, and none without acks (10084): the connector reads a
    micro-batch's range this way while its durable consumer takes the acks.  Sequences
    that are gone (acknowledged, deleted) answer "no message found" and are skipped;
    subject filters are applied here.
    """

    headers_only = False

    def __init__(self, js: "NatsJetStream", stream: str, lo: int, hi: int, filters) -> None:
        self.js = js
        self.stream = stream
        self.next = lo
        self.hi = hi
        self.filters = filters
        self._subject = js._stream_subject("MSG.GET", stream)

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def _get(self, seq: int) -> Optional[dict]:
        try:
            return (await self.js._areq(self._subject, {"seq": seq}, what=f"reading stream {self.stream!r}"))["message"]
        except MsgNotFoundError:
            return None

    async def next_chunk(self, max_msgs: int) -> _Chunk:
        out = _Chunk()
        while len(out) < max_msgs and self.next <= self.hi:
            top = min(self.hi, self.next + min(GET_WINDOW, max_msgs - len(out)) - 1)
            got = await asyncio.gather(*(self._get(seq) for seq in range(self.next, top + 1)))
            self.next = top + 1
            for m in got:
                if m is None or (self.filters and not subj.matches_any(self.filters, m["subject"])):
                    continue
                out.subjects.append(m["subject"].encode())
                out.datas.append(base64.b64decode(m["data"]) if m.get("data") else b"")
                out.headers.append(base64.b64decode(m["hdrs"]) if m.get("hdrs") else None)
                out.seqs.append(int(m["seq"]))
                out.times.append(wire.time_to_ns(m["time"]))
        return out


def _range_reader(js: "NatsJetStream", info, lo: int, hi: int, filters, *, keep_headers: bool, headers_only: bool = False):
    """The reader for a range of ``info``'s stream: an ephemeral consumer, or plain gets on a work-queue stream."""
    if info.config.retention == RetentionPolicy.WORK_QUEUE:
        return _GetRead(js, info.config.name, lo, hi, filters)
    return _RangeRead(js, info.config.name, lo, hi, filters, keep_headers=keep_headers, headers_only=headers_only)


# ====================================================================== read_batches


def _check_filters(subjects) -> Optional[list[str]]:
    if subjects is None:
        return None
    if isinstance(subjects, str):
        subjects = [subjects]
    out = list(subjects)
    for f in out:
        if not subj.is_valid(f):
            raise BadRequestError(400, 10003, f"invalid subject filter {f!r}")
    return out or None


def read_batches(js: "NatsJetStream", stream: str, start_seq: int, end_seq: Optional[int], *, subjects=None, batch_size: int = 65536, headers: bool = False) -> Iterator[pa.RecordBatch]:
    if batch_size <= 0:
        raise BadRequestError(400, 10003, f"batch_size must be positive, not {batch_size}")
    filters = _check_filters(subjects)
    info = js.stream_info(stream)  # the stream must exist now; its last_seq bounds the read
    lo = max(int(start_seq or 1), info.state.first_seq, 1)
    hi = info.state.last_seq if end_seq is None else min(int(end_seq), info.state.last_seq)
    return _read_gen(js, info, lo, hi, filters, batch_size, headers)


def _read_gen(js, info, lo, hi, filters, batch_size, headers) -> Iterator[pa.RecordBatch]:
    if lo > hi:
        return
    stream = info.config.name
    reader = _range_reader(js, info, lo, hi, filters, keep_headers=headers)
    what = f"read_batches of {stream!r}"
    try:
        js._run(reader.open(), what=what)
        while True:
            chunk = js._run(reader.next_chunk(batch_size), what=what, timeout=PROGRESS)
            if not len(chunk):
                break
            yield _to_batch(stream, chunk, headers)
    finally:
        if not js._closed:
            try:
                js._run(reader.close(), what=what, settle=False)
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


def _from_numpy(type_: pa.DataType, values: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def _to_batch(stream: str, chunk: _Chunk, headers: bool) -> pa.RecordBatch:
    n = len(chunk)
    seqs = np.array(chunk.seqs, dtype=np.int64)
    ts = np.array(chunk.times, dtype=np.int64)
    uniq: dict[bytes, int] = {}
    ids = np.fromiter((uniq.setdefault(s, len(uniq)) for s in chunk.subjects), dtype=np.int32, count=n)
    columns = [
        _binary([stream.encode()], pa.string()).take(_from_numpy(pa.int32(), np.zeros(n, dtype=np.int32))),
        _binary(list(uniq), pa.string()).take(_from_numpy(pa.int32(), ids)),
        _from_numpy(pa.int64(), seqs),
        _from_numpy(pa.timestamp("us", tz="UTC"), ts // 1000),
        _binary(chunk.datas, pa.binary()),
    ]
    if headers:
        rows = [list(H.decode_multi(h).items()) if h else None for h in chunk.headers]
        columns.append(pa.array(rows, type=HEADERS_TYPE) if any(r is not None for r in rows) else pa.nulls(n, HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=schema(headers))


# ====================================================================== ordered_consumer


def ordered_consumer(js: "NatsJetStream", stream: str, subjects, start_seq, end_seq, batch_size: int) -> Iterator[Msg]:
    filters = _check_filters(subjects)
    state = js.stream_info(stream).state
    lo = max(int(start_seq or 1), state.first_seq, 1)
    hi = state.last_seq if end_seq is None else min(int(end_seq), state.last_seq)
    return _ordered_gen(js, stream, lo, hi, filters, max(int(batch_size), 1), state.last_seq)


def _ordered_gen(js, stream, lo, hi, filters, batch_size, last_seq) -> Iterator[Msg]:
    if lo > hi:
        return
    reader = _RangeRead(js, stream, lo, hi, filters, keep_headers=True)
    what = f"ordered_consumer on {stream!r}"
    try:
        js._run(reader.open(), what=what)
        after = js._run(_count_from(js, stream, hi + 1, filters), what=what) if hi < last_seq and reader.pending_at_start else 0
        total = reader.pending_at_start - after
        cseq = 0
        while True:
            chunk = js._run(reader.next_chunk(batch_size), what=what, timeout=PROGRESS)
            if not len(chunk):
                break
            for subject, data, reply, hdr, sseq, ts in zip(chunk.subjects, chunk.datas, chunk.replies, chunk.headers, chunk.seqs, chunk.times):
                cseq += 1
                meta = (stream, "", 1, sseq, cseq, ts, max(total - cseq, 0), None)
                yield Msg(None, subject.decode(), data, H.decode(hdr) if hdr else None, reply.decode(), meta)
    finally:
        if not js._closed:
            try:
                js._run(reader.close(), what=what, settle=False)
            except JetSparkError:
                pass


# ====================================================================== seq_for_time / seq_for_bytes


def seq_for_time(js: "NatsJetStream", stream: str, when) -> int:
    ns = datetime_to_ns(when) if isinstance(when, _dt.datetime) else int(when)
    subject = js._stream_subject("MSG.GET", stream)

    async def find() -> int:
        try:
            resp = await js._areq(subject, {"start_time": wire.rfc3339_ns(ns)}, what=f"seq_for_time on {stream!r}")
            return int(resp["message"]["seq"])
        except MsgNotFoundError:
            info = await js._astream_info(js._stream_subject("INFO", stream))
            return info.state.last_seq + 1

    return js._run(find(), what=f"seq_for_time on {stream!r}", timeout=2 * js.timeout)


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


def seq_for_bytes(js: "NatsJetStream", stream: str, lo: int, hi: int, max_bytes: int) -> int:
    info = js.stream_info(stream)
    st = info.state
    lo = max(int(lo), st.first_seq)
    hi = min(int(hi), st.last_seq)
    if lo >= hi:
        return max(hi, lo) if lo <= st.last_seq else hi
    if lo <= st.first_seq and hi >= st.last_seq and st.bytes <= max_bytes:
        return hi
    storage = info.config.storage or StorageType.FILE
    reader = _range_reader(js, info, lo, hi, None, keep_headers=True, headers_only=True)
    what = f"seq_for_bytes on {stream!r}"
    total = 0
    try:
        js._run(reader.open(), what=what)
        while True:
            chunk = js._run(reader.next_chunk(PULL_BATCH), what=what, timeout=PROGRESS)
            if not len(chunk):
                return hi
            for subject, data, hdr, seq in zip(chunk.subjects, chunk.datas, chunk.headers, chunk.seqs):
                sizes = _headers_only_sizes(hdr) if reader.headers_only else (len(hdr or b""), len(data))
                total += _msg_size(storage, subject, *sizes)
                if total > max_bytes:
                    return max(seq - 1, lo)
    finally:
        try:
            js._run(reader.close(), what=what, settle=False)
        except JetSparkError:
            pass


# ====================================================================== advance_ack_floor


def advance_ack_floor(js: "NatsJetStream", stream: str, durable: str, seq: int):
    return js._run(_advance(js, stream, durable, seq), what=f"advance_ack_floor of {durable!r} on {stream!r}", timeout=PROGRESS)


async def _advance(js: "NatsJetStream", stream: str, durable: str, seq: int):
    from jetspark.api import SequenceInfo

    info = await js._aconsumer_info(stream, durable)
    cfg = info.config
    filters = cfg.filter_subjects or ([cfg.filter_subject] if cfg.filter_subject else None)
    policy = cfg.ack_policy or AckPolicy.EXPLICIT
    stall = 0
    for _ in range(1000):
        floor = info.ack_floor.stream_seq
        delivered = info.delivered.stream_seq
        if floor >= seq or delivered >= seq:
            break
        sinfo = await js._astream_info(js._stream_subject("INFO", stream))
        if seq >= sinfo.state.last_seq:
            count = info.num_pending
        elif sinfo.config.retention == RetentionPolicy.WORK_QUEUE:
            # A work-queue stream allows no counting consumer next to the durable: ask for
            # no more than (delivered, seq] can hold.  Where that span has gaps (deleted
            # messages, other subjects) a delivery past seq can come; it is handed back (NAK).
            count = min(info.num_pending, seq - delivered)
        else:
            count = info.num_pending - await _count_from(js, stream, seq + 1, filters)  # matching messages in (delivered, seq]
        if count <= 0:
            break
        got = await _fetch_and_ack(js, stream, durable, seq, count, policy, cfg.max_ack_pending)
        info = await js._aconsumer_info(stream, durable)
        if got == 0:
            stall += 1
            if stall >= 3:
                break
    return SequenceInfo(consumer_seq=info.ack_floor.consumer_seq, stream_seq=info.ack_floor.stream_seq)


async def _fetch_and_ack(js, stream: str, durable: str, seq: int, count: int, policy: AckPolicy, max_ack_pending: Optional[int]) -> int:
    """Pull ``count`` messages from the durable (one request in flight) and acknowledge those <= seq."""
    nc = await js._ready_nc(js.timeout)
    pull = PULL_BATCH if not max_ack_pending or max_ack_pending < 0 else max(1, min(PULL_BATCH, max_ack_pending))
    puller = _Puller(js, stream, durable, 1 << 62, limit=count, pull_batch=pull, in_flight=1, eager=False)
    await puller.start()
    got = 0
    try:
        while not puller.done:
            chunk = await puller.next_chunk(pull)
            if not len(chunk):
                break
            got += len(chunk)
            if policy == AckPolicy.NONE:
                continue
            mine = [r.decode() for r, s in zip(chunk.replies, chunk.seqs) if s <= seq]
            late = [r.decode() for r, s in zip(chunk.replies, chunk.seqs) if s > seq]
            if policy == AckPolicy.EXPLICIT:
                for r in mine[:-1]:
                    await nc.publish(r, b"+ACK")
            if mine:
                await _ack_request(js, nc, mine[-1], b"+ACK")
            for r in late:  # should not happen (the count stops at seq); hand them back at once
                await nc.publish(r, b"-NAK")
            if late:
                break
    finally:
        await puller.close()
    return got


async def _ack_request(js, nc, reply: str, payload: bytes) -> None:
    try:
        await nc.request(reply, payload, timeout=js.timeout)
    except Exception as exc:  # noqa: BLE001 - ack replies are best effort; consumer_info tells the truth
        if not nc.is_connected:
            raise ServerConnectionError(f"lost the connection to {js.url} while acknowledging") from exc


# ====================================================================== publish_batch


def publish_batch(js: "NatsJetStream", table: pa.Table, stream: Optional[str]) -> BatchAck:
    """``table`` as ``jetspark.validate.batch_table`` returns it (subject string, data binary)."""
    n = table.num_rows
    subjects = table.column("subject")
    if stream is None:
        if n == 0:
            raise BadRequestError(400, 10003, "publish_batch of an empty table needs stream=")
        first = subjects[0].as_py()
        if not subj.is_valid(first) or not V.publish_subject_ok(first):
            raise NoStreamResponseError(first)
        try:
            stream = js.find_stream_name_by_subject(first)
        except StreamNotFoundError:
            raise NoStreamResponseError(first) from None
    info = js.stream_info(stream)
    c = info.config
    if n == 0:
        return BatchAck(c.name, pa.array([], pa.int64()), pa.array([], pa.bool_()))
    if c.sealed:
        raise api_error(10109)
    uniq, ids = V.batch_subjects(subjects, c.subjects or [c.name], c.name)
    datas = [b if b is not None else b"" for b in table.column("data").to_pylist()]
    hdr_col = table.column("headers") if "headers" in table.column_names else None
    id_col = table.column("msg_id") if "msg_id" in table.column_names else None
    hdr_list = hdr_col.to_pylist() if hdr_col is not None and hdr_col.null_count < n else None
    id_list = id_col.to_pylist() if id_col is not None and id_col.null_count < n else None
    blocks: Optional[list[bytes]] = None
    if hdr_list is not None or id_list is not None:
        blocks = []
        for i in range(n):
            h = V.row_headers(hdr_list[i], i) if hdr_list else {}
            msg_id = V.row_msg_id(id_list[i], i) if id_list else None
            if msg_id is not None:
                h["Nats-Msg-Id"] = msg_id
            blocks.append(H.encode(h) if h else b"")
    max_payload = int(getattr(js._nc, "max_payload", 0) or 0)
    lens = np.fromiter(map(len, datas), dtype=np.int64, count=n)
    if blocks is not None:
        lens = lens + np.fromiter(map(len, blocks), dtype=np.int64, count=n)
    for limit, what in ((c.max_msg_size or -1, "max_msg_size"), (max_payload or -1, "the server's max_payload")):
        if limit > 0 and (lens > limit).any():
            row = int(np.flatnonzero(lens > limit)[0])
            err = api_error(10054)
            err.add_note(f"row {row} of the batch is {int(lens[row])} bytes; {what} is {limit}; nothing was stored")
            raise err
    subj_bytes = [u.encode() for u in uniq]
    rows = [subj_bytes[k] for k in ids.tolist()]
    seqs, dups = js._run(_publish_rows(js, rows, datas, blocks), what=f"publish_batch of {n} rows to {stream!r}", timeout=PROGRESS)
    return BatchAck(c.name, _from_numpy(pa.int64(), seqs), pa.array(dups.tolist(), pa.bool_()) if dups.any() else _false(n))


def _false(n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(np.zeros((n + 7) // 8, dtype=np.uint8))])


async def _publish_rows(js: "NatsJetStream", subjects: list[bytes], datas: list[bytes], blocks: Optional[list[bytes]]):
    """Publish every row with reply subject ``<inbox>.<row>``, up to publish_window in flight,
    and collect every PubAck: (seqs, duplicate flags), or the error of the first refused row."""
    nc = await js._ready_nc(js.timeout)
    n = len(datas)
    seqs = np.zeros(n, dtype=np.int64)
    dups = np.zeros(n, dtype=bool)
    done = np.zeros(n, dtype=bool)
    inbox_subject = nc.new_inbox()
    prefix = inbox_subject.encode() + b"."
    slen = len(prefix)
    inbox = await RawInbox(force_queue=js._no_fast_path).open(nc, inbox_subject + ".*")
    window = js.options.publish_window
    send = getattr(nc, "_send_command", None)
    flush = getattr(nc, "_flush_pending", None)
    sent = got = 0
    first_error: Optional[tuple[int, BaseException]] = None
    timeout = js.timeout
    try:
        while got < sent or (sent < n and first_error is None):
            # Write as much as the window allows, one protocol write per chunk of rows.
            while sent < n and first_error is None and sent - got < window:
                end = min(n, sent + PUBLISH_CHUNK, got + window)
                if not nc.is_connected:
                    await js._ready_nc(timeout)
                if send is not None and flush is not None:
                    parts = []
                    if blocks is None:
                        for i in range(sent, end):
                            d = datas[i]
                            parts.append(b"PUB %b %b%d %d\r\n%b\r\n" % (subjects[i], prefix, i, len(d), d))
                    else:
                        for i in range(sent, end):
                            d, h = datas[i], blocks[i]
                            if h:
                                parts.append(b"HPUB %b %b%d %d %d\r\n%b%b\r\n" % (subjects[i], prefix, i, len(h), len(h) + len(d), h, d))
                            else:
                                parts.append(b"PUB %b %b%d %d\r\n%b\r\n" % (subjects[i], prefix, i, len(d), d))
                    await asyncio.wait_for(send(b"".join(parts)), timeout)
                    await asyncio.wait_for(flush(), timeout)
                else:  # a nats-py without the internal hooks: one publish per row
                    for i in range(sent, end):
                        hdrs = H.decode(blocks[i]) if blocks is not None and blocks[i] else None
                        await nc.publish(subjects[i].decode(), datas[i], reply=f"{inbox_subject}.{i}", headers=hdrs)
                sent = end
            if got >= sent:
                continue
            try:
                items = await inbox.take(timeout)
            except asyncio.TimeoutError:
                raise js._silence(f"PubAcks of publish_batch ({sent - got} outstanding)", timeout) from None
            for subject, _reply, d, hdr in items:
                i = int(subject[slen:])
                if done[i]:
                    continue
                done[i] = True
                got += 1
                err: Optional[BaseException] = None
                j = d.find(b'"seq":')
                if j >= 0 and b'"error"' not in d:
                    j += 6
                    k = d.find(b",", j)
                    if k < 0:
                        k = d.find(b"}", j)
                    seqs[i] = int(d[j:k])
                    if b'"duplicate":' in d and (b'"duplicate": true' in d or b'"duplicate":true' in d):
                        dups[i] = True
                elif hdr and (status_of(hdr) or (b"",))[0] == b"503":
                    err = NoStreamResponseError(subjects[i].decode())
                elif b'"error"' in d:
                    err = error_from_response(json.loads(d)["error"])
                else:
                    err = JetSparkError(f"unexpected PubAck for row {i}: {d[:200]!r}")
                if err is not None and (first_error is None or i < first_error[0]):
                    first_error = (i, err)
    finally:
        await inbox.close()
    if first_error is not None:
        row, err = first_error
        stored = int((done & (seqs > 0)).sum())
        err.add_note(f"row {row} of the batch was refused; {stored} of {n} rows were stored, {n - sent} were not sent")
        raise err
    return seqs, dups


async def publish_one_raw(js: "NatsJetStream", nc, subject: str, payload: bytes, hdr: bytes):
    """One publish with a ready header block (repeated keys), awaiting its PubAck."""
    from jetspark.api import PubAck

    seqs, dups = await _publish_rows(js, [subject.encode()], [payload], [hdr])
    return PubAck(stream=await _stream_of(js, subject), seq=int(seqs[0]), duplicate=True if dups[0] else None)


async def _stream_of(js, subject: str) -> str:
    resp = await js._areq(f"{js._api}.STREAM.NAMES", {"subject": subject}, what="find_stream_name_by_subject")
    return (resp.get("streams") or [""])[0]
