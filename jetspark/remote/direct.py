"""``DirectRead``: a range read of a stream with batched direct gets, no consumer at all.

A work-queue stream takes no second consumer over the subjects a durable already
covers (10099/10100) and none without acks (10084), so its ranges cannot be read
through a reader consumer (``range_reader.RangeRead``).  On a stream with
``allow_direct`` the server answers ``$JS.API.DIRECT.GET.<stream>`` with
``{"seq": N, "batch": K}`` by sending the next K stored messages (gaps skipped)
one after another, each with ``Nats-Sequence``, ``Nats-Subject`` and
``Nats-Time-Stamp`` headers added to its own, then an end-of-batch status
(``204 EOB``, with ``Nats-Num-Pending``); a get removes nothing and delivers to
no consumer.

The range is cut into consecutive windows of sequences, several asked for at
once (``DIRECT_IN_FLIGHT``), each request from its window's first sequence and
answered to a reply subject of its own (``<inbox>.<request number>``), so
answers that interleave (every replica of a stream answers direct gets) are
told apart; the messages are returned in sequence order, a window's after the
one before it.  The server cannot be told where to stop, so a window's answer
may run past its end (gaps in the window: those messages belong to the next
window and are dropped) or stop short of it (``max_bytes``, or a filter's
``batch`` matches): then its rest is asked for again.  The windows' width
follows how many sequences the last answers covered, so a stream with many
gaps or a sparse filter costs few dropped messages.  An answer not coming
within the session's timeout is asked for again (``DIRECT_RETRIES`` times), and
so is a request no server took (503) for up to the timeout (``_unanswered``).
A window answered "nothing more" (``404``, or ``Nats-Num-Pending: 0``) ends
the read, once the stream's leader confirms it (``range_reader.EndCheck``: a
replica catching up can say so early).  Memory: the windows in flight and the
chunk being built.

The replies come as runs of frames (``fastpath.FrameInbox``) and are read a run
at a time with array operations (``direct_frames.reply_fields``).  Without
``allow_direct``, ``range_reader.GetRead`` (one MSG.GET per sequence) reads the
range instead (docs/semantics.md §8; benchmarks/bench_remote.py row 3).
"""

from __future__ import annotations

import asyncio
import collections
import json
from typing import Optional, Sequence

import numpy as np

from jetspark.errors import JetSparkError, RequestTimeoutError, StreamNotFoundError
from jetspark.protocol import subjects as subj
from jetspark.protocol.deliveries import FrameChunk
from jetspark.protocol.frames import Frames
from jetspark.remote import jsapi, wire
from jetspark.remote.direct_frames import copy_out, pending_zero, reply_fields
from jetspark.remote.fastpath import FrameInbox, status_of
from jetspark.remote.range_reader import EndCheck
from jetspark.remote.session import Session

__all__ = ["DirectRead", "strip_direct_headers"]

# Messages per direct-get request (the server caps a batch by max_bytes too).
DIRECT_BATCH = 8192
DIRECT_MAX_BYTES = 16 << 20
# Windows asked for at once.
DIRECT_IN_FLIGHT = 4
# Times the windows still open are asked for again when nothing came within the timeout.
DIRECT_RETRIES = 2

# How a window's request ended: not yet, its batch served, nothing more stored after it,
# no server to answer it (503: the stream is gone, or a node's subscription is, for a moment).
_OPEN, _SERVED, _NOTHING_MORE, _NO_RESPONDERS = 0, 1, 2, 3


def strip_direct_headers(block: bytes) -> tuple[Optional[bytes], bytes, int, bytes]:
    """A direct get's header block -> (the message's own header block or None, its subject,
    sequence, timestamp text).  The server appends its headers after the message's own,
    always in this order: Nats-Stream, Nats-Subject, Nats-Sequence, Nats-Time-Stamp, ..."""
    i = block.rfind(b"\r\nNats-Stream: ")
    j = block.find(b"\r\nNats-Subject: ", i)
    k = block.find(b"\r\nNats-Sequence: ", j)
    t = block.find(b"\r\nNats-Time-Stamp: ", k)
    e = block.find(b"\r\n", t + 19)
    seq = block[k + 17 : t]
    if min(i, j, k, t, e) < 0 or not seq.isdigit():
        raise JetSparkError(f"not a direct get reply: {block[:200]!r}")
    own = block[: i + 2] + b"\r\n" if i > len(b"NATS/1.0") else None
    return own, block[j + 16 : k], int(seq), block[t + 19 : e]


class _Part:
    """Messages of one window from one run of frames, in order, copied out of the run's buffer
    (``direct_frames.copy_out``: their subjects, the ``Nats-Subject`` values, then their payloads):
    the frames in that copy, their sequences and times, their own header blocks (None: none has any)."""

    __slots__ = ("buf", "frames", "seq", "time", "own")

    def __init__(self, buf, frames: Frames, seq: np.ndarray, time: np.ndarray, own: Optional[list]) -> None:
        self.buf, self.frames, self.seq, self.time, self.own = buf, frames, seq, time, own

    def __len__(self) -> int:
        return len(self.seq)

    def split(self, k: int) -> tuple["_Part", "_Part"]:
        own = self.own
        return (
            _Part(self.buf, self.frames[:k], self.seq[:k], self.time[:k], None if own is None else own[:k]),
            _Part(self.buf, self.frames[k:], self.seq[k:], self.time[k:], None if own is None else own[k:]),
        )


class _Window:
    """Sequences ``[seq, hi]`` still to be read of one window, its current request (``req``,
    asking ``batch`` messages from ``seq``), what came for it and is not yet returned."""

    __slots__ = ("seq", "hi", "req", "batch", "parts", "got", "last", "end")

    def __init__(self, seq: int, hi: int) -> None:
        self.seq, self.hi = seq, hi
        self.req = -1
        self.batch = 0
        self.parts: collections.deque[_Part] = collections.deque()
        self.got = 0  # messages the current request brought, those past hi too
        self.last = seq - 1  # the highest sequence received for the window
        self.end = _OPEN


class DirectRead:
    """The messages of [lo, hi] matching ``filters``, by pipelined batched direct gets (see the module)."""

    headers_only = False

    def __init__(self, session: Session, stream: str, lo: int, hi: int, filters: Optional[Sequence[str]]) -> None:
        self.session = session
        self.stream = stream
        self.lo = lo
        self.hi = hi
        self.filters = list(filters) if filters else None
        # One filter the server applies (next_by_subj); several are matched here.
        self.next_by_subj = self.filters[0] if self.filters and len(self.filters) == 1 else None
        self._local_filters = self.filters if self.next_by_subj is None else None
        self._matched: dict[bytes, bool] = {}
        self.returned_next = lo  # where the chunk after the last one returned starts
        self.next = lo  # the first sequence no window covers yet
        self.covered = lo - 1  # every message up to here is returned (or taken into the chunk being built)
        # Sequences a window spans: one per message without gaps; learnt from the answers.
        # A filter the server applies may match few: its first window spans the range, alone.
        self.span: Optional[int] = None if self.next_by_subj else DIRECT_BATCH
        self.requests = 0  # requests sent (tests read it)
        self.resent = 0  # requests sent again after the timeout (tests read it)
        self._windows: collections.deque[_Window] = collections.deque()
        self._by_req: dict[int, _Window] = {}
        self._outbox: list[tuple[bytes, str]] = []
        self._subject = f"{session.api_prefix}.DIRECT.GET.{stream}"
        self._inbox: Optional[FrameInbox] = None
        self._inbox_subject = ""
        self._max_bytes = DIRECT_MAX_BYTES
        self._unheard = 0.0  # seconds paused since the last answer, for no responders
        self._failed: Optional[BaseException] = None  # raised while taking a run as it arrived
        self._retried = 0
        # Every replica answers direct gets: one catching up can say "no more" before hi.
        self.end_check = EndCheck(session, stream, hi, self.filters, "direct read")

    async def open(self) -> None:
        nc = await self.session.ready()
        self._max_bytes = max(DIRECT_MAX_BYTES, 2 * self.session.max_payload + 65536)
        self._inbox_subject = nc.new_inbox()
        self._inbox = await FrameInbox(public=self.session.public_path, prepare=self._on_run).open(
            nc, self._inbox_subject + ".*"
        )

    async def close(self) -> None:
        self._failed = None
        self._windows.clear()
        self._by_req.clear()
        self._outbox.clear()
        if self._inbox is not None:
            inbox, self._inbox = self._inbox, None
            await inbox.close()

    def _opened(self) -> FrameInbox:
        """The inbox ``open`` made (answers are read only between open and close)."""
        if self._inbox is None:
            raise JetSparkError(f"the direct read of stream {self.stream!r} is not open")
        return self._inbox

    async def resume(self) -> None:
        """Go on after the last chunk returned (a chunk that failed part-way is read again),
        on a fresh inbox: answers still on their way to the old one are not mixed in."""
        await self.close()
        self.next = self.returned_next
        self.covered = self.returned_next - 1
        await self.open()

    # ---- requests

    def _ask(self, w: _Window) -> None:
        """Queue ``w``'s request for the messages from its ``seq`` (sent by ``_flush``)."""
        self._by_req.pop(w.req, None)
        self.requests += 1
        w.req = self.requests
        w.end, w.got = _OPEN, 0
        w.batch = min(DIRECT_BATCH, w.hi - w.seq + 1)  # (no more can be in the window, filter or not)
        req: dict = {"seq": w.seq, "batch": w.batch, "max_bytes": self._max_bytes}
        if self.next_by_subj is not None:
            req["next_by_subj"] = self.next_by_subj
        self._by_req[w.req] = w
        self._outbox.append((json.dumps(req).encode(), f"{self._inbox_subject}.{w.req}"))

    async def _flush(self) -> None:
        """Send the queued requests, in order."""
        if not self._outbox:
            return
        nc = await self.session.ready()
        out, self._outbox = self._outbox, []
        for payload, reply in out:
            await nc.publish(self._subject, payload, reply=reply)

    def _top_up(self) -> None:
        """Open windows up to ``DIRECT_IN_FLIGHT`` (one while a server-side filter's density is unknown)."""
        room = DIRECT_IN_FLIGHT if self.span is not None else 1
        while len(self._windows) < room and self.next <= self.hi:
            width = self.span if self.span is not None else self.hi - self.next + 1
            w = _Window(self.next, min(self.hi, self.next + width - 1))
            self.next = w.hi + 1
            self._windows.append(w)
            self._ask(w)

    # ---- reading

    async def next_chunk(self, max_msgs: int) -> FrameChunk:
        parts: list[_Part] = []
        n = 0
        retries = 0
        timeout = self.session.timeout
        while n < max_msgs:
            if self._failed is not None:
                failed, self._failed = self._failed, None
                raise failed
            if not self._windows:
                self._top_up()
                if not self._windows:
                    break  # the range is read
            head = self._windows[0]
            if head.parts:
                part = head.parts.popleft()
                if len(part) > max_msgs - n:
                    part, rest = part.split(max_msgs - n)
                    head.parts.appendleft(rest)
                parts.append(part)
                n += len(part)
                self.covered = int(part.seq[-1])
                continue
            if head.end != _OPEN:
                if not await self._settle(head):
                    break
                continue
            await self._flush()
            try:
                await self._opened().take(timeout)  # (the runs were taken as they arrived: _on_run)
            except asyncio.TimeoutError as exc:
                retries += 1
                if retries > DIRECT_RETRIES:
                    raise self.session.silence(
                        f"a direct get of {head.batch} messages from stream {self.stream!r}", timeout
                    ) from exc
                for w in self._windows:  # (lost, or answered to a connection that went away)
                    if w.end == _OPEN:
                        w.seq = w.last + 1
                        self.resent += 1
                        self._ask(w)
                continue
            retries = 0
        await self._flush()
        self.returned_next = self.covered + 1
        if not parts:
            return FrameChunk([], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), [])
        return self._chunk(parts)

    async def _settle(self, w: _Window) -> bool:
        """The head window's request has ended: the window is done, asked again for its rest,
        or the read is at its end.  False when the read is over."""
        if w.end == _NO_RESPONDERS:
            await self._unanswered(w)
            return True
        self._unheard, self._retried = 0.0, 0
        if w.last >= w.hi:
            self._done(w)
            return True
        if w.end == _NOTHING_MORE:
            # Nothing stored after w.last (as the answering replica sees it): the end of the read.
            last = max(w.last, self.covered)
            self._windows.clear()
            self._by_req.clear()
            if await self.end_check.short(last):
                self.next = last + 1
                return True
            self.covered = self.hi
            self.next = self.hi + 1
            return False
        if w.got == 0:
            raise JetSparkError(
                f"direct get from stream {self.stream!r} from seq {w.seq} answered no message and no end"
            )
        if len(self._windows) == 1 and self.next == w.hi + 1:
            # The last window opened: it ends here, and the next ones start after it (with the width learnt).
            w.hi = w.last
            self.next = w.last + 1
            self._done(w)
            return True
        w.seq = w.last + 1  # cut short (max_bytes, a filter's batch): the rest of the window
        self._ask(w)
        return True

    async def _unanswered(self, w: _Window) -> None:
        """No server took the head window's request: asked again after a pause growing with
        each time (a node going away leaves no direct-get subscriber for a moment), for up to
        the session's timeout; then the stream is looked up (gone: ``StreamNotFoundError``) and
        the silence is a ``RequestTimeoutError``, which a read retries within its budget."""
        pause = min(0.05 * 2 ** min(self._retried, 5), 1.0)
        if self._unheard + pause > self.session.timeout:
            try:
                await jsapi.stream_info(self.session, self.stream)
            except StreamNotFoundError as exc:
                raise StreamNotFoundError(
                    exc.code, exc.err_code, f"{exc.description}: stream {self.stream!r} went away during a read"
                ) from exc
            self._unheard, self._retried = 0.0, 0
            raise RequestTimeoutError(
                f"no server answered the direct gets of stream {self.stream!r} (no responders) "
                f"for {self.session.timeout:g} s"
            )
        await asyncio.sleep(pause)
        self._unheard += pause
        self._retried += 1
        w.seq = w.last + 1
        self.resent += 1
        self._ask(w)

    def _done(self, w: _Window) -> None:
        self._windows.popleft()
        self._by_req.pop(w.req, None)
        self.covered = max(self.covered, w.hi)
        self._top_up()

    def _on_run(self, buf: bytes, f: Frames) -> None:
        """A run of frames as it arrives (``FrameInbox``'s ``prepare``, inside nats-py's read
        loop, right after the buffer was framed: its messages are read and copied out while it
        is still in the CPU's caches).  What it raises is raised by ``next_chunk``."""
        if self._failed is None:
            try:
                self._absorb(buf, f)
            except Exception as exc:  # noqa: BLE001 - (nats-py's read loop must not see it)
                self._failed = exc

    def _absorb(self, buf: bytes, f: Frames) -> None:
        """A run of frames: each request's messages (and end) to its window, in order."""
        fields = reply_fields(buf, f, self.stream, len(self._inbox_subject) + 1)
        req = fields.req
        if len(req) and req[0] == req[-1] and (req == req[0]).all():
            self._take(buf, f, fields, int(req[0]), None)
            return
        order = np.argsort(req, kind="stable")
        cuts = np.flatnonzero(np.diff(req[order])) + 1
        for rows in np.split(order, cuts):
            self._take(buf, f, fields, int(req[rows[0]]), rows)

    def _take(self, buf: bytes, f: Frames, d, r: int, rows: Optional[np.ndarray]) -> None:
        """The frames ``rows`` (None: all) of ``f``, answers to request ``r``."""
        w = self._by_req.get(r)
        if w is None or w.end != _OPEN:
            return  # an answer to a request asked again since, or to a window already ended
        stat = np.flatnonzero(d.status if rows is None else d.status[rows])
        count = len(f) if rows is None else len(rows)
        end = int(stat[0]) if len(stat) else count
        if end:
            self._messages(buf, f, d, w, slice(0, end) if rows is None else rows[:end])
        if end < count:
            i = end if rows is None else int(rows[end])
            hdr = buf[f.hdr_lo[i] : f.data_lo[i]]
            st = status_of(hdr) or (b"", b"")
            if st[0] == b"404" or st[0] == b"204" and pending_zero(hdr):
                w.end = _NOTHING_MORE
            elif st[0] == b"204":
                w.end = _SERVED
                self._learn(w)
            elif st[0] == b"503":
                w.end = _NO_RESPONDERS
            else:
                raise JetSparkError(
                    f"direct get from stream {self.stream!r} answered "
                    f"{st[0].decode(errors='replace')} {st[1].decode(errors='replace')}"
                )
            self._by_req.pop(r, None)

    def _learn(self, w: _Window) -> None:
        """A served request's reach: the window width that brings about one batch."""
        if w.got and w.last >= w.seq:
            reach = w.last - w.seq + 1
            self.span = max(1, reach * DIRECT_BATCH // w.got if w.got == w.batch else reach)

    def _messages(self, buf: bytes, f: Frames, d, w: _Window, rows: slice | np.ndarray) -> None:
        """Messages of window ``w`` (the frames ``rows`` of ``f``): those up to its end (and
        matching the filters) are kept."""
        seq, time = d.seq[rows], d.time[rows]
        subj_lo, subj_hi, own_end = d.subj_lo[rows], d.subj_hi[rows], d.own_end[rows]
        for k in np.flatnonzero(~d.ok[rows]).tolist():  # (a reply the array reading did not take: read it here)
            i = rows.start + k if isinstance(rows, slice) else int(rows[k])
            hl, dl = int(f.hdr_lo[i]), int(f.data_lo[i])
            block, subject, seq[k], stamp = strip_direct_headers(buf[hl:dl])
            time[k] = wire.time_to_ns(stamp.decode())
            subj_lo[k] = buf.rfind(b"\r\nNats-Subject: ", hl, dl) + 16
            subj_hi[k] = subj_lo[k] + len(subject)
            own_end[k] = hl + len(block) - 2 if block else 0
        w.got += len(seq)
        before, w.last = w.last, max(w.last, int(seq[-1]))
        keep = (seq <= w.hi) & (seq >= w.seq)
        if before <= w.hi < w.last:
            # The answer's first message past the window's end (an answer can come in several
            # runs: only the run that holds it): nothing (matching) is stored between the
            # window's end and it, so the windows not yet asked for start there.
            beyond = int(seq[np.argmax(seq > w.hi)])
            if self.next < beyond:
                self.next = min(beyond, self.hi + 1)
        if self._local_filters is not None:
            keep &= self._match(buf, subj_lo, subj_hi)
        pick: slice | np.ndarray = slice(None)
        if not keep.all():
            pick = np.flatnonzero(keep)
            if not len(pick):
                return
        own_end = own_end[pick]
        own: Optional[list] = None
        if own_end.any():
            hdr_lo = f.hdr_lo[rows][pick]
            own = [None] * len(own_end)
            for k in np.flatnonzero(own_end).tolist():
                own[k] = buf[int(hdr_lo[k]) : int(own_end[k])] + b"\r\n"
        # Subjects and payloads only (the header blocks are the server's; own ones are kept above).
        cbuf, frames = copy_out(buf, subj_lo[pick], subj_hi[pick], f.data_lo[rows][pick], f.data_hi[rows][pick])
        w.parts.append(_Part(cbuf, frames, seq[pick], time[pick], own))

    def _match(self, buf: bytes, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        matched, filters = self._matched, self._local_filters
        out = np.empty(len(lo), dtype=bool)
        for k, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
            s = buf[a:b]
            m = matched.get(s)
            if m is None:
                m = matched[s] = subj.matches_any(filters, s.decode())
            out[k] = m
        return out

    def _chunk(self, parts: list[_Part]) -> FrameChunk:
        headers: Optional[list[Optional[bytes]]] = None  # (none of its own: the frames' empty blocks say so)
        if any(p.own is not None for p in parts):
            headers = []
            for p in parts:
                headers.extend(p.own if p.own is not None else [None] * len(p))
        return FrameChunk(
            [(p.buf, p.frames) for p in parts],
            np.concatenate([p.seq for p in parts]),
            np.concatenate([p.time for p in parts]),
            headers,
        )
