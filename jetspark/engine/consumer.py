"""Consumers: delivery, acknowledgement, redelivery and ack floors (docs/semantics.md §5, §6).

A consumer's state is what nats-server keeps (``consumer.go``): the next
delivery sequence, the next stream sequence, the ack floor, the pending
deliveries with their deadlines, and the delivery counts.  It lives in an
append-only log of state changes next to its config::

    cons/<name>/config.json     the consumer's config and creation time, with its
                                mirror config.json.1 (see metafile.py)
    cons/<name>/log             its records (consumer_log.py)

A record's scalars include the times of the last delivery and the last ack
(``delivered.last_active`` and ``ack_floor.last_active`` in the consumer's
info), in nanoseconds, so every process reads the same times back exactly;
records from before those times were kept are read with both unknown.

Every change happens under the stream's lock, so deliveries, acks and the
stream's retention stay consistent across processes; each process keeps
the state in memory and reads only the records appended since it last
looked (``ConsumerLog.sync``: a torn last record is cut, damage raises
``CorruptStoreError``).  At worst a delivery is forgotten and the message
delivered again, never lost.

The delivery state machine (``plan_batch``, ``plan_expiry``, ``plan_drop``)
changes the state in memory at the ``now`` it is given and returns the
records that make it durable (``Change``), writing nothing; ``write`` appends
one, whole or not at all: when the disk refuses it, the torn bytes are cut,
the state is read back from the log, and the call raises ``StoreFullError``/
``StoreIOError`` having changed nothing.  A log that would outgrow
``COMPACT_BYTES`` is rewritten as one snapshot, and the stream header's
``cons_gen`` tells the other processes to reopen it.

Time-driven behaviour (ack_wait, backoff, nak delays, inactive_threshold)
is evaluated against the injected clock at the next operation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from jetspark.api import (
    AckPolicy,
    ConsumerInfo,
    DeliverPolicy,
    SequenceInfo,
    ns_to_datetime,
)
from jetspark.engine import bindings, diskio, metafile
from jetspark.engine.consumer_config import config_from_json, filters_of
from jetspark.engine.consumer_log import (
    DELIVER,
    DROP,
    DUE,
    ITEM,
    LAST_PER_SUBJECT,
    MAXED,
    SCALARS,
    SNAPSHOT,
    ConsumerLog,
    encode,
)
from jetspark.engine.consumer_match import ByteBudget, SubjectFilter
from jetspark.errors import CorruptStoreError

__all__ = [
    "COMPACT_BYTES",
    "DELIVER",
    "DROP",
    "DUE",
    "LAST_PER_SUBJECT",
    "MAXED",
    "QUEUED",
    "SCALARS",
    "SNAPSHOT",
    "Change",
    "Consumer",
]

_NS = 1_000_000_000
QUEUED = 0xFFFFFFFF  # an item's count marking "appended to the redelivery queue"
COMPACT_BYTES = 4 << 20

Change = tuple[int, tuple, np.ndarray]  # a record to write: op, the scalars when planned (_scalars), items


class Consumer:
    """One consumer of a stream, as this process last saw it."""

    def __init__(self, stream, home: Path, fresh: bool = False) -> None:
        """Open the consumer in ``home``; CorruptStoreError if its config or log is damaged.

        ``fresh``: a consumer being created, whose empty log gets its first record next.
        """
        self.stream = stream
        self._home = home
        path = home / "config.json"
        try:
            meta = metafile.load(path, fsync=stream.storage.fsync)
            self.config = config_from_json(meta["config"])
            self.created_ns = int(meta["created"])
            self.name = meta.get("name") or self.config.name
        except FileNotFoundError:
            raise CorruptStoreError(
                f"{path} and its mirror {path.name}{metafile.MIRROR_SUFFIX} are missing", path=str(path)
            ) from None
        except (KeyError, ValueError, TypeError) as exc:
            raise CorruptStoreError(
                f"{path} is not a consumer config: {type(exc).__name__}: {exc}", path=str(path)
            ) from exc
        self.filters = filters_of(self.config)
        self.filter = SubjectFilter(stream, self.filters)  # which stored messages it matches (consumer_match.py)
        self.log = ConsumerLog(home, self.name, fresh=fresh, fsync=stream.storage.fsync)
        try:
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
        self.log.rewind()

    def close(self) -> None:
        self.log.close()

    # ------------------------------------------------------------------ log (consumer_log.py)

    @property
    def home(self) -> Path:
        return self._home

    @home.setter
    def home(self, home: Path) -> None:
        """The consumer's directory moved (a new consumer renamed into ``cons/``): so did its log."""
        self._home = self.log.home = home

    @property
    def damaged(self) -> Optional[CorruptStoreError]:
        """Why the log cannot be trusted, once a read found it damaged (None: intact)."""
        return self.log.damaged

    def sync(self) -> bool:
        """Apply records other processes appended (see ConsumerLog.sync; caller holds the lock).

        False if the log file was replaced or removed since this process opened it: a
        process rewrote it (compact) or deleted the consumer and died before its cons_gen
        bump was committed; the caller reopens the consumers.  CorruptStoreError if the
        log is damaged; the consumer is then unusable.
        """
        return self.log.sync(self._apply)

    def _apply(self, op: int, scalars: tuple, items: np.ndarray) -> None:
        """One record read from the log (another process's change, or ours read back)."""
        old_floor = self.ack_floor_stream_seq
        (
            self.delivered_consumer_seq,
            self.next_stream_seq,
            self.ack_floor_consumer_seq,
            self.ack_floor_stream_seq,
            self.last_active,
        ) = scalars[:5]
        self.delivered_ns, self.acked_ns = scalars[5:] or (0, 0)
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

    def write(self, op: int, items=None, scalars: Optional[tuple] = None) -> None:
        """Record the change just made in memory (caller holds the lock): one record with the
        current scalars (or ``scalars``, those of a planned change), or a compaction when the
        log would pass COMPACT_BYTES.  On a disk error the in-memory state goes back to what
        the log holds, and StoreIOError / StoreFullError (naming the log) is raised: the call
        changed nothing."""
        arr = items if isinstance(items, np.ndarray) else np.array(items or [], dtype=ITEM)
        if op != DELIVER:
            self.stream.storage.consumers_changed = True  # may make messages deliverable: wake waiters
        rec = encode(op, self._scalars() if scalars is None else scalars, arr)
        lg = self.log
        compact = lg.pos > lg.base and lg.pos + len(rec) > COMPACT_BYTES
        try:
            if compact:
                # The snapshot holds this change already: it is the call's one write.
                self.compact()
            else:
                lg.append(rec)
        except OSError as exc:
            action = "compacting the consumer's log (into log.tmp)" if compact else "appending to the consumer's log"
            err = diskio.translate(OSError(exc.errno, exc.strerror), self.log.path, action)
            self._revert()
            raise err from exc

    def _change(self, op: int, items) -> Change:
        """A planned record: ``op`` and its items with the scalars as they are now."""
        return op, self._scalars(), items if isinstance(items, np.ndarray) else np.array(items, dtype=ITEM)

    def _commit(self, changes: list[Change]) -> None:
        """Write planned records in order (see write)."""
        for op, scalars, items in changes:
            self.write(op, items, scalars)

    def _scalars(self) -> tuple:
        """The scalars every record carries: the consumer's sequences and times."""
        return (
            self.delivered_consumer_seq,
            self.next_stream_seq,
            self.ack_floor_consumer_seq,
            self.ack_floor_stream_seq,
            self.last_active,
            self.delivered_ns,
            self.acked_ns,
        )

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
        self.log.rewrite(encode(SNAPSHOT, self._scalars(), np.array(self._snapshot_items(), dtype=ITEM)))
        self.stream.storage.header.cons_gen += 1

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
            return len(rest) + self.filter.count_matching(max(self.last_per_subject[-1] + 1, self.next_stream_seq))
        return self.filter.count_matching(self.next_stream_seq)

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
                consumer_seq=self.delivered_consumer_seq,
                stream_seq=max(self.next_stream_seq - 1, 0),
                last_active=_time_or_none(self.delivered_ns),
            ),
            ack_floor=SequenceInfo(
                consumer_seq=self.ack_floor_consumer_seq,
                stream_seq=self.ack_floor_stream_seq,
                last_active=_time_or_none(self.acked_ns),
            ),
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
        self._commit(self.plan_expiry(now))

    def plan_expiry(self, now: int) -> list[Change]:
        """expire_max_delivered in memory; returns the record to write."""
        md = self.config.max_deliver
        if md <= 0 or not self.pending:
            return []
        done = [s for s, (c, due) in self.pending.items() if due <= now and self.delivery_counts.get(s, 1) >= md]
        if done:
            for s in done:
                del self.pending[s]
                if s in self.redelivery_queue:
                    self.redelivery_queue.remove(s)
            self.delivered_ns = now  # as nats-server's updateDelivered when it gives up on a message
            return [self._change(MAXED, [(s, 0, 0, 0) for s in done])]
        return []

    def next_batch(self, batch: int, now: int, max_bytes: int = 0) -> list[tuple[int, int, int]]:
        """Choose and record up to ``batch`` deliveries: redeliveries first, then new messages.

        Returns (stream seq, consumer seq, num_delivered) per delivery.
        """
        out, changes = self.plan_batch(batch, now, max_bytes)
        self._commit(changes)
        return out

    def plan_batch(self, batch: int, now: int, max_bytes: int = 0) -> tuple[list[tuple[int, int, int]], list[Change]]:
        """next_batch's choice, made in memory at ``now`` without writing: the deliveries, and
        the records that make them durable (max_deliver expiries, the deliveries, the pending
        messages found gone), to be written in order.  Reads the stream, never the clock."""
        s = self.stream.storage
        changes = self.plan_expiry(now)
        out: list[tuple[int, int, int]] = []
        redelivered: list[tuple] = []
        items: list = [redelivered]
        gone: list[int] = []
        fits = ByteBudget(self.stream, self.name, max_bytes, self.num_pending()) if max_bytes > 0 else None
        if self.pending:
            # Messages past their ack wait join the redelivery queue in stream order,
            # behind those nak'd (consumer.go checkPending, addToRedeliverQueue).
            queued = set(self.redelivery_queue)
            self.redelivery_queue.extend(
                sorted(q for q, (c, d) in self.pending.items() if d <= now and q not in queued)
            )
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
            if (
                not qs
                and not out
                and s.memory
                and self.filter.matches_nothing_stored()
                and self.config.deliver_policy != DeliverPolicy.BY_START_SEQUENCE
            ):
                # nats-server's memory store moves a pull whose filter matches no stored
                # subject to the end of the stream (its file store does not); the ack floor stays.
                self.next_stream_seq = max(self.next_stream_seq, s.header.last_seq + 1)
            if qs:
                k = len(qs)
                cseqs = range(self.delivered_consumer_seq + 1, self.delivered_consumer_seq + k + 1)
                self.delivered_consumer_seq += k
                self.next_stream_seq = qs[-1] + 1
                new = np.zeros(k, dtype=ITEM)
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
            changes.append(self._change(DELIVER, np.concatenate([np.array(redelivered, dtype=ITEM)] + items[1:])))
        if gone:
            changes += self.plan_drop(np.array(sorted(gone), dtype=np.int64), now)[1]
        return out, changes

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
            hits = self.filter.matching_live(start, end)
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
            self.ack_floor_consumer_seq, self.ack_floor_stream_seq = (
                self.delivered_consumer_seq,
                self.next_stream_seq - 1,
            )
        else:
            released = []
            for q in stream_seqs:
                released.extend(self._ack_explicit(q))
        self.redelivery_queue = (
            [q for q in self.redelivery_queue if q in self.pending] if self.redelivery_queue else self.redelivery_queue
        )
        if released:
            self.acked_ns = now
            drop = np.zeros(len(released), dtype=ITEM)
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
            self.ack_floor_consumer_seq, self.ack_floor_stream_seq = (
                self.delivered_consumer_seq,
                self.next_stream_seq - 1,
            )
        elif consumer_seq == self.ack_floor_consumer_seq + 1:
            self.ack_floor_consumer_seq, self.ack_floor_stream_seq = consumer_seq, stream_seq
            for ss in range(stream_seq + 1, self.next_stream_seq):
                nxt = self.pending.get(ss)
                if nxt is not None:
                    self.ack_floor_consumer_seq, self.ack_floor_stream_seq = nxt[0] - 1, ss - 1
                    break
        return [stream_seq]

    def _ack_all(self, stream_seq: int, consumer_seq: int, now: int) -> list[int]:
        released, changes = self._plan_ack_all(stream_seq, consumer_seq, now)
        self._commit(changes)
        return released

    def _plan_ack_all(self, stream_seq: int, consumer_seq: int, now: int) -> tuple[list[int], list[Change]]:
        # consumer.go processAckMsg, AckAll: everything up to stream_seq.
        if consumer_seq <= self.ack_floor_consumer_seq or stream_seq <= self.ack_floor_stream_seq:
            return [], []
        old = self.ack_floor_stream_seq
        self.acked_ns = now
        self.ack_floor_consumer_seq, self.ack_floor_stream_seq = consumer_seq, stream_seq
        dropped = [q for q in self.pending if q <= stream_seq]
        for q in dropped:
            del self.pending[q]
        for q in [q for q in self.delivery_counts if q <= stream_seq]:
            del self.delivery_counts[q]
        return list(range(old + 1, stream_seq + 1)), [self._change(DROP, [(q, 0, 0, 0) for q in dropped])]

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
            live = self.filter.matching_live(self.next_stream_seq, seq)
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
            self.ack_floor_consumer_seq, self.ack_floor_stream_seq = (
                self.delivered_consumer_seq,
                self.next_stream_seq - 1,
            )
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
        released, changes = self.plan_drop(seqs, self.stream.clock())
        self._commit(changes)
        return released

    def plan_drop(self, seqs: np.ndarray, now: int) -> tuple[list[int], list[Change]]:
        """drop in memory at ``now``; returns what it released and the records to write."""
        if not self.pending:
            return [], []
        keys = np.fromiter(self.pending, dtype=np.int64, count=len(self.pending))
        hit = sorted(keys[np.isin(keys, seqs)].tolist())
        if not hit:
            return [], []
        released: list[int] = []
        changes: list[Change] = []
        if self.config.ack_policy == AckPolicy.ALL:
            released, changes = self._plan_ack_all(hit[-1], self.pending[hit[-1]][0], now)
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
            changes.append(self._change(DROP, [(q, 0, 0, 0) for q in hit]))
        return released, changes

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
            self.ack_floor_consumer_seq, self.ack_floor_stream_seq = (
                self.delivered_consumer_seq,
                self.next_stream_seq - 1,
            )
        self.redelivery_queue = [q for q in self.redelivery_queue if q in self.pending]
        self.last_per_subject = [q for q in self.last_per_subject if q >= start]
        self.write(SNAPSHOT, self._snapshot_items())


def _time_or_none(ns: int):
    return ns_to_datetime(ns) if ns else None
