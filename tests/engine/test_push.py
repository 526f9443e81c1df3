"""The engine's push subscriptions off the happy path: a subscriber killed with SIGKILL, an ordered
consumer whose consumer sequence skips, a reader in another thread.

The behaviour both backends share is checked against the server in
tests/contract/test_push.py; these are what only the engine has: bindings
held by processes (jetspark/engine/bindings.py) and its own ordered-consumer
recovery (jetspark/engine/push.py).  Time is the injected clock, never a sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import jetspark
from tests.conftest import FakeClock

pytestmark = pytest.mark.timeout(60)

CHILD = """
import sys
import jetspark

js = jetspark.connect(sys.argv[1])
sub = js.subscribe("a.x", durable="D", manual_ack=True)
msg = sub.next_msg(timeout=10)
print(msg.metadata.sequence.stream, flush=True)
sys.stdin.read()  # held here until killed
"""


@pytest.fixture
def js(tmp_path):
    clock = FakeClock()
    with jetspark.connect(tmp_path / "store", clock=clock) as js:
        js.clock = clock
        js.add_stream(name="S", subjects=["a.*"])
        yield js


def test_a_killed_subscriber_leaves_no_binding(js):
    js.publish("a.x", b"m1")
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(js.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline() == "1\n"  # it holds seq 1, unacknowledged
        assert js.consumer_info("S", "D").push_bound is True
        from jetspark.errors import SubscriptionError

        with pytest.raises(SubscriptionError):
            js.subscribe("a.x", durable="D")
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    # The kernel dropped the dead process's lock: the consumer is free, and its message comes
    # again once its ack_wait passes.
    info = js.consumer_info("S", "D")
    assert (info.push_bound, info.num_ack_pending) == (None, 1)
    sub = js.subscribe("a.x", durable="D")
    # The child delivered on the real clock, at some point after this clock's start: an
    # hour on is past its 30 s ack wait however long the child took to start.
    js.clock.advance(3600)
    again = sub.next_msg(timeout=10)
    assert (again.metadata.sequence.stream, again.metadata.num_delivered) == (1, 2)
    assert not [
        n
        for n in os.listdir(js.path / "streams" / "S" / "data" / "cons" / "D")
        if n.startswith("bound-") and n != sub._binding.path.name
    ]
    sub.unsubscribe()


def test_an_ordered_consumer_starts_again_after_a_gap(js):
    """Another subscriber takes from the ordered consumer: its consumer sequence skips, and it
    makes a new consumer from the stream sequence after the last one it delivered."""
    for seq in range(1, 4):
        js.publish("a.x", b"m%d" % seq)
    sub = js.subscribe("a.x", ordered_consumer=True)
    assert sub.next_msg(timeout=5).data == b"m1"  # it holds m2 and m3 too
    thief = js.subscribe_bind("S", sub.consumer)
    for seq in range(4, 7):
        js.publish("a.x", b"m%d" % seq)
    assert [thief.next_msg(timeout=5).data for _ in range(3)] == [b"m4", b"m5", b"m6"]
    js.publish("a.x", b"m7")
    first = sub.consumer
    assert [sub.next_msg(timeout=5).data for _ in range(6)] == [b"m2", b"m3", b"m4", b"m5", b"m6", b"m7"]
    assert sub.consumer != first
    assert [c.name for c in js.consumers_info("S")] == [sub.consumer]
    thief.unsubscribe()
    sub.unsubscribe()
    assert js.consumers_info("S") == []


def test_messages_ends_when_another_thread_unsubscribes(js):
    sub = js.subscribe("a.x", durable="D")
    got = []
    reader = threading.Thread(target=lambda: got.extend(m.data for m in sub.messages()))
    reader.start()
    js.publish("a.x", b"m1")
    sub.unsubscribe()  # ends the reader's wait at once (its wakeup.Interrupt)
    reader.join(10)
    assert not reader.is_alive()
    assert got in ([], [b"m1"])  # taken before or after the unsubscribe: either way the loop ended
