"""Fixtures for the Spark connector's tests.

One SparkSession serves the whole run (``local[2,2]``: two cores, and a task
may fail once and be retried, which the exactly-once tests rely on).  Streams
are driven with ``trigger(availableNow=True)`` + ``awaitTermination()``: a
query ends when it has read what was there when it started, so nothing sleeps
or polls.

Every test that takes ``store`` runs twice, once per backend:

- ``engine``: a fresh store directory (``store.path`` is the directory);
- ``server``: a real nats-server (``store.path`` is its ``nats://`` URL), the
  session's ``server`` (tests/conftest.py), emptied after each test but for
  the one stream it keeps (``KEEPER``).
"""

from __future__ import annotations

import time

import pytest

import jetspark
from tests.conftest import drop_streams
from tests.connector.support import Clock, Store


@pytest.fixture(scope="session")
def spark():
    from jetspark.connector.session import local_session

    session = local_session("jetspark-tests", master="local[2,2]")
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


@pytest.fixture(params=["engine", "server"])
def store(request, tmp_path, spark):
    if request.param == "engine":
        path = str(tmp_path / "store")
    else:
        path = request.getfixturevalue("server").url
    js = jetspark.connect(path)
    yield Store(path, js, tmp_path, spark, backend=request.param)
    if request.param == "server":
        drop_streams(js)
    js.close()


@pytest.fixture
def clocked(store):
    """A second handle on an engine store whose publishes carry chosen timestamps:
    ``clocked.clock.at(seconds)`` sets its clock to support.BASE + seconds."""
    assert store.backend == "engine", "a nats-server stamps messages with its own clock"
    handle = jetspark.connect(store.path, clock=Clock())
    yield handle
    handle.close()


@pytest.fixture
def timeline(store, request):
    """``timeline(stream_subjects, n)`` publishes n messages ``m<i>`` round-robin over the
    subjects at distinct, increasing times and returns each one's stored time (from
    get_msg).  On the engine, message i is at support.BASE + i s + i µs (an injected
    clock); a nats-server stamps its own time, so the messages are published at least
    2 ms apart, which keeps every message in a millisecond of its own."""

    def publish(stream_subjects, n: int) -> list:
        subjects = [stream_subjects] if isinstance(stream_subjects, str) else list(stream_subjects)
        acks = []
        if store.backend == "engine":
            clocked = request.getfixturevalue("clocked")
            for i in range(n):
                clocked.clock.at(i + i / 1_000_000)
                acks.append(clocked.publish(subjects[i % len(subjects)], f"m{i}".encode()))
        else:
            for i in range(n):
                if i:
                    time.sleep(0.002)
                acks.append(store.js.publish(subjects[i % len(subjects)], f"m{i}".encode()))
        return [store.js.get_msg(a.stream, a.seq).time for a in acks]

    return publish
