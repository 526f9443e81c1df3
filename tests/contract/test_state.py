"""Stream state, message delete and message get (docs/semantics.md §4).

Every expected value here was checked against nats-server v2.15.1 with
file and memory storage.  The one storage difference is the error for
deleting a sequence below first_seq or above last_seq (file store 10057,
memory store 10043; see ``DELETE_ERRORS``).
"""

from __future__ import annotations

import pytest

from jetspark.errors import APIError

# The order stream used throughout: sequence -> (subject, payload, headers).
ORDERS = {
    1: ("o.eu.new", b"m1", None),
    2: ("o.us.new", b"m2", None),
    3: ("o.eu.paid", b"m3", {"Trace": "abc"}),
    4: ("o.eu.new", b"m4", None),
    5: ("o.us", b"m5", None),
    6: ("o.eu", b"m6", None),
    7: ("o.us.new", b"m7", None),
    8: ("o.eu.new", b"m8", None),
}
# The header block nats-py sends for {"Trace": "abc"}.
TRACE_HDR = b"NATS/1.0\r\nTrace: abc\r\n\r\n"


def add_orders(js, **config):
    js.add_stream(name="ORDERS", subjects=["o.>"], **config)
    for seq, (subject, payload, headers) in ORDERS.items():
        assert js.publish(subject, payload, headers=headers).seq == seq


def orders_bytes(js, seqs) -> int:
    """The byte accounting of the ORDERS messages still stored."""
    total = 0
    for seq in seqs:
        subject, payload, headers = ORDERS[seq]
        total += js.msg_bytes(subject, payload, TRACE_HDR if headers else b"")
    return total


def full_state(js, name="ORDERS"):
    """Everything stream_info can tell, to show a rejected call changed nothing."""
    return js.stream_info(name, subjects_filter=">", deleted_details=True).state


def assert_api_error(excinfo, err_code, code, description):
    err = excinfo.value
    assert (err.err_code, err.code, err.description) == (err_code, code, description)


# ---------------------------------------------------------------- new streams


def test_new_stream_state_is_empty_with_zero_timestamps(js):
    info = js.add_stream(name="S", subjects=["s.>"])
    for state in (info.state, js.stream_info("S").state):
        assert state.messages == 0
        assert state.bytes == 0
        assert state.first_seq == 0
        assert state.last_seq == 0
        assert state.first_ts is None
        assert state.last_ts is None
        assert state.num_subjects == 0
        assert state.num_deleted == 0
        assert state.deleted is None
        assert state.subjects is None
    # Subjects requested on an empty stream: there is nothing to report.
    # (deleted_details on a never-written stream is left out on purpose:
    # nats-server's file store then reports num_deleted=1, deleted=[0].)
    state = js.stream_info("S", subjects_filter=">").state
    assert state.subjects is None
    assert state.num_subjects == 0


@pytest.mark.parametrize("first_seq", [1, 10, 1000])
def test_first_seq_option_starts_the_stream_at_n(js, first_seq):
    info = js.add_stream(name="S", subjects=["s.>"], first_seq=first_seq)
    assert info.config.first_seq == first_seq
    # Empty with the first_seq option: first = N, last = N - 1.
    details = js.stream_info("S", subjects_filter=">", deleted_details=True).state
    for state in (info.state, js.stream_info("S").state, details):
        assert (state.messages, state.first_seq, state.last_seq) == (0, first_seq, first_seq - 1)
        assert state.first_ts is None
        assert state.last_ts is None
        assert state.num_deleted == 0
    assert details.deleted is None
    assert details.subjects is None

    assert js.publish("s.a", b"x").seq == first_seq
    assert js.publish("s.b", b"y").seq == first_seq + 1
    state = js.stream_info("S").state
    assert (state.messages, state.first_seq, state.last_seq) == (2, first_seq, first_seq + 1)
    assert state.num_deleted == 0
    assert state.first_ts == js.get_msg("S", first_seq).time
    assert state.last_ts == js.get_msg("S", first_seq + 1).time


def test_state_after_publishing(js):
    add_orders(js)
    state = js.stream_info("ORDERS").state
    assert state.messages == 8
    assert state.bytes == orders_bytes(js, range(1, 9))
    assert (state.first_seq, state.last_seq) == (1, 8)
    assert state.num_subjects == 5
    assert state.num_deleted == 0
    # Details only on request.
    assert state.deleted is None
    assert state.subjects is None
    # The timestamps are those of the first and last stored messages.
    assert state.first_ts == js.get_msg("ORDERS", 1).time
    assert state.last_ts == js.get_msg("ORDERS", 8).time
    assert state.first_ts <= state.last_ts


def test_byte_accounting_matches_the_storage_formula(js):
    js.add_stream(name="S", subjects=["bb.*"])
    js.publish("bb.x", b"12345")
    assert js.stream_info("S").state.bytes == {"file": 39, "memory": 25}[js.storage]
    js.publish("bb.y", b"12345", headers={"K": "v"})  # an 18-byte header block
    assert js.stream_info("S").state.bytes == {"file": 39 + 61, "memory": 25 + 43}[js.storage]


# ---------------------------------------------------------------- emptied streams


def _purge_all(js):
    assert js.purge_stream("S") is True


def _purge_filter_everything(js):
    assert js.purge_stream("S", subject=">") is True


def _purge_below_next_seq(js):
    assert js.purge_stream("S", seq=4) is True


def _delete_every_message(js):
    for seq in (2, 3, 1):  # interior, last, then first
        assert js.delete_msg("S", seq) is True


def _let_every_message_expire(js):
    js.clock.advance(0.2 + 0.5)


# How a stream that held 3 messages is emptied -> (stream config, action).
EMPTIERS = {
    "purge": ({}, _purge_all),
    "purge-filter->": ({}, _purge_filter_everything),
    "purge-seq-4": ({}, _purge_below_next_seq),
    "delete-each": ({}, _delete_every_message),
    "max_age-expiry": ({"max_age": 0.2}, _let_every_message_expire),
}


@pytest.mark.parametrize("how", list(EMPTIERS))
def test_an_emptied_stream_keeps_last_seq_and_last_ts(js, how):
    config, empty = EMPTIERS[how]
    js.add_stream(name="S", subjects=["e.*"], **config)
    for subject in ("e.a", "e.b", "e.a"):
        js.publish(subject, b"data")
    last_ts = js.stream_info("S").state.last_ts
    assert last_ts is not None

    empty(js)

    # first_seq = last_seq + 1; last_seq and last_ts kept; first_ts zero.
    state = js.stream_info("S", subjects_filter=">", deleted_details=True).state
    assert state.messages == 0
    assert state.bytes == 0
    assert (state.first_seq, state.last_seq) == (4, 3)
    assert state.first_ts is None
    assert state.last_ts == last_ts
    assert state.num_subjects == 0
    assert state.num_deleted == 0
    assert state.deleted is None
    assert state.subjects is None
    for seq in (1, 2, 3):
        with pytest.raises(APIError) as excinfo:
            js.get_msg("S", seq)
        assert_api_error(excinfo, 10037, 404, "no message found")

    # The next publish continues the sequence.
    assert js.publish("e.c", b"next").seq == 4
    state = js.stream_info("S").state
    assert (state.messages, state.first_seq, state.last_seq) == (1, 4, 4)
    assert state.first_ts == state.last_ts == js.get_msg("S", 4).time
    assert state.last_ts >= last_ts


# ---------------------------------------------------------------- num_deleted and deleted details


def test_num_deleted_and_deleted_details_follow_each_delete(js):
    add_orders(js)
    last_ts = js.stream_info("ORDERS").state.last_ts
    remaining = set(ORDERS)

    # delete seq -> messages, first_seq, last_seq, num_subjects, deleted (interior gaps)
    steps = [
        (3, 7, 1, 8, 4, [3]),  # interior
        (8, 6, 1, 8, 4, [3, 8]),  # last: last_seq stays 8, the gap counts
        (1, 5, 2, 8, 4, [3, 8]),  # first: first moves to the next existing message
        (2, 4, 4, 8, 4, [8]),  # first again: skips the deleted 3
        (6, 3, 4, 8, 3, [6, 8]),
        (4, 2, 5, 8, 2, [6, 8]),
        (5, 1, 7, 8, 1, [8]),  # skips the deleted 6
        (7, 0, 9, 8, 0, None),  # empty: first = last + 1, nothing deleted
    ]
    for seq, messages, first_seq, last_seq, num_subjects, deleted in steps:
        assert js.delete_msg("ORDERS", seq) is True
        remaining.discard(seq)
        state = js.stream_info("ORDERS", deleted_details=True).state
        assert state.messages == messages, seq
        assert state.bytes == orders_bytes(js, remaining), seq
        assert (state.first_seq, state.last_seq) == (first_seq, last_seq), seq
        assert state.num_subjects == num_subjects, seq
        assert state.num_deleted == (len(deleted) if deleted else 0), seq
        assert state.deleted == deleted, seq
        assert state.last_ts == last_ts, seq
        if messages:
            assert state.first_ts == js.get_msg("ORDERS", first_seq).time, seq
        else:
            assert state.first_ts is None
        # Without deleted_details only the count is reported.
        plain = js.stream_info("ORDERS").state
        assert plain.num_deleted == state.num_deleted
        assert plain.deleted is None


# ---------------------------------------------------------------- subjects details


# subjects_filter -> subjects reported (num_subjects is always the stream's 5)
SUBJECTS_FILTERS = [
    (">", {"o.eu.new": 3, "o.us.new": 2, "o.eu.paid": 1, "o.us": 1, "o.eu": 1}),
    ("o.>", {"o.eu.new": 3, "o.us.new": 2, "o.eu.paid": 1, "o.us": 1, "o.eu": 1}),
    ("o.eu.new", {"o.eu.new": 3}),  # a literal subject
    ("o.eu", {"o.eu": 1}),  # literal: not its children
    ("o.*", {"o.us": 1, "o.eu": 1}),  # * is exactly one token
    ("*.*", {"o.us": 1, "o.eu": 1}),
    ("o.eu.*", {"o.eu.new": 3, "o.eu.paid": 1}),
    ("o.eu.>", {"o.eu.new": 3, "o.eu.paid": 1}),  # > needs at least one token
    ("o.*.new", {"o.eu.new": 3, "o.us.new": 2}),
    ("o.xx", None),  # nothing matches: no subjects map
    ("o.*.*.*", None),
]


@pytest.mark.parametrize("subjects_filter, subjects", SUBJECTS_FILTERS)
def test_subjects_details_with_a_filter(js, subjects_filter, subjects):
    add_orders(js)
    state = js.stream_info("ORDERS", subjects_filter=subjects_filter).state
    assert state.subjects == subjects
    assert state.num_subjects == 5
    assert state.messages == 8


def test_subjects_details_follow_deletes(js):
    add_orders(js)
    js.delete_msg("ORDERS", 8)  # one of three o.eu.new
    js.delete_msg("ORDERS", 5)  # the only o.us
    state = js.stream_info("ORDERS", subjects_filter=">").state
    assert state.subjects == {"o.eu.new": 2, "o.us.new": 2, "o.eu.paid": 1, "o.eu": 1}
    assert state.num_subjects == 4
    js.publish("o.us", b"again")
    state = js.stream_info("ORDERS", subjects_filter="o.*").state
    assert state.subjects == {"o.us": 1, "o.eu": 1}
    assert state.num_subjects == 5


# ---------------------------------------------------------------- delete_msg


def test_delete_first_interior_and_last(js):
    add_orders(js)
    last_ts = js.stream_info("ORDERS").state.last_ts

    assert js.delete_msg("ORDERS", 1) is True  # first: first_seq moves on
    state = js.stream_info("ORDERS").state
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (7, 2, 8, 0)
    assert state.first_ts == js.get_msg("ORDERS", 2).time

    assert js.delete_msg("ORDERS", 4) is True  # interior: a gap
    state = js.stream_info("ORDERS").state
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (6, 2, 8, 1)

    assert js.delete_msg("ORDERS", 8) is True  # last: last_seq and last_ts stay
    state = js.stream_info("ORDERS").state
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (5, 2, 8, 2)
    assert state.last_ts == last_ts
    assert state.bytes == orders_bytes(js, (2, 3, 5, 6, 7))

    for seq in (1, 4, 8):
        with pytest.raises(APIError) as excinfo:
            js.get_msg("ORDERS", seq)
        assert_api_error(excinfo, 10037, 404, "no message found")
    # The deleted last sequence is not reused.
    assert js.publish("o.eu", b"m9").seq == 9
    state = js.stream_info("ORDERS", deleted_details=True).state
    assert (state.messages, state.first_seq, state.last_seq) == (6, 2, 9)
    assert state.deleted == [4, 8]


def _nothing(js):
    pass


def _delete(*seqs):
    def run(js):
        for seq in seqs:
            js.delete_msg("ORDERS", seq)

    return run


def _purge(**request):
    def run(js):
        js.purge_stream("ORDERS", **request)

    return run


# case -> (setup on the 8 ORDERS, seq to delete, {storage: (err_code, code, description)})
# Deleting a sequence below first_seq (already deleted first, seq 0, purged)
# and above last_seq differ by store: the file store answers 10057, the
# memory store 10043.  An interior sequence already deleted is 10043 on both.
DELETE_ERRORS = {
    "interior-already-deleted": (
        _delete(5),
        5,
        {
            "file": (10043, 400, "sequence 5 not found"),
            "memory": (10043, 400, "sequence 5 not found"),
        },
    ),
    "last-already-deleted": (
        _delete(8),
        8,
        {
            "file": (10043, 400, "sequence 8 not found"),
            "memory": (10043, 400, "sequence 8 not found"),
        },
    ),
    "first-already-deleted": (
        _delete(1),
        1,
        {
            "file": (10057, 500, "no message found"),
            "memory": (10043, 400, "sequence 1 not found"),
        },
    ),
    "below-first-after-purge": (
        _purge(seq=4),
        2,
        {
            "file": (10057, 500, "no message found"),
            "memory": (10043, 400, "sequence 2 not found"),
        },
    ),
    "seq-0": (
        _nothing,
        0,
        {
            "file": (10057, 500, "no message found"),
            "memory": (10043, 400, "sequence 0 not found"),
        },
    ),
    "last-seq-of-purged-stream": (
        _purge(),
        8,
        {
            "file": (10057, 500, "no message found"),
            "memory": (10043, 400, "sequence 8 not found"),
        },
    ),
    "above-last": (
        _nothing,
        9,
        {
            "file": (10057, 500, "stream store EOF"),
            "memory": (10043, 400, "sequence 9 not found"),
        },
    ),
    "far-above-last": (
        _nothing,
        100,
        {
            "file": (10057, 500, "stream store EOF"),
            "memory": (10043, 400, "sequence 100 not found"),
        },
    ),
    "next-seq-of-purged-stream": (
        _purge(),
        9,
        {
            "file": (10057, 500, "stream store EOF"),
            "memory": (10043, 400, "sequence 9 not found"),
        },
    ),
}


@pytest.mark.parametrize("case", list(DELETE_ERRORS))
def test_delete_msg_errors(js, case):
    setup, seq, expected = DELETE_ERRORS[case]
    add_orders(js)
    setup(js)
    before = full_state(js)
    with pytest.raises(APIError) as excinfo:
        js.delete_msg("ORDERS", seq)
    assert_api_error(excinfo, *expected[js.storage])
    assert full_state(js) == before


def test_delete_msg_on_a_new_stream(js):
    js.add_stream(name="S", subjects=["s.>"])
    before = full_state(js, "S")
    with pytest.raises(APIError) as excinfo:
        js.delete_msg("S", 1)
    assert_api_error(
        excinfo,
        *{
            "file": (10057, 500, "stream store EOF"),
            "memory": (10043, 400, "sequence 1 not found"),
        }[js.storage],
    )
    assert full_state(js, "S") == before


@pytest.mark.parametrize("seq", [1, 4, 8, 9])  # first, interior, last, above last
def test_deny_delete_refuses_every_delete(js, seq):
    add_orders(js, deny_delete=True)
    before = full_state(js)
    with pytest.raises(APIError) as excinfo:
        js.delete_msg("ORDERS", seq)
    assert_api_error(excinfo, 10057, 500, "message delete not permitted")
    assert full_state(js) == before
    if seq <= 8:
        assert js.get_msg("ORDERS", seq).seq == seq


def test_delete_msg_on_a_missing_stream(js):
    with pytest.raises(APIError) as excinfo:
        js.delete_msg("NOPE", 1)
    assert_api_error(excinfo, 10059, 404, "stream not found")


# ---------------------------------------------------------------- get_msg


def test_get_msg_by_seq(js):
    add_orders(js)
    msg = js.get_msg("ORDERS", 2)
    assert (msg.subject, msg.seq, msg.data, msg.stream) == ("o.us.new", 2, b"m2", "ORDERS")
    assert msg.hdrs is None
    assert msg.headers is None
    assert msg.time is not None

    msg = js.get_msg("ORDERS", 3)
    assert (msg.subject, msg.seq, msg.data) == ("o.eu.paid", 3, b"m3")
    assert msg.hdrs == TRACE_HDR
    assert msg.headers == {"Trace": "abc"}

    times = [js.get_msg("ORDERS", seq).time for seq in ORDERS]
    assert times == sorted(times)


def test_get_msg_empty_payload(js):
    js.add_stream(name="S", subjects=["s.>"])
    js.publish("s.empty", b"")
    msg = js.get_msg("S", 1)
    assert (msg.subject, msg.seq, msg.data) == ("s.empty", 1, b"")


# last_by_subj -> seq of the message returned (None: 10037 no message found)
LAST_BY_SUBJECT = [
    ("o.eu.new", 8),
    ("o.us.new", 7),
    ("o.eu.paid", 3),
    ("o.*", 6),  # wildcards: the last message matching
    ("o.us.*", 7),
    ("o.*.paid", 3),
    ("o.>", 8),
    (">", 8),
    ("o.xx", None),
    ("o.eu.new.x", None),
]


@pytest.mark.parametrize("subject, seq", LAST_BY_SUBJECT)
def test_get_msg_last_by_subject(js, subject, seq):
    add_orders(js)
    if seq is None:
        with pytest.raises(APIError) as excinfo:
            js.get_msg("ORDERS", last_by_subj=subject)
        assert_api_error(excinfo, 10037, 404, "no message found")
        with pytest.raises(APIError) as excinfo:
            js.get_last_msg("ORDERS", subject)
        assert_api_error(excinfo, 10037, 404, "no message found")
    else:
        msg = js.get_msg("ORDERS", last_by_subj=subject)
        assert (msg.seq, msg.subject, msg.data) == (seq, ORDERS[seq][0], ORDERS[seq][1])
        last = js.get_last_msg("ORDERS", subject)
        assert (last.seq, last.subject, last.data) == (seq, ORDERS[seq][0], ORDERS[seq][1])


def test_get_last_msg_skips_deleted_messages(js):
    add_orders(js)
    js.delete_msg("ORDERS", 8)
    msg = js.get_last_msg("ORDERS", "o.eu.new")
    assert (msg.seq, msg.data) == (4, b"m4")
    assert js.get_msg("ORDERS", last_by_subj="o.>").seq == 7
    js.delete_msg("ORDERS", 3)
    with pytest.raises(APIError) as excinfo:
        js.get_last_msg("ORDERS", "o.eu.paid")
    assert_api_error(excinfo, 10037, 404, "no message found")


# (next_by_subj, seq) -> seq of the message returned: the first match at or
# after seq (None: 10037).  Seq 0 or no seq with a subject starts at the beginning.
NEXT_BY_SUBJECT = [
    ("o.eu.new", 1, 1),  # at seq itself
    ("o.eu.new", 2, 4),
    ("o.eu.new", 5, 8),
    ("o.eu.new", 0, 1),
    ("o.eu.new", None, 1),
    ("o.us.*", 3, 7),
    ("o.*", None, 5),
    ("o.>", 6, 6),
    ("*.*.paid", 1, 3),
    ("o.eu.paid", 4, None),  # only an earlier match
    ("o.eu.new", 9, None),  # past the end
    ("o.xx", 1, None),
]


@pytest.mark.parametrize("subject, start, seq", NEXT_BY_SUBJECT)
def test_get_msg_next_by_subject(js, subject, start, seq):
    add_orders(js)
    if seq is None:
        with pytest.raises(APIError) as excinfo:
            js.get_msg("ORDERS", seq=start, next_by_subj=subject)
        assert_api_error(excinfo, 10037, 404, "no message found")
    else:
        msg = js.get_msg("ORDERS", seq=start, next_by_subj=subject)
        assert (msg.seq, msg.subject, msg.data) == (seq, ORDERS[seq][0], ORDERS[seq][1])


def test_get_msg_next_by_subject_skips_deleted_messages(js):
    add_orders(js)
    js.delete_msg("ORDERS", 4)
    assert js.get_msg("ORDERS", seq=2, next_by_subj="o.eu.new").seq == 8


# case -> (setup on the 8 ORDERS, get_msg seq) : 10037 no message found
MISSING_SEQS = {
    "deleted": (_delete(5), 5),
    "deleted-last": (_delete(8), 8),
    "below-first": (_purge(seq=4), 2),
    "above-last": (_nothing, 9),
    "far-above-last": (_nothing, 1000),
    "purged": (_purge(), 8),
}


@pytest.mark.parametrize("case", list(MISSING_SEQS))
def test_get_msg_missing_seq(js, case):
    setup, seq = MISSING_SEQS[case]
    add_orders(js)
    setup(js)
    before = full_state(js)
    with pytest.raises(APIError) as excinfo:
        js.get_msg("ORDERS", seq)
    assert_api_error(excinfo, 10037, 404, "no message found")
    assert full_state(js) == before


def test_get_msg_on_a_new_stream(js):
    js.add_stream(name="S", subjects=["s.>"])
    with pytest.raises(APIError) as excinfo:
        js.get_msg("S", 1)
    assert_api_error(excinfo, 10037, 404, "no message found")
    with pytest.raises(APIError) as excinfo:
        js.get_last_msg("S", "s.a")
    assert_api_error(excinfo, 10037, 404, "no message found")


# get_msg arguments -> 10003 bad request
BAD_GETS = {
    "seq-0": dict(seq=0),
    "nothing": dict(),
    "seq-and-last_by_subj": dict(seq=3, last_by_subj="o.eu.new"),
}


@pytest.mark.parametrize("case", list(BAD_GETS))
def test_get_msg_bad_request(js, case):
    add_orders(js)
    before = full_state(js)
    with pytest.raises(APIError) as excinfo:
        js.get_msg("ORDERS", **BAD_GETS[case])
    if case == "nothing" and js.kind != "oracle":
        # Refused before the request, saying what is needed (tests/contract/test_nats_py_args.py).
        assert (excinfo.value.err_code, excinfo.value.code) == (10003, 400)
        assert excinfo.value.description.startswith("bad request: get_msg needs seq=")
    else:
        assert_api_error(excinfo, 10003, 400, "bad request")
    assert full_state(js) == before


def test_get_msg_on_a_missing_stream(js):
    with pytest.raises(APIError) as excinfo:
        js.get_msg("NOPE", 1)
    assert_api_error(excinfo, 10059, 404, "stream not found")
    with pytest.raises(APIError) as excinfo:
        js.get_last_msg("NOPE", "o.eu")
    assert_api_error(excinfo, 10059, 404, "stream not found")


def test_cluster_info_of_a_lone_server(js):
    """A single nats-server names only itself, as the leader of a stream (in its info, not
    in its stream list), and reports no cluster for a consumer; the engine does the same as "jetspark-engine"
    (jetspark.api.ENGINE_NAME).  A cluster's answer: tests/cluster/test_cluster_info.py."""
    import jetspark.api

    js.add_stream(name="CI", subjects=["ci.>"])
    js.add_consumer("CI", durable_name="D")
    cluster = js.stream_info("CI").cluster
    assert cluster is not None and cluster.leader and cluster.name is None and not cluster.replicas
    if js.kind == "engine":
        assert cluster.leader == jetspark.api.ENGINE_NAME
    assert js.consumer_info("CI", "D").cluster is None
    assert [i.cluster for i in js.streams_info()] == [None]
