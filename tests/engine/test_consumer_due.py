"""Redeliveries with many pending deliveries: the deadline index (jetspark/engine/consumer_due.py)
against a read of every pending delivery, on real stores in temporary directories.

The order of redelivery is the queue (naks, first come first), then the deliveries whose
ack wait passed, in stream order (docs/semantics.md §5); a fetch finds those through the
index instead of reading every pending delivery.  Here thousands of deliveries with
different deadlines (ack waits, backoff, naks with and without a delay, in-progress
acks) are redelivered and checked against the order a read of the whole state gives,
in the process that wrote them and in another handle that only replays the log.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jetspark
from jetspark import AckPolicy, ConsumerConfig
from jetspark.engine import consumer_due
from jetspark.engine.consumer import Consumer
from jetspark.engine.consumer_due import _SLACK, DueIndex
from jetspark.engine.consumer_log import MAXED
from tests.conftest import FakeClock

NS = 1_000_000_000
N = 3000


def _store(path: Path, clock: FakeClock, n: int = N, **config):
    """Stream S of ``n`` messages and the durable D (``config``), opened in a handle."""
    js = jetspark.connect(path, clock=clock)
    js.add_stream(name="S", subjects=["s.>"])
    for i in range(n):
        js.publish("s.x", b"%d" % i)
    js.add_consumer("S", ConsumerConfig(durable_name="D", max_ack_pending=-1, **config))
    js.stream_info("S")
    return js, js._store.streams["S"]


def _expected(c: Consumer, now: int) -> list[int]:
    """The redeliveries a fetch at ``now`` makes, read from every pending delivery."""
    queue = list(c.redelivery_queue)
    return queue + sorted(q for q, (_, due) in c.pending.items() if due <= now and q not in c.redelivery_queue)


def _fetch_all(c: Consumer, now: int, batch: int) -> list[tuple[int, int]]:
    """(stream seq, num_delivered) of every fetch at ``now`` until one delivers nothing."""
    got: list[tuple[int, int]] = []
    while out := c.next_batch(batch, now):
        got += [(q, n) for q, _, n in out]
    return got


def _spread_deadlines(c: Consumer, clock: FakeClock) -> None:
    """Deliver everything over ten clock steps (ten deadlines), then nak, delay, and extend some."""
    for _ in range(10):
        c.next_batch(N // 10, clock())
        clock.advance(1)
    for q in (2900, 17, 1500):  # queued at once, in this order
        c.nak(q, c.pending[q][0], None, clock())
    c.nak(5, c.pending[5][0], 30.0, clock())  # due later than the rest
    c.in_progress(1, clock())  # its ack wait starts again
    c.nak(2000, c.pending[2000][0], None, clock())
    c.in_progress(2000, clock())  # queued, with a later deadline: still goes out with the queue


@pytest.mark.parametrize("backoff", [None, [30.0, 60.0]])
def test_redeliveries_keep_the_queue_then_stream_order(tmp_path, backoff):
    clock = FakeClock()
    config = {"backoff": backoff, "max_deliver": 5} if backoff else {"ack_wait": 30}
    js, s = _store(tmp_path, clock, ack_policy=AckPolicy.EXPLICIT, **config)
    with js, s.locked():
        c = s.consumers.by_name["D"]
        _spread_deadlines(c, clock)
        clock.advance(25)
        now = clock()  # the deliveries of the first six steps are past their ack wait, the rest not yet
        first = _expected(c, now)
        assert first[:4] == [2900, 17, 1500, 2000] and 0 < len(first) - 4 < N
        assert 1 not in first and 5 not in first  # an in-progress and a delayed nak: not due yet
        assert _fetch_all(c, now, 700) == [(q, 2) for q in first]
        clock.advance(200)  # every delivery is due: the rest, and those just redelivered
        now = clock()
        second = _expected(c, now)
        assert len(second) == N and second == sorted(second)
        assert _fetch_all(c, now, 700) == [(q, 3 if q in first else 2) for q in second]
        c.index.check(c)
        # A fresh reader of the log (another process, a restart) finds the same state and
        # builds its index from the records alone.
        fresh = Consumer(c.stream, c.home)
        try:
            assert fresh.snapshot() == c.snapshot()
            fresh.index.check(fresh)
            clock.advance(200)
            assert _fetch_all(fresh, clock(), 1000) == [(q, 4 if q in first else 3) for q in second]
        finally:
            fresh.close()


def test_a_fetch_after_the_join_reads_no_deadline_again(tmp_path):
    """Once the due deliveries joined the queue, the index holds only later deadlines: the
    next fetches take the queue's head without reading the deadlines that passed (the
    index's stale entries dropped), and its size follows the pending deliveries."""
    clock = FakeClock()
    js, s = _store(tmp_path, clock, ack_policy=AckPolicy.EXPLICIT, ack_wait=5)
    with js, s.locked():
        c = s.consumers.by_name["D"]
        c.next_batch(N, clock())
        clock.advance(6)
        now = clock()
        assert [q for q, _, _ in c.next_batch(100, now)] == list(range(1, 101))
        assert len(c.redelivery_queue) == N - 100
        assert all(due > now for due, _ in c.index.heap) and c.index.due(c, now) == []
        assert len(c.index.heap) <= 2 * len(c.pending) + _SLACK
        for q in range(1, N + 1, 2):
            c.ack(q, c.pending[q][0], now)
        c.index.check(c)
        assert len(c.index.heap) <= 2 * len(c.pending) + _SLACK
        c.ack_many(sorted(c.pending), now)
        assert (c.pending, c.index.heap, c.next_due(now)) == ({}, [], None)


def test_a_nak_of_a_last_delivery_leaves_at_max_deliver_from_the_queue(tmp_path):
    """A delivery nak'd at max_deliver waits in the queue, not in the deadline heap: the next
    fetch gives it up (MAXED) instead of delivering it once more, in this handle and in
    one that replays the log."""
    clock = FakeClock()
    js, s = _store(tmp_path, clock, n=5, ack_policy=AckPolicy.EXPLICIT, ack_wait=5, max_deliver=2)
    with js, s.locked():
        c = s.consumers.by_name["D"]
        c.next_batch(3, clock())
        clock.advance(6)
        assert [(q, n) for q, _, n in c.next_batch(3, clock())] == [(1, 2), (2, 2), (3, 2)]
        c.nak(2, c.pending[2][0], None, clock())
        assert list(c.redelivery_queue) == [2] and c.index.at_max == {2}
        fresh = Consumer(c.stream, c.home)
        assert fresh.index.at_max == {2}  # rebuilt from the log
        fresh.close()
        out, plan = c.plan_batch(10, clock())
        assert [op for op, _, _ in plan][0] == MAXED and plan[0][2]["sseq"].tolist() == [2]
        c.commit(plan)
        assert [q for q, _, _ in out] == [4, 5]  # 2 given up, 1 and 3 not due yet
        assert sorted(c.pending) == [1, 3, 4, 5] and c.delivery_counts[2] == 2
        c.index.check(c)


# ---------------------------------------------------------------------- the index alone


class _State:
    """The three collections DueIndex reads (consumer_due.StateView)."""

    def __init__(self) -> None:
        self.pending: dict[int, list[int]] = {}
        self.delivery_counts: dict[int, int] = {}
        self.redelivery_queue: dict[int, None] = {}


INDEX_OPS = st.lists(
    st.tuples(
        st.sampled_from(["deliver", "deliver", "batch", "queue", "drop"]), st.integers(1, 30), st.integers(0, 40)
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(ops=INDEX_OPS, slack=st.sampled_from([1024, 0]), walk=st.sampled_from([5, 0]))
def test_the_index_answers_what_a_read_of_every_pending_delivery_answers(ops, slack, walk):
    """Deadlines set in any order, one at a time or a batch at once (above the latest yet
    or not), deliveries queued and dropped: after each change the index is a heap holding
    every pending delivery outside the queue, and its due ones, next deadline and queued
    ones at max_deliver are those a read of every pending delivery finds."""
    old = consumer_due._SLACK, consumer_due._WALK
    consumer_due._SLACK, consumer_due._WALK = slack, walk
    try:
        _run_index(ops)
    finally:
        consumer_due._SLACK, consumer_due._WALK = old


def _run_index(ops) -> None:
    state, index = _State(), DueIndex(max_deliver=3)
    pending, counts, queue = state.pending, state.delivery_counts, state.redelivery_queue
    for kind, q, due in ops:
        if kind == "deliver":  # a delivery (or a redelivery, out of the queue) due at ``due``
            queue.pop(q, None)
            pending[q], counts[q] = [q, due], counts.get(q, 0) + 1
            index.push(q, due)
        elif kind == "batch":  # a fetch's new deliveries, q..q+4, their deadlines from ``due`` on
            seqs, dues = list(range(q, q + 5)), [due + (i * q) % 3 for i in range(5)]
            for s, d in zip(seqs, dues):
                queue.pop(s, None)
                pending[s], counts[s] = [s, d], counts.get(s, 0) + 1
            index.push_many(seqs, dues)
        elif kind == "queue" and q in pending and q not in queue:
            queue[q] = None
            index.queued(q, counts[q])
        elif kind == "drop":
            pending.pop(q, None)
            counts.pop(q, None)
            queue.pop(q, None)
        index.settle(state)
        index.check(state)
        for t in range(-1, 45, 4):
            waiting = {s: d for s, (_, d) in pending.items() if s not in queue}
            assert index.due(state, t) == sorted(s for s, d in waiting.items() if d <= t)
            assert index.next_due(state, t) == min((d for d in waiting.values() if d > t), default=None)
            at_max = sorted(s for s in queue if pending[s][1] <= t and counts[s] >= 3)
            assert sorted(index.queued_at_max(state, t)) == at_max
