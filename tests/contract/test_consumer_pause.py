"""pause_consumer / resume_consumer and a consumer's pause_until, on every backend.

Every expected value here was checked against nats-server v2.15.1 (the ``oracle-*``
parametrisations: nats-py's own ``pause_consumer``/``resume_consumer``).  A paused
consumer delivers nothing until its ``pause_until``: a pull waiting on it times out, or
takes its messages once the pause ends; acks are taken meanwhile.  The time stays in the
consumer's config after it passes; resuming clears it (nats-py resumes by pausing until
1970, which the config then keeps: the one difference, pinned below).  A create or update
of an existing consumer never changes its ``pause_until``.

Time: on the server ``js.clock.advance`` really sleeps, so pauses here are about a second.
"""

from __future__ import annotations

import datetime as dt

import pytest

from jetspark.api import ConsumerPause, ns_to_datetime
from jetspark.errors import APIError, ConsumerNotFoundError, StreamNotFoundError
from tests.contract.consumer_support import fetch_nothing, server_streams_removed  # noqa: F401  (autouse)

S, C = "PAUSE", "C"
PAUSE = 1.0  # seconds a test's pause lasts
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
FAR = dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc)


def now(js) -> dt.datetime:
    """The backend's time: the engine's injected clock, the server's real one."""
    return dt.datetime.now(dt.timezone.utc) if js.is_server else ns_to_datetime(js.clock())


def _setup(js, messages: int = 2, **consumer):
    js.add_stream(name=S, subjects=["p.>"])
    for i in range(messages):
        js.publish("p.a", b"m%d" % i)
    js.add_consumer(S, durable_name=C, ack_policy="explicit", **consumer)
    return js.pull_subscribe_bind(C, S)


def _pause_state(js):
    info = js.consumer_info(S, C)
    return info.paused, info.config.pause_until


def test_a_paused_consumer_delivers_nothing_until_its_pause_until(js):
    sub = _setup(js)
    until = now(js) + dt.timedelta(seconds=PAUSE)
    answer = js.pause_consumer(S, C, until)
    assert isinstance(answer, ConsumerPause)
    assert (answer.paused, answer.pause_until) == (True, until)
    assert 0 < answer.pause_remaining <= PAUSE * 1e9
    info = js.consumer_info(S, C)
    assert (info.paused, info.config.pause_until) == (True, until)
    assert 0 < info.pause_remaining <= PAUSE * 1e9
    assert [i.paused for i in js.consumers_info(S)] == [True]
    fetch_nothing(sub)
    js.clock.advance(PAUSE + 0.1)
    # Over: it delivers again, and pause_until stays in the config.
    assert [m.data for m in sub.fetch(2, timeout=5)] == [b"m0", b"m1"]
    info = js.consumer_info(S, C)
    assert (info.paused, info.pause_remaining, info.config.pause_until) == (None, None, until)


def test_a_waiting_pull_takes_its_messages_when_the_pause_ends(js):
    sub = _setup(js, messages=1)
    js.pause_consumer(S, C, now(js) + dt.timedelta(seconds=PAUSE))
    if not js.is_server:
        js.clock.advance(PAUSE + 0.1)  # the engine's clock is injected: the pause ends while the fetch waits
    # On the server the fetch waits out the rest of the pause.
    assert [m.data for m in sub.fetch(1, timeout=10 * PAUSE)] == [b"m0"]


def test_acks_are_taken_while_paused(js):
    sub = _setup(js)
    [msg] = sub.fetch(1, timeout=5)
    js.pause_consumer(S, C, FAR)
    msg.ack_sync()
    info = js.consumer_info(S, C)
    assert (info.ack_floor.stream_seq, info.num_ack_pending, info.num_pending, info.paused) == (1, 0, 1, True)


def test_resume_ends_the_pause_at_once_and_clears_pause_until(js):
    sub = _setup(js)
    js.pause_consumer(S, C, FAR)
    fetch_nothing(sub)
    answer = js.resume_consumer(S, C)
    info = js.consumer_info(S, C)
    assert (answer.paused, answer.pause_remaining, info.paused, info.pause_remaining) == (False, None, None, None)
    if js.kind == "oracle":
        # nats-py resumes by pausing until 1970-01-01, and the server keeps that time.
        assert answer.pause_until == info.config.pause_until == EPOCH
    else:
        assert answer.pause_until is None and info.config.pause_until is None
    assert [m.data for m in sub.fetch(2, timeout=5)] == [b"m0", b"m1"]
    # Resuming a consumer that is not paused answers the same.
    assert js.resume_consumer(S, C).paused is False


def test_a_pause_until_already_past_pauses_nothing_and_is_kept(js):
    sub = _setup(js)
    past = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
    answer = js.pause_consumer(S, C, past)
    assert (answer.paused, answer.pause_until, answer.pause_remaining) == (False, past, None)
    assert _pause_state(js) == (None, past)
    assert len(sub.fetch(2, timeout=5)) == 2


def test_pause_until_text_with_an_offset_is_that_time_in_utc(js):
    _setup(js, messages=0)
    answer = js.pause_consumer(S, C, "2100-01-01T02:00:00.5+02:00")
    want = dt.datetime(2100, 1, 1, 0, 0, 0, 500000, tzinfo=dt.timezone.utc)
    assert answer.pause_until == want and _pause_state(js) == (True, want)


def test_pause_until_on_create_pauses_and_a_create_or_update_never_changes_it(js):
    until = now(js) + dt.timedelta(seconds=PAUSE)
    sub = _setup(js, pause_until=until)
    assert _pause_state(js) == (True, until)
    fetch_nothing(sub)
    # The server leaves an existing consumer's pause_until to pause_consumer/resume_consumer.
    later = FAR
    assert js.add_consumer(S, durable_name=C, ack_policy="explicit", pause_until=later).config.pause_until == until
    info = js.add_consumer(S, durable_name=C, ack_policy="explicit", description="d")
    assert (info.config.pause_until, info.config.description) == (until, "d")
    same = js.create_consumer(S, durable_name=C, ack_policy="explicit", description="d", pause_until=later)
    assert same.config.pause_until == until  # no 10148: pause_until is no part of the comparison
    js.resume_consumer(S, C)
    assert js.update_consumer(S, durable_name=C, ack_policy="explicit", pause_until=later).paused is None
    js.clock.advance(PAUSE + 0.1)
    assert len(sub.fetch(2, timeout=5)) == 2


def test_a_push_consumer_is_paused_too(js):
    js.add_stream(name=S, subjects=["p.>"])
    js.publish("p.a", b"m0")
    js.add_consumer(S, durable_name=C, deliver_subject="deliver.p", ack_policy="explicit", pause_until=FAR)
    sub = js.subscribe_bind(S, C, manual_ack=True)
    try:
        with pytest.raises(TimeoutError):
            sub.next_msg(timeout=0.2)
        js.resume_consumer(S, C)
        if js.is_server:
            # nats-server 2.15.1 does not wake a resumed consumer's deliveries (a pull request
            # waiting then is not served either): it sends once the next message is stored.
            with pytest.raises(TimeoutError):
                sub.next_msg(timeout=0.3)
            js.publish("p.a", b"m1")
            got = [sub.next_msg(timeout=5).data, sub.next_msg(timeout=5).data]
        else:
            # The engine delivers at once (docs/reference/differences-nats-server.md).
            got = [sub.next_msg(timeout=5).data]
            js.publish("p.a", b"m1")
            got.append(sub.next_msg(timeout=5).data)
        assert got == [b"m0", b"m1"]
    finally:
        sub.unsubscribe()


# ---------------------------------------------------------------------- bad input


BAD_TIMES = [
    ("abc", "not a time"),
    ("2100-01-01T00:00:00", "no offset"),
    ("2100-01-01 00:00:00Z", "a space for the T"),
    (5, "a number"),
]


@pytest.mark.parametrize("value, why", BAD_TIMES, ids=[w for _, w in BAD_TIMES])
def test_a_pause_until_that_is_no_rfc3339_time_is_10025_and_changes_nothing(js, value, why):
    _setup(js, messages=0)
    js.pause_consumer(S, C, FAR)
    with pytest.raises(APIError) as err:
        js.pause_consumer(S, C, value)
    assert (err.value.err_code, err.value.code) == (10025, 400), why
    assert "invalid JSON" in err.value.description
    assert _pause_state(js) == (True, FAR)


def test_no_stream_is_10059_and_no_consumer_is_10014(js):
    _setup(js, messages=0)
    for call in (lambda s, c: js.pause_consumer(s, c, FAR), lambda s, c: js.resume_consumer(s, c)):
        with pytest.raises(StreamNotFoundError) as err:
            call("NOPE", C)
        assert (err.value.err_code, err.value.code) == (10059, 404)
        with pytest.raises(ConsumerNotFoundError) as err:
            call(S, "NOPE")
        assert (err.value.err_code, err.value.code) == (10014, 404)
    assert _pause_state(js) == (None, None)


def test_a_pause_until_of_none(js):
    _setup(js, messages=0)
    js.pause_consumer(S, C, FAR)
    if js.kind == "oracle":
        # nats-py sends null, which the server reads as "resume".
        assert js.pause_consumer(S, C, None).paused is False
        assert _pause_state(js) == (None, None)
        return
    # jetspark refuses it (resume_consumer says that), and nothing changes.
    with pytest.raises(APIError, match="pause_until must be a datetime") as err:
        js.pause_consumer(S, C, None)
    assert err.value.err_code == 10025
    assert _pause_state(js) == (True, FAR)


def test_a_pause_until_past_2262(js):
    _setup(js, messages=0)
    far = "3000-01-01T00:00:00Z"
    if js.kind == "oracle":
        # The server takes any year up to 9999.
        assert js.pause_consumer(S, C, far).paused is True
        return
    # jetspark keeps times as int64 nanoseconds since 1970, as for opt_start_time: 10025 naming it.
    with pytest.raises(APIError, match="pause_until must be between 1677-09-22 and 2262-04-11") as err:
        js.pause_consumer(S, C, far)
    assert err.value.err_code == 10025
    assert _pause_state(js) == (None, None)
