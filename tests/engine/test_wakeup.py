"""The engine's wake-up (jetspark/engine/wakeup.py): a consumer waiting in one process is
woken by a publish or an ack in another, and by its own pending delivery falling due,
with inotify and with the polling it falls back to where inotify is unavailable.

Every waiter here has ``wakeup.SLICE`` (the bound on one wait, which otherwise lets a
waiter look again every second) raised to an hour, so the only ways out of a wait are
the ones under test: a lost wake-up hangs the child until the parent's guard fails the
test.  Children are ``spawn``ed and report through pipes; nothing is timed.
"""

from __future__ import annotations

import multiprocessing
import threading
import traceback

import pytest

import jetspark
from jetspark.engine import wakeup
from jetspark.errors import ClosedError, FetchTimeoutError

SPAWN = multiprocessing.get_context("spawn")
GUARD = 60  # seconds: a hang guard, never a measurement
ROUNDS = 5

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def no_slice(monkeypatch):
    monkeypatch.setattr(wakeup, "SLICE", 3600.0)


def _report_waits(conn) -> None:
    """Instrument the child's waits: each sends ("waiting", None) once it has looked for
    messages and is about to wait, so the parent acts only on a waiting child."""
    original = wakeup.Waiter.wait

    def wait(self, *args):
        conn.send(("waiting", None))
        return original(self, *args)

    wakeup.Waiter.wait = wait
    wakeup.SLICE = 3600.0


def _woken_child(conn, path: str, inotify: bool) -> None:
    """Consume the durable D with ``consume`` and send each message's payload back."""
    try:
        _report_waits(conn)
        wakeup.INOTIFY = inotify
        with jetspark.connect(path) as js:
            sub = js.pull_subscribe_bind("D", stream="S")
            done = threading.Event()

            def cb(msg):
                msg.ack()
                conn.send(("msg", msg.data))
                if msg.data == b"%d" % (ROUNDS - 1):
                    done.set()

            with sub.consume(cb, max_messages=2):
                done.wait(GUARD)
        conn.send(("done", None))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def _recv(conn, proc, want: str):
    """The child's next report of kind ``want``, skipping "waiting" ones (a wait can end
    for nothing and start again)."""
    while True:
        assert conn.poll(GUARD), f"child {proc.name} sent nothing within {GUARD} s: a lost wake-up?"
        kind, value = conn.recv()
        assert kind != "error", f"child {proc.name} failed:\n{value}"
        if kind == want:
            return value
        assert kind == "waiting", (kind, value)


def _start(procs, target, *args):
    parent, child = SPAWN.Pipe(duplex=False)
    p = SPAWN.Process(target=target, args=(child, *args))
    p.start()
    child.close()
    procs.append(p)
    return parent, p


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "polling"])
def test_a_publish_wakes_a_consumer_in_another_process(store, procs, inotify):
    if inotify and not wakeup.INOTIFY:
        pytest.skip("inotify is not available here")
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s.*"])
        js.add_consumer("S", durable_name="D")
        conn, p = _start(procs, _woken_child, str(store), inotify)
        for i in range(ROUNDS):
            _recv(conn, p, "waiting")  # it looked, found nothing, and waits: only a wake-up helps
            js.publish("s.x", b"%d" % i)
            assert _recv(conn, p, "msg") == b"%d" % i
        _recv(conn, p, "done")
        p.join(GUARD)
        assert p.exitcode == 0
        assert js.consumer_info("S", "D").ack_floor.stream_seq == ROUNDS


def _held_child(conn, path: str) -> None:
    """Wait for the next message of D (max_ack_pending=1, its one slot held by the parent)."""
    try:
        _report_waits(conn)
        with jetspark.connect(path) as js:
            with js.pull_subscribe_bind("D", stream="S").messages(max_messages=1) as it:
                msg = it.next()  # no timeout: only a wake-up ends the wait (the parent's guard fails the test)
                conn.send(("msg", (msg.data, msg.metadata.num_delivered)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def test_an_ack_in_another_process_frees_max_ack_pending_and_wakes_the_waiter(store, procs):
    """Nothing is published while the child waits: only the parent's ack record (a consumer
    log write, no stream commit) can wake it before the hour-long ack_wait."""
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s.*"])
        js.add_consumer("S", durable_name="D", max_ack_pending=1, ack_wait=3600)
        js.publish("s.x", b"first")
        js.publish("s.x", b"second")
        (held,) = js.pull_subscribe_bind("D", stream="S").fetch(1)
        conn, p = _start(procs, _held_child, str(store))
        _recv(conn, p, "waiting")
        held.ack_sync()
        assert _recv(conn, p, "msg") == (b"second", 1)
        p.join(GUARD)


def test_a_pending_delivery_falling_due_wakes_the_waiter(store, no_slice):
    """No process writes anything: next() wakes when the unacknowledged message's ack_wait
    passes, and gets it again."""
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s.*"])
        js.add_consumer("S", durable_name="D", ack_wait=0.3)
        js.publish("s.x", b"once")
        with js.pull_subscribe_bind("D", stream="S").messages() as it:
            first = it.next(timeout=GUARD)
            again = it.next(timeout=GUARD)
        assert (first.data, first.metadata.num_delivered) == (b"once", 1)
        assert (again.data, again.metadata.num_delivered) == (b"once", 2)


def test_stop_and_close_end_waits_in_other_threads(store, no_slice):
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s.*"])
        js.add_consumer("S", durable_name="D")
        sub = js.pull_subscribe_bind("D", stream="S")
        outcome = []

        def wait(fn):
            try:
                outcome.append(fn())
            except BaseException as exc:
                outcome.append(exc)

        it = sub.messages()
        t = threading.Thread(target=wait, args=(lambda: it.next(timeout=GUARD),))
        t.start()
        it.stop()
        t.join(GUARD)
        assert not t.is_alive() and isinstance(outcome.pop(), StopIteration)

        t = threading.Thread(target=wait, args=(lambda: sub.fetch(1, timeout=GUARD),))
        t.start()
        with pytest.raises(FetchTimeoutError):
            sub.fetch(1, timeout=0.01)  # the handle works while the other thread waits
        js.close()
        t.join(GUARD)
        assert not t.is_alive() and isinstance(outcome.pop(), ClosedError)


def test_notify_writes_once_per_wait_and_never_while_nobody_waits(store):
    """The publish hot path pays a memory read, not a system call, while nobody waits, and
    one system call per wake-up, not per publish, while someone does."""
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s.*"])
        st = js._store.streams["S"]
        path = st.storage.notifier.path
        counter = lambda: int.from_bytes(path.read_bytes()[8:16], "little")  # noqa: E731
        js.publish("s.x", b"1")
        assert counter() == 0
        with st.storage.locked():
            st.storage.notifier.arm()  # what a fetch that found nothing does before it waits
        js.publish("s.x", b"2")
        js.publish("s.x", b"3")
        assert counter() == 1
