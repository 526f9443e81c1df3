"""Continuous pulls: ``PullSubscription.messages()`` and ``consume(cb)`` (nats.go's
``Consumer.Messages`` and ``Consume``), and ``fetch(heartbeat=)`` (nats-py's).

nats-py has no continuous pull, so the oracle takes part where nats-py has the verb
(``fetch`` with a heartbeat); elsewhere the server's own consumer state, read back
with ``consumer_info`` and plain fetches, decides: what a pull delivered and what it
did not hand out (redelivered after ack_wait, never lost).  Waits here are events
(a callback's ``threading.Event``, a thread's join) with generous guards; nothing is timed.
"""

from __future__ import annotations

import logging
import threading

import pytest

from jetspark.errors import ConsumerNotFoundError, FetchTimeoutError, NotFoundError
from tests.contract import consumer_support as cs
from tests.contract.consumer_support import server_streams_removed  # noqa: F401  (autouse)

GUARD = 30  # seconds: a hang guard, never a measurement


@pytest.fixture
def js(jetspark_backend):
    """The backends with continuous pulls (nats-py has none; the oracle joins only
    test_fetch_with_heartbeat, through tests/conftest.py's ``backend``)."""
    return jetspark_backend


def setup(js, n: int = 0, **consumer):
    cs.add_stream(js, name="S", subjects=["s.*"])
    publish(js, 1, n)
    js.add_consumer("S", durable_name="D", **consumer)
    return js.pull_subscribe_bind(stream="S", durable="D")


def publish(js, first: int, last: int) -> None:
    for i in range(first, last + 1):
        assert js.publish("s.x", b"m%d" % i).seq == i


def seq(msg) -> int:
    return msg.metadata.sequence.stream


def test_messages_in_order_bounded_by_max_messages_and_refilled(js):
    sub = setup(js, 3)
    it = sub.messages(max_messages=4)
    got = []
    for _ in range(3):
        m = it.next(timeout=GUARD)
        got.append(m)
        m.ack()
    publish(js, 4, 12)  # more than the buffer holds: it refills as they are taken
    for m in it:
        got.append(m)
        m.ack()
        # Ahead of the caller the consumer has delivered at most max_messages.
        assert js.consumer_info("S", "D").num_ack_pending <= 4
        if seq(m) == 12:
            break
    assert [m.data for m in got] == [b"m%d" % i for i in range(1, 13)]
    assert [m.metadata.num_delivered for m in got] == [1] * 12
    sub.unsubscribe()  # stops its pulls
    assert list(it) == []
    info = js.consumer_info("S", "D")
    assert (info.ack_floor.stream_seq, info.num_ack_pending) == (12, 0)


def test_messages_bounded_by_max_bytes(js):
    sub = setup(js, 8)
    with sub.messages(max_bytes=400) as it:  # fewer than 8 of these messages (subject, reply, payload)
        assert [it.next(timeout=GUARD).data for _ in range(8)] == [b"m%d" % i for i in range(1, 9)]
        with pytest.raises(FetchTimeoutError):
            it.next(timeout=cs.NOTHING_WAIT)
    assert list(it) == []  # the with block stopped it


def test_stop_drops_the_buffer_drain_hands_it_out_nothing_is_lost(js):
    """What a pull delivered and never handed out is redelivered after ack_wait."""
    sub = setup(js, 10, ack_wait=1)
    stopped = sub.messages(max_messages=5)
    handed = [stopped.next(timeout=GUARD)]
    stopped.stop()
    assert list(stopped) == []
    with pytest.raises(StopIteration):
        stopped.next(timeout=0)
    drained = sub.messages(max_messages=5)
    handed.append(drained.next(timeout=GUARD))
    drained.drain()
    rest = list(drained)  # what had arrived, in order, then the end
    handed += rest
    assert [seq(m) for m in handed] == sorted(seq(m) for m in handed)
    if not js.is_server:
        # The engine's buffer is exact: each pull delivered 5 and handed out 1.
        assert [seq(m) for m in handed] == [1, 6, 7, 8, 9, 10]
    for m in handed:
        m.ack()
    js.clock.advance(1.1)
    redelivered = []
    while True:
        try:
            redelivered += sub.fetch(10, timeout=cs.NOTHING_WAIT)
        except FetchTimeoutError:
            break
    assert sorted(seq(m) for m in handed + redelivered) == list(range(1, 11))
    assert {m.metadata.num_delivered for m in redelivered} == {2}
    if not js.is_server:
        assert [seq(m) for m in redelivered] == [2, 3, 4, 5]


def test_consume_calls_back_in_order_on_one_thread_and_goes_on_after_an_exception(js, caplog):
    sub = setup(js, 3)
    seen, threads, done = [], set(), threading.Event()

    def cb(msg):
        seen.append(msg.data)
        threads.add(threading.get_ident())
        msg.ack()
        if msg.data == b"m2":
            raise RuntimeError("a bad message")
        if len(seen) == 6:
            done.set()

    with caplog.at_level(logging.ERROR, logger="jetspark"):
        with sub.consume(cb, max_messages=2) as ctx:
            publish(js, 4, 6)
            assert done.wait(GUARD)
            assert not ctx.closed
        assert ctx.closed and ctx.wait(0)
    assert seen == [b"m%d" % i for i in range(1, 7)]
    assert len(threads) == 1 and threading.get_ident() not in threads
    assert any(
        "the callback raised" in r.getMessage() and r.exc_info and "a bad message" in str(r.exc_info[1])
        for r in caplog.records
    )
    assert js.consumer_info("S", "D").ack_floor.stream_seq == 6


def test_consume_drain_delivers_the_buffer_then_ends(js):
    sub = setup(js, 6)
    seen, first, release = [], threading.Event(), threading.Event()

    def cb(msg):
        seen.append(seq(msg))
        first.set()
        release.wait(GUARD)  # holds the thread while the test drains

    ctx = sub.consume(cb, max_messages=3)
    assert first.wait(GUARD)
    ctx.drain()
    release.set()
    assert ctx.wait(GUARD)
    assert seen == list(range(1, len(seen) + 1)) and 1 <= len(seen) <= 3
    if not js.is_server:
        assert seen == [1, 2, 3]


def test_deleting_the_consumer_ends_a_waiting_next_with_an_error(js):
    sub = setup(js, 1)
    it = sub.messages()
    assert it.next(timeout=GUARD).data == b"m1"
    outcome = []

    def wait():
        try:
            outcome.append(it.next(timeout=GUARD))
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    js.delete_consumer("S", "D")
    t.join(GUARD + 5)
    assert not t.is_alive()
    assert isinstance(outcome[0], ConsumerNotFoundError), outcome
    assert list(it) == []  # the error ended the pull


def test_deleting_the_stream_ends_consume_through_its_error_callback(js):
    sub = setup(js, 2)
    seen, errors, got = [], [], threading.Event()

    def cb(msg):
        seen.append(msg.data)
        if len(seen) == 2:
            got.set()

    ctx = sub.consume(cb, error_cb=errors.append)
    assert got.wait(GUARD)
    js.delete_stream("S")
    assert ctx.wait(GUARD)
    assert seen == [b"m1", b"m2"]
    # The engine says the stream is gone; the server deletes its consumers and says that.
    assert len(errors) == 1 and isinstance(errors[0], NotFoundError), errors


def test_fetch_with_heartbeat(backend):
    js = backend
    sub = setup(js, 2)
    assert [m.data for m in sub.fetch(5, timeout=1, heartbeat=0.1)] == [b"m1", b"m2"]
    with pytest.raises(FetchTimeoutError):  # on a server heartbeats came meanwhile: not a NoHeartbeatError
        sub.fetch(5, timeout=0.3, heartbeat=0.1)


BAD_MESSAGES_ARGS = [
    (dict(max_messages=10, max_bytes=1000), ValueError, "not both"),
    (dict(max_messages=0), ValueError, "max_messages"),
    (dict(max_messages="5"), TypeError, "max_messages"),
    (dict(max_bytes=-1), ValueError, "max_bytes"),
    (dict(expires=0.5), ValueError, "expires"),
    (dict(heartbeat=20), ValueError, "heartbeat"),
    (dict(heartbeat=-1), ValueError, "heartbeat"),
    (dict(max_messages=10, threshold_messages=11), ValueError, "threshold_messages"),
    (dict(threshold_bytes=10), ValueError, "threshold_bytes"),
]


def test_bad_arguments_are_refused_before_anything_is_pulled(js):
    sub = setup(js, 1)
    for kwargs, error, name in BAD_MESSAGES_ARGS:
        with pytest.raises(error, match=name):
            sub.messages(**kwargs)
        with pytest.raises(error, match=name):
            sub.consume(lambda m: None, **kwargs)
    with pytest.raises(TypeError, match="cb"):
        sub.consume(None)
    with pytest.raises(TypeError, match="error_cb"):
        sub.consume(lambda m: None, error_cb=1)
    with pytest.raises(ValueError, match="heartbeat"):
        sub.fetch(1, timeout=1, heartbeat=0.8)
    with pytest.raises(TypeError, match="heartbeat"):
        sub.fetch(1, timeout=1, heartbeat="1")
    assert js.consumer_info("S", "D").delivered.stream_seq == 0
