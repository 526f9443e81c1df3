"""Removed sequences: the ``ops`` journal and this process's bitmap of it.

Removing the oldest messages only moves the header's ``first_seq``; every
other removal (a message deleted from the middle, an interest-retention
skip, a damaged record dropped) appends one record to ``ops``::

    u32 n | u32 crc | n x (u64 first, u64 last)

Each process folds the records into a bitmap of removed sequences starting
at ``base`` (at or below ``first_seq``), which is what every lookup
(``mask``, ``is_removed``, ``first_kept``) reads.  Once most of ``ops`` is
dead (ranges now below ``first_seq``), ``compact`` rewrites it as the removed
runs still ahead, one record (see journals.py for how a journal is replaced).
"""

from __future__ import annotations

import os
import struct
import zlib

import numpy as np

from jetspark.engine import journals as journals_mod
from jetspark.engine.journals import Journals
from jetspark.engine.state_header import StreamHeader
from jetspark.errors import CorruptStoreError

OPS_RECORD = struct.Struct("<II")  # n, crc of the n (first, last) pairs that follow


def encode(runs) -> bytes:
    """One ops record holding these (first, last) runs."""
    arr = runs if isinstance(runs, np.ndarray) else np.array(list(runs), dtype="<u8").reshape(-1, 2)
    body = arr.tobytes()
    return OPS_RECORD.pack(len(arr), zlib.crc32(body)) + body


class RemovedSet:
    """The removed sequences at or above ``base``, as this process last read them."""

    __slots__ = ("journals", "base", "bitmap", "read_upto", "compact_at")

    def __init__(self, journals: Journals, base: int = 1) -> None:
        self.journals = journals
        self.base = base
        self.bitmap = np.zeros(0, dtype=bool)  # True at index i: sequence base + i was removed
        self.read_upto = 0  # ops bytes folded into the bitmap
        self.compact_at = 0  # the ops length at which to look again whether compaction pays

    # ------------------------------------------------------------------ the journal

    def read(self, upto: int) -> list[tuple[int, int]]:
        """Removal ranges committed since we last looked (not yet applied)."""
        pos0 = self.read_upto
        if upto <= pos0:
            return []
        raw = self.journals.read("ops", upto - pos0, pos0)
        pos, out = 0, list[tuple[int, int]]()
        while pos < len(raw):
            if pos + OPS_RECORD.size > len(raw):
                raise CorruptStoreError(
                    f"{self.journals.path('ops')}: truncated record at {pos0 + pos}", self.journals.path("ops")
                )
            n, crc = OPS_RECORD.unpack_from(raw, pos)
            body = raw[pos + OPS_RECORD.size : pos + OPS_RECORD.size + 16 * n]
            if len(body) != 16 * n or zlib.crc32(body) != crc:
                raise CorruptStoreError(
                    f"{self.journals.path('ops')}: record at {pos0 + pos} fails its checksum", self.journals.path("ops")
                )
            out.extend((int(a), int(b)) for a, b in np.frombuffer(body, dtype="<u8").reshape(-1, 2))
            pos += OPS_RECORD.size + 16 * n
        self.read_upto = upto
        return out

    def write(self, runs, h: StreamHeader) -> None:
        """Journal these removal runs (under the lock); the caller applies them."""
        rec = encode(runs)
        self.journals.write("ops", rec, h.ops_len)
        h.ops_len += len(rec)
        self.read_upto = h.ops_len

    def compact(self, h: StreamHeader) -> None:
        """After a removal was journalled (under the lock): once most of ``ops`` is dead
        (ranges now below first_seq, or one removal split over many records), rewrite it as
        the removed runs at and above first_seq, one record."""
        compact_min = journals_mod.COMPACT_MIN
        if h.ops_len < self.compact_at:
            return
        self.compact_at = h.ops_len + max(h.ops_len // 4, compact_min // 4)
        if h.ops_len < compact_min:
            return
        runs = self.runs(h.first_seq, h.last_seq)
        rec = encode(runs) if len(runs) else b""
        if 2 * len(rec) > h.ops_len:
            return
        if self.journals.replace("ops", lambda nfd: os.pwrite(nfd, rec, 0) if rec else None, h):
            h.ops_len = self.read_upto = len(rec)
            self.compact_at = max(2 * len(rec), compact_min)

    # ------------------------------------------------------------------ the bitmap

    def apply(self, ranges) -> None:
        for a, b in ranges:
            lo = max(a, self.base)
            if lo <= b:
                self._reach(b)
                self.bitmap[lo - self.base : b - self.base + 1] = True

    def _reach(self, seq: int) -> None:
        need = seq - self.base + 1
        if need > len(self.bitmap):
            grow = max(need, 2 * len(self.bitmap), 1024)
            self.bitmap = np.concatenate([self.bitmap, np.zeros(grow - len(self.bitmap), dtype=bool)])

    def rebase(self, new_base: int) -> None:
        """Sequences below ``new_base`` are gone anyway (first_seq moved): forget their bits
        when that frees enough of the bitmap."""
        shift = new_base - self.base
        if shift <= 0:
            return
        if shift >= len(self.bitmap):
            if len(self.bitmap):
                self.bitmap = np.zeros(0, dtype=bool)
        elif shift > 4096 and shift * 2 > len(self.bitmap):
            self.bitmap = self.bitmap[shift:].copy()
        else:
            return  # cheap to keep; rebase later
        self.base = new_base

    def mask(self, a: int, b: int) -> np.ndarray:
        """True where a sequence in a..b (all >= first_seq) was removed."""
        out = np.zeros(b - a + 1, dtype=bool)
        lo = a - self.base
        hi = min(b - self.base + 1, len(self.bitmap))
        if hi > lo:
            start = max(lo, 0)
            out[start - lo : hi - lo] = self.bitmap[start:hi]
        return out

    def is_removed(self, seq: int) -> bool:
        i = seq - self.base
        return 0 <= i < len(self.bitmap) and bool(self.bitmap[i])

    def first_kept(self, seq: int, last: int) -> int:
        """The first sequence in seq..last not removed, or last + 1 (seq >= first_seq)."""
        bitmap = self.bitmap
        i = seq - self.base
        if seq <= last and (i >= len(bitmap) or (i >= 0 and not bitmap[i])):
            return seq  # the common case, without slicing the bitmap
        while seq <= last:
            lo = seq - self.base
            if lo >= len(bitmap):
                return seq
            chunk = bitmap[lo : lo + (1 << 16)]
            free = np.flatnonzero(~chunk)
            if len(free):
                return min(seq + int(free[0]), last + 1)
            seq += len(chunk)
        return last + 1

    def runs(self, a: int, b: int) -> np.ndarray:
        """Removed sequences in a..b as (first, last) rows, little-endian u64."""
        if b < a:
            return np.zeros((0, 2), dtype="<u8")
        m = np.concatenate(([0], self.mask(a, b).view(np.int8), [0]))
        d = np.diff(m)
        starts = np.flatnonzero(d == 1)
        ends = np.flatnonzero(d == -1) - 1
        return np.stack([starts + a, ends + a], axis=1).astype("<u8")
