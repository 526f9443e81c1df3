"""Damaged metadata: every JSON document and consumer file the engine trusts is checked.

A damaged copy of a JSON document is recovered from its mirror (with a
warning), two damaged copies are a CorruptStoreError naming the file, and
nothing is ever served from a damaged file or "repaired" by deleting data.
A consumer log cuts only a torn last record.  A full disk (a small tmpfs)
gives StoreFullError naming the file and leaves nothing half made.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jetspark
from jetspark.cli.app import cli
from jetspark.engine import consumer_log as consumer_mod
from jetspark.engine import metafile
from jetspark.errors import CorruptStoreError, StoreError, StoreFullError


def _flip(path: Path, offset: int, mask: int = 0xFF) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= mask
    path.write_bytes(bytes(raw))


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its content."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _store(path: Path, names=("S", "T"), n=20, **config) -> None:
    with jetspark.connect(path) as js:
        for name in names:
            js.add_stream(name=name, subjects=[f"{name.lower()}.>"], **config)
            for i in range(n):
                js.publish(f"{name.lower()}.x", b"%s%03d" % (name.encode(), i))


def _cfg(path: Path, name="S") -> Path:
    return path / "streams" / name / "config.json"


LOG_HEAD = 16  # a consumer log's header: magic and committed length (jetspark/engine/consumer.py)


def _cons(path: Path, consumer: str, name="S") -> Path:
    return path / "streams" / name / "data" / "cons" / consumer


# ---------------------------------------------------------------- the document format


def test_a_document_is_kept_twice_with_a_checksum_and_a_generation(tmp_path):
    path = tmp_path / "doc.json"
    metafile.save(path, {"b": [1, 2], "a": "x"})
    metafile.save(path, {"b": [1, 2], "a": "y"})
    raw = path.read_bytes()
    assert raw == metafile.mirror_of(path).read_bytes() == metafile.encode({"a": "y", "b": [1, 2]}, 2)
    assert raw.startswith(b'{"crc32":"') and b'"gen":2' in raw
    assert metafile.load(path) == {"a": "y", "b": [1, 2]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.json", "doc.json.1"]  # no temporary left
    with pytest.raises(FileNotFoundError, match="neither .*nothing.json nor its mirror"):
        metafile.load(tmp_path / "nothing.json")


DOC = {"config": {"name": "S", "max_age": 3600.0, "subjects": ["s.>"], "max_msgs": -1}, "created": 17, "uid": "abc"}


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_any_flipped_byte_of_one_copy_is_recovered_from_the_other(data):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "config.json"
        metafile.save(path, DOC)
        good = path.read_bytes()
        bad = data.draw(st.sampled_from([path, metafile.mirror_of(path)]))
        _flip(bad, data.draw(st.integers(0, len(good) - 1)), data.draw(st.integers(1, 255)))
        assert metafile.load(path) == DOC
        assert path.read_bytes() == metafile.mirror_of(path).read_bytes() == good  # the bad copy is rewritten


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_any_flipped_byte_is_detected_without_a_good_mirror(data):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "config.json"
        metafile.save(path, DOC)
        n = len(path.read_bytes())
        mirror = data.draw(st.sampled_from(["missing", "flipped too"]))
        if mirror == "missing":
            metafile.mirror_of(path).unlink()
        else:
            _flip(metafile.mirror_of(path), data.draw(st.integers(0, n - 1)), data.draw(st.integers(1, 255)))
        _flip(path, data.draw(st.integers(0, n - 1)), data.draw(st.integers(1, 255)))
        with pytest.raises(CorruptStoreError, match="config.json is damaged and has no intact copy") as err:
            metafile.load(path)
        assert err.value.path == str(path)


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(0, 200))
def test_a_truncated_copy_is_detected(cut):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "config.json"
        metafile.save(path, DOC)
        raw = path.read_bytes()
        path.write_bytes(raw[: min(cut, len(raw) - 1)])
        metafile.mirror_of(path).unlink()
        with pytest.raises(CorruptStoreError):
            metafile.load(path)


def test_an_interrupted_save_finishes_at_the_next_load(tmp_path):
    """A process killed between the two renames of a save leaves the primary one generation ahead."""
    path = tmp_path / "doc.json"
    metafile.save(path, {"v": 1})
    old = path.read_bytes()
    metafile.save(path, {"v": 2})
    metafile.mirror_of(path).write_bytes(old)
    assert metafile.load(path) == {"v": 2}
    assert metafile.mirror_of(path).read_bytes() == path.read_bytes()
    # The newer generation wins from either side.
    path.write_bytes(old)
    assert metafile.load(path) == {"v": 2}


# ---------------------------------------------------------------- stream config.json


@pytest.fixture(scope="module")
def aged_store(tmp_path_factory):
    """A stream with max_age (a flipped digit there once expired every message)."""
    path = tmp_path_factory.mktemp("aged")
    _store(path, names=("S",), max_age=3600.0)
    return path


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_flipped_byte_in_a_stream_config_is_recovered_or_detected_never_served(aged_store, data):
    path = _cfg(aged_store)
    mirror = metafile.mirror_of(path)
    good, good_mirror = path.read_bytes(), mirror.read_bytes()
    with jetspark.connect(aged_store) as js:
        expected = js.stream_info("S")
    offset = data.draw(st.integers(0, len(good) - 1))
    mask = data.draw(st.integers(1, 255))
    lost_mirror = data.draw(st.booleans())
    try:
        _flip(path, offset, mask)
        if lost_mirror:
            mirror.unlink()
        with jetspark.connect(aged_store) as js:
            if lost_mirror:
                with pytest.raises(CorruptStoreError, match=r"streams/S/config.json is damaged") as err:
                    js.stream_info("S")
                assert err.value.path == str(path)
            else:
                info = js.stream_info("S")
                assert info.config == expected.config
                assert info.state.messages == 20  # nothing expired
    finally:
        path.write_bytes(good)
        mirror.write_bytes(good_mirror)
    with jetspark.connect(aged_store) as js:
        assert js.stream_info("S").state.messages == 20  # never served, never expired


def test_a_damaged_stream_config_is_recovered_with_a_warning(tmp_path, caplog):
    _store(tmp_path, names=("S",), max_age=3600.0, storage="memory")
    path = _cfg(tmp_path)
    digit = path.read_bytes().index(b'"max_age":3600') + len('"max_age":')
    _flip(path, digit, ord("3") ^ ord("0"))  # 3600 -> 0600: still JSON, another config
    with caplog.at_level(logging.WARNING, logger="jetspark"), jetspark.connect(tmp_path) as js:
        info = js.stream_info("S")
        assert info.config.max_age == 3600.0 and info.state.messages == 20
        js.delete_stream("S")
    assert f"{path} fails its checksum; recovered from config.json.1 and rewritten" in caplog.text


def test_a_stream_without_its_config_is_reported_and_nothing_is_deleted(tmp_path, caplog):
    _store(tmp_path)
    path = _cfg(tmp_path)
    saved = {p: p.read_bytes() for p in (path, metafile.mirror_of(path))}
    for p in saved:
        p.unlink()
    before = _tree(tmp_path / "streams" / "S")
    with caplog.at_level(logging.WARNING, logger="jetspark"), jetspark.connect(tmp_path) as js:
        for call in (
            lambda: js.stream_info("S"),
            lambda: js.get_msg("S", seq=1),
            lambda: js.publish("s.x", b"new"),  # its subjects are unknown: it may capture this
            lambda: js.add_stream(name="S", subjects=["s.>"]),
            lambda: js.add_stream(name="S", subjects=["other.>"]),
            lambda: js.add_consumer("S", durable_name="D"),
        ):
            with pytest.raises(
                CorruptStoreError, match=r"streams/S/config.json and its mirror config.json.1 are missing"
            ) as err:
                call()
            assert err.value.path == str(path)
        # The other streams keep working; the damaged one is listed, not described.
        assert js.stream_names() == ["S", "T"]
        assert [i.config.name for i in js.streams_info()] == ["T"]
        assert "streams_info leaves out the damaged stream 'S'" in caplog.text
        assert js.publish("t.x", b"more").seq == 21
        assert js.get_msg("T", seq=21).data == b"more"
        assert _tree(tmp_path / "streams" / "S") == before
        # Put back, the stream is whole again, in the same handle.
        for p, raw in saved.items():
            p.write_bytes(raw)
        assert js.stream_info("S").state.messages == 20
        assert js.publish("s.x", b"new").seq == 21


def test_a_stream_config_without_its_name_is_reported_not_served(tmp_path):
    # Both copies intact (checksummed) but the document has lost a field every stream has.
    _store(tmp_path, names=("S",))
    path = _cfg(tmp_path)
    doc = metafile.load(path)
    del doc["config"]["name"]
    metafile.save(path, doc)
    before = _tree(tmp_path / "streams" / "S")
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(CorruptStoreError, match=r"streams/S/config.json is not a stream config") as err:
            js.stream_info("S")
        assert err.value.path == str(path)
        assert js.stream_names() == ["S"]
    assert _tree(tmp_path / "streams" / "S") == before


def test_delete_stream_removes_a_damaged_stream_and_its_name_is_free_again(tmp_path):
    _store(tmp_path)
    for p in (_cfg(tmp_path), metafile.mirror_of(_cfg(tmp_path))):
        p.write_bytes(b"junk")
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(CorruptStoreError):
            js.stream_info("S")
        assert js.delete_stream("S") is True
        assert js.stream_names() == ["T"]
        assert sorted(p.name for p in (tmp_path / "streams").iterdir()) == ["T"]
        js.add_stream(name="S", subjects=["s.>"])
        assert js.stream_info("S").state.messages == 0


def test_a_stream_directory_without_config_is_never_replaced(tmp_path):
    """Not even an empty one: whatever is there stays, and the name is refused."""
    jetspark.connect(tmp_path).close()
    (tmp_path / "streams" / "S").mkdir()
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(CorruptStoreError, match="config.json and its mirror config.json.1 are missing"):
            js.add_stream(name="S", subjects=["s.>"])
        assert list((tmp_path / "streams" / "S").iterdir()) == []
        js.add_stream(name="T", subjects=["t.>"])  # other names are fine


def test_leftovers_of_an_interrupted_create_or_delete_are_not_streams(tmp_path):
    _store(tmp_path, names=("S",))
    shutil.copytree(tmp_path / "streams" / "S", tmp_path / "streams" / ".new-0123456789ab")
    shutil.copytree(tmp_path / "streams" / "S", tmp_path / "streams" / ".deleted-0123456789ab-x")
    with jetspark.connect(tmp_path) as js:
        assert js.stream_names() == ["S"]
        js.add_stream(name="T", subjects=["t.>"])  # a create clears them
    assert sorted(p.name for p in (tmp_path / "streams").iterdir()) == ["S", "T"]


# ---------------------------------------------------------------- store.json


def test_store_json_is_recovered_from_its_mirror_and_both_damaged_is_an_error(tmp_path, caplog):
    _store(tmp_path, names=("S",))
    path = tmp_path / "store.json"
    good = path.read_bytes()
    _flip(path, len(good) // 2)
    with caplog.at_level(logging.WARNING, logger="jetspark"), jetspark.connect(tmp_path) as js:
        assert js.stream_info("S").state.messages == 20
    assert "store.json fails its checksum; recovered from store.json.1" in caplog.text
    assert path.read_bytes() == good
    _flip(path, 30)
    _flip(metafile.mirror_of(path), 31)
    with pytest.raises(CorruptStoreError, match="store.json is damaged and has no intact copy") as err:
        jetspark.connect(tmp_path)
    assert err.value.path == str(path)


def test_a_lost_store_json_is_an_error_once_the_store_holds_streams(tmp_path):
    _store(tmp_path, names=("S",))
    (tmp_path / "store.json").unlink()
    (tmp_path / "store.json.1").unlink()
    with pytest.raises(
        CorruptStoreError, match=r"store.json and its mirror store.json.1 are missing, but .* holds streams"
    ):
        jetspark.connect(tmp_path)
    assert not (tmp_path / "store.json").exists()  # no new id made up


def test_a_store_of_the_previous_format_is_named_as_such(tmp_path):
    _store(tmp_path, names=("S",))
    for p in (tmp_path / "store.json", tmp_path / "store.json.1"):
        p.write_text('{"id": "0123", "format": 1}')
    with pytest.raises(StoreError, match=r"older jetspark \(store format 1"):
        jetspark.connect(tmp_path)


# ---------------------------------------------------------------- consumer config.json


def _two_consumers(path: Path, retention="limits", n=6):
    with jetspark.connect(path) as js:
        js.add_stream(name="S", subjects=["s.>"], retention=retention)
        js.add_consumer("S", durable_name="A", filter_subject="s.a", ack_policy="explicit")
        js.add_consumer("S", durable_name="B", filter_subject="s.b", ack_policy="explicit")
        for i in range(n):
            js.publish("s.a" if i % 2 == 0 else "s.b", b"%d" % i)


def test_a_damaged_consumer_config_is_reported_and_the_others_keep_working(tmp_path, caplog):
    _two_consumers(tmp_path)
    cfg = _cons(tmp_path, "B") / "config.json"
    for p in (cfg, metafile.mirror_of(cfg)):
        _flip(p, 40)
    before = _tree(_cons(tmp_path, "B"))
    with caplog.at_level(logging.WARNING, logger="jetspark"), jetspark.connect(tmp_path) as js:
        info = js.stream_info("S")  # once a JSONDecodeError
        assert (info.state.messages, info.state.consumer_count) == (6, 2)
        for call in (
            lambda: js.consumer_info("S", "B"),
            lambda: js.pull_subscribe_bind("B", stream="S"),
            lambda: js.pull_subscribe("s.b", durable="B", stream="S"),
            lambda: js.add_consumer("S", durable_name="B", filter_subject="s.b", ack_policy="explicit"),
            lambda: js.update_consumer("S", durable_name="B", filter_subject="s.b", ack_policy="explicit"),
            lambda: js.advance_ack_floor("S", "B", 3),
        ):
            with pytest.raises(CorruptStoreError, match=r"cons/B/config.json is damaged and has no intact copy") as err:
                call()
            assert err.value.path == str(cfg)
        assert [c.name for c in js.consumers_info("S")] == ["A"]
        msgs = js.pull_subscribe_bind("A", stream="S").fetch(3, no_wait=True)
        assert [m.data for m in msgs] == [b"0", b"2", b"4"]
        for m in msgs:
            m.ack_sync()
        assert js.consumer_info("S", "A").ack_floor.stream_seq == 5
        assert _tree(_cons(tmp_path, "B")) == before
        # Deleting it is what removes it.
        assert js.delete_consumer("S", "B") is True
        assert js.stream_info("S").state.consumer_count == 1
        assert not _cons(tmp_path, "B").exists()
        js.add_consumer("S", durable_name="B", filter_subject="s.b", ack_policy="explicit")
        assert [m.data for m in js.pull_subscribe_bind("B", stream="S").fetch(3, no_wait=True)] == [b"1", b"3", b"5"]


def test_one_damaged_copy_of_a_consumer_config_is_recovered(tmp_path, caplog):
    _two_consumers(tmp_path)
    cfg = _cons(tmp_path, "B") / "config.json"
    cfg.unlink()
    with caplog.at_level(logging.WARNING, logger="jetspark"), jetspark.connect(tmp_path) as js:
        assert js.consumer_info("S", "B").config.filter_subject == "s.b"
    assert f"{cfg} is missing; recovered from config.json.1 and rewritten" in caplog.text
    assert cfg.read_bytes() == metafile.mirror_of(cfg).read_bytes()


def test_an_interest_stream_keeps_everything_while_a_consumer_is_damaged(tmp_path):
    """Nobody can tell what a damaged consumer still needs: nothing is removed for it."""
    _two_consumers(tmp_path, retention="interest")
    cfg = _cons(tmp_path, "B") / "config.json"
    for p in (cfg, metafile.mirror_of(cfg)):
        p.unlink()
    with jetspark.connect(tmp_path) as js:
        for m in js.pull_subscribe_bind("A", stream="S").fetch(3, no_wait=True):
            m.ack_sync()
        js.publish("s.c", b"no healthy consumer matches")  # the damaged one might
        assert js.stream_info("S").state.messages == 7
        js.delete_consumer("S", "B")
        # Now the acked ones go, and so does what only B (or nobody) was there for.
        assert js.stream_info("S").state.messages == 0


# ---------------------------------------------------------------- consumer log


def _log_store(path: Path):
    """Stream S with consumer D (explicit acks) whose log holds several records; returns
    [(log size, consumer_info)] after each call (each writes one record)."""
    states = []
    with jetspark.connect(path) as js:
        js.add_stream(name="S", subjects=["s.>"])
        js.add_consumer("S", durable_name="D", ack_policy="explicit", ack_wait=3600.0)
        js.add_consumer("S", durable_name="E", ack_policy="explicit")
        for i in range(10):
            js.publish("s.x", b"%d" % i)
        log = _cons(path, "D") / "log"

        def mark():
            states.append((log.stat().st_size, js.consumer_info("S", "D")))

        mark()
        sub = js.pull_subscribe_bind("D", stream="S")
        first = sub.fetch(3, no_wait=True)
        mark()
        first[0].ack_sync()
        mark()
        first[1].nak()
        mark()
        sub.fetch(2, no_wait=True)
        mark()
        first[2].in_progress()
        mark()
    sizes = [s for s, _ in states]
    assert sizes == sorted(set(sizes)), "each call wrote one record"
    return states


@pytest.fixture(scope="module")
def log_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("log")
    return path, _log_store(path)


def _comparable(info):
    return (info.delivered, info.ack_floor, info.num_ack_pending, info.num_redelivered, info.num_pending)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_flipped_byte_in_a_consumer_log_is_damage(log_store, data):
    path, states = log_store
    log = _cons(path, "D") / "log"
    good = log.read_bytes()
    offset = data.draw(st.integers(0, len(good) - 1))
    mask = data.draw(st.integers(1, 255))
    starts = [LOG_HEAD] + [s for s, _ in states[:-1]]
    try:
        _flip(log, offset, mask)
        with jetspark.connect(path) as js:
            if offset < LOG_HEAD:
                # The header: a damaged magic makes the first record unreadable; a committed
                # length made larger is records lost, made smaller loses nothing.
                try:
                    info = js.consumer_info("S", "D")
                except CorruptStoreError as err:
                    assert err.path == str(log)
                    assert offset >= 8 or "damaged first record" in str(err)
                else:
                    assert offset >= 8 and _comparable(info) == _comparable(states[-1][1])
                return
            record = max(i for i, s in enumerate(starts) if s <= offset)
            # Every record is below the length the header commits, the last one too (its
            # call completed): damage, never cut as a torn tail.
            with pytest.raises(
                CorruptStoreError, match=rf"cons/D/log has a damaged (first record|record at offset {starts[record]})"
            ) as err:
                js.consumer_info("S", "D")
            assert err.value.path == str(log)
            assert len(log.read_bytes()) == len(good)  # nothing cut
            assert js.consumer_info("S", "E").num_pending == 10  # the other consumer works
            assert js.stream_info("S").state.messages == 10
    finally:
        log.write_bytes(good)


def test_a_torn_last_record_is_cut_with_a_warning_and_the_next_write_goes_on(tmp_path, caplog):
    states = _log_store(tmp_path)
    log = _cons(tmp_path, "D") / "log"
    with open(log, "r+b") as f:
        f.truncate(states[-1][0] - 7)  # a writer killed mid-record, before its header said more
        f.seek(8)
        f.write(states[-2][0].to_bytes(8, "little"))
    with caplog.at_level(logging.WARNING, logger="jetspark"), jetspark.connect(tmp_path) as js:
        assert _comparable(js.consumer_info("S", "D")) == _comparable(states[-2][1])
        assert log.stat().st_size == states[-2][0]
        (m,) = js.pull_subscribe_bind("D", stream="S").fetch(1, no_wait=True)
        assert m.metadata.sequence.stream == states[-2][1].delivered.stream_seq + 1
    with jetspark.connect(tmp_path) as js:
        assert js.consumer_info("S", "D").delivered.stream_seq == m.metadata.sequence.stream
    assert f"{log}: the last record, at offset {states[-2][0]}" in caplog.text and "is torn" in caplog.text


def test_a_damaged_snapshot_is_never_cut_even_as_the_only_record(tmp_path):
    """The first record is written before the log is in place, so a crash cannot tear it:
    cutting it would silently start the consumer over."""
    with jetspark.connect(tmp_path) as js:
        js.add_stream(name="S", subjects=["s.>"])
        js.publish("s.x", b"x")
        js.add_consumer("S", durable_name="D", deliver_policy="new")
    log = _cons(tmp_path, "D") / "log"
    good = log.read_bytes()
    _flip(log, len(good) - 1)
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(CorruptStoreError, match="cons/D/log has a damaged first record"):
            js.consumer_info("S", "D")
    assert len(log.read_bytes()) == len(good)


@pytest.mark.parametrize("cut", ["mid-record", "at a record", "header only", "inside the header"])
def test_a_log_cut_short_is_damage_never_a_silent_rollback(tmp_path, cut):
    """Cut anywhere below what its header commits, the log has lost acks: reported (the
    consumer's state would otherwise go back, its acked messages pending again), and listed
    by check_stream; the other consumer works on."""
    states = _log_store(tmp_path)
    log = _cons(tmp_path, "D") / "log"
    size = {
        "mid-record": (states[2][0] + states[3][0]) // 2,
        "at a record": states[2][0],
        "header only": LOG_HEAD,
        "inside the header": 12,
    }[cut]
    os.truncate(log, size)
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(
            CorruptStoreError,
            match=rf"cons/D/log is {size} bytes, shorter than "
            r"(the \d+ bytes its header commits \(cut short\)|its header): (its )?records were lost",
        ) as err:
            js.consumer_info("S", "D")
        assert err.value.path == str(log)
        assert js.consumer_info("S", "E").num_pending == 10
        report = js.check_stream("S")
        assert not report.ok and [p.path for p in report.problems] == [str(log)]
    listed = CliRunner().invoke(cli, ["--store", str(tmp_path), "stream", "check", "S"])
    assert listed.exit_code == 1 and f"PROBLEM: {log}" in listed.output, listed.output
    assert log.stat().st_size == size  # nothing cut or made up


def test_many_acks_cut_from_the_middle_of_a_log_are_reported(tmp_path):
    with jetspark.connect(tmp_path) as js:
        js.add_stream(name="S", subjects=["s.>"])
        js.add_consumer("S", durable_name="D", ack_policy="explicit")
        for i in range(100):
            js.publish("s.x", b"%d" % i)
        sub = js.pull_subscribe_bind("D", stream="S")
        for m in sub.fetch(100, no_wait=True)[:50]:
            m.ack_sync()
        assert js.consumer_info("S", "D").ack_floor.stream_seq == 50
    log = _cons(tmp_path, "D") / "log"
    os.truncate(log, log.stat().st_size // 2)
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(CorruptStoreError, match="records were lost"):
            js.consumer_info("S", "D")
        with pytest.raises(CorruptStoreError):
            js.pull_subscribe_bind("D", stream="S").fetch(1, no_wait=True)


@pytest.mark.parametrize("damage", ["missing", "empty"])
def test_a_missing_or_empty_log_is_damage_not_a_new_consumer(tmp_path, damage):
    _log_store(tmp_path)
    log = _cons(tmp_path, "D") / "log"
    if damage == "missing":
        log.unlink()
    else:
        log.write_bytes(b"")
    with jetspark.connect(tmp_path) as js:
        with pytest.raises(
            CorruptStoreError, match="cons/D/log is missing" if damage == "missing" else "cons/D/log is empty"
        ):
            js.consumer_info("S", "D")
        assert js.consumer_info("S", "E").num_pending == 10
    assert log.exists() == (damage == "empty")  # not made up


def test_a_log_shrinking_under_a_reader_is_damage(tmp_path):
    states = _log_store(tmp_path)
    log = _cons(tmp_path, "D") / "log"
    with jetspark.connect(tmp_path) as js:
        js.consumer_info("S", "D")
        with open(log, "r+b") as f:
            f.truncate(states[1][0])  # whole records gone
        js.publish("s.x", b"wakes the other processes' view up")
        with pytest.raises(
            CorruptStoreError, match=rf"cons/D/log is {states[1][0]} bytes, shorter than the {states[-1][0]} bytes"
        ):
            js.consumer_info("S", "D")
        assert js.consumer_info("S", "E").num_pending == 11


# ---------------------------------------------------------------- a full disk


@pytest.fixture
def tiny_fs(tmpfs):
    """A 1 MiB tmpfs to fill up and free (tests/engine/conftest.py)."""
    return tmpfs("1m")


def _full(err, path: Path) -> None:
    assert isinstance(err, StoreFullError) and isinstance(err, OSError)
    assert err.errno == errno.ENOSPC
    assert err.filename == str(path) and err.path == str(path)


def test_add_stream_on_a_full_disk_leaves_nothing(tiny_fs):
    store = tiny_fs.root / "store"
    with jetspark.connect(store) as js:
        js.add_stream(name="T", subjects=["t.>"])
        tiny_fs.fill()
        with pytest.raises(StoreFullError) as err:
            js.add_stream(name="S", subjects=["s.>"])
        _full(err.value, store / "streams" / "S" / "config.json")
        assert sorted(p.name for p in (store / "streams").iterdir()) == ["T"]
        assert js.stream_names() == ["T"]
        tiny_fs.free()
        js.add_stream(name="S", subjects=["s.>"])
        assert js.publish("s.x", b"x").seq == 1


def test_stream_and_consumer_config_writes_on_a_full_disk_change_nothing(tiny_fs):
    store = tiny_fs.root / "store"
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s.>"], max_msgs=10)
        js.add_consumer("S", durable_name="D", ack_policy="explicit", max_deliver=5)
        tiny_fs.fill()
        with pytest.raises(StoreFullError) as err:
            js.update_stream(name="S", subjects=["s.>"], max_msgs=20)
        _full(err.value, _cfg(store))
        assert js.stream_info("S").config.max_msgs == 10
        with pytest.raises(StoreFullError) as err:
            js.update_consumer("S", durable_name="D", ack_policy="explicit", max_deliver=7)
        _full(err.value, _cons(store, "D") / "config.json")
        assert js.consumer_info("S", "D").config.max_deliver == 5
        with pytest.raises(StoreFullError) as err:
            js.add_consumer("S", durable_name="E")
        _full(err.value, _cons(store, "E") / "config.json")
        assert [c.name for c in js.consumers_info("S")] == ["D"]
        assert sorted(p.name for p in _cons(store, "D").parent.iterdir()) == ["D"]
        tiny_fs.free()
        js.update_stream(name="S", subjects=["s.>"], max_msgs=20)
        js.update_consumer("S", durable_name="D", ack_policy="explicit", max_deliver=7)
        js.add_consumer("S", durable_name="E")
    with jetspark.connect(store) as js:
        assert js.stream_info("S").config.max_msgs == 20
        assert js.consumer_info("S", "D").config.max_deliver == 7
        assert js.stream_info("S").state.consumer_count == 2


@pytest.mark.parametrize("compact", [False, True])
def test_a_consumer_log_write_on_a_full_disk_changes_nothing_and_goes_on_once_freed(tiny_fs, monkeypatch, compact):
    if compact:
        monkeypatch.setattr(consumer_mod, "COMPACT_BYTES", 1500)  # rewrites happen within the log's first page
    store = tiny_fs.root / "store"
    log = _cons(store, "D") / "log"
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s.>"])
        js.add_consumer("S", durable_name="D", ack_policy="explicit", ack_wait=3600.0)
        for i in range(300):
            js.publish("s.x", b"%d" % i)
        sub = js.pull_subscribe_bind("D", stream="S")
        tiny_fs.fill()
        m = None
        for _ in range(600):  # fetch, ack, fetch, ack ... until a record needs a new page
            before, size = js.consumer_info("S", "D"), log.stat().st_size
            step = "fetch" if m is None else "ack"
            try:
                if step == "fetch":
                    (m,) = sub.fetch(1, no_wait=True)
                else:
                    m.ack_sync()
                    m = None
            except StoreFullError as exc:
                err = exc
                break
        else:
            pytest.fail("the consumer's log never needed more space")
        _full(err, log)
        assert err.action == (
            "compacting the consumer's log (into log.tmp)" if compact else "appending to the consumer's log"
        )
        assert _comparable(js.consumer_info("S", "D")) == _comparable(before)
        assert log.stat().st_size == size  # no torn bytes left behind
        assert not (log.parent / "log.tmp").exists()
        tiny_fs.free()
        if step == "fetch":
            (m,) = sub.fetch(1, no_wait=True)
            assert m.metadata.sequence.stream == before.delivered.stream_seq + 1  # the one the failed fetch took
        m.ack_sync()
        assert js.consumer_info("S", "D").ack_floor.stream_seq == m.metadata.sequence.stream
        live = _comparable(js.consumer_info("S", "D"))
    with jetspark.connect(store) as js:
        assert _comparable(js.consumer_info("S", "D")) == live


def test_deletes_on_a_full_disk_work(tiny_fs):
    store = tiny_fs.root / "store"
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s.>"], retention="interest")
        js.add_consumer("S", durable_name="D", ack_policy="explicit")
        js.add_stream(name="T", subjects=["t.>"])
        js.publish("s.x", b"x")
        tiny_fs.fill()
        assert js.delete_consumer("S", "D") is True
        assert js.stream_info("S").state.messages == 0  # the last consumer's delete purged it
        assert js.delete_stream("T") is True
        assert js.stream_names() == ["S"]
        tiny_fs.free()


def test_reopening_a_work_queue_stream_keeps_what_no_consumer_matches(tmp_path):
    """The sweep a process runs when it loads the consumers (finishing removals a dead process
    left) removes only what a consumer matching it acked: a message nobody matches stays."""
    with jetspark.connect(tmp_path) as js:
        js.add_stream(name="W", subjects=["w.>"], retention="workqueue")
        js.add_consumer("W", durable_name="A", filter_subject="w.a", ack_policy="explicit")
        js.publish("w.b", b"for a consumer to come")
        js.publish("w.a", b"a")
        (m,) = js.pull_subscribe_bind("A", stream="W").fetch(1, no_wait=True)
        m.ack_sync()
        assert js.stream_info("W").state.messages == 1
    with jetspark.connect(tmp_path) as js:
        assert js.stream_info("W").state.messages == 1
        assert js.get_msg("W", seq=1).data == b"for a consumer to come"


def test_a_work_queue_stream_removes_what_was_acked_once_its_damaged_consumer_is_deleted(tmp_path):
    _two_consumers(tmp_path, retention="workqueue")
    cfg = _cons(tmp_path, "B") / "config.json"
    for p in (cfg, metafile.mirror_of(cfg)):
        _flip(p, 50)
    with jetspark.connect(tmp_path) as js:
        for m in js.pull_subscribe_bind("A", stream="S").fetch(3, no_wait=True):
            m.ack_sync()
        assert js.stream_info("S").state.messages == 6  # kept while B's needs are unknown
        with pytest.raises(CorruptStoreError):
            js.add_consumer("S", durable_name="C", filter_subject="s.c", ack_policy="explicit")
        js.delete_consumer("S", "B")
        assert [js.get_msg("S", seq=q).data for q in (2, 4, 6)] == [b"1", b"3", b"5"]
        assert js.stream_info("S").state.messages == 3  # A's acked ones went; B's stay, unacked
