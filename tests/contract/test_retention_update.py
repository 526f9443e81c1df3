"""Retention changed by ``update_stream``: what each allowed change does to the stored
messages and to the consumers, and which changes the server refuses.

Every expected value was decided by nats-server v2.15.1 (the ``oracle-*`` and
``nats-*`` parametrisations of the ``js`` fixture), file and memory storage
alike; the engine must give the same answers.  What the server does:

- limits -> interest with no consumer: nothing holds interest, the stream is emptied.
- limits -> interest with consumers: every ack counts at once.  A message some
  consumer acked (below its ack floor, or acked above it) goes if no consumer
  that matches it still needs it; pending and undelivered messages stay, and so
  does a message no consumer matches.  Consumer state does not change.
- interest -> limits: nothing is removed, and acks stop removing messages.
- to or from work-queue: refused with 10052, the stream untouched.
"""

from __future__ import annotations

import pytest

from jetspark.api import AckPolicy, DeliverPolicy, RetentionPolicy
from jetspark.errors import MsgNotFoundError
from tests.contract import consumer_support as cs
from tests.contract.consumer_support import (
    api_error,
    eventually,
    fetch_nothing,
    seqs,
    server_streams_removed,  # noqa: F401  (autouse)
    state,
)

SUBJECTS = ["a.>", "b.>"]


def stream(js, retention: str = "limits", **config):
    cs.add_stream(js, name="S", subjects=SUBJECTS, retention=retention, **config)


def retention(js, to: str, **config):
    """update_stream to retention ``to`` (the rest of the config as created)."""
    info = js.update_stream(name="S", subjects=SUBJECTS, retention=to, **config)
    assert info.config.retention == RetentionPolicy(to)
    return info


def publish(js, subjects: str) -> None:
    """One message per letter: "abab" publishes a.1, b.1, a.1, b.1."""
    for letter in subjects:
        js.publish(f"{letter}.1", b"x")


def present(js) -> list[int]:
    """The sequences still stored."""
    out = []
    for seq in range(1, js.stream_info("S").state.last_seq + 1):
        try:
            js.get_msg("S", seq)
        except MsgNotFoundError:
            continue
        out.append(seq)
    return out


def fetch_and_ack(js, durable: str, batch: int, ack: set[int]) -> list[int]:
    """Fetch ``batch`` messages, ack those whose stream sequence is in ``ack``; returns the fetched sequences."""
    got = []
    for m in js.pull_subscribe_bind(stream="S", durable=durable).fetch(batch):
        got.append(m.metadata.sequence.stream)
        if got[-1] in ack:
            m.ack_sync()
    return got


def explicit(js, durable: str, **config):
    js.add_consumer("S", durable_name=durable, ack_policy=AckPolicy.EXPLICIT, **config)


# ---------------------------------------------------------------- limits -> interest


def test_limits_to_interest_without_consumers_empties_the_stream(js):
    stream(js)
    publish(js, "aaabb")
    info = retention(js, "interest")
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (0, 6, 5)
    assert js.stream_info("S").state.first_ts is None
    assert js.publish("a.1", b"x").seq == 6  # no interest: not stored, the sequence is used
    assert state(js, "S") == (0, 7, 6, 0)
    # A consumer created now starts after what was removed.
    explicit(js, "C")
    assert seqs(js.consumer_info("S", "C")) == ((0, 6), (0, 6))
    fetch_nothing(js.pull_subscribe_bind(stream="S", durable="C"))


def test_limits_to_interest_removes_what_the_consumer_acked(js):
    stream(js)
    publish(js, "aaabbb")
    explicit(js, "C")
    assert fetch_and_ack(js, "C", 4, {1, 2, 4}) == [1, 2, 3, 4]
    before = js.consumer_info("S", "C")
    assert seqs(before) == ((4, 4), (2, 2))
    assert state(js, "S") == (6, 1, 6, 1)  # limits: acks remove nothing

    retention(js, "interest")
    # 1, 2 below the ack floor and 4 acked above it go; 3 (pending), 5, 6 (undelivered) stay.
    assert present(js) == [3, 5, 6]
    assert state(js, "S") == (3, 3, 6, 1)
    after = js.consumer_info("S", "C")
    assert (seqs(after), after.num_ack_pending, after.num_pending) == (seqs(before), 1, 2)

    # From now on an ack removes its message.
    assert fetch_and_ack(js, "C", 2, {5}) == [5, 6]
    assert present(js) == [3, 6]


def test_limits_to_interest_with_acks_above_a_zero_floor(js):
    stream(js)
    publish(js, "aaaa")
    explicit(js, "C")
    assert fetch_and_ack(js, "C", 3, {2}) == [1, 2, 3]
    assert seqs(js.consumer_info("S", "C")) == ((3, 3), (0, 0))
    retention(js, "interest")
    assert present(js) == [1, 3, 4]


def test_limits_to_interest_keeps_messages_no_consumer_matches(js):
    stream(js)
    publish(js, "ababa")
    explicit(js, "C", filter_subject="a.>")
    assert fetch_and_ack(js, "C", 2, {1, 3}) == [1, 3]
    assert seqs(js.consumer_info("S", "C")) == ((2, 3), (2, 3))
    retention(js, "interest")
    # The ack floor passed 2 (b.1), but C does not match it: only 1 and 3 go.
    assert present(js) == [2, 4, 5]
    # New messages are stored only if a consumer matches them.
    publish(js, "ba")
    assert present(js) == [2, 4, 5, 7]


def test_limits_to_interest_needs_every_matching_consumer(js):
    stream(js)
    publish(js, "aaaaaa")
    explicit(js, "C1")
    explicit(js, "C2")
    fetch_and_ack(js, "C1", 4, {1, 2, 3, 4})
    fetch_and_ack(js, "C2", 3, {1, 3})
    retention(js, "interest")
    # 2: C2 has it pending; 4: C2 has not had it; 1 and 3: both acked.
    assert present(js) == [2, 4, 5, 6]
    assert seqs(js.consumer_info("S", "C1")) == ((4, 4), (4, 4))
    assert seqs(js.consumer_info("S", "C2")) == ((3, 3), (1, 1))


def test_limits_to_interest_ignores_consumers_that_do_not_match(js):
    stream(js)
    publish(js, "aaabbb")
    explicit(js, "A", filter_subject="a.>")
    explicit(js, "B", filter_subject="b.>")
    fetch_and_ack(js, "A", 3, {1, 2, 3})
    fetch_and_ack(js, "B", 1, set())
    retention(js, "interest")
    assert present(js) == [4, 5, 6]
    assert state(js, "S") == (3, 4, 6, 2)


@pytest.mark.parametrize("policy", [AckPolicy.NONE, AckPolicy.ALL], ids=["ack-none", "ack-all"])
def test_limits_to_interest_with_floor_only_consumers(js, policy):
    stream(js)
    publish(js, "aaaaa")
    js.add_consumer("S", durable_name="C", ack_policy=policy)
    sub = js.pull_subscribe_bind(stream="S", durable="C")
    msgs = sub.fetch(4)
    if policy == AckPolicy.ALL:
        msgs[2].ack_sync()  # acks 1..3; 4 stays pending
    floor = 4 if policy == AckPolicy.NONE else 3
    assert js.consumer_info("S", "C").ack_floor.stream_seq == floor
    retention(js, "interest")
    assert present(js) == list(range(floor + 1, 6))


def test_limits_to_interest_with_a_deliver_new_consumer(js):
    stream(js)
    publish(js, "aaaa")
    explicit(js, "C", deliver_policy=DeliverPolicy.NEW)
    assert seqs(js.consumer_info("S", "C")) == ((0, 4), (0, 4))
    retention(js, "interest")
    # Everything before the consumer started is below its ack floor: acked, removed.
    assert state(js, "S") == (0, 5, 4, 1)
    publish(js, "a")
    assert present(js) == [5]


def test_limits_to_interest_keeps_a_message_past_max_deliver(js):
    stream(js)
    publish(js, "aaa")
    explicit(js, "C", ack_wait=0.2, max_deliver=1)
    sub = js.pull_subscribe_bind(stream="S", durable="C")
    assert [m.metadata.sequence.stream for m in sub.fetch(2)] == [1, 2]  # never acked
    js.clock.advance(0.3)
    (m3,) = sub.fetch(2)  # 1 and 2 are past max_deliver: not redelivered
    m3.ack_sync()
    assert seqs(js.consumer_info("S", "C")) == ((3, 3), (3, 3))
    retention(js, "interest")
    # The ack floor passed 1 and 2, but a message past max_deliver stays, as on an
    # interest stream from the start (test_interest_workqueue.py, test_max_deliver_keeps_the_message).
    assert present(js) == [1, 2]


# ---------------------------------------------------------------- interest -> limits (and back)


def test_interest_to_limits_and_back(js):
    stream(js)
    explicit(js, "C")
    retention(js, "interest")
    publish(js, "aaaaa")
    assert fetch_and_ack(js, "C", 2, {1}) == [1, 2]
    assert present(js) == [2, 3, 4, 5]

    retention(js, "limits")
    assert present(js) == [2, 3, 4, 5]  # nothing removed
    assert fetch_and_ack(js, "C", 2, {2, 4}) == [3, 4]
    publish(js, "b")  # stored without interest now
    assert present(js) == [2, 3, 4, 5, 6]  # acks remove nothing under limits
    before = js.consumer_info("S", "C")
    assert seqs(before) == ((4, 4), (1, 1))

    retention(js, "interest")
    # The ack of 4 counts now; 2 and 3 are pending, 5 and 6 undelivered.
    assert present(js) == [2, 3, 5, 6]
    assert seqs(js.consumer_info("S", "C")) == seqs(before)


def test_interest_to_limits_then_no_consumer_then_interest(js):
    stream(js, "interest")
    explicit(js, "C")
    publish(js, "aaa")
    retention(js, "limits")
    js.delete_consumer("S", "C")
    assert present(js) == [1, 2, 3]  # limits: deleting the consumer keeps them
    retention(js, "interest")
    assert state(js, "S") == (0, 4, 3, 0)


def test_update_keeping_interest_removes_nothing(js):
    stream(js, "interest")
    explicit(js, "C")
    publish(js, "aaa")
    fetch_and_ack(js, "C", 2, {2})
    assert present(js) == [1, 3]
    info = retention(js, "interest", max_msgs=10)
    assert info.config.max_msgs == 10
    assert present(js) == [1, 3]
    assert seqs(js.consumer_info("S", "C")) == ((2, 2), (0, 0))


# ---------------------------------------------------------------- after the change


@pytest.mark.parametrize("policy", [AckPolicy.EXPLICIT, AckPolicy.ALL], ids=["explicit", "ack-all"])
def test_later_acks_leave_messages_no_consumer_matches(js, policy):
    stream(js)
    publish(js, "abababa")
    js.add_consumer("S", durable_name="C", ack_policy=policy, filter_subject="a.>")
    fetch_and_ack(js, "C", 2, {1, 3})
    retention(js, "interest")
    assert present(js) == [2, 4, 5, 6, 7]
    # The floor moves past 6 (b.1) to 7; only C's own messages go.
    fetch_and_ack(js, "C", 2, {5, 7} if policy == AckPolicy.EXPLICIT else {7})
    assert seqs(js.consumer_info("S", "C")) == ((4, 7), (4, 7))
    assert present(js) == [2, 4, 6]


def test_deleting_a_consumer_removes_what_nobody_needs_after_its_floor(js):
    stream(js)
    publish(js, "abababa")
    explicit(js, "C", filter_subject="a.>")
    explicit(js, "D", filter_subject="a.>")
    fetch_and_ack(js, "C", 2, {1, 3})
    retention(js, "interest")
    assert present(js) == list(range(1, 8))  # D still needs 1 and 3
    # C's floor is 3: of what follows, 4 and 6 (matched by nobody) go, 5 and 7 (D) stay.
    js.delete_consumer("S", "C")
    eventually(js, lambda: present(js), [1, 2, 3, 5, 7])


def test_deleting_a_consumer_removes_unmatched_messages_too(js):
    stream(js)
    publish(js, "abababa")
    explicit(js, "C", filter_subject="a.>")
    explicit(js, "D", filter_subject="a.>")
    fetch_and_ack(js, "C", 2, {1, 3})
    retention(js, "interest")
    # D (floor 0) goes: 1 and 3 (acked by C) and 2, 4, 6 (matched by nobody left) go.
    js.delete_consumer("S", "D")
    eventually(js, lambda: present(js), [5, 7])
    assert state(js, "S") == (2, 5, 7, 1)
    # A consumer created now starts at the new first sequence.
    explicit(js, "E")
    assert seqs(js.consumer_info("S", "E")) == ((0, 4), (0, 4))
    js.delete_consumer("S", "C")
    eventually(js, lambda: present(js), [5, 7])


# ---------------------------------------------------------------- work-queue


@pytest.mark.parametrize(
    "start, to",
    [("workqueue", "limits"), ("workqueue", "interest"), ("limits", "workqueue"), ("interest", "workqueue")],
)
def test_workqueue_changes_are_refused_and_change_nothing(js, start, to):
    stream(js, start)
    explicit(js, "C", filter_subject="a.>")
    publish(js, "aaab")
    fetch_and_ack(js, "C", 2, {1})
    before = (js.stream_info("S"), js.consumer_info("S", "C"), present(js))
    with api_error(10052, "stream configuration update can not change retention policy to/from workqueue"):
        retention(js, to)
    info = js.stream_info("S")
    assert info.config == before[0].config and info.state == before[0].state
    assert seqs(js.consumer_info("S", "C")) == seqs(before[1])
    assert present(js) == before[2]
