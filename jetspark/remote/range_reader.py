"""Pulling a range of a stream off the server in bulk: the machinery under the range reads.

- ``Puller``: pipelined pull requests on one consumer, deliveries taken off
  the wire in bulk (``fastpath.FrameInbox``: runs of frames; as each arrives,
  its reply subjects read with array operations and its messages copied out
  of the received buffer, no Python object per message), consumer sequences
  checked for gaps.
- ``RangeRead``: an ephemeral, ack-less, in-memory consumer (R1 on a limits stream)
  (deliver by_start_sequence, the subject filters) drained by a ``Puller``;
  a gap or a consumer that went away restarts the read after the last
  sequence received.  It stops at ``hi``, or when the server says nothing
  matches after the last message (``num_pending`` 0).
- ``GetRead``: work-queue streams allow no second consumer over a durable's
  subjects, so their ranges are read with plain gets.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import logging
from typing import Any, Optional, Sequence

import numpy as np
from nats.nuid import NUID

from jetspark.errors import ConsumerNotFoundError, JetSparkError, MsgNotFoundError
from jetspark.protocol import frames as F
from jetspark.protocol import subjects as subj
from jetspark.protocol.deliveries import FrameChunk, Messages, ack_fields, compact
from jetspark.remote import jsapi, wire
from jetspark.remote.fastpath import FrameInbox, status_of
from jetspark.remote.session import Session

log = logging.getLogger("jetspark.remote")

# Pull requests of a range read: this many messages (or bytes) each, two in flight.
PULL_BATCH = 16384
PULL_MAX_BYTES = 16 << 20
PULLS_IN_FLIGHT = 2
# A range read's consumer disappears this long after the reader stops pulling
# (a reader that died, or an iterator abandoned without close()).
READER_INACTIVE = 120.0
# Sequences asked for at once by a read without a consumer (GetRead).
GET_WINDOW = 256
# Keep each Arrow batch's payload bytes well inside 32-bit offsets.
MAX_BATCH_BYTES = 64 << 20
_nuid = NUID()


def _name(prefix: str) -> str:
    return f"{prefix}{_nuid.next().decode()}"


class Chunk:
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


class _Run:
    """A run of frames as a Puller takes it: its messages copied out of their buffer
    (``compact``), which of them are deliveries (None: all), the deliveries' metadata
    (``ack_fields``, one row per delivery), the next one to take; or the error reading
    them raised."""

    __slots__ = ("msgs", "deliveries", "ack", "error", "pos", "_rows")

    def __init__(self, msgs: Messages, deliveries: Optional[np.ndarray], ack, error: Optional[Exception]) -> None:
        self.msgs, self.deliveries, self.ack, self.error = msgs, deliveries, ack, error
        self.pos = 0
        self._rows: Optional[np.ndarray] = None

    def stretch(self, pos: int) -> tuple[int, int]:
        """Where the deliveries from message ``pos`` on end (the next status, or the run's
        end), and the metadata row of message ``pos``."""
        if self.deliveries is None:
            return len(self.msgs), pos
        if self._rows is None:
            self._rows = np.cumsum(self.deliveries) - 1
        stat = np.flatnonzero(~self.deliveries[pos:])
        return pos + (int(stat[0]) if len(stat) else len(self.msgs) - pos), int(self._rows[pos])


class Puller:
    """Pipelined pull requests on one consumer, taken in bulk off the wire (``FrameInbox``).

    Ends when a delivery reaches stream sequence ``hi``, when ``limit``
    messages have come, when a delivery says nothing more matches
    (num_pending 0), or when the server says it has nothing (404) and a
    consumer_info confirms it.  Messages past ``hi`` are dropped.
    Every request carries max_bytes, so the server ends each one with a
    status (409 "Batch Completed" once it is served, 404 when nothing is
    left); requests are matched to statuses in order.  Runs on the
    handle's event loop.
    """

    def __init__(self, session: Session, stream: str, consumer: str, hi: int, *, limit: Optional[int] = None,
                 pull_batch: Optional[int] = None, in_flight: int = PULLS_IN_FLIGHT, replies: bool = True,
                 next_cseq: Optional[int] = None, eager: bool = True) -> None:  # fmt: skip
        self.session = session
        self.stream = stream
        self.consumer = consumer
        self.hi = hi
        self.limit = limit
        self.pull_batch = pull_batch or PULL_BATCH
        self.in_flight = in_flight
        self.replies = replies  # keep each delivery's reply subject in the chunks
        self.next_cseq = next_cseq  # consumer sequences must follow each other (ack none, no redeliveries)
        self.eager = eager  # open the next request as soon as one is served (else: at the next next_chunk)
        self.received = 0
        self.last_sseq = 0
        self.done = False
        self.gap = False
        self._requests: collections.deque[int] = collections.deque()  # messages each open request may still bring
        self._served = 0  # requests served in full whose closing status has not come yet
        self._inbox: Optional[FrameInbox] = None
        self._nc: Any = None
        self._inbox_subject = ""
        self._subject = f"{session.api_prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._max_bytes = PULL_MAX_BYTES
        self._runs: collections.deque[_Run] = collections.deque()
        self._skip = 0
        self._served_now = False

    async def start(self) -> None:
        self._nc = nc = await self.session.ready()
        self._max_bytes = max(PULL_MAX_BYTES, 2 * self.session.max_payload + 65536)
        self._inbox_subject = nc.new_inbox()
        self._inbox = await FrameInbox(public=self.session.public_path, prepare=self._prepare).open(
            nc, self._inbox_subject
        )
        await self._top_up()

    async def close(self) -> None:
        if self._inbox is not None:
            inbox, self._inbox = self._inbox, None
            await inbox.close()

    def _opened(self) -> FrameInbox:
        """The inbox ``start`` opened (a pull's answers are read only between start and close)."""
        if self._inbox is None:
            raise JetSparkError(f"the pulls of consumer {self.consumer!r} on stream {self.stream!r} are not started")
        return self._inbox

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
            await asyncio.wait_for(
                self._nc.publish(self._subject, json.dumps(req).encode(), reply=self._inbox_subject),
                self.session.timeout,
            )
            self._requests.append(int(want))

    def _prepare(self, buf: bytes, f: F.Frames) -> "_Run":
        """A run of frames as it arrives (``FrameInbox``'s ``prepare``, inside nats-py's read loop,
        the buffer still in the CPU's caches): its deliveries' reply subjects read, its messages
        copied out of the buffer (``compact``), which can then go."""
        deliveries = f.reply_hi > f.reply_lo  # (the others are statuses)
        every = bool(deliveries.all())
        try:
            ack = ack_fields(buf, f if every else f[deliveries])
        except JetSparkError as exc:  # (raised where the run is taken, not in the read loop)
            return _Run(compact(buf, f[:0]), None, None, exc)
        return _Run(compact(buf, f, replies=self.replies), None if every else deliveries, ack, None)

    async def next_chunk(self, max_msgs: int, max_bytes: int = MAX_BATCH_BYTES) -> FrameChunk:
        """Up to ``max_msgs`` messages (fewer only at the end); empty once the pull is done.

        Deliveries come as runs of frames (``fastpath.FrameInbox``), prepared as they arrive
        (``_prepare``) and taken here a stretch at a time with array operations; statuses
        (frames without a reply subject) one by one, in their place among the deliveries."""
        parts: list = []
        seqs: list = []
        times: list = []
        n = nbytes = 0
        timeout = self.session.timeout
        while not self.done and n < max_msgs and nbytes < max_bytes:
            if not self._runs:
                if not self._requests or not self.eager:
                    await self._top_up()
                    if not self._requests:
                        self.done = True  # nothing more can be in range
                        break
                try:
                    taken = await self._opened().take(timeout)
                except asyncio.TimeoutError as exc:
                    raise self.session.silence(
                        f"the messages of consumer {self.consumer!r} on stream {self.stream!r}", timeout
                    ) from exc
                self._runs.extend(taken)
                continue
            run = self._runs[0]
            if run.error is not None:
                self._runs.popleft()
                raise run.error
            msgs, pos = run.msgs, run.pos
            if pos >= len(msgs):
                self._runs.popleft()
                continue
            if run.deliveries is not None and not run.deliveries[pos]:
                run.pos = pos + 1
                await self._status(msgs.span("headers", pos) or None)
                continue
            end, i = run.stretch(pos)
            ack = run.ack
            k = self._take(ack, i, end - pos, max_msgs - n)
            if k:
                j = i + k
                part = msgs[pos : pos + k]
                parts.append(part)
                seqs.append(ack.sseq[i:j])
                times.append(ack.time[i:j])
                n += k
                nbytes += int(part.columns["data"][0][-1])
                self.last_sseq = int(ack.sseq[j - 1])
                self.received += k
                if self.next_cseq is not None:
                    self.next_cseq = int(ack.cseq[j - 1]) + 1
            run.pos = pos + k + self._skip
            if self._served_now and self.eager and not self.done:
                await self._top_up()
        if not parts:
            return FrameChunk([], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        return FrameChunk(parts, np.concatenate(seqs), np.concatenate(times))

    def _take(self, ack, i: int, avail: int, room: int) -> int:
        """How many of the deliveries ``ack[i:i + avail]`` to keep (at most ``room``), applying
        what the one-by-one reading did: consumer sequences in order (a repeat is skipped:
        ``_skip``; a gap ends the pull), nothing past ``hi``, the end at ``hi``, at
        num_pending 0 or at ``limit``; counts them against the open requests."""
        self._skip = 0
        self._served_now = False
        k = min(avail, room)
        sseq = ack.sseq[i : i + k]
        bad = sseq > self.hi
        if self.next_cseq is not None:
            cseq = ack.cseq[i : i + k]
            expected = self.next_cseq + np.arange(k, dtype=np.int64)
            bad |= cseq != expected
        fin = (sseq >= self.hi) | ack.last[i : i + k]
        if self.limit is not None and self.limit - self.received <= k:
            fin[max(self.limit - self.received - 1, 0) :] = True
        first_bad = int(np.argmax(bad)) if bad.any() else k
        first_fin = int(np.argmax(fin)) if fin.any() else k
        if first_fin < first_bad:
            k = first_fin + 1
            self.done = True
        elif first_bad < k:
            j = first_bad
            if sseq[j] > self.hi and (self.next_cseq is None or ack.cseq[i + j] == self.next_cseq + j):
                self._count(j + 1)
                self.done = True
                return j
            if self.next_cseq is not None and ack.cseq[i + j] < self.next_cseq + j:
                self._skip = 1  # a repeat of something already received
            else:
                self.gap = True  # lost deliveries: restart after last_sseq
                self.done = True
            k = j
        self._count(k)
        return k

    def _count(self, k: int) -> None:
        """``k`` deliveries against the open requests, oldest first."""
        requests = self._requests
        while k and requests:
            took = min(k, requests[0])
            requests[0] -= took
            k -= took
            if requests[0] <= 0:
                requests.popleft()
                self._served += 1
                self._served_now = True

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
        try:
            info = await jsapi.consumer_info(self.session, self.stream, self.consumer)
        except ConsumerNotFoundError:
            self.gap = True
            self.done = True
            return
        if info.num_pending == 0 and (self.next_cseq is None or info.delivered.consumer_seq < self.next_cseq):
            self.done = True
        elif self.eager:
            await self._top_up()


async def create_reader_consumer(
    session: Session, stream: str, start: int, filters: Optional[Sequence[str]], *, headers_only: bool = False
) -> tuple[str, int]:
    """An ephemeral, ack-less, in-memory pull consumer from ``start``; (name, num_pending)."""
    name = _name("jspk_")
    config: dict = {
        "name": name,
        "deliver_policy": "by_start_sequence",
        "opt_start_seq": max(int(start), 1),
        "ack_policy": "none",
        "replay_policy": "instant",
        "inactive_threshold": wire.s_to_ns(max(READER_INACTIVE, session.timeout * 4)),
        # No num_replicas: the server makes an ephemeral R1 on a limits stream, and gives it the
        # stream's replica count on interest and work-queue streams, where any other is refused
        # (10134); an R1 consumer of an R3 interest stream would not be valid.
        "mem_storage": True,
    }
    if headers_only:
        config["headers_only"] = True
    filters = [f for f in (filters or ()) if f != ">"] if filters and ">" not in filters else []
    if len(filters) == 1:
        config["filter_subject"] = filters[0]
    elif filters:
        config["filter_subjects"] = list(filters)
    resp = await session.api(
        f"{session.api_prefix}.CONSUMER.CREATE.{stream}.{name}",
        {"stream_name": stream, "config": config, "action": "create"},
        what=f"creating a reader consumer on {stream!r}",
    )
    return name, int(resp.get("num_pending", 0))


async def delete_consumer_quietly(session: Session, stream: str, name: str, *, wait: bool = True) -> None:
    """Delete a reader's consumer, waiting for the answer (unless ``wait`` is false: a
    consumer that stopped answering) but not failing: its inactive_threshold removes it anyway."""
    if not session.connected:
        return
    subject = f"{session.api_prefix}.CONSUMER.DELETE.{stream}.{name}"
    try:
        if wait:
            await session.api(subject, what=f"deleting reader consumer {name!r}")
        else:
            await (await session.ready()).publish(subject, b"")
    except Exception:  # noqa: BLE001 - gone already, or the connection is: either way it goes
        pass


async def count_from(session: Session, stream: str, start: int, filters: Optional[Sequence[str]]) -> int:
    """How many stored messages at or after ``start`` match ``filters`` (a throw-away consumer's num_pending)."""
    name, pending = await create_reader_consumer(session, stream, start, filters, headers_only=True)
    await delete_consumer_quietly(session, stream, name)
    return pending


# Times a read goes on after a replica said "no more" while the stream's leader holds more.
STALE_REOPENS = 20


async def first_stored(session: Session, stream: str, start: int, filters: Optional[Sequence[str]]) -> Optional[int]:
    """The first stored sequence >= ``start`` matching ``filters``, as the stream's leader says
    (STREAM.MSG.GET with next_by_subj, which the leader answers); None if there is none."""
    best: Optional[int] = None
    for f in filters or [">"]:
        try:
            resp = await session.api(
                session.stream_subject("MSG.GET", stream),
                {"seq": start, "next_by_subj": f},
                what=f"reading stream {stream!r}",
            )
        except MsgNotFoundError:
            continue
        q = int(resp["message"]["seq"])
        best = q if best is None else min(best, q)
    return best


class EndCheck:
    """A read's end, checked with the stream's leader: on a cluster the replica a read went
    through (a reader consumer's node, or whichever node answered a direct get) can lag the
    leader (a node catching up after a restart) and say "no more" before ``hi``.  ``short``
    says whether matching messages remain in (last, hi]; a read then goes on, after a pause
    growing with each time, and past ``STALE_REOPENS`` times it raises: never short in silence
    (tests/connector/test_cluster_streaming.py)."""

    def __init__(self, session: Session, stream: str, hi: int, filters: Optional[Sequence[str]], what: str) -> None:
        self.session, self.stream, self.hi, self.filters, self.what = session, stream, hi, filters, what
        self.times = 0

    async def short(self, last: int) -> bool:
        if last >= self.hi:
            return False
        q = await first_stored(self.session, self.stream, last + 1, self.filters)
        if q is None or q > self.hi:
            return False
        self.times += 1
        if self.times > STALE_REOPENS:
            raise JetSparkError(
                f"{self.what} of stream {self.stream!r}: a replica stays behind the stream's leader "
                f"(read up to seq {last}, the leader holds seq {q} <= {self.hi}); a node may still be catching up"
            )
        log.warning(
            "%s of %r: ended at seq %d but the stream's leader holds seq %d; reading on",
            self.what,
            self.stream,
            last,
            q,
        )
        await asyncio.sleep(min(0.05 * 2**self.times, 1.0))
        return True


class RangeRead:
    """One range read: creates its consumer, pulls, restarts after a gap, deletes the consumer;
    a consumer that ends before ``hi`` is checked with the stream's leader (``EndCheck``) and
    replaced by a new one if its replica lagged."""

    def __init__(
        self,
        session: Session,
        stream: str,
        lo: int,
        hi: int,
        filters,
        *,
        replies: bool,
        headers_only: bool = False,
    ) -> None:
        self.session = session
        self.stream = stream
        self.lo = lo
        self.hi = hi
        self.filters = filters
        self.replies = replies
        self.headers_only = headers_only
        self.consumer: Optional[str] = None
        self.puller: Optional[Puller] = None
        self.pending_at_start = 0
        self.restarts = 0
        self.returned = lo - 1  # the last sequence a returned chunk held
        self.end_check = EndCheck(session, stream, hi, filters, "range read")

    async def open(self, start: Optional[int] = None) -> None:
        start = self.lo if start is None else start
        self.consumer = None
        self.consumer, pending = await create_reader_consumer(
            self.session, self.stream, start, self.filters, headers_only=self.headers_only
        )
        if start == self.lo:
            self.pending_at_start = pending
        self.puller = puller = Puller(
            self.session, self.stream, self.consumer, self.hi, replies=self.replies, next_cseq=1
        )
        puller.last_sseq = start - 1  # a restart before any delivery resumes here, not at lo
        if pending == 0:
            puller.done = True
            return
        await puller.start()

    def _live(self) -> Puller:
        """The puller ``open`` made (chunks are read only after it)."""
        if self.puller is None or self.consumer is None:
            raise JetSparkError(f"the range read of stream {self.stream!r} is not open")
        return self.puller

    async def next_chunk(self, max_msgs: int) -> FrameChunk:
        chunk = await self._next_chunk(max_msgs)
        if len(chunk):
            self.returned = int(chunk.seq_array[-1])
        return chunk

    async def _next_chunk(self, max_msgs: int) -> FrameChunk:
        while True:
            puller = self._live()
            chunk = await puller.next_chunk(max_msgs)
            if len(chunk) or not puller.done:
                if puller.gap and puller.done:
                    await self._restart()
                return chunk
            if not puller.gap:
                if await self._short():
                    continue
                return chunk
            await self._restart()

    async def _short(self) -> bool:
        """At the consumer's end: if the stream's leader holds more of the range, a new
        consumer reads on from the last delivery."""
        puller = self._live()
        last = max(puller.last_sseq, self.returned)
        if not await self.end_check.short(last):
            return False
        await puller.close()
        await delete_consumer_quietly(self.session, self.stream, puller.consumer)
        await self.open(last + 1)
        return True

    async def resume(self) -> None:
        """Go on after the last chunk returned, on a fresh consumer (the old one, or the node
        holding it, stopped answering: a chunk that failed part-way is read again)."""
        log.info("range read of %r: resuming after seq %d on a new consumer", self.stream, self.returned)
        if self.puller is not None:
            await self.puller.close()
        if self.consumer is not None:
            await delete_consumer_quietly(self.session, self.stream, self.consumer, wait=False)
        if self.returned >= self.hi:
            puller = self._live()
            puller.done, puller.gap = True, False
            return
        await self.open(self.returned + 1)

    async def _restart(self) -> None:
        puller = self._live()
        last = puller.last_sseq
        self.restarts += 1
        if self.restarts > 20:
            raise JetSparkError(
                f"range read of stream {self.stream!r} keeps losing deliveries (slow consumer?); "
                f"last sequence read {last}"
            )
        log.info("range read of %r: restarting after seq %d", self.stream, last)
        await puller.close()
        await delete_consumer_quietly(self.session, self.stream, puller.consumer)
        start = max(last + 1, self.lo)
        if start > self.hi:
            puller.gap = False
            return
        await self.open(start)

    async def close(self) -> None:
        if self.puller is not None:
            await self.puller.close()
        if self.consumer is not None:
            await delete_consumer_quietly(self.session, self.stream, self.consumer)
            self.consumer = None


class GetRead:
    """A range read without a consumer: one STREAM.MSG.GET per sequence, ``GET_WINDOW`` in flight.

    For work-queue streams, where the server allows no second consumer over the subjects
    a durable already covers, and none without acks (10084): the connector reads a
    micro-batch's range this way while its durable consumer takes the acks.  Sequences
    that are gone (acknowledged, deleted) answer "no message found" and are skipped;
    subject filters are applied here.
    """

    headers_only = False

    def __init__(self, session: Session, stream: str, lo: int, hi: int, filters) -> None:
        self.session = session
        self.stream = stream
        self.next = lo
        self.hi = hi
        self.filters = filters
        self.returned_next = lo  # where the chunk after the last one returned starts
        self._subject = session.stream_subject("MSG.GET", stream)

    async def open(self) -> None:
        pass

    async def resume(self) -> None:
        """Go on after the last chunk returned (a chunk that failed part-way is read again)."""
        self.next = self.returned_next

    async def close(self) -> None:
        pass

    async def _get(self, seq: int) -> Optional[dict]:
        try:
            return (await self.session.api(self._subject, {"seq": seq}, what=f"reading stream {self.stream!r}"))[
                "message"
            ]
        except MsgNotFoundError:
            return None

    async def next_chunk(self, max_msgs: int) -> Chunk:
        out = Chunk()
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
                stamp = wire.time_to_ns(m["time"])
                if stamp is None:  # (every stored message has its time)
                    raise JetSparkError(f"stream {self.stream!r} answered message {m['seq']} without a time")
                out.seqs.append(int(m["seq"]))
                out.times.append(stamp)
        self.returned_next = self.next
        return out
