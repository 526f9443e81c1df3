"""Stream backups on the embedded engine: ``backup_stream`` / ``restore_stream``.

A restored stream is the same stream to the API (state, every message, every consumer's
state, what it does next); a damaged, truncated or incomplete backup is refused naming the
file, before anything is created; a backup taken while another process appends is one
committed state.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import traceback

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jetspark
from jetspark.engine import block_writer
from jetspark.errors import (
    BackupError,
    BadRequestError,
    CorruptBackupError,
    MsgNotFoundError,
    ServerError,
    StreamNotFoundError,
)
from tests.conftest import FakeClock
from tests.engine.conftest import shm_dir

SPAWN = multiprocessing.get_context("spawn")
pytestmark = pytest.mark.timeout(120)  # a hang guard only: nothing here is timed


def view(js, name: str) -> dict:
    """Everything the API tells about a stream: its info, each message in its range (or
    that it is gone), and each consumer's info."""
    info = js.stream_info(name, subjects_filter=">", deleted_details=True)
    msgs = {}
    for seq in range(max(info.state.first_seq, 1), info.state.last_seq + 1):
        try:
            m = js.get_msg(name, seq)
            msgs[seq] = (m.subject, m.data, m.headers, m.time)
        except MsgNotFoundError:
            msgs[seq] = None
    return {
        "config": info.config,
        "state": info.state,
        "created": info.created,
        "msgs": msgs,
        "consumers": js.consumers_info(name),
    }


def fill(js, name: str = "S", storage_kind: str = "file") -> None:
    """A stream with headers, message ids, a purged head, deleted sequences, several blocks,
    and two consumers: one with acks, pending deliveries and a redelivery, one filtered."""
    js.add_stream(name=name, subjects=[f"{name.lower()}.>"], storage=storage_kind, max_msgs_per_subject=150)
    for i in range(400):
        hdrs = {"Nats-Msg-Id": f"id-{i}", "k": f"v{i}"} if i % 3 == 0 else None
        js.publish(f"{name.lower()}.{i % 4}", b"payload-%04d" % i, headers=hdrs)
    js.purge_stream(name, seq=20)
    for seq in (25, 26, 300):
        js.delete_msg(name, seq)
    js.add_consumer(name, durable_name="ALL", ack_policy="explicit", ack_wait=600.0)
    js.add_consumer(name, durable_name="TWO", filter_subject=f"{name.lower()}.2", ack_policy="all")
    sub = js.pull_subscribe_bind("ALL", name)
    msgs = sub.fetch(30)
    for m in msgs[:20]:
        m.ack()
    msgs[20].nak()
    js.pull_subscribe_bind("TWO", name).fetch(5)[-1].ack_sync()


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(block_writer, "BLOCK_MAX_MSGS", 64)  # many blocks, the first ones purged


@pytest.mark.parametrize("storage_kind", ["file", "memory"])
def test_a_restored_stream_is_the_same_stream(tmp_path, store, small_blocks, storage_kind):
    # One clock for both stores: the two consumers' next deliveries (below) happen at the same
    # time, so their delivered.last_active match too.
    clock = FakeClock()
    with jetspark.connect(store, clock=clock) as js, jetspark.connect(tmp_path / "other", clock=clock) as other:
        try:
            fill(js, storage_kind=storage_kind)
            before, state = view(js, "S"), js.stream_info("S").state
            progress = []
            info = js.backup_stream("S", tmp_path / "bk", progress=lambda done, total: progress.append((done, total)))
            assert (info.stream, info.backend, info.consumers, info.state) == ("S", "engine", 2, state)
            assert info.bytes < 1 << 20  # the tail block is cut where its sequences end, not at its reserved size
            assert progress[-1] == (info.bytes, info.bytes)
            manifest = json.loads((tmp_path / "bk" / "backup.json").read_text())
            assert len(manifest["files"]) == info.files and (tmp_path / "bk" / "data" / "state").is_file()

            restored = other.restore_stream(tmp_path / "bk")
            assert restored.state == state
            assert view(other, "S") == before
            # And it goes on as the original does: the same duplicate, the next sequence,
            # the same next deliveries and redelivery.
            for handle in (js, other):
                dup = handle.publish("s.1", b"again", headers={"Nats-Msg-Id": "id-399"})
                assert (dup.seq, dup.duplicate) == (400, True)
                assert handle.publish("s.1", b"new").seq == 401
            got = [
                [
                    (m.metadata.sequence.stream, m.metadata.num_delivered)
                    for m in h.pull_subscribe_bind("ALL", "S").fetch(5)
                ]
                for h in (js, other)
            ]
            assert got[0] == got[1] and got[0][0][1] == 2  # the nak'd one first, delivered a second time
            assert view(other, "S")["consumers"] == view(js, "S")["consumers"]

            js.delete_stream("S")
            assert js.restore_stream(tmp_path / "bk").state == state  # into the store it came from
            assert view(js, "S") == before
        finally:
            for h in (js, other):
                for n in h.stream_names():
                    h.delete_stream(n)


def test_without_consumers(tmp_path, store):
    with jetspark.connect(store) as js:
        fill(js)
        info = js.backup_stream("S", tmp_path / "bk", consumers=False)
        assert info.consumers == 0 and not any(
            "/cons/" in f["path"] for f in json.loads((tmp_path / "bk" / "backup.json").read_text())["files"]
        )
        js.delete_stream("S")
        assert js.restore_stream(tmp_path / "bk").state.consumer_count == 0
        assert js.consumers_info("S") == [] and js.stream_info("S").state.messages == info.state.messages


def _damage(bk, how: str) -> str:
    """Damage the backup in ``bk``; returns the file named in the error."""
    if how == "flipped byte":
        (part,) = sorted((bk / "data" / "blk").glob("*.dat"))[-1:]
        raw = bytearray(part.read_bytes())
        raw[len(raw) // 2] ^= 0x01
        part.write_bytes(bytes(raw))
    elif how == "truncated":
        part = bk / "data" / "subjects"
        part.write_bytes(part.read_bytes()[:-3])
    elif how == "missing":
        part = bk / "data" / "cons" / "ALL" / "log"
        part.unlink()
    else:  # the manifest itself: one digit of a recorded size
        part = bk / "backup.json"
        doc = json.loads(part.read_text())
        doc["files"][0]["size"] += 1
        part.write_text(json.dumps(doc))
    return str(part)


@pytest.mark.parametrize("how", ["flipped byte", "truncated", "missing", "manifest"])
@pytest.mark.parametrize("storage_kind", ["file", "memory"])
def test_a_damaged_backup_restores_nothing(tmp_path, store, how, storage_kind):
    with jetspark.connect(store) as js:
        fill(js, storage_kind=storage_kind)
        js.backup_stream("S", tmp_path / "bk")
        js.delete_stream("S")
        named = _damage(tmp_path / "bk", how)
        progress = []
        with pytest.raises(CorruptBackupError) as err:
            js.restore_stream(tmp_path / "bk", progress=lambda done, total: progress.append(done))
        assert err.value.path == named and named in str(err.value)
        assert js.stream_names() == []
        assert os.listdir(store / "streams") == []  # no half stream, not even one being built
        shm = shm_dir(store)
        assert shm is None or not shm.exists() or os.listdir(shm) == []
        assert js.add_stream(name="S", subjects=["s.>"]).state.messages == 0  # the name is free


def test_restore_refuses_a_name_in_use_and_overlapping_subjects(tmp_path, store):
    with jetspark.connect(store) as js:
        fill(js)
        js.backup_stream("S", tmp_path / "bk")
        before = view(js, "S")
        with pytest.raises(BadRequestError) as err:
            js.restore_stream(tmp_path / "bk")
        assert (err.value.err_code, err.value.description) == (10130, "stream name already in use, cannot restore")
        assert view(js, "S") == before
        js.delete_stream("S")
        js.add_stream(name="T", subjects=["s.1"])
        with pytest.raises(ServerError) as err:
            js.restore_stream(tmp_path / "bk")
        assert err.value.err_code == 10062 and js.stream_names() == ["T"]


def test_backup_refusals_leave_nothing(tmp_path, store):
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s.>"])
        js.publish("s.a", b"x")
        with pytest.raises(StreamNotFoundError):
            js.backup_stream("NOPE", tmp_path / "new" / "bk")
        assert not (tmp_path / "new").exists()
        (tmp_path / "full").mkdir()
        (tmp_path / "full" / "keep.txt").write_text("mine")
        with pytest.raises(BackupError, match="is not empty") as err:
            js.backup_stream("S", tmp_path / "full")
        assert err.value.path == str(tmp_path / "full") and os.listdir(tmp_path / "full") == ["keep.txt"]
        (tmp_path / "file").write_text("x")
        with pytest.raises(BackupError, match="not a directory"):
            js.backup_stream("S", tmp_path / "file")
        with pytest.raises(TypeError, match="consumers"):
            js.backup_stream("S", tmp_path / "bk", consumers="yes")
        with pytest.raises(TypeError, match="path"):
            js.backup_stream("S", 42)
        with pytest.raises(TypeError, match="progress"):
            js.backup_stream("S", tmp_path / "bk", progress=1)
        (tmp_path / "empty").mkdir()
        assert js.backup_stream("S", tmp_path / "empty").path == str(tmp_path / "empty")  # an empty directory will do
        with pytest.raises(BackupError, match="holds no backup.json"):
            js.restore_stream(tmp_path / "full")
        with pytest.raises(BackupError, match="does not exist"):
            js.restore_stream(tmp_path / "nowhere")
        assert sorted(os.listdir(tmp_path)) == ["empty", "file", "full", "store"]  # no partial backup anywhere


def test_a_damaged_consumer_is_not_backed_up(tmp_path, store):
    with jetspark.connect(store) as js:
        fill(js)
    log = next((store / "streams" / "S" / "data" / "cons").glob("ALL/log"))
    raw = bytearray(log.read_bytes())
    raw[5] ^= 0xFF  # the first record's checksum
    log.write_bytes(bytes(raw))
    with jetspark.connect(store) as js:
        with pytest.raises(BackupError, match="damaged") as err:
            js.backup_stream("S", tmp_path / "bk")
        assert "ALL" in err.value.path and not (tmp_path / "bk").exists()
        assert js.backup_stream("S", tmp_path / "bk", consumers=False).consumers == 0


# ---------------------------------------------------------------- a writer in another process


def _append(store, started, stop, conn):
    try:
        js = jetspark.connect(store)
        sub = js.pull_subscribe_bind("C", "S")
        i = 0
        while not stop.is_set():
            for _ in range(50):
                i += 1
                assert js.publish("s.x", b"%d" % i).seq == i
            for m in sub.fetch(20, timeout=1):
                m.ack()
            if i >= 1000:
                started.set()
        js.close()
        conn.send(("ok", i))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def test_a_backup_taken_while_another_process_appends_is_one_state(tmp_path, store, procs):
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s.>"])
        js.add_consumer("S", durable_name="C", ack_policy="explicit")
        started, stop = SPAWN.Event(), SPAWN.Event()
        parent, child = SPAWN.Pipe()
        p = SPAWN.Process(target=_append, args=(store, started, stop, child))
        procs.append(p)
        p.start()
        try:
            assert started.wait(60), "the writer did not start"
            infos = [js.backup_stream("S", tmp_path / f"bk{i}") for i in range(3)]  # while it appends
        finally:
            stop.set()
        status, result = parent.recv()
        assert status == "ok", result
        p.join()
        for i, info in enumerate(infos):
            with jetspark.connect(tmp_path / f"restored{i}") as other:
                state = other.restore_stream(tmp_path / f"bk{i}").state
                assert state == info.state and state.messages == state.last_seq >= 1000
                assert other.check_stream("S").ok
                assert [m.data for m in other.ordered_consumer("S")] == [
                    b"%d" % q for q in range(1, state.last_seq + 1)
                ]
                floor = other.consumer_info("S", "C").ack_floor.stream_seq
                assert 0 < floor <= state.last_seq
        assert infos[0].state.last_seq <= infos[1].state.last_seq <= infos[2].state.last_seq <= result


def _backup_and_die(store, target) -> None:
    """Back up stream S and kill this process with SIGKILL once the first bytes are copied."""
    import signal

    def die(done, total) -> None:
        if done > 0:
            os.kill(os.getpid(), signal.SIGKILL)

    with jetspark.connect(store) as js:
        js.backup_stream("S", target, progress=die)


def test_a_backup_killed_mid_copy_leaves_nothing_the_next_one_keeps(tmp_path, store, procs):
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s.>"])
        js.publish_batch(
            pa.table({"subject": ["s.x"] * 3000, "data": [os.urandom(1000) for _ in range(3000)]}), stream="S"
        )
        target = tmp_path / "bk"
        p = SPAWN.Process(target=_backup_and_die, args=(store, target))
        procs.append(p)
        p.start()
        p.join(60)
        assert p.exitcode == -9  # killed mid-copy
        left = [n for n in os.listdir(tmp_path) if n.startswith(".bk.partial-")]
        assert len(left) == 1 and not target.exists()  # its work directory, nothing in place
        # A live writer's work directory (this process's, say) is never taken.
        live = tmp_path / f".bk.partial-{socket.gethostname()}-{os.getpid()}-0123456789ab"
        live.mkdir()
        info = js.backup_stream("S", target)
        assert sorted(n for n in os.listdir(tmp_path) if n.startswith(".bk.")) == [live.name]  # the dead one's is gone
        assert info.state.messages == 3000
        with jetspark.connect(tmp_path / "restored") as other:
            assert other.restore_stream(target).state == info.state


# ---------------------------------------------------------------- any stream


ops = st.lists(
    st.one_of(
        st.tuples(st.just("pub"), st.integers(0, 3), st.binary(max_size=20), st.one_of(st.none(), st.integers(0, 5))),
        st.tuples(st.just("del"), st.integers(1, 40)),
        st.tuples(st.just("purge"), st.integers(0, 3)),
    ),
    max_size=40,
)


@settings(max_examples=15, deadline=None)
@given(ops=ops, storage_kind=st.sampled_from(["file", "memory"]))
def test_any_stream_round_trips(tmp_path_factory, ops, storage_kind):
    root = tmp_path_factory.mktemp("rt")
    with jetspark.connect(root / "a") as js, jetspark.connect(root / "b") as other:
        try:
            js.add_stream(name="S", subjects=["s.>"], storage=storage_kind)
            for op in ops:
                if op[0] == "pub":
                    js.publish(f"s.{op[1]}", op[2], headers=None if op[3] is None else {"Nats-Msg-Id": str(op[3])})
                elif op[0] == "del":
                    try:
                        js.delete_msg("S", op[1])
                    except jetspark.JetSparkError:
                        pass
                else:
                    js.purge_stream("S", subject=f"s.{op[1]}")
            before, state = view(js, "S"), js.stream_info("S").state
            js.backup_stream("S", root / "bk")
            assert other.restore_stream(root / "bk").state == state
            assert view(other, "S") == before
        finally:
            for h in (js, other):
                for n in h.stream_names():
                    h.delete_stream(n)
