"""One stream's files: append-only columns, a shared commit header, and cross-process locking.

Layout of a stream's data directory::

    state              4 KiB header, mmap'd by every process: two checksummed
                       slots (first_seq, last_seq, msgs, bytes, committed file
                       lengths, ...) and the index of the active one (state_header.py)
    subjects           the subject dictionary: u16 len | u32 crc | utf-8, ids in order (subject_table.py)
    ops                removals that are not a head truncation: u32 n | u32 crc | n x (u64 first, u64 last)
                       (removed.py)
    dedup              Nats-Msg-Id records: i64 ts | u64 seq | 16-byte blake2b of the id (dedup.py)
    dedup_ranges       generated-id batches: i64 ts | u64 seq | blake2b(prefix) | u64 first | u64 last
    blk/<seq>.idx      one 40-byte entry per sequence (ts, data/header offsets and
                       lengths, subject id, crc32 of the record)
    blk/<seq>.dat      payloads only, back to back: a range read slices them into
                       an Arrow binary column without touching each message
    blk/<seq>.hdr      NATS header blocks, back to back
    blk/<seq>.sum      the checksums of each check interval of the block (blocks.py, verify.py)
    notify             16 bytes: a waiting consumer's flag and a change counter, which
                       writers bump after a commit when the flag is set (wakeup.py)

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

This module is the façade: ``StreamStorage`` composes the parts, each in its
own module, and keeps what ties them together: the block list and the index,
with the reads, appends and removals that use them (the hot paths: one
publish or one discard-old removal touches the header, the tail block, the
subject table, the removed set and the per-subject counts, inline, without a
call per part), catching up with other processes, and the change protocol
(``locked()``).  The parts:

- state_header.py: the two-slot header and the commit;
- journals.py: the journal files and their compaction by replacement;
- subject_table.py, removed.py, dedup.py: what the journals' records mean;
- subject_stats.py: per-subject counts, first and last sequences;
- verify.py: records checked before they are served; recovery.py: torn
  tails cut, damage dropped, counts rebuilt.

Bounded growth: disk and memory follow what the stream retains, not its history.

- The journals (``ops``, ``dedup``, ``dedup_ranges``) are compacted once most of
  a journal is dead: ``dedup`` records that left the duplicate window, ``ops``
  ranges below ``first_seq`` (journals.py).
- A tail block whose first half is already removed (the stream retains less
  than half a block) is closed early once it holds ``ROLL_MIN_BYTES``, so the
  removed head goes with the whole block soon after, instead of staying on
  disk until a 64 MiB block fills and drains.  Block files are never modified
  below the commit point, only unlinked: a process reading without the lock
  keeps reading what it opened.
- The in-memory dedup caches forget ids that left the window once they have
  doubled since the last pruning (dedup.py).
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import zlib
from bisect import bisect_right
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from jetspark.engine import diskio, recovery, subject_stats, wakeup
from jetspark.engine.blocks import CHECK_EVERY, Block
from jetspark.engine.dedup import IdsCache, MessageIds, RangesCache
from jetspark.engine.journals import FilesMoved, Journals
from jetspark.engine.locking import FORK_GENERATION, FLock
from jetspark.engine.records import (
    ENTRY,
    ENTRY_SIZE,
    IDX_DTYPE,
    SID_NONE,
    record_crc,
    record_crcs,
    rotl1,
    runs_of,
    seq_mix,
)
from jetspark.engine.removed import RemovedSet
from jetspark.engine.state_header import HeaderFile, StreamHeader, pack_slot
from jetspark.engine.subject_table import SubjectTable
from jetspark.engine.verify import bad_records, verify
from jetspark.errors import APIError, CorruptStoreError, StoreError

BLOCK_MAX_MSGS = 1 << 20
BLOCK_MAX_BYTES = 64 << 20
# A tail block that is at least half removed is closed at this size (index + payloads + headers).
ROLL_MIN_BYTES = 4 << 20

_ENTRY_SIZES = struct.Struct("<III")  # dlen, hlen, sid of an index entry (records.ENTRY)
_ENTRY_SIZES_OFF = 24


class StreamStorage:
    """The files of one stream and this process's caches of them.

    Mutations happen inside ``with storage.locked():``, which takes the
    cross-process lock, brings the caches up to date, and commits ``header``
    on a clean exit.  Reads outside the lock call ``refresh()`` first.
    ``header`` is the committed header as this process last read it, plus
    the change under way while the lock is held.
    """

    _start: tuple  # set by _Change: the header fields the change under way began from

    def __init__(self, data_dir: Path, lock_path: Path, *, memory: bool, fsync: bool) -> None:
        self.dir = Path(data_dir)
        self.lock_path = Path(lock_path)
        self.memory = memory
        self.fsync = fsync and not memory
        self._thread_lock = threading.RLock()
        self._depth = 0
        self.blocks: list[Block] = []
        self.pending_unlink: list[Block] = []  # blocks dropped by the change under way, unlinked after its commit
        # A consumer-state record that may make messages deliverable again (an ack frees
        # max_ack_pending room, a nak queues a redelivery) was written under the lock held:
        # waiting consumers are told at its release, as after a commit (wakeup.py).
        self.consumers_changed = False
        self.notifier: Optional[wakeup.Notifier] = None
        self._open()

    # ------------------------------------------------------------------ open / close

    def _open(self) -> None:
        self._fork_gen = FORK_GENERATION[0]
        with diskio.io_errors(self.dir, "opening the stream's files"):
            (self.dir / "blk").mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            state = self.dir / "state"
            self.header_file = HeaderFile(state, os.open(state, os.O_RDWR | os.O_CREAT, 0o644))
            subjects = self.dir / "subjects"
            self.subject_table = SubjectTable(os.open(subjects, os.O_RDWR | os.O_CREAT, 0o644), subjects)
            self.journals = Journals(self.dir, self.fsync, self.header_file)
        if self.notifier is not None:
            self.notifier.close()  # after fork: the parent's mapping of it is shared, the child maps its own
        self.notifier = wakeup.Notifier.open(self.dir / wakeup.NAME)
        if not self.header_file.written():
            with self._flock():
                if not self.header_file.written():
                    self.header_file.create(self._has_data())
        self.header_file.map()
        self.blocks = []
        self.block_firsts: list[int] = []
        self._reset_caches()
        self.refresh()
        if not recovery.tail_intact(self):
            recovery.repair_tail(self)
        if recovery.orphans(self):
            with self.locked():
                for path in recovery.orphans(self):
                    path.unlink(missing_ok=True)

    def _has_data(self) -> bool:
        return any((self.dir / "blk").glob("*.idx")) or bool(os.fstat(self.subject_table.fd).st_size) or self.journals.any_data()

    def _reset_caches(self) -> None:
        self.header = StreamHeader(commit=-1)
        self.header_file.slot_damaged = False
        self.subject_table.clear()
        self.removed = RemovedSet(self.journals)
        # (count, first, last) per subject id; None until a caller needs it (ensure_stats).
        self.stats_by_subject: Optional[subject_stats.Stats] = None
        self._stats_views: Any = None  # (self.stats_by_subject, memoryviews of its arrays), see remove_first
        self.message_ids = MessageIds(self.journals)
        self._roll_at = 0  # the sequence at which _tail_block looks again whether to close the tail early
        self.journals.keep_retired()
        for b in self.blocks:
            b.close()
        self.blocks = []
        self.block_firsts = []

    def close(self) -> None:
        self._reset_caches()
        try:
            os.close(self._lock_fd)
        except OSError:
            pass
        self.subject_table.close()
        self.journals.close()
        self.header_file.close()
        if self.notifier is not None:
            self.notifier.close()
            self.notifier = None

    def check_fork(self) -> None:
        """After fork the child reopens everything: flock is per open file, not per process."""
        if FORK_GENERATION[0] != self._fork_gen:
            self._thread_lock = threading.RLock()
            self._depth = 0
            self.blocks = []
            self._open()

    # ------------------------------------------------------------------ commit

    def _commit(self) -> None:
        """Publish ``self.header`` (see state_header.HeaderFile.publish)."""
        h = self.header
        h.commit += 1
        raw = pack_slot(h)
        try:
            if self.fsync:
                self._sync_files()
            self.header_file.publish(raw, self.fsync)
        except OSError as exc:
            raise diskio.translate(exc, self.dir / "state", "committing") from exc

    def _sync_files(self) -> None:
        self.subject_table.sync()
        self.journals.sync()
        if self.blocks:
            b = self.blocks[-1]
            for fd in (b.ifd, b.dfd, b.hfd):
                os.fdatasync(fd)

    # ------------------------------------------------------------------ locking

    def _flock(self):
        return FLock(self._lock_fd)

    def locked(self) -> "_Locked":
        """Exclusive access across threads and processes; commits on a clean exit."""
        return _Locked(self)

    def change_key(self) -> tuple:
        """What a change moves in the header: equal before and after means nothing was written."""
        return _change_key(self.header)

    # ------------------------------------------------------------------ catching up

    def refresh(self) -> None:
        """Bring this process's caches up to the committed header."""
        with self._thread_lock:
            self.check_fork()
            for _ in range(100):
                h = self.header_file.read()
                if h.commit == self.header.commit:
                    return
                try:
                    self._catch_up(h)
                    return
                except FilesMoved:
                    continue  # a writer replaced files after we read the header: read it again
            raise CorruptStoreError(f"{self.dir}: the stream's files kept changing under 100 reads of its header", self.dir)

    def _catch_up(self, h: StreamHeader) -> None:
        if h.deleted:
            # Final: its files may be gone already (journals replaced since we looked
            # included), and nothing reads this stream's caches again (Stream raises 10059).
            self.header = h
            return
        for kind in self.journals.open_generation(h.jgen):
            # Offsets into the old file mean nothing in the new one.  Rereading a compacted
            # ops journal is harmless: it holds removals, and removing twice changes nothing.
            if kind == "ops":
                self.removed.read_upto = 0
            else:
                self.message_ids.forget(kind)
        old = self.header
        if old.commit < 0 or h.commit < old.commit:
            # First load, or the files were replaced: rebuild from scratch.
            self._reset_caches()
            self.removed.base = h.first_seq
            self._read_subjects(h.subj_len)
            self.header = h
            self._rescan_blocks()
            self.removed.apply(self.removed.read(h.ops_len))
            self._prune_blocks()
            self.sync_tail()
            return
        self._read_subjects(h.subj_len)
        self.header = h
        if h.last_seq != old.last_seq or h.first_seq != old.first_seq:
            self._rescan_blocks()
        ranges = self.removed.read(h.ops_len)
        if self.stats_by_subject is None:
            self.removed.apply(ranges)
        else:
            self._catch_up_stats(old, h, ranges)
        self.removed.rebase(h.first_seq)
        self._prune_blocks()
        self.sync_tail()
        self.message_ids.catch_up(h)

    def _read_subjects(self, upto: int) -> None:
        table = self.subject_table
        table.read(upto)
        if self.stats_by_subject is not None:
            grow = len(table.names) - len(self.stats_by_subject[0])
            if grow > 0:
                self.stats_by_subject = tuple(np.concatenate([a, np.zeros(grow, np.int64)]) for a in self.stats_by_subject)

    def _catch_up_stats(self, old: StreamHeader, h: StreamHeader, ranges: list[tuple[int, int]]) -> None:
        """Apply the removals and move the per-subject stats from ``old`` to ``h``: what was
        removed (subject_stats.catch_up), then the appended tail, read here."""
        subject_stats.catch_up(self, old, h, ranges)
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
                raise FilesMoved(
                    f"{self.dir / 'blk'}: sequences {lo}..{h.last_seq} are not all in the blocks listed ({cause or 'unwritten index entries'})",
                    self.dir / "blk",
                ) from cause
            live = ~self.removed.mask(lo, h.last_seq)
            subject_stats.add(self.stats_by_subject, e["sid"][live], np.arange(lo, h.last_seq + 1, dtype=np.int64)[live])

    def _rescan_blocks(self) -> None:
        """Open blocks other processes created; blocks they removed stay open until pruned."""
        names = sorted(int(p.name[:-4], 16) for p in (self.dir / "blk").glob("*.idx"))
        known = {b.first: b for b in self.blocks}
        for first in names:
            # A block past last_seq + 1 belongs to a writer that died before committing it.
            if first <= self.header.last_seq + 1 and first not in known:
                try:
                    known[first] = Block(self.dir / "blk" / f"{first:016x}", first)
                except FileNotFoundError:
                    continue  # unlinked while we listed

        self.blocks = [known[f] for f in sorted(known)]
        self.block_firsts = [b.first for b in self.blocks]

    def _prune_blocks(self) -> None:
        """Close blocks wholly below first_seq (another process has unlinked them).

        That includes the last block once the stream is empty: appending to it
        would write into a file nobody else can see any more.
        """
        f = self.header.first_seq
        while self.blocks:
            end = self.blocks[1].first if len(self.blocks) > 1 else self.header.last_seq + 1
            if end > f:
                break
            self.blocks.pop(0).close()
            self.block_firsts.pop(0)

    # ------------------------------------------------------------------ lookups

    def dead_mask(self, a: int, b: int) -> np.ndarray:
        """True where a sequence in a..b (all >= first_seq) was removed."""
        return self.removed.mask(a, b)

    def is_live(self, seq: int) -> bool:
        if seq < self.header.first_seq or seq > self.header.last_seq:
            return False
        removed = self.removed  # removed.is_removed, inline: this runs per delivery
        i = seq - removed.base
        return not (0 <= i < len(removed.bitmap) and removed.bitmap[i])

    def next_live(self, seq: int) -> int:
        """The first live sequence >= seq, or last_seq + 1."""
        return self.removed.first_kept(max(seq, self.header.first_seq), self.header.last_seq)

    def _block_index(self, seq: int) -> int:
        i = bisect_right(self.block_firsts, seq) - 1
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
            blk = self.blocks[i]
            end = b if i + 1 >= len(self.blocks) else min(b, self.blocks[i + 1].first - 1)
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
            blk = self.blocks[i]
            end = b if i + 1 >= len(self.blocks) else min(b, self.blocks[i + 1].first - 1)
            yield blk, seq, end
            seq = end + 1

    def verify(self, blk: Block, a: int, b: int, data: Optional[bytes] = None, e: Optional[np.ndarray] = None) -> None:
        """Check records a..b of ``blk`` before serving them (see verify.verify)."""
        verify(self, blk, a, b, data, e)

    def read_message(self, seq: int) -> tuple[str, bytes, bytes, int]:
        """(subject, header block, payload, ts) of a live sequence."""
        e = self.entries(seq, seq)[0]
        blk = self.blocks[self._block_index(seq)]
        hdr = blk.read_hdrs(int(e["hoff"]), int(e["hlen"]))
        data = blk.read_data(int(e["doff"]), int(e["dlen"]))
        sid = int(e["sid"])
        if record_crc(seq, int(e["ts"]), sid, hdr, data) != int(e["crc"]):
            raise CorruptStoreError(f"{blk.path}.dat: message {seq} fails its checksum", f"{blk.path}.dat")
        return self.subject_table.names[sid], hdr, data, int(e["ts"])

    def read_messages(self, seqs: list[int]) -> list[tuple[str, bytes, bytes, int]]:
        """(subject, header block, payload, ts) for each sequence, reading each run of
        consecutive sequences with one pread per file."""
        if seqs and seqs[-1] - seqs[0] == len(seqs) - 1 and all(b > a for a, b in zip(seqs, seqs[1:])):
            return self._read_run(seqs[0], seqs[-1])  # the common case: new deliveries in a row
        found: dict[int, tuple[str, bytes, bytes, int]] = {}
        for a, b in runs_of(np.unique(np.asarray(seqs, dtype=np.int64))):
            for q, rec in zip(range(a, b + 1), self._read_run(a, b)):
                found[q] = rec
        return [found[q] for q in seqs]

    def _read_run(self, a: int, b: int) -> list[tuple[str, bytes, bytes, int]]:
        out: list[tuple[str, bytes, bytes, int]] = []
        names = self.subject_table.names
        for blk, lo, hi in self.block_spans(a, b):
            e = self.entries(lo, hi)
            d0, h0 = int(e["doff"][0]), int(e["hoff"][0])
            data = blk.read_data(d0, int(e["doff"][-1]) + int(e["dlen"][-1]) - d0)
            verify(self, blk, lo, hi, data, e)
            hdr = blk.read_hdrs(h0, int(e["hoff"][-1]) + int(e["hlen"][-1]) - h0)
            if not hdr:
                out.extend((names[sid] if sid != SID_NONE else "", b"", data[doff - d0 : doff - d0 + dlen], ts) for ts, doff, _, dlen, _, sid, _ in e.tolist())
            else:
                out.extend(
                    (names[sid] if sid != SID_NONE else "", hdr[hoff - h0 : hoff - h0 + hlen], data[doff - d0 : doff - d0 + dlen], ts)
                    for ts, doff, hoff, dlen, hlen, sid, _ in e.tolist()
                )
        return out

    def sizes(self, e: np.ndarray) -> np.ndarray:
        """Per-message byte accounting as the server counts it (docs/semantics.md §3.1)."""
        slen = self.subject_table.lens[e["sid"].astype(np.int64)]
        dlen = e["dlen"].astype(np.int64)
        hlen = e["hlen"].astype(np.int64)
        if self.memory:
            return slen + hlen + dlen + 16
        return 30 + slen + dlen + np.where(hlen > 0, hlen + 4, 0)

    def msg_size(self, subject_len: int, hlen: int, dlen: int) -> int:
        if self.memory:
            return subject_len + hlen + dlen + 16
        return 30 + subject_len + dlen + (hlen + 4 if hlen else 0)

    # ------------------------------------------------------------------ subjects and their stats

    @property
    def subjects(self) -> list[str]:
        """Subject names by id (the subject table, as far as this process has read it)."""
        return self.subject_table.names

    @property
    def subject_ids(self) -> dict[str, int]:
        return self.subject_table.ids

    def subject_id(self, subject: str) -> int:
        """The id of ``subject``, added to the table if new (under the lock)."""
        table = self.subject_table
        sid = table.ids.get(subject)
        if sid is None:
            sid = len(table.names)
            self.header.subj_len += table.add(subject, self.header.subj_len)
            if self.stats_by_subject is not None:
                self.stats_by_subject = tuple(np.append(a, 0) for a in self.stats_by_subject)
        return sid

    def ensure_stats(self) -> subject_stats.Stats:
        """Per subject id: live count, first and last live sequence (see subject_stats.py)."""
        if self.stats_by_subject is None:
            self.stats_by_subject = subject_stats.build(self)
        return self.stats_by_subject

    def subject_count(self, sid: int) -> int:
        return int(self.ensure_stats()[0][sid])

    def subject_last(self, sid: int) -> int:
        """The last live sequence of a subject, or 0."""
        return subject_stats.last_of(self, sid)

    def subject_first(self, sid: int) -> int:
        """The first live sequence of a subject, or 0."""
        return subject_stats.first_of(self, sid)

    def seqs_of_subjects(self, sid_mask: np.ndarray, a: int, b: int) -> np.ndarray:
        """Live sequences in a..b whose subject id is set in ``sid_mask``."""
        return subject_stats.seqs_of_subjects(self, sid_mask, a, b)

    # ------------------------------------------------------------------ message ids (dedup.py)

    def ensure_dedup(self, now: int, window_ns: int) -> IdsCache:
        """Ids stored within the window: id hash -> (seq, ts)."""
        return self.message_ids.ensure_ids(self.header, now, window_ns)

    def ensure_ranges(self, now: int, window_ns: int) -> RangesCache:
        """Generated-id batches within the window: prefix hash -> [(first, last, seq, ts)]."""
        return self.message_ids.ensure_ranges(self.header, now, window_ns)

    def add_dedup(self, id_hash: bytes, seq: int, ts: int) -> None:
        self.message_ids.add(self.header, id_hash, seq, ts)

    def add_dedup_many(self, hashes: list[bytes], seqs: np.ndarray, ts: int) -> None:
        self.message_ids.add_many(self.header, hashes, seqs, ts)

    def add_range(self, prefix_hash: bytes, first: int, last: int, seq: int, ts: int) -> None:
        self.message_ids.add_range(self.header, prefix_hash, first, last, seq, ts)

    def compact_journals(self, now: int, window_ns: int) -> None:
        """After recording ids (under the lock): drop what left the window (see dedup.py)."""
        self.message_ids.compact(self.header, now, window_ns)

    def damaged_id_records(self, kind: str, repair: bool) -> int:
        """Damaged records of the ``dedup``/``dedup_ranges`` journal (under the lock); with
        ``repair``, the journal is rewritten without them."""
        return self.message_ids.damaged_records(self.header, kind, repair)

    def journal_path(self, kind: str, gen: Optional[int] = None) -> Path:
        return self.journals.path(kind, gen)

    # ------------------------------------------------------------------ checks and repair (verify.py, recovery.py)

    def bad_records(self, a: int, b: int) -> np.ndarray:
        return bad_records(self, a, b)

    def recount(self) -> None:
        recovery.recount(self)

    def drop_damaged(self, bad: np.ndarray) -> None:
        recovery.drop_damaged(self, bad)

    def lost(self) -> Optional[dict]:
        return recovery.lost(self.dir)

    # ------------------------------------------------------------------ writing (under locked())

    def _tail_block(self, seq: int, dlen: int, hlen: int) -> Block:
        if self.blocks:
            b = self.blocks[-1]
            if b.first + b.count == seq and b.count < BLOCK_MAX_MSGS and (b.dlen + dlen <= BLOCK_MAX_BYTES or b.count == 0):
                # Closed early when at least half of it is already removed (the stream keeps
                # less than half a block): the block is then dropped as soon as the few
                # messages it still holds go, instead of after a whole block more.  Looked
                # at once per 1,024 sequences, so the common case costs one comparison.
                if seq < self._roll_at:
                    return b
                if 2 * (self.header.first_seq - b.first) < b.count or b.count * ENTRY_SIZE + b.dlen + b.hlen < ROLL_MIN_BYTES:
                    self._roll_at = seq + 1024
                    return b
            if b.count % CHECK_EVERY and b.sfd >= 0:
                self._checkpoint(b, (b.count - 1) // CHECK_EVERY)  # seal its last, partial interval
        h = self.header
        h.tail_dcrc = h.tail_hcrc = h.tail_icrc = 0
        path = self.dir / "blk" / f"{seq:016x}"
        with diskio.io_errors(f"{path}.idx", "creating a block"):
            b = Block(path, seq, create=True)
            os.ftruncate(b.ifd, 0)
            os.ftruncate(b.dfd, 0)
            os.ftruncate(b.hfd, 0)
        self.blocks.append(b)
        self.block_firsts.append(seq)
        return b

    def _checkpoint(self, blk: Block, k: int) -> None:
        """Write interval k's checksums (the header's open-interval ones) and start the next interval."""
        h = self.header
        blk.checkpoint(k, (h.tail_dcrc, h.tail_hcrc, h.tail_icrc))
        h.tail_dcrc = h.tail_hcrc = h.tail_icrc = 0

    def sync_tail(self) -> None:
        """Learn the tail block's committed count and lengths (another process may have appended)."""
        if not self.blocks:
            return
        b = self.blocks[-1]
        n = self.header.last_seq - b.first + 1
        if b.verified and b.verified[-1][1] > self.header.last_seq:
            # The tail was cut (truncate_after, here or in another process): what is
            # written there next has not been checked.
            b.verified = [(lo, min(hi, self.header.last_seq)) for lo, hi in b.verified if lo <= self.header.last_seq]
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
        t = ENTRY.unpack(os.pread(b.ifd, ENTRY_SIZE, (n - 1) * ENTRY_SIZE))
        e = {"doff": t[1], "hoff": t[2], "dlen": t[3], "hlen": t[4]}
        b.count = n
        b.dlen = int(e["doff"]) + int(e["dlen"])
        b.hlen = int(e["hoff"]) + int(e["hlen"])

    def append(self, subject: str, hdr: bytes, data: bytes, ts: int) -> int:
        """Store one message at last_seq + 1; returns its sequence."""
        if self.stats_by_subject is None:
            self.ensure_stats()  # num_subjects needs the per-subject counts
        sid = self.subject_id(subject)
        h = self.header
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
                blk.dmm[doff : doff + n] = data
            else:
                diskio.pwrite(blk.dfd, data, doff, f"{blk.path}.dat")  # a message larger than the block's capacity
        if hdr:
            diskio.pwrite(blk.hfd, hdr, hoff, f"{blk.path}.hdr")
        crc = zlib.crc32(data) ^ (rotl1(zlib.crc32(hdr)) if hdr else 0) ^ seq_mix(seq, ts, sid)
        entry = ENTRY.pack(ts, doff, hoff, n, len(hdr), sid, crc)
        blk.imm[ioff : ioff + ENTRY_SIZE] = entry
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
            self.removed.rebase(seq)
        h.last_seq = seq
        h.last_ts = ts
        h.msgs += 1
        slen = self.subject_table.len_list[sid]
        if self.memory:
            h.bytes += slen + len(hdr) + len(data) + 16
        else:
            h.bytes += 30 + slen + len(data) + (len(hdr) + 4 if hdr else 0)
        h.held = 1
        count, first, last = self.stats_by_subject
        if count[sid] == 0:
            h.num_subjects += 1
            first[sid] = seq
        count[sid] += 1
        last[sid] = seq
        return seq

    def append_many(self, sids: np.ndarray, data: bytes, data_offsets: np.ndarray, hdr: bytes, hdr_offsets: np.ndarray, ts: int, hdr_crcs=None) -> int:
        """Store a run of messages (already validated) in one write per file; returns the first sequence."""
        self.ensure_stats()
        h = self.header
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
            cum = np.cumsum(dlens[pos : pos + room])
            fit = int(np.searchsorted(cum, BLOCK_MAX_BYTES - blk.dlen, side="right")) or 1
            k = min(room, fit, n - pos)
            d0, d1 = int(data_offsets[pos]), int(data_offsets[pos + k])
            h0, h1 = int(hdr_offsets[pos]), int(hdr_offsets[pos + k])
            e = np.zeros(k, dtype=IDX_DTYPE)
            e["ts"] = ts
            e["doff"] = blk.dlen + (data_offsets[pos : pos + k] - d0)
            e["hoff"] = blk.hlen + (hdr_offsets[pos : pos + k] - h0)
            e["dlen"] = dlens[pos : pos + k]
            e["hlen"] = hlens[pos : pos + k]
            e["sid"] = sids[pos : pos + k]
            mv = memoryview(data)
            hv = memoryview(hdr)
            e["crc"] = record_crcs(
                np.arange(seq, seq + k, dtype=np.uint64),
                e["ts"],
                e["sid"],
                hdr,
                hdr_offsets[pos : pos + k + 1],
                data,
                data_offsets[pos : pos + k + 1],
                None if hdr_crcs is None else hdr_crcs[pos : pos + k],
            )
            if d1 > d0:
                diskio.pwrite(blk.dfd, mv[d0:d1], blk.dlen, f"{blk.path}.dat")
            if h1 > h0:
                diskio.pwrite(blk.hfd, hv[h0:h1], blk.hlen, f"{blk.path}.hdr")
            eb = e.tobytes()
            diskio.pwrite(blk.ifd, eb, (seq - blk.first) * ENTRY_SIZE, f"{blk.path}.idx")
            self._chain(blk, k, mv, data_offsets[pos : pos + k + 1], hv, hdr_offsets[pos : pos + k + 1], eb)
            blk.dlen += d1 - d0
            blk.hlen += h1 - h0
            pos += k
            seq += k
        if h.msgs == 0:
            h.first_seq = first
            self.removed.rebase(first)
        h.last_seq = first + n - 1
        h.last_ts = ts
        h.msgs += n
        slen = self.subject_table.lens[sids.astype(np.int64)]
        if self.memory:
            h.bytes += int((slen + hlens + dlens + 16).sum())
        else:
            h.bytes += int((30 + slen + dlens + np.where(hlens > 0, hlens + 4, 0)).sum())
        h.held = 1
        if self.stats_by_subject is not None:
            before = int((self.stats_by_subject[0] > 0).sum())
            subject_stats.add(self.stats_by_subject, sids.astype(np.uint32), np.arange(first, first + n, dtype=np.int64))
            h.num_subjects += int((self.stats_by_subject[0] > 0).sum()) - before
        return first

    def _chain(self, blk: Block, k: int, data, data_offsets: np.ndarray, hdr, hdr_offsets: np.ndarray, entries: bytes) -> None:
        """Account k records just written at the block's end (blk.count not yet counting them)
        in the open interval's checksums, writing a checkpoint at each interval's end; bumps
        blk.count.  ``data_offsets``/``hdr_offsets``: k + 1 offsets into ``data``/``hdr``."""
        h = self.header
        d, hd = data_offsets.tolist(), hdr_offsets.tolist()
        i = 0
        while i < k:
            j = min(k, i + CHECK_EVERY - blk.count % CHECK_EVERY)
            h.tail_dcrc = zlib.crc32(data[d[i] : d[j]], h.tail_dcrc)
            if hd[j] > hd[i]:
                h.tail_hcrc = zlib.crc32(hdr[hd[i] : hd[j]], h.tail_hcrc)
            h.tail_icrc = zlib.crc32(entries[i * ENTRY_SIZE : j * ENTRY_SIZE], h.tail_icrc)
            blk.count += j - i
            if not blk.count % CHECK_EVERY and blk.sfd >= 0:
                self._checkpoint(blk, blk.count // CHECK_EVERY - 1)
            i = j

    def append_skip(self, ts: int) -> int:
        """Consume a sequence without storing anything (interest retention, no interest)."""
        h = self.header
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
            self.removed.rebase(seq + 1)
        else:
            self.removed.write([(seq, seq)], self.header)
            self.removed.apply([(seq, seq)])
            self.removed.compact(self.header)
        return seq

    def remove(self, seqs: np.ndarray) -> int:
        """Remove live sequences (sorted, unique); returns how many were removed."""
        self.ensure_stats()
        h = self.header
        if not len(seqs):
            return 0
        seqs = seqs[(seqs >= h.first_seq) & (seqs <= h.last_seq)]
        if not len(seqs):
            return 0
        seqs = seqs[~self.removed.mask(int(seqs[0]), int(seqs[-1]))[seqs - seqs[0]]]
        if not len(seqs):
            return 0
        e = np.concatenate([self.entries(int(a), int(b)) for a, b in runs_of(seqs)])
        stored = e["sid"] != SID_NONE
        removed_bytes = int(self.sizes(e[stored]).sum())
        if self.stats_by_subject is not None:
            count_before = int((self.stats_by_subject[0] > 0).sum())
            subject_stats.remove_seqs(self, seqs)
            h.num_subjects += int((self.stats_by_subject[0] > 0).sum()) - count_before
        n = int(stored.sum())
        h.msgs -= n
        h.bytes -= removed_bytes
        first = int(seqs[0])
        head = first == h.first_seq and int(seqs[-1]) - first + 1 - len(seqs) == int(self.removed.mask(first, int(seqs[-1])).sum())
        if not head:
            runs = runs_of(seqs)
            self.removed.write(runs, self.header)
            self.removed.apply(runs)
        self._advance_first(int(seqs[-1]) + 1 if head else h.first_seq)
        if not head:
            self.removed.compact(self.header)
        return n

    def remove_first(self) -> int:
        """Remove the first live message: remove() for the discard-old steady state (one
        message in, the oldest out) without building arrays.  Returns 1, or 0 if empty."""
        h = self.header
        if h.msgs <= 0:
            return 0
        stats = self.stats_by_subject if self.stats_by_subject is not None else self.ensure_stats()
        views = self._stats_views
        if views is None or views[0] is not stats:
            # Memoryviews of the stats arrays: a scalar read or store through them costs a
            # fraction of NumPy's, which is most of this function's time otherwise.
            views = self._stats_views = (stats, *map(memoryview, stats))  # type: ignore[arg-type]  # (arrays are buffers)
        _, count, first, last = views
        seq = h.first_seq
        bf = self.block_firsts
        blk = self.blocks[0] if len(bf) == 1 or bf[1] > seq else self.blocks[self._block_index(seq)]
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
        # As subject_stats.remove_seqs: a removed first or last is looked up again when asked for.
        if first[sid] == seq:
            first[sid] = 0
        if last[sid] == seq:
            last[sid] = 0
        h.msgs -= 1
        slen = self.subject_table.len_list[sid]
        h.bytes -= (slen + hlen + dlen + 16) if self.memory else (30 + slen + dlen + (hlen + 4 if hlen else 0))  # msg_size
        # _advance_first(seq + 1), with no removed sequences ahead (no bitmap) inline.
        if self.removed.bitmap.size or not h.msgs:
            self._advance_first(seq + 1)
        else:
            h.first_seq = self.removed.base = seq + 1
            if len(bf) > 1 and bf[1] <= seq + 1:
                self._drop_old_blocks()
        return 1

    def _advance_first(self, start: int) -> None:
        h = self.header
        old = h.first_seq
        f = h.first_seq = self.next_live(start) if h.msgs > 0 else h.last_seq + 1
        if f > old:
            self.removed.rebase(f)
            bf = self.block_firsts
            if (len(bf) > 1 and bf[1] <= f) or h.msgs == 0:  # else no block is wholly below f
                self._drop_old_blocks()

    def set_floor(self, seq: int) -> None:
        """Purge up to seq - 1 when seq is past the end: the next publish gets seq (docs/semantics.md §4)."""
        h = self.header
        h.first_seq = seq
        h.last_seq = seq - 1
        h.held = 1
        self.removed.rebase(seq)
        self._drop_old_blocks()

    def _drop_old_blocks(self) -> None:
        """Blocks wholly below first_seq are unlinked after the commit (see _Locked)."""
        f = self.header.first_seq
        while self.blocks:
            b = self.blocks[0]
            end = self.blocks[1].first if len(self.blocks) > 1 else b.first + b.count
            if end > f:
                break
            self.pending_unlink.append(self.blocks.pop(0))
            self.block_firsts.pop(0)


def _change_key(h: StreamHeader) -> tuple:
    """The header fields a change moves: equal before and after means nothing to commit."""
    return (
        h.commit,
        h.last_seq,
        h.ops_len,
        h.dedup_len,
        h.subj_len,
        h.first_seq,
        h.msgs,
        h.cfg_gen,
        h.deleted,
        h.held,
        h.last_id,
        h.cons_gen,
        h.ranges_len,
        h.jgen,
    )


class _Locked:
    __slots__ = ("storage",)  # the storage; its _start holds the header fields the change began from

    def __init__(self, storage: StreamStorage) -> None:
        self.storage = storage

    def __enter__(self) -> StreamStorage:
        s = self.storage
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
            if s.header_file.committed_counter() != s.header.commit:
                s._catch_up(s.header_file.read())
            if s.header_file.slot_damaged:
                s.header_file.repair()
            s.pending_unlink = []
            s.consumers_changed = False
            s._start = _change_key(s.header)
        except BaseException:
            fcntl.flock(s._lock_fd, fcntl.LOCK_UN)
            s._thread_lock.release()
            raise
        s._depth = 1
        return s

    def __exit__(self, exc_type, exc, tb):
        s = self.storage
        if s._depth > 1:
            s._depth -= 1
            s._thread_lock.release()
            return False
        s._depth = 0
        try:
            if exc_type is None:
                changed = _change_key(s.header) != s._start
                if changed:
                    s._commit()
                if (changed or s.consumers_changed) and s.notifier is not None:
                    s.notifier.notify()  # still under the lock: see wakeup.py
                for b in s.pending_unlink:
                    b.close()
                    b.unlink()
                if s.journals.retired:
                    s.journals.retire()
            elif not isinstance(exc, APIError) or _change_key(s.header) != s._start:
                # A failure halfway through a change (anything but a request refused
                # before its first write): what was written past the last commit is
                # ignored by everyone and overwritten by the next writer; forget our
                # in-memory changes (header, blocks, caches) and reload.
                s._reset_caches()
        finally:
            s.pending_unlink = []
            fcntl.flock(s._lock_fd, fcntl.LOCK_UN)
            s._thread_lock.release()
        if isinstance(exc, OSError) and not isinstance(exc, StoreError):
            # Any other system error met while changing the stream: typed, naming the stream.
            raise diskio.translate(exc, s.dir, "updating the stream") from exc
        return False
