"""Damaged stream files: detected and reported (CorruptStoreError naming the file), never served,
never a silent rollback; check_stream finds it and repair keeps every intact message."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jetspark
from jetspark.engine.state_header import SLOT_OFF
from jetspark.errors import CorruptStoreError

N = 300


def make_store(path, n=N, name="S", headers=True):
    with jetspark.connect(path) as js:
        js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
        for i in range(n):
            hdrs = {"k": f"v{i}"} if headers and i % 3 == 0 else None
            js.publish(f"{name.lower()}.{i % 7}", b"payload-%04d" % i, headers=hdrs)
    return path


def files(path, name="S"):
    return path / "streams" / name / "data"


def block(path, ext, name="S"):
    (f,) = sorted((files(path, name) / "blk").glob(f"*{ext}"))
    return f


def copy_store(src, tmp_root):
    """A private copy of a store for one example (sparse files stay sparse)."""
    dst = Path(tempfile.mkdtemp(dir=tmp_root))
    subprocess.run(["cp", "-a", "--sparse=always", f"{src}/.", str(dst)], check=True)
    return dst


def flip(path, offset, mask=0xFF):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))


def everything(js, name="S"):
    """Every message through every read path: (seq, subject, data, headers)."""
    last = js.stream_info(name).state.last_seq
    got = []
    for q in range(1, last + 1):
        try:
            m = js.get_msg(name, q)
        except jetspark.MsgNotFoundError:
            continue  # removed (a repair drops damaged records)
        got.append((m.seq, m.subject, m.data, dict(m.headers or {})))
    table = pa.Table.from_batches(list(js.read_batches(name, 1, headers=True)))
    rows = [
        (q, s, d, {k: v[0] for k, v in (h or [])})
        for q, s, d, h in zip(*(table.column(c).to_pylist() for c in ("seq", "subject", "data", "headers")))
    ]
    ordered = [
        (m.metadata.sequence.stream, m.subject, m.data, dict(m.headers or {})) for m in js.ordered_consumer(name)
    ]
    assert got == rows == ordered
    return got


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    path = make_store(tmp_path_factory.mktemp("pristine"))
    with jetspark.connect(path) as js:
        return path, everything(js)


# ---------------------------------------------------------------------------------------------- records


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_flipped_byte_in_a_block_is_served_exactly_or_refused(pristine, tmp_path_factory, data):
    src, expected = pristine
    ext = data.draw(st.sampled_from([".dat", ".idx", ".hdr"]), label="file")
    size = {".idx": N * 40, ".dat": sum(len(r[2]) for r in expected)}.get(ext) or os.path.getsize(block(src, ext))
    offset = data.draw(st.integers(0, size - 1), label="offset")
    mask = data.draw(st.sampled_from([0x01, 0x80, 0xFF]), label="mask")
    path = copy_store(src, tmp_path_factory.getbasetemp())
    try:
        flip(block(path, ext), offset, mask)
        with jetspark.connect(path) as js:
            try:
                got = everything(js)
            except CorruptStoreError as exc:
                assert exc.path and "blk/" in exc.path
                assert not js.check_stream("S").ok, "a read refused damage the checker does not see"
            else:
                # Served: exactly what was published (a damaged last record is cut on open as
                # a torn tail, and listed as lost).
                st_ = js.stream_info("S").state
                assert got == expected[: len(got)]
                assert len(got) == N or st_.lost == {"msgs": list(range(len(got) + 1, N + 1)), "bytes": 0}
    finally:
        shutil.rmtree(path)


@pytest.fixture(scope="module")
def pristine_big(tmp_path_factory):
    """Two whole check intervals and an open one (blocks.CHECK_EVERY = 4,096 records)."""
    path = tmp_path_factory.mktemp("pristine-big")
    with jetspark.connect(path) as js:
        js.add_stream(name="S", subjects=["s.>"])
        n = 2 * 4096 + 100
        table = pa.table(
            {
                "subject": [f"s.{i % 5}" for i in range(n)],
                "data": [b"big-%06d" % i for i in range(n)],
                "headers": pa.array(
                    [[("k", [f"v{i}"])] if i % 4 == 0 else None for i in range(n)],
                    type=pa.map_(pa.string(), pa.list_(pa.string())),
                ),
            }
        )
        js.publish_batch(table, stream="S")
        return path, everything(js)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_flipped_byte_in_a_checkpointed_interval_is_refused_or_harmless(pristine_big, tmp_path_factory, data):
    src, expected = pristine_big
    ext = data.draw(st.sampled_from([".dat", ".idx", ".hdr", ".sum"]), label="file")
    size = {".idx": len(expected) * 40, ".sum": 2 * 12, ".dat": sum(len(r[2]) for r in expected)}.get(ext)
    size = size or os.path.getsize(block(src, ext))
    offset = data.draw(st.integers(0, size - 1), label="offset")
    path = copy_store(src, tmp_path_factory.getbasetemp())
    try:
        flip(block(path, ext), offset)
        with jetspark.connect(path) as js:
            try:
                got = everything(js)
            except CorruptStoreError as exc:
                assert exc.path
                assert not js.check_stream("S").ok
            else:
                assert got == expected[: len(got)]
                if ext == ".sum":  # the records are intact; the checker reports the stale checksums
                    assert len(got) == len(expected)
                    report = js.check_stream("S")
                    assert [p.path for p in report.problems] == [str(block(path, ".sum"))]
                    assert js.check_stream("S", repair=True).ok and js.check_stream("S").problems == ()
    finally:
        shutil.rmtree(path)


def test_repair_keeps_every_intact_message_of_a_block_with_scattered_damage(tmp_path):
    make_store(tmp_path)
    with jetspark.connect(tmp_path) as js:
        expected = everything(js)
    for i in (10, 150, 151, 299 - 5):  # damage inside four payloads, none of them the last
        flip(block(tmp_path, ".dat"), sum(len(r[2]) for r in expected[:i]) + 3)
    with jetspark.connect(tmp_path) as js:
        assert js.stream_info("S").state.messages == N
        with pytest.raises(CorruptStoreError):
            list(js.read_batches("S", 1))
        report = js.check_stream("S", repair=True)
        assert report.ok and report.lost == (11, 151, 152, 295)
        assert everything(js) == [r for r in expected if r[0] not in (11, 151, 152, 295)]
        assert js.check_stream("S").problems == ()
    with jetspark.connect(tmp_path) as js:  # the repair is on disk
        assert js.stream_info("S").state.lost == {"msgs": [11, 151, 152, 295], "bytes": 0}


def test_a_truncated_payload_file_far_from_the_tail_is_refused_then_repaired(tmp_path):
    make_store(tmp_path, n=3000, headers=False)
    dat = block(tmp_path, ".dat")
    os.truncate(dat, 500 * 12)  # every payload is 12 bytes: records 501.. lost theirs
    with jetspark.connect(tmp_path) as js:
        assert js.get_msg("S", 500).data == b"payload-0499"
        with pytest.raises(CorruptStoreError, match=r"\.dat: .*truncated|fails its checksum"):
            list(js.read_batches("S", 1))
        with pytest.raises(CorruptStoreError):
            js.get_msg("S", 2000)
        report = js.check_stream("S", repair=True)
        assert report.ok and report.lost == tuple(range(501, 3001))
        assert js.stream_info("S").state.messages == 500
        assert js.publish("s.x", b"next").seq == 501


def test_a_torn_index_tail_is_cut_and_listed_as_lost(tmp_path):
    make_store(tmp_path, n=100)
    idx = block(tmp_path, ".idx")
    os.truncate(idx, 97 * 40 + 17)  # the index lost the end of entry 98 and all after it
    with jetspark.connect(tmp_path) as js:
        st_ = js.stream_info("S").state
        assert (st_.messages, st_.last_seq, st_.lost) == (97, 97, {"msgs": [98, 99, 100], "bytes": 0})
        assert js.publish("s.x", b"next").seq == 98
        assert js.get_msg("S", 98).data == b"next"


# ---------------------------------------------------------------------------------------------- header


def test_a_damaged_active_header_slot_rolls_nothing_back(tmp_path, caplog):
    make_store(tmp_path, n=50)
    state = files(tmp_path) / "state"
    active = state.read_bytes()[8] & 1
    flip(state, SLOT_OFF[active] + 20)  # inside last_seq of the live slot
    with caplog.at_level(logging.WARNING, logger="jetspark"), jetspark.connect(tmp_path) as js:
        assert js.stream_info("S").state.last_seq == 50  # the mirror holds the same commit
        assert "active slot fails its checksum" in caplog.text
        report = js.check_stream("S")
        assert [p.what for p in report.problems] in (["the active header slot fails its checksum"], [])
        assert js.publish("s.x", b"next").seq == 51  # the writer rewrote the slot
    with jetspark.connect(tmp_path) as js:
        assert js.check_stream("S").problems == ()
        assert js.stream_info("S").state.last_seq == 51


@pytest.mark.parametrize("damage", ["missing", "truncated", "both slots"])
def test_a_lost_header_is_an_error_never_an_empty_stream_and_repair_rebuilds_it(tmp_path, damage):
    make_store(tmp_path, n=200)
    make_store(tmp_path, n=10, name="T")
    with jetspark.connect(tmp_path) as js:
        expected = everything(js)
        js.add_consumer("S", durable_name="C", ack_policy="explicit")
    state = files(tmp_path) / "state"
    if damage == "missing":
        state.unlink()
    elif damage == "truncated":
        os.truncate(state, 100)
    else:
        raw = bytearray(state.read_bytes())
        raw[SLOT_OFF[0] : SLOT_OFF[0] + 30] = b"\xee" * 30
        raw[SLOT_OFF[1] : SLOT_OFF[1] + 30] = b"\xee" * 30
        state.write_bytes(bytes(raw))
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(CorruptStoreError, match="state") as err:
            js.stream_info("S")
        assert err.value.path.endswith("state")
        assert js.stream_info("T").state.messages == 10  # the other stream works
        assert not js.check_stream("S").ok
        report = js.check_stream("S", repair=True)
        assert report.ok and report.messages == 200 and report.lost == ()
        assert everything(js) == expected
        assert js.consumer_info("S", "C").num_pending == 200
        assert js.publish("s.x", b"next").seq == 201
    with jetspark.connect(tmp_path) as js:
        assert js.check_stream("S").problems == ()


def test_a_rebuilt_header_applies_the_limits_again(tmp_path):
    with jetspark.connect(tmp_path) as js:
        js.add_stream(name="S", subjects=["s.>"], max_msgs=100)
        for i in range(250):
            js.publish("s.x", b"%d" % i)
    (files(tmp_path) / "state").unlink()
    with jetspark.connect(tmp_path) as js:
        report = js.check_stream("S", repair=True)
        assert report.ok
        st_ = js.stream_info("S").state
        assert (st_.messages, st_.first_seq, st_.last_seq) == (100, 151, 250)
        assert js.get_msg("S", 151).data == b"150"


# ---------------------------------------------------------------------------------------------- journals


def test_a_missing_removal_journal_never_resurrects_deleted_messages(tmp_path):
    make_store(tmp_path, n=20)
    with jetspark.connect(tmp_path) as js:
        for q in (5, 6, 12):
            js.delete_msg("S", q)
    (files(tmp_path) / "ops").unlink()
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(
            CorruptStoreError, match=r"/ops: the file ends at byte 0 but the stream header commits"
        ) as err:
            js.get_msg("S", 5)
        assert err.value.path.endswith("ops")
        report = js.check_stream("S")
        assert not report.ok and "ops" in report.problems[0].path


def test_a_truncated_subject_dictionary_is_an_error_naming_it(tmp_path):
    make_store(tmp_path, n=20)
    subjects = files(tmp_path) / "subjects"
    os.truncate(subjects, subjects.stat().st_size - 3)
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(CorruptStoreError, match="subjects"):
            js.stream_info("S")


def test_a_damaged_message_id_record_is_refused_never_a_wrong_duplicate(tmp_path):
    with jetspark.connect(tmp_path) as js:
        js.add_stream(name="S", subjects=["s.>"], duplicate_window=600)
        for i in range(20):
            js.publish("s.x", b"%d" % i, headers={"Nats-Msg-Id": f"id-{i}"})
    dedup = files(tmp_path) / "dedup"
    flip(dedup, 5 * 36 + 20)  # inside the hash of id-5's record
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(CorruptStoreError, match=r"dedup: the record at byte 180 fails its checksum") as err:
            js.publish("s.x", b"again", headers={"Nats-Msg-Id": "id-7"})
        assert err.value.path.endswith("dedup")
        assert js.stream_info("S").state.messages == 20  # nothing written
        report = js.check_stream("S")
        assert not report.ok and report.problems[0].path.endswith("dedup")
        assert js.check_stream("S", repair=True).ok
        assert js.publish("s.x", b"again", headers={"Nats-Msg-Id": "id-7"}).duplicate  # the intact ids still count
        assert not js.publish(
            "s.x", b"resent", headers={"Nats-Msg-Id": "id-5"}
        ).duplicate  # the damaged one is forgotten
        assert js.check_stream("S").problems == ()
