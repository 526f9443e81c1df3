"""Work-queue reads through pipelined direct gets on an R3 stream (jetspark/remote/direct.py):
every replica answers direct gets, so the answers to the windows asked for at once come from
different nodes and interleave on the connection; the read returns them in sequence order.
Windows are made small (16 sequences, 4 in flight) so a few hundred messages span many."""

from __future__ import annotations

import pyarrow as pa
import pytest

import jetspark
from jetspark import AckPolicy, RetentionPolicy
from jetspark.remote import direct
from tests.cluster.conftest import TIMEOUT, delete_stream_if_there

pytestmark = pytest.mark.cluster

S = "DIRECT3"
N = 600
GONE = {7, 8, 9, *range(100, 140), 333, 600}


@pytest.fixture
def stream(cluster, monkeypatch):
    """S (R3, work queue, allow_direct) with its durable, seqs 1..N on d.<q % 3> (payload p<q>),
    the GONE ones deleted."""
    monkeypatch.setattr(direct, "DIRECT_BATCH", 16)
    monkeypatch.setattr(direct, "DIRECT_IN_FLIGHT", 4)
    with jetspark.connect(cluster.url, timeout=TIMEOUT) as js:
        js.add_stream(name=S, subjects=["d.>"], retention=RetentionPolicy.WORK_QUEUE, allow_direct=True, num_replicas=3)
        js.add_consumer(S, durable_name="spark", ack_policy=AckPolicy.EXPLICIT)
        rows = pa.table(
            {"subject": [f"d.{q % 3}" for q in range(1, N + 1)], "data": [b"p%d" % q for q in range(1, N + 1)]}
        )
        assert js.publish_batch(rows, stream=S).seqs.to_pylist() == list(range(1, N + 1))
        for q in sorted(GONE):
            js.delete_msg(S, q)
    try:
        yield
    finally:
        delete_stream_if_there(cluster, S)


def read(js, *args, **kw) -> list[tuple[int, str, bytes]]:
    out = []
    for b in js.read_batches(S, *args, **kw):
        out += zip(b.column("seq").to_pylist(), b.column("subject").to_pylist(), b.column("data").to_pylist())
    return out


def want(seqs) -> list[tuple[int, str, bytes]]:
    return [(q, f"d.{q % 3}", b"p%d" % q) for q in seqs if q not in GONE]


def test_answers_from_every_replica_come_out_in_sequence_order(cluster, stream):
    for i in range(cluster.size):  # through each node
        with jetspark.connect(cluster.node_url(i), timeout=TIMEOUT) as js:
            assert read(js, batch_size=45) == want(range(1, N + 1)), i
            assert read(js, 90, 400, subjects=["d.1"]) == want(q for q in range(90, 401) if q % 3 == 1)
            assert read(js, 5, None, subjects=["d.0", "d.2"]) == want(q for q in range(5, N + 1) if q % 3 != 1)
            assert [c.name for c in js.consumers_info(S)] == ["spark"]


def test_a_follower_stopped_in_the_middle_of_a_read(cluster, stream):
    follower = next(i for i in range(cluster.size) if i not in (cluster.stream_leader(S), cluster.leader()))
    node = next(i for i in range(cluster.size) if i != follower)
    with jetspark.connect(cluster.node_url(node), timeout=TIMEOUT) as js:
        it = js.read_batches(S, batch_size=100)
        first = next(it)
        got = list(zip(*(first.column(c).to_pylist() for c in ("seq", "subject", "data"))))
        assert len(got) == 100
        cluster.stop_node(follower)  # its answers to the windows in flight may never come
        try:
            for b in it:
                got += zip(b.column("seq").to_pylist(), b.column("subject").to_pylist(), b.column("data").to_pylist())
        finally:
            cluster.restart(follower)
    assert got == want(range(1, N + 1))


def test_the_stream_leader_killed_in_the_middle_of_a_read(cluster, stream):
    # Direct gets need no leader (every replica answers), but the answers the killed node
    # owed never come: those windows are asked for again after the timeout.
    leader = cluster.stream_leader(S)
    node = next(i for i in range(cluster.size) if i != leader)
    with jetspark.connect(cluster.node_url(node), timeout=2.0) as js:
        it = js.read_batches(S, batch_size=100)
        got = [tuple(r.values()) for r in next(it).select(["seq", "subject", "data"]).to_pylist()]
        cluster.kill(leader)
        try:
            for b in it:
                got += [tuple(r.values()) for r in b.select(["seq", "subject", "data"]).to_pylist()]
        finally:
            cluster.restart(leader)
    assert got == want(range(1, N + 1))
