"""Durability: what a returned publish promises survives SIGKILL and reopening.

storage.py's argument is durability by ordering: record bytes first, then a
header slot flip, under the stream's flock.  These tests kill real processes
(``SIGKILL``, no cleanup of any kind) at arbitrary points of a publish loop
and check from a fresh handle that every acknowledged sequence is there with
its payload, that nothing is torn or missing, and that the next publish
continues the sequence.  They also reopen stores whose every piece of state
was set up by another process, and run the same crash in ``sync="fsync"``.

Children are ``sys.executable -c ...`` processes importing this module, so
they share the payload/subject/header functions with the checks.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import jetspark
from jetspark.errors import MsgNotFoundError
from jetspark.protocol import headers as H

ROOT = Path(__file__).resolve().parents[2]
STREAM = "D"

# A hang guard only (a child that never writes would otherwise block until the global timeout).
pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------------------------- the message at each sequence


def payload(seq: int) -> bytes:
    """Encodes its sequence; length varies 0..52 bytes past the prefix."""
    return b"%d|" % seq + bytes((seq * 31 + k) % 256 for k in range(seq % 53))


def subject(seq: int) -> str:
    # Every 500th message brings a new subject: subject-dictionary appends happen mid-loop too.
    return f"d.new.{seq}" if seq % 500 == 0 else f"d.{seq % 13}"


def headers(seq: int):
    # Every 7th message has a header block and a Nats-Msg-Id (header and dedup files grow too).
    return {"Nats-Msg-Id": f"id-{seq}", "X-Seq": str(seq)} if seq % 7 == 0 else None


def msg_bytes(storage: str, seq: int) -> int:
    """The server's per-message accounting (docs/semantics.md §3.1, as tests/conftest.py)."""
    subj, data, hdr = subject(seq).encode(), payload(seq), H.encode(headers(seq))
    if storage == "memory":
        return len(subj) + len(hdr) + len(data) + 16
    return 30 + len(subj) + len(data) + (len(hdr) + 4 if hdr else 0)


def _publish_forever(store: str, sync: str, block_msgs: str) -> None:
    """Child: publish seq after seq, writing each acknowledged seq to stdout as soon as it returns."""
    if int(block_msgs):
        from jetspark.engine import block_writer

        block_writer.BLOCK_MAX_MSGS = int(block_msgs)  # many small blocks: block creation happens mid-loop
    js = jetspark.connect(store, sync=sync)
    seq = js.stream_info(STREAM).state.last_seq + 1
    while True:
        ack = js.publish(subject(seq), payload(seq), headers=headers(seq))
        if ack.seq != seq or ack.duplicate:
            os.write(1, b"BAD expected %d got %r\n" % (seq, ack))
            os._exit(3)
        os.write(1, b"%d\n" % seq)  # one write < PIPE_BUF: whole or not at all
        seq += 1


# ---------------------------------------------------------------- fixtures and helpers


def _start_publisher(children, store: Path, sync: str = "os", block_msgs: int = 0) -> subprocess.Popen:
    code = "import sys; from tests.engine.test_durability import _publish_forever; _publish_forever(*sys.argv[1:])"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen(
        [sys.executable, "-c", code, str(store), sync, str(block_msgs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    children.append(p)
    return p


def _kill_after(p: subprocess.Popen, n: int) -> list[int]:
    """Read acknowledged seqs until n arrived, SIGKILL the child, and return every ack it wrote."""
    acked, line = [], b""
    for line in p.stdout:
        if not line.strip().isdigit():
            break
        acked.append(int(line))
        if len(acked) >= n:
            os.kill(p.pid, signal.SIGKILL)
            break
    rc = p.wait()
    rest = p.stdout.read().split()  # what it wrote before dying is still in the pipe
    stderr = p.stderr.read().decode(errors="replace")
    assert rc == -signal.SIGKILL, f"publisher exited by itself (rc={rc}) after {len(acked)} acks: {line!r}\n{stderr}"
    assert all(x.isdigit() for x in rest), rest[-3:]
    return acked + [int(x) for x in rest]


def _create(store: Path, storage: str, sync: str = "os") -> None:
    with jetspark.connect(store, sync=sync) as js:
        js.add_stream(name=STREAM, subjects=["d.>"], storage=storage)


def _verify_store(store: Path, storage: str, acked_runs: list[list[int]], sync: str = "os") -> int:
    """Everything acknowledged is there and right, the stream is gapless, and publishing continues."""
    with jetspark.connect(store, sync=sync) as js:
        st = js.stream_info(STREAM, deleted_details=True).state
        last = st.last_seq
        expect_first = 1
        for acked in acked_runs:
            # Each child acknowledged a contiguous run starting right after what was stored before it.
            assert acked, "a child was killed before acknowledging anything"
            assert acked == list(range(acked[0], acked[0] + len(acked)))
            assert acked[0] in (expect_first, expect_first + 1)  # +1: the one in flight when the previous child died
            expect_first = acked[-1] + 1
        top = acked_runs[-1][-1]
        # The publish in flight at the kill may have committed without its ack reaching us: at most one.
        assert last in (top, top + 1)
        assert (st.first_seq, st.messages, st.num_deleted, st.deleted, st.lost) == (1, last, 0, None, None)
        assert st.bytes == sum(msg_bytes(storage, s) for s in range(1, last + 1))
        assert st.num_subjects == len({subject(s) for s in range(1, last + 1)})
        for s in range(1, last + 1):
            m = js.get_msg(STREAM, seq=s)
            assert (m.seq, m.subject, m.data, m.headers) == (s, subject(s), payload(s), headers(s)), s
        # The dedup window survived the kill too.
        with_id = max(s for s in range(1, top + 1) if headers(s))
        dup = js.publish(subject(with_id), b"again", headers=headers(with_id))
        assert (dup.seq, dup.duplicate) == (with_id, True)
        # A new publish continues the sequence.
        ack = js.publish("d.after", payload(last + 1))
        assert (ack.seq, ack.duplicate) == (last + 1, None)
        assert js.get_msg(STREAM, seq=last + 1).data == payload(last + 1)
        st = js.stream_info(STREAM).state
        assert (st.messages, st.last_seq, st.num_deleted) == (last + 1, last + 1, 0)
    return last


# ---------------------------------------------------------------- 1. SIGKILL in the middle of a publish loop


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["file", "memory"])
@pytest.mark.parametrize("kill_after", [2000, 5000, 9000])
def test_sigkill_mid_publish_loses_nothing_acknowledged(store, children, storage, kill_after):
    """Two children in turn are killed mid-loop; the second resumes where the store says the first stopped."""
    _create(store, storage)
    runs = []
    for n in (kill_after, kill_after // 2 + 777):
        runs.append(_kill_after(_start_publisher(children, store), n))
        assert len(runs[-1]) >= n
    last = _verify_store(store, storage, runs)
    with jetspark.connect(store) as js:
        # And it still holds after a second reopen (the verification's publish included).
        assert js.stream_info(STREAM).state.last_seq == last + 1
        js.delete_stream(STREAM)


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["file", "memory"])
def test_sigkill_with_many_blocks(store, children, storage):
    """Blocks of 256 messages: kills land around block creation; the reader needs no special knowledge."""
    _create(store, storage)
    runs = [_kill_after(_start_publisher(children, store, block_msgs=256), n) for n in (3000, 1500)]
    _verify_store(store, storage, runs)
    assert storage == "memory" or len(list((store / "streams" / STREAM / "data" / "blk").glob("*.idx"))) >= 10
    with jetspark.connect(store) as js:
        js.delete_stream(STREAM)


# ---------------------------------------------------------------- 6. sync="fsync"


@pytest.mark.slow
def test_sigkill_in_fsync_mode(store, children):
    _create(store, "file", sync="fsync")
    runs = [_kill_after(_start_publisher(children, store, sync="fsync"), 300)]
    _verify_store(store, "file", runs, sync="fsync")


# ---------------------------------------------------------------- 4. reopening restores everything

NS = 1_000_000_000


def _build_state(store: str, conn) -> None:
    """Child (spawn): set up streams whose every piece of state is non-trivial, report it, then exit or wait."""
    js = jetspark.connect(store)
    # F: limits that remove from the middle (per subject) and from the head (max_msgs), rollups, deletes.
    js.add_stream(
        name="F",
        subjects=["f.>"],
        storage="file",
        description="file stream",
        metadata={"team": "a"},
        max_msgs=300,
        max_bytes=1 << 20,
        max_msgs_per_subject=40,
        max_age=3600.0,
        max_msg_size=4096,
        duplicate_window=600.0,
        allow_rollup_hdrs=True,
    )
    # M: memory, discard new.
    js.add_stream(name="M", subjects=["m.*"], storage="memory", max_msgs=150, discard="new", duplicate_window=300.0)
    # Z: never written, with a first sequence; P: purged up to a floor past its end.
    js.add_stream(name="Z", subjects=["z"], storage="file", first_seq=100)
    js.add_stream(name="P", subjects=["p.>"], storage="memory")
    for i in range(1, 500):
        js.publish(f"f.s{i % 9}", b"f%d" % i, headers={"Nats-Msg-Id": f"f-{i}"} if i % 3 == 0 else {"K": str(i)})
    js.publish("f.roll", b"r1")
    js.publish("f.roll", b"r2", headers={"Nats-Rollup": "sub"})
    for seq in (260, 261, 300, 333):
        js.delete_msg("F", seq)
    js.purge_stream("F", subject="f.s4")
    for i in range(1, 200):
        try:
            js.publish(f"m.{i % 5}", b"m%d" % i, headers={"Nats-Msg-Id": f"m-{i}"})
        except jetspark.APIError:
            pass  # discard new: the stream is full
    js.delete_msg("M", 7)
    js.purge_stream("M", subject="m.3", keep=4)
    for _ in range(5):
        js.publish("p.x", b"p")
    js.purge_stream("P", seq=50)
    infos, msgs = _snapshot(js)
    conn.send((infos, msgs))
    if conn.recv() == "close":
        js.close()
        conn.send("closed")
    else:
        conn.recv()  # until killed


def _snapshot(js):
    infos = {n: js.stream_info(n, subjects_filter=">", deleted_details=True) for n in js.stream_names()}
    msgs = {}
    for n, info in infos.items():
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                m = js.get_msg(n, seq=seq)
                msgs[n, seq] = (m.subject, m.data, m.headers, m.time)
            except MsgNotFoundError:
                pass
    return infos, msgs


@pytest.mark.slow
@pytest.mark.parametrize("end", ["close", "sigkill"])
def test_reopen_restores_streams_configs_state_and_dedup(store, end):
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_build_state, args=(str(store), child))
    p.start()
    try:
        infos, msgs = parent.recv()
        if end == "close":
            parent.send("close")
            assert parent.recv() == "closed"
            p.join()
            assert p.exitcode == 0
        else:
            parent.send("wait")
            os.kill(p.pid, signal.SIGKILL)
            p.join()
            assert p.exitcode == -signal.SIGKILL
    finally:
        if p.is_alive():
            p.kill()
            p.join()

    # The state is as non-trivial as intended.
    f, m, z, pp = (infos[n].state for n in "FMZP")
    assert f.num_deleted > 0 and f.first_seq > 1 and f.deleted and len(f.subjects) == 9
    assert m.messages == 150 - 1 - 26 and m.deleted and m.num_deleted > 0
    assert (z.first_seq, z.last_seq, z.messages) == (100, 99, 0)
    assert (pp.first_seq, pp.last_seq, pp.messages) == (50, 49, 0)

    with jetspark.connect(store) as js:
        assert js.stream_names() == ["F", "M", "P", "Z"]
        assert _snapshot(js) == (infos, msgs)  # configs incl. limits, created, state, deleted details, subjects
        # Limits still apply: discard new on the memory stream once it is full again ...
        for i in range(150 - m.messages):
            assert js.publish("m.1", b"fill").seq == m.last_seq + 1 + i
        with pytest.raises(jetspark.APIError) as exc:
            js.publish("m.1", b"over")
        assert exc.value.err_code == 10077 and js.stream_info("M").state.messages == 150
        # ... and the dedup window: ids published before the reopen are duplicates, with their seqs.
        for n, subj, msg_id in (("F", "f.s1", "f-498"), ("M", "m.0", "m-10")):
            seq = next(s for (sn, s), v in msgs.items() if sn == n and v[2] and v[2].get("Nats-Msg-Id") == msg_id)
            ack = js.publish(subj, b"again", headers={"Nats-Msg-Id": msg_id})
            assert (ack.seq, ack.duplicate) == (seq, True)
        # Publishing continues the sequence and the per-subject limit still holds.
        ack = js.publish("f.s1", b"new", headers={"Nats-Msg-Id": "f-new"})
        assert ack.seq == f.last_seq + 1
        assert js.stream_info("F", subjects_filter="f.s1").state.subjects == {"f.s1": min(f.subjects["f.s1"] + 1, 40)}
        assert js.publish("z", b"first").seq == 100
        assert js.publish("p.y", b"first").seq == 50
        js.purge_stream("F")
        js.purge_stream("M")
        after_purge = {n: js.stream_info(n, subjects_filter=">", deleted_details=True) for n in ("F", "M")}

    # The dedup window survives a purge followed by a reopen.
    with jetspark.connect(store) as js:
        assert {n: js.stream_info(n, subjects_filter=">", deleted_details=True) for n in ("F", "M")} == after_purge
        for n, subj, msg_id, seq in (
            ("F", "f.s1", "f-new", f.last_seq + 1),
            ("F", "f.s2", "f-498", None),
            ("M", "m.2", "m-12", None),
        ):
            if seq is None:
                seq = next(s for (sn, s), v in msgs.items() if sn == n and v[2] and v[2].get("Nats-Msg-Id") == msg_id)
            ack = js.publish(subj, b"again", headers={"Nats-Msg-Id": msg_id})
            assert (ack.seq, ack.duplicate) == (seq, True), msg_id
        assert js.stream_info("F").state.messages == 0
        ack = js.publish("f.s1", b"fresh", headers={"Nats-Msg-Id": "f-fresh"})
        assert (ack.seq, ack.duplicate) == (f.last_seq + 2, None)
        for n in ("F", "M", "P", "Z"):
            js.delete_stream(n)
