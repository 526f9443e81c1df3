"""The sink's registry of committed batches (jetspark/connector/registry.py) on the
3-node cluster: replicated like the streams it guards, so no node is a single point of
failure of jetspark's own making."""

from __future__ import annotations

import pytest

import jetspark
from jetspark.connector import registry
from jetspark.connector.options import writer_options
from jetspark.errors import OptionError

pytestmark = pytest.mark.cluster


def replicas(js) -> int:
    return js.stream_info(registry.REGISTRY_STREAM).config.num_replicas


def test_created_with_three_replicas(js):
    # (Its leader killed under a running query: tests/connector/test_cluster_streaming.py.)
    registry.commit_batch(js, "q-1", 7)
    assert replicas(js) == 3 and registry.last_batch(js, "q-1") == 7


def test_an_explicit_count_and_an_older_registry_scaled_up(cluster, js):
    registry.commit_batch(js, "q-2", 1, replicas=1)
    assert replicas(js) == 1  # as asked
    js.delete_stream(registry.REGISTRY_STREAM)
    js.add_stream(registry.registry_config(1))  # as an older jetspark made it
    # The scaled stream answers nothing while its new replicas join: short requests, retried.
    with jetspark.connect(cluster.url, timeout=2.0, retry_budget=60) as quick:
        registry.commit_batch(quick, "q-3", 1)
        assert replicas(quick) == 3 and registry.last_batch(quick, "q-3") == 1


def test_one_replica_on_a_single_server_and_the_engine(server, tmp_path):
    for url in (server.url, str(tmp_path / "store")):
        with jetspark.connect(url) as js:
            registry.commit_batch(js, "q-4", 2)
            assert replicas(js) == 1 and registry.last_batch(js, "q-4") == 2
            js.delete_stream(registry.REGISTRY_STREAM)


@pytest.mark.parametrize("raw", ["0", "6", "three", "-1", "2.5"])
def test_the_option_refuses_what_is_not_a_replica_count(raw):
    with pytest.raises(OptionError, match="registryReplicas must be a number of replicas from 1 to 5"):
        writer_options({"store": "nats://127.0.0.1:4222", "registryReplicas": raw})
    assert writer_options({"store": "x", "registryReplicas": "2"}).registry_replicas == 2
