"""Push subscriptions and stream backups on the 3-node cluster (R3 streams and consumers).

The single server's contract (tests/contract/test_push.py, tests/contract/test_backup.py)
again where replication changes the path: a replicated push consumer's deliveries and
acks, a queue group's members on different nodes, a callback subscription through a
killed stream leader, and the server's snapshot and restore of a replicated stream.
"""

from __future__ import annotations

import threading

import pytest

import jetspark
from jetspark import AckPolicy
from tests.cluster.conftest import TIMEOUT
from tests.contract.consumer_support import settles

pytestmark = pytest.mark.cluster

S = "PB"
WAIT = 30.0  # for deliveries through raft on a loaded machine


class Collector:
    """A callback that records (stream seq, delivery count) and signals at ``n`` messages."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()

    def __call__(self, msg) -> None:
        with self.lock:
            self.seen.append((msg.metadata.sequence.stream, msg.metadata.num_delivered))
            if len({q for q, _ in self.seen}) >= self.n:
                self.done.set()


def test_a_push_subscription_on_an_r3_stream(cluster, js):
    js.add_stream(name=S, subjects=["pb.>"], num_replicas=3)
    got = Collector(200)
    sub = js.subscribe("pb.x", durable="D", cb=got, idle_heartbeat=1.0, flow_control=True)
    assert js.consumer_info(S, "D").config.num_replicas in (0, 3)  # the stream's replicas
    for q in range(1, 201):
        js.publish("pb.x", b"m%d" % q)
    assert got.done.wait(WAIT), len(got.seen)
    sub.drain()
    assert got.seen == [(q, 1) for q in range(1, 201)]  # in order, each once
    # Auto-acked after each callback, through the consumer's raft group.
    settles(
        lambda: (js.consumer_info(S, "D").ack_floor.stream_seq, js.consumer_info(S, "D").num_ack_pending),
        (200, 0),
        WAIT,
    )


def test_a_queue_group_with_members_on_different_nodes(cluster, js):
    js.add_stream(name=S, subjects=["pb.>"], num_replicas=3)
    seen: list[int] = []
    lock = threading.Lock()
    done = threading.Event()

    def cb(msg) -> None:
        with lock:
            seen.append(msg.metadata.sequence.stream)
            if len(seen) >= 150:
                done.set()

    members = [jetspark.connect(cluster.node_url(i), timeout=TIMEOUT) for i in range(cluster.size)]
    try:
        subs = [m.subscribe("pb.x", queue="G", cb=cb) for m in members]
        for q in range(1, 151):
            js.publish("pb.x", b"m%d" % q)
        assert done.wait(WAIT), len(seen)
        for sub in subs:
            sub.drain()
    finally:
        for m in members:
            m.close()
    assert sorted(seen) == list(range(1, 151))  # every message to exactly one member
    settles(lambda: js.consumer_info(S, "G").ack_floor.stream_seq, 150, WAIT)


def test_a_callback_subscription_through_a_killed_stream_leader(cluster, js):
    # The consumer is R3: its new leader goes on delivering where the old one stopped,
    # and the subscription, its callback thread and the acks go on with it.
    js.add_stream(name=S, subjects=["pb.>"], num_replicas=3)
    got = Collector(300)
    sub = js.subscribe("pb.x", durable="D", cb=got, idle_heartbeat=1.0)
    for q in range(1, 101):
        js.publish("pb.x", b"m%d" % q)
    settles(lambda: len({q for q, _ in got.seen}) >= 100, True, WAIT)
    leader = cluster.stream_leader(S)
    others = ",".join(cluster.node_url(i) for i in range(cluster.size) if i != leader)
    cluster.kill(leader)
    try:
        with jetspark.connect(others, timeout=2.0, retry_budget=60.0) as publisher:
            for q in range(101, 301):
                publisher.publish("pb.x", b"m%d" % q)  # retried through the election
        assert got.done.wait(60), sorted({q for q, _ in got.seen})[-5:]
    finally:
        cluster.restart(leader)
    sub.drain()
    # Every message reached the callback; one delivered around the kill may come twice
    # (its ack lost with the old leader), never none.
    assert sorted({q for q, _ in got.seen}) == list(range(1, 301))
    settles(lambda: js.consumer_info(S, "D").ack_floor.stream_seq, 300, WAIT)


def placed_on(js) -> list:
    c = js.stream_info(S).cluster
    return sorted([c.leader] + [p.name for p in c.replicas or []]) if c is not None and c.leader else []


def test_backup_and_restore_of_an_r3_stream(cluster, js, tmp_path):
    js.add_stream(name=S, subjects=["pb.>"], num_replicas=3)
    js.add_consumer(S, durable_name="C", ack_policy=AckPolicy.EXPLICIT, ack_wait=600.0)
    for q in range(1, 301):
        js.publish(f"pb.{q % 3}", b"m%d" % q, headers={"Nats-Msg-Id": f"id-{q}"} if q % 2 else None)
    js.delete_msg(S, 7)
    for m in js.pull_subscribe_bind("C", S).fetch(10, timeout=5)[:6]:  # 1-6 acked, 8-11 not
        m.ack_sync()
    settles(lambda: js.consumer_info(S, "C").ack_floor.stream_seq, 7, WAIT)  # over the deleted 7
    before = js.stream_info(S)
    info = js.backup_stream(S, tmp_path / "bk")
    assert (info.stream, info.consumers, info.state.last_seq) == (S, 1, 300)
    js.delete_stream(S)
    restored = js.restore_stream(tmp_path / "bk")
    assert restored.config.num_replicas == 3
    assert (restored.state.messages, restored.state.first_seq, restored.state.last_seq) == (
        before.state.messages,
        1,
        300,
    )
    # restore_stream returns once the consumer is back with a leader (a cluster places it
    # after answering the restore).  A replicated consumer comes back at its ack floor: the
    # deliveries not acknowledged at the backup (8-11) are delivered again, none lost.
    again = js.consumer_info(S, "C")
    assert again.cluster.leader in cluster.names
    assert (again.ack_floor.stream_seq, again.delivered.stream_seq, again.num_ack_pending) == (7, 7, 0)
    assert [m.metadata.sequence.stream for m in js.pull_subscribe_bind("C", S).fetch(4, timeout=5)] == [8, 9, 10, 11]
    settles(lambda: placed_on(js), sorted(cluster.names), WAIT)  # three replicas again, a leader among them
    assert [js.get_msg(S, q).data for q in (1, 150, 300)] == [b"m1", b"m150", b"m300"]
    with pytest.raises(jetspark.MsgNotFoundError):
        js.get_msg(S, 7)
    assert js.publish("pb.0", b"next").seq == 301
