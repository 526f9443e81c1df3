"""Per-message TTL (``allow_msg_ttl`` + ``Nats-TTL``) and subject delete markers
(``subject_delete_marker_ttl``), as nats-server 2.15 answers them.

The ``js`` fixture runs the untimed tests on the engine, jetspark's nats:// backend and the
oracle (nats-py on a real server), file and memory; the timed ones (``tjs``) on the engine
and the oracle, as the server's time passes for real (``clock.advance`` sleeps there and moves the
engine's clock at once).  Each wait lands well inside a window the server's expiry timer
(which fires up to ~0.3 s after a deadline) cannot miss.  Every expected value is what the
server answered; jetspark/engine/msg_ttl.py and expiry.py are the engine's side.
"""

from __future__ import annotations

import pytest

from jetspark.errors import APIError
from tests.conftest import _backend

S = "TTL"
TTL_INVALID = (10165, 400, "invalid per-message TTL")
TTL_DISABLED = (10166, 400, "per-message TTL is disabled")
MARKER = {"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "1s", "Nats-Rollup": "sub"}


def invalid_config(message: str):
    return (10052, 500, message)


def answer(fn, *args, **kwargs):
    """(err_code, code, description) of the APIError ``fn`` raises, else its result."""
    try:
        return fn(*args, **kwargs)
    except APIError as exc:
        return (exc.err_code, exc.code, exc.description)


def stored(js, stream: str = S) -> list[tuple[int, str, dict | None]]:
    """(seq, subject, headers) of every message the stream holds, in order."""
    st = js.stream_info(stream).state
    out = []
    for seq in range(st.first_seq, st.last_seq + 1):
        try:
            m = js.get_msg(stream, seq)
        except APIError:
            continue
        out.append((m.seq, m.subject, m.headers))
    return out


def state(js, stream: str = S) -> tuple[int, int, int]:
    st = js.stream_info(stream).state
    return st.messages, st.first_seq, st.last_seq


def ttl_config(info) -> tuple:
    c = info.config
    return (c.allow_msg_ttl, c.subject_delete_marker_ttl, c.allow_rollup_hdrs, c.deny_purge)


# ---------------------------------------------------------------------- the header's forms (no time passes)

STORED_FORMS = ["5s", "60", "never", "NEVER", "00", "90.5s", "1m", "1h30m", "1000000000000", "5000000000"]
INVALID_FORMS = ["500ms", "999ms", "0", "0s", "-1", "-1s", "+5", "abc", "1e3", "1d", "9223372036854775808", "3000000h"]


def test_ttl_forms_the_server_stores(js):
    js.add_stream(name=S, subjects=["t.>"], allow_msg_ttl=True)
    for i, value in enumerate(STORED_FORMS, start=1):
        ack = js.publish("t.a", b"x", headers={"Nats-TTL": value})
        assert ack.seq == i, value
        assert js.get_msg(S, i).headers == {"Nats-TTL": value}


@pytest.mark.parametrize("value", INVALID_FORMS)
def test_ttl_forms_the_server_refuses_leave_nothing(js, value):
    js.add_stream(name=S, subjects=["t.>"], allow_msg_ttl=True)
    js.publish("t.a", b"before")
    assert answer(js.publish, "t.a", b"x", headers={"Nats-TTL": value, "Nats-Msg-Id": "m1"}) == TTL_INVALID
    assert state(js) == (1, 1, 1)
    assert js.publish("t.a", b"x", headers={"Nats-Msg-Id": "m1"}).duplicate is None  # the id was not recorded


def test_a_ttl_on_a_stream_without_allow_msg_ttl_is_refused(js):
    js.add_stream(name=S, subjects=["t.>"])
    assert answer(js.publish, "t.a", b"x", headers={"Nats-TTL": "5s"}) == TTL_DISABLED
    assert answer(js.publish, "t.a", b"x", headers={"Nats-TTL": "500ms"}) == TTL_INVALID
    assert state(js) == (0, 0, 0)


# ---------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, (False, None, False, False)),
        ({"allow_msg_ttl": True}, (True, None, False, False)),
        ({"subject_delete_marker_ttl": 1.0}, (True, 1.0, True, False)),
        ({"subject_delete_marker_ttl": 1.5, "allow_msg_ttl": False}, (True, 1.5, True, False)),
        ({"subject_delete_marker_ttl": 60.0, "deny_purge": True}, (True, 60.0, True, False)),
        ({"subject_delete_marker_ttl": 0}, (False, None, False, False)),
        ({"subject_delete_marker_ttl": 0.5}, invalid_config("subject delete marker TTL must be at least 1 second")),
        (
            {"subject_delete_marker_ttl": 1.0, "deny_purge": True, "allow_rollup_hdrs": True},
            invalid_config("roll-ups require the purge permission"),
        ),
    ],
)
def test_marker_config_as_the_server_stores_it(js, config, expected):
    got = answer(js.add_stream, name=S, subjects=["t.>"], **config)
    assert (ttl_config(got) if not isinstance(got, tuple) else got) == expected
    if isinstance(expected, tuple) and expected[0] == 10052:
        assert js.stream_names() == []


def test_a_negative_marker_ttl_is_refused(js):
    if js.kind == "oracle":
        pytest.skip("nats-py leaves a negative subject_delete_marker_ttl out of the request")
    got = answer(js.add_stream, name=S, subjects=["t.>"], subject_delete_marker_ttl=-1.0)
    assert got == invalid_config("subject delete marker TTL must not be negative")


def test_update_rules(js):
    js.add_stream(name=S, subjects=["t.>"])
    assert answer(js.publish, "t.a", b"x", headers={"Nats-TTL": "5s"}) == TTL_DISABLED
    # Turned on by an update: TTLs are taken from then on.
    assert ttl_config(js.update_stream(name=S, subjects=["t.>"], allow_msg_ttl=True)) == (True, None, False, False)
    assert js.publish("t.a", b"x", headers={"Nats-TTL": "5s"}).seq == 1
    # ... and never turned off again.
    assert answer(js.update_stream, name=S, subjects=["t.>"], allow_msg_ttl=False) == invalid_config(
        "message TTL status can not be disabled"
    )
    # Markers come and go by update; roll-ups follow them unless asked for.
    got = js.update_stream(name=S, subjects=["t.>"], allow_msg_ttl=True, subject_delete_marker_ttl=2.0)
    assert ttl_config(got) == (True, 2.0, True, False)
    got = js.update_stream(name=S, subjects=["t.>"], allow_msg_ttl=True)
    assert ttl_config(got) == (True, None, False, False)
    # A stream that denies purges cannot take markers, which purge.
    js.add_stream(name="DENY", subjects=["d.>"], deny_purge=True)
    assert answer(js.update_stream, name="DENY", subjects=["d.>"], subject_delete_marker_ttl=1.0) == invalid_config(
        "stream configuration update can not cancel deny purge"
    )


def test_a_ttl_shorter_than_the_marker_ttl_is_raised_to_it(js):
    js.add_stream(name=S, subjects=["t.>"], subject_delete_marker_ttl=3.0)
    js.publish("t.a", b"x", headers={"Nats-TTL": "2s", "X-A": "1"})
    js.publish("t.b", b"x", headers={"Nats-TTL": "never"})
    js.publish("t.c", b"x", headers={"Nats-TTL": "5s"})
    js.publish("t.d", b"x", headers={"Nats-TTL": "00"})
    raised = js.get_msg(S, 1)
    assert raised.hdrs == b"NATS/1.0\r\nX-A: 1\r\nNats-TTL: 3\r\n\r\n"
    assert [js.get_msg(S, q).headers for q in (2, 3, 4)] == [
        {"Nats-TTL": "never"},
        {"Nats-TTL": "5s"},
        {"Nats-TTL": "00"},
    ]
    # A subject that holds one message at most keeps its own TTL.
    js.add_stream(name="ONE", subjects=["o.>"], subject_delete_marker_ttl=3.0, max_msgs_per_subject=1)
    js.publish("o.a", b"x", headers={"Nats-TTL": "2s"})
    assert js.get_msg("ONE", 1).headers == {"Nats-TTL": "2s"}


def test_limits_other_than_max_age_leave_no_marker(js):
    js.add_stream(name=S, subjects=["t.>"], subject_delete_marker_ttl=60.0, max_msgs=2)
    js.publish("t.a", b"1")
    js.publish("t.b", b"2")
    js.publish("t.c", b"3")  # max_msgs removes t.a, its subject's last message
    js.delete_msg(S, 2)
    assert stored(js) == [(3, "t.c", None)]
    assert state(js) == (1, 3, 3)


# ---------------------------------------------------------------------- expiry (time passes)

# The server's time is real: one server backend decides the timed tests (the untimed ones
# above run on every backend, jetspark's nats:// included).
TIMED = ["engine-file", "engine-memory", "oracle-file"]


@pytest.fixture(params=TIMED)
def tjs(request, tmp_path):
    yield from _backend(request, tmp_path)


def test_ttl_expiry_and_max_age(tjs):
    js = tjs
    js.add_stream(name=S, subjects=["t.>"], allow_msg_ttl=True, max_age=2.0)
    for subject, ttl in [
        ("t.1", "1s"),
        ("t.2", "10s"),  # longer than max_age: max_age takes it
        ("t.3", "never"),  # max_age leaves it
        ("t.4", None),
        ("t.5", "1000000000000"),
        ("t.6", "2562047h"),  # the server's int64 deadline wraps to the past: gone at once
        ("t.7", "00"),  # no TTL
    ]:
        js.publish(subject, b"x", headers={"Nats-TTL": ttl} if ttl else None)
    js.publish("t.8", b"x", headers={"Nats-TTL": "1s", "Nats-Msg-Id": "m8"})
    js.clock.advance(1.5)
    assert [(q, s) for q, s, _ in stored(js)] == [(2, "t.2"), (3, "t.3"), (4, "t.4"), (5, "t.5"), (7, "t.7")]
    assert js.stream_info(S, deleted_details=True).state.deleted == [6, 8]
    # An expired message's id is still a duplicate within the window.
    ack = js.publish("t.8", b"x", headers={"Nats-Msg-Id": "m8"})
    assert (ack.seq, ack.duplicate) == (8, True)
    js.clock.advance(1.5)
    assert [(q, s) for q, s, _ in stored(js)] == [(3, "t.3")]
    assert state(js) == (1, 3, 8)


def test_markers_left_by_ttl_expiry(tjs):
    js = tjs
    js.add_stream(name=S, subjects=["u.>"], subject_delete_marker_ttl=1.0)
    js.publish("u.a", b"1", headers={"Nats-TTL": "1s"})  # 1: the subject's last: a marker
    js.publish("u.b", b"2", headers={"Nats-TTL": "5"})  # 2: deleted: no marker, then or later
    js.publish("u.c", b"3")  # 3: purged: no marker
    js.publish("u.d", b"4", headers={"Nats-TTL": "1s", "KV-Operation": "PURGE"})  # 4: a marker itself
    js.publish("u.e", b"5", headers={"Nats-TTL": "1s"})  # 5: not the subject's last
    js.publish("u.e", b"6", headers={"Nats-TTL": "1s"})  # 6: the subject's last: a marker
    js.publish("u.f", b"7", headers={"Nats-TTL": "1s"})  # 7: purged before its time: nothing
    js.delete_msg(S, 2)
    assert js.purge_stream(S, subject="u.c") == 1
    assert js.purge_stream(S, subject="u.f") == 1
    assert [q for q, _, _ in stored(js)] == [1, 4, 5, 6]
    js.clock.advance(1.5)
    assert stored(js) == [(8, "u.a", MARKER), (9, "u.e", MARKER)]
    assert [js.get_msg(S, q).data for q in (8, 9)] == [b"", b""]
    assert state(js) == (2, 8, 9)
    js.clock.advance(1.5)  # the markers' own TTL
    assert state(js) == (0, 10, 9)


def test_markers_left_by_max_age(tjs):
    js = tjs
    js.add_stream(name=S, subjects=["s.>"], max_age=1.5, subject_delete_marker_ttl=2.5)
    js.publish("s.a", b"1")
    js.publish("s.a", b"2")
    js.publish("s.b", b"3")
    js.publish("s.c", b"4", headers={"Nats-TTL": "never"})
    js.clock.advance(2.3)
    marker = {**MARKER, "Nats-TTL": "2s"}  # the marker TTL in whole seconds
    assert stored(js) == [(4, "s.c", {"Nats-TTL": "never"}), (5, "s.a", marker), (6, "s.b", marker)]
    assert js.stream_info(S, subjects_filter=">").state.subjects == {"s.a": 1, "s.b": 1, "s.c": 1}
    js.clock.advance(1.6)  # max_age takes the markers before their own TTL
    assert stored(js) == [(4, "s.c", {"Nats-TTL": "never"})]
    assert js.stream_info(S, deleted_details=True).state.deleted == [5, 6]


def positions(js, name: str):
    ci = js.consumer_info(S, name)
    return (ci.delivered.stream_seq, ci.ack_floor.stream_seq, ci.num_ack_pending, ci.num_pending)


def test_consumers_after_expiry_and_markers(tjs):
    js = tjs
    js.add_stream(name=S, subjects=["c.>"], subject_delete_marker_ttl=1.0)
    js.add_consumer(S, durable_name="D", ack_policy="explicit", ack_wait=30.0)
    js.add_consumer(S, durable_name="E", ack_policy="explicit", filter_subject="c.b")
    js.publish("c.a", b"1", headers={"Nats-TTL": "1s"})
    js.publish("c.b", b"2", headers={"Nats-TTL": "1s"})
    js.publish("c.c", b"3")
    sub = js.pull_subscribe_bind(durable="D", stream=S)
    assert [m.subject for m in sub.fetch(1, timeout=5)] == ["c.a"]  # pending when it expires
    assert positions(js, "D") == (1, 0, 1, 2)
    js.clock.advance(1.5)
    assert [q for q, _, _ in stored(js)] == [3, 4, 5]
    # The markers' rollups purge the expired messages: the pending one counts as acked.
    assert positions(js, "D") == (2, 2, 0, 3)
    assert positions(js, "E") == (4, 4, 0, 1)
    got = sub.fetch(3, timeout=5)
    assert [(m.subject, m.headers) for m in got] == [("c.c", None), ("c.a", MARKER), ("c.b", MARKER)]
    assert positions(js, "D") == (5, 2, 3, 0)


def test_markers_on_work_queue_and_interest_streams(tjs):
    js = tjs
    js.add_stream(name="W", subjects=["w.>"], retention="workqueue", subject_delete_marker_ttl=1.0)
    js.add_consumer("W", durable_name="Q", ack_policy="explicit")
    js.publish("w.a", b"1", headers={"Nats-TTL": "1s"})
    js.add_stream(name="I", subjects=["i.>"], retention="interest", subject_delete_marker_ttl=1.0)
    js.add_consumer("I", durable_name="Q", ack_policy="explicit", filter_subject="i.a")
    assert js.publish("i.a", b"1", headers={"Nats-TTL": "1s"}).seq == 1
    assert js.publish("i.b", b"1", headers={"Nats-TTL": "1s"}).seq == 2  # nobody wants it: not stored
    js.clock.advance(1.5)
    assert stored(js, "W") == [(2, "w.a", MARKER)]
    assert stored(js, "I") == [(3, "i.a", MARKER)]
    ci = js.consumer_info("W", "Q")
    assert (ci.delivered.stream_seq, ci.ack_floor.stream_seq, ci.num_pending) == (1, 1, 1)
    ci = js.consumer_info("I", "Q")
    assert (ci.delivered.stream_seq, ci.ack_floor.stream_seq, ci.num_pending) == (2, 2, 1)


def test_where_the_stream_refuses_the_marker_the_message_stays(tjs):
    js = tjs
    js.add_stream(name="A", subjects=["a.>"], allow_msg_ttl=True)
    js.add_stream(name="B", subjects=["b.>"], subject_delete_marker_ttl=1.0)
    js.add_stream(name="C", subjects=["c.>"], subject_delete_marker_ttl=1.0, max_msgs=2, discard="new")
    js.publish("a.x", b"1", headers={"Nats-TTL": "1s"})
    js.publish("b.x", b"1", headers={"Nats-TTL": "1s"})
    js.publish("c.x", b"1", headers={"Nats-TTL": "1s"})
    js.publish("c.y", b"1")
    js.update_stream(name="A", subjects=["a.>"], allow_msg_ttl=True, sealed=True)
    sealed = js.update_stream(name="B", subjects=["b.>"], subject_delete_marker_ttl=1.0, sealed=True)
    assert ttl_config(sealed) == (True, 1.0, False, True)  # sealing turns roll-ups off
    js.clock.advance(1.5)
    assert state(js, "A") == (0, 2, 1)  # a sealed stream's TTL still expires
    assert state(js, "B") == (1, 1, 1)  # ... but its marker is refused: the message stays
    assert state(js, "C") == (2, 1, 2)  # a full discard-new stream refuses the marker too


def test_a_marker_max_age_cannot_store_yet_is_stored_later(tjs):
    js = tjs
    js.add_stream(name="B", subjects=["b.>"], subject_delete_marker_ttl=1.0, max_age=1.0, max_msgs=3, discard="new")
    js.publish("b.x", b"1")  # the subject's last, on a full discard-new stream: its marker is refused
    js.publish("b.y", b"2")  # not the subject's last: removed, which makes room
    js.publish("b.y", b"3")  # then the last: its marker (4) is stored
    js.clock.advance(1.5)
    st = js.stream_info("B", deleted_details=True).state
    assert (st.messages, st.first_seq, st.last_seq, st.deleted) == (2, 1, 4, [2, 3])
    # b.x's marker is tried again later (the engine at its next operation, the server at a
    # later run of its timer: when differs), stored (5), and expires after its own second.
    js.clock.advance(4.5)
    assert state(js, "B") == (0, 6, 5)


def test_consumers_after_ttl_expiry_without_markers(tjs):
    js = tjs
    js.add_stream(name=S, subjects=["c.>"], allow_msg_ttl=True)
    js.add_consumer(S, durable_name="D", ack_policy="explicit", ack_wait=30.0)
    js.publish("c.a", b"1", headers={"Nats-TTL": "1s"})
    js.publish("c.b", b"2", headers={"Nats-TTL": "1s"})
    js.publish("c.c", b"3")
    sub = js.pull_subscribe_bind(durable="D", stream=S)
    assert [m.subject for m in sub.fetch(1, timeout=5)] == ["c.a"]  # pending when it expires
    js.clock.advance(1.5)
    assert state(js) == (1, 3, 3)
    # As a delete: the expired pending one counts as acked, the other is not delivered.
    assert positions(js, "D") == (1, 1, 0, 1)
    assert [m.subject for m in sub.fetch(2, timeout=5)] == ["c.c"]
    assert positions(js, "D") == (3, 1, 1, 0)
