"""Consumers: delivery, acknowledgement, redelivery and ack floors (docs/semantics.md §5, §6).

A consumer's state is what nats-server keeps (``consumer.go``; consumer_state.py).
It lives in an append-only log of state changes next to its config::

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

Every change is planned by a pure method (``plan_batch`` in consumer_fetch.py,
``plan_ack``, ``plan_nak``, ``plan_advance_floor``, ...): it reads the state at
the ``now`` it is given and returns its result and a ``Plan``, the records that
make the change and, when it was planned on a draft, the state they leave; the
state does not move.  ``commit`` is the one place a plan takes effect: each record
is written to the log first, whole or not at all (``ConsumerLog.write``), and
only then does the memory follow, the records applied as a reader of the log
applies them, so the memory is never ahead of the log and is what a reopen
finds.  When the disk refuses a record, the memory takes the records written
before it and the call raises ``StoreFullError``/``StoreIOError``.  A log that would
outgrow ``COMPACT_BYTES`` is rewritten as one snapshot, and the stream
header's ``cons_gen`` tells the other processes to reopen it.

Time-driven behaviour (ack_wait, backoff, nak delays, inactive_threshold)
is evaluated against the injected clock at the next operation.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from functools import partial
from pathlib import Path
from typing import Optional

import numpy as np

from jetspark.api import (
    AckPolicy,
    ConsumerInfo,
    SequenceInfo,
    ns_to_datetime,
)
from jetspark.engine import bindings, metafile
from jetspark.engine.consumer_config import config_from_json, filters_of, paused_for
from jetspark.engine.consumer_due import DueIndex
from jetspark.engine.consumer_fetch import BatchPlanner
from jetspark.engine.consumer_log import (
    DELIVER,
    DROP,
    DUE,
    ITEM,
    LAST_PER_SUBJECT,
    SCALARS,
    SNAPSHOT,
    ConsumerLog,
    encode,
)
from jetspark.engine.consumer_match import SubjectFilter
from jetspark.engine.consumer_state import QUEUED, ConsumerState, Plan, change, drop_items
from jetspark.errors import CorruptStoreError

__all__ = ["Consumer", "Plan"]

_NS = 1_000_000_000


class Consumer(BatchPlanner):
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
            name = meta.get("name") or self.config.name
            if not isinstance(name, str):  # each is created with one (ConsumerSet.create): without, damage
                raise TypeError(f"no consumer name (name: {name!r})")
            self.name: str = name
        except FileNotFoundError:
            raise CorruptStoreError(
                f"{path} and its mirror {path.name}{metafile.MIRROR_SUFFIX} are missing", path=str(path)
            ) from None
        except (KeyError, ValueError, TypeError) as exc:
            raise CorruptStoreError(
                f"{path} is not a consumer config: {type(exc).__name__}: {exc}", path=str(path)
            ) from exc
        self.filters = filters_of(self.config)
        # ack_wait_for's answers (ns, by deliveries - 1, the last repeating), worked out once: the config is
        # fixed until an update reopens the consumer.  Empty only under ack none without an ack_wait.
        cfg = self.config
        waits = cfg.backoff or ([cfg.ack_wait] if cfg.ack_wait is not None else [])
        self._ack_waits = [int(w * _NS) for w in waits]
        self.filter = SubjectFilter(stream, self.filters)  # which stored messages it matches (consumer_match.py)
        self.index = DueIndex(cfg.max_deliver)
        self.log = ConsumerLog(home, self.name, fresh=fresh, fsync=stream.storage.fsync)
        # The last pull in this process, recorded or not: an empty pull writes nothing, yet
        # keeps the consumer active (inactive_threshold) here.  Not part of the state.
        self.pulled_ns = 0
        self.version = 0  # bumped by every change of the state in memory (a plan names the one it read)
        try:
            self._reset()
            self.sync()
        except BaseException:
            self.close()
            raise

    def _reset(self) -> None:
        self.clear()
        self.replayed: list = []  # sequences other processes' records released (see ConsumerSet.sync)
        self.version += 1
        self.log.rewind()

    def close(self) -> None:
        self.log.close()

    # ------------------------------------------------------------------ the log (consumer_log.py)

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
        return self.log.sync(self._replay)

    def _replay(self, op: int, scalars: tuple, items: np.ndarray) -> None:
        """One record read from the log.  What it released, the stream's retention reconsiders:
        the process that wrote it may have died before committing the removal."""
        old_floor = self.ack_floor_stream_seq
        self.apply(op, scalars, items)
        self.version += 1
        if op == DROP or (op == DELIVER and self.config.ack_policy == AckPolicy.NONE):
            self.replayed.append(items["sseq"].astype(np.int64))
        if self.ack_floor_stream_seq > old_floor:
            # The stream's messages the floor passed (a purge may move it far past the last).
            h = self.stream.storage.header
            lo, hi = max(old_floor + 1, h.first_seq), min(self.ack_floor_stream_seq, h.last_seq)
            if hi >= lo:
                self.replayed.append(np.arange(lo, hi + 1, dtype=np.int64))

    def commit(self, plan: Plan) -> None:
        """Make a plan durable, then take it in memory (caller holds the lock).

        Each record is written whole or not at all; on a disk error the memory takes the
        records written before it, and StoreIOError / StoreFullError (naming the log) is
        raised.  RuntimeError for a plan made on an older state (a bug, not bad input)."""
        if not plan:
            return
        if plan.version != self.version:
            raise RuntimeError(f"consumer {self.name!r}: a plan made on a state that has changed since")
        written = 0
        try:
            for i, (op, scalars, items) in enumerate(plan):
                if op != DELIVER:
                    self.stream.storage.consumers_changed = True  # may make messages deliverable: wake waiters
                if self.log.write(encode(op, scalars, items), partial(self._snapshot_after, plan, i + 1)):
                    self.stream.storage.header.cons_gen += 1  # the log was rewritten: others reopen it
                written += 1
        finally:
            for op, scalars, items in plan[:written]:
                self.apply(op, scalars, items)
            self.version += 1

    def _snapshot_after(self, plan: Plan, n: int) -> bytes:
        """The SNAPSHOT record of the state the first ``n`` records of ``plan`` leave."""
        if n == len(plan) and plan.after is not None:
            st: ConsumerState = plan.after
        else:
            st = self.copy()
            for op, scalars, items in plan[:n]:
                st.apply(op, scalars, items)
        return encode(SNAPSHOT, st.scalars(), st.snapshot_items())

    # ------------------------------------------------------------------ state queries

    @property
    def is_explicit(self) -> bool:
        return self.config.ack_policy == AckPolicy.EXPLICIT

    def num_redelivered(self) -> int:
        return self.redelivered

    def needs(self, seqs: np.ndarray) -> np.ndarray:
        """Does this consumer still need these stream sequences (interest retention)?  A few
        (an ack's) are looked up one by one; many, against every pending delivery at once."""
        pending, counts = self.pending, self.delivery_counts
        explicit = self.config.ack_policy == AckPolicy.EXPLICIT
        if 4 * len(seqs) <= len(pending) + len(counts):
            floor, nxt = self.ack_floor_stream_seq, self.next_stream_seq
            return np.array(
                [(q > floor and (not explicit or q >= nxt or q in pending)) or q in counts for q in seqs.tolist()],
                dtype=bool,
            )
        above = seqs > self.ack_floor_stream_seq
        if explicit:
            undelivered = seqs >= self.next_stream_seq
            held = np.isin(seqs, np.fromiter(pending, dtype=np.int64, count=len(pending)))
            need = above & (undelivered | held)
        else:
            need = above
        if self.delivery_counts:
            # A message that reached max_deliver is kept (docs/semantics.md §3.3).
            need |= np.isin(seqs, np.fromiter(self.delivery_counts, dtype=np.int64, count=len(self.delivery_counts)))
        return need

    def info(self, now: int) -> ConsumerInfo:
        paused = paused_for(self.config, now)
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
            paused=True if paused else None,
            pause_remaining=paused or None,
        )

    def is_bound(self) -> bool:
        """A push consumer with a subscription bound to it, in any process (bindings.py)."""
        return bool(self.config.deliver_subject) and bindings.is_bound(self.home)

    # ------------------------------------------------------------------ delivery (under the lock)

    def expire_max_delivered(self, now: int) -> None:
        """A message at max_deliver leaves pending once its last ack_wait passes (docs/semantics.md §5.4)."""
        self.commit(self.plan_expiry(now))

    def next_batch(self, batch: int, now: int, max_bytes: int = 0) -> list[tuple[int, int, int]]:
        """Choose and record up to ``batch`` deliveries: redeliveries first, then new messages.

        Returns (stream seq, consumer seq, num_delivered) per delivery.
        """
        out, plan = self.plan_batch(batch, now, max_bytes)
        self.commit(plan)
        self.pulled_ns = now
        return out

    def plan_start(self, start: int, last_per_subject: list[int], now: int) -> Plan:
        """A new consumer's first record: it starts at stream sequence ``start`` (with deliver
        last-per-subject, at the sequences ``last_per_subject``), active at ``now``."""
        scalars = self.scalars(next_stream_seq=start, ack_floor_stream_seq=start - 1, last_active=now)
        if last_per_subject:
            return self._plan([change(LAST_PER_SUBJECT, scalars, [(q, 0, 0, -1) for q in last_per_subject])])
        return self._plan([change(SNAPSHOT, scalars, [])])

    def plan_active(self, now: int) -> Plan:
        """The consumer is active at ``now`` (a push subscription left it: inactive_threshold
        counts from then), in every process."""
        return self._plan([change(SCALARS, self.scalars(last_active=now), [])])

    def idle_since(self) -> int:
        """The last time it was active (pulled, or created), for inactive_threshold."""
        return max(self.last_active, self.pulled_ns, self.created_ns)

    # ------------------------------------------------------------------ acknowledgements (under the lock)

    def ack(self, stream_seq: int, consumer_seq: int, now: int) -> list[int]:
        """An ack (or term) of one delivery; returns the stream sequences this consumer released."""
        released, plan = self.plan_ack(stream_seq, consumer_seq, now)
        self.commit(plan)
        return released

    def plan_ack(self, stream_seq: int, consumer_seq: int, now: int) -> tuple[list[int], Plan]:
        """An ack of one delivery, planned: what it releases, and its record.

        An ack that counts (below the next delivery; with ack all, above the floor) is the
        consumer's last ack at ``now``, as nats-server's updateAcks."""
        if self.config.ack_policy == AckPolicy.NONE:
            return [], self._plan()
        if self.config.ack_policy == AckPolicy.ALL:
            released, ch = self.plan_ack_all(stream_seq, consumer_seq, now)
            return released, self._plan([ch] if ch is not None else [])
        # Explicit: its record follows from the state (no draft), so an ack costs the same
        # whatever the number of pending deliveries (ConsumerState.ack_explicit, without the copy).
        if stream_seq in self.pending:
            floor = self.floor_after_ack(stream_seq)
        elif stream_seq < self.next_stream_seq:
            floor = self.ack_floor_consumer_seq, self.ack_floor_stream_seq
        else:
            return [], self._plan()
        scalars = self.scalars(ack_floor_consumer_seq=floor[0], ack_floor_stream_seq=floor[1], acked_ns=now)
        return [stream_seq], self._plan([change(DROP, scalars, [(stream_seq, 0, 0, 0)])])

    def term(self, stream_seq: int, consumer_seq: int, now: int) -> list[int]:
        """Like an ack, whatever the policy (consumer.go processTerm)."""
        return self.ack(stream_seq, consumer_seq, now)

    def plan_term(self, stream_seq: int, consumer_seq: int, now: int) -> tuple[list[int], Plan]:
        return self.plan_ack(stream_seq, consumer_seq, now)

    def ack_many(self, stream_seqs: list[int], now: int) -> list[int]:
        """Explicit acks of several deliveries in one record."""
        released, plan = self.plan_ack_many(stream_seqs, now)
        self.commit(plan)
        return released

    def plan_ack_many(self, stream_seqs: list[int], now: int) -> tuple[list[int], Plan]:
        if len(stream_seqs) == len(self.pending) and self.pending.keys() == set(stream_seqs):
            # Everything outstanding is acked: the floor meets delivered (consumer.go, len(pending) == 0).
            released = sorted(stream_seqs)
            c_floor, s_floor = self.delivered_consumer_seq, self.next_stream_seq - 1
        else:
            # ack_explicit of each in turn, without a draft (an ack costs the same whatever
            # the number of pending deliveries): the floor moves past the acked ones.
            released = []
            acked: set[int] = set()
            floor: Optional[tuple[int, int]] = None
            pending = self.pending
            for q in stream_seqs:
                if q in pending and q not in acked:
                    floor = self.floor_after_ack(q, floor, acked)
                    acked.add(q)
                    released.append(q)
                elif q < self.next_stream_seq:
                    released.append(q)  # (delivered, not pending: for the stream's retention)
            c_floor, s_floor = floor or (self.ack_floor_consumer_seq, self.ack_floor_stream_seq)
        if not released:
            return [], self._plan()
        scalars = self.scalars(ack_floor_consumer_seq=c_floor, ack_floor_stream_seq=s_floor, acked_ns=now)
        drop = np.zeros(len(released), dtype=ITEM)
        drop["sseq"] = released
        return released, self._plan([change(DROP, scalars, drop)])

    def nak(self, stream_seq: int, consumer_seq: int, delay: Optional[float], now: int) -> None:
        self.commit(self.plan_nak(stream_seq, consumer_seq, delay, now))

    def plan_nak(self, stream_seq: int, consumer_seq: int, delay: Optional[float], now: int) -> Plan:
        """A nak: due again at ``now`` + ``delay``; a plain nak queues at once, a delayed one
        waits for its time (nats-server records it as a delivery update)."""
        p = self.pending.get(stream_seq)
        if p is None or consumer_seq <= self.ack_floor_consumer_seq:
            return self._plan()
        queued = not delay
        scalars = self.scalars() if queued else self.scalars(delivered_ns=now)
        due = now + int((delay or 0) * _NS)
        return self._plan([change(DUE, scalars, [(stream_seq, p[0], QUEUED if queued else 0, due)])])

    def in_progress(self, stream_seq: int, now: int) -> None:
        self.commit(self.plan_in_progress(stream_seq, now))

    def plan_in_progress(self, stream_seq: int, now: int) -> Plan:
        """The ack wait starts again at ``now``; a delivery update (consumer.go progressUpdate)."""
        p = self.pending.get(stream_seq)
        if p is None:
            return self._plan()
        due = now + self.ack_wait_for(self.delivery_counts.get(stream_seq, 1))
        return self._plan([change(DUE, self.scalars(delivered_ns=now), [(stream_seq, p[0], 0, due)])])

    def advance_floor(self, seq: int, now: int) -> None:
        """Act as if every matching message up to ``seq`` was delivered and acked (the Spark commit)."""
        self.commit(self.plan_advance_floor(seq, now))

    def plan_advance_floor(self, seq: int, now: int) -> Plan:
        """advance_floor, planned: a DROP of the pending deliveries and delivery counts up to
        ``seq`` with the new positions (then the last-per-subject sequences left, if it
        delivered some of them).

        As on a server, where this fetches and acks those messages, the consumer ends
        at the last of them: messages after it up to ``seq`` that it does not match
        leave its delivered and ack floor positions where they are; the times of its
        last delivery and last ack are ``now`` when it delivered or acked anything."""
        if seq <= self.ack_floor_stream_seq:
            return self._plan()
        dseq, nxt, delivered_ns = self.delivered_consumer_seq, self.next_stream_seq, self.delivered_ns
        lps = self.last_per_subject
        if seq >= nxt:
            live = self.filter.matching_live(nxt, seq)
            if len(live):
                last = int(live[-1])
                dseq, nxt, delivered_ns = dseq + len(live), last + 1, now
                lps = lps[bisect_right(lps, last) :]
        first = self.pending_keys.first_above(self.pending, seq)  # the first left pending
        floor = (self.pending[first][0] - 1, first - 1) if first is not None else (dseq, nxt - 1)
        acked_ns = self.acked_ns
        if floor[1] > self.ack_floor_stream_seq and self.config.ack_policy != AckPolicy.NONE:
            acked_ns = now  # with ack none the floor follows delivery, and nothing is acked
        scalars = self.scalars(
            delivered_consumer_seq=dseq,
            next_stream_seq=nxt,
            ack_floor_consumer_seq=floor[0],
            ack_floor_stream_seq=floor[1],
            delivered_ns=delivered_ns,
            acked_ns=acked_ns,
        )
        return self._plan(self._drop_then_lps(scalars, self.held_upto(seq), lps))

    def _drop_then_lps(self, scalars: tuple, gone: list[int], lps: list[int]) -> list:
        """A DROP of ``gone`` with ``scalars``, then the last-per-subject sequences ``lps`` if
        they changed (a DROP leaves them; the state between the two records delivers only
        sequences past next_stream_seq, as the list left does)."""
        changes = [change(DROP, scalars, drop_items(gone))]
        if lps != self.last_per_subject:
            changes.append(change(LAST_PER_SUBJECT, scalars, [(q, 0, 0, -1) for q in lps]))
        return changes

    # ------------------------------------------------------------------ stream events (under the lock)

    def drop(self, seqs: np.ndarray) -> list[int]:
        """Messages the stream removed: pending ones leave as if termed (docs/semantics.md §5.3),
        which counts as an ack now.  Under ack policy all that ack, as any, acknowledges every
        delivery below it too (nats-server: the removal's processTerm is a processAckMsg), so
        the floor moves to the highest of them.  Returns what the consumer released, for an
        interest or work-queue stream to remove."""
        if not self.pending:
            return []
        released, plan = self.plan_drop(seqs, self.stream.clock())
        self.commit(plan)
        return released

    def plan_drop(self, seqs: np.ndarray, now: int) -> tuple[list[int], Plan]:
        """drop at ``now``, planned: what it releases, and its records."""
        released, changes = self._drop(self, seqs, now)
        return released, self._plan(changes)

    def purged(self, start: int, wider: bool = False) -> None:
        """The stream purged what this consumer could see below ``start`` (consumer.go purge)."""
        self.commit(self.plan_purged(start, wider, self.stream.clock()))

    def plan_purged(self, start: int, wider: bool, now: int) -> Plan:
        """purged at ``now``, planned: a DROP of the pending deliveries it takes along (of
        every delivery count when none is left pending) with the new positions, then the
        last-per-subject sequences left if the purge took some.

        ``wider``: the consumer sees more than the (subject) purge removed, so it
        also drops pending entries whose message is gone (every pending delivery is
        looked up: any removal may have taken one, not only this purge's).
        """
        s = self.stream.storage
        pending = self.pending
        nxt = max(self.next_stream_seq, start)
        c_floor, s_floor, acked_ns = self.ack_floor_consumer_seq, self.ack_floor_stream_seq, self.acked_ns
        gone: list[int] = []
        if s_floor < start:
            s_floor = start - 1
            gone = self.pending_keys.upto(pending, s_floor)
            if wider:
                gone += [q for q in self.pending_keys.above(pending, s_floor) if not s.is_live(q)]
            if gone:
                c_floor = max(c_floor, max(pending[q][0] for q in gone))
                acked_ns = now  # a purged pending message counts as acked (consumer.go purge)
        if len(gone) == len(pending):
            gone = sorted(set(gone).union(self.delivery_counts))  # nothing pending: no count stays
            c_floor, s_floor = self.delivered_consumer_seq, nxt - 1
        lps = self.last_per_subject
        lps = lps[bisect_left(lps, start) :]
        scalars = self.scalars(
            next_stream_seq=nxt, ack_floor_consumer_seq=c_floor, ack_floor_stream_seq=s_floor, acked_ns=acked_ns
        )
        return self._plan(self._drop_then_lps(scalars, gone, lps))


def _time_or_none(ns: int):
    return ns_to_datetime(ns) if ns else None
