"""Damaged stores: a torn or corrupt tail is cut off and reported; damage beyond repair
is a clear error naming the file, and the store's other streams keep working."""

from __future__ import annotations

import logging

import pytest

import jetspark
from jetspark.errors import CorruptStoreError


def _store_with(path, n=100, name="S"):
    with jetspark.connect(path) as js:
        js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
        for i in range(n):
            js.publish(f"{name.lower()}.x", b"m%03d" % i)


def _data_file(path, name="S", ext=".dat"):
    (blk,) = sorted((path / "streams" / name / "data" / "blk").glob(f"*{ext}"))
    return blk


def test_a_torn_last_record_is_cut_and_reported(tmp_path, caplog):
    _store_with(tmp_path)
    dat = _data_file(tmp_path)
    raw = bytearray(dat.read_bytes())
    raw[99 * 4] ^= 0xFF  # inside message 100's payload, the last record: what a torn write leaves
    dat.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="jetspark"), jetspark.connect(tmp_path) as js:
        state = js.stream_info("S").state
        assert (state.messages, state.first_seq, state.last_seq) == (99, 1, 99)
        assert state.lost == {"msgs": [100], "bytes": 0}
        assert "records 100..100 are torn or corrupt" in caplog.text
        # Never served: the sequence is reused by the next publish.
        assert js.publish("s.x", b"new").seq == 100
        assert js.get_msg("S", seq=100).data == b"new"
        assert [b.column("data").to_pylist() for b in js.read_batches("S", 98)] == [[b"m097", b"m098", b"new"]]


def test_a_damaged_record_before_intact_ones_is_reported_never_cut(tmp_path, caplog):
    _store_with(tmp_path)
    dat = _data_file(tmp_path)
    raw = bytearray(dat.read_bytes())
    raw[95 * 4] ^= 0xFF  # inside message 96's payload; 97..100 are intact
    dat.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="jetspark"), jetspark.connect(tmp_path) as js:
        state = js.stream_info("S").state
        assert (state.messages, state.last_seq, state.lost) == (100, 100, None)  # nothing deleted on its own
        assert "1 damaged record(s) before sequence 101" in caplog.text
        with pytest.raises(CorruptStoreError, match=r"blk/0+1\.dat: message 96 fails its checksum"):
            js.get_msg("S", 96)
        with pytest.raises(CorruptStoreError, match=r"message 96 fails its checksum"):
            list(js.read_batches("S", 1))
        assert js.get_msg("S", 97).data == b"m096"
        report = js.check_stream("S")
        assert not report.ok and [p.seqs for p in report.problems] == [(96,)]
        report = js.check_stream("S", repair=True)
        assert report.ok and report.lost == (96,) and report.messages == 99
        table = [v for b in js.read_batches("S", 1) for v in b.column("data").to_pylist()]
        assert table == [b"m%03d" % i for i in range(100) if i != 95]
        assert js.stream_info("S").state.lost == {"msgs": [96], "bytes": 0}


def test_a_truncated_payload_file_drops_what_it_lost(tmp_path):
    _store_with(tmp_path)
    dat = _data_file(tmp_path)
    with open(dat, "r+b") as f:
        f.truncate(50 * 4)  # messages 51.. lost their payloads
    with jetspark.connect(tmp_path) as js:
        state = js.stream_info("S").state
        assert (state.messages, state.last_seq) == (50, 50)
        assert state.lost["msgs"] == list(range(51, 101))
        assert js.get_msg("S", seq=50).data == b"m049"


def test_a_destroyed_header_is_a_clear_error_and_other_streams_work(tmp_path):
    _store_with(tmp_path, name="S")
    _store_with(tmp_path, name="T")
    state = tmp_path / "streams" / "S" / "data" / "state"
    raw = bytearray(state.read_bytes())
    raw[64:1500] = b"\xff" * (1500 - 64)
    state.write_bytes(bytes(raw))
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(CorruptStoreError, match=r"streams/S/data/state: both header slots fail their checksum"):
            js.stream_info("S")
        assert js.stream_info("T").state.messages == 100
        assert js.publish("t.x", b"more").seq == 101


def test_a_damaged_config_names_the_stream(tmp_path):
    _store_with(tmp_path, name="S")
    _store_with(tmp_path, name="T")
    for copy in ("config.json", "config.json.1"):  # the mirror too (one is recovered from the other)
        (tmp_path / "streams" / "S" / copy).write_text("{not json")
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(CorruptStoreError, match=r"streams/S/config.json is damaged and has no intact copy"):
            js.stream_info("S")
        assert js.stream_info("T").state.messages == 100


def test_a_damaged_subject_dictionary_is_a_clear_error(tmp_path):
    _store_with(tmp_path)
    subjects = tmp_path / "streams" / "S" / "data" / "subjects"
    raw = bytearray(subjects.read_bytes())
    raw[-1] ^= 0xFF
    subjects.write_bytes(bytes(raw))
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(CorruptStoreError, match=r"subjects: record at 0 fails its checksum"):
            js.stream_info("S")


def test_a_store_path_that_is_a_file_is_a_clear_error(tmp_path):
    path = tmp_path / "not-a-dir"
    path.write_text("x")
    with pytest.raises(jetspark.StoreError, match="cannot create store directory"):
        jetspark.connect(path)
