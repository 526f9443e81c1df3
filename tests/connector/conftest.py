"""Fixtures for the Spark connector's tests.

One SparkSession serves the whole run (``local[2,2]``: two cores, and a task
may fail once and be retried, which the exactly-once tests rely on).  Every
test gets a fresh store directory with an open handle.  Streams are driven
with ``trigger(availableNow=True)`` + ``awaitTermination()``: a query ends
when it has read what was there when it started, so nothing sleeps or polls.
"""

from __future__ import annotations

import pytest

import jetspark
from tests.connector.support import Clock, Store


@pytest.fixture(scope="session")
def spark():
    from jetspark.connector.session import local_session

    session = local_session("jetspark-tests", master="local[2,2]")
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


@pytest.fixture
def store(tmp_path, spark):
    path = tmp_path / "store"
    js = jetspark.connect(path)
    yield Store(str(path), js, tmp_path, spark)
    js.close()


@pytest.fixture
def clocked(store):
    """A second handle on the store whose publishes carry chosen timestamps:
    ``clocked.clock.at(seconds)`` sets its clock to support.BASE + seconds."""
    handle = jetspark.connect(store.path, clock=Clock())
    yield handle
    handle.close()
