"""nats-py's arguments where a nats-py user reaches for them, on every backend
(docs/reference/differences-nats-py.md): ``get_msg(subject=, next=, direct=)``,
``get_last_msg(direct=)``, the per-call ``timeout=`` of ``publish``, ``add_consumer`` and
``consumer_info``, a push subscription's ``messages`` property and ``pending_msgs``, naive
datetimes read as UTC.  The oracle (nats-py's own client on nats-server) runs the same calls,
so each one works as in nats-py; what jetspark refuses instead is refused on both of its
backends with a message saying what it takes, and changes nothing."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading

import pytest

from jetspark.api import ConsumerConfig, DeliverPolicy
from jetspark.errors import BadRequestError, RequestTimeoutError, SubscriptionError
from tests.contract import consumer_support as cs
from tests.contract.consumer_support import (
    eventually,
    server_streams_removed,  # noqa: F401  (autouse)
)

WAIT = 10.0
# seq -> (subject, payload) of the stream ORDERS
ORDERS = {
    1: ("o.eu.new", b"m1"),
    2: ("o.us.new", b"m2"),
    3: ("o.eu.paid", b"m3"),
    4: ("o.eu.new", b"m4"),
    5: ("o.us.new", b"m5"),
}


def add_orders(js, **config):
    cs.add_stream(js, name="ORDERS", subjects=["o.>"], **config)
    for seq, (subject, data) in ORDERS.items():
        assert js.publish(subject, data).seq == seq


def seen(msg):
    return (msg.seq, msg.subject, msg.data)


def stored(js):
    s = js.stream_info("ORDERS").state
    return (s.messages, s.last_seq, [c.name for c in js.consumers_info("ORDERS")])


# ---------------------------------------------------------------- get_msg(subject=, next=, direct=)


@pytest.mark.parametrize(
    ("kwargs", "seq"),
    [
        (dict(subject="o.eu.new"), 4),  # the last message on the subject
        (dict(subject="o.*.paid"), 3),
        (dict(subject="o.>"), 5),
        (dict(seq=2, subject="o.eu.new", next=True), 4),  # the first at or after seq
        (dict(seq=4, subject="o.eu.new", next=True), 4),
        (dict(subject="o.us.new", next=True), 2),  # no seq: from the start
        (dict(seq=3), 3),
    ],
)
def test_get_msg_takes_nats_py_arguments(js, kwargs, seq):
    add_orders(js)
    assert seen(js.get_msg("ORDERS", **kwargs)) == (seq, *ORDERS[seq])


def test_get_msg_subject_positionally_as_nats_py_orders_it(js):
    add_orders(js)
    assert js.get_msg("ORDERS", None, "o.eu.new").seq == 4
    assert js.get_msg("ORDERS", 2, "o.eu.new", False, True).seq == 4


def test_direct_get_answers_the_same_message(js):
    add_orders(js, allow_direct=True)
    for kwargs in (dict(seq=3), dict(subject="o.us.new"), dict(seq=2, subject="o.eu.new", next=True)):
        assert seen(js.get_msg("ORDERS", direct=True, **kwargs)) == seen(js.get_msg("ORDERS", **kwargs))
    assert seen(js.get_last_msg("ORDERS", "o.eu.new", direct=True)) == (4, *ORDERS[4])


def test_direct_get_on_a_stream_without_allow_direct(jetspark_backend):
    # nats-py's direct request finds no responder there; jetspark reads through the stream's
    # API either way (a difference, docs/reference/differences-nats-py.md).
    js = jetspark_backend
    add_orders(js)
    assert seen(js.get_msg("ORDERS", 3, direct=True)) == (3, *ORDERS[3])


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        (dict(), "get_msg needs seq= (a stream sequence) or subject="),
        (dict(seq=2, subject="o.eu.new"), "get_msg with seq= and subject= needs next=True"),
        (dict(seq=2, next=True), "get_msg(next=True) needs subject="),
        (
            dict(subject="o.>", last_by_subj="o.>"),
            "get_msg takes subject= (with next=) or last_by_subj=/next_by_subj=, not both",
        ),
    ],
)
def test_get_msg_says_what_it_needs(jetspark_backend, kwargs, says):
    js = jetspark_backend
    add_orders(js)
    before = stored(js)
    with pytest.raises(BadRequestError) as err:
        js.get_msg("ORDERS", **kwargs)
    assert (err.value.code, err.value.err_code) == (400, 10003)
    assert err.value.description.startswith(f"bad request: {says}")
    assert stored(js) == before


@pytest.mark.parametrize(
    ("kwargs", "name"), [(dict(seq=1, direct="yes"), "direct"), (dict(subject="o.>", next=1), "next")]
)
def test_get_msg_flags_are_booleans(jetspark_backend, kwargs, name):
    add_orders(jetspark_backend)
    with pytest.raises(TypeError, match=f"^{name} must be True or False"):
        jetspark_backend.get_msg("ORDERS", **kwargs)


# ---------------------------------------------------------------- timeout= per call


def test_publish_add_consumer_and_consumer_info_take_a_timeout(js):
    add_orders(js)
    assert js.publish("o.eu.new", b"m6", timeout=2).seq == 6
    assert js.publish("o.eu.new", b"m7", stream="ORDERS", timeout=2.5).seq == 7
    created = js.add_consumer(
        "ORDERS", ConsumerConfig(durable_name="D", ack_policy="explicit"), 2
    )  # nats-py's third positional
    assert created.name == "D" and created.config.ack_policy.value == "explicit"
    assert js.add_consumer("ORDERS", durable_name="E", timeout=2.0).name == "E"
    assert js.consumer_info("ORDERS", "D", timeout=2).num_pending == 7
    # create_consumer and update_consumer take it alike (never "unknown consumer config field").
    assert js.create_consumer("ORDERS", durable_name="F", timeout=2).name == "F"
    assert js.update_consumer("ORDERS", durable_name="F", description="f", timeout=2).config.description == "f"


@pytest.mark.parametrize(
    ("timeout", "error"),
    [(0, ValueError), (-1, ValueError), (float("nan"), ValueError), ("2", TypeError), (True, TypeError)],
)
def test_a_bad_timeout_is_refused_and_nothing_is_done(jetspark_backend, timeout, error):
    js = jetspark_backend
    add_orders(js)
    before = stored(js)
    for call in (
        lambda: js.publish("o.eu.new", b"x", timeout=timeout),
        lambda: js.add_consumer("ORDERS", durable_name="D", timeout=timeout),
        lambda: js.create_consumer("ORDERS", durable_name="D", timeout=timeout),
        lambda: js.update_consumer("ORDERS", durable_name="D", timeout=timeout),
        lambda: js.consumer_info("ORDERS", "D", timeout=timeout),
    ):
        with pytest.raises(error, match="^timeout must be a finite number of seconds"):
            call()
    assert stored(js) == before


def test_a_timeout_bounds_the_wait_for_the_server(jetspark_backend):
    """A publish whose subject something answers but never replies to (a plain NATS
    subscriber, no stream) gives up after the call's timeout, not the handle's (5 s)."""
    js = jetspark_backend
    if not js.is_server:
        pytest.skip("the engine waits on no server")
    import nats

    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def ignore(msg):
        pass

    async def silent():
        nc = await nats.connect(js.url)
        await nc.subscribe("silent.>", cb=ignore)
        await nc.flush()
        ready.set()
        return nc

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    nc = asyncio.run_coroutine_threadsafe(silent(), loop).result(WAIT)
    try:
        assert ready.is_set()
        with pytest.raises(RequestTimeoutError, match=r"within 0\.3 s"):
            js.publish("silent.a", b"x", timeout=0.3)
    finally:
        asyncio.run_coroutine_threadsafe(nc.close(), loop).result(WAIT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT)


# ---------------------------------------------------------------- push subscriptions: messages, pending_msgs


def test_messages_is_a_property_and_pending_msgs_counts_what_is_held(js):
    add_orders(js)
    sub = js.subscribe("o.>", durable="D", manual_ack=True)
    first = sub.next_msg(timeout=WAIT)
    assert first.data == b"m1"
    eventually(js, lambda: sub.pending_msgs, 4)  # delivered to the subscription, not yet taken
    it = sub.messages
    assert iter(it) is it
    second = next(it)
    assert second.data == b"m2"
    assert sub.pending_msgs == 3
    sub.drain()
    rest = [m.data for m in sub.messages]
    assert rest == [b"m3", b"m4", b"m5"]
    assert sub.pending_msgs == 0


def test_messages_called_as_before_still_iterates(js):
    add_orders(js)
    sub = js.subscribe("o.>", durable="D", manual_ack=True)
    assert sub.next_msg(timeout=WAIT).data == b"m1"
    eventually(js, lambda: sub.pending_msgs, 4)
    sub.drain()
    assert [m.data for m in sub.messages()] == [b"m2", b"m3", b"m4", b"m5"]


def test_messages_on_a_callback_subscription_is_refused(js):
    add_orders(js)
    sub = js.subscribe("o.>", durable="D", cb=lambda msg: None)
    try:
        with pytest.raises(SubscriptionError):
            sub.messages  # noqa: B018 - the property itself refuses
    finally:
        sub.unsubscribe()


# ---------------------------------------------------------------- naive datetimes mean UTC (as nats-py reads them)


def test_a_naive_opt_start_time_is_utc(js):
    add_orders(js)
    aware = js.get_msg("ORDERS", 3).time
    naive = aware.astimezone(dt.timezone.utc).replace(tzinfo=None)
    a = js.add_consumer("ORDERS", durable_name="A", deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=aware)
    n = js.add_consumer("ORDERS", durable_name="N", deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=naive)
    assert n.config.opt_start_time == a.config.opt_start_time
    assert n.config.opt_start_time.tzinfo is not None
    assert n.num_pending == a.num_pending


def test_a_naive_seq_for_time_is_utc(jetspark_backend):
    js = jetspark_backend
    add_orders(js)
    t = js.get_msg("ORDERS", 3).time
    assert js.seq_for_time("ORDERS", t.replace(tzinfo=None)) == js.seq_for_time("ORDERS", t) == 3
