"""Push subscriptions: subscribe, subscribe_bind, next_msg, messages, drain, unsubscribe (docs/semantics.md §5.6).

Every test runs on the engine, on jetspark's nats:// backend and on the
oracle (nats-py's own ``subscribe`` on nats-server v2.15.1), so the server
decides: the push consumer rules and their err_codes, the order and
redelivery of messages, a queue group's sharing, flow control and heartbeats,
what ``drain`` hands out, ordered consumers made again after their consumer
is lost.  Waits are for events (a message, a callback's count, the server's
own state through ``cs.eventually``), never fixed sleeps; ``js.clock.advance``
moves the engine's clock and really waits on the server.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading

import pytest

import jetspark
from jetspark.api import AckPolicy, ConsumerConfig, DeliverPolicy, ReplayPolicy
from jetspark.errors import APIError, ClosedError, NextMsgTimeoutError, SubscriptionError
from tests.contract import consumer_support as cs
from tests.contract.consumer_support import (
    api_error,
    eventually,
    meta,
    server_streams_removed,  # noqa: F401  (autouse)
)

# How long a callback test waits for its messages before failing (an upper bound, not a pause).
WAIT = 10.0


def add_stream(js, n: int = 0, subject: str = "a.x", **config):
    """Stream S on a.*, b.* with ``n`` messages on ``subject`` (payload b"m<seq>")."""
    cs.add_stream(js, name="S", subjects=["a.*", "b.*"], **config)
    for seq in range(1, n + 1):
        assert js.publish(subject, b"m%d" % seq).seq == seq


def info(js, name: str):
    return js.consumer_info("S", name)


class Collector:
    """A callback recording (stream seq, num_delivered) per message; ``wait(n)`` until n came."""

    def __init__(self, act=None) -> None:
        self.seen: list[tuple[int, int]] = []
        self.act = act  # act(msg, collector) -> None, e.g. nak or raise
        self._cond = threading.Condition()

    def __call__(self, msg) -> None:
        md = msg.metadata
        with self._cond:
            self.seen.append((md.sequence.stream, md.num_delivered))
            self._cond.notify_all()
        if self.act is not None:
            self.act(msg, self)

    def wait(self, n: int) -> list[tuple[int, int]]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.seen) >= n, WAIT), (
                f"{len(self.seen)} of {n} messages within {WAIT} s: {self.seen}"
            )
            return list(self.seen)


# ---------------------------------------------------------------- push consumer configs


def push_echo(**changes) -> ConsumerConfig:
    """What the server echoes for add_consumer(durable_name="P", deliver_subject="dlv.p")."""
    config = ConsumerConfig(
        name="P",
        durable_name="P",
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=30.0,
        max_deliver=-1,
        replay_policy=ReplayPolicy.INSTANT,
        max_waiting=None,  # a push consumer has no waiting pulls
        max_ack_pending=1000,
        deliver_subject="dlv.p",
        num_replicas=0,
    )
    return config.evolve(**changes)


ECHO = [
    ("push", dict(), push_echo()),
    ("group", dict(deliver_group="g"), push_echo(deliver_group="g")),
    (
        "flow control and heartbeats",
        dict(flow_control=True, idle_heartbeat=0.5),
        push_echo(flow_control=True, idle_heartbeat=0.5),
    ),
    (
        "ack none",
        dict(ack_policy=AckPolicy.NONE),
        push_echo(ack_policy=AckPolicy.NONE, ack_wait=None, max_ack_pending=None),
    ),
    # ack_wait is kept as given, unused, with ack none (as an ordered consumer's 22 h)
    (
        "ack none, ack_wait",
        dict(ack_policy=AckPolicy.NONE, ack_wait=7.0),
        push_echo(ack_policy=AckPolicy.NONE, ack_wait=7.0, max_ack_pending=None),
    ),
    # a pull consumer may name a deliver group too
    (
        "pull, group",
        dict(deliver_subject=None, deliver_group="g"),
        push_echo(deliver_subject=None, deliver_group="g", max_waiting=512),
    ),
]


@pytest.mark.parametrize("params, expected", [row[1:] for row in ECHO], ids=[row[0] for row in ECHO])
def test_push_consumer_config_is_echoed(js, params, expected):
    add_stream(js)
    params = {"deliver_subject": "dlv.p", **params}
    created = js.add_consumer("S", durable_name="P", **params)
    assert created.config == expected
    assert created.push_bound is None  # nothing is subscribed
    assert info(js, "P").config == expected


REFUSED = [
    (
        "flow control without heartbeats",
        dict(flow_control=True),
        10108,
        "consumer with flow control also needs heartbeats",
    ),
    ("wildcard deliver subject", dict(deliver_subject="dlv.*"), 10079, "consumer deliver subject has wildcards"),
    ("invalid deliver subject", dict(deliver_subject="dlv..x"), 10112, "invalid push consumer deliver subject"),
    (
        "deliver subject the stream captures",
        dict(deliver_subject="a.out"),
        10081,
        "consumer deliver subject forms a cycle",
    ),
    ("max_waiting on push", dict(max_waiting=5), 10080, "consumer in push mode can not set max waiting"),
    (
        "max_ack_pending, ack none",
        dict(ack_policy=AckPolicy.NONE, max_ack_pending=5),
        10082,
        "consumer requires ack policy for max ack pending",
    ),
    ("heartbeat under 100 ms", dict(idle_heartbeat=0.05), 10083, "consumer idle heartbeat needs to be >= 100ms"),
    (
        "heartbeat on pull",
        dict(deliver_subject=None, idle_heartbeat=1.0),
        10088,
        "consumer idle heartbeat requires a push based consumer",
    ),
    (
        "flow control on pull",
        dict(deliver_subject=None, flow_control=True),
        10089,
        "consumer flow control requires a push based consumer",
    ),
    (
        "flow control and heartbeat on pull",
        dict(deliver_subject=None, flow_control=True, idle_heartbeat=1.0),
        10088,
        "consumer idle heartbeat requires a push based consumer",
    ),
    # the order of the checks: the deliver subject's and the start's come first
    (
        "flow control without heartbeats, wildcards",
        dict(flow_control=True, deliver_subject="dlv.>"),
        10079,
        "consumer deliver subject has wildcards",
    ),
    (
        "flow control without heartbeats, no start",
        dict(flow_control=True, deliver_policy=DeliverPolicy.BY_START_SEQUENCE),
        10094,
        "consumer delivery policy is deliver by start sequence, but optional start sequence is not set",
    ),
]


@pytest.mark.parametrize("params, err_code, description", [row[1:] for row in REFUSED], ids=[row[0] for row in REFUSED])
def test_push_consumer_config_refused(js, params, err_code, description):
    add_stream(js)
    params = {"durable_name": "P", "deliver_subject": "dlv.p", **params}
    with api_error(err_code, description):
        js.add_consumer("S", **params)
    assert js.consumers_info("S") == []


def test_push_consumer_on_a_work_queue_needs_explicit_acks(js):
    add_stream(js, retention="workqueue")
    with api_error(10098, "workqueue stream requires explicit ack"):
        js.add_consumer("S", durable_name="P", deliver_subject="dlv.p", ack_policy=AckPolicy.NONE)
    with api_error(10098, "workqueue stream requires explicit ack"):
        js.add_consumer("S", durable_name="P", deliver_subject="dlv.p", ack_policy=AckPolicy.ALL)
    assert (
        js.add_consumer("S", durable_name="P", deliver_subject="dlv.p", deliver_group="g").config.deliver_group == "g"
    )


UPDATES = [
    ("heartbeat", dict(idle_heartbeat=2.0), (10012, "heart beats can not be updated")),
    ("flow control", dict(flow_control=None), (10012, "flow control can not be updated")),
    # heartbeats are checked before the deliver subject
    (
        "to pull",
        dict(deliver_subject=None, flow_control=None, idle_heartbeat=None),
        (10012, "heart beats can not be updated"),
    ),
    ("deliver subject, unbound", dict(deliver_subject="dlv.q"), None),
    ("deliver group", dict(deliver_group="g"), None),
]


@pytest.mark.parametrize("change, refused", [row[1:] for row in UPDATES], ids=[row[0] for row in UPDATES])
def test_push_consumer_updates(js, change, refused):
    add_stream(js)
    base = dict(durable_name="P", deliver_subject="dlv.p", flow_control=True, idle_heartbeat=1.0)
    js.add_consumer("S", **base)
    if refused:
        with api_error(*refused):
            js.update_consumer("S", **{**base, **change})
    else:
        assert js.update_consumer("S", **{**base, **change}).config == push_echo(
            flow_control=True, idle_heartbeat=1.0, **change
        )


def test_push_and_pull_consumers_do_not_switch(js):
    add_stream(js)
    js.add_consumer("S", durable_name="Q")
    with api_error(10012, "can not update pull consumer to push based"):
        js.update_consumer("S", durable_name="Q", deliver_subject="dlv.q")
    js.add_consumer("S", durable_name="P", deliver_subject="dlv.p")
    with api_error(10012, "can not update push consumer to pull based"):
        js.update_consumer("S", durable_name="P")


def test_a_bound_push_consumer_keeps_its_deliver_subject(js):
    add_stream(js)
    js.add_consumer("S", durable_name="P", deliver_subject="dlv.p")
    sub = js.subscribe_bind("S", "P")
    eventually(js, lambda: info(js, "P").push_bound, True)
    with api_error(10013, "consumer name already in use"):
        js.update_consumer("S", durable_name="P", deliver_subject="dlv.q")
    sub.unsubscribe()
    eventually(js, lambda: info(js, "P").push_bound, None)
    assert js.update_consumer("S", durable_name="P", deliver_subject="dlv.q").config.deliver_subject == "dlv.q"


def test_fetch_from_a_push_consumer_is_refused(js):
    add_stream(js, 2)
    js.add_consumer("S", durable_name="P", deliver_subject="dlv.p")
    sub = js.pull_subscribe_bind(stream="S", durable="P")
    with pytest.raises(APIError) as e:
        sub.fetch(1, timeout=0.5, no_wait=True)  # the server's answer to the pull request
    assert (e.value.code, e.value.err_code, e.value.description) == (409, 0, "Consumer is push based")
    assert info(js, "P").num_ack_pending == 0


# ---------------------------------------------------------------- delivery


def test_next_msg_delivers_in_order(js):
    cs.add_stream(js, name="S", subjects=["a.*", "b.*"])
    subjects = {1: "a.1", 2: "a.2", 3: "b.1", 4: "a.1"}
    for seq, subject in subjects.items():
        js.publish(subject, b"m%d" % seq)
    sub = js.subscribe("a.*", durable="D")
    assert (sub.stream, sub.consumer) == ("S", "D")
    created = info(js, "D").config
    assert (created.filter_subject, created.durable_name, created.max_waiting) == ("a.*", "D", None)
    assert created.deliver_subject.startswith("_INBOX.")
    msgs = [sub.next_msg(timeout=WAIT) for _ in range(3)]
    assert [meta(m) for m in msgs] == [("a.1", 1, 1, 1, 2), ("a.2", 2, 2, 1, 1), ("a.1", 4, 3, 1, 0)]
    assert [m.data for m in msgs] == [b"m1", b"m2", b"m4"]
    with pytest.raises(NextMsgTimeoutError) as e:
        sub.next_msg(timeout=cs.NOTHING_WAIT)
    assert isinstance(e.value, TimeoutError)
    js.publish("a.2", b"m5")
    assert meta(sub.next_msg(timeout=WAIT))[:4] == ("a.2", 5, 4, 1)
    for m in msgs:
        m.ack()
    eventually(js, lambda: cs.counts(info(js, "D"))[:3], (1, 0, 0))
    sub.unsubscribe()
    with pytest.raises(ClosedError):
        sub.next_msg(timeout=cs.NOTHING_WAIT)


def test_callback_gets_every_message_in_order_and_acks_it(js):
    add_stream(js, 20)
    got = Collector()
    sub = js.subscribe("a.x", durable="D", cb=got)
    assert got.wait(20) == [(seq, 1) for seq in range(1, 21)]
    with pytest.raises(SubscriptionError):
        sub.next_msg(timeout=cs.NOTHING_WAIT)  # the callback takes the messages
    sub.drain()
    # Acknowledged after the callback returned (nats-py's auto-ack).
    eventually(js, lambda: cs.seqs(info(js, "D")), ((20, 20), (20, 20)))
    assert info(js, "D").num_ack_pending == 0


def test_manual_ack_leaves_the_acks_to_the_callback(js):
    add_stream(js, 3)
    got = Collector(act=lambda msg, _: msg.ack() if msg.metadata.sequence.stream == 2 else None)
    sub = js.subscribe("a.x", durable="D", cb=got, manual_ack=True)
    got.wait(3)
    sub.drain()
    eventually(js, lambda: info(js, "D").num_ack_pending, 2)


def test_a_callback_that_raises_does_not_stop_delivery(js, caplog):
    add_stream(js, 5)

    def fail_on_two(msg, _):
        if msg.metadata.sequence.stream == 2:
            raise RuntimeError("the callback fails on seq 2")

    got = Collector(act=fail_on_two)
    with caplog.at_level(logging.ERROR, logger="jetspark.push"):
        sub = js.subscribe("a.x", durable="D", cb=got)
        assert got.wait(5) == [(seq, 1) for seq in range(1, 6)]
        sub.drain()
    # The failed message is not acknowledged: it waits for its redelivery.
    eventually(js, lambda: (info(js, "D").num_ack_pending, cs.seqs(info(js, "D"))[1]), (1, (1, 1)))
    if js.kind != "oracle":  # (nats-py reports it to its error callback)
        assert any(
            "the callback fails on seq 2" in (r.exc_text or "") for r in caplog.records if r.name == "jetspark.push"
        )


def test_redelivery_after_ack_wait(js):
    add_stream(js, 1)
    sub = js.subscribe("a.x", durable="D", config=ConsumerConfig(ack_wait=0.3), manual_ack=True)
    first = sub.next_msg(timeout=WAIT)
    assert meta(first)[:4] == ("a.x", 1, 1, 1)
    js.clock.advance(0.4)
    again = sub.next_msg(timeout=WAIT)
    assert meta(again)[:4] == ("a.x", 1, 2, 2)
    again.ack()
    eventually(js, lambda: cs.seqs(info(js, "D")), ((2, 1), (2, 1)))


def test_nak_from_a_callback_redelivers(js):
    add_stream(js, 1)
    got = Collector(act=lambda msg, _: msg.nak() if msg.metadata.num_delivered == 1 else None)
    sub = js.subscribe("a.x", durable="D", cb=got)
    assert got.wait(2) == [(1, 1), (1, 2)]  # the nak'd message is not auto-acked: it comes again
    sub.drain()
    eventually(js, lambda: cs.seqs(info(js, "D")), ((2, 1), (2, 1)))


def test_a_queue_group_shares_the_messages(js):
    add_stream(js)
    lock = threading.Lock()
    seen: list[tuple[int, int]] = []  # (member, stream seq)
    done = threading.Event()

    def member(k):
        def cb(msg):
            with lock:
                seen.append((k, msg.metadata.sequence.stream))
                if len(seen) >= 60:
                    done.set()

        return cb

    first = js.subscribe("a.x", queue="G", cb=member(0))
    second = js.subscribe("a.x", queue="G", cb=member(1))
    created = info(js, "G").config
    assert (created.durable_name, created.deliver_group) == ("G", "G")
    with pytest.raises(SubscriptionError):
        js.subscribe("a.x", durable="G")  # a member must name the group
    with pytest.raises(SubscriptionError):
        js.subscribe("a.x", queue="H", durable="G")
    for seq in range(1, 61):
        js.publish("a.x", b"m%d" % seq)
    assert done.wait(WAIT), seen
    first.drain()
    second.drain()
    assert sorted(seq for _, seq in seen) == list(range(1, 61))  # each message to exactly one member
    eventually(js, lambda: cs.seqs(info(js, "G"))[1], (60, 60))


def test_subscribe_bind_joins_the_consumers_group(js):
    add_stream(js, 30)
    js.add_consumer("S", durable_name="P", deliver_subject="dlv.p", deliver_group="g")
    lock = threading.Lock()
    seen: list[int] = []
    done = threading.Event()

    def cb(msg):
        with lock:
            seen.append(msg.metadata.sequence.stream)
            if len(seen) >= 30:
                done.set()

    subs = [js.subscribe_bind("S", "P", cb=cb) for _ in range(2)]
    assert done.wait(WAIT), seen
    for sub in subs:
        sub.drain()
    assert sorted(seen) == list(range(1, 31))
    js.add_consumer("S", durable_name="Q")
    with pytest.raises(SubscriptionError):
        js.subscribe_bind("S", "Q")  # a pull consumer
    with pytest.raises(SubscriptionError):
        js.subscribe("a.x", durable="Q")
    with api_error(10014, "consumer not found"):
        js.subscribe_bind("S", "missing")


def test_a_bound_durable_takes_no_second_subscription(js):
    add_stream(js)
    sub = js.subscribe("a.x", durable="D")
    eventually(js, lambda: info(js, "D").push_bound, True)
    with pytest.raises(SubscriptionError):
        js.subscribe("a.x", durable="D")
    sub.unsubscribe()
    eventually(js, lambda: info(js, "D").push_bound, None)
    again = js.subscribe("a.x", durable="D")
    js.publish("a.x", b"m1")
    assert meta(again.next_msg(timeout=WAIT))[:2] == ("a.x", 1)
    again.unsubscribe()


def test_flow_control_and_heartbeats_keep_delivery_going(js):
    """300 messages of 10 kB: past the server's first flow-control window (about 2 MB here), which
    the subscription must answer for delivery to go on."""
    cs.add_stream(js, name="S", subjects=["a.*"])
    payload = b"x" * 10_000
    for _ in range(300):
        js.publish("a.x", payload)
    sub = js.subscribe("a.x", durable="D", flow_control=True, idle_heartbeat=0.2)
    created = info(js, "D").config
    assert (created.flow_control, created.idle_heartbeat) == (True, 0.2)
    seqs = []
    for _ in range(300):
        msg = sub.next_msg(timeout=WAIT)
        seqs.append(msg.metadata.sequence.stream)
        msg.ack()
    assert seqs == list(range(1, 301))
    with pytest.raises(NextMsgTimeoutError):
        sub.next_msg(timeout=0.5)  # heartbeats (every 0.2 s) come, but are no messages
    sub.unsubscribe()


def test_drain_hands_out_what_the_subscription_holds(js):
    add_stream(js, 10)
    sub = js.subscribe("a.x", durable="D", manual_ack=True)
    first = sub.next_msg(timeout=WAIT)
    eventually(js, lambda: info(js, "D").num_ack_pending, 10)  # all ten delivered to the subscription
    sub.drain()
    rest = list(sub.messages())
    assert [first.metadata.sequence.stream] + [m.metadata.sequence.stream for m in rest] == list(range(1, 11))
    with pytest.raises(ClosedError):
        sub.next_msg(timeout=cs.NOTHING_WAIT)
    eventually(js, lambda: info(js, "D").push_bound, None)


def test_drain_waits_for_the_callback(js):
    add_stream(js, 10)
    go = threading.Event()
    got = Collector(act=lambda msg, _: go.wait(WAIT) if msg.metadata.sequence.stream == 1 else None)
    sub = js.subscribe("a.x", durable="D", cb=got)
    got.wait(1)  # the callback holds the first message; the other nine wait behind it
    eventually(js, lambda: info(js, "D").num_ack_pending, 10)
    handled_at_return: list[int] = []
    drainer = threading.Thread(target=lambda: (sub.drain(), handled_at_return.append(len(got.seen))))
    drainer.start()
    go.set()
    drainer.join(WAIT)
    assert handled_at_return == [10]  # drain returned once the callback had them all
    assert got.seen == [(seq, 1) for seq in range(1, 11)]


def test_unsubscribe_removes_an_ephemeral_and_keeps_a_durable(js):
    add_stream(js, 1)
    ephemeral = js.subscribe("a.x", inactive_threshold=0.3)
    durable = js.subscribe("a.x", durable="D")
    name = ephemeral.consumer
    assert info(js, name).config.durable_name is None
    eventually(js, lambda: info(js, name).push_bound, True)
    ephemeral.unsubscribe()
    durable.unsubscribe()
    js.clock.advance(0.5)  # a server removes an unbound ephemeral after its inactive_threshold
    eventually(js, lambda: [c.name for c in js.consumers_info("S")], ["D"])


def test_an_unbound_ephemeral_goes_after_its_threshold_but_a_bound_one_stays(js):
    add_stream(js, 1)
    sub = js.subscribe("a.x", inactive_threshold=0.3)
    eventually(js, lambda: info(js, sub.consumer).push_bound, True)
    js.clock.advance(0.5)
    assert [c.name for c in js.consumers_info("S")] == [sub.consumer]  # bound: never idle
    assert meta(sub.next_msg(timeout=WAIT))[:2] == ("a.x", 1)
    sub.unsubscribe()


def test_ordered_consumer(js):
    add_stream(js, 3)
    sub = js.subscribe("a.x", ordered_consumer=True, idle_heartbeat=0.2)
    config = sub.consumer_info().config
    assert config.evolve(deliver_subject=None, name=None) == ConsumerConfig(
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.NONE,
        ack_wait=22 * 3600.0,
        max_deliver=1,
        filter_subject="a.x",
        replay_policy=ReplayPolicy.INSTANT,
        flow_control=True,
        idle_heartbeat=0.2,
        inactive_threshold=5.0,
        num_replicas=1,
        mem_storage=True,
    )
    msgs = [sub.next_msg(timeout=WAIT) for _ in range(3)]
    assert [(m.metadata.sequence.stream, m.metadata.sequence.consumer) for m in msgs] == [(1, 1), (2, 2), (3, 3)]
    lost = sub.consumer
    js.delete_consumer("S", lost)  # lost: the subscription makes a new consumer after seq 3
    for seq in range(4, 7):
        js.publish("a.x", b"m%d" % seq)
    msgs = [sub.next_msg(timeout=WAIT) for _ in range(3)]
    assert [(m.metadata.sequence.stream, m.metadata.sequence.consumer) for m in msgs] == [(4, 1), (5, 2), (6, 3)]
    assert [m.data for m in msgs] == [b"m4", b"m5", b"m6"]
    assert sub.consumer != lost
    assert sub.consumer_info().config.deliver_policy == DeliverPolicy.BY_START_SEQUENCE
    sub.unsubscribe()


def test_subscribe_arguments(jetspark_backend):
    js = jetspark_backend
    add_stream(js, 1)
    with pytest.raises(TypeError):
        js.subscribe("a.x", cb="not callable")
    with pytest.raises(TypeError):
        js.subscribe(7)
    with pytest.raises(ValueError):
        js.subscribe("a.x", durable="D", ordered_consumer=True)
    with pytest.raises(ValueError):
        js.subscribe("a.x", config=ConsumerConfig(durable_name="D"), ordered_consumer=True)
    with pytest.raises(SubscriptionError):
        js.subscribe("a.x", queue="G", durable="D")
    with api_error(10059, "stream not found"):
        js.subscribe("nowhere.x")
    sub = js.subscribe("a.x", durable="D")
    with pytest.raises(ValueError):
        sub.next_msg(timeout=-1)
    sub.unsubscribe()
    sub.unsubscribe()  # idempotent
    assert [c.name for c in js.consumers_info("S")] == ["D"]


def test_closing_the_handle_ends_its_subscriptions(jetspark_backend):
    js = jetspark_backend
    add_stream(js)
    other = jetspark.connect(js.url if js.is_server else js.path)
    got = Collector()
    durable = other.subscribe("a.x", durable="D", cb=got)
    ephemeral = other.subscribe("a.x", inactive_threshold=60.0)
    js.publish("a.x", b"m1")
    got.wait(1)
    eventually(js, lambda: (info(js, "D").push_bound, info(js, ephemeral.consumer).push_bound), (True, True))
    other.close()
    assert not durable._thread.is_alive()
    # Unbound (an ephemeral is then removed after its inactive_threshold).
    eventually(js, lambda: (info(js, "D").push_bound, info(js, ephemeral.consumer).push_bound), (None, None))


@pytest.mark.parametrize("backend", ["engine-file"], indirect=True)
def test_a_queue_group_across_processes(js, tmp_path):
    """Two processes on one store share the queue group's durable: each message to exactly one."""
    add_stream(js)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(js.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline() == "bound\n"
        # Only the child is a member: it gets these.
        for seq in range(1, 11):
            js.publish("a.x", b"m%d" % seq)
        child_seqs = [int(child.stdout.readline()) for _ in range(10)]
        assert child_seqs == list(range(1, 11))
        # Both are members: they share these.
        cond = threading.Condition()
        mine: list[int] = []
        theirs: list[int] = []

        def take(into: list[int], seq: int) -> None:
            with cond:
                into.append(seq)
                cond.notify_all()

        sub = js.subscribe("a.x", queue="G", cb=lambda msg: take(mine, msg.metadata.sequence.stream))
        reader = threading.Thread(target=lambda: [take(theirs, int(line)) for line in child.stdout], daemon=True)
        reader.start()
        for seq in range(11, 211):
            js.publish("a.x", b"m%d" % seq)
        with cond:
            assert cond.wait_for(lambda: len(mine) + len(theirs) >= 200, WAIT), (len(mine), len(theirs))
        child.stdin.close()  # the child drains and leaves
        assert child.wait(WAIT) == 0
        reader.join(WAIT)
        sub.drain()
        assert sorted(mine + theirs) == list(range(11, 211)), (len(mine), len(theirs))
        assert js.consumer_info("S", "G").ack_floor.stream_seq == 210
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


CHILD = """
import sys
import jetspark

with jetspark.connect(sys.argv[1]) as js:
    sub = js.subscribe("a.x", queue="G", cb=lambda msg: print(msg.metadata.sequence.stream, flush=True))
    print("bound", flush=True)
    sys.stdin.read()  # until the parent closes it
    sub.drain()
"""
