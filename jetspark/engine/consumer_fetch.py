"""The half of a consumer that chooses a fetch's deliveries (docs/semantics.md §5): the
redeliveries due, the max_deliver expiries, the new messages, and when the next pending
delivery falls due.  ``BatchPlanner`` is the base of consumer.py's ``Consumer``, which
gives it the consumer's stream, config and subject filter, and commits its plans.

A fetch plans without a draft: its records follow from the state and the batch's own
choices, and consumer_due.py's index finds the deliveries that fell due, so a fetch
costs its batch and what fell due since the last one, not every pending delivery.
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Optional

import numpy as np

from jetspark.api import AckPolicy, ConsumerConfig, DeliverPolicy
from jetspark.engine.consumer_due import DueIndex
from jetspark.engine.consumer_log import DELIVER, DROP, ITEM, MAXED, SCALARS
from jetspark.engine.consumer_match import ByteBudget, SubjectFilter
from jetspark.engine.consumer_state import QUEUED, Change, ConsumerState, Plan, change, drop_items

__all__ = ["BatchPlanner"]


class BatchPlanner(ConsumerState):
    """A consumer's fetch planners; consumer.Consumer sets what is declared here."""

    stream: Any  # the Stream (stream.py)
    name: str
    config: ConsumerConfig
    filter: SubjectFilter
    index: DueIndex
    version: int  # bumped by every change of the state in memory (a plan names the one it read)
    _ack_waits: list[int]

    def _plan(self, changes=(), after: Optional[ConsumerState] = None) -> Plan:
        return Plan(self.version, changes, after)

    def ack_wait_for(self, deliveries: int) -> int:
        """Nanoseconds until a message delivered ``deliveries`` times is due again."""
        waits = self._ack_waits
        return waits[min(deliveries - 1, len(waits) - 1)]

    def num_pending(self) -> int:
        """The matching messages not delivered yet (ConsumerInfo.num_pending)."""
        if self.last_per_subject:
            rest = [q for q in self.last_per_subject if q >= self.next_stream_seq and self.stream.storage.is_live(q)]
            return len(rest) + self.filter.count_matching(max(self.last_per_subject[-1] + 1, self.next_stream_seq))
        return self.filter.count_matching(self.next_stream_seq)

    def next_due(self, now: int) -> Optional[int]:
        """When (clock ns) the earliest pending delivery falls due, for a redelivery or to leave
        at max_deliver and free max_ack_pending room; None when none waits for a time."""
        if not self.pending or self.config.ack_policy == AckPolicy.NONE:
            return None
        due = self.index.next_due(self, now)
        # The queue's deliveries wait for no time, yet a queued one keeps a deadline (an in-progress
        # after its nak); a fetch that delivered nothing found the queue empty, or all of it gone.
        for q in self.redelivery_queue:
            d = self.pending[q][1]
            if d > now and (due is None or d < due):
                due = d
        return due

    def plan_expiry(self, now: int) -> Plan:
        """expire_max_delivered's record, planned."""
        ch = self._expiry(self.index.due(self, now), now)
        return self._plan([ch] if ch is not None else [])

    def _expiry(self, due: list[int], now: int) -> Optional[Change]:
        """The MAXED record of the deliveries at max_deliver due at ``now``: of ``due`` (those
        outside the queue, DueIndex.due) and of the queue."""
        md = self.config.max_deliver
        if md is None or md <= 0 or not self.pending:  # (normalisation sets it: -1 for no limit)
            return None
        counts = self.delivery_counts
        done = [q for q in due if counts.get(q, 1) >= md] + self.index.queued_at_max(self, now)
        if not done:
            return None
        # delivered_ns: as nats-server's updateDelivered when it gives up on a message.
        return change(MAXED, self.scalars(delivered_ns=now), [(q, 0, 0, 0) for q in sorted(done)])

    def plan_batch(self, batch: int, now: int, max_bytes: int = 0) -> tuple[list[tuple[int, int, int]], Plan]:
        """next_batch's choice at ``now``, planned: the deliveries, and the records that make
        them durable (max_deliver expiries, the deliveries, the pending messages found gone),
        in the order they are written.  Reads the stream, never the clock.  Planned without a
        draft (see the module docstring), but for a pending message found gone."""
        s = self.stream.storage
        plan = self._plan()
        pending, counts = self.pending, self.delivery_counts
        due = self.index.due(self, now) if pending else []
        expired = self._expiry(due, now)
        maxed: set[int] = set()
        if expired is not None:
            plan.append(expired)
            maxed = set(expired[2]["sseq"].tolist())
        out: list[tuple[int, int, int]] = []
        joined: list[int] = []  # the queue's newcomers
        items: list[tuple] = []  # the redeliveries
        gone: list[int] = []
        dseq = self.delivered_consumer_seq
        fits = ByteBudget(self.stream, self.name, max_bytes, self.num_pending()) if max_bytes > 0 else None
        if len(pending) > len(maxed):
            # Messages past their ack wait join the redelivery queue in stream order,
            # behind those nak'd (consumer.go checkPending, addToRedeliverQueue).
            joined = [q for q in due if q not in maxed] if maxed else due
            for q in chain(self.redelivery_queue, joined):
                if len(out) >= batch:
                    break
                if q in maxed:
                    continue
                if not s.is_live(q):
                    gone.append(q)
                    continue
                count = counts.get(q, 1) + 1
                if fits is not None and not fits.take(q, dseq + 1, count):
                    batch = len(out)  # nothing more fits this pull
                    break
                dseq += 1
                # The pending record keeps the first delivery's consumer sequence (consumer.go trackPending).
                out.append((q, dseq, count))
                items.append((q, pending[q][0], count, now + self.ack_wait_for(count)))
        room = batch - len(out)
        limit = self.config.max_ack_pending
        ack_none = self.config.ack_policy == AckPolicy.NONE
        if not ack_none and limit is not None and limit > 0:  # (set by normalisation but under ack none)
            room = min(room, limit - (len(pending) - len(maxed)))
        moved = dict(delivered_consumer_seq=dseq, last_active=now)
        if expired is not None:
            moved["delivered_ns"] = now  # (as the MAXED record left it)
        queued = np.zeros(len(joined), dtype=ITEM)
        queued["sseq"], queued["count"], queued["due"] = joined, QUEUED, -1
        parts = [queued, np.array(items, dtype=ITEM)]
        if room > 0:
            qs = self._new_seqs(room)
            if fits is not None:
                qs = qs[: fits.count_new(qs, dseq + 1)]
            if (
                not qs
                and not out
                and s.memory
                and self.filter.matches_nothing_stored()
                and self.config.deliver_policy != DeliverPolicy.BY_START_SEQUENCE
                and self.next_stream_seq <= s.header.last_seq
            ):
                # nats-server's memory store moves a pull whose filter matches no stored
                # subject to the end of the stream (its file store does not); the ack floor stays.
                moved["next_stream_seq"] = s.header.last_seq + 1
            if qs:
                k = len(qs)
                cseqs = range(dseq + 1, dseq + k + 1)
                dseq = moved["delivered_consumer_seq"] = dseq + k
                moved["next_stream_seq"] = qs[-1] + 1
                new = np.zeros(k, dtype=ITEM)
                new["sseq"] = qs
                new["cseq"] = cseqs
                if ack_none:
                    moved["ack_floor_consumer_seq"], moved["ack_floor_stream_seq"] = dseq, qs[-1]
                    new["due"] = -1
                else:
                    new["count"] = 1
                    new["due"] = now + self.ack_wait_for(1)
                out.extend(zip(qs, cseqs, [1] * k))
                parts.append(new)
        if out:
            moved["delivered_ns"] = now
        if joined or items or len(parts) > 2 or "next_stream_seq" in moved:
            op = DELIVER if out or joined else SCALARS
            plan.append(change(op, self.scalars(**moved), np.concatenate(parts)))
        if gone:
            # The drop's records follow from the state the records before them leave: a draft.
            st = self.copy()
            for op, scalars, recs in plan:
                st.apply(op, scalars, recs)
            st.last_active = now
            drops = self._drop(st, np.array(sorted(gone), dtype=np.int64), now)[1]
            for op, scalars, recs in drops:
                st.apply(op, scalars, recs)
            plan += drops
            plan.after = st
        return out, plan if plan else self._plan()

    def _new_seqs(self, room: int) -> list[int]:
        """Up to ``room`` messages never delivered, in the order they go out."""
        s = self.stream.storage
        found: list[int] = []
        if self.last_per_subject:
            for q in self.last_per_subject:
                if len(found) >= room:
                    return found
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

    def _drop(self, st: ConsumerState, seqs: np.ndarray, now: int) -> tuple[list[int], list[Change]]:
        """drop planned on ``st`` (this state, or a draft of what a plan's first records leave):
        what it releases, and the records that do it.  Costs the fewer of ``seqs`` and the
        pending deliveries, and what the drop changes."""
        pending = st.pending
        if not pending:
            return [], []
        if len(seqs) <= len(pending):
            hit = sorted({q for q in seqs.tolist() if q in pending})
        else:
            keys = np.fromiter(pending, dtype=np.int64, count=len(pending))
            hit = sorted(keys[np.isin(keys, seqs)].tolist())
        if not hit:
            return [], []
        if self.config.ack_policy == AckPolicy.ALL:
            # A term under ack all acknowledges everything below it too: every hit goes with the last.
            released, ch = st.plan_ack_all(hit[-1], pending[hit[-1]][0], now)
            if ch is not None:
                return released, [ch]
        # Each as ack_explicit would, in turn (none below the floor left to release: they are gone).
        floor: Optional[tuple[int, int]] = None
        acked: set[int] = set()
        for q in hit:
            floor = st.floor_after_ack(q, floor, acked)
            acked.add(q)
        assert floor is not None  # (hit is not empty)
        scalars = st.scalars(ack_floor_consumer_seq=floor[0], ack_floor_stream_seq=floor[1], acked_ns=now)
        return [], [change(DROP, scalars, drop_items(hit))]
