"""A consumer's state, and what each record of its log does to it.

The state is what nats-server keeps for a consumer (``consumer.go``): the next delivery
sequence, the next stream sequence, the ack floor, the pending deliveries with their
deadlines, the delivery counts, the redelivery queue, and the last-per-subject
sequences still to deliver.  ``ConsumerState.apply`` is the one place a record changes
it: a record read back from the log (another process's change, a reopen, a compacted
log) and a record this process just wrote go through it alike, so the memory and the
log hold the same state (tests/engine/test_consumer_plans.py replays them).

A planner reads the state and returns records (``plan_ack_all``); ``ack_explicit``, the
reference the explicit-ack planners follow, changes a draft (``copy``), never the state.

``index`` (consumer_due.py) finds the pending deliveries by deadline; ``apply`` keeps it.
A draft has none: nothing plans on a draft's deadlines.  ``pending_keys`` and ``count_keys``
(consumer_held.py) hold the keys of ``pending`` and ``delivery_counts`` in stream order, and
``redelivered`` counts the deliveries made more than once; ``apply`` keeps them, in a draft too.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Collection, Iterable, Optional

import numpy as np

from jetspark.engine.consumer_due import DueIndex
from jetspark.engine.consumer_held import SortedKeys
from jetspark.engine.consumer_log import DELIVER, DROP, DUE, ITEM, LAST_PER_SUBJECT, MAXED, SNAPSHOT

__all__ = ["QUEUED", "Change", "ConsumerState", "Plan", "change"]

QUEUED = 0xFFFFFFFF  # an item's count marking "appended to the redelivery queue"

Change = tuple[int, tuple, np.ndarray]  # a record to write: op, the scalars of its moment, items


class Plan(list):
    """A planned change: its records in the order they are written (a list of ``Change``),
    and ``after``, the state they leave when the planner built it on a draft (None: no
    draft).  ``version``: the state it was planned on."""

    __slots__ = ("after", "version")

    def __init__(self, version: int, changes: Iterable[Change] = (), after: Optional[ConsumerState] = None) -> None:
        super().__init__(changes)
        self.version = version
        self.after = after


def change(op: int, scalars: tuple, items) -> Change:
    """A record to write: ``op``, ``scalars`` (ConsumerState.scalars) and its items."""
    return op, scalars, items if isinstance(items, np.ndarray) else np.array(items, dtype=ITEM)


class ConsumerState:
    """The state a consumer's log records (see the module docstring)."""

    def __init__(self, index: Optional[DueIndex] = None) -> None:
        self.index = index
        self.clear()

    def clear(self) -> None:
        """The state before the log's first record."""
        self.delivered_consumer_seq = 0
        self.next_stream_seq = 1
        self.ack_floor_consumer_seq = 0
        self.ack_floor_stream_seq = 0
        self.last_active = 0  # the last pull that recorded something, or creation (inactive_threshold's clock)
        self.delivered_ns = 0  # the last delivery, in_progress or delayed nak (0: none yet)
        self.acked_ns = 0  # the last ack or term that counted (0: none yet)
        self.pending: dict[int, list[int]] = {}  # stream seq -> [consumer seq of its first delivery, due_ns]
        self.delivery_counts: dict[int, int] = {}  # stream seq -> deliveries so far
        self.last_per_subject: list[int] = []  # last-per-subject sequences still to deliver, ascending
        # The redelivery queue, its keys in order (naks first come first); every entry is pending.
        # A dict: a delivery leaves the queue from anywhere in it, at the cost of one lookup.
        self.redelivery_queue: dict[int, None] = {}
        self.pending_keys, self.count_keys = SortedKeys(), SortedKeys()
        self.redelivered = 0  # the delivery counts above 1 (ConsumerInfo.num_redelivered)
        if self.index is not None:
            self.index.clear()

    def copy(self) -> ConsumerState:
        """A draft to plan on, without the index.  Its pending entries are shared lists: a
        planner replaces an entry (``pending[q] = [c, due]``), never changes one in place."""
        d = ConsumerState.__new__(ConsumerState)
        d.index = None
        d.delivered_consumer_seq, d.next_stream_seq = self.delivered_consumer_seq, self.next_stream_seq
        d.ack_floor_consumer_seq, d.ack_floor_stream_seq = self.ack_floor_consumer_seq, self.ack_floor_stream_seq
        d.last_active, d.delivered_ns, d.acked_ns = self.last_active, self.delivered_ns, self.acked_ns
        d.last_per_subject = self.last_per_subject.copy()
        d.pending = self.pending.copy()
        d.delivery_counts = self.delivery_counts.copy()
        d.redelivery_queue = self.redelivery_queue.copy()
        d.pending_keys, d.count_keys = self.pending_keys.copy(), self.count_keys.copy()
        d.redelivered = self.redelivered
        return d

    def snapshot(self) -> dict:
        """The state as plain values, for comparing two states."""
        out = {name: getattr(self, name) for name in STATE_FIELDS}
        out["pending"] = {q: list(p) for q, p in self.pending.items()}
        out["redelivery_queue"] = list(self.redelivery_queue)
        out["redelivered"] = self.redelivered
        return out

    def scalars(self, **moved: int) -> tuple:
        """The scalars every record carries, with the fields in ``moved`` replaced."""
        s: tuple[int, ...] = (
            self.delivered_consumer_seq,
            self.next_stream_seq,
            self.ack_floor_consumer_seq,
            self.ack_floor_stream_seq,
            self.last_active,
            self.delivered_ns,
            self.acked_ns,
        )
        if moved:
            s = tuple(moved.get(name, v) for name, v in zip(SCALAR_FIELDS, s))
        return s

    def snapshot_items(self) -> np.ndarray:
        """The items of a SNAPSHOT record holding this state (apply reads them back): the pending
        deliveries, the counts of those given up, the last-per-subject sequences, the queue."""
        pending, counts = self.pending, self.delivery_counts
        # Column by column: a compaction writes every pending delivery (tens of thousands).
        held = np.zeros(len(pending), dtype=ITEM)
        if pending:
            held["sseq"] = list(pending)
            held["cseq"], held["due"] = np.array(list(pending.values()), dtype=np.int64).T
            held["count"] = [counts.get(q, 0) for q in pending]
        maxed = np.array([(q, 0, c, -1) for q, c in counts.items() if q not in pending], dtype=ITEM)
        lps = np.zeros(len(self.last_per_subject), dtype=ITEM)
        lps["sseq"], lps["due"] = self.last_per_subject, -1
        queue = np.zeros(len(self.redelivery_queue), dtype=ITEM)
        queue["sseq"], queue["count"], queue["due"] = list(self.redelivery_queue), QUEUED, -1
        return np.concatenate([held, maxed, lps, queue])

    # ------------------------------------------------------------------ records

    def apply(self, op: int, scalars: tuple, items: np.ndarray) -> None:
        """One record: the state it leaves."""
        (
            self.delivered_consumer_seq,
            self.next_stream_seq,
            self.ack_floor_consumer_seq,
            self.ack_floor_stream_seq,
            self.last_active,
        ) = scalars[:5]
        self.delivered_ns, self.acked_ns = scalars[5:] or (0, 0)
        pending, counts, queue = self.pending, self.delivery_counts, self.redelivery_queue
        index = self.index
        if op == SNAPSHOT:
            pending, counts, queue = self.pending, self.delivery_counts, self.redelivery_queue = {}, {}, {}
            self.last_per_subject = []
            self.redelivered = 0
            if index is not None:
                index.clear()
        if op == DELIVER and not queue and _new_deliveries(items, self):
            pass  # (the fetch loop's record, applied at C speed)
        elif op in (DELIVER, SNAPSHOT):
            if op == DELIVER:
                items = _join_queue(items, pending, counts, queue, index)
            for sseq, cseq, count, due in items.tolist():
                if count == QUEUED:
                    if sseq in pending and sseq not in queue:
                        queue[sseq] = None
                        if index is not None:
                            index.queued(sseq, counts.get(sseq, 1))
                    continue
                if due >= 0:
                    pending[sseq] = [cseq, due]
                    if op == DELIVER:
                        self.pending_keys.add(sseq)
                    if index is not None:
                        index.push(sseq, due)
                if count:
                    self.redelivered += (count > 1) - (counts.get(sseq, 0) > 1)
                    counts[sseq] = count
                    if op == DELIVER:
                        self.count_keys.add(sseq)
                if op == DELIVER:
                    queue.pop(sseq, None)
                if op == SNAPSHOT and cseq == 0 and due < 0 and count == 0:
                    self.last_per_subject.append(sseq)
        elif op in (DROP, MAXED):
            # DROP: acked, termed or gone; MAXED: given up at max_deliver (its count stays).
            for sseq in items["sseq"].tolist():
                pending.pop(sseq, None)
                if op == DROP and counts.pop(sseq, 0) > 1:
                    self.redelivered -= 1
                queue.pop(sseq, None)
        elif op == DUE:
            for sseq, _, count, due in items.tolist():
                p = pending.get(sseq)
                if p is not None:
                    pending[sseq] = [p[0], due]
                    if index is not None:
                        index.push(sseq, due)
                    if count == QUEUED and sseq not in queue:
                        queue[sseq] = None
                        if index is not None:
                            index.queued(sseq, counts.get(sseq, 1))
        elif op == LAST_PER_SUBJECT:
            self.last_per_subject = items["sseq"].tolist()
        if op == DELIVER and self.last_per_subject:
            # Those below the next stream sequence were delivered or found gone.
            del self.last_per_subject[: bisect_left(self.last_per_subject, self.next_stream_seq)]
        if op == SNAPSHOT:
            self.pending_keys, self.count_keys = SortedKeys(pending), SortedKeys(counts)
        else:
            self.pending_keys.settle(pending)
            self.count_keys.settle(counts)
        if index is not None:
            index.settle(self)

    # ------------------------------------------------------------------ transitions, on a draft

    def ack_explicit(self, stream_seq: int) -> list[int]:
        """consumer.go processAckMsg, AckExplicit; returns the sequence for the stream's
        retention to reconsider (any delivered one, pending or not)."""
        pending = stream_seq in self.pending
        if pending:
            self.ack_floor_consumer_seq, self.ack_floor_stream_seq = self.floor_after_ack(stream_seq)
        self.pending.pop(stream_seq, None)
        if self.delivery_counts.pop(stream_seq, 0) > 1:
            self.redelivered -= 1
        self.redelivery_queue.pop(stream_seq, None)
        return [stream_seq] if pending or stream_seq < self.next_stream_seq else []

    def floor_after_ack(
        self, stream_seq: int, floor: Optional[tuple[int, int]] = None, acked: Collection[int] = ()
    ) -> tuple[int, int]:
        """The ack floor (consumer seq, stream seq) once the pending delivery ``stream_seq`` is
        acked explicitly: the delivered position when it was the last pending; past it, up to
        the next pending one, when it lay just above the floor; else where it is.  ``floor``
        and ``acked``: the floor and the pending deliveries acked before it (in one record)."""
        pending = self.pending
        c_floor, s_floor = floor or (self.ack_floor_consumer_seq, self.ack_floor_stream_seq)
        if len(pending) - len(acked) == 1:
            return self.delivered_consumer_seq, self.next_stream_seq - 1
        consumer_seq = pending[stream_seq][0]
        if consumer_seq != c_floor + 1:
            return c_floor, s_floor
        ss = self.pending_keys.first_above(pending, stream_seq, acked)
        if ss is not None:
            return pending[ss][0] - 1, ss - 1
        return consumer_seq, stream_seq

    def plan_ack_all(self, stream_seq: int, consumer_seq: int, now: int) -> tuple[list[int], Optional[Change]]:
        """consumer.go processAckMsg, AckAll: everything up to ``stream_seq``.  Returns what
        it releases and its record (None: below the floor, nothing to do): a DROP of the
        pending deliveries up to it and of the counts of those given up at max_deliver."""
        if consumer_seq <= self.ack_floor_consumer_seq or stream_seq <= self.ack_floor_stream_seq:
            return [], None
        old = self.ack_floor_stream_seq
        gone = self.held_upto(stream_seq)
        scalars = self.scalars(ack_floor_consumer_seq=consumer_seq, ack_floor_stream_seq=stream_seq, acked_ns=now)
        return list(range(old + 1, stream_seq + 1)), change(DROP, scalars, drop_items(gone))

    def held_upto(self, stream_seq: int) -> list[int]:
        """The pending deliveries and delivery counts up to ``stream_seq``, ascending."""
        held = self.pending_keys.upto(self.pending, stream_seq)
        counted = self.count_keys.upto(self.delivery_counts, stream_seq)
        return counted if set(held) <= set(counted) else sorted(set(held).union(counted))


def drop_items(seqs: list[int]) -> np.ndarray:
    """The items of a DROP record of ``seqs``."""
    items = np.zeros(len(seqs), dtype=ITEM)
    items["sseq"] = seqs
    return items


def _join_queue(items: np.ndarray, pending: dict, counts: dict, queue: dict, index: Optional[DueIndex]) -> np.ndarray:
    """A DELIVER record's leading queue entries (a fetch's newcomers to the queue, in stream
    order) joined at once, as the loop of ConsumerState.apply joins them; the items after them."""
    queued = items["count"] == QUEUED
    k = len(items) if queued.all() else int(np.argmin(queued))
    if k:
        new = [q for q in dict.fromkeys(items["sseq"][:k].tolist()) if q in pending and q not in queue]
        queue.update(dict.fromkeys(new))
        if index is not None and index.max_deliver:
            for q in new:
                index.queued(q, counts.get(q, 1))
    return items[k:]


def _new_deliveries(items: np.ndarray, st: ConsumerState) -> bool:
    """A DELIVER record of deliveries alone (no queue entries), applied as the loop of
    ConsumerState.apply would, for an empty redelivery queue; False (nothing done) otherwise."""
    due, count = items["due"], items["count"]
    if (count == QUEUED).any():
        return False
    if (due < 0).all() and (count == 0).all():
        return True  # with ack none nothing is pending
    if not ((due >= 0).all() and (count == 1).all()):
        return False  # (redeliveries: the loop keeps the count of them)
    sseqs, dues, ns = items["sseq"].tolist(), due.tolist(), count.tolist()
    pending, counts = st.pending, st.delivery_counts
    pending.update(zip(sseqs, map(list, zip(items["cseq"].tolist(), dues))))
    counts.update(zip(sseqs, ns))
    st.pending_keys.add_many(sseqs)
    st.count_keys.add_many(sseqs)
    if st.index is not None:
        st.index.push_many(sseqs, dues)
    return True


# The state's fields: the record's scalars in their order, then the collections.
SCALAR_FIELDS = (
    "delivered_consumer_seq",
    "next_stream_seq",
    "ack_floor_consumer_seq",
    "ack_floor_stream_seq",
    "last_active",
    "delivered_ns",
    "acked_ns",
)
STATE_FIELDS = SCALAR_FIELDS + ("pending", "delivery_counts", "last_per_subject", "redelivery_queue")
