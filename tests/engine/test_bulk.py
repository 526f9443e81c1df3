"""The bulk paths beyond what the conformance suite covers: batch appends with generated
message ids (deduplicated as ranges), all-or-nothing batches, and range reads' schema."""

from __future__ import annotations

import pyarrow as pa
import pytest

import jetspark
from jetspark.protocol.arrow import schema


def table(n, subject="s.a", start=0):
    return pa.table({"subject": [subject] * n, "data": [b"%d" % (start + i) for i in range(n)]})


@pytest.fixture
def js(tmp_path):
    with jetspark.connect(tmp_path / "store") as js:
        js.add_stream(name="S", subjects=["s.>"])
        yield js


def test_generated_ids_are_stored_and_deduplicated_as_ranges(js, tmp_path):
    ack = js.publish_batch(table(5), msg_id_prefix="q:0:0:")
    assert ack.seqs.to_pylist() == [1, 2, 3, 4, 5] and not any(ack.duplicate.to_pylist())
    # Each message carries its own id, as a single publish would.
    assert js.get_msg("S", seq=4).headers == {"Nats-Msg-Id": "q:0:0:3"}
    # A replay overlapping the first range: the overlap is duplicate, the rest is new.
    ack = js.publish_batch(table(5), msg_id_prefix="q:0:0:", msg_id_start=3)
    assert ack.seqs.to_pylist() == [4, 5, 6, 7, 8]
    assert ack.duplicate.to_pylist() == [True, True, False, False, False]
    # A single publish of an id inside a recorded range is a duplicate of its row;
    # the same digits with a leading zero are another id.
    assert js.publish("s.a", b"x", headers={"Nats-Msg-Id": "q:0:0:6"}).duplicate is True
    assert js.publish("s.a", b"x", headers={"Nats-Msg-Id": "q:0:0:06"}).seq == 9
    # Nats-Expected-Last-Msg-Id sees a generated id too.
    js.publish_batch(table(2), msg_id_prefix="p:")
    assert js.publish("s.a", b"y", headers={"Nats-Expected-Last-Msg-Id": "p:1"}).seq == 12
    # The ranges survive reopening and a purge.
    js.purge_stream("S")
    with jetspark.connect(tmp_path / "store") as again:
        assert again.publish_batch(table(8), msg_id_prefix="q:0:0:").duplicate.to_pylist() == [True] * 8
        assert again.stream_info("S").state.messages == 0


def test_single_ids_are_checked_by_a_generated_batch(js):
    js.publish("s.a", b"x", headers={"Nats-Msg-Id": "q:7"})
    ack = js.publish_batch(table(3), msg_id_prefix="q:", msg_id_start=6)
    assert ack.duplicate.to_pylist() == [False, True, False]
    assert ack.seqs.to_pylist() == [2, 1, 3]


def test_a_refused_row_stores_nothing_of_the_batch(js):
    js.update_stream(name="S", subjects=["s.>"], max_msg_size=4)
    big = pa.table({"subject": ["s.a"] * 3, "data": [b"ok", b"too long", b"ok"]})
    with pytest.raises(jetspark.BadRequestError) as e:
        js.publish_batch(big)
    assert e.value.err_code == 10054
    assert js.stream_info("S").state.last_seq == 0
    js.update_stream(name="S", subjects=["s.>"])
    headers = pa.table({
        "subject": ["s.a", "s.a"], "data": [b"1", b"2"],
        "headers": pa.array([[("Nats-Expected-Last-Sequence", ["0"])], [("Nats-Expected-Last-Sequence", ["0"])]],
                            pa.map_(pa.string(), pa.list_(pa.string()))),
    })
    with pytest.raises(jetspark.BadRequestError) as e:
        js.publish_batch(headers)  # the second row expects 0 but would follow seq 1
    assert e.value.err_code == 10071 and "row 1 of the batch" in str(e.value.__notes__)
    assert js.stream_info("S").state.last_seq == 0


def test_range_reads_have_the_documented_schema(js):
    js.publish("s.a", b"x", headers={"K": "v"})
    js.publish("s.b", b"y")
    (plain,) = js.read_batches("S", 1)
    assert plain.schema == schema(False)
    (with_headers,) = js.read_batches("S", 1, headers=True)
    assert with_headers.schema == schema(True)
    assert with_headers.column("headers").to_pylist() == [[("K", ["v"])], None]
    assert [b.num_rows for b in js.read_batches("S", 1, subjects=["s.b"])] == [1]
    assert list(js.read_batches("S", 3)) == []
