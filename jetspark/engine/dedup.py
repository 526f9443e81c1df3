"""The duplicate window: the ``dedup`` and ``dedup_ranges`` journals and their caches.

``dedup`` holds one record per stored Nats-Msg-Id::

    i64 ts | u64 seq | 16-byte blake2b of the id | u32 crc

and ``dedup_ranges`` one record per batch of generated ids
``<prefix><n>`` for n in first..last, stored at consecutive sequences from
seq, so such a batch costs one record, not one per row::

    i64 ts | u64 seq | blake2b(prefix) | u64 first | u64 last | u32 crc

Both are in time order, so the window's part of a journal is found by
bisection and everything before it is dead: once that is most of a journal,
``compact`` keeps only the window (journals.py replaces the file).  Each
process builds its dict of the window's ids the first time it checks one,
and forgets ids that left the window whenever the dict has doubled since it
last pruned, so memory follows the window, not the stream's history.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Optional

import numpy as np

from jetspark.engine import diskio
from jetspark.engine import journals as journals_mod
from jetspark.engine.journals import Journals
from jetspark.engine.records import DEDUP, DEDUP_DTYPE, RANGE, record_checks, sealed
from jetspark.engine.state_header import StreamHeader
from jetspark.errors import CorruptStoreError

# The caches are never pruned below this many ids (read through the module: tests lower it).
CACHE_MIN = 4096
_TS = struct.Struct("<q")

IdsCache = dict[bytes, tuple[int, int]]  # id hash -> (seq, ts)
RangesCache = dict[bytes, list[tuple[int, int, int, int]]]  # prefix hash -> [(first, last, seq, ts)]


class MessageIds:
    """This process's view of the duplicate window (both journals)."""

    def __init__(self, journals: Journals) -> None:
        self.journals = journals
        self.ids: Optional[IdsCache] = None  # None: not built (or dropped past its cap)
        self.ids_upto = 0  # dedup bytes read into ``ids``
        self.ranges: Optional[RangesCache] = None
        self.ranges_upto = 0
        self.ranges_n = 0  # range records in ``ranges``
        self.ids_cap = self.ranges_cap = CACHE_MIN  # prune the caches past this size
        # Journal lengths at which to look again whether compaction pays (see compact).
        self.compact_at = {"dedup": 0, "dedup_ranges": 0}

    def forget(self, kind: str) -> None:
        """The journal's file was replaced: offsets into the old one mean nothing."""
        if kind == "dedup":
            self.ids, self.ids_upto = None, 0
        else:
            self.ranges, self.ranges_upto, self.ranges_n = None, 0, 0

    def catch_up(self, h: StreamHeader) -> None:
        """Read what other processes appended.  Past their cap the caches are dropped rather
        than grown: ensure_ids/ensure_ranges rebuild them from the window when this process
        next checks an id."""
        if self.ids is not None:
            if len(self.ids) + (h.dedup_len - self.ids_upto) // DEDUP.size > self.ids_cap:
                self.ids = None
            else:
                self._read_ids(self.ids, h.dedup_len)
        if self.ranges is not None:
            if self.ranges_n + (h.ranges_len - self.ranges_upto) // RANGE.size > self.ranges_cap:
                self.ranges = None
            else:
                self._read_ranges(self.ranges, h.ranges_len)

    # ------------------------------------------------------------------ lookups

    def ensure_ids(self, h: StreamHeader, now: int, window_ns: int) -> IdsCache:
        """Ids stored within the window: id hash -> (seq, ts)."""
        d = self.ids
        if d is None:
            self.ids = d = {}
            self.ids_upto = self._window_start("dedup", DEDUP.size, h.dedup_len, now - window_ns)
            self._read_ids(d, h.dedup_len)
            self.ids_cap = max(2 * len(d), CACHE_MIN)
        elif len(d) > self.ids_cap:
            cutoff = now - window_ns  # live while now - ts < window (Stream._duplicate)
            self.ids = d = {k: v for k, v in d.items() if v[1] > cutoff}
            self.ids_cap = max(2 * len(d), CACHE_MIN)
        return d

    def ensure_ranges(self, h: StreamHeader, now: int, window_ns: int) -> RangesCache:
        """As ensure_ids, for the ranges of generated-id batches: prefix hash -> ranges."""
        r = self.ranges
        if r is None:
            self.ranges = r = {}
            self.ranges_n = 0
            self.ranges_upto = self._window_start("dedup_ranges", RANGE.size, h.ranges_len, now - window_ns)
            self._read_ranges(r, h.ranges_len)
            self.ranges_cap = max(2 * self.ranges_n, CACHE_MIN)
        elif self.ranges_n > self.ranges_cap:
            cutoff = now - window_ns
            kept = ((k, [x for x in v if x[3] > cutoff]) for k, v in r.items())
            self.ranges = r = {k: v for k, v in kept if v}
            self.ranges_n = sum(map(len, r.values()))
            self.ranges_cap = max(2 * self.ranges_n, CACHE_MIN)
        return r

    def _window_start(self, kind: str, size: int, total: int, cutoff: int) -> int:
        """Offset of a time-ordered journal's first record with ts >= cutoff (bisection)."""
        held = os.fstat(self.journals.fds[kind]).st_size
        if held < total:
            path = self.journals.path(kind)
            raise CorruptStoreError(
                f"{path}: the file holds {held} of the {total} bytes the stream header commits (truncated or removed); "
                "check_stream(name, repair=True) forgets the missing ids",
                path,
            )
        lo, hi = 0, total // size
        while lo < hi:
            mid = (lo + hi) // 2
            (ts,) = _TS.unpack(self._read(kind, 8, mid * size))
            if ts < cutoff:
                lo = mid + 1
            else:
                hi = mid
        return lo * size

    def _read_ids(self, ids: IdsCache, upto: int) -> None:
        """Read the id records up to byte ``upto`` into ``ids`` (the cache, built)."""
        if upto <= self.ids_upto:
            return
        raw = self._read("dedup", upto - self.ids_upto, self.ids_upto)
        self._check_records(raw, DEDUP.size, "dedup", self.ids_upto)
        for ts, seq, h, _ in DEDUP.iter_unpack(raw):
            ids[h] = (seq, ts)
        self.ids_upto = upto

    def _read_ranges(self, ranges: RangesCache, upto: int) -> None:
        """Read the range records up to byte ``upto`` into ``ranges`` (the cache, built)."""
        if upto <= self.ranges_upto:
            return
        raw = self._read("dedup_ranges", upto - self.ranges_upto, self.ranges_upto)
        self._check_records(raw, RANGE.size, "dedup_ranges", self.ranges_upto)
        for ts, seq, h, first, last, _ in RANGE.iter_unpack(raw):
            ranges.setdefault(h, []).append((first, last, seq, ts))
        self.ranges_n += len(raw) // RANGE.size
        self.ranges_upto = upto

    def _read(self, kind: str, n: int, off: int) -> bytes:
        """Committed bytes of a journal; a file cut short or removed is damage, reported with
        its repair (it was a raw struct.error from the bisection)."""
        try:
            return self.journals.read(kind, n, off)
        except CorruptStoreError as exc:
            raise CorruptStoreError(
                f"{exc.args[0]}; check_stream(name, repair=True) forgets the missing ids", exc.path
            ) from None

    def _check_records(self, raw: bytes, size: int, kind: str, base: int) -> None:
        ok = record_checks(raw, size)
        if not ok.all():
            path = self.journals.path(kind)
            at = base + int(np.flatnonzero(~ok)[0]) * size
            raise CorruptStoreError(
                f"{path}: the record at byte {at} fails its checksum ({int((~ok).sum())} damaged); "
                "check_stream(name, repair=True) drops the damaged ids",
                path,
            )

    # ------------------------------------------------------------------ recording (under the lock)

    def add(self, hdr: StreamHeader, id_hash: bytes, seq: int, ts: int) -> None:
        self.journals.write("dedup", sealed(DEDUP, ts, seq, id_hash), hdr.dedup_len)
        hdr.dedup_len += DEDUP.size
        self.ids_upto = hdr.dedup_len
        if self.ids is not None:
            self.ids[id_hash] = (seq, ts)

    def add_many(self, hdr: StreamHeader, hashes: list[bytes], seqs: np.ndarray, ts: int) -> None:
        recs = np.zeros(len(hashes), dtype=DEDUP_DTYPE)
        recs["ts"] = ts
        recs["seq"] = seqs
        recs["h"] = np.frombuffer(b"".join(hashes), dtype="V16")
        raw = recs.tobytes()
        mv = memoryview(raw)
        size = DEDUP.size
        recs["crc"] = np.fromiter(
            map(zlib.crc32, map(mv.__getitem__, map(slice, range(0, len(raw), size), range(size - 4, len(raw), size)))),
            dtype=np.uint32,
            count=len(recs),
        )
        self.journals.write("dedup", recs.tobytes(), hdr.dedup_len)
        hdr.dedup_len += recs.nbytes
        self.ids_upto = hdr.dedup_len
        if self.ids is not None:
            self.ids.update(zip(hashes, zip(seqs.tolist(), [ts] * len(hashes))))

    def add_range(self, hdr: StreamHeader, prefix_hash: bytes, first: int, last: int, seq: int, ts: int) -> None:
        self.journals.write("dedup_ranges", sealed(RANGE, ts, seq, prefix_hash, first, last), hdr.ranges_len)
        hdr.ranges_len += RANGE.size
        self.ranges_upto = hdr.ranges_len
        if self.ranges is not None:
            self.ranges.setdefault(prefix_hash, []).append((first, last, seq, ts))
            self.ranges_n += 1

    # ------------------------------------------------------------------ compaction and repair (under the lock)

    def compact(self, hdr: StreamHeader, now: int, window_ns: int) -> None:
        """After recording ids: drop the part of the journals that left the window once it is
        most of them.  A cheap comparison unless a journal has grown by a quarter since it
        was last looked at."""
        cutoff = now - window_ns
        if hdr.dedup_len >= self.compact_at["dedup"]:
            self._compact_timed(hdr, "dedup", DEDUP.size, cutoff)
        if hdr.ranges_len >= self.compact_at["dedup_ranges"]:
            self._compact_timed(hdr, "dedup_ranges", RANGE.size, cutoff)

    def _compact_timed(self, hdr: StreamHeader, kind: str, size: int, cutoff: int) -> None:
        """Keep the records of a time-ordered journal from the first with ts >= cutoff on."""
        compact_min = journals_mod.COMPACT_MIN
        attr = "dedup_len" if kind == "dedup" else "ranges_len"
        total = getattr(hdr, attr)
        fd = self.journals.fds[kind]
        dead = self._window_start(kind, size, total, cutoff)
        live = total - dead
        self.compact_at[kind] = total + max(total // 4, compact_min // 4)
        if dead < live or total < compact_min:
            return
        path = self.journals.path(kind)

        def write(nfd: int) -> None:
            pos = dead
            while pos < total:
                chunk = os.pread(fd, min(total - pos, 4 << 20), pos)
                if not chunk:
                    raise CorruptStoreError(f"{path}: shorter than its committed {total} bytes", path)
                os.pwrite(nfd, chunk, pos - dead)
                pos += len(chunk)

        if self.journals.replace(kind, write, hdr):
            setattr(hdr, attr, live)
            if kind == "dedup":
                self.ids_upto = max(self.ids_upto - dead, 0)
            else:
                self.ranges_upto = max(self.ranges_upto - dead, 0)
            self.compact_at[kind] = max(2 * live, compact_min)

    def damaged_records(self, hdr: StreamHeader, kind: str, repair: bool) -> int:
        """How many records of the ``dedup`` or ``dedup_ranges`` journal fail their checksum;
        with ``repair``, the journal is rewritten without them."""
        size = DEDUP.size if kind == "dedup" else RANGE.size
        attr = "dedup_len" if kind == "dedup" else "ranges_len"
        total = getattr(hdr, attr)
        raw = os.pread(self.journals.fds[kind], total, 0)
        raw = raw[: len(raw) - len(raw) % size]
        ok = record_checks(raw, size)
        bad = int((~ok).sum()) + (total - len(raw)) // size
        if bad and repair:
            keep = np.frombuffer(raw, dtype=np.uint8).reshape(-1, size)[ok].tobytes()
            path = self.journals.path(kind)

            def write(nfd: int) -> None:
                diskio.pwrite(nfd, keep, 0, path)

            if self.journals.replace(kind, write, hdr):
                setattr(hdr, attr, len(keep))
                self.ids = self.ranges = None  # rebuilt from the new file when needed
                self.ids_upto = self.ranges_upto = 0
        return bad
