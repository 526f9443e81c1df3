"""Fixtures on the session's 3-node cluster (``cluster``, tests/conftest.py): jetspark's
nats:// backend and the oracle (nats-py's own API, tests/oracle.py) on every node's URL."""

from __future__ import annotations

import pytest

import jetspark
from tests.oracle import OracleJS

# Requests on a replicated stream wait for raft (a new stream's or consumer's leader
# election, a quorum's write), slower than on one server when the machine is loaded.
TIMEOUT = 15.0


def delete_stream_if_there(cluster, name: str) -> None:
    """A test's teardown: its stream deleted from the cluster when it is still there."""
    with jetspark.connect(cluster.url, timeout=TIMEOUT) as js:
        if name in js.stream_names():
            js.delete_stream(name)


@pytest.fixture
def js(cluster):
    handle = jetspark.connect(cluster.url, timeout=TIMEOUT)
    yield handle
    for name in handle.stream_names():  # tests leave no streams behind
        handle.delete_stream(name)
    handle.close()


@pytest.fixture
def oracle(cluster):
    with OracleJS(cluster.url) as o:
        yield o
