"""Fixtures for the nats:// backend: real nats-servers started on free loopback ports.

``server`` (tests/conftest.py) is one JetStream server for the session; tests that stop a server
or need authentication or TLS start their own with ``start_server(*args)``.
"""

from __future__ import annotations

import uuid

import pytest

import jetspark
from tests.conftest import drop_streams
from tests.servers import NatsServer

pytestmark = pytest.mark.server


@pytest.fixture
def start_server():
    started = []

    def start(*args: str) -> NatsServer:
        s = NatsServer(*args).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def js(server):
    handle = jetspark.connect(server.url, timeout=3)
    yield handle
    if not handle._closed:
        drop_streams(handle)
        handle.close()


@pytest.fixture
def name():
    """A fresh stream name per call (nats-server answers a delete before its files are gone)."""
    return lambda prefix="S": f"{prefix}{uuid.uuid4().hex[:10].upper()}"


@pytest.fixture
def engine(tmp_path):
    handle = jetspark.connect(tmp_path / "store")
    yield handle
    for n in handle.stream_names():
        handle.delete_stream(n)
    handle.close()
