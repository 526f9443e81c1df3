"""A Nats-Msg-Id with blanks at its ends, on every backend.

The header codec writes a header value without the blanks at its ends (nats-py strips
every value it sends; so does jetspark's codec, ``protocol.headers.encode``), so
``" a "`` is sent, stored and deduplicated as ``"a"``, and an id of blanks only is sent as
an empty value, which a server reads as no id at all.  ``publish_batch``'s ``msg_id``
column and ``msg_id_prefix`` follow the same rule on both jetspark backends, except that
a row's id of blanks only is refused like an empty one.  Every expected value here was
checked against nats-server v2.15.1 (``tests/remote/test_msg_id_wire.py`` pins what the
server itself does with the raw header bytes).
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jetspark.errors import BadRequestError
from jetspark.protocol.arrow import HEADERS_TYPE
from tests.conftest import JETSPARK_BACKENDS, _backend

S = "IDS"
MSG_ID = "Nats-Msg-Id"
# What str.strip takes from a value's ends: ASCII blanks, the C0 separators and Unicode
# spaces (the header codec drops them all, as nats-py does).
BLANKS = [" ", "\t", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\u00a0", "\u2003", "\u3000"]


def _stream(js) -> None:
    js.add_stream(name=S, subjects=["ids.>"])


def _pub(js, msg_id: str, data: bytes = b"x"):
    return js.publish("ids.a", data, headers={MSG_ID: msg_id})


def test_an_id_with_blanks_at_its_ends_is_the_id_without_them(js):
    _stream(js)
    first = _pub(js, " a ")
    assert (first.seq, first.duplicate) == (1, None)
    for padded in ("a", "  a", "a\t", "\ta \t", "\u00a0a\u3000"):
        ack = _pub(js, padded)
        assert (ack.seq, ack.duplicate) == (1, True), padded
    # Stored as sent: the value without its blanks.
    assert js.get_msg(S, 1).headers == {MSG_ID: "a"}
    # Blanks inside an id are part of it.
    assert (_pub(js, " a b ").seq, _pub(js, "ab").seq, _pub(js, "a  b").seq) == (2, 3, 4)
    assert _pub(js, "a b").duplicate is True
    assert js.stream_info(S).state.messages == 4


def test_the_last_msg_id_is_the_id_without_its_blanks(js):
    _stream(js)
    _pub(js, "\tlast ")
    ack = js.publish("ids.a", b"y", headers={"Nats-Expected-Last-Msg-Id": " last"})
    assert ack.seq == 2


def test_an_id_of_blanks_only_is_no_id(js):
    _stream(js)
    acks = [_pub(js, blank) for blank in (" ", "   ", "\t", " \t ", "")]
    # Each is stored: no id, no duplicate detection.
    assert [(a.seq, a.duplicate) for a in acks] == [(1, None), (2, None), (3, None), (4, None), (5, None)]
    assert js.get_msg(S, 3).headers == {MSG_ID: ""}
    assert js.stream_info(S).state.messages == 5


# Ids with a non-blank character at each end (so they are ids after the codec), no CR/LF.
_CORE = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"), min_size=1, max_size=12
).filter(lambda s: s == s.strip())
_PAD = st.text(alphabet=st.sampled_from(BLANKS), max_size=3)
_RUNS = itertools.count()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(examples=st.lists(st.tuples(_PAD, _CORE, _PAD), min_size=1, max_size=6))
def test_blanks_at_either_end_never_change_which_message_an_id_names(js, examples):
    """Each (left, core, right) published padded, then bare, on a stream of the example's own
    (a new name: no waiting for a deleted one's files).  The model: an id names the message
    first stored with it."""
    n = next(_RUNS)
    stream, subject = f"{S}{n}", f"ids{n}.a"
    js.add_stream(name=stream, subjects=[subject])
    first: dict[str, int] = {}
    seq = 0
    for left, core, right in examples:
        for msg_id in (left + core + right, core):
            ack = js.publish(subject, b"x", headers={MSG_ID: msg_id})
            if core in first:
                assert (ack.seq, ack.duplicate) == (first[core], True), repr(msg_id)
            else:
                seq += 1
                first[core] = seq
                assert (ack.seq, ack.duplicate) == (seq, None), repr(msg_id)
    assert js.stream_info(stream).state.messages == len(first)


# ---------------------------------------------------------------------- publish_batch (jetspark's own verb)


@pytest.fixture(params=JETSPARK_BACKENDS)
def jsb(request, tmp_path):
    yield from _backend(request, tmp_path)


def _table(ids, headers=None) -> pa.Table:
    cols = {"subject": ["ids.a"] * len(ids), "data": [b"%d" % i for i in range(len(ids))], "msg_id": ids}
    if headers is not None:
        cols["headers"] = pa.array(headers, HEADERS_TYPE)
    return pa.table(cols)


@pytest.mark.parametrize("with_headers", [False, True], ids=["ids-only", "ids-and-headers"])
def test_a_batch_s_msg_id_column_drops_the_blanks_at_the_ends(jsb, with_headers):
    _stream(jsb)
    _pub(jsb, "one")
    ids = [" a", "a ", "\ta\t", "b", " one ", "\u00a0b"]
    headers = [[("K", ["v"])]] * len(ids) if with_headers else None
    ack = jsb.publish_batch(_table(ids, headers), stream=S)
    assert ack.seqs.to_pylist() == [2, 2, 2, 3, 1, 3]
    assert ack.duplicate.to_pylist() == [False, True, True, False, True, True]
    assert jsb.get_msg(S, 2).headers[MSG_ID] == "a"
    assert _pub(jsb, "a").duplicate is True and _pub(jsb, " b ").duplicate is True
    # The same batch again: every row a duplicate.
    assert jsb.publish_batch(_table(ids, headers), stream=S).duplicate.to_pylist() == [True] * len(ids)
    assert jsb.stream_info(S).state.messages == 3


def test_a_batch_s_headers_column_id_drops_the_blanks_at_the_ends(jsb):
    _stream(jsb)
    _pub(jsb, "h")
    headers = [[(MSG_ID, [" h "])], [(MSG_ID, ["\tk"])], [(MSG_ID, ["k "])]]
    t = pa.table({"subject": ["ids.a"] * 3, "data": [b"1", b"2", b"3"], "headers": pa.array(headers, HEADERS_TYPE)})
    ack = jsb.publish_batch(t, stream=S)
    assert ack.seqs.to_pylist() == [1, 2, 2] and ack.duplicate.to_pylist() == [True, False, True]


@pytest.mark.parametrize("blank", [" ", "\t", " \u00a0 "])
def test_a_batch_row_with_a_msg_id_of_blanks_only_is_refused_and_nothing_is_stored(jsb, blank):
    _stream(jsb)
    _pub(jsb, "before")
    with pytest.raises(BadRequestError, match="row 1 of the batch has a msg_id of blanks only") as err:
        jsb.publish_batch(_table(["n-0", blank, "n-2"]), stream=S)
    assert err.value.err_code == 10003
    state = jsb.stream_info(S).state
    assert (state.messages, state.last_seq) == (1, 1)


@pytest.mark.parametrize("prefix", ["  p:", "\tp:", "\u3000p:"])
def test_a_msg_id_prefix_drops_the_blanks_at_its_start(jsb, prefix):
    _stream(jsb)
    t = pa.table({"subject": ["ids.a"] * 3, "data": [b"1", b"2", b"3"]})
    ack = jsb.publish_batch(t, msg_id_prefix=prefix, stream=S)
    assert ack.seqs.to_pylist() == [1, 2, 3]
    assert jsb.get_msg(S, 2).headers == {MSG_ID: "p:1"}
    assert _pub(jsb, "p:2").duplicate is True and _pub(jsb, f" {prefix}0").duplicate is True
    # The bare prefix names the same rows.
    again = jsb.publish_batch(t, msg_id_prefix="p:", msg_id_start=1, stream=S)
    assert again.seqs.to_pylist() == [2, 3, 4] and again.duplicate.to_pylist() == [True, True, False]


def test_a_msg_id_prefix_of_blanks_only_is_the_numbers_alone(jsb):
    _stream(jsb)
    t = pa.table({"subject": ["ids.a"] * 2, "data": [b"1", b"2"]})
    assert jsb.publish_batch(t, msg_id_prefix="  ", msg_id_start=7, stream=S).seqs.to_pylist() == [1, 2]
    assert jsb.get_msg(S, 1).headers == {MSG_ID: "7"}
    assert _pub(jsb, "8").duplicate is True
