"""The consumer's pure planners and its one commit, on real stores in temporary directories.

consumer.py's docstring: every change is planned at the ``now`` it is given, without
moving the state; ``commit`` writes the records to the log, then the memory follows.
Here each planner's records are checked against the state they leave, the state is
checked unmoved until the commit, and a random run of deliveries, acks, naks, terms,
floors, purges and removals is checked record by record against a fresh reopen of the
log (the replay every other process does).
"""

from __future__ import annotations

import contextlib
import errno
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jetspark
from jetspark import AckPolicy, ConsumerConfig, DeliverPolicy
from jetspark.engine import consumer_due, consumer_held, consumer_log
from jetspark.engine.consumer import Consumer
from jetspark.engine.consumer_log import DELIVER, DROP, DUE, LAST_PER_SUBJECT, MAXED, SCALARS, SNAPSHOT
from jetspark.engine.consumer_state import QUEUED
from jetspark.errors import StoreFullError
from tests.conftest import FakeClock

NS = 1_000_000_000


def _open(path: Path, clock, n: int = 10, **config):
    """A store with stream S of ``n`` messages on s.a/s.b/s.c and consumer D (``config``)."""
    js = jetspark.connect(path, clock=clock)
    js.add_stream(name="S", subjects=["s.>"])
    for i in range(1, n + 1):
        js.publish("s." + "abc"[i % 3], b"m%d" % i)
    js.add_consumer("S", ConsumerConfig(durable_name="D", **config))
    js.stream_info("S")  # opens it in this handle
    return js, js._store.streams["S"]


def _reopened(c: Consumer) -> dict:
    """The state a fresh reader of the log finds (another process, a restart)."""
    fresh = Consumer(c.stream, c.home)
    try:
        return fresh.snapshot()
    finally:
        fresh.close()


@contextlib.contextmanager
def _consumer(path: Path, **config):
    """Consumer D of a fresh store (``_open``) and the store's clock, its stream locked; on
    leaving, the memory must equal a fresh reopen of the log."""
    clock = FakeClock()
    js, s = _open(path, clock, **config)
    with js, s.locked():
        c = s.consumers.by_name["D"]
        yield c, clock
        assert _reopened(c) == c.snapshot()


def _ops(plan) -> list:
    return [op for op, _, _ in plan]


def _dropped(plan) -> list:
    return [(op, items["sseq"].tolist()) for op, _, items in plan]


def _planned(c: Consumer, plan_call):
    """Plan, check that planning moved neither the state nor the log, commit; the result.
    ``plan_call`` returns (result, plan), or a plan alone (the result is then None).  A
    plan made on a draft: the draft is the state its records leave once applied."""
    before, size = c.snapshot(), Path(c.log.path).stat().st_size
    out = plan_call()
    result, plan = out if isinstance(out, tuple) else (None, out)
    assert c.snapshot() == before, "planning moved the state"
    assert Path(c.log.path).stat().st_size == size, "planning wrote to the log"
    c.commit(plan)
    if plan.after is not None:
        assert plan.after.snapshot() == c.snapshot(), "the draft is not what the records left"
    return result, plan


# ---------------------------------------------------------------------- references: planners on a draft
#
# What the planners of acks under ack policy all, drops, floors and purges did before they
# planned without a copy of the state (each reads every pending delivery of a draft and
# changes it); the random run below checks the records each planner writes leave the same.


def _plain(st) -> dict:
    """A state's fields but the count of redelivered ones (the references do not keep it)."""
    out = st.snapshot()
    del out["redelivered"]
    return out


def _ref_ack_all(d, stream_seq: int, consumer_seq: int, now: int) -> list[int]:
    if consumer_seq <= d.ack_floor_consumer_seq or stream_seq <= d.ack_floor_stream_seq:
        return []
    old = d.ack_floor_stream_seq
    d.acked_ns = now
    d.ack_floor_consumer_seq, d.ack_floor_stream_seq = consumer_seq, stream_seq
    gone = [q for q in d.pending if q <= stream_seq]
    gone += [q for q in d.delivery_counts if q <= stream_seq and q not in d.pending]
    for q in gone:
        d.pending.pop(q, None)
        d.delivery_counts.pop(q, None)
    d.redelivery_queue = {q: None for q in d.redelivery_queue if q in d.pending}
    return list(range(old + 1, stream_seq + 1))


def _ref_drop(d, seqs: np.ndarray, now: int, policy) -> None:
    hit = sorted(q for q in d.pending if q in set(seqs.tolist()))
    if not hit:
        return
    if policy == AckPolicy.ALL and _ref_ack_all(d, hit[-1], d.pending[hit[-1]][0], now):
        return
    for q in hit:
        d.ack_explicit(q)
    d.acked_ns = now


def _ref_advance_floor(d, c: Consumer, seq: int, now: int) -> None:
    if seq <= d.ack_floor_stream_seq:
        return
    old = d.ack_floor_stream_seq
    if seq >= d.next_stream_seq:
        live = c.filter.matching_live(d.next_stream_seq, seq)
        if len(live):
            last = int(live[-1])
            d.delivered_consumer_seq += len(live)
            d.next_stream_seq = last + 1
            d.last_per_subject = [q for q in d.last_per_subject if q > last]
            d.delivered_ns = now
    for q in [q for q in d.pending if q <= seq]:
        del d.pending[q]
    for q in [q for q in d.delivery_counts if q <= seq]:
        del d.delivery_counts[q]
    d.redelivery_queue = {q: None for q in d.redelivery_queue if q in d.pending}
    if d.pending:
        first = min(d.pending)
        d.ack_floor_consumer_seq, d.ack_floor_stream_seq = d.pending[first][0] - 1, first - 1
    else:
        d.ack_floor_consumer_seq, d.ack_floor_stream_seq = d.delivered_consumer_seq, d.next_stream_seq - 1
    if d.ack_floor_stream_seq > old and c.config.ack_policy != AckPolicy.NONE:
        d.acked_ns = now


def _ref_purged(d, start: int, wider: bool, now: int, is_live) -> None:
    d.next_stream_seq = max(d.next_stream_seq, start)
    if d.ack_floor_stream_seq < start:
        d.ack_floor_stream_seq = start - 1
        pending = len(d.pending)
        for q in list(d.pending):
            if q <= d.ack_floor_stream_seq or (wider and not is_live(q)):
                d.ack_floor_consumer_seq = max(d.ack_floor_consumer_seq, d.pending.pop(q)[0])
                d.delivery_counts.pop(q, None)
        if len(d.pending) < pending:
            d.acked_ns = now
    if not d.pending:
        d.delivery_counts = {}
        d.ack_floor_consumer_seq, d.ack_floor_stream_seq = d.delivered_consumer_seq, d.next_stream_seq - 1
    d.redelivery_queue = {q: None for q in d.redelivery_queue if q in d.pending}
    d.last_per_subject = [q for q in d.last_per_subject if q >= start]


def _ref_needs(c: Consumer, seqs: np.ndarray) -> list[bool]:
    """Consumer.needs, read from every pending delivery and count."""
    out = []
    for q in seqs.tolist():
        held = q >= c.next_stream_seq or q in c.pending if c.is_explicit else True
        out.append((q > c.ack_floor_stream_seq and held) or q in c.delivery_counts)
    return out


# ---------------------------------------------------------------------- one planner at a time


def test_a_batch_queues_the_due_behind_the_nakd_and_records_the_queue(tmp_path):
    with _consumer(tmp_path, ack_policy=AckPolicy.EXPLICIT, ack_wait=10) as (c, clock):
        c.next_batch(3, clock())
        _planned(c, lambda: c.plan_nak(3, 3, None, clock()))
        assert list(c.redelivery_queue) == [3]
        clock.advance(11)  # 1 and 2 are due: they queue behind the nak'd 3
        out, plan = _planned(c, lambda: c.plan_batch(2, clock()))
        assert out == [(3, 4, 2), (1, 5, 2)]
        (op, scalars, items) = plan[0]
        assert op == DELIVER and len(plan) == 1
        assert items[["sseq", "count"]].tolist() == [(1, QUEUED), (2, QUEUED), (3, 2), (1, 2)]
        assert scalars[:2] == (5, 4)  # consumer seq 5; the next new message is still 4
        assert list(c.redelivery_queue) == [2]  # left in the queue, and in the log


def test_an_explicit_ack_plans_one_drop_with_the_new_floor(tmp_path):
    with _consumer(tmp_path, ack_policy=AckPolicy.EXPLICIT) as (c, clock):
        c.next_batch(3, clock())
        clock.advance(1)
        released, plan = _planned(c, lambda: c.plan_ack(1, 1, clock()))
        assert released == [1]
        assert _dropped(plan) == [(DROP, [1])]
        assert (c.ack_floor_consumer_seq, c.ack_floor_stream_seq, c.acked_ns) == (1, 1, clock())
        assert sorted(c.pending) == [2, 3]
        # An ack above a gap leaves the floor; acking a message twice releases it again, writes nothing new.
        _planned(c, lambda: c.plan_ack(3, 3, clock()))
        assert (c.ack_floor_stream_seq, sorted(c.pending)) == (1, [2])
        size = Path(c.log.path).stat().st_size
        assert c.plan_ack(99, 99, clock()) == ([], [])  # never delivered: nothing
        assert Path(c.log.path).stat().st_size == size


def test_ack_all_drops_what_max_deliver_gave_up_too(tmp_path):
    with _consumer(tmp_path, ack_policy=AckPolicy.ALL, ack_wait=1, max_deliver=1) as (c, clock):
        c.next_batch(3, clock())
        clock.advance(2)  # past ack_wait: 1..3 reach max_deliver and leave pending, their counts stay
        out, plan = _planned(c, lambda: c.plan_batch(1, clock()))
        assert _ops(plan) == [MAXED, DELIVER] and out == [(4, 4, 1)]
        assert (sorted(c.pending), sorted(c.delivery_counts)) == ([4], [1, 2, 3, 4])
        released, plan = _planned(c, lambda: c.plan_ack(2, 2, clock()))
        assert released == [1, 2]
        assert _dropped(plan) == [(DROP, [1, 2])]
        assert sorted(c.delivery_counts) == [3, 4]
        # on leaving _consumer: a reader forgets 1 and 2's counts as well


def test_ack_many_plans_one_record(tmp_path):
    with _consumer(tmp_path, ack_policy=AckPolicy.EXPLICIT) as (c, clock):
        c.next_batch(5, clock())
        released, plan = _planned(c, lambda: c.plan_ack_many([2, 1, 4], clock()))
        assert released == [2, 1, 4] and len(plan) == 1 and plan[0][0] == DROP
        assert (c.ack_floor_stream_seq, sorted(c.pending)) == (2, [3, 5])
        released, plan = _planned(c, lambda: c.plan_ack_many([5, 3], clock()))
        assert released == [3, 5]  # everything outstanding: the floor meets delivered
        assert (c.ack_floor_consumer_seq, c.ack_floor_stream_seq, c.pending) == (5, 5, {})


def test_nak_and_in_progress_plan_a_due_record(tmp_path):
    with _consumer(tmp_path, ack_policy=AckPolicy.EXPLICIT, ack_wait=30) as (c, clock):
        c.next_batch(3, clock())
        t0 = clock()
        clock.advance(1)
        _, plan = _planned(c, lambda: c.plan_nak(2, 2, 5.0, clock()))
        (op, scalars, items) = plan[0]
        assert op == DUE and items.tolist() == [(2, 2, 0, clock() + 5 * NS)]
        assert c.delivered_ns == clock() and list(c.redelivery_queue) == []  # a delayed nak waits for its time
        _planned(c, lambda: c.plan_nak(1, 1, None, clock()))
        assert list(c.redelivery_queue) == [1] and c.pending[1] == [1, clock()]
        clock.advance(1)
        _planned(c, lambda: c.plan_in_progress(3, clock()))
        assert c.pending[3] == [3, clock() + 30 * NS] and c.delivered_ns == clock() > t0
        # A nak of a delivery the floor passed, or of one not pending, plans nothing.
        assert c.plan_nak(7, 7, None, clock()) == [] and c.plan_in_progress(7, clock()) == []
        assert _reopened(c) == c.snapshot()
        # An ack of a queued delivery takes it out of the queue, in memory and in the log.
        _planned(c, lambda: c.plan_ack(1, 1, clock()))
        assert (list(c.redelivery_queue), sorted(c.pending)) == ([], [2, 3])


def test_advance_floor_and_purge_plan_a_drop_of_what_they_pass(tmp_path):
    with _consumer(tmp_path, ack_policy=AckPolicy.EXPLICIT, filter_subject="s.a") as (c, clock):
        c.next_batch(1, clock())  # s.a: 3, 6, 9
        _, plan = _planned(c, lambda: c.plan_advance_floor(7, clock()))
        assert _dropped(plan) == [(DROP, [3])]  # the pending delivery it passed, not a snapshot of them all
        assert (c.delivered_consumer_seq, c.next_stream_seq, c.ack_floor_stream_seq, c.pending) == (2, 7, 6, {})
        assert c.plan_advance_floor(5, clock()) == []  # below the floor: nothing
        c.next_batch(1, clock())  # 9
        _, plan = _planned(c, lambda: c.plan_purged(9, False, clock()))
        assert _dropped(plan) == [(DROP, [])] and (c.next_stream_seq, c.ack_floor_stream_seq) == (10, 8)
        _, plan = _planned(c, lambda: c.plan_purged(10, False, clock()))
        assert _dropped(plan) == [(DROP, [9])] and (c.ack_floor_stream_seq, c.pending) == (9, {})


def test_advance_floor_and_purge_pass_the_floor_to_the_first_pending_left(tmp_path):
    """Among 50 pending deliveries (some given up at max_deliver, their counts kept), the floor
    moves to just below the first pending delivery past the passed ones; the DROP names the
    pending deliveries and the counts up to the sequence, no more."""
    with _consumer(tmp_path, n=60, ack_policy=AckPolicy.EXPLICIT, ack_wait=1, max_deliver=2) as (c, clock):
        c.next_batch(50, clock())
        _planned(c, lambda: c.plan_nak(7, 7, None, clock()))
        _planned(c, lambda: c.plan_batch(1, clock()))  # 7 again: its second and last delivery
        _planned(c, lambda: c.plan_ack(12, 12, clock()))
        clock.advance(2)
        _planned(c, lambda: c.plan_expiry(clock()))  # 7 reached max_deliver: its count stays
        assert 7 in c.delivery_counts and 7 not in c.pending and c.num_redelivered() == 1
        for q in (5, 6, 8, 9, 10, 11, 13):  # naks queue these first, the others due join behind them
            _planned(c, lambda q=q: c.plan_nak(q, q, None, clock()))
        _planned(c, lambda: c.plan_batch(3, clock()))
        assert c.num_redelivered() == 4  # 7, and 5, 6, 8 delivered again
        assert list(c.redelivery_queue)[:6] == [9, 10, 11, 13, 1, 2]
        _, plan = _planned(c, lambda: c.plan_advance_floor(11, clock()))
        assert _dropped(plan) == [(DROP, list(range(1, 12)))]  # 7's count too; 12 was acked
        assert (c.ack_floor_consumer_seq, c.ack_floor_stream_seq) == (12, 12)  # 13 is the first pending left
        assert (c.num_redelivered(), list(c.redelivery_queue)[:2]) == (0, [13, 14])
        _, plan = _planned(c, lambda: c.plan_purged(20, False, clock()))
        assert _dropped(plan) == [(DROP, list(range(13, 20)))]
        assert (c.ack_floor_consumer_seq, c.ack_floor_stream_seq) == (19, 19)
        assert (min(c.pending), next(iter(c.redelivery_queue))) == (20, 20)


def test_a_purge_under_ack_all_keeps_a_floor_a_redelivery_moved_past_the_pending(tmp_path):
    """Under ack all the floor's consumer sequence is the acked delivery's: a redelivery's is
    past the pending deliveries' first ones, and a purge taking them leaves it there."""
    with _consumer(tmp_path, ack_policy=AckPolicy.ALL) as (c, clock):
        c.next_batch(3, clock())
        _planned(c, lambda: c.plan_nak(1, 1, None, clock()))
        assert c.next_batch(1, clock()) == [(1, 4, 2)]
        _planned(c, lambda: c.plan_ack(1, 4, clock()))
        assert (c.ack_floor_consumer_seq, c.ack_floor_stream_seq, sorted(c.pending)) == (4, 1, [2, 3])
        ref = c.copy()
        _ref_purged(ref, 3, False, clock(), c.stream.storage.is_live)
        _, plan = _planned(c, lambda: c.plan_purged(3, False, clock()))
        assert _dropped(plan) == [(DROP, [2])] and _plain(ref) == _plain(c)
        assert (c.ack_floor_consumer_seq, c.ack_floor_stream_seq, sorted(c.pending)) == (4, 2, [3])


@pytest.mark.parametrize("seq, left", [(9, [10]), (10, []), (16, [])])
def test_advance_floor_of_a_last_per_subject_consumer_writes_the_sequences_left(tmp_path, seq, left):
    """Deliver last per subject (8, 9, 10 here): a floor passing some of them writes those
    left after its DROP; a reader of the log finds them (on leaving _consumer)."""
    with _consumer(tmp_path, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, filter_subject="s.*") as (c, clock):
        c.next_batch(1, clock())
        ref = c.copy()
        _ref_advance_floor(ref, c, seq, clock())
        _, plan = _planned(c, lambda: c.plan_advance_floor(seq, clock()))
        assert [(op, items["sseq"].tolist()) for op, _, items in plan] == [(DROP, [8]), (LAST_PER_SUBJECT, left)]
        assert c.last_per_subject == left and _plain(ref) == _plain(c)
        assert c.num_pending() == len(left)


def test_drop_counts_a_removed_pending_message_as_termed(tmp_path):
    with _consumer(tmp_path, ack_policy=AckPolicy.EXPLICIT) as (c, clock):
        c.next_batch(3, clock())
        released, plan = _planned(c, lambda: c.plan_drop(np.array([1, 3, 8], dtype=np.int64), clock()))
        assert released == [] and _dropped(plan) == [(DROP, [1, 3])]
        assert (sorted(c.pending), c.ack_floor_stream_seq, c.acked_ns) == ([2], 1, clock())


def test_start_and_active_plan_their_records(tmp_path):
    with _consumer(tmp_path, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, filter_subject="s.*") as (c, clock):
        assert (c.last_per_subject, c.next_stream_seq, c.ack_floor_stream_seq) == ([8, 9, 10], 8, 7)
        clock.advance(3)
        _, plan = _planned(c, lambda: c.plan_active(clock()))
        assert _ops(plan) == [SCALARS] and c.last_active == clock()
        assert _ops(c.plan_start(4, [4, 5], clock())) == [LAST_PER_SUBJECT]
        assert _ops(c.plan_start(4, [], clock())) == [SNAPSHOT]
        out = c.next_batch(2, clock())
        assert [q for q, _, _ in out] == [8, 9] and c.last_per_subject == [10]


def test_a_plan_made_before_the_state_changed_is_refused(tmp_path):
    with _consumer(tmp_path, ack_policy=AckPolicy.EXPLICIT) as (c, clock):
        _, stale = c.plan_batch(2, clock())
        c.next_batch(1, clock())
        size, before = Path(c.log.path).stat().st_size, c.snapshot()
        with pytest.raises(RuntimeError, match="a plan made on a state that has changed since"):
            c.commit(stale)
        assert (Path(c.log.path).stat().st_size, c.snapshot()) == (size, before)  # nothing written


def test_a_refused_record_leaves_the_memory_at_the_records_written_before_it(tmp_path, monkeypatch):
    """A plan of two records whose second the disk refuses: the first is in the log and in
    memory, the second in neither (the refusal is injected: the second append raises ENOSPC)."""
    with _consumer(tmp_path, ack_policy=AckPolicy.EXPLICIT, ack_wait=1, max_deliver=1) as (c, clock):
        c.next_batch(2, clock())
        clock.advance(2)
        _, plan = c.plan_batch(3, clock())
        assert _ops(plan) == [MAXED, DELIVER]
        real, calls = consumer_log.ConsumerLog.append, []

        def append(self, rec):
            calls.append(rec)
            if len(calls) == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
            real(self, rec)

        monkeypatch.setattr(consumer_log.ConsumerLog, "append", append)
        with pytest.raises(StoreFullError, match="appending to the consumer's log"):
            c.commit(plan)
        monkeypatch.undo()
        assert (c.pending, c.next_stream_seq) == ({}, 3)  # the expiry, not the deliveries
        assert _reopened(c) == c.snapshot()
        assert [q for q, _, _ in c.next_batch(3, clock())] == [3, 4, 5]  # and on it goes


# ---------------------------------------------------------------------- the regression of a fetch's drop() call


@pytest.mark.parametrize("policy", [AckPolicy.EXPLICIT, AckPolicy.ALL])
def test_a_fetch_finding_a_pending_message_gone_drops_it_as_termed(tmp_path, policy):
    """A redelivery whose message is gone, which the consumer was never told of: the process
    that removed it died between the removal and its consumers' drop records (Stream.remove
    removes first, then tells the consumers).  The fetch drops it as termed (an ack now)
    and delivers the rest; it used to raise TypeError (drop() called with a second argument)."""
    clock = FakeClock()
    js, s = _open(tmp_path, clock, ack_policy=policy, ack_wait=1)
    with js:
        sub = js.pull_subscribe_bind("D", stream="S")
        assert [m.metadata.sequence.stream for m in sub.fetch(3)] == [1, 2, 3]
        with s.locked():
            s.storage.remove(np.array([2], dtype=np.int64))  # below the consumers, as the dead process left it
        clock.advance(2)  # 1 and 3 are due again; 2 is gone
        got = sub.fetch(5)
        assert [(m.metadata.sequence.stream, m.metadata.num_delivered) for m in got] == [
            (1, 2),
            (3, 2),
            (4, 1),
            (5, 1),
            (6, 1),
        ]
        info = js.consumer_info("S", "D")
        with jetspark.connect(tmp_path, clock=clock) as other:
            assert other.consumer_info("S", "D") == info  # as recorded in the log
    assert info.ack_floor.last_active is not None  # the drop counted as an ack
    if policy == AckPolicy.ALL:
        # The term of 2 acknowledges everything below it too.
        assert (info.ack_floor.stream_seq, info.num_ack_pending) == (2, 4)
    else:
        assert (info.ack_floor.stream_seq, info.num_ack_pending) == (0, 5)


# ---------------------------------------------------------------------- plan + commit == replay


BATCH = st.tuples(st.just("batch"), st.integers(1, 4), st.sampled_from([0, 0, 40]))
ADVANCE = st.tuples(st.just("advance"), st.sampled_from([0.3, 1.2, 4.0]))
# Deliveries and the clock come up more often than the rest, and "due" (past every ack wait,
# then a batch) is one step: redeliveries and max_deliver need several of them in a row.
OPS = st.one_of(
    BATCH,
    BATCH,
    ADVANCE,
    st.tuples(st.just("due"), st.integers(1, 4)),
    st.tuples(st.just("due"), st.integers(1, 4)),
    st.tuples(st.just("ack"), st.integers(0, 20)),
    st.tuples(st.just("ack_many"), st.integers(1, 4)),
    st.tuples(st.just("nak"), st.integers(0, 20), st.sampled_from([None, None, 0.5, 3.0])),
    st.tuples(st.just("term"), st.integers(0, 20)),
    st.tuples(st.just("progress"), st.integers(0, 20)),
    st.tuples(st.just("floor"), st.integers(1, 16)),
    st.tuples(st.just("remove"), st.integers(1, 16), st.sampled_from([1, 1, 3])),
    st.tuples(st.just("purged"), st.integers(1, 16), st.booleans()),
    st.tuples(st.just("vanish"), st.integers(0, 20)),
    st.tuples(st.just("purge"), st.sampled_from([None, "s.a", "s.b"]), st.integers(0, 3)),
    st.tuples(st.just("publish"), st.sampled_from(["s.a", "s.b", "s.c"])),
)

# Each step may be followed by a pull, now or once every delivery is due.
PULLS = st.sampled_from([None, ("batch", 2, 0), ("due", 2)])

CONFIGS = st.fixed_dictionaries(
    {
        "ack_policy": st.sampled_from([AckPolicy.EXPLICIT, AckPolicy.ALL, AckPolicy.NONE]),
        "ack_wait": st.sampled_from([1.0, 2.5]),
        "max_deliver": st.sampled_from([-1, 2, 2, 3]),
        "max_ack_pending": st.sampled_from([-1, 3]),
        "deliver_policy": st.sampled_from([DeliverPolicy.ALL, DeliverPolicy.LAST_PER_SUBJECT]),
        "filter_subject": st.sampled_from([None, "s.a", "s.*"]),
    }
).map(
    lambda c: {**c, "filter_subject": c["filter_subject"] or "s.*"} if c["deliver_policy"] != DeliverPolicy.ALL else c
)


def _step(js, s, clock, op) -> None:
    kind = op[0]
    if kind == "publish":
        js.publish(op[1], b"x")
        return
    if kind == "advance":
        clock.advance(op[1])
        return
    if kind == "due":
        clock.advance(3.0)
        kind, op = "batch", ("batch", op[1], 0)
    if kind == "purge":
        js.purge_stream("S", subject=op[1], keep=op[2] or None)
        return
    with s.locked():
        c = s.consumers.by_name["D"]
        if kind == "remove":
            seqs = np.array([q for q in range(op[1], op[1] + op[2]) if s.storage.is_live(q)], dtype=np.int64)
            if len(seqs):
                ref = c.copy()
                _ref_drop(ref, seqs, clock(), c.config.ack_policy)
                s.remove(seqs)  # the stream's removal: the consumer drops them
                assert _plain(ref) == _plain(c), op
            return
        if kind == "vanish":
            # A pending delivery's message removed and the consumer never told (the process that
            # removed it died before its drop): a later fetch, or a wider purge, finds it gone.
            if c.pending:
                q = sorted(c.pending)[op[1] % len(c.pending)]
                if s.storage.is_live(q):
                    s.storage.remove(np.array([q], dtype=np.int64))
            return
        if kind == "purged":
            ref = c.copy()
            _ref_purged(ref, op[1], op[2], clock(), s.storage.is_live)
            _planned(c, lambda: c.plan_purged(op[1], op[2], clock()))
            assert _plain(ref) == _plain(c), op
            return
        if kind == "ack_many" and not c.is_explicit:
            kind = "ack"  # (acks are buffered for explicit consumers only)
        now = clock()
        # Queued deliveries first, then pending ones, then those given up at max_deliver: the
        # small indices Hypothesis tries most pick the entries most likely to go wrong.
        delivered = list(c.redelivery_queue) + sorted(set(c.pending) - set(c.redelivery_queue))
        delivered += sorted(set(c.delivery_counts) - set(c.pending)) or [1]
        pick = delivered[op[1] % len(delivered)] if len(op) > 1 and isinstance(op[1], int) else 0
        cseq = c.pending.get(pick, [c.delivered_consumer_seq])[0]
        calls = {
            "batch": lambda: c.plan_batch(op[1], now, op[2]),
            "ack": lambda: c.plan_ack(pick, cseq, now),
            "term": lambda: c.plan_term(pick, cseq, now),
            "ack_many": lambda: c.plan_ack_many(sorted(c.pending)[: op[1]], now),
            "nak": lambda: (None, c.plan_nak(pick, cseq, op[2], now)),
            "progress": lambda: (None, c.plan_in_progress(pick, now)),
            "floor": lambda: (None, c.plan_advance_floor(op[1], now)),
        }
        # Explicit acks are planned without a draft: they leave what ack_explicit leaves on one.
        acked = {"ack": [pick], "term": [pick], "ack_many": sorted(c.pending)[: op[1]]}.get(kind, [])
        ref = c.copy() if acked and c.is_explicit else None
        # Acks under ack all and floors, without one: they leave what the draft-based reference leaves.
        drafted = c.copy()
        if kind in ("ack", "term") and c.config.ack_policy == AckPolicy.ALL:
            expected = _ref_ack_all(drafted, pick, cseq, now)
        elif kind == "floor":
            expected = _ref_advance_floor(drafted, c, op[1], now)
        else:
            drafted = None
        released, _ = _planned(c, calls[kind])
        if drafted is not None:
            assert _plain(drafted) == _plain(c), op
            if kind != "floor":
                assert released == expected, op
        if ref is not None:
            assert [r for q in acked for r in ref.ack_explicit(q)] == sorted(released or []), op
            if released:
                ref.acked_ns = now
                assert ref.snapshot() == c.snapshot(), op


def _check_due_index(c: Consumer, now: int) -> None:
    """The deadline index (consumer_due.py) answers what a read of every pending delivery
    answers: the due ones outside the queue, the next deadline, the max_deliver expiries;
    so do the sorted keys (consumer_held.py), the count of redelivered ones and the interest
    check, one sequence at a time (looked up) and all at once (against every pending one)."""
    c.index.check(c)
    c.pending_keys.check(c.pending)
    c.count_keys.check(c.delivery_counts)
    assert c.num_redelivered() == sum(1 for n in c.delivery_counts.values() if n > 1)
    seqs = np.arange(1, c.next_stream_seq + 3, dtype=np.int64)
    needed = _ref_needs(c, seqs)
    assert c.needs(seqs).tolist() == needed
    assert [bool(c.needs(seqs[i : i + 1])[0]) for i in range(len(seqs))] == needed
    md = c.config.max_deliver
    for t in (now, now + NS, now + 3 * NS):
        due = [q for q, (_, d) in c.pending.items() if d <= t]
        assert c.index.due(c, t) == sorted(q for q in due if q not in c.redelivery_queue), t
        later = [d for _, d in c.pending.values() if d > t]
        assert c.next_due(t) == (min(later) if later and c.config.ack_policy != AckPolicy.NONE else None), t
        maxed = sorted(q for q in due if md > 0 and c.delivery_counts.get(q, 1) >= md)
        assert [items["sseq"].tolist() for _, _, items in c.plan_expiry(t)] == ([maxed] if maxed else []), t


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=CONFIGS,
    ops=st.lists(st.tuples(OPS, PULLS), min_size=6, max_size=30),
    compact=st.sampled_from([4 << 20, 700]),
    slack=st.sampled_from([1024, 0]),
    walk=st.sampled_from([5, 0]),
)
def test_plan_and_commit_agree_with_a_replay_of_the_log(config, ops, compact, slack, walk):
    """After every step the memory equals a fresh reopen of the log; with ``compact`` 700 the
    log is rewritten as a snapshot every few records, so the snapshots are replayed too.
    The deadline index is checked against the pending deliveries after every step; with
    ``slack`` 0 it (and the sorted keys) is rebuilt whenever its stale entries outnumber those that count, with
    ``walk`` 0 its due entries are always found by a walk of the heap (5: by a pass over it
    whole, at these sizes)."""
    clock = FakeClock()
    old = consumer_log.COMPACT_BYTES, consumer_due._SLACK, consumer_due._WALK, consumer_held._SLACK
    consumer_log.COMPACT_BYTES, consumer_due._SLACK, consumer_due._WALK, consumer_held._SLACK = (
        compact,
        slack,
        walk,
        slack,
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            js, s = _open(Path(tmp), clock, n=12, **config)
            with js:
                for op in [step for pair in ops for step in pair if step]:
                    _step(js, s, clock, op)
                    with s.locked():
                        c = s.consumers.by_name["D"]
                        assert _reopened(c) == c.snapshot(), op
                        assert set(c.redelivery_queue) <= set(c.pending), op
                        _check_due_index(c, clock())
    finally:
        consumer_log.COMPACT_BYTES, consumer_due._SLACK, consumer_due._WALK, consumer_held._SLACK = old


def test_a_floor_moved_far_past_the_last_message_reads_back(tmp_path):
    """A purge below a sequence far past the end moves the floor there (the next publish gets
    that sequence): a reader of the log, in this process or another, releases only the
    stream's own messages, not every sequence up to the floor."""
    clock = FakeClock()
    js, s = _open(tmp_path, clock, ack_policy=AckPolicy.EXPLICIT)
    with js:
        js.purge_stream("S", seq=2**32 - 1)
        assert js.consumer_info("S", "D").ack_floor.stream_seq == 2**32 - 2
        with jetspark.connect(tmp_path, clock=clock) as other:
            assert other.consumer_info("S", "D").ack_floor.stream_seq == 2**32 - 2
            assert other.publish("s.a", b"next").seq == 2**32 - 1
        with s.locked():
            c = s.consumers.by_name["D"]
            assert _reopened(c) == c.snapshot()
