"""Interest and work-queue retention (docs/semantics.md §3.3, §3.4), with the interest-stream seed replayed.

Every expected value below was checked against nats-server v2.15.1 (the
``oracle-*`` parametrisations of the ``js`` fixture), file and memory storage
alike; the engine must give the same answers.  The seed
(seeds/004_8607262065bd4f48.txt) printed its states from a 2023 server;
v2.15.1 differs in one point, noted where it shows.
"""

from __future__ import annotations

import pytest

from jetspark.api import AckPolicy, DeliverPolicy, DiscardPolicy, RetentionPolicy, StorageType
from tests.contract import consumer_support as cs
from tests.contract.consumer_support import (
    api_error,
    counts,
    eventually,
    fetch_nothing,
    meta,
    seqs,
    server_streams_removed,  # noqa: F401  (autouse)
    state,
)

INTEREST = RetentionPolicy.INTEREST
WORK_QUEUE = RetentionPolicy.WORK_QUEUE


# ---------------------------------------------------------------- the seed


def test_interest_stream_seed(js):
    """seeds/004: EVENTS on events.>, interest retention; zero, one, two and three consumers."""
    created = cs.add_stream(js, name="EVENTS", retention=INTEREST, subjects=["events.>"])
    config = created.config
    assert (config.name, config.subjects, config.retention) == ("EVENTS", ["events.>"], INTEREST)
    assert (config.max_bytes, config.max_msgs, config.max_msgs_per_subject, config.max_consumers) == (-1, -1, -1, -1)
    assert (config.max_age, config.max_msg_size, config.duplicate_window) == (0.0, -1, 120.0)
    assert (config.discard, config.discard_new_per_subject, config.storage, config.num_replicas) == (
        DiscardPolicy.OLD,
        False,
        StorageType(js.storage),
        1,
    )
    assert (config.no_ack, config.sealed, config.deny_delete, config.deny_purge) == (False, False, False, False)
    assert (config.allow_rollup_hdrs, config.allow_direct, config.description) == (False, False, None)

    # Three messages and no consumer: none is stored, but sequences are used.
    js.publish("events.page_loaded", b"")
    js.publish("events.mouse_clicke", b"")  # sic
    ack = js.publish("events.input_focused", b"")
    assert ack.seq == 3  # "last message sequence: 3"

    # "# Stream info without any consumers": messages 0, bytes 0, first 4, last 3.
    # (The seed's 2023 server printed first_timestamp = last_timestamp here;
    # v2.15.1 reports a zero first timestamp, as for any emptied stream.)
    s = js.stream_info("EVENTS").state
    assert (s.messages, s.bytes, s.first_seq, s.last_seq, s.consumer_count) == (0, 0, 4, 3, 0)
    assert s.first_ts is None
    assert s.last_ts is not None
    last_ts = s.last_ts

    # Adding a consumer: interest without any subscription bound to it.
    js.add_consumer("EVENTS", durable_name="processor-1", filter_subject="events.>", ack_policy=AckPolicy.EXPLICIT)
    js.publish("events.mouse_clicked", b"")
    js.publish("events.input_focused", b"")

    # "# Stream info with one consumer": 2 messages (100 bytes in the file store), 4..5.
    s = js.stream_info("EVENTS").state
    two = js.msg_bytes("events.mouse_clicked", b"") + js.msg_bytes("events.input_focused", b"")
    assert two == {"file": 100, "memory": 72}[js.storage]
    assert (s.messages, s.bytes, s.first_seq, s.last_seq, s.consumer_count) == (2, two, 4, 5, 1)
    assert s.first_ts == js.get_msg("EVENTS", 4).time
    assert s.last_ts == js.get_msg("EVENTS", 5).time
    assert s.last_ts > last_ts
    last_ts = s.last_ts

    first_consumer = js.pull_subscribe_bind(stream="EVENTS", durable="processor-1")
    for m in first_consumer.fetch(2):
        m.ack_sync()  # the seed's double_ack

    # "# Stream info with one consumer and acked messages": empty, first 6, last 5.
    s = js.stream_info("EVENTS").state
    assert (s.messages, s.bytes, s.first_seq, s.last_seq, s.consumer_count) == (0, 0, 6, 5, 1)
    assert s.first_ts is None  # 1970-01-01 in the seed
    assert s.last_ts == last_ts

    # Two consumers: each is a separate view, both must release a message.
    js.add_consumer("EVENTS", durable_name="processor-2", filter_subject="events.>", ack_policy=AckPolicy.EXPLICIT)
    js.publish("events.input_focused", b"")
    js.publish("events.mouse_clicked", b"")

    second_consumer = js.pull_subscribe_bind(stream="EVENTS", durable="processor-2")
    message1, message2 = second_consumer.fetch(2)
    # "msg seqs 6 and 7": a late consumer cannot show interest retroactively.
    assert (message1.metadata.sequence.stream, message2.metadata.sequence.stream) == (6, 7)
    message1.ack()
    message2.ack_sync()

    # "Stream info with two consumers, but only one set of acked messages"
    s = js.stream_info("EVENTS").state
    assert (s.messages, s.bytes, s.first_seq, s.last_seq, s.consumer_count) == (2, two, 6, 7, 2)
    assert s.first_ts == js.get_msg("EVENTS", 6).time
    assert s.last_ts == js.get_msg("EVENTS", 7).time
    last_ts = s.last_ts

    for m in first_consumer.fetch(2):
        m.ack_sync()

    # "Stream info with two consumers having both acked"
    s = js.stream_info("EVENTS").state
    assert (s.messages, s.bytes, s.first_seq, s.last_seq, s.consumer_count) == (0, 0, 8, 7, 2)
    assert s.first_ts is None
    assert s.last_ts == last_ts

    # Interest respects the filter: processor-3 only wants mouse clicks.
    js.add_consumer(
        "EVENTS", durable_name="processor-3", filter_subject="events.mouse_clicked", ack_policy=AckPolicy.EXPLICIT
    )
    js.publish("events.mouse_clicked", b"")
    first_consumer.fetch(1)[0].term()  # terminating works too
    second_consumer.fetch(1)[0].ack_sync()

    # "Stream info with three consumers with interest from two": 1 message (50 bytes), 8..8.
    s = js.stream_info("EVENTS").state
    assert (s.messages, s.bytes, s.first_seq, s.last_seq, s.consumer_count) == (
        1,
        js.msg_bytes("events.mouse_clicked", b""),
        8,
        8,
        3,
    )
    assert s.first_ts == s.last_ts == js.get_msg("EVENTS", 8).time
    assert js.get_msg("EVENTS", 8).subject == "events.mouse_clicked"
    eventually(js, lambda: counts(js.consumer_info("EVENTS", "processor-3")), (0, 0, 1, 0))


# ---------------------------------------------------------------- interest


def interest_stream(js, **config):
    cs.add_stream(js, name="S", subjects=["a.*", "b.*"], retention=INTEREST, **config)


def test_interest_stores_only_what_a_consumer_wants(js):
    interest_stream(js)
    # No consumer: not stored, the sequence is used, dedup still remembers the id.
    assert js.publish("a.1", b"x", headers={"Nats-Msg-Id": "id1"}).seq == 1
    dup = js.publish("a.1", b"x", headers={"Nats-Msg-Id": "id1"})
    assert (dup.seq, dup.duplicate) == (1, True)
    assert state(js, "S") == (0, 2, 1, 0)

    js.add_consumer("S", durable_name="A", filter_subject="a.1")
    assert seqs(js.consumer_info("S", "A")) == ((0, 1), (0, 1))  # start - 1
    assert js.publish("a.2", b"x").seq == 2  # nobody's filter: not stored
    assert state(js, "S") == (0, 3, 2, 1)
    assert js.publish("a.1", b"x").seq == 3
    assert state(js, "S") == (1, 3, 3, 1)

    # A later consumer sees only what is stored from its start on.
    js.add_consumer("S", durable_name="N", ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.NEW)
    assert seqs(js.consumer_info("S", "N")) == ((0, 3), (0, 3))
    js.publish("a.2", b"y")  # 4: only N wants it
    js.publish("a.1", b"y")  # 5: A and N
    assert state(js, "S") == (3, 3, 5, 2)
    # Ack none: delivery is the release.
    eventually(js, lambda: js.consumer_info("S", "N").num_pending, 2)
    n = js.pull_subscribe_bind(stream="S", durable="N")
    assert [meta(m) for m in n.fetch(10)] == [("a.2", 4, 1, 1, 1), ("a.1", 5, 2, 1, 0)]
    assert state(js, "S") == (2, 3, 5, 2)
    assert [m.seq for m in (js.get_msg("S", 3), js.get_msg("S", 5))] == [3, 5]


def test_interest_release_needs_every_consumer(js):
    interest_stream(js)
    js.add_consumer("S", durable_name="A")
    js.add_consumer("S", durable_name="B")
    for _ in range(3):
        js.publish("a.1", b"x")
    a = js.pull_subscribe_bind(stream="S", durable="A")
    b = js.pull_subscribe_bind(stream="S", durable="B")
    a1, a2, a3 = a.fetch(3)
    b1, b2, b3 = b.fetch(3)

    # A: ack, term, nak -- B still holds all three.
    a1.ack()
    a2.term()
    a3.nak()
    assert state(js, "S") == (3, 1, 3, 2)
    # B's ack and term release 1 and 2; its ack of 3 does not (A's nak keeps it).
    b1.ack()
    assert state(js, "S") == (2, 2, 3, 2)
    b2.term()
    assert state(js, "S") == (1, 3, 3, 2)
    b3.ack()
    b3.in_progress()
    assert state(js, "S") == (1, 3, 3, 2)
    # A gets 3 again and acks it: gone.
    (again,) = a.fetch(10)
    assert meta(again) == ("a.1", 3, 4, 2, 0)
    again.ack()
    assert state(js, "S") == (0, 4, 3, 2)


def test_interest_ack_all_releases_everything_below(js):
    interest_stream(js)
    js.add_consumer("S", durable_name="L", ack_policy=AckPolicy.ALL)
    for _ in range(4):
        js.publish("b.1", b"x")
    msgs = js.pull_subscribe_bind(stream="S", durable="L").fetch(10)
    msgs[2].ack()  # 1-3
    assert state(js, "S") == (1, 4, 4, 1)
    msgs[3].ack()
    assert state(js, "S") == (0, 5, 4, 1)


def test_interest_removed_pending_message_under_ack_all_releases_what_is_below(js):
    # A pending message the stream removes counts as termed, an ack: under ack policy all it
    # acknowledges the deliveries below it, and the stream lets them go.
    interest_stream(js)
    js.add_consumer("S", durable_name="A", ack_policy=AckPolicy.ALL)
    js.add_consumer("S", durable_name="B", filter_subject="b.*")
    for subject in ("a.1", "a.2", "a.3", "b.1", "a.4"):
        js.publish(subject, b"x")
    assert [m.metadata.sequence.stream for m in js.pull_subscribe_bind(stream="S", durable="A").fetch(4)] == [
        1,
        2,
        3,
        4,
    ]
    js.delete_msg("S", 3)
    # 1 and 2 acknowledged with it; 4 still pending, and B's too; 5 not delivered.
    eventually(js, lambda: state(js, "S"), (2, 4, 5, 2))
    eventually(js, lambda: seqs(js.consumer_info("S", "A")), ((4, 4), (3, 3)))


def test_interest_deleting_consumers(js):
    interest_stream(js)
    js.add_consumer("S", durable_name="A")
    js.add_consumer("S", durable_name="B", filter_subject="b.*")
    js.add_consumer("S", durable_name="C")
    for subject in ("a.1", "a.2", "b.1", "b.2"):
        js.publish(subject, b"x")
    for m in js.pull_subscribe_bind(stream="S", durable="A").fetch(10):
        m.ack()
    c1, c2, c3, c4 = js.pull_subscribe_bind(stream="S", durable="C").fetch(10)
    c1.ack()
    c3.ack()
    # 2: C holds it; 3: B; 4: B and C.
    assert state(js, "S") == (3, 2, 4, 3)

    # Deleting a consumer removes the messages only it held.
    assert js.delete_consumer("S", "C") is True
    assert state(js, "S") == (2, 3, 4, 2)
    js.publish("a.3", b"x")  # 5: A wants it
    assert state(js, "S") == (3, 3, 5, 2)
    js.delete_consumer("S", "A")
    assert state(js, "S") == (2, 3, 5, 1)

    # Deleting the last consumer purges the stream, unacked messages and all.
    js.delete_consumer("S", "B")
    s = js.stream_info("S").state
    assert (s.messages, s.bytes, s.first_seq, s.last_seq, s.consumer_count) == (0, 0, 6, 5, 0)
    assert s.first_ts is None
    assert js.publish("b.1", b"x").seq == 6  # no consumer: not stored
    assert state(js, "S") == (0, 7, 6, 0)


# ---------------------------------------------------------------- max_deliver on both retentions


@pytest.mark.parametrize("retention", [INTEREST, WORK_QUEUE], ids=["interest", "workqueue"])
def test_max_deliver_keeps_the_message(js, retention):
    cs.add_stream(js, name="S", subjects=["a.*"], retention=retention)
    js.add_consumer("S", durable_name="D", ack_wait=0.2, max_deliver=1)
    for _ in range(2):
        js.publish("a.1", b"x")
    sub = js.pull_subscribe_bind(stream="S", durable="D")
    m1, m2 = sub.fetch(2)
    m2.ack()
    assert state(js, "S") == (1, 1, 2, 1)

    js.clock.advance(0.3)
    # Past max_deliver: not redelivered, not pending, but still stored.
    fetch_nothing(sub)
    i = js.consumer_info("S", "D")
    assert seqs(i) == ((2, 2), (0, 0))
    assert counts(i) == (0, 0, 0, 0)
    assert state(js, "S") == (1, 1, 2, 1)
    assert js.get_msg("S", 1).seq == 1

    # A late ack of its delivery still releases it.
    m1.ack()
    assert state(js, "S") == (0, 3, 2, 1)


# ---------------------------------------------------------------- work queue


def workqueue_stream(js, **config):
    cs.add_stream(js, name="S", subjects=["a.*", "b.*"], retention=WORK_QUEUE, **config)


# params -> err_code, description (for a consumer on an otherwise consumer-less work queue)
WORKQUEUE_INVALID = [
    (
        "ack none",
        dict(ack_policy=AckPolicy.NONE),
        10084,
        "consumer in pull mode requires explicit ack policy on workqueue stream",
    ),
    (
        "ack none, deliver new",
        dict(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.NEW),
        10084,
        "consumer in pull mode requires explicit ack policy on workqueue stream",
    ),
    ("ack all", dict(ack_policy=AckPolicy.ALL), 10098, "workqueue stream requires explicit ack"),
    ("deliver new", dict(deliver_policy=DeliverPolicy.NEW), 10101, "consumer must be deliver all on workqueue stream"),
    (
        "deliver last",
        dict(deliver_policy=DeliverPolicy.LAST),
        10101,
        "consumer must be deliver all on workqueue stream",
    ),
    (
        "by start sequence",
        dict(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=1),
        10101,
        "consumer must be deliver all on workqueue stream",
    ),
    (
        "last per subject",
        dict(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, filter_subject="a.1"),
        10101,
        "consumer must be deliver all on workqueue stream",
    ),
]


@pytest.mark.parametrize(
    "params, err_code, description", [row[1:] for row in WORKQUEUE_INVALID], ids=[row[0] for row in WORKQUEUE_INVALID]
)
def test_workqueue_consumer_config(js, params, err_code, description):
    workqueue_stream(js)
    with api_error(err_code, description):
        js.add_consumer("S", durable_name="X", **params)
    assert js.stream_info("S").state.consumer_count == 0


NOT_UNIQUE = (10100, "filtered consumer not unique on workqueue stream")
NON_FILTERED = (10099, "multiple non-filtered consumers not allowed on workqueue stream")


def test_workqueue_consumers_must_not_overlap(js):
    workqueue_stream(js)
    js.add_consumer("S", durable_name="U")
    with api_error(*NON_FILTERED):
        js.add_consumer("S", durable_name="U2")
    with api_error(*NOT_UNIQUE):
        js.add_consumer("S", durable_name="F", filter_subject="a.1")  # any filter collides with an unfiltered one
    js.add_consumer("S", durable_name="U")  # the same consumer again is fine
    js.delete_consumer("S", "U")

    js.add_consumer("S", durable_name="F1", filter_subject="a.1")
    with api_error(*NOT_UNIQUE):
        js.add_consumer("S", durable_name="F2", filter_subject="a.1")
    with api_error(*NOT_UNIQUE):
        js.add_consumer("S", durable_name="F2", filter_subject="a.*")  # collides with a.1
    with api_error(*NOT_UNIQUE):
        js.add_consumer("S", durable_name="F2", filter_subject="*.1")
    with api_error(*NOT_UNIQUE):
        js.add_consumer("S", filter_subject="a.1")  # ephemerals too
    js.add_consumer("S", durable_name="F2", filter_subject="a.2")
    with api_error(*NON_FILTERED):
        js.add_consumer("S", durable_name="F3")
    with api_error(*NOT_UNIQUE):
        js.add_consumer("S", durable_name="F3", filter_subjects=["b.1", "a.1"])
    js.add_consumer("S", durable_name="F3", filter_subjects=["b.1", "b.2"])
    # An update is checked the same way.
    with api_error(*NOT_UNIQUE):
        js.update_consumer("S", durable_name="F2", filter_subject="a.1")
    assert [c.name for c in js.consumers_info("S")] == ["F1", "F2", "F3"]


def test_workqueue_removal(js):
    workqueue_stream(js)
    # Stored without any consumer.
    for _ in range(4):
        js.publish("a.1", b"x")
    assert state(js, "S") == (4, 1, 4, 0)

    js.add_consumer("S", durable_name="W")
    sub = js.pull_subscribe_bind(stream="S", durable="W")
    m1, m2, m3, m4 = sub.fetch(4)
    assert state(js, "S") == (4, 1, 4, 1)  # delivery alone removes nothing
    m2.ack()
    assert state(js, "S") == (3, 1, 4, 1)
    m3.term()
    assert state(js, "S") == (2, 1, 4, 1)
    m1.nak()  # kept, redelivered
    m4.in_progress()
    assert state(js, "S") == (2, 1, 4, 1)
    assert [meta(m) for m in sub.fetch(10)] == [("a.1", 1, 5, 2, 0)]

    # Deleting the consumer keeps what is left; a new one starts at the first.
    js.delete_consumer("S", "W")
    assert state(js, "S") == (2, 1, 4, 0)
    created = js.add_consumer("S", durable_name="W2")
    assert seqs(created) == ((0, 0), (0, 0))
    assert created.num_pending == 2
    w2 = js.pull_subscribe_bind(stream="S", durable="W2")
    msgs = w2.fetch(10)
    assert [meta(m) for m in msgs] == [("a.1", 1, 1, 1, 1), ("a.1", 4, 2, 1, 0)]
    for m in msgs:
        m.ack()
    s = js.stream_info("S").state
    assert (s.messages, s.first_seq, s.last_seq) == (0, 5, 4)
    assert seqs(js.consumer_info("S", "W2")) == ((2, 4), (2, 4))


def test_workqueue_filtered_consumers_share_the_stream(js):
    workqueue_stream(js)
    js.add_consumer("S", durable_name="A", filter_subject="a.*")
    js.add_consumer("S", durable_name="B", filter_subject="b.*")
    for subject in ("a.1", "b.1", "a.2", "b.2", "b.3"):
        js.publish(subject, b"x")
    eventually(js, lambda: [js.consumer_info("S", c).num_pending for c in "AB"], [2, 3])
    a = js.pull_subscribe_bind(stream="S", durable="A")
    b = js.pull_subscribe_bind(stream="S", durable="B")
    assert [meta(m) for m in a.fetch(10)] == [("a.1", 1, 1, 1, 1), ("a.2", 3, 2, 1, 0)]
    bs = b.fetch(10)
    assert [meta(m) for m in bs] == [("b.1", 2, 1, 1, 2), ("b.2", 4, 2, 1, 1), ("b.3", 5, 3, 1, 0)]
    for m in bs:
        m.ack()
    s = js.stream_info("S", subjects_filter=">").state
    assert (s.messages, s.first_seq, s.last_seq, s.subjects) == (2, 1, 5, {"a.1": 1, "a.2": 1})
