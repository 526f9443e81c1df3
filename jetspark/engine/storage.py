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

This module is the façade: ``StreamStorage`` composes the layers below it
and keeps what ties them together: this process's caches (the per-subject
stats, the dedup caches, the TTL index), catching up with other processes, and the change
protocol (``locked()``: the lock, and the commit).  The layers, each
depending only on those above it in this list:

- records.py, blocks.py: the record format and one block's files;
- state_header.py, journals.py, subject_table.py, removed.py: the two-slot
  header and the commit, the journal files and what their records mean;
- block_index.py: the blocks of the stream, index entries, sizes and
  liveness by sequence (``BlockIndex``);
- verify.py: records checked before they are served, and read;
- subject_stats.py: per-subject counts, first and last sequences;
- recovery.py: torn tails cut, damage dropped, counts rebuilt;
- block_writer.py: appends and removals, with the counts they move kept
  inline (the hot paths: one publish or one discard-old removal touches the
  header, the tail block, the subject table, the removed set and the
  per-subject counts without a call per part);
- dedup.py: the message-id journals and their caches;
- ttl_index.py: which messages carry a per-message TTL, read back from their headers.

verify, subject_stats, recovery and block_writer take the ``BlockIndex`` (and
the stats they maintain), never the façade, which owns the lock and commits
around them.

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
import threading
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from jetspark.engine import diskio, recovery, subject_stats, wakeup
from jetspark.engine.block_index import BlockIndex
from jetspark.engine.block_writer import BlockWriter
from jetspark.engine.blocks import Block
from jetspark.engine.dedup import IdsCache, MessageIds, RangesCache
from jetspark.engine.journals import FilesMoved, Journals
from jetspark.engine.locking import FORK_GENERATION, FLock
from jetspark.engine.records import IDX_DTYPE
from jetspark.engine.removed import RemovedSet
from jetspark.engine.state_header import HeaderFile, StreamHeader, pack_slot
from jetspark.engine.subject_table import SubjectTable
from jetspark.engine.ttl_index import TTLIndex
from jetspark.engine.verify import Record, bad_records, read_message, read_messages, verify
from jetspark.errors import APIError, CorruptStoreError, StoreError


class StreamStorage:
    """The files of one stream and this process's caches of them.

    Mutations happen inside ``with storage.locked():``, which takes the
    cross-process lock, brings the caches up to date, and commits ``header``
    on a clean exit.  Reads outside the lock call ``refresh()`` first.
    ``header`` is the committed header as this process last read it, plus
    the change under way while the lock is held.
    """

    _start: tuple  # set by _Locked: the header fields the change under way began from
    # (count, first, last) per subject id; None until a caller needs it (ensure_stats).
    stats_by_subject: Optional[subject_stats.Stats]

    def __init__(self, data_dir: Path, lock_path: Path, *, memory: bool, fsync: bool) -> None:
        self.dir = Path(data_dir)
        self.lock_path = Path(lock_path)
        self.memory = memory
        self.fsync = fsync and not memory
        self._thread_lock = threading.RLock()
        self._depth = 0
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
        # The blocks, entries and liveness by sequence (block_index.py): the layer verify,
        # subject_stats and recovery work on.
        self.index = BlockIndex(self.dir, self.subject_table, RemovedSet(self.journals), memory=self.memory)
        self.writer = BlockWriter(self.index, self.subject_table, memory=self.memory)
        if self.notifier is not None:
            self.notifier.close()  # after fork: the parent's mapping of it is shared, the child maps its own
        self.notifier = wakeup.Notifier.open(self.dir / wakeup.NAME)
        if not self.header_file.written():
            with self._flock():
                if not self.header_file.written():
                    self.header_file.create(self._has_data())
        self.header_file.map()
        self._reset_caches()
        self.refresh()
        if not recovery.tail_intact(self.index):
            with self.locked():
                stats = recovery.repair_tail(self.index)
                if stats is not None:
                    self.stats_by_subject = stats
        if self.index.orphans():
            with self.locked():
                for path in self.index.orphans():
                    path.unlink(missing_ok=True)

    def _has_data(self) -> bool:
        return (
            any((self.dir / "blk").glob("*.idx"))
            or bool(os.fstat(self.subject_table.fd).st_size)
            or self.journals.any_data()
        )

    def _reset_caches(self) -> None:
        self.index.reset(RemovedSet(self.journals))
        self.header_file.slot_damaged = False
        self.subject_table.clear()
        self.stats_by_subject = None
        self.writer.reset()
        self.message_ids = MessageIds(self.journals)
        self.journals.keep_retired()
        # Read back from the stream on demand, by streams with allow_msg_ttl (ttl_index.py).
        self.ttl_index: Optional[TTLIndex] = None

    # What the block index holds, read by the layers above the storage (stream.py, check.py, ...).

    @property
    def header(self) -> StreamHeader:
        return self.index.header

    @property
    def blocks(self) -> list[Block]:
        return self.index.blocks

    @property
    def block_firsts(self) -> list[int]:
        return self.index.block_firsts

    @property
    def removed(self) -> RemovedSet:
        return self.index.removed

    @property
    def thread_lock(self):
        """This process's lock on the caches (``locked()`` takes it first): for a reader that
        updates one of them outside ``locked()``."""
        return self._thread_lock

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
            self.index.blocks = []  # dropped, not closed: _open starts a new index
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
            raise CorruptStoreError(
                f"{self.dir}: the stream's files kept changing under 100 reads of its header", self.dir
            )

    def _catch_up(self, h: StreamHeader) -> None:
        ix = self.index
        if h.deleted:
            # Final: its files may be gone already (journals replaced since we looked
            # included), and nothing reads this stream's caches again (Stream raises 10059).
            ix.header = h
            return
        for kind in self.journals.open_generation(h.jgen):
            # Offsets into the old file mean nothing in the new one.  Rereading a compacted
            # ops journal is harmless: it holds removals, and removing twice changes nothing.
            if kind == "ops":
                ix.removed.read_upto = 0
            else:
                self.message_ids.forget(kind)
        old = ix.header
        if old.commit < 0 or h.commit < old.commit:
            # First load, or the files were replaced: rebuild from scratch.
            self._reset_caches()
            removed = ix.removed
            removed.base = h.first_seq
            self._read_subjects(h.subj_len)
            ix.header = h
            ix.rescan()
            removed.apply(removed.read(h.ops_len))
            ix.prune()
            ix.sync_tail()
            return
        self._read_subjects(h.subj_len)
        ix.header = h
        if h.last_seq != old.last_seq or h.first_seq != old.first_seq:
            ix.rescan()
        ranges = ix.removed.read(h.ops_len)
        if self.stats_by_subject is None:
            ix.removed.apply(ranges)
        else:
            self._catch_up_stats(old, h, ranges)
        ix.removed.rebase(h.first_seq)
        ix.prune()
        ix.sync_tail()
        self.message_ids.catch_up(h)

    def _read_subjects(self, upto: int) -> None:
        table = self.subject_table
        table.read(upto)
        if self.stats_by_subject is not None:
            grow = len(table.names) - len(self.stats_by_subject[0])
            if grow > 0:
                self.stats_by_subject = tuple(
                    np.concatenate([a, np.zeros(grow, np.int64)]) for a in self.stats_by_subject
                )

    def _catch_up_stats(self, old: StreamHeader, h: StreamHeader, ranges: list[tuple[int, int]]) -> None:
        """Apply the removals and move the per-subject stats from ``old`` to ``h``: what was
        removed (subject_stats.catch_up), then the appended tail, read here."""
        stats = self.stats_by_subject
        assert stats is not None
        subject_stats.catch_up(self.index, stats, old, h, ranges)
        lo = max(old.last_seq + 1, h.first_seq)
        if lo <= h.last_seq:
            cause = None
            try:
                e = self.index.entries(lo, h.last_seq)
            except CorruptStoreError as exc:
                e, cause = np.zeros(1, dtype=IDX_DTYPE), exc
            if not e["ts"].all():
                # An entry never written (every stored entry has a time), or none: a block
                # created after our last look was dropped again before we listed the blocks
                # (a fast writer, small blocks).  Start over from a fresh header.
                self._reset_caches()
                raise FilesMoved(
                    f"{self.dir / 'blk'}: sequences {lo}..{h.last_seq} are not all in the blocks listed "
                    f"({cause or 'unwritten index entries'})",
                    self.dir / "blk",
                ) from cause
            live = ~self.index.removed.mask(lo, h.last_seq)
            subject_stats.add(stats, e["sid"][live], np.arange(lo, h.last_seq + 1, dtype=np.int64)[live])

    # ------------------------------------------------------------------ lookups (block_index.py) and reads (verify.py)

    def dead_mask(self, a: int, b: int) -> np.ndarray:
        """True where a sequence in a..b (all >= first_seq) was removed."""
        return self.index.removed.mask(a, b)

    def is_live(self, seq: int) -> bool:
        return self.index.is_live(seq)

    def next_live(self, seq: int) -> int:
        """The first live sequence >= seq, or last_seq + 1."""
        return self.index.next_live(seq)

    def entries(self, a: int, b: int) -> np.ndarray:
        """The index entries of sequences a..b (committed, >= first_seq) as one array."""
        return self.index.entries(a, b)

    def block_spans(self, a: int, b: int) -> Iterator[tuple[Block, int, int]]:
        """(block, first, last) pieces of a..b, one per block."""
        return self.index.block_spans(a, b)

    def sizes(self, e: np.ndarray) -> np.ndarray:
        """Per-message byte accounting as the server counts it (docs/semantics.md §3.1)."""
        return self.index.sizes(e)

    def msg_size(self, subject_len: int, hlen: int, dlen: int) -> int:
        return self.index.msg_size(subject_len, hlen, dlen)

    def verify(self, blk: Block, a: int, b: int, data: Optional[bytes] = None, e: Optional[np.ndarray] = None) -> None:
        """Check records a..b of ``blk`` before serving them (see verify.verify)."""
        verify(self.index, blk, a, b, data, e)

    def read_message(self, seq: int) -> Record:
        """(subject, header block, payload, ts) of a live sequence."""
        return read_message(self.index, seq)

    def read_messages(self, seqs: list[int]) -> list[Record]:
        """(subject, header block, payload, ts) for each sequence (see verify.read_messages)."""
        return read_messages(self.index, seqs)

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
            self.stats_by_subject = subject_stats.build(self.index)
        return self.stats_by_subject

    def subject_count(self, sid: int) -> int:
        return int(self.ensure_stats()[0][sid])

    def subject_last(self, sid: int) -> int:
        """The last live sequence of a subject, or 0."""
        return subject_stats.last_of(self.index, self.ensure_stats(), sid)

    def subject_first(self, sid: int) -> int:
        """The first live sequence of a subject, or 0."""
        return subject_stats.first_of(self.index, self.ensure_stats(), sid)

    def seqs_of_subjects(self, sid_mask: np.ndarray, a: int, b: int) -> np.ndarray:
        """Live sequences in a..b whose subject id is set in ``sid_mask``."""
        return subject_stats.seqs_of_subjects(self.index, sid_mask, a, b)

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
        return bad_records(self.index, a, b)

    def recount(self) -> None:
        """Count messages, bytes and subjects again (under the lock, after a repair)."""
        self.stats_by_subject = recovery.recount(self.index)

    def drop_damaged(self, bad: np.ndarray) -> None:
        """Drop the damaged records ``bad`` (under the lock; see recovery.drop_damaged)."""
        self.stats_by_subject = recovery.drop_damaged(self.index, bad)

    def lost(self) -> Optional[dict]:
        return recovery.lost(self.dir)

    # ------------------------------------------------------------------ writing (under locked(); block_writer.py)

    def append(self, subject: str, hdr: bytes, data: bytes, ts: int) -> int:
        """Store one message at last_seq + 1; returns its sequence."""
        sid = self.subject_id(subject)  # (may grow the stats by one subject)
        stats = self.stats_by_subject
        if stats is None:
            stats = self.ensure_stats()  # num_subjects needs the per-subject counts (sized by the table)
        return self.writer.append(sid, hdr, data, ts, stats)

    def append_many(
        self,
        sids: np.ndarray,
        data: bytes,
        data_offsets: np.ndarray,
        hdr: bytes,
        hdr_offsets: np.ndarray,
        ts: int,
        hdr_crcs=None,
    ) -> int:
        """Store a run of messages (already validated) in one write per file; returns the first sequence."""
        return self.writer.append_many(sids, data, data_offsets, hdr, hdr_offsets, ts, hdr_crcs, self.ensure_stats())

    def append_skip(self, ts: int) -> int:
        """Consume a sequence without storing anything (interest retention, no interest)."""
        return self.writer.append_skip(ts)

    def remove(self, seqs: np.ndarray) -> int:
        """Remove live sequences (sorted, unique); returns how many were removed."""
        return self.writer.remove(seqs, self.ensure_stats())

    def remove_first(self) -> int:
        """Remove the first live message (see block_writer.BlockWriter.remove_first).  Returns 1, or 0 if empty."""
        stats = self.stats_by_subject
        return self.writer.remove_first(stats if stats is not None else self.ensure_stats())

    def set_floor(self, seq: int) -> None:
        """Purge up to seq - 1 when seq is past the end: the next publish gets seq (docs/semantics.md §4)."""
        self.writer.set_floor(seq)


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
            s.index.pending_unlink = []
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
                for b in s.index.pending_unlink:
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
            s.index.pending_unlink = []
            fcntl.flock(s._lock_fd, fcntl.LOCK_UN)
            s._thread_lock.release()
        if isinstance(exc, OSError) and not isinstance(exc, StoreError):
            # Any other system error met while changing the stream: typed, naming the stream.
            raise diskio.translate(exc, s.dir, "updating the stream") from exc
        return False
