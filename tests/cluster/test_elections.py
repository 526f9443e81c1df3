"""Calls made while the cluster cannot answer (a leader election after a SIGKILL, a node
the meta leader still counts online, a cold cluster) are retried within the handle's
``retry_budget`` (jetspark/remote/retry.py) and answer exactly as without the fault."""

from __future__ import annotations

import logging
import threading
import time

import pyarrow as pa
import pytest

import jetspark
from jetspark import AckPolicy
from jetspark.errors import NoHeartbeatError, RequestTimeoutError
from tests.cluster.conftest import TIMEOUT, delete_stream_if_there
from tests.oracle import stored
from tests.servers import NatsCluster

pytestmark = pytest.mark.cluster

S = "ELECT"
# Short per-request timeouts, so that a request to a dead leader is given up on (and
# retried) quickly; the budget is what lets the calls through an election.
FAST = dict(timeout=2.0, retry_budget=60.0)


def rows(start: int, n: int) -> pa.Table:
    return pa.table({
        "subject": [f"el.{q % 3}" for q in range(start, start + n)],
        "data": [b"d%d" % q for q in range(start, start + n)],
        "msg_id": [f"id-{q}" for q in range(start, start + n)],
    })  # fmt: skip


@pytest.fixture
def stream(cluster):
    """S (R3) on el.>, durable 'spark', seqs 1..300."""
    with jetspark.connect(cluster.url, timeout=TIMEOUT) as js:
        js.add_stream(name=S, subjects=["el.>"], num_replicas=3)
        js.add_consumer(S, durable_name="spark", ack_policy=AckPolicy.EXPLICIT)
        js.publish_batch(rows(1, 300), stream=S)
    try:
        yield
    finally:
        delete_stream_if_there(cluster, S)


def expected(lo: int, hi: int) -> list:
    return [(q, f"el.{q % 3}", b"d%d" % q) for q in range(lo, hi + 1)]


def got(table_or_batches) -> list:
    t = (
        pa.Table.from_batches(list(table_or_batches))
        if not isinstance(table_or_batches, pa.Table)
        else table_or_batches
    )
    return [(r["seq"], r["subject"], r["data"]) for r in t.to_pylist()]


def test_every_verb_through_the_stream_leaders_election(cluster, stream):
    leader = cluster.stream_leader(S)
    # hasty is connected to a node that stays up: its call meets the election itself, not the
    # loss of its own connection (a ServerConnectionError, a race with the kill's EOF).
    survivor = cluster.node_url(next(i for i in range(cluster.size) if i != leader))
    with jetspark.connect(cluster.url, **FAST) as js, jetspark.connect(survivor, timeout=1.0, retry_budget=0) as hasty:
        assert (
            js.stream_info(S).state.last_seq == 300 and hasty.stream_info(S).state.last_seq == 300
        )  # connected before the kill
        cluster.kill(leader)
        try:
            # Without a budget, a call that may have taken effect says so and is not repeated.
            with pytest.raises(RequestTimeoutError, match="purge_stream .* may have taken effect .* leader election"):
                hasty.purge_stream(S, subject="el.nothing")
            # Made at once: the stream has no leader until the two left elect one.
            assert js.stream_info(S).state.messages == 300
            assert js.get_msg(S, 7).data == b"d7"
            assert js.publish("el.0", b"new", headers={"Nats-Msg-Id": "x-1"}).seq == 301
            assert js.publish("el.1", b"plain").seq == 302  # no responders, then a leader: retried
            assert got(js.read_batches(S, 1, 300, batch_size=64)) == expected(1, 300)
            assert js.seq_for_bytes(S, 1, 302, 10**9) == 302
            assert js.advance_ack_floor(S, "spark", 150).stream_seq == 150
            assert js.consumer_info(S, "spark").num_pending == 152
            assert [m.metadata.sequence.stream for m in js.ordered_consumer(S, start_seq=299)] == [299, 300, 301, 302]
        finally:
            cluster.restart(leader)
        assert js.publish("el.0", b"new", headers={"Nats-Msg-Id": "x-1"}).duplicate


def test_reader_consumers_placed_on_a_dead_node_are_replaced(cluster, stream, caplog):
    """A SIGKILLed node stays "online" to the meta leader, which keeps placing the range
    readers' (R1) consumers on it one time in three: those never answer, and the read
    starts over on a fresh consumer.  Reads go on until that has happened at least once."""
    victim = next(i for i in range(cluster.size) if i not in {cluster.leader(), cluster.stream_leader(S)})
    caplog.set_level(logging.INFO, logger="jetspark.remote")
    with jetspark.connect(",".join(cluster.node_url(i) for i in range(cluster.size) if i != victim), **FAST) as js:
        cluster.kill(victim)
        try:
            for _ in range(30):  # P(no reader placed on the dead node in 30) = (2/3)**30 ~ 5e-6
                assert got(js.read_batches(S, 101, 250, batch_size=50)) == expected(101, 250)
                if any("retrying" in r.getMessage() for r in caplog.records):
                    break
            else:
                pytest.fail("no read met the dead node: the retry path was not exercised")
            assert {q: m.data for q, m in stored(js, S).items()} == {
                q: b"d%d" % q for q in range(1, 301)
            }  # get_msg, retried too
        finally:
            cluster.restart(victim)


def test_the_first_requests_to_a_cold_cluster(tmp_path):
    """A cluster whose nodes are listening but whose meta leader may not be elected yet."""
    cold = NatsCluster(base=str(tmp_path)).start(ready=False)
    try:
        with jetspark.connect(cold.url, **FAST) as js:
            js.add_stream(name="COLD", subjects=["cold.>"], num_replicas=3)
            assert js.publish_batch(
                rows(1, 20).set_column(0, "subject", pa.array(["cold.a"] * 20)), stream="COLD"
            ).seqs.to_pylist() == list(range(1, 21))
            assert [r["data"] for r in pa.Table.from_batches(list(js.read_batches("COLD"))).to_pylist()] == [
                b"d%d" % q for q in range(1, 21)
            ]
    finally:
        cold.stop()


def restart_without_the_stream(cluster, leader: int) -> None:
    """Delete S, then restart the killed node: catching up a replica cut off mid-batch was
    seen to stall for minutes under load (its monitoring silent), and the tests that use
    this are about the publishes (tests/cluster/test_node_loss.py restarts nodes)."""
    delete_stream_if_there(cluster, S)
    cluster.restart(leader)


def consumer_leader(cluster, js) -> int:
    """The index of the node leading the durable 'spark'."""
    return cluster.names.index(js.consumer_info(S, "spark").cluster.leader)


def test_publish_batch_with_msg_ids_through_a_leader_kill(cluster, stream, caplog):
    """The stream's leader killed while a batch with msg ids is being published: rows no
    leader took are sent again, unanswered ones too (the stream deduplicates them), and
    every row is stored exactly once."""
    n = 20_000
    caplog.set_level(logging.INFO, logger="jetspark.remote")
    leader = cluster.stream_leader(S)
    killed = threading.Event()

    def kill_once_rows_land() -> None:
        # The batch is under way once the leader holds rows past the fixture's 300.
        while not killed.is_set():
            jsz = cluster.monitor(leader, "/jsz?streams=true") or {}
            held = [
                sd["state"]["last_seq"]
                for acc in jsz.get("account_details") or []
                for sd in acc.get("stream_detail") or []
                if sd["name"] == S
            ]
            if held and held[0] > 300 + 1000:
                cluster.kill(leader)
                killed.set()
            time.sleep(0.005)

    table = pa.table({"subject": [f"el.{q % 3}" for q in range(n)], "data": [b"b%d" % q for q in range(n)]})
    try:
        with jetspark.connect(cluster.url, **FAST) as js:
            killer = threading.Thread(target=kill_once_rows_land, daemon=True)
            killer.start()
            try:
                ack = js.publish_batch(table, stream=S, msg_id_prefix="batch-")
            finally:
                killed.set()
                killer.join()
            assert any("publish_batch" in r.getMessage() and "retrying" in r.getMessage() for r in caplog.records), (
                "the kill came too late"
            )
            seqs = ack.seqs.to_pylist()
            assert len(set(seqs)) == n and min(seqs) > 300
            batch = got(js.read_batches(S, 301))  # from the two nodes left
        assert sorted(data for _, _, data in batch) == sorted(b"b%d" % q for q in range(n))  # each row once
        assert {seq: data for seq, _, data in batch} == {
            seqs[q]: b"b%d" % q for q in range(n)
        }  # where the BatchAck says
    finally:
        restart_without_the_stream(cluster, leader)


def test_publish_async_through_a_leader_kill(cluster, stream):
    """publish_async while the stream's leader is killed: every future ends (a PubAck, or
    the typed error of a message the leader did not answer), none hangs, and publishing
    the failed ones again with their msg ids stores each message exactly once."""
    from jetspark.errors import JetSparkError

    n = 1000
    leader = cluster.stream_leader(S)
    headers = [{"Nats-Msg-Id": f"async-{q}"} for q in range(2 * n)]
    try:
        with jetspark.connect(cluster.url, **FAST) as js:
            first = [js.publish_async(f"el.{q % 3}", b"a%d" % q, headers=headers[q]) for q in range(n)]
            js.publish_async_completed(timeout=60)
            assert all(f.result().seq > 300 for f in first)
            cluster.kill(leader)
            second = [js.publish_async(f"el.{q % 3}", b"a%d" % q, headers=headers[q]) for q in range(n, 2 * n)]
            js.publish_async_completed(timeout=60)  # raises if any future is still open
            failed = []
            for q, f in zip(range(n, 2 * n), second):
                err = f.exception()
                if err is not None:
                    assert isinstance(err, JetSparkError), repr(err)  # typed, as publish raises
                    failed.append(q)
            for q in failed:  # publish retries through the election; the msg id keeps it single
                js.publish(f"el.{q % 3}", b"a%d" % q, headers=headers[q])
            stored_data = [data for _, _, data in got(js.read_batches(S, 301))]
        assert sorted(stored_data) == sorted(b"a%d" % q for q in range(2 * n))  # each once
    finally:
        restart_without_the_stream(cluster, leader)


def test_a_fetch_through_the_consumers_election_waits_for_its_new_leader(cluster, stream):
    """A pull request to a consumer with no leader finds no responder (503), as to one that
    does not exist: the fetch asks the consumer's info which it is, and pulls again."""
    with jetspark.connect(cluster.url, **FAST) as js:
        leader = consumer_leader(cluster, js)
        cluster.kill(leader)
        try:
            msgs = js.pull_subscribe_bind("spark", S).fetch(5, timeout=20)
            assert [m.metadata.sequence.stream for m in msgs] == [1, 2, 3, 4, 5]
        finally:
            cluster.restart(leader)


def test_a_continuous_pull_through_the_consumers_election(cluster, stream):
    """messages() across the consumer leader's death: the silence of the election is a
    NoHeartbeatError from next(), after which the iterator pulls afresh; the new leader's
    deliveries (and redeliveries of what the old one sent unacked) reach it, every message,
    none missing."""
    with jetspark.connect(cluster.url, **FAST) as js:
        leader = consumer_leader(cluster, js)
        seen = set()
        with js.pull_subscribe_bind("spark", S).messages(max_messages=50, heartbeat=1.0) as it:
            for _ in range(100):
                m = it.next(timeout=20)
                seen.add(m.metadata.sequence.stream)
                m.ack()
            cluster.kill(leader)
            missed = 0
            try:
                while len(seen) < 300:
                    try:
                        m = it.next(timeout=30)
                    except NoHeartbeatError:  # the election's silence, said as nats.go says it;
                        missed += 1  # the next call pulls afresh
                        assert missed < 20, "no new leader delivered"
                        continue
                    seen.add(m.metadata.sequence.stream)
                    m.ack()
            finally:
                cluster.restart(leader)
        assert seen == set(range(1, 301))
