"""``DirectRead``: a range read of a stream with batched direct gets, no consumer at all.

A work-queue stream takes no second consumer over the subjects a durable already
covers (10099/10100) and none without acks (10084), so its ranges cannot be read
through a reader consumer (``puller.RangeRead``).  On a stream with
``allow_direct`` the server answers ``$JS.API.DIRECT.GET.<stream>`` with
``{"seq": N, "batch": K}`` by sending the next K stored messages (gaps skipped)
one after another, each with ``Nats-Sequence``, ``Nats-Subject`` and
``Nats-Time-Stamp`` headers added to its own, then an end-of-batch status
(``204 EOB``); a get removes nothing and delivers to no consumer.  One batch
at a time, the next from the last sequence received, until ``hi``.
Without ``allow_direct``, ``puller.GetRead`` (one MSG.GET per sequence) reads
the range instead (docs/semantics.md §8; benchmarks/bench_remote.py).
"""

from __future__ import annotations

import asyncio
import json
from typing import Optional, Sequence

from jetspark.errors import JetSparkError
from jetspark.protocol import subjects as subj
from jetspark.remote import wire
from jetspark.remote.fastpath import RawInbox, status_of
from jetspark.remote.puller import Chunk, EndCheck
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
        self._inbox: Optional[RawInbox] = None
        self._inbox_subject = ""
        self._stamps = _Stamps()
        # Every replica answers direct gets: one catching up can say "no more" before hi.
        self.end_check = EndCheck(session, stream, hi, self.filters, "direct read")

    async def open(self) -> None:
        nc = await self.session.ready()
        self._inbox_subject = nc.new_inbox()
        self._inbox = await RawInbox(public=self.session.public_path).open(nc, self._inbox_subject)

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

    async def next_chunk(self, max_msgs: int) -> Chunk:
        out = Chunk()
        while len(out) < max_msgs:
            if self.done:
                if not await self.end_check.short(self.next - 1):
                    break
                self.done = False
            await self._batch(out, min(DIRECT_BATCH, max_msgs - len(out), self.hi - self.next + 1))
        self.returned_next = self.next
        return out

    async def _batch(self, out: Chunk, batch: int) -> None:
        """One direct-get batch from ``self.next``, appended to ``out``."""
        req: dict = {"seq": self.next, "batch": batch, "max_bytes": DIRECT_MAX_BYTES}
        if self.next_by_subj is not None:
            req["next_by_subj"] = self.next_by_subj
        nc = await self.session.ready()
        await nc.publish(self._subject, json.dumps(req).encode(), reply=self._inbox_subject)
        timeout = self.session.timeout
        filters = self.filters if self.next_by_subj is None else None
        while True:
            try:
                items = await self._inbox.take(timeout)
            except asyncio.TimeoutError as exc:
                raise self.session.silence(f"a direct get of {batch} messages from stream {self.stream!r}", timeout) from exc
            for _subject, _reply, data, hdr in items:
                st = status_of(hdr)
                if st is not None:
                    if st[0] == b"404" or b"\r\nNats-Num-Pending: 0\r\n" in hdr:
                        self.done = True  # nothing (more) stored at or after seq
                    elif st[0] != b"204":  # 204: the end of the batch
                        raise JetSparkError(f"direct get from stream {self.stream!r} answered {st[0].decode()} {st[1].decode(errors='replace')}")
                    return
                own, subject, seq, stamp = strip_direct_headers(hdr)
                if seq > self.hi:
                    self.done = True
                    continue  # (the batch's end status still comes)
                self.next = seq + 1
                if seq >= self.hi:
                    self.done = True
                if filters is not None and not subj.matches_any(filters, subject.decode()):
                    continue
                out.subjects.append(subject)
                out.datas.append(data)
                out.headers.append(own)
                out.seqs.append(seq)
                out.times.append(self._stamps.ns(stamp))
