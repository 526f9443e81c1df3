"""The sink and a message id that is empty or blanks only, on the engine and a nats-server.

Such a value is no id (docs/semantics.md, 3.5: the header codec sends it as an empty
Nats-Msg-Id, which a server reads as none), so the sink gives its row the generated id, as
it does a null one: the row is written, and a retried task or a replayed micro-batch still
stores it once.  An id with blanks at its ends is the id without them: ``" a "`` dedups
with ``"a"``.
"""

from __future__ import annotations

import re
import sys

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import functions as F

from jetspark.connector.sink import BLANKS, _no_blank_ids
from tests.connector.support import error_text, run_available_now
from tests.connector.test_exactly_once import _forget_last_commit

MSG_ID = "Nats-Msg-Id"
BLANK_IDS = ["", " ", "  ", "\t", " \t ", "\u00a0\u3000", "\x0b\x1f\x85"]


def write(store, df) -> None:
    df.write.format("jetstream").option("store", store.path).mode("append").save()


def stored(js, stream: str = "W") -> list[tuple[bytes, list]]:
    """(data, every Nats-Msg-Id value) of each stored message, in sequence order."""
    out = []
    for batch in js.read_batches(stream, headers=True):
        for row in batch.to_pylist():
            out.append((row["data"], dict(row["headers"] or []).get(MSG_ID)))
    return out


def generated(msg_id: list) -> bool:
    """One sink-generated id: ``<write id>:<partition>:<row>`` for a batch write,
    ``<query id>:<batch id>:<partition>:<row>`` for a streaming query."""
    return len(msg_id) == 1 and re.fullmatch(r"[0-9a-f-]+(:[0-9]+){2,3}", msg_id[0]) is not None


@pytest.fixture
def sink(store):
    store.js.add_stream(name="W", subjects=["w.>"])
    store.js.publish("w.first", b"first", headers={MSG_ID: "a"})
    return store


@pytest.mark.spark
def test_an_empty_or_blank_only_msg_id_gets_the_generated_id(sink, spark):
    rows = [("w.a", f"blank {i}", v) for i, v in enumerate(BLANK_IDS)] + [
        ("w.a", "null", None),
        ("w.a", "padded", " a "),  # "a": a duplicate of the first message
        ("w.a", "own", "b"),
        ("w.a", "own padded", "\tb\u00a0"),  # "b": a duplicate of the row before
    ]
    df = spark.createDataFrame(rows, "subject string, data string, msg_id string").coalesce(1)
    write(sink, df)
    msgs = stored(sink.js)
    no_id = [f"blank {i}".encode() for i in range(len(BLANK_IDS))] + [b"null"]
    assert [d for d, _ in msgs] == [b"first", *no_id, b"own"]
    assert msgs[0][1] == ["a"] and msgs[-1][1] == ["b"]
    ids = [i for _, i in msgs[1:-1]]
    assert all(generated(i) for i in ids), ids
    assert len({i[0] for i in ids}) == len(no_id)

    # Written again: the rows with ids are duplicates, the others get a new write's ids.
    write(sink, df)
    again = stored(sink.js)[len(msgs) :]
    assert [d for d, _ in again] == no_id
    assert all(generated(i) for _, i in again) and not {i[0] for _, i in again} & {i[0] for i in ids}

    # A batch whose every id is blank (the sink then numbers the rows with one prefix).
    write(
        sink, spark.createDataFrame([("w.b", "x", " "), ("w.b", "y", "")], "subject string, data string, msg_id string")
    )
    last = stored(sink.js)[-2:]
    assert sorted(d for d, _ in last) == [b"x", b"y"]
    assert all(generated(i) for _, i in last) and last[0][1] != last[1][1]


@pytest.mark.spark
@pytest.mark.parametrize("header_type", ["map<string, string>", "map<string, array<string>>"])
def test_a_blank_only_id_in_the_headers_gets_the_generated_id(sink, spark, header_type):
    as_list = header_type.endswith("array<string>>")

    def h(value):
        return {MSG_ID: [value, "later"] if as_list else value, "k": ["v"] if as_list else "v"}

    rows = [
        ("w.a", "padded", h(" a ")),  # "a": a duplicate of the first message
        ("w.a", "blanks", h(" \t ")),
        ("w.a", "empty", h("")),
        ("w.a", "own", h("c")),
    ]
    write(sink, spark.createDataFrame(rows, f"subject string, data string, headers {header_type}").coalesce(1))
    msgs = stored(sink.js)
    assert [d for d, _ in msgs] == [b"first", b"blanks", b"empty", b"own"]
    assert generated(msgs[1][1]) and generated(msgs[2][1]) and msgs[1][1] != msgs[2][1]
    assert msgs[3][1] == ["c"]
    # The row's other headers are kept.
    assert sink.js.get_msg("W", 2).headers["k"] == "v"

    # A blank msg_id column does not hide the id the headers carry.
    both = [("w.a", "column blank", h("c"), "  "), ("w.a", "column empty", h("d"), "")]
    schema = f"subject string, data string, headers {header_type}, msg_id string"
    write(sink, spark.createDataFrame(both, schema).coalesce(1))
    assert stored(sink.js)[len(msgs) :] == [(b"column empty", ["d"])]


@pytest.mark.spark
def test_a_replayed_micro_batch_of_blank_ids_stores_nothing_twice(sink, spark):
    store, ckpt = sink, sink.checkpoint()
    store.js.add_stream(name="IN", subjects=["in.>"])
    store.publish("in.a", 5)
    df = store.read_stream("IN", startingOffsets="earliest", maxOffsetsPerTrigger="2")
    out = df.select(F.lit("w.out").alias("subject"), "data", F.lit(" \t").alias("msg_id"))

    def run():
        return run_available_now(out, sink="jetstream", checkpoint=ckpt, store=store.path)

    run()
    first = stored(store.js)[1:]
    assert [d for d, _ in first] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert all(generated(i) for _, i in first)
    # Spark runs the last batch again, and the store no longer remembers it was committed:
    # only the duplicate window can drop its rows, by their generated ids.
    assert _forget_last_commit(ckpt) == 2
    store.remove_sink_records()
    run()
    assert stored(store.js)[1:] == first
    assert store.js.stream_info("W").state.last_seq == 6


@pytest.mark.spark
@pytest.mark.parametrize("bad", ["\n", " \r\n ", "a\nb"])
def test_an_id_with_a_line_break_is_still_refused(sink, spark, bad):
    """CR and LF are not blanks here: an id holding one would forge a header line."""
    df = spark.createDataFrame(
        [("w.a", "ok", "fine"), ("w.a", "bad", bad)], "subject string, data string, msg_id string"
    )
    with pytest.raises(Exception) as info:
        write(sink, df.coalesce(1))
    assert "msg_id must not contain CR or LF" in error_text(info.value)
    assert stored(sink.js) == [(b"first", ["a"])]


# ---------------------------------------------------------------------- no Spark


def test_the_blanks_are_what_str_strip_takes_but_cr_and_lf():
    every = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}
    assert set(BLANKS) == every - {"\r", "\n"}


_TEXT = st.text(alphabet=st.sampled_from([*BLANKS, "\r", "\n", "a", "é", "\u4e00", ":"]), max_size=6)


@given(st.lists(st.one_of(st.none(), _TEXT), max_size=8))
def test_an_id_is_none_when_str_strip_leaves_nothing_of_it(values):
    out = _no_blank_ids(pa.array(values, pa.string())).to_pylist()
    want = [None if v is None or (not v.strip() and "\r" not in v and "\n" not in v) else v for v in values]
    assert out == want
