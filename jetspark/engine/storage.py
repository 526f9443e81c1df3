"""One stream's files: append-only columns, a shared commit header, and cross-process locking.

Layout of a stream's data directory::

    state              4 KiB header, mmap'd by every process: two checksummed
                       slots (first_seq, last_seq, msgs, bytes, committed file
                       lengths, ...) and the index of the active one
    subjects           the subject dictionary: u16 len | u32 crc | utf-8, ids in order
    ops                removals that are not a head truncation: u32 n | u32 crc | n x (u64 first, u64 last)
    dedup              Nats-Msg-Id records: i64 ts | u64 seq | 16-byte blake2b of the id
    dedup_ranges       generated-id batches: i64 ts | u64 seq | blake2b(prefix) | u64 first | u64 last
    blk/<seq>.idx      one 40-byte entry per sequence (ts, data/header offsets and
                       lengths, subject id, crc32 of the record)
    blk/<seq>.dat      payloads only, back to back: a range read slices them into
                       an Arrow binary column without touching each message
    blk/<seq>.hdr      NATS header blocks, back to back

Durability by ordering: a writer holds the stream's ``flock``, writes the
record bytes (``pwrite``), and only then publishes a new header slot; a
reader trusts nothing past the committed lengths.  A process killed halfway
leaves bytes past the commit point, which the next writer overwrites, so a
publish that returned is there and sequences stay gapless.  Flipping the
active slot is a single aligned 8-byte store, so the header itself is never
half-updated.  Files no longer referenced (blocks below the first sequence)
are removed only after the commit that drops them.

Every process keeps caches derived from these files (the subject dictionary,
a bitmap of removed sequences, per-subject counts, the dedup window) and
brings them up to date from the committed lengths whenever the header's
commit counter moved.  Removing the oldest messages moves ``first_seq`` and
writes nothing else; other removals append a range record to ``ops``.

Bounded growth: disk and memory follow what the stream retains, not its history.

- The journals (``ops``, ``dedup``, ``dedup_ranges``) are compacted once most of
  a journal is dead: ``dedup`` records that left the duplicate window, ``ops``
  ranges below ``first_seq``.  The compacted journal is written to a new file
  ``<journal>.<jgen>`` and published by the header commit that sets ``jgen``
  (the header's journal generation); the file it replaces is unlinked after
  that commit.  So a header never names a missing file, a crash before the
  commit leaves the old journal in force (the new file is an orphan, removed
  by the next compaction), and a process that sees ``jgen`` change reopens
  the journal files (``_open_journals``).
- A tail block whose first half is already removed (the stream retains less
  than half a block) is closed early once it holds ``ROLL_MIN_BYTES``, so the
  removed head goes with the whole block soon after, instead of staying on
  disk until a 64 MiB block fills and drains.  Block files are never modified
  below the commit point, only unlinked: a process reading without the lock
  keeps reading what it opened.
- The in-memory dedup caches forget ids that left the window once they have
  doubled since the last pruning.
"""

from __future__ import annotations

import fcntl
import json
import logging
import mmap
import os
import struct
import threading
import zlib
from bisect import bisect_right
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from jetspark.engine import diskio
from jetspark.engine.blocks import CHECK_EVERY, Block
from jetspark.engine.header import (
    ACTIVE,
    ACTIVE_OFF,
    MAGIC,
    SLOT,
    SLOT_OFF,
    U64,
    Header,
    pack_slot,
    unpack_slot,
)
from jetspark.engine.locking import FORK_GENERATION, FLock
from jetspark.engine.records import (
    DEDUP,
    DEDUP_DTYPE,
    ENTRY,
    ENTRY_SIZE,
    IDX_DTYPE,
    RANGE,
    SID_NONE,
    _merge,
    _mix,
    _rotl1,
    _runs,
    record_checks,
    record_crc,
    record_crcs,
    sealed,
)
from jetspark.errors import APIError, CorruptStoreError, StoreError

log = logging.getLogger("jetspark")
STATE_SIZE = 4096
TAIL_CHECK = 1024  # records verified at the end of each stream when a process opens it

BLOCK_MAX_MSGS = 1 << 20
BLOCK_MAX_BYTES = 64 << 20
# A tail block that is at least half removed is closed at this size (index + payloads + headers).
ROLL_MIN_BYTES = 4 << 20
# Journals smaller than this are never compacted; the in-memory dedup caches are never pruned below this many ids.
COMPACT_MIN = 256 << 10
CACHE_MIN = 4096

_JOURNALS = ("ops", "dedup", "dedup_ranges")
_JOURNAL_FD = {"ops": "_ops_fd", "dedup": "_dedup_fd", "dedup_ranges": "_ranges_fd"}
_TS = struct.Struct("<q")
_ENTRY_SIZES = struct.Struct("<III")  # dlen, hlen, sid of an index entry (records.ENTRY)
_ENTRY_SIZES_OFF = 24

_SUBJ_HDR = struct.Struct("<HI")
_OPS_HDR = struct.Struct("<II")


class _Moved(CorruptStoreError):
    """A file changed under a read made without the lock (a journal was replaced, a block
    dropped): refresh() reads the header again.  Under the lock nothing moves, so there
    it means the file is missing: damage."""



class StreamStorage:
    """The files of one stream and this process's caches of them.

    Mutations happen inside ``with storage.locked():``, which takes the
    cross-process lock, brings the caches up to date, and commits the header
    on a clean exit.  Reads outside the lock call ``refresh()`` first.
    """

    def __init__(self, data_dir: Path, lock_path: Path, *, memory: bool, fsync: bool) -> None:
        self.dir = Path(data_dir)
        self.lock_path = Path(lock_path)
        self.memory = memory
        self.fsync = fsync and not memory
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._open()

    # ------------------------------------------------------------------ open / close

    def _open(self) -> None:
        self._fork_gen = FORK_GENERATION[0]
        with diskio.io_errors(self.dir, "opening the stream's files"):
            (self.dir / "blk").mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            self._state_fd = os.open(self.dir / "state", os.O_RDWR | os.O_CREAT, 0o644)
            self._subj_fd = os.open(self.dir / "subjects", os.O_RDWR | os.O_CREAT, 0o644)
            self._ops_fd = os.open(self.dir / "ops", os.O_RDWR | os.O_CREAT, 0o644)
            self._dedup_fd = os.open(self.dir / "dedup", os.O_RDWR | os.O_CREAT, 0o644)
            self._ranges_fd = os.open(self.dir / "dedup_ranges", os.O_RDWR | os.O_CREAT, 0o644)
        if not self._state_written():
            with self._flock():
                if not self._state_written():
                    self._create_state()
        # The header is stored into through a mapping: its page must be backed (see diskio).
        diskio.allocate(self._state_fd, 0, STATE_SIZE, self.dir / "state")
        self._mm = mmap.mmap(self._state_fd, STATE_SIZE)
        if self._mm[0:8] != MAGIC:
            raise CorruptStoreError(f"{self.dir / 'state'}: not a jetspark stream header (bad magic)", self.dir / "state")
        self._blocks: list[Block] = []
        self._block_firsts: list[int] = []
        self._jgen = 0  # the header journal generation the open journal files belong to
        self._jgens = dict.fromkeys(_JOURNALS, 0)  # each open journal file's own generation
        self._retired: list[tuple[int, Path]] = []  # replaced journal files, unlinked after the commit
        self._reset_caches()
        self.refresh()
        if not self._tail_intact():
            self._repair_tail()
        if self._orphans():
            with self.locked():
                for path in self._orphans():
                    path.unlink(missing_ok=True)

    def _create_state(self) -> None:
        """A new stream's header (under the lock).  A missing or short header beside
        stored data is damage, not a new stream: starting empty would hide every message."""
        path = self.dir / "state"
        if os.pread(self._state_fd, STATE_SIZE, 0).strip(b"\0") or self._has_data():
            raise CorruptStoreError(
                f"{path}: the stream header is missing or truncated ({os.fstat(self._state_fd).st_size} of "
                f"{STATE_SIZE} bytes) while the stream holds data; check_stream(name, repair=True) rebuilds it "
                "from the blocks",
                path,
            )
        diskio.allocate(self._state_fd, 0, STATE_SIZE, path)
        mm = mmap.mmap(self._state_fd, STATE_SIZE)
        try:
            self._mm = mm
            self._write_slot(0, Header())
            self._write_slot(1, Header())
            mm[ACTIVE_OFF:ACTIVE_OFF + 8] = ACTIVE[0]
            mm[0:8] = MAGIC  # last: a header without its magic is not one
        finally:
            mm.close()

    def _state_written(self) -> bool:
        """Does the header file hold a header (its magic is written last)?"""
        return os.fstat(self._state_fd).st_size >= STATE_SIZE and os.pread(self._state_fd, 8, 0) == MAGIC

    def _has_data(self) -> bool:
        return any((self.dir / "blk").glob("*.idx")) or any(
            os.fstat(fd).st_size for fd in (self._subj_fd, self._ops_fd, self._dedup_fd, self._ranges_fd)
        )

    def _orphans(self) -> list[Path]:
        """Block files a crash left behind: wholly below first_seq, or past last_seq + 1."""
        firsts = sorted(int(p.name[:-4], 16) for p in (self.dir / "blk").glob("*.idx"))
        h = self.h
        dead = []
        for i, first in enumerate(firsts):
            end = firsts[i + 1] if i + 1 < len(firsts) else h.last_seq + 1
            if end <= h.first_seq or first > h.last_seq + 1:
                dead.append(first)
        return [self.dir / "blk" / f"{f:016x}{ext}" for f in dead for ext in (".idx", ".dat", ".hdr", ".sum")]

    # ------------------------------------------------------------------ verification and repair

    def bad_records(self, a: int, b: int) -> np.ndarray:
        """The live, stored sequences in a..b whose record is missing, out of bounds or fails
        its checksum (ascending).  Trusts nothing in the index entries it checks."""
        if a > b:
            return np.zeros(0, dtype=np.int64)
        out = []
        seq = a
        while seq <= b:
            i = bisect_right(self._block_firsts, seq) - 1
            if i < 0:  # no block file holds these sequences
                nxt = self._block_firsts[0] if self._block_firsts else b + 1
                out.append(np.arange(seq, min(b, nxt - 1) + 1, dtype=np.int64))
                seq = nxt
                continue
            blk = self._blocks[i]
            end = b if i + 1 >= len(self._blocks) else min(b, self._blocks[i + 1].first - 1)
            out.append(self._bad_in_block(blk, seq, end))
            seq = end + 1
        bad = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
        return bad[~self.dead_mask(a, b)[bad - a]] if len(bad) else bad

    def _bad_in_block(self, blk: Block, lo: int, hi: int) -> np.ndarray:
        have = os.fstat(blk.ifd).st_size // ENTRY_SIZE - (lo - blk.first)
        missing = np.arange(lo + max(have, 0), hi + 1, dtype=np.int64)
        hi = min(hi, lo + have - 1)
        if hi < lo:
            return missing
        e = np.frombuffer(os.pread(blk.ifd, (hi - lo + 1) * ENTRY_SIZE, (lo - blk.first) * ENTRY_SIZE), dtype=IDX_DTYPE)
        stored = e["sid"] != SID_NONE
        dsize, hsize = os.fstat(blk.dfd).st_size, os.fstat(blk.hfd).st_size
        dend = e["doff"].astype(np.int64) + e["dlen"]
        hend = e["hoff"].astype(np.int64) + e["hlen"]
        inside = stored & (dend <= dsize) & (hend <= hsize) & (e["sid"] < max(len(self.subjects), 1))
        ok = ~stored
        if inside.any():
            k = np.flatnonzero(inside)
            d0, d1 = int(e["doff"][k].min()), int(dend[k].max())
            h0, h1 = int(e["hoff"][k].min()), int(hend[k].max())
            data = memoryview(os.pread(blk.dfd, d1 - d0, d0))
            hdr = memoryview(os.pread(blk.hfd, h1 - h0, h0)) if h1 > h0 else memoryview(b"")
            for j in k.tolist():
                r = e[j]
                ds, hs = int(r["doff"]) - d0, int(r["hoff"]) - h0
                crc = record_crc(lo + j, int(r["ts"]), int(r["sid"]), hdr[hs:hs + int(r["hlen"])], data[ds:ds + int(r["dlen"])])
                ok[j] = crc == int(r["crc"])
        return np.concatenate([np.flatnonzero(~ok) + lo, missing]).astype(np.int64)

    def _tail_intact(self) -> bool:
        """Do the last TAIL_CHECK records pass their checks?  The interval checksums decide
        in a few crc32 calls; record by record only when they cannot (see verify)."""
        a, b = max(self.h.first_seq, self.h.last_seq - TAIL_CHECK + 1), self.h.last_seq
        try:
            for blk, lo, hi in self.block_spans(a, b):
                self.verify(blk, lo, hi)
        except CorruptStoreError:
            return not len(self.bad_records(a, b))
        return True

    def _repair_tail(self) -> None:
        """Cut a torn tail: the bad records after the last intact one, which is what a writer
        that died mid-append leaves.  A bad record with intact ones after it is damage, not a
        torn write: it is left in place (reads of it raise, check_stream reports it)."""
        with self.locked():
            h = self.h
            a = max(h.first_seq, h.last_seq - TAIL_CHECK + 1)
            bad = self.bad_records(a, h.last_seq)
            if not len(bad):
                return
            intact = np.setdiff1d(np.flatnonzero(~self.dead_mask(a, h.last_seq)) + a, bad)
            if not len(intact) and a > h.first_seq:
                # Every record checked is bad: not the shape of a torn write; cut nothing blindly.
                log.warning("stream data in %s: the last %d records all fail their checksums; left for check_stream", self.dir, h.last_seq - a + 1)
                return
            cut = int(intact[-1]) + 1 if len(intact) else a
            if (bad < cut).any():
                log.warning("stream data in %s: %d damaged record(s) before sequence %d; reads of them raise CorruptStoreError",
                            self.dir, int((bad < cut).sum()), cut)
            if cut <= h.last_seq:
                self.truncate_after(cut - 1)

    def truncate_after(self, good_last: int) -> None:
        """Forget sequences after good_last (under the lock); recorded in ``lost``."""
        h = self.h
        lost_seqs = [q for q in range(max(good_last + 1, h.first_seq), h.last_seq + 1) if self.is_live(q)]
        log.warning("stream data in %s: records %d..%d are torn or corrupt and were dropped", self.dir, good_last + 1, h.last_seq)
        h.last_seq = good_last
        first = h.first_seq
        h.last_ts = int(self.entries(good_last, good_last)[0]["ts"]) if good_last >= first and good_last > 0 else h.last_ts
        self.recount()
        for b in self._blocks:
            if b.first > good_last + 1:
                self._pending_unlink.append(b)
        self._blocks = [b for b in self._blocks if b.first <= good_last + 1]
        self._block_firsts = [b.first for b in self._blocks]
        self._blocks and setattr(self._blocks[-1], "count", -1)
        self._sync_tail()
        self._recompute_tail_sums()
        self.record_lost(lost_seqs)

    def _recompute_tail_sums(self) -> None:
        """The open interval's checksums from the files (after the tail moved back)."""
        h = self.h
        h.tail_dcrc = h.tail_hcrc = h.tail_icrc = 0
        if not self._blocks or self._blocks[-1].count <= 0:
            return
        b = self._blocks[-1]
        start = b.first + (b.count // CHECK_EVERY) * CHECK_EVERY
        if start > h.last_seq:
            return
        h.tail_dcrc, h.tail_hcrc, h.tail_icrc = self._interval_crcs(b, start, h.last_seq)

    def recount(self) -> None:
        """Count messages, bytes and subjects again from the index (under the lock, after a repair)."""
        h = self.h
        self._stats = None
        msgs = nbytes = 0
        step = 1 << 20
        for a in range(h.first_seq, h.last_seq + 1, step):
            b = min(a + step - 1, h.last_seq)
            e = self.entries(a, b)
            live = ~self.dead_mask(a, b) & (e["sid"] != SID_NONE)
            msgs += int(live.sum())
            nbytes += int(self.sizes(e[live]).sum())
        h.msgs, h.bytes = msgs, nbytes
        h.first_seq = self.next_live(h.first_seq) if msgs else h.last_seq + 1
        self._rebase_dead(h.first_seq)
        h.num_subjects = int((self.ensure_stats()[0] > 0).sum())

    def drop_damaged(self, bad: np.ndarray) -> None:
        """Drop exactly the damaged records ``bad`` (under the lock): a damaged tail is cut,
        others are marked removed; all of them are listed in ``lost``."""
        h = self.h
        badset = set(bad.tolist())
        last_intact = h.last_seq
        while last_intact >= h.first_seq and (last_intact in badset or not self.is_live(last_intact)):
            last_intact -= 1
        inner = bad[bad <= last_intact]
        if len(inner):
            runs = _runs(inner)
            self._write_ops(runs)
            self._apply_dead(runs)
            self.record_lost(inner.tolist())
            log.warning("stream data in %s: dropped %d damaged record(s) at the user's request", self.dir, len(inner))
        if last_intact < h.last_seq and (bad > last_intact).any():
            self.truncate_after(last_intact if last_intact >= h.first_seq else h.first_seq - 1)
        else:
            self.recount()

    def record_lost(self, seqs: list[int]) -> None:
        path = self.dir / "lost.json"
        try:
            prior = json.loads(path.read_text())["msgs"]
        except (FileNotFoundError, ValueError, KeyError):
            prior = []
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"msgs": sorted(set(prior) | set(seqs))}))
        os.replace(tmp, path)

    def lost(self) -> Optional[dict]:
        try:
            msgs = json.loads((self.dir / "lost.json").read_text())["msgs"]
        except (FileNotFoundError, ValueError, KeyError):
            return None
        return {"msgs": msgs, "bytes": 0} if msgs else None

    def _reset_caches(self) -> None:
        self.h = Header(commit=-1)
        self._slot_damaged = False
        self.subjects: list[str] = []
        self.subject_ids: dict[str, int] = {}
        self._subj_lens = np.zeros(0, dtype=np.int64)
        self._subj_len_list: list[int] = []
        self._subj_pos = 0
        self._ops_pos = 0
        self._dead_base = 1
        self._dead = np.zeros(0, dtype=bool)
        self._stats: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None  # (count, first, last) per subject id
        self._stats_views = None  # (self._stats, memoryviews of its arrays), see remove_first
        self._dedup: Optional[dict[bytes, tuple[int, int]]] = None
        self._dedup_pos = 0
        self._ranges: Optional[dict[bytes, list[tuple[int, int, int, int]]]] = None
        self._ranges_pos = 0
        self._ranges_n = 0  # range records in self._ranges
        self._dedup_cap = self._ranges_cap = CACHE_MIN  # prune the caches past this size
        # Journal lengths at which to look again whether compaction pays (see compact_journals).
        self._compact_at = dict.fromkeys(_JOURNALS, 0)
        self._roll_at = 0  # the sequence at which _tail_block looks again whether to close the tail early
        for fd, _ in self._retired:
            # A change that replaced journals failed before its commit: the old files stay in force.
            os.close(fd)
        self._retired = []
        for b in self._blocks:
            b.close()
        self._blocks = []
        self._block_firsts = []

    def close(self) -> None:
        self._reset_caches()
        for fd in (self._lock_fd, self._state_fd, self._subj_fd, self._ops_fd, self._dedup_fd, self._ranges_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self._mm.close()
        except (BufferError, ValueError):
            pass

    def check_fork(self) -> None:
        """After fork the child reopens everything: flock is per open file, not per process."""
        if FORK_GENERATION[0] != self._fork_gen:
            self._thread_lock = threading.RLock()
            self._depth = 0
            self._blocks = []
            self._open()

    # ------------------------------------------------------------------ header

    def _read_slot(self, i: int) -> Optional[Header]:
        off = SLOT_OFF[i]
        return unpack_slot(self._mm[off:off + SLOT.size + 4])

    def _write_slot(self, i: int, h: Header) -> None:
        off = SLOT_OFF[i]
        self._mm[off:off + SLOT.size + 4] = pack_slot(h)

    def read_header(self) -> Header:
        for _ in range(1000):
            active = int.from_bytes(self._mm[ACTIVE_OFF:ACTIVE_OFF + 8], "little")
            h = self._read_slot(active & 1)
            if h is not None:
                return h
            # A writer flipped twice while we read; try again.
        # The active slot stays bad: it is damaged.  Every commit also copies the new
        # header into the other slot (see _commit), so that one holds the same commit.
        h = self._read_slot(1 - (active & 1))
        if h is None:
            raise CorruptStoreError(f"{self.dir / 'state'}: both header slots fail their checksum", self.dir / "state")
        if not self._slot_damaged:
            log.warning("stream header %s: the active slot fails its checksum; using its mirror (commit %d)", self.dir / "state", h.commit)
        self._slot_damaged = True  # the next writer rewrites it (see _Locked)
        return h

    def _repair_slot(self) -> None:
        """Rewrite a damaged active slot from its mirror (under the lock)."""
        active = self._mm[ACTIVE_OFF] & 1
        if self._read_slot(active) is None:
            good = self._read_slot(1 - active)
            if good is not None:
                with diskio.io_errors(self.dir / "state", "repairing the header"):
                    self._write_slot(active, good)
                log.warning("stream header %s: rewrote the damaged active slot from its mirror", self.dir / "state")
        self._slot_damaged = False

    def _committed_counter(self) -> int:
        """The active slot's commit counter; only meaningful while holding the lock (no writer can race)."""
        return U64.unpack_from(self._mm, SLOT_OFF[self._mm[ACTIVE_OFF] & 1])[0]

    def _commit(self) -> None:
        """Publish ``self.h``: fill the inactive slot, flip to it, then mirror it into the
        other slot, so one damaged slot never rolls a commit back."""
        h = self.h
        h.commit += 1
        mm = self._mm
        active = mm[ACTIVE_OFF] & 1
        raw = pack_slot(h)
        try:
            if self.fsync:
                self._sync_files()
            off = SLOT_OFF[1 - active]
            mm[off:off + len(raw)] = raw
            mm[ACTIVE_OFF:ACTIVE_OFF + 8] = ACTIVE[1 - active]
            off = SLOT_OFF[active]
            mm[off:off + len(raw)] = raw
            if self.fsync:
                mm.flush()
        except OSError as exc:
            raise diskio.translate(exc, self.dir / "state", "committing") from exc

    def _sync_files(self) -> None:
        for fd in (self._subj_fd, self._ops_fd, self._dedup_fd, self._ranges_fd):
            os.fdatasync(fd)
        if self._blocks:
            b = self._blocks[-1]
            for fd in (b.ifd, b.dfd, b.hfd):
                os.fdatasync(fd)

    # ------------------------------------------------------------------ locking

    def _flock(self):
        return FLock(self._lock_fd)

    def locked(self) -> "_Locked":
        """Exclusive access across threads and processes; commits on a clean exit."""
        return _Locked(self)

    # ------------------------------------------------------------------ catching up

    def refresh(self) -> None:
        """Bring this process's caches up to the committed header."""
        with self._thread_lock:
            self.check_fork()
            for _ in range(100):
                h = self.read_header()
                if h.commit == self.h.commit:
                    return
                try:
                    self._catch_up(h)
                    return
                except _Moved:
                    continue  # a writer replaced files after we read the header: read it again
            raise CorruptStoreError(f"{self.dir}: the stream's files kept changing under 100 reads of its header", self.dir)

    def _catch_up(self, h: Header) -> None:
        if h.deleted:
            # Final: its files may be gone already (journals replaced since we looked
            # included), and nothing reads this stream's caches again (Stream raises 10059).
            self.h = h
            return
        self._open_journals(h.jgen)
        old = self.h
        if old.commit < 0 or h.commit < old.commit:
            # First load, or the files were replaced: rebuild from scratch.
            self._reset_caches()
            self._dead_base = h.first_seq
            self._read_subjects(h.subj_len)
            self.h = h
            self._rescan_blocks()
            self._apply_dead(self._read_ops(h.ops_len))
            self._prune_blocks()
            self._sync_tail()
            return
        self._read_subjects(h.subj_len)
        self.h = h
        if h.last_seq != old.last_seq or h.first_seq != old.first_seq:
            self._rescan_blocks()
        ranges = self._read_ops(h.ops_len)
        if self._stats is None:
            self._apply_dead(ranges)
        else:
            self._catch_up_stats(old, h, ranges)
        self._rebase_dead(h.first_seq)
        self._prune_blocks()
        self._sync_tail()
        # Past their cap the caches are dropped rather than grown: ensure_dedup/ensure_ranges
        # rebuild them from the window when this process next checks an id.
        if self._dedup is not None:
            if len(self._dedup) + (h.dedup_len - self._dedup_pos) // DEDUP.size > self._dedup_cap:
                self._dedup = None
            else:
                self._read_dedup(h.dedup_len)
        if self._ranges is not None:
            if self._ranges_n + (h.ranges_len - self._ranges_pos) // RANGE.size > self._ranges_cap:
                self._ranges = None
            else:
                self._read_ranges(h.ranges_len)

    def _catch_up_stats(self, old: Header, h: Header, ranges: list[tuple[int, int]]) -> None:
        """Move the per-subject stats from the ``old`` commit to ``h``.

        Counted before: live sequences in old.first..old.last.  Counted after:
        live sequences in h.first..h.last.  Only the touched regions (new
        removal ranges, the head that fell below first_seq, the appended tail)
        are read.
        """
        touched = _merge([(max(a, old.first_seq), min(b, old.last_seq)) for a, b in ranges]
                         + [(old.first_seq, min(h.first_seq - 1, old.last_seq))])
        before = [(a, b, self.dead_mask(a, b)) for a, b in touched]
        self._apply_dead(ranges)
        for a, b, dead_before in before:
            seqs = np.arange(a, b + 1, dtype=np.int64)
            gone = ~dead_before & ((seqs < h.first_seq) | self.dead_mask(a, b))
            if gone.any():
                self._stats_remove_seqs(seqs[gone])
        lo = max(old.last_seq + 1, h.first_seq)
        if lo <= h.last_seq:
            cause = None
            try:
                e = self.entries(lo, h.last_seq)
            except CorruptStoreError as exc:
                e, cause = np.zeros(1, dtype=IDX_DTYPE), exc
            if not e["ts"].all():
                # An entry never written (every stored entry has a time), or none: a block
                # created after our last look was dropped again before we listed the blocks
                # (a fast writer, small blocks).  Start over from a fresh header.
                self._reset_caches()
                raise _Moved(f"{self.dir / 'blk'}: sequences {lo}..{h.last_seq} are not all in the blocks listed ({cause or 'unwritten index entries'})", self.dir / "blk") from cause
            live = ~self.dead_mask(lo, h.last_seq)
            self._stats_add(e["sid"][live], np.arange(lo, h.last_seq + 1, dtype=np.int64)[live])

    def _pread_exact(self, fd: int, n: int, off: int, name: str) -> bytes:
        """Committed bytes of a journal: all there, or the file is damaged (never read as empty)."""
        raw = os.pread(fd, n, off)
        if len(raw) != n:
            path = self.journal_path(name) if name in _JOURNALS else self.dir / name
            raise CorruptStoreError(
                f"{path}: the file ends at byte {off + len(raw)} but the stream header commits {off + n} bytes "
                "(truncated or removed)",
                path,
            )
        return raw

    def _read_subjects(self, upto: int) -> None:
        if upto <= self._subj_pos:
            return
        raw = self._pread_exact(self._subj_fd, upto - self._subj_pos, self._subj_pos, "subjects")
        pos, lens = 0, []
        while pos < len(raw):
            if pos + _SUBJ_HDR.size > len(raw):
                raise CorruptStoreError(f"{self.dir / 'subjects'}: truncated record", self.dir / "subjects")
            n, crc = _SUBJ_HDR.unpack_from(raw, pos)
            b = raw[pos + _SUBJ_HDR.size: pos + _SUBJ_HDR.size + n]
            if len(b) != n or zlib.crc32(b) != crc:
                raise CorruptStoreError(f"{self.dir / 'subjects'}: record at {self._subj_pos + pos} fails its checksum", self.dir / "subjects")
            s = b.decode()
            self.subject_ids[s] = len(self.subjects)
            self.subjects.append(s)
            lens.append(n)
            pos += _SUBJ_HDR.size + n
        self._subj_lens = np.concatenate([self._subj_lens, np.array(lens, dtype=np.int64)])
        self._subj_len_list.extend(lens)
        self._subj_pos = upto
        if self._stats is not None:
            grow = len(self.subjects) - len(self._stats[0])
            if grow > 0:
                self._stats = tuple(np.concatenate([a, np.zeros(grow, np.int64)]) for a in self._stats)

    def _read_ops(self, upto: int) -> list[tuple[int, int]]:
        """Removal ranges committed since we last looked."""
        if upto <= self._ops_pos:
            return []
        raw = self._pread_exact(self._ops_fd, upto - self._ops_pos, self._ops_pos, "ops")
        pos, out = 0, []
        while pos < len(raw):
            if pos + _OPS_HDR.size > len(raw):
                raise CorruptStoreError(f"{self.journal_path('ops')}: truncated record at {self._ops_pos + pos}", self.journal_path("ops"))
            n, crc = _OPS_HDR.unpack_from(raw, pos)
            body = raw[pos + _OPS_HDR.size: pos + _OPS_HDR.size + 16 * n]
            if len(body) != 16 * n or zlib.crc32(body) != crc:
                raise CorruptStoreError(f"{self.journal_path('ops')}: record at {self._ops_pos + pos} fails its checksum", self.journal_path("ops"))
            out.extend((int(a), int(b)) for a, b in np.frombuffer(body, dtype="<u8").reshape(-1, 2))
            pos += _OPS_HDR.size + 16 * n
        self._ops_pos = upto
        return out

    def _apply_dead(self, ranges) -> None:
        for a, b in ranges:
            lo = max(a, self._dead_base)
            if lo <= b:
                self._ensure_dead(b)
                self._dead[lo - self._dead_base: b - self._dead_base + 1] = True

    def _ensure_dead(self, seq: int) -> None:
        need = seq - self._dead_base + 1
        if need > len(self._dead):
            grow = max(need, 2 * len(self._dead), 1024)
            self._dead = np.concatenate([self._dead, np.zeros(grow - len(self._dead), dtype=bool)])

    def _rebase_dead(self, new_base: int) -> None:
        shift = new_base - self._dead_base
        if shift <= 0:
            return
        if shift >= len(self._dead):
            if len(self._dead):
                self._dead = np.zeros(0, dtype=bool)
        elif shift > 4096 and shift * 2 > len(self._dead):
            self._dead = self._dead[shift:].copy()
        else:
            return  # cheap to keep; rebase later
        self._dead_base = new_base

    def _rescan_blocks(self) -> None:
        """Open blocks other processes created; blocks they removed stay open until pruned."""
        names = sorted(int(p.name[:-4], 16) for p in (self.dir / "blk").glob("*.idx"))
        known = {b.first: b for b in self._blocks}
        for first in names:
            # A block past last_seq + 1 belongs to a writer that died before committing it.
            if first <= self.h.last_seq + 1 and first not in known:
                try:
                    known[first] = Block(self.dir / "blk" / f"{first:016x}", first)
                except FileNotFoundError:
                    continue  # unlinked while we listed

        self._blocks = [known[f] for f in sorted(known)]
        self._block_firsts = [b.first for b in self._blocks]

    def _prune_blocks(self) -> None:
        """Close blocks wholly below first_seq (another process has unlinked them).

        That includes the last block once the stream is empty: appending to it
        would write into a file nobody else can see any more.
        """
        f = self.h.first_seq
        while self._blocks:
            end = self._blocks[1].first if len(self._blocks) > 1 else self.h.last_seq + 1
            if end > f:
                break
            self._blocks.pop(0).close()
            self._block_firsts.pop(0)

    # ------------------------------------------------------------------ lookups

    def dead_mask(self, a: int, b: int) -> np.ndarray:
        """True where a sequence in a..b (all >= first_seq) was removed."""
        n = b - a + 1
        out = np.zeros(n, dtype=bool)
        lo = a - self._dead_base
        hi = min(b - self._dead_base + 1, len(self._dead))
        if hi > lo:
            start = max(lo, 0)
            out[start - lo: hi - lo] = self._dead[start:hi]
        return out

    def is_live(self, seq: int) -> bool:
        if seq < self.h.first_seq or seq > self.h.last_seq:
            return False
        i = seq - self._dead_base
        return not (0 <= i < len(self._dead) and self._dead[i])

    def _block_index(self, seq: int) -> int:
        i = bisect_right(self._block_firsts, seq) - 1
        if i < 0:
            raise CorruptStoreError(f"{self.dir / 'blk'}: no block file holds sequence {seq} (removed?)", self.dir / "blk")
        return i

    def entries(self, a: int, b: int) -> np.ndarray:
        """The index entries of sequences a..b (committed, >= first_seq) as one array."""
        if b < a:
            return np.zeros(0, dtype=IDX_DTYPE)
        parts = []
        seq = a
        while seq <= b:
            i = self._block_index(seq)
            blk = self._blocks[i]
            end = b if i + 1 >= len(self._blocks) else min(b, self._blocks[i + 1].first - 1)
            n = end - seq + 1
            raw = os.pread(blk.ifd, n * ENTRY_SIZE, (seq - blk.first) * ENTRY_SIZE)
            if len(raw) != n * ENTRY_SIZE:
                raise CorruptStoreError(f"{blk.path}.idx: the index entries of sequences {seq}..{end} are missing (truncated)", f"{blk.path}.idx")
            parts.append(np.frombuffer(raw, dtype=IDX_DTYPE))
            seq = end + 1
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def block_spans(self, a: int, b: int) -> Iterator[tuple[Block, int, int]]:
        """(block, first, last) pieces of a..b, one per block."""
        seq = a
        while seq <= b:
            i = self._block_index(seq)
            blk = self._blocks[i]
            end = b if i + 1 >= len(self._blocks) else min(b, self._blocks[i + 1].first - 1)
            yield blk, seq, end
            seq = end + 1

    def read_data(self, blk: Block, off: int, n: int) -> bytes:
        return _pread_block(blk.dfd, n, off, f"{blk.path}.dat") if n else b""

    def read_hdrs(self, blk: Block, off: int, n: int) -> bytes:
        return _pread_block(blk.hfd, n, off, f"{blk.path}.hdr") if n else b""

    def verify(self, blk: Block, a: int, b: int, data: Optional[bytes] = None, e: Optional[np.ndarray] = None) -> None:
        """Check the records a..b of ``blk`` before they are served, once per process.

        Each check interval (CHECK_EVERY records, see blocks.py) is checked whole: three
        crc32 calls over its index, payload and header bytes against the block's ``.sum``
        (or, for the tail block's open interval, the stream header).  Where that cannot
        decide (no checksums, or bytes that no longer matter changed: a removed head), each
        live record is checked against its own checksum.  Ranges that passed are remembered
        per block, so reading them again costs nothing.  ``data``/``e``: the payload bytes
        and index entries of a..b when the caller already read them (saves reading twice).
        """
        for lo, hi in blk.verified:
            if lo <= a and b <= hi:
                return
        count = self._block_count(blk)
        K = CHECK_EVERY
        for k in range((a - blk.first) // K, (b - blk.first) // K + 1):
            lo = blk.first + k * K
            hi = min(lo + K, blk.first + count) - 1
            want_lo, want_hi = max(lo, a), min(hi, b)
            if any(v_lo <= want_lo and want_hi <= v_hi for v_lo, v_hi in blk.verified):
                continue
            have = None
            if data is not None and e is not None and a <= lo and hi <= b:
                have = (memoryview(data), int(e["doff"][0]))
            if self._interval_ok(blk, k, lo, hi, count, have):
                blk.verified = _merge(blk.verified + [(lo, hi)])
            else:
                self._verify_records(blk, want_lo, want_hi)
                blk.verified = _merge(blk.verified + [(want_lo, want_hi)])

    def _block_count(self, blk: Block) -> int:
        """Committed records of a block in this process's view."""
        i = bisect_right(self._block_firsts, blk.first) - 1
        nxt = self._blocks[i + 1].first if i + 1 < len(self._blocks) else self.h.last_seq + 1
        return nxt - blk.first

    def _interval_ok(self, blk: Block, k: int, lo: int, hi: int, count: int, have=None) -> bool:
        is_tail = blk is self._blocks[-1]
        if is_tail and hi == self.h.last_seq and count % CHECK_EVERY and hi - lo + 1 == count % CHECK_EVERY:
            want = (self.h.tail_dcrc, self.h.tail_hcrc, self.h.tail_icrc)  # the open interval
        else:
            want = blk.interval_sums(k)
            if want is None:
                return False
        try:
            return self._interval_crcs(blk, lo, hi, have) == want
        except CorruptStoreError:
            return False

    def _interval_crcs(self, blk: Block, lo: int, hi: int, have=None) -> tuple[int, int, int]:
        """CRC-32s of the payload, header and index bytes of records lo..hi, back to back.
        ``have``: (payload bytes, their file offset) already read, used when they cover lo..hi."""
        raw = os.pread(blk.ifd, (hi - lo + 1) * ENTRY_SIZE, (lo - blk.first) * ENTRY_SIZE)
        if len(raw) != (hi - lo + 1) * ENTRY_SIZE:
            raise CorruptStoreError(f"{blk.path}.idx: the index entries of {lo}..{hi} are missing (truncated)", f"{blk.path}.idx")
        first, last = ENTRY.unpack_from(raw, 0), ENTRY.unpack_from(raw, len(raw) - ENTRY_SIZE)
        d0, d1 = first[1], last[1] + last[3]
        h0, h1 = first[2], last[2] + last[4]
        if d1 < d0 or h1 < h0:
            raise CorruptStoreError(f"{blk.path}.idx: the index entries of {lo}..{hi} are out of order", f"{blk.path}.idx")
        if have is not None and have[1] <= d0 and d1 - have[1] <= len(have[0]):
            dcrc = zlib.crc32(have[0][d0 - have[1]:d1 - have[1]])
        else:
            dcrc = zlib.crc32(self.read_data(blk, d0, d1 - d0))
        hcrc = zlib.crc32(self.read_hdrs(blk, h0, h1 - h0)) if h1 > h0 else 0
        return dcrc, hcrc, zlib.crc32(raw)

    def _verify_records(self, blk: Block, a: int, b: int) -> None:
        """Each live record of a..b against its own checksum; raises on the first bad one."""
        bad = self.bad_records(a, b)
        if len(bad):
            seq = int(bad[0])
            raise CorruptStoreError(
                f"{blk.path}.dat: message {seq} fails its checksum ({len(bad)} of {b - a + 1} records in {a}..{b}); "
                "check_stream(name, repair=True) keeps the intact ones",
                f"{blk.path}.dat",
            )

    def read_message(self, seq: int) -> tuple[str, bytes, bytes, int]:
        """(subject, header block, payload, ts) of a live sequence."""
        e = self.entries(seq, seq)[0]
        blk = self._blocks[self._block_index(seq)]
        hdr = self.read_hdrs(blk, int(e["hoff"]), int(e["hlen"]))
        data = self.read_data(blk, int(e["doff"]), int(e["dlen"]))
        sid = int(e["sid"])
        if record_crc(seq, int(e["ts"]), sid, hdr, data) != int(e["crc"]):
            raise CorruptStoreError(f"{blk.path}.dat: message {seq} fails its checksum", f"{blk.path}.dat")
        return self.subjects[sid], hdr, data, int(e["ts"])

    def read_messages(self, seqs: list[int]) -> list[tuple[str, bytes, bytes, int]]:
        """(subject, header block, payload, ts) for each sequence, reading each run of
        consecutive sequences with one pread per file."""
        if seqs and seqs[-1] - seqs[0] == len(seqs) - 1 and all(b > a for a, b in zip(seqs, seqs[1:])):
            return self._read_run(seqs[0], seqs[-1])  # the common case: new deliveries in a row
        found: dict[int, tuple[str, bytes, bytes, int]] = {}
        for a, b in _runs(np.unique(np.asarray(seqs, dtype=np.int64))):
            for q, rec in zip(range(a, b + 1), self._read_run(a, b)):
                found[q] = rec
        return [found[q] for q in seqs]

    def _read_run(self, a: int, b: int) -> list[tuple[str, bytes, bytes, int]]:
        out = []
        names = self.subjects
        for blk, lo, hi in self.block_spans(a, b):
            e = self.entries(lo, hi)
            d0, h0 = int(e["doff"][0]), int(e["hoff"][0])
            data = self.read_data(blk, d0, int(e["doff"][-1]) + int(e["dlen"][-1]) - d0)
            self.verify(blk, lo, hi, data, e)
            hdr = self.read_hdrs(blk, h0, int(e["hoff"][-1]) + int(e["hlen"][-1]) - h0)
            if not hdr:
                out.extend(
                    (names[sid] if sid != SID_NONE else "", b"", data[doff - d0: doff - d0 + dlen], ts)
                    for ts, doff, _, dlen, _, sid, _ in e.tolist()
                )
            else:
                out.extend(
                    (names[sid] if sid != SID_NONE else "", hdr[hoff - h0: hoff - h0 + hlen], data[doff - d0: doff - d0 + dlen], ts)
                    for ts, doff, hoff, dlen, hlen, sid, _ in e.tolist()
                )
        return out

    def sizes(self, e: np.ndarray) -> np.ndarray:
        """Per-message byte accounting as the server counts it (docs/semantics.md §3.1)."""
        slen = self._subj_lens[e["sid"].astype(np.int64)]
        dlen = e["dlen"].astype(np.int64)
        hlen = e["hlen"].astype(np.int64)
        if self.memory:
            return slen + hlen + dlen + 16
        return 30 + slen + dlen + np.where(hlen > 0, hlen + 4, 0)

    def msg_size(self, subject_len: int, hlen: int, dlen: int) -> int:
        if self.memory:
            return subject_len + hlen + dlen + 16
        return 30 + subject_len + dlen + (hlen + 4 if hlen else 0)

    def next_live(self, seq: int) -> int:
        """The first live sequence >= seq, or last_seq + 1."""
        last = self.h.last_seq
        seq = max(seq, self.h.first_seq)
        i = seq - self._dead_base
        if seq <= last and (i >= len(self._dead) or (i >= 0 and not self._dead[i])):
            return seq  # the common case, without slicing the bitmap
        while seq <= last:
            lo = seq - self._dead_base
            if lo >= len(self._dead):
                return seq
            chunk = self._dead[lo: lo + (1 << 16)]
            free = np.flatnonzero(~chunk)
            if len(free):
                return min(seq + int(free[0]), last + 1)
            seq += len(chunk)
        return last + 1

    # ------------------------------------------------------------------ subject stats

    def ensure_stats(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per subject id: live count, first and last live sequence (0 = not known yet).

        Built once per process from the index, then maintained incrementally.
        """
        if self._stats is None:
            n = len(self.subjects)
            self._stats = (np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64))
            first, lastseq = self.h.first_seq, self.h.last_seq
            step = 1 << 20
            for a in range(first, lastseq + 1, step):
                b = min(a + step - 1, lastseq)
                e = self.entries(a, b)
                live = ~self.dead_mask(a, b)
                self._stats_add(e["sid"][live], np.arange(a, b + 1, dtype=np.int64)[live])
        return self._stats

    def _stats_add(self, sids: np.ndarray, seqs: np.ndarray) -> None:
        keep = sids != SID_NONE
        sids, seqs = sids[keep].astype(np.int64), seqs[keep]
        if not len(sids):
            return
        count, first, last = self._stats
        fresh = count[sids] == 0
        count += np.bincount(sids, minlength=len(count))[: len(count)]
        np.maximum.at(last, sids, seqs)
        if fresh.any():
            # Sequences arrive ascending, so the first occurrence is the subject's first.
            u, i = np.unique(sids[fresh], return_index=True)
            first[u] = seqs[fresh][i]

    def _stats_remove_seqs(self, seqs: np.ndarray) -> None:
        """Live sequences that are being removed: take them out of the per-subject stats."""
        count, first, last = self._stats
        sids = np.concatenate([self.entries(int(a), int(b))["sid"] for a, b in _runs(seqs)]).astype(np.int64)
        keep = sids != SID_NONE
        sids, seqs = sids[keep], seqs[keep]
        if not len(sids):
            return
        count -= np.bincount(sids, minlength=len(count))[: len(count)]
        # A removed first or last is looked up again when someone asks (0 = unknown).
        last[sids[last[sids] == seqs]] = 0
        first[sids[first[sids] == seqs]] = 0

    def subject_count(self, sid: int) -> int:
        return int(self.ensure_stats()[0][sid])

    def subject_last(self, sid: int) -> int:
        """The last live sequence of a subject, or 0."""
        count, first, last = self.ensure_stats()
        if count[sid] <= 0:
            return 0
        if last[sid] == 0:
            last[sid] = self._scan(sid, forward=False)
        return int(last[sid])

    def subject_first(self, sid: int) -> int:
        """The first live sequence of a subject, or 0."""
        count, first, last = self.ensure_stats()
        if count[sid] <= 0:
            return 0
        if count[sid] == 1:
            return self.subject_last(sid)
        if first[sid] == 0:
            first[sid] = self._scan(sid, forward=True)
        return int(first[sid])

    def _scan(self, sid: int, *, forward: bool) -> int:
        step = 1 << 16
        lo, hi = self.h.first_seq, self.h.last_seq
        if forward:
            for a in range(lo, hi + 1, step):
                b = min(a + step - 1, hi)
                hit = np.flatnonzero((self.entries(a, b)["sid"] == sid) & ~self.dead_mask(a, b))
                if len(hit):
                    return a + int(hit[0])
            return 0
        b = hi
        while b >= lo:
            a = max(lo, b - step + 1)
            hit = np.flatnonzero((self.entries(a, b)["sid"] == sid) & ~self.dead_mask(a, b))
            if len(hit):
                return a + int(hit[-1])
            b = a - 1
        return 0

    def seqs_of_subjects(self, sid_mask: np.ndarray, a: int, b: int) -> np.ndarray:
        """Live sequences in a..b whose subject id is set in ``sid_mask``."""
        out = []
        step = 1 << 20
        for lo in range(a, b + 1, step):
            hi = min(lo + step - 1, b)
            e = self.entries(lo, hi)
            sids = e["sid"].astype(np.int64)
            ok = (sids < len(sid_mask)) & ~self.dead_mask(lo, hi)
            ok[ok] = sid_mask[sids[ok]]
            out.append(np.flatnonzero(ok) + lo)
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    # ------------------------------------------------------------------ dedup

    def ensure_dedup(self, now: int, window_ns: int) -> dict[bytes, tuple[int, int]]:
        """Ids stored within the window: id hash -> (seq, ts).  Built from the window's part
        of the journal; ids that left the window are dropped whenever the dict has doubled
        since the last pruning, so it tracks the window, not the stream's history."""
        d = self._dedup
        if d is None:
            self._dedup = d = {}
            self._dedup_pos = self._window_start(self._dedup_fd, DEDUP.size, self.h.dedup_len, now - window_ns)
            self._read_dedup(self.h.dedup_len)
            self._dedup_cap = max(2 * len(d), CACHE_MIN)
        elif len(d) > self._dedup_cap:
            cutoff = now - window_ns  # live while now - ts < window (Stream._duplicate)
            self._dedup = d = {k: v for k, v in d.items() if v[1] > cutoff}
            self._dedup_cap = max(2 * len(d), CACHE_MIN)
        return d

    def _window_start(self, fd: int, size: int, total: int, cutoff: int) -> int:
        """Offset of a time-ordered journal's first record with ts >= cutoff (bisection)."""
        lo, hi = 0, total // size
        while lo < hi:
            mid = (lo + hi) // 2
            (ts,) = _TS.unpack(os.pread(fd, 8, mid * size))
            if ts < cutoff:
                lo = mid + 1
            else:
                hi = mid
        return lo * size

    def _read_dedup(self, upto: int) -> None:
        if upto <= self._dedup_pos:
            return
        raw = self._pread_exact(self._dedup_fd, upto - self._dedup_pos, self._dedup_pos, "dedup")
        self._check_journal_records(raw, DEDUP.size, "dedup", self._dedup_pos)
        for ts, seq, h, _ in DEDUP.iter_unpack(raw):
            self._dedup[h] = (seq, ts)
        self._dedup_pos = upto

    # Ranges of ids "<prefix><n>" for n in first..last, stored at consecutive sequences
    # from seq: a batch with generated ids costs one record, not one per row.

    def ensure_ranges(self, now: int, window_ns: int) -> dict[bytes, list[tuple[int, int, int, int]]]:
        """As ensure_dedup, for the ranges of generated-id batches: prefix hash -> ranges."""
        r = self._ranges
        if r is None:
            self._ranges = r = {}
            self._ranges_n = 0
            self._ranges_pos = self._window_start(self._ranges_fd, RANGE.size, self.h.ranges_len, now - window_ns)
            self._read_ranges(self.h.ranges_len)
            self._ranges_cap = max(2 * self._ranges_n, CACHE_MIN)
        elif self._ranges_n > self._ranges_cap:
            cutoff = now - window_ns
            kept = ((k, [x for x in v if x[3] > cutoff]) for k, v in r.items())
            self._ranges = r = {k: v for k, v in kept if v}
            self._ranges_n = sum(map(len, r.values()))
            self._ranges_cap = max(2 * self._ranges_n, CACHE_MIN)
        return r

    def _read_ranges(self, upto: int) -> None:
        if upto <= self._ranges_pos:
            return
        raw = self._pread_exact(self._ranges_fd, upto - self._ranges_pos, self._ranges_pos, "dedup_ranges")
        self._check_journal_records(raw, RANGE.size, "dedup_ranges", self._ranges_pos)
        for ts, seq, h, first, last, _ in RANGE.iter_unpack(raw):
            self._ranges.setdefault(h, []).append((first, last, seq, ts))
        self._ranges_n += len(raw) // RANGE.size
        self._ranges_pos = upto

    def _check_journal_records(self, raw: bytes, size: int, kind: str, base: int) -> None:
        ok = record_checks(raw, size)
        if not ok.all():
            path = self.journal_path(kind)
            at = base + int(np.flatnonzero(~ok)[0]) * size
            raise CorruptStoreError(
                f"{path}: the record at byte {at} fails its checksum ({int((~ok).sum())} damaged); "
                "check_stream(name, repair=True) drops the damaged ids",
                path,
            )

    def damaged_id_records(self, kind: str, repair: bool) -> int:
        """How many records of the ``dedup`` or ``dedup_ranges`` journal fail their checksum
        (under the lock); with ``repair``, the journal is rewritten without them."""
        size = DEDUP.size if kind == "dedup" else RANGE.size
        attr = "dedup_len" if kind == "dedup" else "ranges_len"
        total = getattr(self.h, attr)
        fd = getattr(self, _JOURNAL_FD[kind])
        raw = os.pread(fd, total, 0)
        raw = raw[: len(raw) - len(raw) % size]
        ok = record_checks(raw, size)
        bad = int((~ok).sum()) + (total - len(raw)) // size
        if bad and repair:
            keep = np.frombuffer(raw, dtype=np.uint8).reshape(-1, size)[ok].tobytes()

            def write(nfd: int) -> None:
                diskio.pwrite(nfd, keep, 0, self.journal_path(kind))

            if self._replace_journal(kind, write):
                setattr(self.h, attr, len(keep))
                self._dedup = self._ranges = None  # rebuilt from the new file when needed
                self._dedup_pos = self._ranges_pos = 0
        return bad

    def add_range(self, prefix_hash: bytes, first: int, last: int, seq: int, ts: int) -> None:
        diskio.pwrite(self._ranges_fd, sealed(RANGE, ts, seq, prefix_hash, first, last), self.h.ranges_len, self.journal_path("dedup_ranges"))
        self.h.ranges_len += RANGE.size
        self._ranges_pos = self.h.ranges_len
        if self._ranges is not None:
            self._ranges.setdefault(prefix_hash, []).append((first, last, seq, ts))
            self._ranges_n += 1

    def add_dedup_many(self, hashes: list[bytes], seqs: np.ndarray, ts: int) -> None:
        recs = np.zeros(len(hashes), dtype=DEDUP_DTYPE)
        recs["ts"] = ts
        recs["seq"] = seqs
        recs["h"] = np.frombuffer(b"".join(hashes), dtype="V16")
        raw = recs.tobytes()
        mv = memoryview(raw)
        size = DEDUP.size
        recs["crc"] = np.fromiter(
            map(zlib.crc32, map(mv.__getitem__, map(slice, range(0, len(raw), size), range(size - 4, len(raw), size)))),
            dtype=np.uint32, count=len(recs),
        )
        diskio.pwrite(self._dedup_fd, recs.tobytes(), self.h.dedup_len, self.journal_path("dedup"))
        self.h.dedup_len += recs.nbytes
        self._dedup_pos = self.h.dedup_len
        if self._dedup is not None:
            self._dedup.update(zip(hashes, zip(seqs.tolist(), [ts] * len(hashes))))

    def add_dedup(self, h: bytes, seq: int, ts: int) -> None:
        diskio.pwrite(self._dedup_fd, sealed(DEDUP, ts, seq, h), self.h.dedup_len, self.journal_path("dedup"))
        self.h.dedup_len += DEDUP.size
        self._dedup_pos = self.h.dedup_len
        if self._dedup is not None:
            self._dedup[h] = (seq, ts)

    # ------------------------------------------------------------------ journal files and compaction

    def journal_path(self, kind: str, gen: Optional[int] = None) -> Path:
        """The file of journal ``kind`` ("ops", "dedup", "dedup_ranges") at generation ``gen``
        (default: the one this process has open)."""
        g = self._jgens[kind] if gen is None else gen
        return self.dir / (kind if g == 0 else f"{kind}.{g}")

    def _journal_files(self) -> dict[str, list[int]]:
        """The generations of each journal's files in the directory."""
        found: dict[str, list[int]] = {k: [] for k in _JOURNALS}
        for name in os.listdir(self.dir):
            kind, dot, g = name.partition(".")
            if kind in found and (not dot or g.isdigit()):
                found[kind].append(int(g) if dot else 0)
        return found

    def _open_journals(self, jgen: int) -> None:
        """Have open the journal files a header with generation ``jgen`` commits: for each
        journal, its file with the highest generation <= jgen (newer ones are a compaction
        that has not committed).  A journal whose file changed is read again from its start."""
        if jgen == self._jgen:
            return
        found = self._journal_files()
        want = {}
        for kind in _JOURNALS:
            g = max((x for x in found[kind] if x <= jgen), default=None)
            if g is None:
                raise _Moved(f"{self.journal_path(kind, 0)}: no file of this journal at generation {jgen}", self.journal_path(kind, 0))
            if g != self._jgens[kind]:
                want[kind] = g
        chosen = {kind: want.get(kind, self._jgens[kind]) for kind in _JOURNALS}
        opened: dict[str, int] = {}
        try:
            for kind, g in want.items():
                opened[kind] = os.open(self.journal_path(kind, g), os.O_RDWR)
            # Unchanged generation after the opens: no commit replaced a journal meanwhile, so
            # none of the files current at jgen was unlinked before we listed them.
            if self.read_header().jgen != jgen:
                raise _Moved(f"{self.dir}: a journal was replaced while being opened", self.dir)
        except FileNotFoundError:
            for fd in opened.values():
                os.close(fd)
            raise _Moved(f"{self.dir}: a journal was replaced while being opened", self.dir) from None
        except BaseException:
            for fd in opened.values():
                os.close(fd)
            raise
        for kind, fd in opened.items():
            os.close(getattr(self, _JOURNAL_FD[kind]))
            setattr(self, _JOURNAL_FD[kind], fd)
            self._jgens[kind] = want[kind]
            # Offsets into the old file mean nothing in the new one.  Rereading a compacted
            # ops journal is harmless: it holds removals, and removing twice changes nothing.
            if kind == "ops":
                self._ops_pos = 0
            elif kind == "dedup":
                self._dedup, self._dedup_pos = None, 0
            else:
                self._ranges, self._ranges_pos, self._ranges_n = None, 0, 0
        self._jgen = jgen
        # Older generations are replaced files a crash kept, or an empty file of the original
        # name that opening the stream recreates (see _open): garbage for this header and
        # every later one.  A process still on an older header that lists them missing reads
        # its header again (_Moved); newer generations may be a compaction under way: kept.
        for kind, g in chosen.items():
            for old in found[kind]:
                if old < g:
                    self.journal_path(kind, old).unlink(missing_ok=True)

    def compact_journals(self, now: int, window_ns: int) -> None:
        """After recording ids (under the lock): drop the part of the dedup journals that left
        the window once it is most of them.  A cheap comparison unless a journal has grown
        by a quarter since it was last looked at."""
        h = self.h
        cutoff = now - window_ns
        if h.dedup_len >= self._compact_at["dedup"]:
            self._compact_timed("dedup", DEDUP.size, cutoff)
        if h.ranges_len >= self._compact_at["dedup_ranges"]:
            self._compact_timed("dedup_ranges", RANGE.size, cutoff)

    def _compact_timed(self, kind: str, size: int, cutoff: int) -> None:
        """Keep the records of a time-ordered journal from the first with ts >= cutoff on."""
        attr = "dedup_len" if kind == "dedup" else "ranges_len"
        total = getattr(self.h, attr)
        fd = getattr(self, _JOURNAL_FD[kind])
        dead = self._window_start(fd, size, total, cutoff)
        live = total - dead
        self._compact_at[kind] = total + max(total // 4, COMPACT_MIN // 4)
        if dead < live or total < COMPACT_MIN:
            return

        def write(nfd: int) -> None:
            pos = dead
            while pos < total:
                chunk = os.pread(fd, min(total - pos, 4 << 20), pos)
                if not chunk:
                    raise CorruptStoreError(f"{self.journal_path(kind)}: shorter than its committed {total} bytes", self.journal_path(kind))
                os.pwrite(nfd, chunk, pos - dead)
                pos += len(chunk)

        if self._replace_journal(kind, write):
            setattr(self.h, attr, live)
            if kind == "dedup":
                self._dedup_pos = max(self._dedup_pos - dead, 0)
            else:
                self._ranges_pos = max(self._ranges_pos - dead, 0)
            self._compact_at[kind] = max(2 * live, COMPACT_MIN)

    def _maybe_compact_ops(self) -> None:
        """After a removal was journalled (under the lock): once most of ``ops`` is dead
        (ranges now below first_seq, or one removal split over many records), rewrite it as
        the removed runs at and above first_seq, one record."""
        h = self.h
        if h.ops_len < self._compact_at["ops"]:
            return
        self._compact_at["ops"] = h.ops_len + max(h.ops_len // 4, COMPACT_MIN // 4)
        if h.ops_len < COMPACT_MIN:
            return
        runs = self._dead_runs(h.first_seq, h.last_seq)
        body = runs.tobytes()
        rec = _OPS_HDR.pack(len(runs), zlib.crc32(body)) + body if len(runs) else b""
        if 2 * len(rec) > h.ops_len:
            return
        if self._replace_journal("ops", lambda nfd: os.pwrite(nfd, rec, 0) if rec else None):
            h.ops_len = self._ops_pos = len(rec)
            self._compact_at["ops"] = max(2 * len(rec), COMPACT_MIN)

    def _dead_runs(self, a: int, b: int) -> np.ndarray:
        """Removed sequences in a..b as (first, last) rows, little-endian u64."""
        if b < a:
            return np.zeros((0, 2), dtype="<u8")
        m = np.concatenate(([0], self.dead_mask(a, b).view(np.int8), [0]))
        d = np.diff(m)
        starts = np.flatnonzero(d == 1)
        ends = np.flatnonzero(d == -1) - 1
        return np.stack([starts + a, ends + a], axis=1).astype("<u8")

    def _replace_journal(self, kind: str, write) -> bool:
        """Write a compacted ``kind`` journal to its file of the next generation (``write(fd)``)
        and switch to it; the header commit that ends this change publishes it (jgen), and
        the replaced file is unlinked after that commit (see _Locked).  False if the journal
        was already replaced in this change, or the new file could not be written (the old
        one stays in force; compaction is retried later)."""
        h = self.h
        committed = self.read_header().jgen
        if h.jgen == committed:
            # The first replacement of this change: files of other generations than the
            # open ones are leftovers (replaced files a crash kept, or a crashed compaction's).
            self._clean_journals()
            gen = committed + 1
        elif self._jgens[kind] == h.jgen:
            return False
        else:
            gen = h.jgen
        path = self.journal_path(kind, gen)
        nfd = -1
        try:
            nfd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            write(nfd)
            if self.fsync:
                os.fdatasync(nfd)
                dfd = os.open(self.dir, os.O_RDONLY)
                try:
                    os.fsync(dfd)  # the new name is durable before a header names it
                finally:
                    os.close(dfd)
        except BaseException as exc:
            if nfd >= 0:
                os.close(nfd)
            path.unlink(missing_ok=True)
            if not isinstance(exc, OSError):
                raise
            # Housekeeping only: the change it rode on (a publish) goes ahead without it.
            log.warning("stream data in %s: compacting the %s journal failed (%s); it stays as it is", self.dir, kind, exc)
            return False
        self._retired.append((getattr(self, _JOURNAL_FD[kind]), self.journal_path(kind)))
        setattr(self, _JOURNAL_FD[kind], nfd)
        self._jgens[kind] = gen
        h.jgen = self._jgen = gen
        return True

    def _clean_journals(self) -> None:
        """Unlink journal files that are not the open ones (under the lock, at a committed state)."""
        for kind, gens in self._journal_files().items():
            for g in gens:
                if g != self._jgens[kind]:
                    self.journal_path(kind, g).unlink(missing_ok=True)

    def _retire_journals(self) -> None:
        """After the commit that published compacted journals: the files they replaced go."""
        retired, self._retired = self._retired, []
        for fd, path in retired:
            os.close(fd)
            path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ writing (under locked())

    def subject_id(self, subject: str) -> int:
        sid = self.subject_ids.get(subject)
        if sid is None:
            b = subject.encode()
            diskio.pwrite(self._subj_fd, _SUBJ_HDR.pack(len(b), zlib.crc32(b)) + b, self.h.subj_len, self.dir / "subjects")
            self.h.subj_len += _SUBJ_HDR.size + len(b)
            self._subj_pos = self.h.subj_len
            sid = len(self.subjects)
            self.subjects.append(subject)
            self.subject_ids[subject] = sid
            self._subj_lens = np.append(self._subj_lens, len(b))
            self._subj_len_list.append(len(b))
            if self._stats is not None:
                self._stats = tuple(np.append(a, 0) for a in self._stats)
        return sid

    def _tail_block(self, seq: int, dlen: int, hlen: int) -> Block:
        if self._blocks:
            b = self._blocks[-1]
            if b.first + b.count == seq and b.count < BLOCK_MAX_MSGS and (b.dlen + dlen <= BLOCK_MAX_BYTES or b.count == 0):
                # Closed early when at least half of it is already removed (the stream keeps
                # less than half a block): the block is then dropped as soon as the few
                # messages it still holds go, instead of after a whole block more.  Looked
                # at once per 1,024 sequences, so the common case costs one comparison.
                if seq < self._roll_at:
                    return b
                if 2 * (self.h.first_seq - b.first) < b.count or b.count * ENTRY_SIZE + b.dlen + b.hlen < ROLL_MIN_BYTES:
                    self._roll_at = seq + 1024
                    return b
            if b.count % CHECK_EVERY and b.sfd >= 0:
                self._checkpoint(b, (b.count - 1) // CHECK_EVERY)  # seal its last, partial interval
        h = self.h
        h.tail_dcrc = h.tail_hcrc = h.tail_icrc = 0
        path = self.dir / "blk" / f"{seq:016x}"
        with diskio.io_errors(f"{path}.idx", "creating a block"):
            b = Block(path, seq, create=True)
            os.ftruncate(b.ifd, 0)
            os.ftruncate(b.dfd, 0)
            os.ftruncate(b.hfd, 0)
        self._blocks.append(b)
        self._block_firsts.append(seq)
        return b

    def _checkpoint(self, blk: Block, k: int) -> None:
        """Write interval k's checksums (the header's open-interval ones) and start the next interval."""
        h = self.h
        blk.checkpoint(k, (h.tail_dcrc, h.tail_hcrc, h.tail_icrc))
        h.tail_dcrc = h.tail_hcrc = h.tail_icrc = 0

    def _sync_tail(self) -> None:
        """Learn the tail block's committed count and lengths (another process may have appended)."""
        if not self._blocks:
            return
        b = self._blocks[-1]
        n = self.h.last_seq - b.first + 1
        if b.verified and b.verified[-1][1] > self.h.last_seq:
            # The tail was cut (truncate_after, here or in another process): what is
            # written there next has not been checked.
            b.verified = [(lo, min(hi, self.h.last_seq)) for lo, hi in b.verified if lo <= self.h.last_seq]
        if n <= 0:
            b.count, b.dlen, b.hlen = 0, 0, 0
            return
        if n == b.count:
            return
        have = os.fstat(b.ifd).st_size // ENTRY_SIZE
        if have < n:
            # The index lost its tail (a torn file): describe what is there, so the open-time
            # tail check finds the gap and cuts it off; reads past it raise CorruptStoreError.
            n = have
            if n <= 0:
                b.count, b.dlen, b.hlen = 0, 0, 0
                return
        e = ENTRY.unpack(os.pread(b.ifd, ENTRY_SIZE, (n - 1) * ENTRY_SIZE))
        e = {"doff": e[1], "hoff": e[2], "dlen": e[3], "hlen": e[4]}
        b.count = n
        b.dlen = int(e["doff"]) + int(e["dlen"])
        b.hlen = int(e["hoff"]) + int(e["hlen"])

    def append(self, subject: str, hdr: bytes, data: bytes, ts: int) -> int:
        """Store one message at last_seq + 1; returns its sequence."""
        if self._stats is None:
            self.ensure_stats()  # num_subjects needs the per-subject counts
        sid = self.subject_id(subject)
        h = self.h
        seq = h.last_seq + 1
        blk = self._tail_block(seq, len(data), len(hdr))
        if blk.imm is None:
            blk.map_for_writing(BLOCK_MAX_MSGS * ENTRY_SIZE, BLOCK_MAX_BYTES)
        doff, hoff = blk.dlen, blk.hlen
        n = len(data)
        ioff = (seq - blk.first) * ENTRY_SIZE
        if ioff + ENTRY_SIZE > blk.ialloc:
            blk.reserve_index(ioff + ENTRY_SIZE)
        if n:
            if doff + n <= blk.dcap:
                if doff + n > blk.dalloc:
                    blk.reserve_data(doff + n)
                blk.dmm[doff:doff + n] = data
            else:
                diskio.pwrite(blk.dfd, data, doff, f"{blk.path}.dat")  # a message larger than the block's capacity
        if hdr:
            diskio.pwrite(blk.hfd, hdr, hoff, f"{blk.path}.hdr")
        crc = zlib.crc32(data) ^ (_rotl1(zlib.crc32(hdr)) if hdr else 0) ^ _mix(seq, ts, sid)
        entry = ENTRY.pack(ts, doff, hoff, n, len(hdr), sid, crc)
        blk.imm[ioff:ioff + ENTRY_SIZE] = entry
        h.tail_dcrc = zlib.crc32(data, h.tail_dcrc)
        if hdr:
            h.tail_hcrc = zlib.crc32(hdr, h.tail_hcrc)
        h.tail_icrc = zlib.crc32(entry, h.tail_icrc)
        blk.count += 1
        if not blk.count % CHECK_EVERY and blk.sfd >= 0:
            self._checkpoint(blk, blk.count // CHECK_EVERY - 1)
        blk.dlen += len(data)
        blk.hlen += len(hdr)
        if h.msgs == 0:
            h.first_seq = seq
            self._rebase_dead(seq)
        h.last_seq = seq
        h.last_ts = ts
        h.msgs += 1
        slen = self._subj_len_list[sid]
        if self.memory:
            h.bytes += slen + len(hdr) + len(data) + 16
        else:
            h.bytes += 30 + slen + len(data) + (len(hdr) + 4 if hdr else 0)
        h.held = 1
        count, first, last = self._stats
        if count[sid] == 0:
            h.num_subjects += 1
            first[sid] = seq
        count[sid] += 1
        last[sid] = seq
        return seq

    def append_many(self, sids: np.ndarray, data: bytes, data_offsets: np.ndarray, hdr: bytes, hdr_offsets: np.ndarray, ts: int, hdr_crcs=None) -> int:
        """Store a run of messages (already validated) in one write per file; returns the first sequence."""
        self.ensure_stats()
        h = self.h
        n = len(sids)
        first = h.last_seq + 1
        dlens = np.diff(data_offsets).astype(np.int64)
        hlens = np.diff(hdr_offsets).astype(np.int64)
        pos = 0
        seq = first
        while pos < n:
            blk = self._tail_block(seq, int(dlens[pos]), int(hlens[pos]))
            room = BLOCK_MAX_MSGS - blk.count
            # How many fit in this block's byte budget.
            cum = np.cumsum(dlens[pos:pos + room])
            fit = int(np.searchsorted(cum, BLOCK_MAX_BYTES - blk.dlen, side="right")) or 1
            k = min(room, fit, n - pos)
            d0, d1 = int(data_offsets[pos]), int(data_offsets[pos + k])
            h0, h1 = int(hdr_offsets[pos]), int(hdr_offsets[pos + k])
            e = np.zeros(k, dtype=IDX_DTYPE)
            e["ts"] = ts
            e["doff"] = blk.dlen + (data_offsets[pos:pos + k] - d0)
            e["hoff"] = blk.hlen + (hdr_offsets[pos:pos + k] - h0)
            e["dlen"] = dlens[pos:pos + k]
            e["hlen"] = hlens[pos:pos + k]
            e["sid"] = sids[pos:pos + k]
            mv = memoryview(data)
            hv = memoryview(hdr)
            e["crc"] = record_crcs(
                np.arange(seq, seq + k, dtype=np.uint64), e["ts"], e["sid"],
                hdr, hdr_offsets[pos:pos + k + 1], data, data_offsets[pos:pos + k + 1],
                None if hdr_crcs is None else hdr_crcs[pos:pos + k],
            )
            if d1 > d0:
                diskio.pwrite(blk.dfd, mv[d0:d1], blk.dlen, f"{blk.path}.dat")
            if h1 > h0:
                diskio.pwrite(blk.hfd, hv[h0:h1], blk.hlen, f"{blk.path}.hdr")
            eb = e.tobytes()
            diskio.pwrite(blk.ifd, eb, (seq - blk.first) * ENTRY_SIZE, f"{blk.path}.idx")
            self._chain(blk, k, mv, data_offsets[pos:pos + k + 1], hv, hdr_offsets[pos:pos + k + 1], eb)
            blk.dlen += d1 - d0
            blk.hlen += h1 - h0
            pos += k
            seq += k
        if h.msgs == 0:
            h.first_seq = first
            self._rebase_dead(first)
        h.last_seq = first + n - 1
        h.last_ts = ts
        h.msgs += n
        slen = self._subj_lens[sids.astype(np.int64)]
        if self.memory:
            h.bytes += int((slen + hlens + dlens + 16).sum())
        else:
            h.bytes += int((30 + slen + dlens + np.where(hlens > 0, hlens + 4, 0)).sum())
        h.held = 1
        if self._stats is not None:
            before = int((self._stats[0] > 0).sum())
            self._stats_add(sids.astype(np.uint32), np.arange(first, first + n, dtype=np.int64))
            h.num_subjects += int((self._stats[0] > 0).sum()) - before
        return first

    def _chain(self, blk: Block, k: int, data, data_offsets: np.ndarray, hdr, hdr_offsets: np.ndarray, entries: bytes) -> None:
        """Account k records just written at the block's end (blk.count not yet counting them)
        in the open interval's checksums, writing a checkpoint at each interval's end; bumps
        blk.count.  ``data_offsets``/``hdr_offsets``: k + 1 offsets into ``data``/``hdr``."""
        h = self.h
        d, hd = data_offsets.tolist(), hdr_offsets.tolist()
        i = 0
        while i < k:
            j = min(k, i + CHECK_EVERY - blk.count % CHECK_EVERY)
            h.tail_dcrc = zlib.crc32(data[d[i]:d[j]], h.tail_dcrc)
            if hd[j] > hd[i]:
                h.tail_hcrc = zlib.crc32(hdr[hd[i]:hd[j]], h.tail_hcrc)
            h.tail_icrc = zlib.crc32(entries[i * ENTRY_SIZE:j * ENTRY_SIZE], h.tail_icrc)
            blk.count += j - i
            if not blk.count % CHECK_EVERY and blk.sfd >= 0:
                self._checkpoint(blk, blk.count // CHECK_EVERY - 1)
            i = j

    def append_skip(self, ts: int) -> int:
        """Consume a sequence without storing anything (interest retention, no interest)."""
        h = self.h
        seq = h.last_seq + 1
        blk = self._tail_block(seq, 0, 0)
        entry = ENTRY.pack(ts, blk.dlen, blk.hlen, 0, 0, SID_NONE, 0)
        diskio.pwrite(blk.ifd, entry, (seq - blk.first) * ENTRY_SIZE, f"{blk.path}.idx")
        self._chain(blk, 1, b"", np.zeros(2, np.int64), b"", np.zeros(2, np.int64), entry)
        h.last_seq = seq
        h.last_ts = ts
        h.held = 1
        if h.msgs == 0:
            h.first_seq = seq + 1
            self._rebase_dead(seq + 1)
        else:
            self._write_ops([(seq, seq)])
            self._apply_dead([(seq, seq)])
            self._maybe_compact_ops()
        return seq

    def remove(self, seqs: np.ndarray) -> int:
        """Remove live sequences (sorted, unique); returns how many were removed."""
        self.ensure_stats()
        h = self.h
        if not len(seqs):
            return 0
        seqs = seqs[(seqs >= h.first_seq) & (seqs <= h.last_seq)]
        if not len(seqs):
            return 0
        seqs = seqs[~self.dead_mask(int(seqs[0]), int(seqs[-1]))[seqs - seqs[0]]]
        if not len(seqs):
            return 0
        e = np.concatenate([self.entries(int(a), int(b)) for a, b in _runs(seqs)])
        stored = e["sid"] != SID_NONE
        removed_bytes = int(self.sizes(e[stored]).sum())
        if self._stats is not None:
            count_before = int((self._stats[0] > 0).sum())
            self._stats_remove_seqs(seqs)
            h.num_subjects += int((self._stats[0] > 0).sum()) - count_before
        n = int(stored.sum())
        h.msgs -= n
        h.bytes -= removed_bytes
        first = int(seqs[0])
        head = first == h.first_seq and int(seqs[-1]) - first + 1 - len(seqs) == int(self.dead_mask(first, int(seqs[-1])).sum())
        if not head:
            runs = _runs(seqs)
            self._write_ops(runs)
            self._apply_dead(runs)
        self._advance_first(int(seqs[-1]) + 1 if head else h.first_seq)
        if not head:
            self._maybe_compact_ops()
        return n

    def remove_first(self) -> int:
        """Remove the first live message: remove() for the discard-old steady state (one
        message in, the oldest out) without building arrays.  Returns 1, or 0 if empty."""
        h = self.h
        if h.msgs <= 0:
            return 0
        stats = self._stats if self._stats is not None else self.ensure_stats()
        views = self._stats_views
        if views is None or views[0] is not stats:
            # Memoryviews of the stats arrays: a scalar read or store through them costs a
            # fraction of NumPy's, which is most of this function's time otherwise.
            views = self._stats_views = (stats, *map(memoryview, stats))
        _, count, first, last = views
        seq = h.first_seq
        bf = self._block_firsts
        blk = self._blocks[0] if len(bf) == 1 or bf[1] > seq else self._blocks[self._block_index(seq)]
        off = (seq - blk.first) * ENTRY_SIZE + _ENTRY_SIZES_OFF
        if blk.imm is not None:
            dlen, hlen, sid = _ENTRY_SIZES.unpack_from(blk.imm, off)  # the tail block this process writes: mapped
        else:
            raw = os.pread(blk.ifd, _ENTRY_SIZES.size, off)
            if len(raw) != _ENTRY_SIZES.size:
                raise CorruptStoreError(f"{blk.path}.idx: the index entry of sequence {seq} is missing (truncated)", f"{blk.path}.idx")
            dlen, hlen, sid = _ENTRY_SIZES.unpack(raw)
        if sid == SID_NONE:  # not a stored message (first_seq always is one; keep remove()'s rules)
            return self.remove(np.array([seq], dtype=np.int64))
        n = count[sid] - 1
        count[sid] = n
        if n == 0:
            h.num_subjects -= 1
        # As _stats_remove_seqs: a removed first or last is looked up again when asked for.
        if first[sid] == seq:
            first[sid] = 0
        if last[sid] == seq:
            last[sid] = 0
        h.msgs -= 1
        slen = self._subj_len_list[sid]
        h.bytes -= (slen + hlen + dlen + 16) if self.memory else (30 + slen + dlen + (hlen + 4 if hlen else 0))  # msg_size
        # _advance_first(seq + 1), with no removed sequences ahead (no bitmap) inline.
        if self._dead.size or not h.msgs:
            self._advance_first(seq + 1)
        else:
            h.first_seq = self._dead_base = seq + 1
            if len(bf) > 1 and bf[1] <= seq + 1:
                self._drop_old_blocks()
        return 1

    def _advance_first(self, start: int) -> None:
        h = self.h
        old = h.first_seq
        f = h.first_seq = self.next_live(start) if h.msgs > 0 else h.last_seq + 1
        if f > old:
            self._rebase_dead(f)
            bf = self._block_firsts
            if (len(bf) > 1 and bf[1] <= f) or h.msgs == 0:  # else no block is wholly below f
                self._drop_old_blocks()

    def set_floor(self, seq: int) -> None:
        """Purge up to seq - 1 when seq is past the end: the next publish gets seq (docs/semantics.md §4)."""
        h = self.h
        h.first_seq = seq
        h.last_seq = seq - 1
        h.held = 1
        self._rebase_dead(seq)
        self._drop_old_blocks()

    def _write_ops(self, runs) -> None:
        arr = np.array(list(runs), dtype="<u8").reshape(-1, 2)
        body = arr.tobytes()
        diskio.pwrite(self._ops_fd, _OPS_HDR.pack(len(arr), zlib.crc32(body)) + body, self.h.ops_len, self.journal_path("ops"))
        self.h.ops_len += _OPS_HDR.size + len(body)
        self._ops_pos = self.h.ops_len

    def _drop_old_blocks(self) -> None:
        """Blocks wholly below first_seq are unlinked after the commit (see _Locked)."""
        f = self.h.first_seq
        while self._blocks:
            b = self._blocks[0]
            end = self._blocks[1].first if len(self._blocks) > 1 else b.first + b.count
            if end > f:
                break
            self._pending_unlink.append(self._blocks.pop(0))
            self._block_firsts.pop(0)


def _pread_block(fd: int, n: int, off: int, path: str) -> bytes:
    # Bounds first: a damaged length must not become a gigabyte read.
    raw = os.pread(fd, n, off) if off + n <= os.fstat(fd).st_size else b""
    if len(raw) != n:
        raise CorruptStoreError(f"{path}: the file ends at byte {off + len(raw)} but a record reaches byte {off + n} (truncated)", path)
    return raw


class _Locked:
    __slots__ = ("s",)  # the storage; its _start holds the header fields the change began from

    def __init__(self, s: StreamStorage) -> None:
        self.s = s

    def __enter__(self) -> StreamStorage:
        s = self.s
        s._thread_lock.acquire()
        if s._depth:
            # Re-entered by the same thread: the outermost holder commits and unlocks.
            s._depth += 1
            return s
        try:
            s.check_fork()
            fcntl.flock(s._lock_fd, fcntl.LOCK_EX)
        except BaseException:
            s._thread_lock.release()
            raise
        try:
            if s._committed_counter() != s.h.commit:
                s._catch_up(s.read_header())
            if s._slot_damaged:
                s._repair_slot()
            s._pending_unlink = []
            h = s.h
            s._start = (h.commit, h.last_seq, h.ops_len, h.dedup_len, h.subj_len, h.first_seq, h.msgs, h.cfg_gen, h.deleted, h.held, h.last_id, h.cons_gen, h.ranges_len, h.jgen)
        except BaseException:
            fcntl.flock(s._lock_fd, fcntl.LOCK_UN)
            s._thread_lock.release()
            raise
        s._depth = 1
        return s

    def __exit__(self, exc_type, exc, tb):
        s = self.s
        if s._depth > 1:
            s._depth -= 1
            s._thread_lock.release()
            return False
        s._depth = 0
        try:
            if exc_type is None:
                h = s.h
                if (h.commit, h.last_seq, h.ops_len, h.dedup_len, h.subj_len, h.first_seq, h.msgs, h.cfg_gen, h.deleted, h.held, h.last_id, h.cons_gen, h.ranges_len, h.jgen) != s._start:
                    s._commit()
                for b in s._pending_unlink:
                    b.close()
                    b.unlink()
                if s._retired:
                    s._retire_journals()
            elif not isinstance(exc, APIError) or (
                (h := s.h).commit, h.last_seq, h.ops_len, h.dedup_len, h.subj_len, h.first_seq, h.msgs, h.cfg_gen, h.deleted, h.held, h.last_id, h.cons_gen, h.ranges_len, h.jgen
            ) != s._start:
                # A failure halfway through a change (anything but a request refused
                # before its first write): what was written past the last commit is
                # ignored by everyone and overwritten by the next writer; forget our
                # in-memory changes (header, blocks, caches) and reload.
                s._reset_caches()
                s.h = Header(commit=-1)
        finally:
            s._pending_unlink = []
            fcntl.flock(s._lock_fd, fcntl.LOCK_UN)
            s._thread_lock.release()
        if isinstance(exc, OSError) and not isinstance(exc, StoreError):
            # Any other system error met while changing the stream: typed, naming the stream.
            raise diskio.translate(exc, s.dir, "updating the stream") from exc
        return False
