"""The duplicate window of ids given with blanks at their ends, across a restart of the engine.

An id is kept without its blanks (tests/contract/test_msg_id_blanks.py), so the dedup journal
and the generated-id ranges a reopened store reads back name the stripped id.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import jetspark

MSG_ID = "Nats-Msg-Id"


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_padded_ids_are_remembered_stripped_after_a_reopen(store, storage):
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s"], storage=storage)
        js.publish("s", b"1", headers={MSG_ID: " one "})
        t = pa.table({"subject": ["s", "s"], "data": [b"2", b"3"], "msg_id": ["\ttwo", "three\u3000"]})
        assert js.publish_batch(t, stream="S").seqs.to_pylist() == [2, 3]
        gen = pa.table({"subject": ["s"] * 2, "data": [b"4", b"5"]})
        assert js.publish_batch(gen, msg_id_prefix="  g:", stream="S").seqs.to_pylist() == [4, 5]
    with jetspark.connect(store) as js:
        for msg_id, seq in (("one", 1), ("two", 2), (" three", 3), ("g:0", 4), ("\u00a0g:1 ", 5)):
            ack = js.publish("s", b"again", headers={MSG_ID: msg_id})
            assert (ack.seq, ack.duplicate) == (seq, True), msg_id
        again = js.publish_batch(pa.table({"subject": ["s"], "data": [b"x"], "msg_id": ["one  "]}), stream="S")
        assert again.duplicate.to_pylist() == [True] and again.seqs.to_pylist() == [1]
        # The last id (Nats-Expected-Last-Msg-Id) is the stripped one too.
        assert js.publish("s", b"6", headers={"Nats-Expected-Last-Msg-Id": "g:1"}).seq == 6
        assert js.stream_info("S").state.messages == 6
