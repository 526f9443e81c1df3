"""A paused consumer on the embedded engine: its pause_until kept across a reopen and seen by
every handle on the store, a waiting fetch served when the pause ends (real time here, not
the contract suite's injected clock) or, at once, when another handle resumes it.
The behaviour itself is checked against nats-server in tests/contract/test_consumer_pause.py."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

import jetspark

S, C = "S", "C"
FAR = dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc)


def _setup(js, storage: str = "file") -> None:
    js.add_stream(name=S, subjects=["s"], storage=storage)
    js.publish("s", b"m0")
    js.add_consumer(S, durable_name=C, ack_policy="explicit")


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_pause_until_survives_a_reopen_and_resume_clears_it(store, storage):
    with jetspark.connect(store) as js:
        _setup(js, storage)
        js.pause_consumer(S, C, FAR)
    with jetspark.connect(store) as js:
        info = js.consumer_info(S, C)
        assert (info.paused, info.config.pause_until) == (True, FAR)
        with pytest.raises(jetspark.FetchTimeoutError):
            js.pull_subscribe_bind(C, S).fetch(1, timeout=0.05)
        js.resume_consumer(S, C)
    with jetspark.connect(store) as js:
        info = js.consumer_info(S, C)
        assert (info.paused, info.config.pause_until) == (None, None)
        assert [m.data for m in js.pull_subscribe_bind(C, S).fetch(1, timeout=5)] == [b"m0"]


def test_a_waiting_fetch_is_served_when_the_pause_ends(store):
    with jetspark.connect(store) as js:
        _setup(js)
        js.pause_consumer(S, C, dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=0.5))
        # The fetch waits past the pause (woken by its end, not by a commit) and gets the message.
        assert [m.data for m in js.pull_subscribe_bind(C, S).fetch(1, timeout=60)] == [b"m0"]


def test_a_resume_by_another_handle_wakes_a_waiting_fetch(store):
    with jetspark.connect(store) as js, jetspark.connect(store) as other:
        _setup(js)
        other.pause_consumer(S, C, FAR)
        assert js.consumer_info(S, C).paused is True  # the other handle's pause, seen here
        got: list = []
        sub = js.pull_subscribe_bind(C, S)
        waiter = threading.Thread(target=lambda: got.extend(m.data for m in sub.fetch(1, timeout=60)))
        waiter.start()
        other.resume_consumer(S, C)
        waiter.join(90)
        # Paused until 2100, the fetch ends only because the resume woke it (else FetchTimeoutError after 60 s).
        assert got == [b"m0"]


def test_a_create_on_the_engine_takes_pause_until_and_a_bad_one_creates_nothing(store):
    with jetspark.connect(store) as js:
        js.add_stream(name=S, subjects=["s"])
        info = js.add_consumer(S, durable_name="P", pause_until="2100-01-01T01:00:00+01:00")
        assert (info.paused, info.config.pause_until) == (True, FAR)
        with pytest.raises(jetspark.BadRequestError) as err:
            js.add_consumer(S, durable_name="Q", pause_until="2100-01-01T00:00:00")  # no offset
        assert err.value.err_code == 10025 and "pause_until" in err.value.description
        assert [i.name for i in js.consumers_info(S)] == ["P"]


def test_advance_ack_floor_moves_a_paused_consumer_on_the_engine(store):
    """The engine moves the floor itself, paused or not; on a server the call fetches, which a
    pause stops: AckFloorError there (JetStreamAPI.advance_ack_floor's contract)."""
    with jetspark.connect(store) as js:
        _setup(js)
        js.publish("s", b"m1")
        js.pause_consumer(S, C, FAR)
        assert js.advance_ack_floor(S, C, 2).stream_seq == 2
        info = js.consumer_info(S, C)
        assert (info.ack_floor.stream_seq, info.num_pending, info.paused) == (2, 0, True)
