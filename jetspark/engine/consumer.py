"""Consumers: delivery, acknowledgement, redelivery and ack floors (docs/semantics.md §5, §6).

A consumer's state is what nats-server keeps (``consumer.go``): the next
delivery sequence, the next stream sequence, the ack floor, the pending
deliveries with their deadlines, and the delivery counts.  It lives in an
append-only log of state changes next to its config::

    cons/<name>/config.json     the consumer's config and creation time, with its
                                mirror config.json.1 (see metafile.py)
    cons/<name>/log             "JSPKCL01" | u64 committed length, then records:
                                u32 len | u32 crc | op, scalars, items

A record's scalars include the times of the last delivery and the last ack
(``delivered.last_active`` and ``ack_floor.last_active`` in the consumer's
info, as nats-server reports them), in nanoseconds, so every process reads
the same times back exactly.  Records written before those times were kept
(op without ``TIMED``) are read as they are, with both times unknown.

Every change happens under the stream's lock, so deliveries, acks and the
stream's retention stay consistent across processes; each process keeps
the state in memory and reads only the records appended since it last
looked.  A record is applied only if its length and checksum hold.

A process killed while appending a record leaves it torn, and a torn record
can only be the last one: the next process to look cuts it off (with a
warning), and at worst a delivery is forgotten and the message delivered
again, never lost.  The log's header holds the length of its records that
calls completed (written after each record), so a log cut anywhere below that
(records lost, not a torn tail: its acks would silently roll back) is damage.
A log written before the header existed (no magic) is read as it is, without
that check, until its next compaction rewrites it with one.  A bad record that valid records follow is damage, not a
crash: ``CorruptStoreError`` names the log and the offset, and nothing is
cut.  The first record is always written before the log is in place (into
the new consumer's directory before it is renamed into ``cons/``, or into
``log.tmp`` before a compaction renames it over ``log``), so a crash can
never tear it: a bad first record is damage too, even when it is the only
one, rather than a reason to start the consumer over from nothing.

A call's change is one record, appended whole or not at all: when the disk
refuses it, the torn bytes are cut, the in-memory state is read back from
the log, and the call raises ``StoreFullError``/``StoreIOError`` having
changed nothing.  When the log would outgrow ``COMPACT_BYTES``, the change
is written as a snapshot of the whole state into a new log that is renamed
over the old one, and the stream header's ``cons_gen`` tells the other
processes to reopen it.

Time-driven behaviour (ack_wait, backoff, nak delays, inactive_threshold)
is evaluated against the injected clock at the next operation.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import uuid
import zlib
from pathlib import Path
from typing import Optional

import numpy as np

from jetspark.api import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    SequenceInfo,
    ns_to_datetime,
)
from jetspark.engine import bindings, diskio, metafile
from jetspark.engine.consumer_config import filters_of
from jetspark.engine.records import SID_NONE
from jetspark.errors import CorruptStoreError
from jetspark.protocol import subjects as subj

log = logging.getLogger("jetspark")

_NS = 1_000_000_000
# len, crc, op, n, then the scalars: delivered_consumer_seq, next_stream_seq,
# ack_floor_consumer_seq, ack_floor_stream_seq, last_active, and in a TIMED record
# delivered_ns and acked_ns.
_HEAD = struct.Struct("<IIBI")
LOG_MAGIC = b"JSPKCL01"
_LOG_HEAD = struct.Struct("<8sQ")  # magic, committed length (the records' end when the last call returned)
_COMMITTED_OFF = 8
_REC = struct.Struct("<IIBIqqqqqqq")
_BODY = struct.Struct("<BIqqqqqqq")  # _REC after len and crc: what the crc covers
_REC_UNTIMED = struct.Struct("<IIBIqqqqq")  # records written before the two times were kept
# One item: stream sequence, consumer sequence, delivery count, due time.  Here and in the
# loops that apply records, sseq/cseq are short for the stream and consumer sequence.
_ITEM = np.dtype([("sseq", "<u8"), ("cseq", "<u8"), ("count", "<u4"), ("due", "<i8")])
SCALARS, DELIVER, DROP, DUE, MAXED, SNAPSHOT, LAST_PER_SUBJECT = range(7)
TIMED = 0x80  # in a record's op: its scalars end with delivered_ns and acked_ns
_OP = 0x7F  # the op itself
QUEUED = 0xFFFFFFFF  # an item's count marking "appended to the redelivery queue"
COMPACT_BYTES = 4 << 20


class Consumer:
    """One consumer of a stream, as this process last saw it."""

    def __init__(self, stream, home: Path, fresh: bool = False) -> None:
        """Open the consumer in ``home``; CorruptStoreError if its config or log is damaged.

        ``fresh``: a consumer being created, whose empty log gets its first record next.
        """
        self.stream = stream
        self.home = home
        self.damaged: Optional[CorruptStoreError] = None
        path = home / "config.json"
        try:
            meta = metafile.load(path, fsync=stream.storage.fsync)
            self.config = config_from_json(meta["config"])
            self.created_ns = int(meta["created"])
            self.name = meta.get("name") or self.config.name
        except FileNotFoundError:
            raise CorruptStoreError(f"{path} and its mirror {path.name}{metafile.MIRROR_SUFFIX} are missing", path=str(path)) from None
        except (KeyError, ValueError, TypeError) as exc:
            raise CorruptStoreError(f"{path} is not a consumer config: {type(exc).__name__}: {exc}", path=str(path)) from exc
        self.filters = filters_of(self.config)
        self._sid_mask: Optional[np.ndarray] = None
        flags = os.O_RDWR | (os.O_CREAT if fresh else 0)
        try:
            self._fd = os.open(home / "log", flags, 0o644)
        except FileNotFoundError:
            raise CorruptStoreError(f"{home / 'log'} is missing: the consumer's state is lost", path=str(home / "log")) from None
        except OSError as exc:
            raise diskio.translate(exc, home / "log", "opening") from exc
        self._base = _LOG_HEAD.size  # where records start (0 in a log without the header)
        self._synced = False
        try:
            if fresh:
                diskio.pwrite(self._fd, _LOG_HEAD.pack(LOG_MAGIC, _LOG_HEAD.size), 0, self.log_path)
            else:
                self._read_head()
            self._reset()
            self.sync()
        except BaseException:
            self.close()
            raise

    def _reset(self) -> None:
        self.delivered_consumer_seq = 0
        self.next_stream_seq = 1
        self.ack_floor_consumer_seq = 0
        self.ack_floor_stream_seq = 0
        self.last_active = 0  # the last pull or creation (inactive_threshold's clock)
        self.delivered_ns = 0  # the last delivery, in_progress or delayed nak (0: none yet)
        self.acked_ns = 0  # the last ack or term that counted (0: none yet)
        self.pending: dict[int, list[int]] = {}  # stream seq -> [consumer seq of its first delivery, due_ns]
        self.delivery_counts: dict[int, int] = {}  # stream seq -> deliveries so far
        self.last_per_subject: list[int] = []  # last-per-subject sequences still to deliver
        self.redelivery_queue: list[int] = []  # the redelivery queue, in order (naks first come first)
        self.replayed: list = []  # sequences other processes' records released (see ConsumerSet.sync)
        self._pos = self._base

    def close(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass

    # ------------------------------------------------------------------ log

    @property
    def log_path(self) -> Path:
        return self.home / "log"

    def _read_head(self) -> None:
        """A new log starts with its header; one without it was written before it existed."""
        head = os.pread(self._fd, _LOG_HEAD.size, 0)
        if not head:
            raise self._damage("is empty: its first record, written before the log is in place, is missing")
        if head[:8] == LOG_MAGIC:
            if len(head) < _LOG_HEAD.size:
                raise self._damage(f"is {len(head)} bytes, shorter than its header: its records were lost")
        elif LOG_MAGIC.startswith(head[:8]) and len(head) < 8:
            raise self._damage(f"is {len(head)} bytes, shorter than its header: its records were lost")
        else:
            self._base = 0

    def _committed(self) -> int:
        if not self._base:
            return 0
        return _LOG_HEAD.unpack(os.pread(self._fd, _LOG_HEAD.size, 0))[1]

    def sync(self) -> bool:
        """Apply records other processes appended; cut a torn tail off (caller holds the lock).

        False if the log file was replaced or removed since this process opened it: a
        process rewrote it (compact) or deleted the consumer and died before its cons_gen
        bump was committed; the caller reopens the consumers.  CorruptStoreError if the
        log is damaged (see the module docstring); the consumer is then unusable.
        """
        if self.damaged is not None:
            raise self.damaged
        with diskio.io_errors(self.log_path, "reading the consumer's state"):
            st = os.fstat(self._fd)
            if st.st_nlink == 0:
                return False
            size = st.st_size
            if size < self._pos:
                raise self._damage(f"is {size} bytes, shorter than the {self._pos} bytes of records already read: records were lost")
            if size == self._pos and self._synced:
                return True
            committed = self._committed()
            if size < committed:
                raise self._damage(f"is {size} bytes, shorter than the {committed} bytes its header commits (cut short): records were lost")
            raw = os.pread(self._fd, size - self._pos, self._pos)
            pos = 0
            while pos < len(raw):
                length = _record_at(raw, pos)
                if not length:
                    break
                self._apply(raw, pos)
                pos += length
            bad = self._pos + pos
            self._pos = bad
            if bad < size:
                why = _what_is_wrong(raw, pos)
                if bad == self._base:
                    raise self._damage(f"has a damaged first record ({why}); a crash cannot tear it, so it is not cut")
                if _record_after(raw, pos):
                    raise self._damage(f"has a damaged record at offset {bad} ({why}) followed by valid records; nothing was cut")
                if bad < committed:
                    raise self._damage(f"has a damaged record at offset {bad} ({why}) below the {committed} bytes its header commits; nothing was cut")
                log.warning(
                    "%s: the last record, at offset %d (%d bytes), is torn (%s) and was cut off: a writer died mid-record", self.log_path, bad, size - bad, why
                )
                os.ftruncate(self._fd, bad)
            if committed > self._pos:
                raise self._damage(f"holds {self._pos} bytes of records, less than the {committed} its header commits (cut short): records were lost")
            self._synced = True
        return True

    def _damage(self, what: str) -> CorruptStoreError:
        self.damaged = CorruptStoreError(f"{self.log_path} {what}: the state of consumer {self.name!r} cannot be trusted", path=str(self.log_path))
        return self.damaged

    def _apply(self, raw: bytes, pos: int) -> None:
        old_floor = self.ack_floor_stream_seq
        head = _REC if raw[pos + 8] & TIMED else _REC_UNTIMED
        _, _, op, n, *scalars = head.unpack_from(raw, pos)
        op &= _OP
        self.delivered_consumer_seq, self.next_stream_seq, self.ack_floor_consumer_seq, self.ack_floor_stream_seq, self.last_active = scalars[:5]
        self.delivered_ns, self.acked_ns = scalars[5:] or (0, 0)
        items = np.frombuffer(raw, dtype=_ITEM, count=n, offset=pos + head.size)
        # What this record released, for the stream's retention to reconsider: the
        # process that wrote it may have died before committing the removal.
        if op == DROP:
            self.replayed.append(items["sseq"].astype(np.int64))
        elif op == DELIVER and self.config.ack_policy == AckPolicy.NONE:
            self.replayed.append(items["sseq"].astype(np.int64))
        if self.ack_floor_stream_seq > old_floor:
            self.replayed.append(np.arange(old_floor + 1, self.ack_floor_stream_seq + 1, dtype=np.int64))
        if op == SNAPSHOT:
            self.pending, self.delivery_counts, self.last_per_subject, self.redelivery_queue = {}, {}, [], []
        if op in (DELIVER, SNAPSHOT):
            for sseq, cseq, count, due in items.tolist():
                if count == QUEUED:
                    self.redelivery_queue.append(sseq)
                    continue
                if due >= 0:
                    self.pending[sseq] = [cseq, due]
                if count:
                    self.delivery_counts[sseq] = count
                if op == DELIVER and sseq in self.redelivery_queue:
                    self.redelivery_queue.remove(sseq)
                if op == SNAPSHOT and cseq == 0 and due < 0 and count == 0:
                    self.last_per_subject.append(sseq)
        elif op == DROP:
            for sseq in items["sseq"].tolist():
                self.pending.pop(sseq, None)
                self.delivery_counts.pop(sseq, None)
                if sseq in self.redelivery_queue:
                    self.redelivery_queue.remove(sseq)
        elif op == DUE:
            for sseq, _, count, due in items.tolist():
                if sseq in self.pending:
                    self.pending[sseq][1] = due
                    if count == QUEUED and sseq not in self.redelivery_queue:
                        self.redelivery_queue.append(sseq)
        elif op == MAXED:
            for sseq in items["sseq"].tolist():
                self.pending.pop(sseq, None)
        elif op == LAST_PER_SUBJECT:
            self.last_per_subject = items["sseq"].tolist()

    def write(self, op: int, items=None) -> None:
        """Record the change just made in memory (caller holds the lock): one record with the
        current scalars, or a compaction when the log would pass COMPACT_BYTES.  On a disk
        error the in-memory state goes back to what the log holds, and StoreIOError /
        StoreFullError (naming the log) is raised: the call changed nothing."""
        arr = items if isinstance(items, np.ndarray) else np.array(items or [], dtype=_ITEM)
        if op != DELIVER:
            self.stream.storage.consumers_changed = True  # may make messages deliverable: wake waiters
        rec = self._record(op, arr)
        compact = self._pos > self._base and self._pos + len(rec) > COMPACT_BYTES
        try:
            if compact:
                # The snapshot holds this change already: it is the call's one write.
                self.compact()
            else:
                self._append(rec)
        except OSError as exc:
            action = "compacting the consumer's log (into log.tmp)" if compact else "appending to the consumer's log"
            err = diskio.translate(OSError(exc.errno, exc.strerror), self.log_path, action)
            self._revert()
            raise err from exc

    def _record(self, op: int, arr: np.ndarray) -> bytes:
        """One log record: the op, the consumer's sequences and ``arr``'s items, with a CRC-32."""
        body = (
            _BODY.pack(
                op | TIMED,
                len(arr),
                self.delivered_consumer_seq,
                self.next_stream_seq,
                self.ack_floor_consumer_seq,
                self.ack_floor_stream_seq,
                self.last_active,
                self.delivered_ns,
                self.acked_ns,
            )
            + arr.tobytes()
        )
        return struct.pack("<II", 8 + len(body), zlib.crc32(body)) + body

    def _append(self, rec: bytes) -> None:
        try:
            diskio.pwrite(self._fd, rec, self._pos, self.log_path)
            if self._base:
                diskio.pwrite(self._fd, struct.pack("<Q", self._pos + len(rec)), _COMMITTED_OFF, self.log_path)
        except OSError:
            try:
                os.ftruncate(self._fd, self._pos)  # cut the torn bytes (shrinking needs no space)
            except OSError:
                pass  # the next reader sees a torn last record and cuts it
            raise
        self._pos += len(rec)

    def _revert(self) -> None:
        """Forget the in-memory change of a call whose record could not be written."""
        self._reset()
        try:
            self.sync()
        except CorruptStoreError:
            pass  # self.damaged is set: the consumer set drops the consumer at its next sync
        self.replayed = []  # released when first read, long ago

    def compact(self) -> None:
        """Rewrite the log as one snapshot; other processes reopen it on the cons_gen bump."""
        rec = self._record(SNAPSHOT, np.array(self._snapshot_items(), dtype=_ITEM))
        fsync = self.stream.storage.fsync
        tmp = self.home / "log.tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            diskio.pwrite(fd, _LOG_HEAD.pack(LOG_MAGIC, _LOG_HEAD.size + len(rec)) + rec, 0, tmp)  # all of it, or StoreIOError/StoreFullError
            if fsync:
                os.fsync(fd)
            os.replace(tmp, self.log_path)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        os.close(self._fd)
        self._fd = fd  # the snapshot's file is the log now
        self._base = _LOG_HEAD.size
        self._pos = _LOG_HEAD.size + len(rec)
        if fsync:
            metafile.fsync_dir(self.home)
        self.stream.storage.header.cons_gen += 1

    # ------------------------------------------------------------------ matching

    def sid_mask(self) -> Optional[np.ndarray]:
        """Which subject ids this consumer's filters match (None: all)."""
        if not self.filters:
            return None
        names = self.stream.storage.subjects
        m = self._sid_mask
        if m is None or len(m) != len(names) + 1:
            old = 0 if m is None else len(m) - 1
            grown = np.zeros(len(names) + 1, dtype=bool)
            if m is not None:
                grown[:old] = m[:old]
            for i in range(old, len(names)):
                grown[i] = subj.matches_any(self.filters, names[i])
            self._sid_mask = m = grown
        return m

    def matches(self, subject: str) -> bool:
        return not self.filters or subj.matches_any(self.filters, subject)

    def match_sids(self, sids: np.ndarray) -> np.ndarray:
        stored = sids != SID_NONE
        m = self.sid_mask()
        if m is None:
            return stored
        safe = np.where(stored, sids, len(m) - 1).astype(np.int64)
        return stored & m[np.minimum(safe, len(m) - 1)]

    def matching_live(self, a: int, b: int) -> np.ndarray:
        """Live sequences in a..b this consumer's filters match."""
        s = self.stream.storage
        a = max(a, s.header.first_seq)
        b = min(b, s.header.last_seq)
        if a > b:
            return np.zeros(0, dtype=np.int64)
        out = []
        step = 1 << 16
        for lo in range(a, b + 1, step):
            hi = min(lo + step - 1, b)
            e = s.entries(lo, hi)
            ok = self.match_sids(e["sid"]) & ~s.dead_mask(lo, hi)
            out.append(np.flatnonzero(ok) + lo)
        return np.concatenate(out)

    def _matches_nothing_stored(self) -> bool:
        m = self.sid_mask()
        if m is None:
            return False
        count = self.stream.storage.ensure_stats()[0]
        return not count[: len(m) - 1][m[:-1]].any()

    def count_matching(self, a: int) -> int:
        """How many live messages at or after ``a`` match (num_pending's basis)."""
        s = self.stream.storage
        h = s.header
        a = max(a, h.first_seq)
        if a > h.last_seq or not h.msgs:
            return 0
        if not self.filters:
            below = 0
            if a > h.first_seq:
                below = (a - h.first_seq) - int(s.dead_mask(h.first_seq, a - 1).sum())
            return h.msgs - below
        tail = h.last_seq - a + 1
        head = a - h.first_seq
        if tail <= head:
            return len(self.matching_live(a, h.last_seq))
        m = self.sid_mask()
        count = s.ensure_stats()[0]
        total = int(count[: len(m) - 1][m[:-1]].sum()) if len(m) > 1 else 0
        return total - len(self.matching_live(h.first_seq, a - 1))

    # ------------------------------------------------------------------ state queries

    @property
    def is_explicit(self) -> bool:
        return self.config.ack_policy == AckPolicy.EXPLICIT

    def ack_wait_for(self, deliveries: int) -> int:
        """Nanoseconds until a message delivered ``deliveries`` times is due again."""
        backoff = self.config.backoff
        if backoff:
            return int(backoff[min(deliveries - 1, len(backoff) - 1)] * _NS)
        return int(self.config.ack_wait * _NS)

    def num_pending(self) -> int:
        if self.last_per_subject:
            rest = [q for q in self.last_per_subject if q >= self.next_stream_seq and self.stream.storage.is_live(q)]
            return len(rest) + self.count_matching(max(self.last_per_subject[-1] + 1, self.next_stream_seq))
        return self.count_matching(self.next_stream_seq)

    def next_due(self, now: int) -> Optional[int]:
        """When (clock ns) the earliest pending delivery falls due, for a redelivery or to leave
        at max_deliver and free max_ack_pending room; None when none waits for a time."""
        if not self.pending or self.config.ack_policy == AckPolicy.NONE:
            return None
        return min((d for _, d in self.pending.values() if d > now), default=None)

    def num_redelivered(self) -> int:
        return sum(1 for c in self.delivery_counts.values() if c > 1)

    def needs(self, seqs: np.ndarray) -> np.ndarray:
        """Does this consumer still need these stream sequences (interest retention)?"""
        above = seqs > self.ack_floor_stream_seq
        if self.config.ack_policy == AckPolicy.EXPLICIT:
            undelivered = seqs >= self.next_stream_seq
            pending = np.isin(seqs, np.fromiter(self.pending, dtype=np.int64, count=len(self.pending)))
            need = above & (undelivered | pending)
        else:
            need = above
        if self.delivery_counts:
            # A message that reached max_deliver is kept (docs/semantics.md §3.3).
            need |= np.isin(seqs, np.fromiter(self.delivery_counts, dtype=np.int64, count=len(self.delivery_counts)))
        return need

    def info(self, now: int) -> ConsumerInfo:
        return ConsumerInfo(
            name=self.name,
            stream_name=self.stream.name,
            config=self.config,
            created=ns_to_datetime(self.created_ns),
            delivered=SequenceInfo(
                consumer_seq=self.delivered_consumer_seq, stream_seq=max(self.next_stream_seq - 1, 0), last_active=_time_or_none(self.delivered_ns)
            ),
            ack_floor=SequenceInfo(consumer_seq=self.ack_floor_consumer_seq, stream_seq=self.ack_floor_stream_seq, last_active=_time_or_none(self.acked_ns)),
            num_ack_pending=len(self.pending),
            num_redelivered=self.num_redelivered(),
            num_waiting=0,
            num_pending=self.num_pending(),
            push_bound=True if self.is_bound() else None,
        )

    def is_bound(self) -> bool:
        """A push consumer with a subscription bound to it, in any process (bindings.py)."""
        return bool(self.config.deliver_subject) and bindings.is_bound(self.home)

    # ------------------------------------------------------------------ delivery (under the lock)

    def expire_max_delivered(self, now: int) -> None:
        """A message at max_deliver leaves pending once its last ack_wait passes (docs/semantics.md §5.4)."""
        md = self.config.max_deliver
        if md <= 0 or not self.pending:
            return
        done = [s for s, (c, due) in self.pending.items() if due <= now and self.delivery_counts.get(s, 1) >= md]
        if done:
            for s in done:
                del self.pending[s]
                if s in self.redelivery_queue:
                    self.redelivery_queue.remove(s)
            self.delivered_ns = now  # as nats-server's updateDelivered when it gives up on a message
            self.write(MAXED, [(s, 0, 0, 0) for s in done])

    def next_batch(self, batch: int, now: int, max_bytes: int = 0) -> list[tuple[int, int, int]]:
        """Choose and record up to ``batch`` deliveries: redeliveries first, then new messages.

        Returns (stream seq, consumer seq, num_delivered) per delivery.
        """
        s = self.stream.storage
        self.expire_max_delivered(now)
        out: list[tuple[int, int, int]] = []
        redelivered: list[tuple] = []
        items: list = [redelivered]
        gone: list[int] = []
        fits = _ByteBudget(self, max_bytes) if max_bytes > 0 else None
        if self.pending:
            # Messages past their ack wait join the redelivery queue in stream order,
            # behind those nak'd (consumer.go checkPending, addToRedeliverQueue).
            queued = set(self.redelivery_queue)
            self.redelivery_queue.extend(sorted(q for q, (c, d) in self.pending.items() if d <= now and q not in queued))
            while self.redelivery_queue and len(out) < batch:
                q = self.redelivery_queue.pop(0)
                p = self.pending.get(q)
                if p is None:
                    continue
                if not s.is_live(q):
                    gone.append(q)
                    continue
                count = self.delivery_counts.get(q, 1) + 1
                if fits is not None and not fits.take(q, self.delivered_consumer_seq + 1, count):
                    self.redelivery_queue.insert(0, q)
                    batch = len(out)  # nothing more fits this pull
                    break
                self.delivered_consumer_seq += 1
                # The pending record keeps the first delivery's consumer sequence (consumer.go trackPending).
                p[1] = now + self.ack_wait_for(count)
                self.delivery_counts[q] = count
                out.append((q, self.delivered_consumer_seq, count))
                redelivered.append((q, p[0], count, p[1]))
        room = batch - len(out)
        limit = self.config.max_ack_pending
        if self.config.ack_policy != AckPolicy.NONE and limit > 0:
            room = min(room, limit - len(self.pending))
        if room > 0:
            qs = self._new_seqs(room)
            if fits is not None:
                qs = qs[: fits.count_new(qs, self.delivered_consumer_seq + 1)]
            if not qs and not out and s.memory and self._matches_nothing_stored() and self.config.deliver_policy != DeliverPolicy.BY_START_SEQUENCE:
                # nats-server's memory store moves a pull whose filter matches no stored
                # subject to the end of the stream (its file store does not); the ack floor stays.
                self.next_stream_seq = max(self.next_stream_seq, s.header.last_seq + 1)
            if qs:
                k = len(qs)
                cseqs = range(self.delivered_consumer_seq + 1, self.delivered_consumer_seq + k + 1)
                self.delivered_consumer_seq += k
                self.next_stream_seq = qs[-1] + 1
                new = np.zeros(k, dtype=_ITEM)
                new["sseq"] = qs
                new["cseq"] = cseqs
                if self.config.ack_policy == AckPolicy.NONE:
                    self.ack_floor_consumer_seq, self.ack_floor_stream_seq = self.delivered_consumer_seq, qs[-1]
                    new["due"] = -1
                else:
                    d = now + self.ack_wait_for(1)
                    self.pending.update(zip(qs, ([c, d] for c in cseqs)))
                    self.delivery_counts.update(dict.fromkeys(qs, 1))
                    new["count"] = 1
                    new["due"] = d
                out.extend(zip(qs, cseqs, [1] * k))
                items.append(new)
        self.last_active = now
        if out:
            self.delivered_ns = now
            self.write(DELIVER, np.concatenate([np.array(redelivered, dtype=_ITEM)] + items[1:]))
        if gone:
            self.drop(np.array(sorted(gone), dtype=np.int64))
        return out

    def _new_seqs(self, room: int) -> list[int]:
        s = self.stream.storage
        found: list[int] = []
        if self.last_per_subject:
            while self.last_per_subject and len(found) < room:
                q = self.last_per_subject.pop(0)
                if q >= self.next_stream_seq and s.is_live(q):
                    found.append(q)
            if len(found) >= room:
                return found
        start = max(self.next_stream_seq, s.header.first_seq, found[-1] + 1 if found else 0)
        step = max(room * 2, 256)
        while len(found) < room and start <= s.header.last_seq:
            end = min(s.header.last_seq, start + step - 1)
            hits = self.matching_live(start, end)
            found.extend(hits[: room - len(found)].tolist())
            start = end + 1
            step = min(step * 4, 1 << 20)
        return found

    # ------------------------------------------------------------------ acknowledgements (under the lock)

    def ack(self, stream_seq: int, consumer_seq: int, now: int) -> list[int]:
        """An ack (or term) of one delivery; returns the stream sequences this consumer released.

        An ack that counts (below the next delivery; with ack all, above the floor) is the
        consumer's last ack at ``now``, as nats-server's updateAcks."""
        if self.config.ack_policy == AckPolicy.ALL:
            return self._ack_all(stream_seq, consumer_seq, now)
        if self.config.ack_policy == AckPolicy.NONE:
            return []
        released = self._ack_explicit(stream_seq)
        if released:
            self.acked_ns = now
            self.write(DROP, [(stream_seq, 0, 0, 0)])
        return released

    def ack_many(self, stream_seqs: list[int], now: int) -> list[int]:
        """Explicit acks of several deliveries in one record."""
        if len(stream_seqs) == len(self.pending) and self.pending.keys() == set(stream_seqs):
            # Everything outstanding is acked: the floor meets delivered (consumer.go, len(pending) == 0).
            released = sorted(stream_seqs)
            self.pending.clear()
            for q in released:
                self.delivery_counts.pop(q, None)
            self.ack_floor_consumer_seq, self.ack_floor_stream_seq = self.delivered_consumer_seq, self.next_stream_seq - 1
        else:
            released = []
            for q in stream_seqs:
                released.extend(self._ack_explicit(q))
        self.redelivery_queue = [q for q in self.redelivery_queue if q in self.pending] if self.redelivery_queue else self.redelivery_queue
        if released:
            self.acked_ns = now
            drop = np.zeros(len(released), dtype=_ITEM)
            drop["sseq"] = released
            self.write(DROP, drop)
        return released

    def _ack_explicit(self, stream_seq: int) -> list[int]:
        """consumer.go processAckMsg, AckExplicit; returns the sequence for the stream's
        retention to reconsider (any delivered one, pending or not)."""
        p = self.pending.pop(stream_seq, None)
        self.delivery_counts.pop(stream_seq, None)
        if stream_seq in self.redelivery_queue:
            self.redelivery_queue.remove(stream_seq)
        if p is None:
            return [stream_seq] if stream_seq < self.next_stream_seq else []
        consumer_seq = p[0]
        if not self.pending:
            self.ack_floor_consumer_seq, self.ack_floor_stream_seq = self.delivered_consumer_seq, self.next_stream_seq - 1
        elif consumer_seq == self.ack_floor_consumer_seq + 1:
            self.ack_floor_consumer_seq, self.ack_floor_stream_seq = consumer_seq, stream_seq
            for ss in range(stream_seq + 1, self.next_stream_seq):
                nxt = self.pending.get(ss)
                if nxt is not None:
                    self.ack_floor_consumer_seq, self.ack_floor_stream_seq = nxt[0] - 1, ss - 1
                    break
        return [stream_seq]

    def _ack_all(self, stream_seq: int, consumer_seq: int, now: int) -> list[int]:
        # consumer.go processAckMsg, AckAll: everything up to stream_seq.
        if consumer_seq <= self.ack_floor_consumer_seq or stream_seq <= self.ack_floor_stream_seq:
            return []
        old = self.ack_floor_stream_seq
        self.acked_ns = now
        self.ack_floor_consumer_seq, self.ack_floor_stream_seq = consumer_seq, stream_seq
        dropped = [q for q in self.pending if q <= stream_seq]
        for q in dropped:
            del self.pending[q]
        for q in [q for q in self.delivery_counts if q <= stream_seq]:
            del self.delivery_counts[q]
        self.write(DROP, [(q, 0, 0, 0) for q in dropped])
        return list(range(old + 1, stream_seq + 1))

    def term(self, stream_seq: int, consumer_seq: int, now: int) -> list[int]:
        """Like an ack, whatever the policy (consumer.go processTerm)."""
        return self.ack(stream_seq, consumer_seq, now)

    def nak(self, stream_seq: int, consumer_seq: int, delay: Optional[float], now: int) -> None:
        p = self.pending.get(stream_seq)
        if p is None or consumer_seq <= self.ack_floor_consumer_seq:
            return
        p[1] = now + int((delay or 0) * _NS)
        queued = not delay  # a plain nak queues at once; a delayed one waits for its time
        if queued and stream_seq not in self.redelivery_queue:
            self.redelivery_queue.append(stream_seq)
        if not queued:
            self.delivered_ns = now  # nats-server records a delayed nak as a delivery update
        self.write(DUE, [(stream_seq, p[0], QUEUED if queued else 0, p[1])])

    def in_progress(self, stream_seq: int, now: int) -> None:
        p = self.pending.get(stream_seq)
        if p is None:
            return
        p[1] = now + self.ack_wait_for(self.delivery_counts.get(stream_seq, 1))
        self.delivered_ns = now  # so does in_progress (consumer.go progressUpdate)
        self.write(DUE, [(stream_seq, p[0], 0, p[1])])

    def advance_floor(self, seq: int, now: int) -> None:
        """Act as if every matching message up to ``seq`` was delivered and acked (the Spark commit).

        As on a server, where this fetches and acks those messages, the consumer ends
        at the last of them: messages after it up to ``seq`` that it does not match
        leave its delivered and ack floor positions where they are; the times of its
        last delivery and last ack are ``now`` when it delivered or acked anything."""
        if seq <= self.ack_floor_stream_seq:
            return
        old_floor = self.ack_floor_stream_seq
        if seq >= self.next_stream_seq:
            live = self.matching_live(self.next_stream_seq, seq)
            if len(live):
                last = int(live[-1])
                self.delivered_consumer_seq += len(live)
                self.next_stream_seq = last + 1
                self.last_per_subject = [q for q in self.last_per_subject if q > last]
                self.delivered_ns = now
        for q in [q for q in self.pending if q <= seq]:
            del self.pending[q]
        for q in [q for q in self.delivery_counts if q <= seq]:
            del self.delivery_counts[q]
        if self.pending:
            first = min(self.pending)
            self.ack_floor_consumer_seq, self.ack_floor_stream_seq = self.pending[first][0] - 1, first - 1
        else:
            self.ack_floor_consumer_seq, self.ack_floor_stream_seq = self.delivered_consumer_seq, self.next_stream_seq - 1
        if self.ack_floor_stream_seq > old_floor and self.config.ack_policy != AckPolicy.NONE:
            self.acked_ns = now  # with ack none the floor follows delivery, and nothing is acked
        self.write(SNAPSHOT, self._snapshot_items())

    def _snapshot_items(self) -> list[tuple]:
        items = [(q, p[0], self.delivery_counts.get(q, 0), p[1]) for q, p in self.pending.items()]
        items += [(q, 0, c, -1) for q, c in self.delivery_counts.items() if q not in self.pending]
        items += [(q, 0, 0, -1) for q in self.last_per_subject]
        items += [(q, 0, QUEUED, -1) for q in self.redelivery_queue]
        return items

    # ------------------------------------------------------------------ stream events (under the lock)

    def drop(self, seqs: np.ndarray) -> list[int]:
        """Messages the stream removed: pending ones leave as if termed (docs/semantics.md §5.3),
        which counts as an ack now.  Under ack policy all that ack, as any, acknowledges every
        delivery below it too (nats-server: the removal's processTerm is a processAckMsg), so
        the floor moves to the highest of them.  Returns what the consumer released, for an
        interest or work-queue stream to remove."""
        if not self.pending:
            return []
        keys = np.fromiter(self.pending, dtype=np.int64, count=len(self.pending))
        hit = sorted(keys[np.isin(keys, seqs)].tolist())
        if not hit:
            return []
        now = self.stream.clock()
        released: list[int] = []
        if self.config.ack_policy == AckPolicy.ALL:
            released = self._ack_all(hit[-1], self.pending[hit[-1]][0], now)
            hit = [q for q in hit if q in self.pending]  # (none: pending deliveries lie above the floor)
            if self.redelivery_queue:
                self.redelivery_queue = [q for q in self.redelivery_queue if q in self.pending]
        else:
            for q in hit:
                self._ack_explicit(q)
        if hit:
            for q in hit:
                self.pending.pop(q, None)
            self.acked_ns = now
            self.write(DROP, [(q, 0, 0, 0) for q in hit])
        return released

    def purged(self, start: int, wider: bool = False) -> None:
        """The stream purged what this consumer could see below ``start`` (consumer.go purge).

        ``wider``: the consumer sees more than the (subject) purge removed, so it
        also drops pending entries whose message is gone.
        """
        s = self.stream.storage
        if self.next_stream_seq < start:
            self.next_stream_seq = start
        if self.ack_floor_stream_seq < start:
            self.ack_floor_stream_seq = start - 1
            pending = len(self.pending)
            for q in list(self.pending):
                if q <= self.ack_floor_stream_seq or (wider and not s.is_live(q)):
                    self.ack_floor_consumer_seq = max(self.ack_floor_consumer_seq, self.pending.pop(q)[0])
                    self.delivery_counts.pop(q, None)
            if len(self.pending) < pending:
                self.acked_ns = self.stream.clock()  # a purged pending message counts as acked (consumer.go purge)
        if not self.pending:
            self.delivery_counts.clear()
            self.ack_floor_consumer_seq, self.ack_floor_stream_seq = self.delivered_consumer_seq, self.next_stream_seq - 1
        self.redelivery_queue = [q for q in self.redelivery_queue if q in self.pending]
        self.last_per_subject = [q for q in self.last_per_subject if q >= start]
        self.write(SNAPSHOT, self._snapshot_items())


class _ByteBudget:
    """A pull's max_bytes, counted as nats-server counts it: subject, header block,
    payload and the ack reply subject of each delivery; what does not fit is not
    delivered."""

    def __init__(self, consumer: Consumer, max_bytes: int) -> None:
        self.consumer = consumer
        self.left = max_bytes
        self.pending_count = consumer.num_pending()
        self.prefix = len(f"$JS.ACK.{consumer.stream.name}.{consumer.name}.")

    def _size(self, stream_seq: int, consumer_seq: int, delivered: int, pending: int) -> int:
        e = self.consumer.stream.storage.entries(stream_seq, stream_seq)[0]
        subject = self.consumer.stream.storage.subjects[int(e["sid"])]
        reply = self.prefix + len(f"{delivered}.{stream_seq}.{consumer_seq}.{int(e['ts'])}.{pending}")
        return len(subject.encode()) + int(e["hlen"]) + int(e["dlen"]) + reply

    def take(self, stream_seq: int, consumer_seq: int, delivered: int) -> bool:
        size = self._size(stream_seq, consumer_seq, delivered, self.pending_count)
        if size > self.left:
            self.left = 0
            return False
        self.left -= size
        return True

    def count_new(self, seqs: list[int], consumer_seq: int) -> int:
        """How many of these new messages fit, in order."""
        for i, q in enumerate(seqs):
            size = self._size(q, consumer_seq + i, 1, self.pending_count - i - 1)
            if size > self.left:
                self.left = 0
                return i
            self.left -= size
        return len(seqs)


def config_to_json(config: ConsumerConfig) -> dict:
    d = config.as_dict()
    if config.opt_start_time is not None:
        d["opt_start_time"] = config.opt_start_time.isoformat()
    return d


def config_from_json(d: dict) -> ConsumerConfig:
    import datetime as dt

    from jetspark.api import ReplayPolicy

    d = dict(d)
    d["deliver_policy"] = DeliverPolicy(d["deliver_policy"])
    d["ack_policy"] = AckPolicy(d["ack_policy"])
    d["replay_policy"] = ReplayPolicy(d["replay_policy"])
    if d.get("opt_start_time"):
        d["opt_start_time"] = dt.datetime.fromisoformat(d["opt_start_time"])
    return ConsumerConfig.from_response(d)


def remove_consumer_dir(home: Path) -> None:
    """Remove a consumer's directory: renamed away first (one atomic step, so no crash
    leaves half a consumer under its name), then emptied."""
    trash = home.with_name(f".deleted-{uuid.uuid4().hex[:8]}")
    with diskio.io_errors(home, "removing the consumer"):
        os.replace(home, trash)
    shutil.rmtree(trash, ignore_errors=True)


def _time_or_none(ns: int):
    return ns_to_datetime(ns) if ns else None


def _head_size(op: int) -> int:
    """The size of a record's fixed part for its op byte, 0 for no known op."""
    if op & _OP > LAST_PER_SUBJECT:
        return 0
    return _REC.size if op & TIMED else _REC_UNTIMED.size


def _record_at(raw: bytes, pos: int) -> int:
    """The length of the valid record starting at ``pos``, or 0."""
    if pos + _HEAD.size > len(raw):
        return 0
    length, crc, op, n = _HEAD.unpack_from(raw, pos)
    head = _head_size(op)
    if not head or length != head + n * _ITEM.itemsize or pos + length > len(raw):
        return 0
    return length if zlib.crc32(memoryview(raw)[pos + 8 : pos + length]) == crc else 0


def _what_is_wrong(raw: bytes, pos: int) -> str:
    if pos + _HEAD.size > len(raw):
        return f"{len(raw) - pos} bytes, less than a record header"
    length, _, op, n = _HEAD.unpack_from(raw, pos)
    head = _head_size(op)
    if not head or length != head + n * _ITEM.itemsize:
        return f"its header is inconsistent: length {length}, op {op}, {n} items"
    if pos + length > len(raw):
        return f"its length {length} runs past the end of the log"
    return "it fails its checksum"


def _record_after(raw: bytes, start: int) -> bool:
    """Does a valid record start anywhere after the bad one at ``start``?  The bad record's
    own length is tried first, then every later offset whose header is consistent."""
    if start + 4 <= len(raw):
        (length,) = struct.unpack_from("<I", raw, start)
        if length > 0 and _record_at(raw, start + length):
            return True
    b = np.frombuffer(raw, dtype=np.uint8)
    last = len(raw) - _REC_UNTIMED.size  # the last offset the smaller record header fits at
    step = 1 << 20
    for lo in range(start + 1, last + 1, step):
        q = np.arange(lo, min(lo + step, last + 1), dtype=np.int64)
        length = _u32(b, q)
        n = _u32(b, q + 9)
        op = b[q + 8]
        head = np.where(op & TIMED, _REC.size, _REC_UNTIMED.size)
        ok = (length == head + n * _ITEM.itemsize) & (q + length <= len(raw)) & ((op & _OP) <= LAST_PER_SUBJECT)
        for cand in q[ok].tolist():
            if _record_at(raw, cand):
                return True
    return False


def _u32(b: np.ndarray, q: np.ndarray) -> np.ndarray:
    return b[q].astype(np.int64) | (b[q + 1].astype(np.int64) << 8) | (b[q + 2].astype(np.int64) << 16) | (b[q + 3].astype(np.int64) << 24)
