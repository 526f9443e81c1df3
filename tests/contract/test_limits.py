"""Limits retention: byte accounting, size and count limits, discard policies, max_age.

docs/semantics.md §3.1-§3.2.  Every expected value here was checked against a real
nats-server (v2.15.1); the ``js`` fixture runs each test on the embedded engine
and on the server, with file and with memory storage.
"""

from __future__ import annotations

import pytest

from jetspark.api import DiscardPolicy, PubAck
from jetspark.errors import APIError

# ---------------------------------------------------------------- helpers


def hdr_block(headers: dict[str, str]) -> bytes:
    """The NATS header block a publish with ``headers`` stores: ``NATS/1.0\\r\\nK: v\\r\\n\\r\\n``."""
    return b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n"


def assert_state(js, stream: str, **expected) -> None:
    """Compare the named StreamState fields (messages, bytes, first_seq, ...) with ``expected``."""
    state = js.stream_info(stream).state
    actual = {k: getattr(state, k) for k in expected}
    assert actual == expected


def expect_error(fn, *args, err_code: int, code: int, description: str, **kwargs) -> None:
    with pytest.raises(APIError) as exc:
        fn(*args, **kwargs)
    err = exc.value
    assert (err.err_code, err.code, err.description) == (err_code, code, description)


def expect_limit(js, subject: str, payload: bytes, description: str, headers=None) -> None:
    """A publish refused by ``discard: new`` (10077, HTTP 503)."""
    expect_error(js.publish, subject, payload, headers=headers, err_code=10077, code=503, description=description)


# ---------------------------------------------------------------- §3.1 size accounting

HELLO = b"hello"


# File store:   22 + len(subject) + len(payload) + 8, with headers + 4 + len(hdr)
# Memory store: len(subject) + len(hdr) + len(payload) + 16
@pytest.mark.parametrize(
    "subject, payload, headers, file_bytes, memory_bytes",
    [
        # the reference example: "bb.x" + 5 bytes
        ("bb.x", HELLO, None, 39, 25),
        # the same with an 18-byte header block "NATS/1.0\r\nK: v\r\n\r\n"
        ("bb.x", HELLO, {"K": "v"}, 61, 43),
        # empty payload
        ("bb.x", b"", None, 34, 20),
        # longer subject, 100-byte binary payload
        ("bb.orders.eu.new", bytes(range(100)), None, 146, 132),
        # a Nats-Msg-Id header is stored and counted like any header (30-byte block)
        ("bb.x", HELLO, {"Nats-Msg-Id": "abc"}, 73, 55),
        # two headers: 26-byte block
        ("bb.x", HELLO, {"A": "1", "Bb": "22"}, 69, 51),
    ],
)
def test_bytes_per_message(js, subject, payload, headers, file_bytes, memory_bytes):
    js.add_stream(name="SIZE", subjects=["bb.>"])
    ack = js.publish(subject, payload, headers=headers)
    assert ack == PubAck(stream="SIZE", seq=1)
    expected = {"file": file_bytes, "memory": memory_bytes}[js.storage]
    assert js.msg_bytes(subject, payload, hdr_block(headers) if headers else b"") == expected
    assert_state(js, "SIZE", messages=1, bytes=expected, first_seq=1, last_seq=1, num_subjects=1)
    msg = js.get_msg("SIZE", 1)
    assert (msg.subject, msg.data) == (subject, payload)
    if headers:
        assert msg.hdrs == hdr_block(headers)


def test_bytes_are_summed_and_released(js):
    js.add_stream(name="SIZE", subjects=["bb.>"])
    js.publish("bb.x", HELLO)  # 39 / 25
    js.publish("bb.x", HELLO, headers={"K": "v"})  # 61 / 43
    js.publish("bb.y", b"")  # 34 / 20
    total = {"file": 39 + 61 + 34, "memory": 25 + 43 + 20}[js.storage]
    assert_state(js, "SIZE", messages=3, bytes=total, first_seq=1, last_seq=3, num_subjects=2)

    # deleting the message with headers gives back exactly its bytes
    js.delete_msg("SIZE", 2)
    total = {"file": 39 + 34, "memory": 25 + 20}[js.storage]
    assert_state(js, "SIZE", messages=2, bytes=total, first_seq=1, last_seq=3, num_deleted=1, num_subjects=2)

    js.purge_stream("SIZE")
    assert_state(js, "SIZE", messages=0, bytes=0, first_seq=4, last_seq=3, num_deleted=0, num_subjects=0)


# ---------------------------------------------------------------- §3.2 max_msg_size


# max_msg_size = 20: rejected if hdr > 20 or hdr + payload > 20; the subject is not counted.
@pytest.mark.parametrize(
    "subject, payload, headers, accepted",
    [
        ("m.a", b"x" * 20, None, True),  # payload exactly at the limit
        ("m.a", b"x" * 21, None, False),  # one byte over
        ("m." + "s" * 60, b"x" * 20, None, True),  # a long subject does not count
        ("m.a", b"", {"K": "v"}, True),  # 18-byte header block alone
        ("m.a", b"xx", {"K": "v"}, True),  # 18 + 2 = 20
        ("m.a", b"xxx", {"K": "v"}, False),  # 18 + 3 = 21
        ("m.a", b"", {"Kkk": "v"}, True),  # 20-byte header block alone
        ("m.a", b"", {"Kkkk": "v"}, False),  # 21-byte header block, empty payload
        ("m.a", b"", {"Nats-Msg-Id": "abc"}, False),  # 30-byte block: JetStream headers count too
    ],
)
def test_max_msg_size(js, subject, payload, headers, accepted):
    js.add_stream(name="MSZ", subjects=["m.>"], max_msg_size=20)
    js.publish("m.seed", b"")
    seed = js.msg_bytes("m.seed", b"")
    if accepted:
        assert js.publish(subject, payload, headers=headers) == PubAck(stream="MSZ", seq=2)
        size = js.msg_bytes(subject, payload, hdr_block(headers) if headers else b"")
        assert_state(js, "MSZ", messages=2, bytes=seed + size, first_seq=1, last_seq=2)
    else:
        expect_error(
            js.publish,
            subject,
            payload,
            headers=headers,
            err_code=10054,
            code=400,
            description="message size exceeds maximum allowed",
        )
        # nothing stored, no sequence consumed
        assert_state(js, "MSZ", messages=1, bytes=seed, first_seq=1, last_seq=1, num_subjects=1)
        assert js.publish("m.a", b"") == PubAck(stream="MSZ", seq=2)


# ---------------------------------------------------------------- §3.2 discard old


def test_discard_old_max_msgs(js):
    js.add_stream(name="OLD", subjects=["o.>"], max_msgs=3)
    for i in range(1, 6):
        assert js.publish("o.a", b"x") == PubAck(stream="OLD", seq=i)
    size = js.msg_bytes("o.a", b"x")
    assert_state(js, "OLD", messages=3, bytes=3 * size, first_seq=3, last_seq=5, num_deleted=0, num_subjects=1)
    assert js.get_msg("OLD", 3).seq == 3
    with pytest.raises(APIError) as exc:
        js.get_msg("OLD", 2)
    assert exc.value.err_code == 10037


def test_discard_old_max_bytes(js):
    size = js.msg_bytes("bb.x", HELLO)
    # room for two and a half messages: two are kept
    js.add_stream(name="OLD", subjects=["bb.>"], max_bytes=2 * size + size // 2)
    for i in range(1, 6):
        assert js.publish("bb.x", HELLO) == PubAck(stream="OLD", seq=i)
    assert_state(js, "OLD", messages=2, bytes=2 * size, first_seq=4, last_seq=5, num_deleted=0)


def test_discard_old_max_bytes_exact_fit(js):
    size = js.msg_bytes("bb.x", HELLO)
    js.add_stream(name="OLD", subjects=["bb.>"], max_bytes=3 * size)
    for i in range(1, 6):
        assert js.publish("bb.x", HELLO) == PubAck(stream="OLD", seq=i)
    assert_state(js, "OLD", messages=3, bytes=3 * size, first_seq=3, last_seq=5, num_deleted=0)


def test_discard_old_max_msgs_per_subject_leaves_interior_deletes(js):
    js.add_stream(name="OLD", subjects=["o.>"], max_msgs_per_subject=1)
    for i, subject in enumerate(["o.a", "o.b", "o.c", "o.b"], start=1):
        assert js.publish(subject, b"x") == PubAck(stream="OLD", seq=i)
    # seq 2 (the older o.b) is gone from the middle of the stream
    size = js.msg_bytes("o.a", b"x")
    assert_state(js, "OLD", messages=3, bytes=3 * size, first_seq=1, last_seq=4, num_deleted=1, num_subjects=3)
    info = js.stream_info("OLD", subjects_filter=">", deleted_details=True)
    assert info.state.deleted == [2]
    assert info.state.subjects == {"o.a": 1, "o.b": 1, "o.c": 1}
    assert js.get_last_msg("OLD", "o.b").seq == 4


def test_discard_old_max_msgs_per_subject_keeps_newest_of_each(js):
    js.add_stream(name="OLD", subjects=["o.>"], max_msgs_per_subject=2)
    # seqs:         1      2      3      4      5      6      7
    for subject in ["o.a", "o.b", "o.a", "o.c", "o.a", "o.b", "o.b"]:
        js.publish(subject, b"x")
    # o.a keeps 3, 5 (1 dropped); o.b keeps 6, 7 (2 dropped); o.c keeps 4
    size = js.msg_bytes("o.a", b"x")
    assert_state(js, "OLD", messages=5, bytes=5 * size, first_seq=3, last_seq=7, num_deleted=0, num_subjects=3)
    info = js.stream_info("OLD", subjects_filter=">")
    assert info.state.subjects == {"o.a": 2, "o.b": 2, "o.c": 1}


# A single message larger than max_bytes is accepted and evicted at once
# (taking every older message with it).
@pytest.mark.parametrize("before", [0, 2])
def test_discard_old_message_larger_than_max_bytes(js, before):
    size = js.msg_bytes("bb.x", HELLO)
    js.add_stream(name="OLD", subjects=["bb.>"], max_bytes=3 * size)
    for _ in range(before):
        js.publish("bb.x", HELLO)
    ack = js.publish("bb.x", HELLO * 100)
    assert ack == PubAck(stream="OLD", seq=before + 1)
    assert_state(
        js, "OLD", messages=0, bytes=0, first_seq=before + 2, last_seq=before + 1, num_deleted=0, num_subjects=0
    )
    # the stream carries on after it
    assert js.publish("bb.x", HELLO) == PubAck(stream="OLD", seq=before + 2)
    assert_state(js, "OLD", messages=1, bytes=size, first_seq=before + 2, last_seq=before + 2)


# ---------------------------------------------------------------- §3.2 discard new


def test_discard_new_max_msgs(js):
    js.add_stream(name="NEW", subjects=["n.>"], discard=DiscardPolicy.NEW, max_msgs=2)
    assert js.publish("n.a", b"x") == PubAck(stream="NEW", seq=1)
    assert js.publish("n.b", b"x") == PubAck(stream="NEW", seq=2)
    expect_limit(js, "n.c", b"x", "maximum messages exceeded")
    size = js.msg_bytes("n.a", b"x")
    assert_state(js, "NEW", messages=2, bytes=2 * size, first_seq=1, last_seq=2, num_subjects=2)
    # making room admits the next message, with the next sequence
    js.delete_msg("NEW", 1)
    assert js.publish("n.c", b"x") == PubAck(stream="NEW", seq=3)
    assert_state(js, "NEW", messages=2, first_seq=2, last_seq=3)


def test_discard_new_max_bytes(js):
    size = js.msg_bytes("bb.x", HELLO)
    js.add_stream(name="NEW", subjects=["bb.>"], discard=DiscardPolicy.NEW, max_bytes=2 * size)
    assert js.publish("bb.x", HELLO) == PubAck(stream="NEW", seq=1)
    # bytes + new == max_bytes is still accepted
    assert js.publish("bb.x", HELLO) == PubAck(stream="NEW", seq=2)
    expect_limit(js, "bb.x", HELLO, "maximum bytes exceeded")
    expect_limit(js, "bb.y", b"", "maximum bytes exceeded")
    assert_state(js, "NEW", messages=2, bytes=2 * size, first_seq=1, last_seq=2, num_subjects=1)


def test_discard_new_max_bytes_one_byte_over(js):
    size = js.msg_bytes("bb.x", HELLO)
    js.add_stream(name="NEW", subjects=["bb.>"], discard=DiscardPolicy.NEW, max_bytes=2 * size + 1)
    js.publish("bb.x", HELLO)
    # size + (size + 2) = max_bytes + 1
    expect_limit(js, "bb.x", HELLO + b"xx", "maximum bytes exceeded")
    # size + (size + 1) = max_bytes
    assert js.publish("bb.x", HELLO + b"x") == PubAck(stream="NEW", seq=2)
    assert_state(js, "NEW", messages=2, bytes=2 * size + 1, first_seq=1, last_seq=2)


def test_discard_new_single_message_larger_than_max_bytes(js):
    size = js.msg_bytes("bb.x", HELLO)
    js.add_stream(name="NEW", subjects=["bb.>"], discard=DiscardPolicy.NEW, max_bytes=size - 1)
    expect_limit(js, "bb.x", HELLO, "maximum bytes exceeded")
    assert_state(js, "NEW", messages=0, bytes=0, first_seq=0, last_seq=0)


def test_discard_new_per_subject(js):
    js.add_stream(
        name="NEW",
        subjects=["n.>"],
        discard=DiscardPolicy.NEW,
        max_msgs_per_subject=2,
        discard_new_per_subject=True,
    )
    assert js.publish("n.a", b"x") == PubAck(stream="NEW", seq=1)
    assert js.publish("n.a", b"x") == PubAck(stream="NEW", seq=2)
    expect_limit(js, "n.a", b"x", "maximum messages per subject exceeded")
    # other subjects are unaffected
    assert js.publish("n.b", b"x") == PubAck(stream="NEW", seq=3)
    size = js.msg_bytes("n.a", b"x")
    assert_state(js, "NEW", messages=3, bytes=3 * size, first_seq=1, last_seq=3, num_deleted=0, num_subjects=2)
    assert [js.get_msg("NEW", s).subject for s in (1, 2, 3)] == ["n.a", "n.a", "n.b"]


def test_discard_new_per_subject_is_checked_before_max_msgs(js):
    js.add_stream(
        name="NEW",
        subjects=["n.>"],
        discard=DiscardPolicy.NEW,
        max_msgs=3,
        max_msgs_per_subject=2,
        discard_new_per_subject=True,
    )
    for subject in ["n.a", "n.a", "n.b"]:
        js.publish(subject, b"x")
    # both limits are hit: the per-subject one is reported
    expect_limit(js, "n.a", b"x", "maximum messages per subject exceeded")
    # n.b is below its subject limit: the stream limit applies
    expect_limit(js, "n.b", b"x", "maximum messages exceeded")
    expect_limit(js, "n.c", b"x", "maximum messages exceeded")
    assert_state(js, "NEW", messages=3, first_seq=1, last_seq=3, num_subjects=2)


def test_discard_new_per_subject_limit_without_flag_replaces_oldest(js):
    """The §3.2 quirk: discard new + max_msgs_per_subject without discard_new_per_subject.

    A message on a subject already at its limit replaces that subject's oldest
    message and skips the max_msgs check; any other message still gets 10077.
    """
    js.add_stream(name="NEW", subjects=["n.>"], discard=DiscardPolicy.NEW, max_msgs=3, max_msgs_per_subject=2)
    for i, subject in enumerate(["n.a", "n.a", "n.b"], start=1):
        assert js.publish(subject, b"x") == PubAck(stream="NEW", seq=i)
    size = js.msg_bytes("n.a", b"x")

    # the stream is full: a new subject is refused
    expect_limit(js, "n.c", b"x", "maximum messages exceeded")
    # n.a is at its limit of 2: accepted, and n.a's oldest (seq 1) goes
    assert js.publish("n.a", b"x") == PubAck(stream="NEW", seq=4)
    assert_state(js, "NEW", messages=3, bytes=3 * size, first_seq=2, last_seq=4, num_deleted=0, num_subjects=2)
    assert js.stream_info("NEW", subjects_filter=">").state.subjects == {"n.a": 2, "n.b": 1}
    # n.b has only one message, so it is not at its limit: refused
    expect_limit(js, "n.b", b"x", "maximum messages exceeded")
    assert_state(js, "NEW", messages=3, first_seq=2, last_seq=4)


def test_discard_new_per_subject_limit_without_flag_when_not_full(js):
    # Without discard_new_per_subject the per-subject limit behaves like discard old.
    js.add_stream(name="NEW", subjects=["n.>"], discard=DiscardPolicy.NEW, max_msgs_per_subject=1)
    for i, subject in enumerate(["n.a", "n.b", "n.a"], start=1):
        assert js.publish(subject, b"x") == PubAck(stream="NEW", seq=i)
    assert_state(js, "NEW", messages=2, first_seq=2, last_seq=3, num_deleted=0, num_subjects=2)


def test_discard_new_per_subject_limit_without_flag_max_bytes(js):
    """The same quirk for max_bytes (observed on nats-server 2.15.1, beyond docs/semantics.md).

    When bytes + new > max_bytes and the subject is at its limit, the message
    is accepted (replacing the subject's oldest) only if that oldest message is
    at least as large as the new one; otherwise 10077 maximum bytes exceeded.
    """
    size = js.msg_bytes("bb.a", HELLO)
    js.add_stream(name="NEW", subjects=["bb.>"], discard=DiscardPolicy.NEW, max_bytes=2 * size, max_msgs_per_subject=1)
    assert js.publish("bb.a", HELLO) == PubAck(stream="NEW", seq=1)
    assert js.publish("bb.b", HELLO) == PubAck(stream="NEW", seq=2)
    # same size: replaces seq 1
    assert js.publish("bb.a", HELLO) == PubAck(stream="NEW", seq=3)
    assert_state(js, "NEW", messages=2, bytes=2 * size, first_seq=2, last_seq=3, num_deleted=0)
    # one byte larger than the message it would replace: refused
    expect_limit(js, "bb.a", HELLO + b"x", "maximum bytes exceeded")
    # smaller: replaces seq 3, leaving an interior gap
    assert js.publish("bb.a", b"hell") == PubAck(stream="NEW", seq=4)
    assert_state(js, "NEW", messages=2, bytes=2 * size - 1, first_seq=2, last_seq=4, num_deleted=1)
    # a subject below its limit gets no such pass
    expect_limit(js, "bb.c", b"", "maximum bytes exceeded")
    assert_state(js, "NEW", messages=2, bytes=2 * size - 1, first_seq=2, last_seq=4, num_deleted=1)


def test_discard_new_replacement_needs_room_from_the_replaced_message_alone(js):
    # max_bytes has 10 spare bytes, yet a message 1 byte larger than the one it
    # would replace is refused: the check is "oldest of subject >= new", not "fits after".
    size = js.msg_bytes("bb.a", HELLO)
    js.add_stream(
        name="NEW", subjects=["bb.>"], discard=DiscardPolicy.NEW, max_bytes=2 * size + 10, max_msgs_per_subject=1
    )
    js.publish("bb.a", HELLO)
    js.publish("bb.b", HELLO)
    expect_limit(js, "bb.a", HELLO + b"x", "maximum bytes exceeded")
    assert_state(js, "NEW", messages=2, bytes=2 * size, first_seq=1, last_seq=2)


# ---------------------------------------------------------------- §3.2 max_age


def test_max_age_expires_messages(js):
    # The server expires on a timer (>= 250 ms granularity); waits allow for that lag.
    js.add_stream(name="AGE", subjects=["a.>"], max_age=0.2)
    assert js.publish("a.x", b"1") == PubAck(stream="AGE", seq=1)
    assert_state(js, "AGE", messages=1, first_seq=1, last_seq=1)

    js.clock.advance(0.6)
    # seq 1 has expired; seq 2 is fresh and stays
    assert js.publish("a.y", b"2") == PubAck(stream="AGE", seq=2)
    assert_state(js, "AGE", messages=1, bytes=js.msg_bytes("a.y", b"2"), first_seq=2, last_seq=2, num_subjects=1)
    with pytest.raises(APIError) as exc:
        js.get_msg("AGE", 1)
    assert exc.value.err_code == 10037

    js.clock.advance(0.6)
    assert_state(js, "AGE", messages=0, bytes=0, first_seq=3, last_seq=2, num_deleted=0, num_subjects=0)
    assert js.publish("a.z", b"3") == PubAck(stream="AGE", seq=3)


def test_max_age_keeps_young_messages(js):
    js.add_stream(name="AGE", subjects=["a.>"], max_age=0.3)
    js.publish("a.x", b"1")
    js.publish("a.x", b"2")
    js.clock.advance(0.15)
    assert_state(js, "AGE", messages=2, first_seq=1, last_seq=2)
