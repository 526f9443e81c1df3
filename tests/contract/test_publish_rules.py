"""Publish-time rules: dedup, Nats-Expected-* headers, rollups, sealed streams, order of checks.

docs/semantics.md §3.5-§3.6.  Every expected value here was checked against a real
nats-server (v2.15.1); the ``js`` fixture runs each test on the embedded engine
and on the server, with file and with memory storage.
"""

from __future__ import annotations

import pytest

from jetspark.api import DiscardPolicy, PubAck
from jetspark.errors import APIError

MSG_ID = "Nats-Msg-Id"
EXP_STREAM = "Nats-Expected-Stream"
EXP_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXP_LAST_SUBJ_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXP_LAST_SUBJ_SEQ_SUBJ = "Nats-Expected-Last-Subject-Sequence-Subject"
EXP_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
ROLLUP = "Nats-Rollup"

SEALED = (10109, 400, "invalid operation on sealed stream")
TOO_BIG = (10054, 400, "message size exceeds maximum allowed")
WRONG_STREAM = (10060, 400, "expected stream does not match")
NO_SUBJ_SEQ = (10193, 400, "missing sequence for expected last sequence per subject")
ROLLUP_NOT_PERMITTED = (10111, 500, "rollup not permitted")
MAX_MSGS = (10077, 503, "maximum messages exceeded")


def wrong_last_seq(seq: int):
    return (10071, 400, f"wrong last sequence: {seq}")


def wrong_last_msg_id(msg_id: str):
    return (10070, 400, f"wrong last msg ID: {msg_id}")


def rollup_invalid(value: str):
    return (10111, 500, f'rollup value invalid: "{value}"')


# ---------------------------------------------------------------- helpers


def assert_state(js, stream: str, **expected) -> None:
    """Compare the named StreamState fields (messages, bytes, first_seq, ...) with ``expected``."""
    state = js.stream_info(stream).state
    actual = {k: getattr(state, k) for k in expected}
    assert actual == expected


def expect_error(fn, *args, error, **kwargs) -> None:
    """``error`` is (err_code, code, description)."""
    with pytest.raises(APIError) as exc:
        fn(*args, **kwargs)
    err = exc.value
    assert (err.err_code, err.code, err.description) == error


def setup_ops(js, stream: str, ops: str) -> None:
    """Run a compact script of operations on ``stream`` (whose subjects are ``e.>``).

    ``a`` publishes on e.a, ``b:m1`` publishes on e.b with Nats-Msg-Id m1,
    ``-2`` deletes seq 2, ``P`` purges the stream.
    """
    for op in ops.split():
        if op == "P":
            js.purge_stream(stream)
        elif op.startswith("-"):
            js.delete_msg(stream, int(op[1:]))
        else:
            token, _, msg_id = op.partition(":")
            js.publish(f"e.{token}", b"", headers={MSG_ID: msg_id} if msg_id else None)


def state_tuple(js, stream: str):
    s = js.stream_info(stream).state
    return (s.messages, s.bytes, s.first_seq, s.last_seq, s.num_deleted, s.num_subjects)


def check_outcome(js, stream: str, subject: str, headers: dict, expected) -> None:
    """``expected`` is a stored seq (int) or an error tuple; a rejection must store nothing."""
    before = state_tuple(js, stream)
    if isinstance(expected, int):
        assert js.publish(subject, b"", headers=headers) == PubAck(stream=stream, seq=expected)
        after = state_tuple(js, stream)
        assert (after[0], after[3]) == (before[0] + 1, expected)
    else:
        expect_error(js.publish, subject, b"", headers=headers, error=expected)
        assert state_tuple(js, stream) == before


# ---------------------------------------------------------------- §3.5 dedup


def test_duplicate_gets_the_original_seq_and_is_not_stored(js):
    js.add_stream(name="DD", subjects=["d.>"])
    assert js.publish("d.a", b"one", headers={MSG_ID: "m1"}) == PubAck(stream="DD", seq=1)
    assert js.publish("d.b", b"x") == PubAck(stream="DD", seq=2)
    state = state_tuple(js, "DD")

    # same id: duplicate, whatever the subject or payload
    assert js.publish("d.a", b"one", headers={MSG_ID: "m1"}) == PubAck(stream="DD", seq=1, duplicate=True)
    assert js.publish("d.c", b"other", headers={MSG_ID: "m1"}) == PubAck(stream="DD", seq=1, duplicate=True)
    assert state_tuple(js, "DD") == state
    assert js.get_msg("DD", 1).data == b"one"

    # another id is a new message
    assert js.publish("d.a", b"two", headers={MSG_ID: "m2"}) == PubAck(stream="DD", seq=3)
    assert_state(js, "DD", messages=3, first_seq=1, last_seq=3)


def test_duplicate_of_a_deleted_original(js):
    js.add_stream(name="DD", subjects=["d.>"])
    js.publish("d.a", b"", headers={MSG_ID: "m1"})
    js.publish("d.a", b"")
    js.delete_msg("DD", 1)
    assert js.publish("d.a", b"", headers={MSG_ID: "m1"}) == PubAck(stream="DD", seq=1, duplicate=True)
    assert_state(js, "DD", messages=1, first_seq=2, last_seq=2)


def test_dedup_survives_purge(js):
    js.add_stream(name="DD", subjects=["d.>"])
    js.publish("d.a", b"", headers={MSG_ID: "m1"})
    js.publish("d.a", b"", headers={MSG_ID: "m2"})
    js.purge_stream("DD")
    assert js.publish("d.a", b"", headers={MSG_ID: "m1"}) == PubAck(stream="DD", seq=1, duplicate=True)
    assert js.publish("d.a", b"", headers={MSG_ID: "m2"}) == PubAck(stream="DD", seq=2, duplicate=True)
    assert_state(js, "DD", messages=0, bytes=0, first_seq=3, last_seq=2)
    assert js.publish("d.a", b"", headers={MSG_ID: "m3"}) == PubAck(stream="DD", seq=3)


def test_rejected_publish_does_not_record_its_id(js):
    js.add_stream(name="DD", subjects=["d.>"])
    js.publish("d.a", b"")
    expect_error(js.publish, "d.a", b"", headers={MSG_ID: "m1", EXP_LAST_SEQ: "7"}, error=wrong_last_seq(1))
    assert js.publish("d.a", b"", headers={MSG_ID: "m1"}) == PubAck(stream="DD", seq=2)


def test_dedup_window_runs_from_the_original(js):
    js.add_stream(name="DD", subjects=["d.>"], duplicate_window=0.4)
    assert js.stream_info("DD").config.duplicate_window == 0.4
    assert js.publish("d.a", b"", headers={MSG_ID: "m1"}) == PubAck(stream="DD", seq=1)

    js.clock.advance(0.25)  # original 0.25 s old: inside the window
    assert js.publish("d.a", b"", headers={MSG_ID: "m1"}) == PubAck(stream="DD", seq=1, duplicate=True)

    # original 0.6 s old, the duplicate only 0.35 s: the duplicate did not extend
    # the window, so the id is new again
    js.clock.advance(0.35)
    assert js.publish("d.a", b"", headers={MSG_ID: "m1"}) == PubAck(stream="DD", seq=2)
    # ... and that message starts a new window
    assert js.publish("d.a", b"", headers={MSG_ID: "m1"}) == PubAck(stream="DD", seq=2, duplicate=True)
    assert_state(js, "DD", messages=2, first_seq=1, last_seq=2)


# ---------------------------------------------------------------- §3.6 Nats-Expected-Stream


# publish on e.a to stream "E"
@pytest.mark.parametrize(
    "expected_stream, expected",
    [
        ("E", 2),  # matches
        ("X", WRONG_STREAM),  # another name
        ("e", WRONG_STREAM),  # names are case-sensitive
    ],
)
def test_expected_stream(js, expected_stream, expected):
    js.add_stream(name="E", subjects=["e.>"])
    js.publish("e.a", b"")
    check_outcome(js, "E", "e.a", {EXP_STREAM: expected_stream}, expected)


# ---------------------------------------------------------------- §3.6 Nats-Expected-Last-Sequence


# setup ops (see setup_ops), header value, stored seq or error; publish on e.a
@pytest.mark.parametrize(
    "ops, value, expected",
    [
        ("", "0", 1),  # 0 matches a never-written stream
        ("", "1", wrong_last_seq(0)),
        ("a b", "2", 3),
        ("a b", "1", wrong_last_seq(2)),
        ("a b", "0", wrong_last_seq(2)),
        ("a b -2", "2", 3),  # a deleted last message still counts
        ("a b -2", "1", wrong_last_seq(2)),
        ("a b P", "2", 3),  # so does a purged one
        ("a b P", "0", wrong_last_seq(2)),
    ],
)
def test_expected_last_sequence(js, ops, value, expected):
    js.add_stream(name="E", subjects=["e.>"])
    setup_ops(js, "E", ops)
    check_outcome(js, "E", "e.a", {EXP_LAST_SEQ: value}, expected)


# ---------------------------------------------------------------- §3.6 Nats-Expected-Last-Subject-Sequence


# setup ops, headers, stored seq or error; publish on e.a.
# The value is the seq of the last *stored* message on the subject (0 = none);
# ...-Subject names another subject (or a wildcard) to check instead.
@pytest.mark.parametrize(
    "ops, headers, expected",
    [
        ("", {EXP_LAST_SUBJ_SEQ: "0"}, 1),
        ("", {EXP_LAST_SUBJ_SEQ: "1"}, wrong_last_seq(0)),
        ("a b", {EXP_LAST_SUBJ_SEQ: "1"}, 3),
        ("a b", {EXP_LAST_SUBJ_SEQ: "2"}, wrong_last_seq(1)),  # 2 is the stream's last, not e.a's
        ("a b", {EXP_LAST_SUBJ_SEQ: "0"}, wrong_last_seq(1)),
        ("b", {EXP_LAST_SUBJ_SEQ: "0"}, 2),  # no e.a message yet
        ("a b -1", {EXP_LAST_SUBJ_SEQ: "0"}, 3),  # e.a's only message was deleted
        ("a b -1", {EXP_LAST_SUBJ_SEQ: "1"}, wrong_last_seq(0)),
        ("a a -2", {EXP_LAST_SUBJ_SEQ: "1"}, 3),  # deleting e.a's last falls back to its previous
        ("a a -2", {EXP_LAST_SUBJ_SEQ: "2"}, wrong_last_seq(1)),
        # with -Subject
        ("a b", {EXP_LAST_SUBJ_SEQ: "2", EXP_LAST_SUBJ_SEQ_SUBJ: "e.b"}, 3),
        ("a b", {EXP_LAST_SUBJ_SEQ: "1", EXP_LAST_SUBJ_SEQ_SUBJ: "e.b"}, wrong_last_seq(2)),
        ("a b", {EXP_LAST_SUBJ_SEQ: "2", EXP_LAST_SUBJ_SEQ_SUBJ: "e.*"}, 3),  # wildcard: last of any match
        ("a b", {EXP_LAST_SUBJ_SEQ: "1", EXP_LAST_SUBJ_SEQ_SUBJ: "e.*"}, wrong_last_seq(2)),
        ("a b", {EXP_LAST_SUBJ_SEQ: "0", EXP_LAST_SUBJ_SEQ_SUBJ: "e.zz"}, 3),
        # -Subject alone
        ("a b", {EXP_LAST_SUBJ_SEQ_SUBJ: "e.b"}, NO_SUBJ_SEQ),
        ("", {EXP_LAST_SUBJ_SEQ_SUBJ: "e.a"}, NO_SUBJ_SEQ),
    ],
)
def test_expected_last_subject_sequence(js, ops, headers, expected):
    js.add_stream(name="E", subjects=["e.>"])
    setup_ops(js, "E", ops)
    check_outcome(js, "E", "e.a", headers, expected)


# ---------------------------------------------------------------- §3.6 Nats-Expected-Last-Msg-Id


# setup ops, header value, stored seq or error; publish on e.a.
# Compared with the Nats-Msg-Id of the last message stored (empty if it had none).
@pytest.mark.parametrize(
    "ops, value, expected",
    [
        ("", "", 1),
        ("", "x", wrong_last_msg_id("")),
        ("a:m1", "m1", 2),
        ("a:m1", "m0", wrong_last_msg_id("m1")),
        ("a:m1 b", "m1", wrong_last_msg_id("")),  # the last message has no id
        ("a:m1 b", "", 3),
        ("a:m1 b:m2", "m2", 3),  # any subject
        ("a:m1 b:m2 -2", "m2", 3),  # deleting the last message does not forget its id
        ("a:m1 b:m2 -2", "m1", wrong_last_msg_id("m2")),
        ("a:m1 b:m2 P", "m2", 3),  # nor does a purge
        ("a:m1 b:m2 a:m1", "m2", 3),  # a duplicate is not stored, so it does not count
        ("a:m1 b:m2 a:m1", "m1", wrong_last_msg_id("m2")),
    ],
)
def test_expected_last_msg_id(js, ops, value, expected):
    js.add_stream(name="E", subjects=["e.>"])
    setup_ops(js, "E", ops)
    check_outcome(js, "E", "e.a", {EXP_LAST_MSG_ID: value}, expected)


def test_expected_last_msg_id_with_own_msg_id(js):
    js.add_stream(name="E", subjects=["e.>"])
    assert js.publish("e.a", b"", headers={MSG_ID: "m1"}) == PubAck(stream="E", seq=1)
    # a chain: each message names its predecessor's id
    assert js.publish("e.a", b"", headers={MSG_ID: "m2", EXP_LAST_MSG_ID: "m1"}) == PubAck(stream="E", seq=2)
    assert js.publish("e.a", b"", headers={MSG_ID: "m3", EXP_LAST_MSG_ID: "m2"}) == PubAck(stream="E", seq=3)
    expect_error(js.publish, "e.a", b"", headers={MSG_ID: "m4", EXP_LAST_MSG_ID: "m2"}, error=wrong_last_msg_id("m3"))
    assert_state(js, "E", messages=3, first_seq=1, last_seq=3)


# ---------------------------------------------------------------- §3.6 rollup


def _seed_rollup(js):
    # seqs:          1      2      3      4      5      6
    for subject in ["r.a", "r.b", "r.a", "r.c", "r.a", "r.b"]:
        js.publish(subject, b"x")


def test_rollup_sub(js):
    js.add_stream(name="R", subjects=["r.>"], allow_rollup_hdrs=True)
    _seed_rollup(js)
    assert js.publish("r.a", b"sum", headers={ROLLUP: "sub"}) == PubAck(stream="R", seq=7)
    # r.a's 1, 3, 5 are purged: 1 moves first_seq, 3 and 5 are interior gaps
    size = js.msg_bytes("r.a", b"x")
    rolled = js.msg_bytes("r.a", b"sum", b"NATS/1.0\r\nNats-Rollup: sub\r\n\r\n")
    assert_state(js, "R", messages=4, bytes=3 * size + rolled, first_seq=2, last_seq=7, num_deleted=2, num_subjects=3)
    info = js.stream_info("R", subjects_filter=">", deleted_details=True)
    assert info.state.deleted == [3, 5]
    assert info.state.subjects == {"r.a": 1, "r.b": 2, "r.c": 1}
    assert js.get_last_msg("R", "r.a").data == b"sum"


def test_rollup_all(js):
    js.add_stream(name="R", subjects=["r.>"], allow_rollup_hdrs=True)
    _seed_rollup(js)
    assert js.publish("r.b", b"sum", headers={ROLLUP: "all"}) == PubAck(stream="R", seq=7)
    rolled = js.msg_bytes("r.b", b"sum", b"NATS/1.0\r\nNats-Rollup: all\r\n\r\n")
    assert_state(js, "R", messages=1, bytes=rolled, first_seq=7, last_seq=7, num_deleted=0, num_subjects=1)


def test_rollup_sub_on_a_new_subject_removes_nothing(js):
    js.add_stream(name="R", subjects=["r.>"], allow_rollup_hdrs=True)
    _seed_rollup(js)
    assert js.publish("r.d", b"sum", headers={ROLLUP: "sub"}) == PubAck(stream="R", seq=7)
    assert_state(js, "R", messages=7, first_seq=1, last_seq=7, num_deleted=0, num_subjects=4)


# The value is matched case-insensitively (observed on nats-server 2.15.1).
@pytest.mark.parametrize("value, messages_after", [("SUB", 4), ("All", 1)])
def test_rollup_value_case(js, value, messages_after):
    js.add_stream(name="R", subjects=["r.>"], allow_rollup_hdrs=True)
    _seed_rollup(js)
    assert js.publish("r.a", b"sum", headers={ROLLUP: value}) == PubAck(stream="R", seq=7)
    assert_state(js, "R", messages=messages_after, last_seq=7)


# allow_rollup_hdrs, value, error
@pytest.mark.parametrize(
    "allowed, value, error",
    [
        (True, "foo", rollup_invalid("foo")),
        (True, "subject", rollup_invalid("subject")),
        (False, "sub", ROLLUP_NOT_PERMITTED),
        (False, "all", ROLLUP_NOT_PERMITTED),
        (False, "foo", ROLLUP_NOT_PERMITTED),  # permission is checked before the value
    ],
)
def test_rollup_rejected(js, allowed, value, error):
    js.add_stream(name="R", subjects=["r.>"], allow_rollup_hdrs=allowed)
    _seed_rollup(js)
    before = state_tuple(js, "R")
    expect_error(js.publish, "r.a", b"sum", headers={ROLLUP: value}, error=error)
    assert state_tuple(js, "R") == before
    assert before[:4] == (6, 6 * js.msg_bytes("r.a", b"x"), 1, 6)


# ---------------------------------------------------------------- §3.6 sealed


def _sealed_stream(js):
    js.add_stream(name="SEAL", subjects=["s.>"], max_msg_size=64)
    js.publish("s.a", b"1", headers={MSG_ID: "m1"})
    js.publish("s.b", b"2")
    info = js.update_stream(name="SEAL", subjects=["s.>"], max_msg_size=64, sealed=True)
    assert info.config.sealed is True
    return state_tuple(js, "SEAL")


def test_sealed_stream_refuses_publish_purge_and_delete(js):
    before = _sealed_stream(js)
    size = js.msg_bytes("s.a", b"1", b"NATS/1.0\r\nNats-Msg-Id: m1\r\n\r\n") + js.msg_bytes("s.b", b"2")
    assert before == (2, size, 1, 2, 0, 2)
    expect_error(js.publish, "s.a", b"x", error=SEALED)
    expect_error(js.purge_stream, "SEAL", error=SEALED)
    expect_error(js.purge_stream, "SEAL", subject="s.a", error=SEALED)
    expect_error(js.delete_msg, "SEAL", 1, error=SEALED)
    expect_error(js.delete_msg, "SEAL", 9, error=SEALED)  # even for a missing seq
    assert state_tuple(js, "SEAL") == before
    assert js.get_msg("SEAL", 1).data == b"1"


# Sealed is the first check of all: it wins over every other reason to refuse.
@pytest.mark.parametrize(
    "payload, headers",
    [
        (b"x" * 65, None),  # too big
        (b"", {EXP_STREAM: "X"}),
        (b"", {EXP_LAST_SEQ: "9"}),
        (b"", {MSG_ID: "m1"}),  # would be a duplicate
        (b"", {ROLLUP: "all"}),
    ],
)
def test_sealed_is_checked_first(js, payload, headers):
    before = _sealed_stream(js)
    expect_error(js.publish, "s.a", payload, headers=headers, error=SEALED)
    assert state_tuple(js, "SEAL") == before


# ---------------------------------------------------------------- §3.6 order of checks

# Stream E (discard new, max_msgs 3, max_msg_size 256, rollups not allowed) holds
#   1 e.a  Nats-Msg-Id: m1
#   2 e.b
#   3 e.c
# so it is full: anything that passes every check is refused with 10077.
# Each case combines two failing checks; the earlier one decides.
# The server's order: sealed -> size -> expected stream -> last subject seq ->
# last seq -> dedup -> last msg id -> rollup -> limits.
BIG = b"x" * 257


@pytest.mark.parametrize(
    "payload, headers, expected",
    [
        # size before expected stream, last (subject) seq, dedup, last msg id, rollup
        # (nats-server 2.15.1 checks the size before the rollup header: docs/semantics.md §3.6)
        (BIG, {EXP_STREAM: "X"}, TOO_BIG),
        (BIG, {EXP_LAST_SUBJ_SEQ: "9"}, TOO_BIG),
        (BIG, {EXP_LAST_SUBJ_SEQ_SUBJ: "e.b"}, TOO_BIG),
        (BIG, {EXP_LAST_SEQ: "9"}, TOO_BIG),
        (BIG, {MSG_ID: "m1"}, TOO_BIG),
        (BIG, {EXP_LAST_MSG_ID: "zz"}, TOO_BIG),
        (BIG, {ROLLUP: "sub"}, TOO_BIG),
        (BIG, None, TOO_BIG),  # size before limits
        # expected stream before last subject seq (and its 10193)
        (b"", {EXP_STREAM: "X", EXP_LAST_SUBJ_SEQ: "9"}, WRONG_STREAM),
        (b"", {EXP_STREAM: "X", EXP_LAST_SUBJ_SEQ_SUBJ: "e.b"}, WRONG_STREAM),
        # last subject seq before last seq: e.a's last is 1, the stream's 3
        (b"", {EXP_LAST_SUBJ_SEQ: "9", EXP_LAST_SEQ: "9"}, wrong_last_seq(1)),
        (b"", {EXP_LAST_SUBJ_SEQ_SUBJ: "e.b", EXP_LAST_SEQ: "3"}, NO_SUBJ_SEQ),
        # last seq before dedup: a duplicate with a stale expected-last-sequence
        (b"", {EXP_LAST_SEQ: "2", MSG_ID: "m1"}, wrong_last_seq(3)),
        # ... but with a correct one it is a duplicate
        (b"", {EXP_LAST_SEQ: "3", MSG_ID: "m1"}, 1),
        # dedup before last msg id, rollup and limits (a duplicate ack, seq 1)
        (b"", {MSG_ID: "m1", EXP_LAST_MSG_ID: "zz"}, 1),
        (b"", {MSG_ID: "m1", ROLLUP: "sub"}, 1),
        (b"", {MSG_ID: "m1", ROLLUP: "foo"}, 1),
        (b"", {MSG_ID: "m1"}, 1),
        # last msg id before rollup
        (b"", {EXP_LAST_MSG_ID: "zz", ROLLUP: "sub"}, wrong_last_msg_id("")),
        # rollup before limits
        (b"", {ROLLUP: "sub"}, ROLLUP_NOT_PERMITTED),
        # every expectation met: the limit decides
        (b"", {EXP_STREAM: "E", EXP_LAST_SUBJ_SEQ: "1", EXP_LAST_SEQ: "3", EXP_LAST_MSG_ID: ""}, MAX_MSGS),
    ],
)
def test_order_of_checks(js, payload, headers, expected):
    js.add_stream(name="E", subjects=["e.>"], discard=DiscardPolicy.NEW, max_msgs=3, max_msg_size=256)
    js.publish("e.a", b"", headers={MSG_ID: "m1"})
    js.publish("e.b", b"")
    js.publish("e.c", b"")
    before = state_tuple(js, "E")
    size = js.msg_bytes("e.a", b"", b"NATS/1.0\r\nNats-Msg-Id: m1\r\n\r\n") + 2 * js.msg_bytes("e.b", b"")
    assert before == (3, size, 1, 3, 0, 3)
    if isinstance(expected, int):
        # a duplicate: acked with the original's seq, nothing stored
        assert js.publish("e.a", payload, headers=headers) == PubAck(stream="E", seq=expected, duplicate=True)
    else:
        expect_error(js.publish, "e.a", payload, headers=headers, error=expected)
    assert state_tuple(js, "E") == before
