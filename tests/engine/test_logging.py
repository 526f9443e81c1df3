"""The engine's DEBUG lines (the ``jetspark`` logger): a store and a stream opened, retention
removals, a journal compacted.  Quiet at the default level (docs/guides/logging.md)."""

from __future__ import annotations

import logging

import pyarrow as pa

import jetspark


def test_the_engine_says_what_it_does_at_debug(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="jetspark")
    with jetspark.connect(tmp_path / "store") as js:
        js.add_stream(name="S", subjects=["s.>"], max_msgs=3)
        js.publish_batch(pa.table({"subject": ["s.a"] * 10, "data": [b"x"] * 10}))
    with jetspark.connect(tmp_path / "store") as js:
        assert js.stream_info("S").state.messages == 3
    text = caplog.text
    assert f"opened store {tmp_path / 'store'}" in text
    assert "stream S: max_msgs 3 removes the 7 oldest messages" in text
    assert "opened stream S: 3 messages, seq 8..10" in text


def test_nothing_at_the_default_level(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="jetspark")
    with jetspark.connect(tmp_path / "store") as js:
        js.add_stream(name="S", subjects=["s.>"], max_msgs=3)
        js.publish_batch(pa.table({"subject": ["s.a"] * 10, "data": [b"x"] * 10}))
    assert caplog.records == []
