"""StreamInfo.cluster and ConsumerInfo.cluster on the 3-node cluster, as nats-py reports them."""

from __future__ import annotations

import pytest

from jetspark import AckPolicy
from tests.contract.consumer_support import settles

pytestmark = pytest.mark.cluster


def test_an_r3_stream_and_its_durable_name_their_leader_and_replicas(cluster, js, oracle):
    js.add_stream(name="CL", subjects=["cl.>"], num_replicas=3)
    js.add_consumer("CL", durable_name="D", ack_policy=AckPolicy.EXPLICIT)
    js.publish("cl.a", b"x")
    info = js.stream_info("CL").cluster
    assert info.name == cluster.name
    assert info.leader == cluster.names[cluster.stream_leader("CL")]
    assert sorted([info.leader] + [p.name for p in info.replicas]) == sorted(cluster.names)
    # A replica of a stream made a moment ago can report current=False until its raft
    # group has caught up (seen once in a CI run), so that waits.
    settles(
        lambda: all(
            p.current and not p.offline and p.active is not None for p in js.stream_info("CL").cluster.replicas
        ),
        True,
        timeout=10,
    )
    assert info.leader_since is not None
    seen = oracle.stream_info("CL").cluster
    assert (seen.name, seen.leader, sorted(p.name for p in seen.replicas)) == (
        info.name,
        info.leader,
        sorted(p.name for p in info.replicas),
    )

    consumer = js.consumer_info("CL", "D").cluster
    assert consumer.name == cluster.name and consumer.leader in cluster.names
    assert sorted([consumer.leader] + [p.name for p in consumer.replicas]) == sorted(cluster.names)
    assert [c.cluster.leader for c in js.consumers_info("CL")] == [consumer.leader]


def test_the_cli_shows_where_a_stream_and_a_consumer_live(cluster, js, tmp_path):
    from tests.cli.conftest import Cli

    cli = Cli(tmp_path / "unused")
    js.add_stream(name="CR", subjects=["cr.>"], num_replicas=3)
    js.add_consumer("CR", durable_name="D", ack_policy=AckPolicy.EXPLICIT)
    leader = cluster.names[cluster.stream_leader("CR")]
    out = cli("--server", cluster.url, "stream", "info", "CR").stdout
    assert "Cluster Information:" in out and f"Name: {cluster.name}" in out and f"Leader: {leader}" in out
    assert out.count("Replica: ") == 2 and ", current, seen " in out
    out = cli("--server", cluster.url, "consumer", "info", "CR", "D").stdout
    assert "Cluster Information:" in out and out.count("Replica: ") == 2
    report = cli("--server", cluster.url, "stream", "report").stdout
    assert "Replicas" in report
    assert f"{leader}*" in report and all(n in report for n in cluster.names)
    row = cli.json("--server", cluster.url, "stream", "report")[0]
    assert row["replicas"] == 3 and row["cluster"].startswith(f"{leader}*")
