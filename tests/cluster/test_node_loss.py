"""An R3 stream keeps its quorum with one node down: a client that connects while a
follower (neither the stream's leader nor the meta leader) is down reads and appends as
before, and the node, restarted on its store, catches up.

Stopped gracefully, the follower announces its shutdown and every read works.  Killed
with SIGKILL, the meta leader still counts it online for minutes and may place a new
consumer (a range read's) on it, which then never answers: that case waits for retries
(issue 10, item 3); here a crash is checked with the verbs that create no consumer.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import jetspark
from jetspark import AckPolicy, RetentionPolicy
from tests.cluster.conftest import TIMEOUT, delete_stream_if_there

pytestmark = pytest.mark.cluster

S = "LOSS"
RETENTIONS = [RetentionPolicy.LIMITS, RetentionPolicy.INTEREST, RetentionPolicy.WORK_QUEUE]


def rows(start: int, n: int) -> pa.Table:
    """Rows for seqs start..start+n-1: subject loss.<q % 2>, data d<q>, msg id id-<q>."""
    return pa.table({
        "subject": [f"loss.{q % 2}" for q in range(start, start + n)],
        "data": [b"d%d" % q for q in range(start, start + n)],
        "msg_id": [f"id-{q}" for q in range(start, start + n)],
    })  # fmt: skip


def replica_messages(cluster, i: int) -> int:
    """How many messages node i's own replica of S holds (its /jsz)."""
    jsz = cluster.monitor(i, "/jsz?streams=true") or {}
    for acc in jsz.get("account_details") or []:
        for sd in acc.get("stream_detail") or []:
            if sd["name"] == S:
                return sd["state"]["messages"]
    raise AssertionError(f"node {i} holds no replica of {S}")


@pytest.fixture
def stream(cluster, request):
    """S (R3, file) on loss.>, durable 'spark' (explicit acks), seqs 1..100; (the follower to
    take down, the retention)."""
    try:
        with jetspark.connect(cluster.url, timeout=TIMEOUT) as js:
            js.add_stream(name=S, subjects=["loss.>"], retention=request.param, num_replicas=3)
            js.add_consumer(S, durable_name="spark", ack_policy=AckPolicy.EXPLICIT)
            assert js.publish_batch(rows(1, 100), stream=S).seqs.to_pylist() == list(range(1, 101))
        leaders = {cluster.stream_leader(S), cluster.leader()}
        yield next(i for i in range(cluster.size) if i not in leaders), request.param
    finally:
        delete_stream_if_there(cluster, S)


def append_more(js) -> None:
    """Rows 51..150 with their msg ids: 51..100 are duplicates, 101..150 new."""
    ack = js.publish_batch(rows(51, 100), stream=S)
    assert ack.seqs.to_pylist() == list(range(51, 151))
    assert ack.duplicate.to_pylist() == [True] * 50 + [False] * 50


def check_caught_up(cluster, follower: int) -> None:
    assert replica_messages(cluster, follower) == 150
    with jetspark.connect(cluster.node_url(follower), timeout=TIMEOUT) as js:
        assert js.stream_info(S).state.last_seq == 150


@pytest.mark.parametrize("stream", RETENTIONS, ids=[r.value for r in RETENTIONS], indirect=True)
def test_a_follower_stopped(cluster, stream):
    follower, retention = stream
    cluster.stop_node(follower)
    try:
        with jetspark.connect(cluster.url, timeout=TIMEOUT) as js:  # connects to one of the two left
            append_more(js)
            got = pa.Table.from_batches(list(js.read_batches(S, batch_size=64))).to_pylist()
            assert [(r["seq"], r["data"]) for r in got] == [(q, b"d%d" % q) for q in range(1, 151)]
            evens = pa.Table.from_batches(list(js.read_batches(S, 20, 60, subjects=["loss.0"]))).to_pylist()
            assert [r["seq"] for r in evens] == list(range(20, 61, 2))
            assert js.seq_for_bytes(S, 1, 150, 10**9) == 150
            sub = js.pull_subscribe_bind("spark", stream=S)
            msgs = sub.fetch(3, timeout=5)
            assert [m.metadata.sequence.stream for m in msgs] == [1, 2, 3]
            for m in msgs:
                m.ack_sync()
            assert js.consumer_info(S, "spark").ack_floor.stream_seq == 3
            assert [c.name for c in js.consumers_info(S)] == ["spark"]
    finally:
        cluster.restart(follower)  # returns once every node is current again
    assert replica_messages(cluster, follower) == (150 if retention == RetentionPolicy.LIMITS else 147)


@pytest.mark.parametrize("stream", [RetentionPolicy.LIMITS], ids=["limits"], indirect=True)
def test_a_follower_killed(cluster, stream):
    follower, _ = stream
    cluster.kill(follower)
    try:
        with jetspark.connect(cluster.url, timeout=TIMEOUT) as js:
            append_more(js)
            assert js.stream_info(S).state.messages == 150
            assert js.get_msg(S, 150).data == b"d150"
            # (Not the durable: the killed node may have led it, and its election takes longer.)
    finally:
        cluster.restart(follower)
    check_caught_up(cluster, follower)
