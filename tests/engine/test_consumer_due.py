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

import jetspark
from jetspark import AckPolicy, ConsumerConfig
from jetspark.engine.consumer import Consumer
from jetspark.engine.consumer_due import _SLACK
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
