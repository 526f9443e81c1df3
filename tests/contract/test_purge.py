"""Purge variants and the state they leave (docs/semantics.md §4).

Every expected value here was checked against nats-server v2.15.1 with
file and memory storage; the two stores agree on every purge.
"""

from __future__ import annotations

import pytest

from jetspark.errors import APIError

# The stream every table row starts from: sequence -> subject.
SUBJECTS = {1: "a.1", 2: "a.2", 3: "b.1", 4: "a.1", 5: "b.2", 6: "a.2", 7: "a.1", 8: "b.1"}
ALL = (1, 2, 3, 4, 5, 6, 7, 8)
ALL_SUBJECTS = {"a.1": 3, "a.2": 2, "b.1": 2, "b.2": 1}


def payload(seq: int) -> bytes:
    return b"m%d" % seq


def add_stream(js, **config):
    js.add_stream(name="S", subjects=["a.*", "b.*"], **config)
    for seq, subject in SUBJECTS.items():
        assert js.publish(subject, payload(seq)).seq == seq


def full_state(js):
    """Everything stream_info can tell, to show a rejected call changed nothing."""
    return js.stream_info("S", subjects_filter=">", deleted_details=True).state


def assert_api_error(excinfo, err_code, code, description):
    err = excinfo.value
    assert (err.err_code, err.code, err.description) == (err_code, code, description)


# purge request -> sequences left, first_seq, last_seq, subjects left
# (the stream holds a.1 a.2 b.1 a.1 b.2 a.2 a.1 b.1 as seqs 1..8)
PURGES = [
    # everything: first = last + 1
    ({}, (), 9, 8, None),
    # seq: remove every seq < N
    (dict(seq=4), (4, 5, 6, 7, 8), 4, 8, {"a.1": 2, "a.2": 1, "b.1": 1, "b.2": 1}),
    (dict(seq=1), ALL, 1, 8, ALL_SUBJECTS),
    (dict(seq=8), (8,), 8, 8, {"b.1": 1}),
    (dict(seq=9), (), 9, 8, None),  # N = last + 1: all
    (dict(seq=20), (), 20, 19, None),  # N > last + 1: first = N, last = N - 1
    (dict(seq=0), (), 9, 8, None),  # 0 is "not set": all
    # keep: the newest K messages
    (dict(keep=3), (6, 7, 8), 6, 8, {"a.1": 1, "a.2": 1, "b.1": 1}),
    (dict(keep=1), (8,), 8, 8, {"b.1": 1}),
    (dict(keep=8), ALL, 1, 8, ALL_SUBJECTS),
    (dict(keep=20), ALL, 1, 8, ALL_SUBJECTS),
    (dict(keep=0), (), 9, 8, None),  # 0 is "not set": all
    # filter: every message matching the subject filter
    (dict(subject="a.1"), (2, 3, 5, 6, 8), 2, 8, {"a.2": 2, "b.1": 2, "b.2": 1}),
    (dict(subject="a.*"), (3, 5, 8), 3, 8, {"b.1": 2, "b.2": 1}),
    (dict(subject="a.>"), (3, 5, 8), 3, 8, {"b.1": 2, "b.2": 1}),
    (dict(subject="*.1"), (2, 5, 6), 2, 8, {"a.2": 2, "b.2": 1}),
    (dict(subject="b.*"), (1, 2, 4, 6, 7), 1, 8, {"a.1": 3, "a.2": 2}),  # the last message goes, last_seq stays
    (dict(subject=">"), (), 9, 8, None),
    (dict(subject="c.1"), ALL, 1, 8, ALL_SUBJECTS),  # matches nothing
    # filter + seq: matching messages with seq < N
    (dict(subject="a.*", seq=5), (3, 5, 6, 7, 8), 3, 8, {"a.1": 1, "a.2": 1, "b.1": 2, "b.2": 1}),
    (dict(subject="b.1", seq=8), (1, 2, 4, 5, 6, 7, 8), 1, 8, {"a.1": 3, "a.2": 2, "b.1": 1, "b.2": 1}),
    (dict(subject="a.1", seq=20), (2, 3, 5, 6, 8), 2, 8, {"a.2": 2, "b.1": 2, "b.2": 1}),
    (dict(subject=">", seq=4), (4, 5, 6, 7, 8), 4, 8, {"a.1": 2, "a.2": 1, "b.1": 1, "b.2": 1}),
    # filter + keep: the newest K matching messages, across all matching subjects
    (dict(subject="a.*", keep=1), (3, 5, 7, 8), 3, 8, {"a.1": 1, "b.1": 2, "b.2": 1}),
    (dict(subject="*.1", keep=2), (2, 5, 6, 7, 8), 2, 8, {"a.1": 1, "a.2": 2, "b.1": 1, "b.2": 1}),
    (dict(subject="b.*", keep=5), ALL, 1, 8, ALL_SUBJECTS),
    (dict(subject="a.1", keep=0), (2, 3, 5, 6, 8), 2, 8, {"a.2": 2, "b.1": 2, "b.2": 1}),
]


def _id(request):
    return "-".join(f"{k}={v}" for k, v in request.items()) or "all"


@pytest.mark.parametrize(
    "request_, remaining, first_seq, last_seq, subjects",
    PURGES,
    ids=[_id(row[0]) for row in PURGES],
)
def test_purge(js, request_, remaining, first_seq, last_seq, subjects):
    add_stream(js)
    last_ts = js.stream_info("S").state.last_ts

    assert js.purge_stream("S", **request_) is True

    state = js.stream_info("S", subjects_filter=">", deleted_details=True).state
    assert state.messages == len(remaining)
    assert state.bytes == sum(js.msg_bytes(SUBJECTS[seq], payload(seq)) for seq in remaining)
    assert (state.first_seq, state.last_seq) == (first_seq, last_seq)
    assert state.subjects == subjects
    assert state.num_subjects == (len(subjects) if subjects else 0)
    gaps = [seq for seq in range(first_seq, last_seq + 1) if seq not in remaining]
    assert state.deleted == (gaps or None)
    assert state.num_deleted == len(gaps)
    # A purge never moves last_ts; first_ts is the first remaining message's.
    assert state.last_ts == last_ts
    if remaining:
        assert state.first_ts == js.get_msg("S", first_seq).time
    else:
        assert state.first_ts is None

    for seq in ALL:
        if seq in remaining:
            msg = js.get_msg("S", seq)
            assert (msg.seq, msg.subject, msg.data) == (seq, SUBJECTS[seq], payload(seq))
        else:
            with pytest.raises(APIError) as excinfo:
                js.get_msg("S", seq)
            assert_api_error(excinfo, 10037, 404, "no message found")

    # The next publish gets last_seq + 1.
    assert js.publish("b.9", b"next").seq == last_seq + 1
    state = js.stream_info("S").state
    assert (state.messages, state.first_seq, state.last_seq) == (
        len(remaining) + 1,
        first_seq,
        last_seq + 1,
    )


def test_purge_keep_counts_existing_messages(js):
    add_stream(js)
    js.delete_msg("S", 7)
    js.delete_msg("S", 5)
    # The newest two *existing* messages are 8 and 6; the gap at 7 remains.
    assert js.purge_stream("S", keep=2) is True
    state = js.stream_info("S", subjects_filter=">", deleted_details=True).state
    assert (state.messages, state.first_seq, state.last_seq) == (2, 6, 8)
    assert state.deleted == [7]
    assert state.num_deleted == 1
    assert state.subjects == {"a.2": 1, "b.1": 1}


def test_purge_a_stream_never_written(js):
    js.add_stream(name="S", subjects=["a.*"])
    # Even a never-written stream follows first = last + 1 after a purge.
    assert js.purge_stream("S") is True
    state = js.stream_info("S").state
    assert (state.messages, state.first_seq, state.last_seq) == (0, 1, 0)
    assert state.first_ts is None
    assert state.last_ts is None

    assert js.purge_stream("S", seq=5) is True
    state = js.stream_info("S").state
    assert (state.messages, state.first_seq, state.last_seq) == (0, 5, 4)
    assert state.last_ts is None

    assert js.publish("a.x", b"x").seq == 5
    state = js.stream_info("S").state
    assert (state.messages, state.first_seq, state.last_seq) == (1, 5, 5)
    assert state.first_ts == state.last_ts == js.get_msg("S", 5).time


def test_purge_with_seq_on_a_first_seq_stream(js):
    js.add_stream(name="S", subjects=["a.*"], first_seq=10)
    assert js.purge_stream("S", seq=5) is True  # below first: nothing changes
    state = js.stream_info("S").state
    assert (state.messages, state.first_seq, state.last_seq) == (0, 10, 9)

    assert js.purge_stream("S", seq=15) is True
    state = js.stream_info("S").state
    assert (state.messages, state.first_seq, state.last_seq) == (0, 15, 14)
    assert js.publish("a.x", b"x").seq == 15


def test_purge_an_already_purged_stream(js):
    add_stream(js)
    last_ts = js.stream_info("S").state.last_ts
    assert js.purge_stream("S") is True
    assert js.purge_stream("S") is True
    assert js.purge_stream("S", subject="a.1") is True
    assert js.purge_stream("S", keep=3) is True
    state = js.stream_info("S").state
    assert (state.messages, state.first_seq, state.last_seq) == (0, 9, 8)
    assert state.last_ts == last_ts
    assert state.first_ts is None


def test_subjects_after_purge_and_republish(js):
    add_stream(js)
    js.purge_stream("S", subject="a.*")
    js.publish("a.1", b"again")
    state = js.stream_info("S", subjects_filter=">", deleted_details=True).state
    assert state.subjects == {"a.1": 1, "b.1": 2, "b.2": 1}
    assert (state.messages, state.first_seq, state.last_seq) == (4, 3, 9)
    assert state.deleted == [4, 6, 7]
    assert js.get_last_msg("S", "a.1").seq == 9


# request -> 10003 bad request: seq and keep exclude each other
BAD_PURGES = [
    dict(seq=3, keep=2),
    dict(subject="a.1", seq=3, keep=1),
]


@pytest.mark.parametrize("request_", BAD_PURGES, ids=[_id(r) for r in BAD_PURGES])
def test_purge_seq_and_keep_together_is_a_bad_request(js, request_):
    add_stream(js)
    before = full_state(js)
    with pytest.raises(APIError) as excinfo:
        js.purge_stream("S", **request_)
    assert_api_error(excinfo, 10003, 400, "bad request")
    assert full_state(js) == before


# every purge request is refused on a deny_purge stream
DENIED_PURGES = [
    dict(),
    dict(seq=4),
    dict(keep=1),
    dict(subject="a.1"),
    dict(subject="a.*", seq=5),
]


@pytest.mark.parametrize("request_", DENIED_PURGES, ids=[_id(r) for r in DENIED_PURGES])
def test_deny_purge(js, request_):
    add_stream(js, deny_purge=True)
    before = full_state(js)
    with pytest.raises(APIError) as excinfo:
        js.purge_stream("S", **request_)
    assert_api_error(excinfo, 10110, 500, "stream purge not permitted")
    assert full_state(js) == before
    assert before.messages == 8


def test_purge_a_missing_stream(js):
    with pytest.raises(APIError) as excinfo:
        js.purge_stream("NOPE")
    assert_api_error(excinfo, 10059, 404, "stream not found")
