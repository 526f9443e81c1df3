"""The engine's own side of batch appends: generated message ids kept as ranges (across
reopening and a purge), and batches that are all or nothing even for a refusal only the
store can make.  What every backend must do is in tests/contract/test_bulk.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

import jetspark


def table(n, subject="s.a", start=0):
    return pa.table({"subject": [subject] * n, "data": [b"%d" % (start + i) for i in range(n)]})


@pytest.fixture
def js(tmp_path):
    with jetspark.connect(tmp_path / "store") as js:
        js.add_stream(name="S", subjects=["s.>"])
        yield js


def test_generated_id_ranges_survive_reopening_and_a_purge(js, tmp_path):
    js.publish_batch(table(5), msg_id_prefix="q:0:0:")
    ack = js.publish_batch(table(5), msg_id_prefix="q:0:0:", msg_id_start=3)
    assert ack.duplicate.to_pylist() == [True, True, False, False, False]
    js.purge_stream("S")
    with jetspark.connect(tmp_path / "store") as again:
        assert again.publish_batch(table(8), msg_id_prefix="q:0:0:").duplicate.to_pylist() == [True] * 8
        assert again.stream_info("S").state.messages == 0


def test_a_row_refused_by_the_store_stores_nothing_of_the_batch(js):
    # Rows checked before anything is stored are refused alike by every backend
    # (tests/contract/test_bulk.py); here the second row's expected last sequence only
    # holds after the first is stored, and still nothing is.
    headers = pa.table(
        {
            "subject": ["s.a", "s.a"],
            "data": [b"1", b"2"],
            "headers": pa.array(
                [[("Nats-Expected-Last-Sequence", ["0"])], [("Nats-Expected-Last-Sequence", ["0"])]],
                pa.map_(pa.string(), pa.list_(pa.string())),
            ),
        }
    )
    with pytest.raises(jetspark.BadRequestError) as e:
        js.publish_batch(headers)  # the second row expects 0 but would follow seq 1
    assert e.value.err_code == 10071 and "row 1 of the batch" in str(e.value.__notes__)
    assert js.stream_info("S").state.last_seq == 0
