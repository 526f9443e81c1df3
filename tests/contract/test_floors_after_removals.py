"""Where a consumer's delivered and ack-floor sequences stand after the stream removed what it
had pending, and where a last-per-subject consumer starts: as nats-server reports them.

A rollup (``Nats-Rollup: all`` or ``sub``) is a purge of what it replaces: a consumer it
covers moves to the rollup message, its ack floor just below, and the pending deliveries it
removed count as acked (the floor does not wait for them).  A ``last_per_subject`` consumer
whose filter matches nothing starts at the stream's last message, so it reports that
sequence - 1; one on a stream with ``max_msgs_per_subject: 1`` starts at the first message,
as ``all`` does; once its subjects' last messages are delivered, the same pull goes on with
newer ones.  The ``js`` fixture runs each test on nats-server (file and memory) too.
"""

from __future__ import annotations

import pytest

from tests.contract.consumer_support import eventually, fetch_nothing

S = "R"


def positions(js, name: str = "C"):
    """(delivered stream seq, delivered consumer seq, ack floor stream seq, ack floor consumer
    seq, num_ack_pending, num_pending)."""
    ci = js.consumer_info(S, name)
    return (
        ci.delivered.stream_seq,
        ci.delivered.consumer_seq,
        ci.ack_floor.stream_seq,
        ci.ack_floor.consumer_seq,
        ci.num_ack_pending,
        ci.num_pending,
    )


def rollup_stream(js, **config):
    js.add_stream(name=S, subjects=["r.>"], allow_rollup_hdrs=True, **config)
    for i, subject in enumerate(["r.a", "r.b", "r.a"]):
        js.publish(subject, b"%d" % i)


# fetched, acked (of the fetched, by index) -> positions after a rollup all at seq 4
ROLLUP_ALL = [
    (1, [], (3, 1, 3, 1, 0, 1)),
    (2, [], (3, 2, 3, 2, 0, 1)),
    (3, [], (3, 3, 3, 3, 0, 1)),
    (3, [0], (3, 3, 3, 3, 0, 1)),
    (2, [1], (3, 2, 3, 2, 0, 1)),
    (0, [], (3, 0, 3, 0, 0, 1)),
]


@pytest.mark.parametrize(("fetched", "acked", "expected"), ROLLUP_ALL)
def test_rollup_all_moves_the_floor_past_the_pending_it_removed(js, fetched, acked, expected):
    rollup_stream(js)
    js.add_consumer(S, durable_name="C")
    sub = js.pull_subscribe_bind(durable="C", stream=S)
    msgs = sub.fetch(fetched, timeout=5) if fetched else []
    for i in acked:
        msgs[i].ack_sync()
    assert js.publish("r.c", b"roll", headers={"Nats-Rollup": "all"}).seq == 4
    eventually(js, lambda: positions(js), expected)
    # The rollup message is the next delivery; acking it brings the floor to the end.
    (m,) = sub.fetch(5, timeout=5)
    assert (m.metadata.sequence.stream, m.data) == (4, b"roll")
    m.ack_sync()
    eventually(js, lambda: positions(js)[2:5], (4, expected[1] + 1, 0))


def test_rollup_sub_moves_a_consumer_of_that_subject(js):
    rollup_stream(js)
    js.add_consumer(S, durable_name="C", filter_subject="r.a")
    js.add_consumer(S, durable_name="ALL")
    js.add_consumer(S, durable_name="B", filter_subject="r.b")
    for name in ("C", "ALL", "B"):
        js.pull_subscribe_bind(durable=name, stream=S).fetch(5, timeout=5)
    assert js.publish("r.a", b"roll", headers={"Nats-Rollup": "sub"}).seq == 4
    # r.a's consumer: to the rollup message; its two removed pending deliveries count as acked.
    eventually(js, lambda: positions(js, "C"), (3, 2, 3, 2, 0, 1))
    # A consumer of every subject keeps r.b's delivery pending; the removed ones leave, and
    # the server moves the floor's consumer sequence to the last of them (3) while its stream
    # sequence stays below r.b's (1).
    eventually(js, lambda: positions(js, "ALL"), (3, 3, 1, 3, 1, 1))
    # A consumer of another subject is untouched.
    eventually(js, lambda: positions(js, "B"), (2, 1, 0, 0, 1, 0))


def test_rollup_on_an_interest_stream_nobody_wants_still_purges(js):
    js.add_stream(name=S, subjects=["r.>"], allow_rollup_hdrs=True, retention="interest")
    js.add_consumer(S, durable_name="C", filter_subject="r.a")
    for i in range(3):
        js.publish("r.a", b"%d" % i)
    js.pull_subscribe_bind(durable="C", stream=S).fetch(2, timeout=5)
    # r.z has no interest: not stored, yet its rollup purges the stream, after the skip.
    assert js.publish("r.z", b"roll", headers={"Nats-Rollup": "all", "Nats-Msg-Id": "skipped"}).seq == 4
    eventually(js, lambda: js.stream_info(S).state.messages, 0)
    eventually(js, lambda: positions(js), (4, 2, 4, 2, 0, 0))
    assert js.stream_info(S).state.first_seq == 5
    # The skipped message's id is the stream's last one.
    assert js.publish("r.a", b"next", headers={"Nats-Expected-Last-Msg-Id": "skipped"}).seq == 5


# ---------------------------------------------------------------------- last per subject


def lps_stream(js, **config):
    js.add_stream(name=S, subjects=["r.>"], **config)
    for subject in ["r.a", "r.b", "r.a", "r.c"]:
        js.publish(subject, b"x")


@pytest.mark.parametrize("filters", [dict(filter_subject="r.none"), dict(filter_subjects=["r.none", "r.z.*"])])
def test_last_per_subject_matching_nothing_starts_at_the_last_message(js, filters):
    lps_stream(js)
    js.add_consumer(S, durable_name="C", deliver_policy="last_per_subject", **filters)
    assert positions(js) == (3, 0, 3, 0, 0, 0)
    sub = js.pull_subscribe_bind(durable="C", stream=S)
    fetch_nothing(sub)
    js.publish("r.none", b"new")
    eventually(js, lambda: positions(js)[5], 1)
    (m,) = sub.fetch(5, timeout=5)
    assert m.metadata.sequence.stream == 5


def test_last_per_subject_on_an_empty_stream(js):
    js.add_stream(name=S, subjects=["r.>"])
    js.add_consumer(S, durable_name="C", deliver_policy="last_per_subject", filter_subject="r.none")
    assert positions(js) == (0, 0, 0, 0, 0, 0)


def test_last_per_subject_with_one_message_per_subject_starts_at_the_first(js):
    lps_stream(js, max_msgs_per_subject=1)  # keeps 2 (r.b), 3 (r.a), 4 (r.c)
    js.add_consumer(S, durable_name="C", deliver_policy="last_per_subject", filter_subject="r.c")
    assert positions(js) == (1, 0, 1, 0, 0, 1)


def test_last_per_subject_goes_on_with_newer_messages_in_the_same_pull(js):
    lps_stream(js)
    js.add_consumer(S, durable_name="C", deliver_policy="last_per_subject", filter_subject="r.*")
    js.publish("r.d", b"after")
    eventually(js, lambda: positions(js)[5], 4)
    msgs = js.pull_subscribe_bind(durable="C", stream=S).fetch(10, timeout=5)
    assert [m.metadata.sequence.stream for m in msgs] == [2, 3, 4, 5]
