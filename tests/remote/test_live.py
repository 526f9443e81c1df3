"""Continuous pulls on a server, what only a server has: idle heartbeats, missing ones, a
restart.  The behaviour both backends share is tests/contract/test_live_pull.py's.

One nats-server of its own for the module: the tests stop it (SIGSTOP, to silence its
heartbeats) and restart it.  Nothing is timed: the guards only end a hang.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

import jetspark
from jetspark.errors import FetchTimeoutError, NoHeartbeatError
from tests.servers import NatsServer

pytestmark = pytest.mark.server
GUARD = 30


@pytest.fixture(scope="module")
def own_server():
    s = NatsServer().start()
    yield s
    s.stop()


@pytest.fixture
def js(own_server):
    with jetspark.connect(own_server.url) as js:
        js.add_stream(name="S", subjects=["s.*"])
        js.add_consumer("S", durable_name="D")
        yield js
        for name in js.stream_names():
            js.delete_stream(name)


def test_idle_heartbeats_keep_a_waiting_pull_alive(js):
    """Nothing to deliver for longer than 2 x heartbeat and than a request's expiry: the
    heartbeats (and the renewed request) keep next() waiting without an error."""
    sub = js.pull_subscribe_bind("D", stream="S")
    with sub.messages(expires=1, heartbeat=0.2) as it:
        with pytest.raises(FetchTimeoutError):
            it.next(timeout=1.3)
        js.publish("s.x", b"late")
        assert it.next(timeout=GUARD).data == b"late"


def test_missing_heartbeats_are_reported_then_the_pull_starts_afresh(js, own_server):
    """The server stopped (SIGSTOP): no heartbeat comes.  next() raises NoHeartbeatError,
    consume reports it to error_cb; afterwards the iterator pulls afresh."""
    sub = js.pull_subscribe_bind("D", stream="S")
    errors, reported = [], threading.Event()

    def on_error(exc):
        errors.append(exc)
        reported.set()

    it = sub.messages(expires=2, heartbeat=0.25)
    with pytest.raises(FetchTimeoutError):
        it.next(timeout=0.05)  # its pull request is out
    ctx = sub.consume(lambda msg: None, expires=2, heartbeat=0.25, error_cb=on_error)
    pid = own_server.proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(NoHeartbeatError):
            it.next(timeout=GUARD)
        assert reported.wait(GUARD)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert isinstance(errors[0], NoHeartbeatError), errors
    assert not ctx.closed  # a missing heartbeat does not end consuming
    ctx.stop()
    assert ctx.wait(GUARD)
    js.publish("s.x", b"a")
    assert it.next(timeout=GUARD).data == b"a"
    it.stop()


def test_a_pull_goes_on_after_the_server_restarts(js, own_server):
    sub = js.pull_subscribe_bind("D", stream="S")
    with sub.messages(max_messages=10) as it:
        js.publish("s.x", b"before")
        assert it.next(timeout=GUARD).data == b"before"
        own_server.kill()  # SIGTERM: it answers the waiting request with 409 Server Shutdown
        own_server.start()  # the same store: the stream and consumer come back
        js.publish("s.x", b"after")  # waits for the reconnect
        assert it.next(timeout=GUARD).data == b"after"
