"""An index of a consumer's pending deliveries by deadline, so a fetch finds the due ones
without reading every pending delivery (consumer_fetch.py ``plan_batch``, ``next_due``).

``ConsumerState.apply`` keeps it: every deadline a record sets is pushed onto a heap of
``(due, stream seq)``, and nothing is ever searched for and removed.  An entry counts only
while it still describes the state, its delivery pending with that deadline and not in the
redelivery queue (a queued delivery goes out with the queue, whatever its deadline); the
others are left behind and dropped once they reach the top of the heap, or all at once
when they outnumber those that count.  So every pending delivery outside the queue has an
entry that counts, and a fetch reads the heap's entries up to ``now``: the deliveries that
fell due since the last fetch and those left behind among them (when they are a good part
of the heap, one pass over all of it, cheaper than a walk node by node).

The queue's deliveries at ``max_deliver`` (a nak of a last delivery) are the other thing a
fetch looks for: they are kept in a set, as few as the naks of last deliveries not yet due.

The index reads the state and never changes it: what a reopen of the log finds is the same
state with a fresh index (tests/engine/test_consumer_plans.py checks ``check`` after every
step of its random runs; tests/engine/test_consumer_due.py checks the index alone).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import Optional, Protocol

__all__ = ["DueIndex"]


class StateView(Protocol):
    """What the index reads of consumer_state.ConsumerState (which imports this module)."""

    pending: dict[int, list[int]]
    delivery_counts: dict[int, int]
    redelivery_queue: dict[int, None]


# Entries left behind are dropped all at once past twice those that count and this.
_SLACK = 1024
# A fetch walks the heap's due entries node by node up to 1/2**_WALK of the heap, then reads it whole.
_WALK = 5


class DueIndex:
    """The pending deliveries outside the redelivery queue by deadline, and the queued ones
    at ``max_deliver`` (0: no limit)."""

    def __init__(self, max_deliver: Optional[int] = None) -> None:
        self.max_deliver = max_deliver if max_deliver is not None and max_deliver > 0 else 0
        self.heap: list[tuple[int, int]] = []
        self.high = (0, 0)  # no entry of the heap is above it
        self.at_max: set[int] = set()  # queued deliveries that were at max_deliver when queued (some left since)

    def clear(self) -> None:
        self.heap = []
        self.high = (0, 0)  # no entry of the heap is above it
        self.at_max = set()

    # ------------------------------------------------------------------ kept by ConsumerState.apply

    def push(self, sseq: int, due: int) -> None:
        """A pending delivery's deadline is now ``due``."""
        entry = (due, sseq)
        heappush(self.heap, entry)
        if entry > self.high:
            self.high = entry

    def push_many(self, sseqs: list[int], dues: list[int]) -> None:
        entries = list(zip(dues, sseqs))
        if not entries:
            return
        if entries[0] >= self.high and entries == sorted(entries):
            # A fetch's new deliveries share one deadline, the latest yet: appended in order,
            # each lies below its parent (an older entry, or one of them before it).
            self.heap.extend(entries)
            self.high = entries[-1]
            return
        for entry in entries:
            self.push(entry[1], entry[0])

    def queued(self, sseq: int, count: int) -> None:
        """A delivery made ``count`` times joined the redelivery queue."""
        if self.max_deliver and count >= self.max_deliver:
            self.at_max.add(sseq)

    def settle(self, st: StateView) -> None:
        """After a record: drop the entries left behind at the top of the heap, or all of them
        when they outnumber those that count (as when many deliveries join the queue at once)."""
        pending, queue, heap = st.pending, st.redelivery_queue, self.heap
        if not pending:
            self.clear()
            return
        if len(heap) > 2 * (len(pending) - len(queue)) + _SLACK:  # (the queue's are all pending)
            self.heap = heap = [
                (due, q) for due, q in heap if (p := pending.get(q)) is not None and p[1] == due and q not in queue
            ]
            heapify(heap)
        while heap:
            due, q = heap[0]
            p = pending.get(q)
            if p is not None and p[1] == due and q not in queue:
                break
            heappop(heap)
        if len(self.at_max) > _SLACK:
            self.at_max = {q for q in self.at_max if q in queue}

    # ------------------------------------------------------------------ read by the planners

    def due(self, st: StateView, now: int) -> list[int]:
        """The pending deliveries outside the queue whose deadline is at or before ``now``, in
        stream order."""
        heap, pending, queue = self.heap, st.pending, st.redelivery_queue
        if not heap or heap[0][0] > now:
            return []
        # The heap's entries up to now form a subtree at its root: walk it, unless it is a
        # good part of the heap (a whole wave of deliveries due at once), which one pass over
        # the heap reads faster than a walk node by node.
        n, budget = len(heap), len(heap) >> _WALK
        todo, hits = [0], []
        while todo and budget:
            i = todo.pop()
            hits.append(heap[i])
            budget -= 1
            for j in (2 * i + 1, 2 * i + 2):
                if j < n and heap[j][0] <= now:
                    todo.append(j)
        if todo:
            hits = [e for e in heap if e[0] <= now]
        return sorted({q for due, q in hits if (p := pending.get(q)) is not None and p[1] == due and q not in queue})

    def queued_at_max(self, st: StateView, now: int) -> list[int]:
        """The queued deliveries at max_deliver whose deadline is at or before ``now``."""
        if not self.at_max:
            return []
        pending, queue, counts, md = st.pending, st.redelivery_queue, st.delivery_counts, self.max_deliver
        return [q for q in self.at_max if q in queue and pending[q][1] <= now and counts.get(q, 1) >= md]

    def next_due(self, st: StateView, now: int) -> Optional[int]:
        """The earliest deadline after ``now`` of a pending delivery outside the queue (None: none)."""
        heap, pending, queue = self.heap, st.pending, st.redelivery_queue
        best: Optional[int] = None
        todo = [0] if heap else []
        n = len(heap)
        while todo:
            i = todo.pop()
            due, q = heap[i]
            if best is not None and due >= best:
                continue  # (its subtree holds nothing earlier)
            p = pending.get(q)
            if due > now and p is not None and p[1] == due and q not in queue:
                best = due
                continue
            todo.extend(j for j in (2 * i + 1, 2 * i + 2) if j < n)
        return best

    def check(self, st: StateView) -> None:
        """AssertionError unless the heap is one (no entry below its parent, none above
        ``high``), every pending delivery outside the queue has an entry that counts, and
        every queued one at max_deliver is in ``at_max`` (for the tests)."""
        heap = self.heap
        bad = [i for i in range(1, len(heap)) if heap[i] < heap[(i - 1) // 2]]
        assert not bad, f"entries below their parent: {[(heap[(i - 1) // 2], heap[i]) for i in bad]}"
        assert not heap or max(heap) <= self.high, f"an entry above high {self.high}"
        entries = set(heap)
        for q, (_, due) in st.pending.items():
            if q not in st.redelivery_queue:
                assert (due, q) in entries, f"pending {q} (due {due}) is not in the index"
            elif self.max_deliver and st.delivery_counts.get(q, 1) >= self.max_deliver:
                assert q in self.at_max, f"queued {q} at max_deliver is not in the index"
