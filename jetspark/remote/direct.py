"""``DirectRead``: a range read of a stream with batched direct gets, no consumer at all.

A work-queue stream takes no second consumer over the subjects a durable already
covers (10099/10100) and none without acks (10084), so its ranges cannot be read
through a reader consumer (``range_reader.RangeRead``).  On a stream with
``allow_direct`` the server answers ``$JS.API.DIRECT.GET.<stream>`` with
``{"seq": N, "batch": K}`` by sending the next K stored messages (gaps skipped)
one after another, each with ``Nats-Sequence``, ``Nats-Subject`` and
``Nats-Time-Stamp`` headers added to its own, then an end-of-batch status
(``204 EOB``); a get removes nothing and delivers to no consumer.  One batch
at a time, the next from the last sequence received, until ``hi``.  The
replies come as runs of frames (``fastpath.FrameInbox``) and their headers
are read for a whole run at once (``protocol.deliveries.direct_fields``).
Without ``allow_direct``, ``range_reader.GetRead`` (one MSG.GET per sequence) reads
the range instead (docs/semantics.md §8; benchmarks/bench_remote.py).
"""

from __future__ import annotations

import asyncio
import json
from typing import Optional, Sequence

import numpy as np

from jetspark.errors import JetSparkError
from jetspark.protocol import subjects as subj
from jetspark.protocol.deliveries import FrameChunk, direct_fields
from jetspark.protocol.frames import Frames
from jetspark.remote import wire
from jetspark.remote.fastpath import FrameInbox, status_of
from jetspark.remote.range_reader import EndCheck
from jetspark.remote.session import Session

__all__ = ["DirectRead", "strip_direct_headers"]

# Messages per direct-get batch (the server caps a batch by max_bytes too).
DIRECT_BATCH = 8192
DIRECT_MAX_BYTES = 16 << 20


def strip_direct_headers(block: bytes) -> tuple[Optional[bytes], bytes, int, bytes]:
    """A direct get's header block -> (the message's own header block or None, its subject,
    sequence, timestamp text).  The server appends its headers after the message's own,
    always in this order: Nats-Stream, Nats-Subject, Nats-Sequence, Nats-Time-Stamp, ..."""
    i = block.rfind(b"\r\nNats-Stream: ")
    j = block.find(b"\r\nNats-Subject: ", i)
    k = block.find(b"\r\nNats-Sequence: ", j)
    t = block.find(b"\r\nNats-Time-Stamp: ", k)
    e = block.find(b"\r\n", t + 19)
    if min(i, j, k, t, e) < 0:
        raise JetSparkError(f"not a direct get reply: {block[:200]!r}")
    own = block[: i + 2] + b"\r\n" if i > len(b"NATS/1.0") else None
    return own, block[j + 16 : k], int(block[k + 17 : t]), block[t + 19 : e]


class _Stamps:
    """RFC 3339 times of the server (``2026-11-24T01:49:36.660992921Z``) -> ns since the
    epoch, the date-time part parsed once per second (messages come many per second)."""

    def __init__(self) -> None:
        self._second = b""
        self._base = 0

    def ns(self, stamp: bytes) -> int:
        if len(stamp) > 20 and stamp[19:20] == b"." and stamp[-1:] == b"Z":
            head = stamp[:19]
            if head != self._second:
                self._base = wire.time_to_ns(head.decode() + "Z")
                self._second = head
            return self._base + int(stamp[20:-1].ljust(9, b"0")[:9])
        return wire.time_to_ns(stamp.decode())


class DirectRead:
    """The messages of [lo, hi] matching ``filters``, by batched direct gets (see the module)."""

    headers_only = False

    def __init__(self, session: Session, stream: str, lo: int, hi: int, filters: Optional[Sequence[str]]) -> None:
        self.session = session
        self.stream = stream
        self.next = lo
        self.hi = hi
        self.filters = list(filters) if filters else None
        # One filter the server applies (next_by_subj); several are matched here.
        self.next_by_subj = self.filters[0] if self.filters and len(self.filters) == 1 else None
        self.returned_next = lo
        self.done = lo > hi
        self._subject = f"{session.api_prefix}.DIRECT.GET.{stream}"
        self._inbox: Optional[FrameInbox] = None
        self._inbox_subject = ""
        self._stamps = _Stamps()
        # Every replica answers direct gets: one catching up can say "no more" before hi.
        self.end_check = EndCheck(session, stream, hi, self.filters, "direct read")

    async def open(self) -> None:
        nc = await self.session.ready()
        self._inbox_subject = nc.new_inbox()
        self._inbox = await FrameInbox(public=self.session.public_path).open(nc, self._inbox_subject)

    async def close(self) -> None:
        if self._inbox is not None:
            inbox, self._inbox = self._inbox, None
            await inbox.close()

    async def resume(self) -> None:
        """Go on after the last chunk returned (a chunk that failed part-way is read again),
        on a fresh inbox: answers still on their way to the old one are not mixed in."""
        await self.close()
        self.next = self.returned_next
        self.done = self.next > self.hi
        await self.open()

    async def next_chunk(self, max_msgs: int) -> FrameChunk:
        parts: list = []
        seqs: list = []
        times: list = []
        headers: list = []
        n = 0
        while n < max_msgs:
            if self.done:
                if not await self.end_check.short(self.next - 1):
                    break
                self.done = False
            n += await self._batch(
                parts, seqs, times, headers, min(DIRECT_BATCH, max_msgs - n, self.hi - self.next + 1)
            )
        self.returned_next = self.next
        if not parts:
            return FrameChunk([], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), [])
        return FrameChunk(parts, np.concatenate(seqs), np.concatenate(times), headers)

    async def _batch(self, parts: list, seqs: list, times: list, headers: list, batch: int) -> int:
        """One direct-get batch from ``self.next``, its messages appended (as frames whose
        subject span is the ``Nats-Subject`` header's value); how many."""
        req: dict = {"seq": self.next, "batch": batch, "max_bytes": DIRECT_MAX_BYTES}
        if self.next_by_subj is not None:
            req["next_by_subj"] = self.next_by_subj
        nc = await self.session.ready()
        await nc.publish(self._subject, json.dumps(req).encode(), reply=self._inbox_subject)
        timeout = self.session.timeout
        filters = self.filters if self.next_by_subj is None else None
        got = 0
        while True:
            try:
                runs = await self._inbox.take(timeout)
            except asyncio.TimeoutError as exc:
                raise self.session.silence(
                    f"a direct get of {batch} messages from stream {self.stream!r}", timeout
                ) from exc
            for buf, f in runs:
                d = direct_fields(buf, f)
                stat = np.flatnonzero(d.status)
                end = int(stat[0]) if len(stat) else len(f)
                got += self._messages(buf, f, d, end, filters, parts, seqs, times, headers)
                if end < len(f):
                    hdr = buf[f.hdr_lo[end] : f.data_lo[end]]
                    st = status_of(hdr)
                    if st[0] == b"404" or b"\r\nNats-Num-Pending: 0\r\n" in hdr:
                        self.done = True  # nothing (more) stored at or after seq
                    elif st[0] != b"204":  # 204: the end of the batch
                        raise JetSparkError(
                            f"direct get from stream {self.stream!r} answered {st[0].decode()} {st[1].decode(errors='replace')}"
                        )
                    return got

    def _messages(
        self, buf: bytes, f, d, end: int, filters, parts: list, seqs: list, times: list, headers: list
    ) -> int:
        """The messages among the first ``end`` replies of a run, kept up to ``hi``."""
        if not end:
            return 0
        seq, time = d.seq[:end], d.time[:end]
        subj_lo, subj_hi = d.subj_lo[:end], d.subj_hi[:end]
        for i in np.flatnonzero(~d.ok[:end]).tolist():  # (a reply the array reading did not take: read it here)
            hl, dl = int(f.hdr_lo[i]), int(f.data_lo[i])
            _own, subject, seq[i], stamp = strip_direct_headers(buf[hl:dl])
            time[i] = self._stamps.ns(stamp)
            subj_lo[i] = buf.rfind(b"\r\nNats-Subject: ", hl, dl) + 16
            subj_hi[i] = subj_lo[i] + len(subject)
        keep = seq <= self.hi
        if not keep.all():
            self.done = True  # past hi (the batch's end status still comes)
        if keep.any():
            last = int(seq[keep][-1])
            self.next = last + 1
            if last >= self.hi:
                self.done = True
        if filters is not None:
            keep &= np.array(
                [subj.matches_any(filters, buf[a:b].decode()) for a, b in zip(subj_lo.tolist(), subj_hi.tolist())],
                dtype=bool,
            )
        sel = np.flatnonzero(keep)
        if not len(sel):
            return 0
        g = f[:end]
        frames = Frames(
            g.kind[sel],
            g.sid[sel],
            subj_lo[sel],
            subj_hi[sel],
            g.reply_lo[sel],
            g.reply_hi[sel],
            g.hdr_lo[sel],
            g.data_lo[sel],
            g.data_hi[sel],
        )
        parts.append((buf, frames))
        seqs.append(seq[sel])
        times.append(time[sel])
        own: list[Optional[bytes]] = [None] * len(sel)
        own_end = d.own_end[:end][sel]
        for k in np.flatnonzero(own_end).tolist():
            own[k] = buf[int(frames.hdr_lo[k]) : int(own_end[k])] + b"\r\n"
        headers.extend(own)
        return len(sel)
