"""What the engine refuses that a nats-server would do something with (jetspark/engine/refusals.py).

The server's own refusals are contract tests (tests/contract/test_refused_features.py); these
are the engine's alone.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import jetspark
from jetspark.errors import BadRequestError


@pytest.fixture
def js(tmp_path):
    with jetspark.connect(tmp_path / "store") as js:
        js.add_stream(name="S", subjects=["s.>"])
        yield js


@pytest.mark.parametrize(
    "headers", [{"Nats-Trace-Dest": "trace.here"}, {"Nats-Trace-Dest": "trace.here", "Nats-Trace-Only": "true"}]
)
def test_message_tracing_is_refused_naming_the_header(js, headers):
    # A server sends trace events to Nats-Trace-Dest (and with Nats-Trace-Only stores nothing):
    # the engine cannot, so it says so instead of storing the message as if traced.
    with pytest.raises(BadRequestError, match="Nats-Trace-Dest.*not supported by the embedded engine"):
        js.publish("s.a", b"x", headers={**headers, "Nats-Msg-Id": "t1"})
    assert js.stream_info("S").state.messages == 0
    assert js.publish("s.a", b"x", headers={"Nats-Msg-Id": "t1"}).duplicate is None


def test_a_refused_row_of_a_batch_stores_no_row(js):
    table = pa.table(
        {
            "subject": ["s.a", "s.b", "s.c"],
            "data": [b"1", b"2", b""],
            "headers": pa.array([[], [("X-Ok", "1")], [("Nats-Incr", "1")]], pa.map_(pa.string(), pa.string())),
            "msg_id": ["b1", "b2", "b3"],
        }
    )
    with pytest.raises(BadRequestError) as exc:
        js.publish_batch(table, stream="S")
    assert exc.value.err_code == 10168
    assert any("row 2" in note for note in exc.value.__notes__)
    assert js.stream_info("S").state.messages == 0
    acks = [js.publish("s.a", b"x", headers={"Nats-Msg-Id": f"b{i}"}) for i in (1, 2, 3)]
    assert [(a.seq, a.duplicate) for a in acks] == [(1, None), (2, None), (3, None)]
