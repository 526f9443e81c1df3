"""A durable's ConsumerInfo across a restart: a nats-server stopped and started again on its store,
an engine store closed and reopened (docs/semantics.md §6, docs/reference/differences-nats-server.md).

Both keep a durable's sequences (``delivered``, ``ack_floor``), its counts and its config; the
engine also keeps the two ``last_active`` times, which nats-server v2.15.1 answers as None after a
restart.  Off the happy path: a SIGKILL of the server right after acks, and of a process holding an
engine store while it acks.  The server's own answer is the reference (the oracle, nats-py's API on a
server of this module's own: the tests restart it, so never the session's shared one).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import jetspark
from jetspark.api import AckPolicy, ConsumerInfo
from jetspark.errors import FetchTimeoutError
from tests.conftest import FakeClock
from tests.oracle import OracleJS
from tests.servers import NatsServer

MESSAGES = 10
FETCHED = 6
ACKED = [1, 2, 3, 5]  # stream seqs: the floor moves to 3, 5 is acked above it


def _durable_with_acks(js) -> ConsumerInfo:
    """Stream S (file storage) of MESSAGES, durable D fetched FETCHED and acked ACKED (each ack_sync)."""
    js.add_stream(name="S", subjects=["s.*"], storage="file")
    for i in range(MESSAGES):
        js.publish(f"s.{i % 3}", b"m%d" % i)
    js.add_consumer("S", durable_name="D", ack_policy=AckPolicy.EXPLICIT, ack_wait=60, description="restart")
    msgs = js.pull_subscribe_bind(stream="S", durable="D").fetch(FETCHED, timeout=5)
    assert [m.metadata.sequence.stream for m in msgs] == list(range(1, FETCHED + 1))
    for m in msgs:
        if m.metadata.sequence.stream in ACKED:
            m.ack_sync()
    return js.consumer_info("S", "D")


def _kept(info: ConsumerInfo) -> dict:
    """What both backends keep across a restart, the times left out."""
    return {
        "delivered": (info.delivered.consumer_seq, info.delivered.stream_seq),
        "ack_floor": (info.ack_floor.consumer_seq, info.ack_floor.stream_seq),
        "num_pending": info.num_pending,
        "num_ack_pending": info.num_ack_pending,
        "num_redelivered": info.num_redelivered,
        "config": info.config,
    }


@pytest.fixture
def own_server():
    """A nats-server these tests may stop, kill and start again (stopped and removed at the end)."""
    server = NatsServer().start()
    yield server
    server.stop()


def _sigkill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL


def test_after_a_restart_both_keep_the_sequences_counts_and_config_and_only_the_engine_the_times(own_server, tmp_path):
    js = OracleJS(own_server.url)
    server_before = _durable_with_acks(js)
    js.close()
    own_server.kill()  # a clean stop (SIGTERM), the store kept
    own_server.start()
    js = OracleJS(own_server.url)
    try:
        server_after = js.consumer_info("S", "D")
    finally:
        js.close()

    store = tmp_path / "store"
    with jetspark.connect(store) as engine:
        engine_before = _durable_with_acks(engine)
    with jetspark.connect(store) as engine:
        engine_after = engine.consumer_info("S", "D")

    expected = {
        "delivered": (FETCHED, FETCHED),
        "ack_floor": (3, 3),
        "num_pending": MESSAGES - FETCHED,
        "num_ack_pending": FETCHED - len(ACKED),
        "num_redelivered": 0,
    }
    for info in (server_before, server_after, engine_before, engine_after):
        assert {k: v for k, v in _kept(info).items() if k != "config"} == expected
    assert _kept(server_after) == _kept(server_before)
    assert _kept(engine_after) == _kept(engine_before)
    assert _kept(engine_after) == _kept(server_after)  # field by field, config included
    assert server_after.created == server_before.created
    assert engine_after.created == engine_before.created

    # Before the restart both report the times of the last delivery and the last ack.
    for before in (server_before, engine_before):
        assert before.delivered.last_active is not None
        assert before.ack_floor.last_active is not None
    # The difference: the server forgets both times, the engine keeps them.
    assert server_after.delivered.last_active is None
    assert server_after.ack_floor.last_active is None
    assert engine_after.delivered.last_active == engine_before.delivered.last_active
    assert engine_after.ack_floor.last_active == engine_before.ack_floor.last_active


def test_a_sigkilled_server_may_lose_acked_acks_and_deliveries_but_redelivers_them(own_server):
    """A SIGKILL of nats-server right after ack_sync answered can lose those acks (and
    deliveries); what it loses it delivers again, and the stream keeps every message.  (Seen on
    v2.15.1: ack_floor back to 0, every fetched message pending an ack again; once even
    ``delivered`` back to 1.)  Contrast the engine's test below."""
    js = OracleJS(own_server.url)
    before = _durable_with_acks(js)
    js.close()
    _sigkill(own_server.proc)
    own_server.start()
    js = OracleJS(own_server.url)
    try:
        after = js.consumer_info("S", "D")
        assert js.stream_info("S").state.messages == MESSAGES
        # The deliveries it no longer counts come at the next fetch (the ones still pending an
        # ack come again after their ack_wait, as any unacked delivery does).
        again = js.pull_subscribe_bind(stream="S", durable="D").fetch(MESSAGES, timeout=5)
    finally:
        js.close()
    assert [m.metadata.sequence.stream for m in again] == list(range(after.delivered.stream_seq + 1, MESSAGES + 1))

    assert after.delivered.last_active is None and after.ack_floor.last_active is None
    assert after.config == before.config
    # Never ahead of what happened...
    assert after.delivered.stream_seq <= FETCHED
    assert after.ack_floor.stream_seq <= 3
    # ...and whatever it no longer counts as acked is still owed: pending an ack or not yet delivered.
    assert after.num_pending == MESSAGES - after.delivered.stream_seq
    acked_above_floor = len([s for s in ACKED if after.ack_floor.stream_seq < s <= after.delivered.stream_seq])
    assert (
        after.delivered.stream_seq - after.ack_floor.stream_seq - acked_above_floor
        <= after.num_ack_pending
        <= after.delivered.stream_seq - after.ack_floor.stream_seq
    )


# The child: open the store, fetch every message, ack_sync each and print its stream seq once
# ack_sync has returned; when done, wait on stdin (the parent kills it in any case).
_ACKER = """
import sys
import jetspark
js = jetspark.connect(sys.argv[1])
msgs = js.pull_subscribe_bind(stream="K", durable="D").fetch(int(sys.argv[2]), timeout=30)
for m in msgs:
    m.ack_sync(timeout=30)
    print(m.metadata.sequence.stream, flush=True)
print("done", flush=True)
sys.stdin.read()
"""
KILL_MESSAGES = 400
KILL_AFTER = 40  # acks the parent sees answered before it sends the SIGKILL


def test_a_sigkill_of_a_process_acking_on_an_engine_store_loses_no_answered_ack(tmp_path):
    store = tmp_path / "store"
    with jetspark.connect(store) as js:
        js.add_stream(name="K", subjects=["k"], storage="file")
        for i in range(KILL_MESSAGES):
            js.publish("k", b"%d" % i)
        js.add_consumer("K", durable_name="D", ack_policy=AckPolicy.EXPLICIT, ack_wait=600)

    child = subprocess.Popen(
        [sys.executable, "-c", _ACKER, str(store), str(KILL_MESSAGES)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert child.stdout is not None
        seen = [child.stdout.readline().strip() for _ in range(KILL_AFTER)]
        assert all(s.isdigit() for s in seen), seen
        _sigkill(child)
        # Every line the child printed before it died is an ack whose ack_sync had returned.
        answered = [int(s) for s in seen + child.stdout.read().split() if s != "done"]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    assert answered == list(range(1, len(answered) + 1))
    clock = FakeClock()
    with jetspark.connect(store, clock=clock) as js:
        info = js.consumer_info("K", "D")
        # The fetch was recorded before any ack; no answered ack is lost.
        assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (KILL_MESSAGES, KILL_MESSAGES)
        assert info.ack_floor.stream_seq >= len(answered)
        assert info.num_ack_pending == KILL_MESSAGES - info.ack_floor.stream_seq
        assert info.num_pending == 0
        assert info.delivered.last_active is not None and info.ack_floor.last_active is not None
        # Past the ack_wait, only what the log does not hold as acked comes again, in order.
        clock.advance(601)
        sub = js.pull_subscribe_bind(stream="K", durable="D")
        if info.ack_floor.stream_seq < KILL_MESSAGES:  # the child was killed before its last ack
            again = sub.fetch(KILL_MESSAGES, timeout=1)
            assert [m.metadata.sequence.stream for m in again] == list(
                range(info.ack_floor.stream_seq + 1, KILL_MESSAGES + 1)
            )
            assert {m.metadata.num_delivered for m in again} == {2}
        with pytest.raises(FetchTimeoutError):
            sub.fetch(1, timeout=0.05)
