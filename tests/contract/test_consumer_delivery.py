"""Pull consumers at work: deliver policies, fetch, acks, redelivery, limits (docs/semantics.md §5.2-§6, §4).

Every expected value below was checked against nats-server v2.15.1 (the
``oracle-*`` parametrisations of the ``js`` fixture), file and memory storage
alike; the engine must give the same answers.  Pairs written ``(c, s)`` are
(consumer_seq, stream_seq) of ``delivered`` or ``ack_floor``.

Time: on the server ``js.clock.advance`` really sleeps, so the timed tests
use ack waits of 0.2-0.5 s and advance ~0.1 s past each deadline.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from jetspark import errors as jetspark_errors
from jetspark.api import AckPolicy, DeliverPolicy, ns_to_datetime
from jetspark.errors import FetchTimeoutError
from tests.conftest import BACKENDS, with_cluster
from tests.contract import consumer_support as cs
from tests.contract.consumer_support import (
    before_acks,
    counts,
    eventually,
    fetch_nothing,
    meta,
    seqs,
    server_streams_removed,  # noqa: F401  (autouse)
)

# Every backend, and jetspark's nats:// backend on the 3-node cluster (R3 streams).  The
# cluster's own answers, where they differ from one server's, are pinned in the tests
# (``cs.before_acks``, the "cluster" rows) as the oracle on the cluster gave them; the
# oracle does not run there each time (it doubles the module's cluster time).
backend = with_cluster(BACKENDS, reference=False)

# The stream most tests start from: sequence -> subject (payload b"m<seq>").
SUBJECTS = {1: "a.1", 2: "a.2", 3: "b.1", 4: "a.1", 5: "b.2", 6: "a.2", 7: "a.1"}


def payload(seq: int) -> bytes:
    return b"m%d" % seq


def add_stream(js, spaced: bool = False, **config):
    """Stream S on a.*, b.* holding SUBJECTS; ``spaced`` puts 1 ms between the messages' timestamps."""
    cs.add_stream(js, name="S", subjects=["a.*", "b.*"], **config)
    for seq, subject in SUBJECTS.items():
        assert js.publish(subject, payload(seq)).seq == seq
        if spaced:
            js.clock.advance(0.001)


def consumer(js, name: str = "D", **config):
    js.add_consumer("S", durable_name=name, **config)
    return js.pull_subscribe_bind(stream="S", durable=name)


def info(js, name: str = "D"):
    return js.consumer_info("S", name)


# ---------------------------------------------------------------- deliver policies

LAST = DeliverPolicy.LAST
NEW = DeliverPolicy.NEW
BY_SEQ = DeliverPolicy.BY_START_SEQUENCE
LPS = DeliverPolicy.LAST_PER_SUBJECT

# params -> (delivered, ack_floor) before any fetch, num_pending, the stream
# seqs the first fetch delivers, whether a new a.1 message (seq 8) follows.
# Initially delivered = ack_floor = (0, start - 1).
DELIVER = [
    ("all", dict(), ((0, 0), (0, 0)), 7, [1, 2, 3, 4, 5, 6, 7], True),
    ("all, filters in stream order", dict(filter_subjects=["b.*", "a.2"]), ((0, 0), (0, 0)), 4, [2, 3, 5, 6], False),
    ("last", dict(deliver_policy=LAST), ((0, 6), (0, 6)), 1, [7], True),
    ("last, filter", dict(deliver_policy=LAST, filter_subject="a.2"), ((0, 5), (0, 5)), 1, [6], False),
    # with several filters: the highest of their last messages
    ("last, filters", dict(deliver_policy=LAST, filter_subjects=["a.2", "b.1"]), ((0, 5), (0, 5)), 1, [6], False),
    ("new", dict(deliver_policy=NEW), ((0, 7), (0, 7)), 0, [], True),
    ("new, filter", dict(deliver_policy=NEW, filter_subject="a.1"), ((0, 7), (0, 7)), 0, [], True),
    ("by_start_sequence", dict(deliver_policy=BY_SEQ, opt_start_seq=3), ((0, 2), (0, 2)), 5, [3, 4, 5, 6, 7], True),
    (
        "by_start_sequence, filter",
        dict(deliver_policy=BY_SEQ, opt_start_seq=3, filter_subject="a.*"),
        ((0, 2), (0, 2)),
        3,
        [4, 6, 7],
        True,
    ),
    # a start beyond the end is kept: seq 8 is below it
    ("by_start_sequence past the end", dict(deliver_policy=BY_SEQ, opt_start_seq=20), ((0, 19), (0, 19)), 0, [], False),
    # each subject's last message, in stream order, then new ones
    ("last_per_subject", dict(deliver_policy=LPS, filter_subject="a.*"), ((0, 5), (0, 5)), 2, [6, 7], True),
    ("last_per_subject >", dict(deliver_policy=LPS, filter_subject=">"), ((0, 2), (0, 2)), 4, [3, 5, 6, 7], True),
    (
        "last_per_subject, filters",
        dict(deliver_policy=LPS, filter_subjects=["a.1", "b.*"]),
        ((0, 2), (0, 2)),
        3,
        [3, 5, 7],
        True,
    ),
]


@pytest.mark.parametrize(
    "params, initial, pending, delivered, gets_new",
    [row[1:] for row in DELIVER],
    ids=[row[0] for row in DELIVER],
)
def test_deliver_policy(js, params, initial, pending, delivered, gets_new):
    add_stream(js)
    created = js.add_consumer("S", durable_name="D", **params)
    assert seqs(created) == before_acks(js, initial)
    assert counts(created) == (0, 0, pending, 0)
    sub = js.pull_subscribe_bind(stream="S", durable="D")

    if delivered:
        msgs = sub.fetch(10)
        n = len(delivered)
        assert [meta(m) for m in msgs] == [(SUBJECTS[s], s, i, 1, n - i) for i, s in enumerate(delivered, start=1)]
        assert [m.data for m in msgs] == [payload(s) for s in delivered]
        assert seqs(info(js)) == ((n, delivered[-1]), before_acks(js, initial)[1])
        assert counts(info(js)) == (n, 0, 0, 0)
    else:
        fetch_nothing(sub)
        assert seqs(info(js)) == before_acks(js, initial)

    assert js.publish("a.1", b"new").seq == 8
    eventually(js, lambda: info(js).num_pending, 1 if gets_new else 0)
    if gets_new:
        assert [meta(m) for m in sub.fetch(10)] == [("a.1", 8, len(delivered) + 1, 1, 0)]
    else:
        fetch_nothing(sub)


# params -> delivered after a fetch that found nothing, then after one more
# (unmatched) publish and fetch, by storage
NOTHING_MATCHES = [
    (
        "all",
        dict(filter_subject="c.1"),
        {"file": [(0, 0), (0, 0)], "memory": [(0, 7), (0, 8)], "cluster": [(0, 7), (0, 7)]},
    ),
    (
        "last",
        dict(deliver_policy=LAST, filter_subject="c.1"),
        {"file": [(0, 0), (0, 0)], "memory": [(0, 7), (0, 8)], "cluster": [(0, 7), (0, 7)]},
    ),
    (
        "all, filters",
        dict(filter_subjects=["c.1", "c.2"]),
        {"file": [(0, 0), (0, 0)], "memory": [(0, 7), (0, 8)], "cluster": [(0, 7), (0, 7)]},
    ),
    (
        "by_start_sequence",
        dict(deliver_policy=BY_SEQ, opt_start_seq=3, filter_subject="c.1"),
        {"file": [(0, 2), (0, 2)], "memory": [(0, 2), (0, 2)], "cluster": [(0, 7), (0, 7)]},
    ),
]


@pytest.mark.parametrize("params, after", [row[1:] for row in NOTHING_MATCHES], ids=[row[0] for row in NOTHING_MATCHES])
def test_filter_matching_nothing(js, params, after):
    """A filter that matches nothing stored.

    A storage difference of nats-server: after a pull that found nothing, the
    memory store reports delivered.stream_seq = last_seq (it skipped to the
    end) while the file store leaves it at start - 1 (unless the start was
    given as a sequence); ack_floor stays.  A replicated consumer (the cluster)
    skips to the last_seq it saw at the pull, whatever its start.
    """
    add_stream(js)
    created = js.add_consumer("S", durable_name="D", **params)
    start = params.get("opt_start_seq", 1)
    floor = before_acks(js, ((0, start - 1), (0, start - 1)))[1]
    assert seqs(created) == ((0, start - 1), floor)
    assert counts(created) == (0, 0, 0, 0)
    sub = js.pull_subscribe_bind(stream="S", durable="D")
    fetch_nothing(sub)
    storage = "cluster" if js.replicas > 1 else js.storage
    assert seqs(info(js)) == (after[storage][0], floor)
    js.publish("a.1", b"x")
    fetch_nothing(sub)
    assert seqs(info(js)) == (after[storage][1], floor)
    assert counts(info(js)) == (0, 0, 0, 0)


# opt_start_time relative to the stored times -> (delivered, ack_floor), first fetch
BY_TIME = [
    ("time of seq 4", 4, dt.timedelta(0), ((0, 3), (0, 3)), [4, 5, 6, 7]),
    ("just after seq 4", 4, dt.timedelta(microseconds=1), ((0, 4), (0, 4)), [5, 6, 7]),
    ("before the first", 1, dt.timedelta(seconds=-10), ((0, 0), (0, 0)), [1, 2, 3, 4, 5, 6, 7]),
    # resolved to a sequence when created: seq 8 follows although it is older than the start time
    ("after the last", 7, dt.timedelta(seconds=10), ((0, 7), (0, 7)), []),
]


@pytest.mark.parametrize(
    "seq, offset, initial, delivered", [row[1:] for row in BY_TIME], ids=[row[0] for row in BY_TIME]
)
def test_deliver_by_start_time(js, seq, offset, initial, delivered):
    add_stream(js, spaced=True)
    start = js.get_msg("S", seq).time + offset
    created = js.add_consumer("S", durable_name="D", deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=start)
    assert seqs(created) == before_acks(js, initial)
    assert created.num_pending == len(delivered)
    sub = js.pull_subscribe_bind(stream="S", durable="D")
    if delivered:
        assert [m.metadata.sequence.stream for m in sub.fetch(10)] == delivered
    else:
        fetch_nothing(sub)
    js.publish("a.1", b"new")
    assert [m.metadata.sequence.stream for m in sub.fetch(10)] == [8]


# stream state -> params -> (delivered, ack_floor), num_pending
START_EDGES = [
    # purged below 4: a start below first_seq is raised to it
    ("purged, all", "purged", dict(), ((0, 3), (0, 3)), 4),
    ("purged, by_start_sequence 2", "purged", dict(deliver_policy=BY_SEQ, opt_start_seq=2), ((0, 3), (0, 3)), 4),
    ("purged, by_start_sequence 5", "purged", dict(deliver_policy=BY_SEQ, opt_start_seq=5), ((0, 4), (0, 4)), 3),
    ("purged, last", "purged", dict(deliver_policy=LAST), ((0, 6), (0, 6)), 1),
    # a stream never written
    ("empty, all", "empty", dict(), ((0, 0), (0, 0)), 0),
    ("empty, last", "empty", dict(deliver_policy=LAST), ((0, 0), (0, 0)), 0),
    ("empty, new", "empty", dict(deliver_policy=NEW), ((0, 0), (0, 0)), 0),
    ("empty, last_per_subject", "empty", dict(deliver_policy=LPS, filter_subject=">"), ((0, 0), (0, 0)), 0),
    # a stream created with first_seq=10
    ("first_seq 10, all", "first_seq", dict(), ((0, 9), (0, 9)), 0),
    ("first_seq 10, last", "first_seq", dict(deliver_policy=LAST), ((0, 9), (0, 9)), 0),
    ("first_seq 10, new", "first_seq", dict(deliver_policy=NEW), ((0, 9), (0, 9)), 0),
]


@pytest.mark.parametrize(
    "kind, params, initial, pending", [row[1:] for row in START_EDGES], ids=[row[0] for row in START_EDGES]
)
def test_deliver_policy_start_edges(js, kind, params, initial, pending):
    if kind == "purged":
        add_stream(js)
        js.purge_stream("S", seq=4)
    else:
        cs.add_stream(js, name="S", subjects=["a.*", "b.*"], **({"first_seq": 10} if kind == "first_seq" else {}))
    created = js.add_consumer("S", durable_name="D", **params)
    assert seqs(created) == before_acks(js, initial)
    assert created.num_pending == pending
    # The pending messages (no gaps here), then the next one published.
    next_seq = js.publish("a.1", b"next").seq
    assert next_seq == {"purged": 8, "empty": 1, "first_seq": 10}[kind]
    sub = js.pull_subscribe_bind(stream="S", durable="D")
    assert [m.metadata.sequence.stream for m in sub.fetch(10)] == list(range(next_seq - pending, next_seq + 1))


# ---------------------------------------------------------------- fetch and metadata


def test_fetch_batches_and_metadata(js):
    add_stream(js)
    sub = consumer(js)

    msgs = sub.fetch()  # batch 1
    msgs += sub.fetch(2)
    msgs += sub.fetch(10)  # fewer available than asked: what there is
    assert [meta(m) for m in msgs] == [(SUBJECTS[s], s, s, 1, 7 - s) for s in range(1, 8)]
    for seq, m in enumerate(msgs, start=1):
        assert m.data == payload(seq)
        assert m.headers is None
        assert (m.metadata.stream, m.metadata.consumer) == ("S", "D")
        assert m.metadata.timestamp == js.get_msg("S", seq).time  # the stored time

    with pytest.raises(FetchTimeoutError) as e:
        sub.fetch(3, timeout=cs.NOTHING_WAIT)
    assert isinstance(e.value, TimeoutError)

    i = sub.consumer_info()
    assert (i.name, i.stream_name) == ("D", "S")
    assert seqs(i) == ((7, 7), (0, 0))
    assert counts(i) == (7, 0, 0, 0)

    # Headers come through as a dict.
    js.publish("a.9", b"h", headers={"K": "v", "Other": "x y"})
    (m,) = sub.fetch(5)
    assert (m.subject, m.data, m.headers) == ("a.9", b"h", {"K": "v", "Other": "x y"})
    assert meta(m) == ("a.9", 8, 8, 1, 0)


# ---------------------------------------------------------------- acks and the ack floor

# ack the message with this stream seq -> ack_floor, num_ack_pending (all 7 delivered)
ACK_OUT_OF_ORDER = [
    (3, (0, 0), 6),  # out of order: the floor stays
    (2, (0, 0), 5),
    (1, (3, 3), 4),  # the lowest outstanding: the floor jumps to just below the next pending (4)
    (5, (3, 3), 3),
    (4, (5, 5), 2),
    (7, (5, 5), 1),
    (7, (5, 5), 1),  # acked again: ignored
    (6, (7, 7), 0),  # nothing pending: floor = delivered
]


def test_explicit_ack_floor_out_of_order(js):
    add_stream(js)
    sub = consumer(js)
    msgs = {m.metadata.sequence.stream: m for m in sub.fetch(7)}
    for seq, floor, ack_pending in ACK_OUT_OF_ORDER:
        msgs[seq].ack()
        i = info(js)
        assert seqs(i) == ((7, 7), floor), seq
        assert counts(i) == (ack_pending, 0, 0, 0), seq
    fetch_nothing(sub)


def test_ack_floor_jumps_over_unmatched_and_deleted_messages(js):
    add_stream(js)
    # Filtered on a.*: 1, 2, 4, 6, 7 are delivered as consumer seqs 1-5.
    sub = consumer(js, "F", filter_subject="a.*")
    msgs = {m.metadata.sequence.stream: m for m in sub.fetch(10)}
    assert [(s, m.metadata.sequence.consumer) for s, m in msgs.items()] == [(1, 1), (2, 2), (4, 3), (6, 4), (7, 5)]
    # ack stream seq -> ack floor; it lands just below the next pending entry,
    # on a stream seq this consumer never delivered (3, 5).
    for seq, floor in [(1, (1, 1)), (4, (1, 1)), (2, (3, 5)), (6, (4, 6)), (7, (5, 7))]:
        msgs[seq].ack()
        assert seqs(info(js, "F")) == ((5, 7), floor), seq

    # An unfiltered consumer over a deleted message: 1, 2, 3, 5, 6, 7 as consumer seqs 1-6.
    sub = consumer(js, "D")
    msgs = sub.fetch(3)
    js.delete_msg("S", 4)
    msgs += sub.fetch(10)
    assert [(m.metadata.sequence.stream, m.metadata.sequence.consumer) for m in msgs] == [
        (1, 1),
        (2, 2),
        (3, 3),
        (5, 4),
        (6, 5),
        (7, 6),
    ]
    for m, floor in zip(msgs[:3], [(1, 1), (2, 2), (3, 4)]):  # the floor may land on the deleted 4
        m.ack()
        assert seqs(info(js, "D")) == ((6, 7), floor)


def test_ack_none(js):
    add_stream(js)
    sub = consumer(js, ack_policy=AckPolicy.NONE)
    msgs = sub.fetch(2)
    assert [meta(m) for m in msgs] == [("a.1", 1, 1, 1, 6), ("a.2", 2, 2, 1, 5)]
    # Nothing is tracked: the floor follows delivery, which a replicated consumer's info
    # shows a moment after the pull (it applies deliveries under ack policy none through its
    # raft group: seen three times on the cluster under load, after either fetch).
    eventually(js, lambda: seqs(info(js)), ((2, 2), (2, 2)))
    assert counts(info(js)) == (0, 0, 5, 0)
    # Acks of any kind change nothing; a nak redelivers nothing.
    msgs[0].ack()
    msgs[1].nak()
    msgs[1].term()
    assert seqs(info(js)) == ((2, 2), (2, 2))
    assert [meta(m) for m in sub.fetch(10)] == [(SUBJECTS[s], s, s, 1, 7 - s) for s in range(3, 8)]
    eventually(js, lambda: seqs(info(js)), ((7, 7), (7, 7)))
    assert counts(info(js)) == (0, 0, 0, 0)
    fetch_nothing(sub)


def test_ack_all(js):
    add_stream(js)
    sub = consumer(js, ack_policy=AckPolicy.ALL)
    msgs = {m.metadata.sequence.stream: m for m in sub.fetch(7)}

    msgs[3].ack()  # acks 1, 2, 3
    assert seqs(info(js)) == ((7, 7), (3, 3))
    assert counts(info(js)) == (4, 0, 0, 0)
    msgs[1].ack()  # at or below the floor: nothing
    msgs[2].nak()  # likewise: no redelivery
    assert seqs(info(js)) == ((7, 7), (3, 3))
    assert counts(info(js)) == (4, 0, 0, 0)

    msgs[6].nak()  # above the floor: redelivered
    msgs[5].term()  # term acks all up to it too
    assert seqs(info(js)) == ((7, 7), (5, 5))
    assert counts(info(js)) == (2, 0, 0, 0)
    (again,) = sub.fetch(10)
    assert meta(again) == ("a.2", 6, 8, 2, 0)
    assert counts(info(js)) == (2, 1, 0, 0)

    msgs[7].ack()  # acks 6 as well, redelivered or not; the floor is the acked delivery
    assert seqs(info(js)) == ((8, 7), (7, 7))
    assert counts(info(js)) == (0, 0, 0, 0)
    fetch_nothing(sub)


def test_nak_redelivers_before_new_messages(js):
    add_stream(js)
    sub = consumer(js)
    m1, m2 = sub.fetch(2)
    m2.nak()
    m1.nak()
    # Redeliveries first, in nak order, with new consumer seqs and num_delivered 2;
    # num_pending counts only the new messages.
    msgs = sub.fetch(4)
    assert [meta(m) for m in msgs] == [
        ("a.2", 2, 3, 2, 5),
        ("a.1", 1, 4, 2, 5),
        ("b.1", 3, 5, 1, 4),
        ("a.1", 4, 6, 1, 3),
    ]
    # delivered.stream_seq is the highest delivered, never moving back.
    i = info(js)
    assert seqs(i) == ((6, 4), (0, 0))
    assert counts(i) == (4, 2, 3, 0)

    # Nak again: a third delivery.
    msgs[1].nak()
    assert meta(sub.fetch(1)[0]) == ("a.1", 1, 7, 3, 3)
    assert counts(info(js)) == (4, 2, 3, 0)

    # Acks of a redelivered message count for it, whichever delivery they answer.
    m1.ack()  # the first delivery of 1
    assert seqs(info(js)) == ((7, 4), (1, 1))  # by the acked delivery's seqs; 2 is still pending
    assert counts(info(js)) == (3, 1, 3, 0)
    msgs[0].ack()  # 2, delivered as consumer seq 3: the floor goes below 3, pending as consumer seq 5
    assert seqs(info(js)) == ((7, 4), (4, 2))
    assert counts(info(js)) == (2, 0, 3, 0)


def test_term_stops_redelivery(js):
    add_stream(js)
    sub = consumer(js)
    m1, m2 = sub.fetch(2)
    m1.term()
    assert seqs(info(js)) == ((2, 2), (1, 1))
    assert counts(info(js)) == (1, 0, 5, 0)
    m1.nak()  # settled: ignored
    m2.nak()
    assert [meta(m) for m in sub.fetch(2)] == [("a.2", 2, 3, 2, 5), ("b.1", 3, 4, 1, 4)]
    assert counts(info(js)) == (2, 1, 4, 0)


def test_acks_of_settled_messages_are_ignored(js):
    add_stream(js)
    sub = consumer(js)
    m1, m2, m3 = sub.fetch(3)
    m1.ack()
    # Every kind of ack again, and a nak that would redeliver were it pending.
    m1.nak()
    m1.term()
    m1.in_progress()
    m1.ack()
    m2.term()
    m2.nak()
    m2.ack()
    assert seqs(info(js)) == ((3, 3), (2, 2))
    assert counts(info(js)) == (1, 0, 4, 0)
    # Nothing was redelivered: the next fetch is new messages only.
    assert [meta(m) for m in sub.fetch(2)] == [("a.1", 4, 4, 1, 3), ("b.2", 5, 5, 1, 2)]
    # m3 is still pending and can be acked.
    m3.ack()
    assert seqs(info(js)) == ((5, 5), (3, 3))


def test_acks_of_unknown_messages_are_ignored(js):
    add_stream(js)
    old = consumer(js).fetch(3)
    # A new consumer of the same name: the old deliveries are unknown to it.
    js.delete_consumer("S", "D")
    sub = consumer(js)
    old[2].ack()  # stream seq 3, not delivered by this consumer yet: ignored
    assert seqs(info(js)) == ((0, 0), (0, 0))
    assert counts(info(js)) == (0, 0, 7, 0)

    # Acks are matched by stream seq: once 1 and 2 are delivered again, the
    # old ack and nak of 1 and 2 apply to the new deliveries.
    sub.fetch(2)
    old[0].ack()
    old[1].nak()
    assert seqs(info(js)) == ((2, 2), (1, 1))
    assert counts(info(js)) == (1, 0, 5, 0)
    msgs = sub.fetch(10)
    assert [meta(m) for m in msgs] == [
        ("a.2", 2, 3, 2, 5),
        ("b.1", 3, 4, 1, 4),
        ("a.1", 4, 5, 1, 3),
        ("b.2", 5, 6, 1, 2),
        ("a.2", 6, 7, 1, 1),
        ("a.1", 7, 8, 1, 0),
    ]

    # Acks of messages the stream no longer has change nothing.
    js.purge_stream("S")
    assert seqs(info(js)) == ((8, 7), (8, 7))
    for m in msgs:
        m.ack()
    assert seqs(info(js)) == ((8, 7), (8, 7))
    assert counts(info(js)) == (0, 0, 0, 0)


# ---------------------------------------------------------------- time: ack_wait, in_progress, nak delay, backoff


def test_ack_wait_redelivery_and_in_progress(js):
    add_stream(js)
    sub = consumer(js, ack_wait=0.5)
    m1, m2 = sub.fetch(2)  # t = 0: both due at 0.5

    js.clock.advance(0.3)
    m2.in_progress()  # restarts m2's ack wait: due at 0.8; its delivery count stays 1
    js.clock.advance(0.3)  # t = 0.6: m1 is past its ack wait, m2 is not

    # The redelivery comes first, with a new consumer seq and num_delivered + 1.
    msgs = sub.fetch(10)
    assert [meta(m) for m in msgs] == [
        ("a.1", 1, 3, 2, 5),
        ("b.1", 3, 4, 1, 4),
        ("a.1", 4, 5, 1, 3),
        ("b.2", 5, 6, 1, 2),
        ("a.2", 6, 7, 1, 1),
        ("a.1", 7, 8, 1, 0),
    ]
    i = info(js)
    assert seqs(i) == ((8, 7), (0, 0))
    assert counts(i) == (7, 1, 0, 0)

    js.clock.advance(0.3)  # t = 0.9: m2 (due 0.8) is; the rest (due 1.1) are not
    (again,) = sub.fetch(10)
    assert meta(again) == ("a.2", 2, 9, 2, 0)
    assert counts(info(js)) == (7, 2, 0, 0)

    again.ack()
    msgs[0].ack()  # 1, as redelivered: the floor goes to just below 3 (consumer seq 4)
    assert seqs(info(js)) == ((9, 7), (3, 2))
    assert counts(info(js)) == (5, 0, 0, 0)

    js.clock.advance(0.3)  # t = 1.2: 3-7 are due (1.1), redelivered in stream order
    assert [meta(m) for m in sub.fetch(10)] == [
        ("b.1", 3, 10, 2, 0),
        ("a.1", 4, 11, 2, 0),
        ("b.2", 5, 12, 2, 0),
        ("a.2", 6, 13, 2, 0),
        ("a.1", 7, 14, 2, 0),
    ]
    i = info(js)
    assert seqs(i) == ((14, 7), (3, 2))  # delivered.stream_seq never moves back
    assert counts(i) == (5, 5, 0, 0)


def test_nak_with_delay(js):
    add_stream(js)
    sub = consumer(js, ack_wait=5.0)
    (m1,) = sub.fetch(1)
    fetched = info(js).delivered.last_active
    js.clock.advance(0.01)
    span = Span(js)
    m1.nak(delay=0.3)
    # The time of the last delivery moves with a delayed nak, as nats-server records it.
    delayed = info(js).delivered.last_active
    assert span.holds(delayed) and delayed > fetched
    # Not yet: the next fetch skips it.
    assert [meta(m) for m in sub.fetch(1)] == [("a.2", 2, 2, 1, 5)]
    assert counts(info(js)) == (2, 0, 5, 0)
    js.clock.advance(0.4)
    assert [meta(m) for m in sub.fetch(1)] == [("a.1", 1, 3, 2, 5)]
    assert seqs(info(js)) == ((3, 2), (0, 0))
    assert counts(info(js)) == (2, 1, 5, 0)


def test_backoff_and_max_deliver(js):
    cs.not_on_the_cluster(
        js,
        "a replicated consumer's delivered stream seq moves to the last seq at a pull that finds nothing, or not, "
        "run to run",
    )
    add_stream(js)
    # Deliveries of an unacked message at t = 0, +0.2 (backoff[0]), +0.5 (backoff[1]);
    # max_deliver 3 ends it.  ack_wait is forced to backoff[0].
    sub = consumer(js, filter_subject="b.1", backoff=[0.2, 0.5], max_deliver=3)
    assert info(js).config.ack_wait == 0.2
    (first,) = sub.fetch(1)
    assert meta(first) == ("b.1", 3, 1, 1, 0)

    js.clock.advance(0.3)  # t = 0.3: past 0.2
    assert [meta(m) for m in sub.fetch(1)] == [("b.1", 3, 2, 2, 0)]
    js.clock.advance(0.3)  # t = 0.6: the next is due at 0.3 + 0.5
    fetch_nothing(sub)
    js.clock.advance(0.3)  # t = 0.95: due
    (last,) = sub.fetch(1)
    assert meta(last) == ("b.1", 3, 3, 3, 0)
    i = info(js)
    assert seqs(i) == ((3, 3), (0, 0))
    assert counts(i) == (1, 1, 0, 0)

    # Past its last ack wait (0.95 + 0.5) the message leaves pending for good;
    # it stays counted as redelivered and the ack floor does not move.
    js.clock.advance(0.6)  # t = 1.55
    fetch_nothing(sub)
    i = info(js)
    assert seqs(i) == ((3, 3), (0, 0))
    assert counts(i) == (0, 1, 0, 0)

    # The floor catches up at the next ack; an ack of the last delivery still
    # counts: no longer redelivered.
    js.publish("b.1", b"x")
    eventually(js, lambda: info(js).num_pending, 1)
    (new,) = sub.fetch(1)
    assert meta(new) == ("b.1", 8, 4, 1, 0)
    new.ack()
    assert seqs(info(js)) == ((4, 8), (4, 8))
    assert counts(info(js)) == (0, 1, 0, 0)
    last.ack()
    assert seqs(info(js)) == ((4, 8), (4, 8))
    assert counts(info(js)) == (0, 0, 0, 0)


def test_max_deliver_one(js):
    add_stream(js)
    sub = consumer(js, filter_subject="b.*", ack_wait=0.2, max_deliver=1)
    b1, b2 = sub.fetch(2)
    b2.ack()
    js.clock.advance(0.3)
    # 3 is past its only delivery: never redelivered, no longer pending.
    fetch_nothing(sub)
    i = info(js)
    assert seqs(i) == (((2, 7) if js.replicas > 1 else (2, 5)), (0, 0))
    assert counts(i) == (0, 0, 0, 0)
    # The reported floor catches up at the next ack.
    js.publish("b.3", b"x")
    eventually(js, lambda: info(js).num_pending, 1)
    (b3,) = sub.fetch(1)
    assert meta(b3) == ("b.3", 8, 3, 1, 0)
    b3.ack()
    assert seqs(info(js)) == ((3, 8), (3, 8))
    assert counts(info(js)) == (0, 0, 0, 0)


# ---------------------------------------------------------------- the times of the last delivery and the last ack
# delivered.last_active and ack_floor.last_active (what `jetspark consumer ls` shows as
# "Last Delivery"): on the engine exactly its clock at the call, on a server a time
# within the call.


class Span:
    """The clock before and after some calls, to place the time a backend reports in."""

    def __init__(self, js) -> None:
        self.js = js
        self.start = self._now()

    def _now(self) -> int:
        return self.js.clock() if not self.js.is_server else time.time_ns()

    def holds(self, when) -> bool:
        """Is ``when`` (a datetime) within the span?  Times are reported in microseconds."""
        end = self._now()
        return when is not None and ns_to_datetime(self.start) <= when <= ns_to_datetime(end + 999)


def times(js, name: str = "D"):
    """(delivered.last_active, ack_floor.last_active)."""
    i = info(js, name)
    return (i.delivered.last_active, i.ack_floor.last_active)


def test_times_of_the_last_delivery_and_ack(js):
    add_stream(js)
    sub = consumer(js, ack_wait=30.0)
    assert times(js) == (None, None)  # nothing delivered or acked yet

    span = Span(js)
    msgs = sub.fetch(3)
    delivered, acked = times(js)
    assert span.holds(delivered) and acked is None

    js.clock.advance(0.01)
    span = Span(js)
    msgs[1].ack()  # out of order: the floor stays, the time of the last ack moves
    assert seqs(info(js)) == ((3, 3), (0, 0))
    assert times(js)[0] == delivered and span.holds(acked := times(js)[1])

    js.clock.advance(0.01)
    span = Span(js)
    msgs[0].nak()  # a plain nak is no delivery...
    assert times(js) == (delivered, acked)
    msgs[2].in_progress()  # ...in_progress counts as one
    delivered = times(js)[0]
    assert span.holds(delivered) and times(js)[1] == acked

    js.clock.advance(0.01)
    span = Span(js)
    (again,) = sub.fetch(1)  # the nak'd message again
    assert meta(again)[1:4] == (1, 4, 2)
    assert span.holds(delivered := times(js)[0])

    js.clock.advance(0.01)
    span = Span(js)
    again.term()  # term is an ack too; the floor moves over 1 and 2
    assert seqs(info(js)) == ((4, 3), (2, 2))
    assert times(js)[0] == delivered and span.holds(times(js)[1])


def test_times_with_ack_none_and_ack_all(js):
    add_stream(js)
    none = consumer(js, "N", ack_policy=AckPolicy.NONE)
    span = Span(js)
    none.fetch(2)  # the floor follows delivery, yet nothing was acked
    eventually(js, lambda: seqs(info(js, "N")), ((2, 2), (2, 2)))  # (test_ack_none: a moment late on the cluster)
    delivered, acked = times(js, "N")
    assert span.holds(delivered) and acked is None

    every = consumer(js, "A", ack_policy=AckPolicy.ALL)
    msgs = every.fetch(3)
    span = Span(js)
    msgs[1].ack()
    acked = times(js, "A")[1]
    assert span.holds(acked)
    js.clock.advance(0.01)
    msgs[0].ack()  # below the floor: ignored, the time stays
    assert times(js, "A")[1] == acked


# ---------------------------------------------------------------- max_ack_pending


def test_max_ack_pending(js):
    add_stream(js)
    sub = consumer(js, max_ack_pending=3)
    # A batch of 10 stops at the limit.
    msgs = sub.fetch(10, timeout=cs.NOTHING_WAIT)
    assert [meta(m) for m in msgs] == [("a.1", 1, 1, 1, 6), ("a.2", 2, 2, 1, 5), ("b.1", 3, 3, 1, 4)]
    assert counts(info(js)) == (3, 0, 4, 0)
    fetch_nothing(sub)

    # One ack admits one more.
    msgs[1].ack()
    assert [meta(m) for m in sub.fetch(10, timeout=cs.NOTHING_WAIT)] == [("a.1", 4, 4, 1, 3)]
    fetch_nothing(sub)

    # Redeliveries still flow at the limit.
    msgs[0].nak()
    assert [meta(m) for m in sub.fetch(10, timeout=cs.NOTHING_WAIT)] == [("a.1", 1, 5, 2, 3)]
    i = info(js)
    assert seqs(i) == ((5, 4), (0, 0))
    assert counts(i) == (3, 1, 3, 0)

    # Raising the limit takes effect at once.
    js.update_consumer("S", durable_name="D", max_ack_pending=5)
    assert [meta(m) for m in sub.fetch(10, timeout=cs.NOTHING_WAIT)] == [("b.2", 5, 6, 1, 2), ("a.2", 6, 7, 1, 1)]
    assert counts(info(js)) == (5, 1, 1, 0)


# ---------------------------------------------------------------- filters and headers


def test_filter_subjects_and_num_pending(js):
    add_stream(js)
    sub = consumer(js, filter_subjects=["b.*", "a.2"])
    assert counts(info(js)) == (0, 0, 4, 0)
    # Stream order across the filters.
    assert [meta(m) for m in sub.fetch(3)] == [("a.2", 2, 1, 1, 3), ("b.1", 3, 2, 1, 2), ("b.2", 5, 3, 1, 1)]
    assert counts(info(js)) == (3, 0, 1, 0)
    js.publish("a.1", b"x")  # 8: not ours
    js.publish("b.7", b"x")  # 9
    js.publish("a.2", b"x")  # 10
    eventually(js, lambda: counts(info(js)), (3, 0, 3, 0))
    assert [meta(m) for m in sub.fetch(10)] == [("a.2", 6, 4, 1, 2), ("b.7", 9, 5, 1, 1), ("a.2", 10, 6, 1, 0)]
    assert seqs(info(js)) == ((6, 10), (0, 0))

    # A single filter and a wildcard one.
    assert counts(js.add_consumer("S", durable_name="A1", filter_subject="a.1")) == (0, 0, 4, 0)
    assert counts(js.add_consumer("S", durable_name="ST", filter_subject="*.1")) == (0, 0, 5, 0)


def test_headers_only(js):
    cs.add_stream(js, name="S", subjects=["a.*", "b.*"])
    js.publish("a.x", b"hello world")
    js.publish("a.x", b"", headers={"K": "v"})
    js.publish("a.x", b"12345", headers={"K": "v"})
    sub = consumer(js, headers_only=True)
    # The payload is dropped and its size given in Nats-Msg-Size.
    assert [(m.subject, m.data, m.headers) for m in sub.fetch(10)] == [
        ("a.x", b"", {"Nats-Msg-Size": "11"}),
        ("a.x", b"", {"K": "v", "Nats-Msg-Size": "0"}),
        ("a.x", b"", {"K": "v", "Nats-Msg-Size": "5"}),
    ]
    # A consumer without it gets the message as stored.
    full = consumer(js, "F")
    assert [(m.data, m.headers) for m in full.fetch(10)] == [
        (b"hello world", None),
        (b"", {"K": "v"}),
        (b"12345", {"K": "v"}),
    ]


# ---------------------------------------------------------------- the stream removing pending messages (§4, §5.4)

# Before each purge: D (all) has delivered 1-4 and acked 2; F (filter a.1) has
# delivered 1; G (filter b.*) has delivered 3.  purge -> per consumer
# (delivered, ack_floor, num_ack_pending, num_pending), then what D gets next.
#
# nats-server (consumer.purge): a consumer whose filter is covered by the purge
# moves its next seq up to S = the new first seq (for a subject purge: the first
# remaining message matching the purge subject, else last + 1) and its ack
# floor's stream seq to S - 1, dropping pending entries at or below it and
# raising the floor's consumer seq to the highest dropped delivery.  A consumer
# wider than a subject purge takes S = the stream's new first seq, and also
# drops pending entries whose message is gone.  Purged messages are never
# redelivered; a consumer disjoint from the purge subject is untouched.
PURGES = [
    ("all", dict(), {"D": ((4, 7), (4, 7), 0, 0), "F": ((1, 7), (1, 7), 0, 0), "G": ((1, 7), (1, 7), 0, 0)}, []),
    (
        "seq 3",
        dict(seq=3),
        {"D": ((4, 4), (1, 2), 2, 3), "F": ((1, 2), (1, 2), 0, 2), "G": ((1, 3), (0, 2), 1, 1)},
        [5, 6, 7],
    ),
    (
        "seq 6",
        dict(seq=6),
        {"D": ((4, 5), (4, 5), 0, 2), "F": ((1, 5), (1, 5), 0, 1), "G": ((1, 5), (1, 5), 0, 0)},
        [6, 7],
    ),
    (
        "keep 2",
        dict(keep=2),
        {"D": ((4, 5), (4, 5), 0, 2), "F": ((1, 5), (1, 5), 0, 1), "G": ((1, 5), (1, 5), 0, 0)},
        [6, 7],
    ),
    (
        "subject a.1",
        dict(subject="a.1"),
        {"D": ((4, 4), (2, 2), 1, 2), "F": ((1, 7), (1, 7), 0, 0), "G": ((1, 3), (0, 0), 1, 1)},
        [5, 6],
    ),
    (
        "subject a.*",
        dict(subject="a.*"),
        {"D": ((4, 4), (4, 2), 1, 1), "F": ((1, 7), (1, 7), 0, 0), "G": ((1, 3), (0, 0), 1, 1)},
        [5],
    ),
    (
        "subject b.*",
        dict(subject="b.*"),
        {"D": ((4, 4), (3, 0), 2, 2), "F": ((1, 1), (0, 0), 1, 2), "G": ((1, 7), (1, 7), 0, 0)},
        [6, 7],
    ),
    (
        "subject a.1 below 4",
        dict(subject="a.1", seq=4),
        {"D": ((4, 4), (2, 2), 2, 3), "F": ((1, 3), (1, 3), 0, 2), "G": ((1, 3), (0, 0), 1, 1)},
        [5, 6, 7],
    ),
]


@pytest.mark.parametrize("purge, expected, next_for_d", [row[1:] for row in PURGES], ids=[row[0] for row in PURGES])
def test_purge_moves_consumers(js, purge, expected, next_for_d):
    cs.not_on_the_cluster(
        js, "a replicated consumer's floor after a subject purge is (0, 0), (1, 1) or (2, 2), run to run"
    )
    add_stream(js)
    d = consumer(js, "D")
    f = consumer(js, "F", filter_subject="a.1")
    g = consumer(js, "G", filter_subject="b.*")
    d.fetch(4)[1].ack()
    f.fetch(1)
    g.fetch(1)

    js.purge_stream("S", **purge)

    for name, (delivered, floor, ack_pending, pending) in expected.items():
        i = info(js, name)
        assert seqs(i) == (delivered, floor), name
        assert (i.num_ack_pending, i.num_pending) == (ack_pending, pending), name
        # A pending delivery the purge settles counts as acked (F and G had one each; D acked before).
        assert (i.ack_floor.last_active is not None) == (name == "D" or ack_pending == 0), name
    if next_for_d:
        assert [m.metadata.sequence.stream for m in d.fetch(10)] == next_for_d
    else:
        fetch_nothing(d)


def test_deleted_and_evicted_pending_messages_leave_pending(js):
    add_stream(js, max_msgs=7)
    sub = consumer(js)
    sub.fetch(3)  # 1, 2, 3 pending
    read = lambda: (seqs(info(js)), counts(info(js)))  # noqa: E731
    assert info(js).ack_floor.last_active is None

    # A deleted pending message leaves pending as if termed (an ack, with its time).
    js.delete_msg("S", 2)
    eventually(js, read, (((3, 3), (0, 0)), (2, 0, 4, 0)))
    eventually(js, lambda: info(js).ack_floor.last_active is not None, True)
    js.delete_msg("S", 1)
    eventually(js, read, (((3, 3), (2, 2)), (1, 0, 4, 0)))
    # A deleted undelivered message just leaves num_pending.
    js.delete_msg("S", 5)
    eventually(js, read, (((3, 3), (2, 2)), (1, 0, 3, 0)))

    # max_msgs=7 evicts the oldest (3, still pending, then 4) as 8-12 arrive;
    # with nothing pending the floor is the delivered pair.
    for _ in range(5):
        js.publish("a.1", b"x")
    eventually(js, read, (((3, 3), (3, 3)), (0, 0, 7, 0)))
    assert js.stream_info("S").state.first_seq == 6
    assert [m.metadata.sequence.stream for m in sub.fetch(10)] == [6, 7, 8, 9, 10, 11, 12]


def test_removed_pending_messages_under_ack_all_ack_everything_below(js):
    # The term that a removed pending message counts as is an ack like any other: under ack
    # policy all it acknowledges every delivery below it too, and the floor moves to it.
    add_stream(js, max_msgs=7)
    sub = consumer(js, ack_policy=AckPolicy.ALL)
    assert [m.metadata.sequence.stream for m in sub.fetch(4)] == [1, 2, 3, 4]
    read = lambda: (seqs(info(js)), counts(info(js)))  # noqa: E731
    for _ in range(2):  # 8 and 9 evict 1 and 2
        js.publish("a.1", b"x")
    eventually(js, read, (((4, 4), (2, 2)), (2, 0, 5, 0)))
    js.delete_msg("S", 4)  # the last delivery: it takes 3 along
    eventually(js, read, (((4, 4), (4, 4)), (0, 0, 5, 0)))
    assert [m.metadata.sequence.stream for m in sub.fetch(10)] == [5, 6, 7, 8, 9]
    js.delete_msg("S", 6)
    eventually(js, read, (((9, 9), (6, 6)), (3, 0, 0, 0)))


# ---------------------------------------------------------------- fetch(max_bytes)

# max_bytes -> messages one pull returns.  nats-server counts each delivery as
# subject + header block + payload + its ack reply subject
# ($JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>, about
# 45 bytes here), and delivers nothing that does not fit.
MAX_BYTES = [(100, 0), (150, 1), (250, 1), (300, 2), (1000, 6)]


@pytest.mark.parametrize("max_bytes, expected", MAX_BYTES, ids=[str(m) for m, _ in MAX_BYTES])
def test_fetch_max_bytes(js, max_bytes, expected):
    cs.not_on_the_cluster(
        js, "a replicated consumer's pull with max_bytes below ~1000 delivers what fits, or nothing, run to run"
    )
    cs.add_stream(js, name="S", subjects=["a.*"])
    for _ in range(5):
        js.publish("a.1", b"x" * 100)
    js.publish("a.1", b"x" * 100, headers={"K": "v"})
    name = f"C{max_bytes:04d}"  # the consumer's name is part of the reply subject
    sub = consumer(js, name)
    if expected == 0:
        with pytest.raises(FetchTimeoutError):
            sub.fetch(10, timeout=0.2, max_bytes=max_bytes)
        assert info(js, name).num_ack_pending == 0  # nothing was delivered
        return
    msgs = sub.fetch(10, timeout=1, max_bytes=max_bytes)
    assert [m.metadata.sequence.stream for m in msgs] == list(range(1, expected + 1))
    assert info(js, name).num_ack_pending == expected


# ---------------------------------------------------------------- inactive_threshold


def test_inactive_threshold_removes_idle_consumers(js):
    """A consumer idle past its inactive_threshold is deleted, durable or not; a
    durable without one stays (checked by the server on a timer, by the engine at
    the next call on the stream)."""
    add_stream(js)
    js.add_consumer("S", durable_name="IDLE", inactive_threshold=0.5)
    ephemeral = js.add_consumer("S", inactive_threshold=0.5).name
    js.add_consumer("S", durable_name="KEEP")
    assert sorted(c.name for c in js.consumers_info("S")) == sorted(["IDLE", "KEEP", ephemeral])
    js.clock.advance(1.2)
    # The server drops the consumers from its list and from the stream's count on timers of
    # their own (seen under load: the list already ["KEEP"], the count still 2).
    eventually(
        js, lambda: ([c.name for c in js.consumers_info("S")], js.stream_info("S").state.consumer_count), (["KEEP"], 1)
    )
    with pytest.raises(jetspark_errors.ConsumerNotFoundError):
        js.consumer_info("S", "IDLE")
