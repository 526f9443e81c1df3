"""Per-message TTLs and delete markers on the embedded store: crashes, other processes, damage.

A message's TTL lives in its own header and its time in its index entry, so the TTL index is
read back from the stream (jetspark/engine/ttl_index.py): these tests kill a publishing
process (SIGKILL), reopen, and check that the deadline still holds; that another process's
handle (its own caches) expires what this one stored, and the other way round; that a
damaged record is never scheduled nor served; and that a refused batch leaves no deadline
behind for the sequences it did not keep.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import jetspark
from jetspark.errors import BadRequestError, CorruptStoreError, MsgNotFoundError
from tests.conftest import FakeClock

ROOT = Path(__file__).resolve().parents[2]
S = "T"
MARKER = {"Nats-Marker-Reason": "MaxAge", "Nats-TTL": "1m0s", "Nats-Rollup": "sub"}

pytestmark = pytest.mark.timeout(120)


def run_and_kill(store: Path, body: str) -> None:
    """Run ``body`` in a child with ``js`` open on ``store`` (its path in ``store`` there) and
    SIGKILL it once ``body`` returned."""
    code = (
        textwrap.dedent(
            f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        import jetspark
        store = {str(store)!r}
        js = jetspark.connect(store)
        """
        )
        + textwrap.dedent(body)
        + "\nos.write(1, b'done\\n')\nos.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert proc.stdout == b"done\n", proc.stderr.decode()
    assert proc.returncode == -9


def subjects_of(js, stream: str = S) -> list[tuple[int, str]]:
    st = js.stream_info(stream).state
    out = []
    for q in range(st.first_seq, st.last_seq + 1):
        try:
            out.append((q, js.get_msg(stream, q).subject))
        except MsgNotFoundError:
            pass
    return out


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_an_acknowledged_ttl_survives_a_kill_and_expires_after_reopening(tmp_path, storage):
    store = tmp_path / "store"
    with jetspark.connect(store) as js:
        js.add_stream(name=S, subjects=["t.>"], allow_msg_ttl=True, storage=storage)
    run_and_kill(
        store,
        """
        js.publish("t.a", b"1", headers={"Nats-TTL": "5s"})
        js.publish("t.b", b"2", headers={"Nats-TTL": "never"})
        js.publish("t.c", b"3")
        js.publish("t.d", b"4", headers={"Nats-TTL": "1h"})
        """,
    )
    clock = FakeClock()  # now: the child's messages are younger than their TTLs
    with jetspark.connect(store, clock=clock) as js:
        assert subjects_of(js) == [(1, "t.a"), (2, "t.b"), (3, "t.c"), (4, "t.d")]
        clock.advance(6)
        assert subjects_of(js) == [(2, "t.b"), (3, "t.c"), (4, "t.d")]
        clock.advance(3600)
        assert subjects_of(js) == [(2, "t.b"), (3, "t.c")]


def test_a_marker_written_before_a_kill_is_there_and_expires_after_reopening(tmp_path):
    store = tmp_path / "store"
    with jetspark.connect(store) as js:
        js.add_stream(name=S, subjects=["t.>"], subject_delete_marker_ttl=60)
    # The child stores a message whose deadline passed long ago (its clock an hour back):
    # its next operation stores the marker, then it dies.
    run_and_kill(
        store,
        """
        import time
        old = jetspark.connect(store, clock=lambda: time.time_ns() - 3600 * 10**9)
        old.publish("t.a", b"1", headers={"Nats-TTL": "60"})
        old.close()
        js.stream_info("T")
        """,
    )
    clock = FakeClock()
    with jetspark.connect(store, clock=clock) as js:
        # The marker is at the expiry's time (an hour ago), so its own minute is long over too.
        assert subjects_of(js) == []
        st = js.stream_info(S).state
        assert (st.messages, st.first_seq, st.last_seq) == (0, 3, 2)


def test_another_process_expires_what_this_one_stored(tmp_path):
    clock = FakeClock()
    with jetspark.connect(tmp_path / "store", clock=clock) as a, jetspark.connect(tmp_path / "store", clock=clock) as b:
        a.add_stream(name=S, subjects=["t.>"], subject_delete_marker_ttl=60)
        a.publish("t.a", b"1", headers={"Nats-TTL": "60"})
        assert subjects_of(b) == [(1, "t.a")]  # b's TTL index is built here, from the stream
        a.publish("t.b", b"2", headers={"Nats-TTL": "120"})  # b reads this one's header back
        clock.advance(61)
        got = b.get_msg(S, 3)  # b stores the marker of t.a
        assert (got.subject, got.headers) == ("t.a", MARKER)
        assert subjects_of(a) == [(2, "t.b"), (3, "t.a")]
        clock.advance(60)  # t.b (at 120 s) and the marker (at 61 + 60 s) come due: a handles them
        assert [(q, s, a.get_msg(S, q).headers) for q, s in subjects_of(a)] == [(4, "t.b", MARKER)]
        clock.advance(60)
        assert subjects_of(b) == []


def test_a_damaged_ttl_message_is_never_scheduled_nor_served(tmp_path, caplog):
    store = tmp_path / "store"
    clock = FakeClock()
    with jetspark.connect(store, clock=clock) as js:
        js.add_stream(name=S, subjects=["t.>"], allow_msg_ttl=True)
        for i in range(3):
            js.publish(f"t.{i}", b"x", headers={"Nats-TTL": "5s"})
    (hdr,) = (store / "streams" / S / "data" / "blk").glob("*.hdr")
    raw = hdr.read_bytes()
    block = b"NATS/1.0\r\nNats-TTL: 5s\r\n\r\n"
    assert raw == block * 3
    with open(hdr, "r+b") as f:  # the second message's TTL: "5s" -> "9s"
        f.seek(len(block) + len(b"NATS/1.0\r\nNats-TTL: "))
        f.write(b"9")
    with caplog.at_level(logging.WARNING, logger="jetspark"), jetspark.connect(store, clock=clock) as js:
        clock.advance(6)
        st = js.stream_info(S, deleted_details=True).state
        # The intact ones expired; the damaged one is neither removed on the strength of a
        # header that fails its checksum nor served.
        assert (st.messages, st.first_seq, st.last_seq, st.deleted) == (1, 2, 3, [3])
        with pytest.raises(CorruptStoreError, match="fails its checksum"):
            js.get_msg(S, 2)
        assert "damaged records are not read for their TTL" in caplog.text
        report = js.check_stream(S, repair=True)
        assert (report.ok, report.lost) == (True, (2,))
        assert js.stream_info(S).state.messages == 0


def test_a_refused_batch_leaves_no_deadline_for_the_sequences_it_did_not_keep(tmp_path):
    clock = FakeClock()
    with jetspark.connect(tmp_path / "store", clock=clock) as js:
        js.add_stream(name=S, subjects=["t.>"], allow_msg_ttl=True)
        js.stream_info(S)  # the TTL index exists before the batch
        table = pa.table(
            {
                "subject": ["t.a", "t.b"],
                "data": [b"1", b"2"],
                "headers": pa.array([[("Nats-TTL", "1s")], [("Nats-Incr", "1")]], pa.map_(pa.string(), pa.string())),
            }
        )
        with pytest.raises(BadRequestError):
            js.publish_batch(table, stream=S)
        # Sequence 1 now holds a message without a TTL: the refused row's deadline is gone with it.
        assert js.publish("t.c", b"3").seq == 1
        clock.advance(2)
        assert subjects_of(js) == [(1, "t.c")]


def test_the_ttl_index_follows_what_the_stream_holds_not_its_history(tmp_path):
    # max_msgs removes messages long before their TTL: their entries go with them.
    with jetspark.connect(tmp_path / "store") as js:
        js.add_stream(name=S, subjects=["t.>"], allow_msg_ttl=True, max_msgs=100)
        for i in range(6000):
            js.publish("t.a", b"x", headers={"Nats-TTL": "1h" if i % 2 else "never"})
        index = js._store.stream(S).storage.ttl_index
        assert len(index.heap) + len(index.never) <= 2 * 1024
        assert js.stream_info(S).state.messages == 100


def test_a_waiting_pull_wakes_for_the_marker_an_expiry_stores(tmp_path):
    # Nothing else touches the stream: the waiting fetch itself wakes at the TTL's deadline,
    # as a server's pull gets the marker its timer stores (a real clock: the wait is real).
    with jetspark.connect(tmp_path / "store") as js:
        js.add_stream(name=S, subjects=["t.>"], subject_delete_marker_ttl=1)
        js.add_consumer(S, durable_name="C", ack_policy="explicit")
        sub = js.pull_subscribe_bind(durable="C", stream=S)
        js.publish("t.a", b"1", headers={"Nats-TTL": "1s"})
        assert [m.subject for m in sub.fetch(1, timeout=5)] == ["t.a"]
        (marker,) = sub.fetch(1, timeout=10)  # due in about a second
        assert (marker.subject, marker.headers["Nats-Marker-Reason"], marker.metadata.sequence.stream) == (
            "t.a",
            "MaxAge",
            2,
        )


@pytest.mark.slow
def test_a_marker_a_full_disk_refuses_is_a_typed_error_and_the_expiry_is_tried_again(tmpfs):
    # The expiry of a subject's last message must store its marker: on a full disk the
    # operation that applies it fails with StoreFullError, nothing of it is kept (the
    # message stays, no marker), and once space is back the next operation stores it.
    disk = tmpfs("8m")
    store = disk / "store"
    with jetspark.connect(store) as js:
        js.add_stream(name=S, subjects=["t.>"], subject_delete_marker_ttl=60)
    disk.fill(keep=300 << 10)
    # A child (a write on a full tmpfs must fail typed, never with SIGBUS): a handle whose
    # clock is 90 s back stores t.a (its deadline 30 s ago) and fills the disk with t.b, for
    # which t.a is not due yet; then a handle on the real clock meets the expiry, twice.
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        import jetspark
        from jetspark.errors import StoreFullError
        old = jetspark.connect({str(store)!r}, clock=lambda: time.time_ns() - 90 * 10**9)
        old.publish("t.a", b"1", headers={{"Nats-TTL": "60"}})
        for size in (1000, 0):
            try:
                while True:
                    old.publish("t.b", b"x" * size)
            except StoreFullError:
                pass
        print(old.stream_info("T").state.last_seq)
        old.close()
        js = jetspark.connect({str(store)!r})
        for _ in range(2):
            try:
                js.stream_info("T")
            except StoreFullError as exc:
                print(type(exc).__name__, exc.errno)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last, *errors = proc.stdout.split()
    assert errors == ["StoreFullError", "28"] * 2
    disk.free()
    with jetspark.connect(store) as js:
        st = js.stream_info(S).state
        assert (st.first_seq, st.last_seq, st.messages) == (2, int(last) + 1, int(last))
        got = js.get_msg(S, int(last) + 1)
        assert (got.subject, got.headers) == ("t.a", MARKER)


def test_a_damaged_message_max_age_expires_goes_without_a_marker_and_the_rest_expire(tmp_path, caplog):
    # Whether a damaged message was a marker cannot be told: max_age removes it as it would
    # without markers (no marker in its place), and the intact ones still get theirs.
    store = tmp_path / "store"
    clock = FakeClock()
    with jetspark.connect(store, clock=clock) as js:
        js.add_stream(name=S, subjects=["t.>"], subject_delete_marker_ttl=60, max_age=10)
        js.publish("t.a", b"AAAA")
        js.publish("t.b", b"BBBB")
    (dat,) = (store / "streams" / S / "data" / "blk").glob("*.dat")
    with open(dat, "r+b") as f:  # t.a's payload fails its checksum
        f.write(b"X")
    with caplog.at_level(logging.WARNING, logger="jetspark"), jetspark.connect(store, clock=clock) as js:
        with pytest.raises(CorruptStoreError):
            js.get_msg(S, 1)
        clock.advance(11)
        assert [(q, s, js.get_msg(S, q).headers) for q, s in subjects_of(js)] == [(3, "t.b", MARKER)]
        assert "message 1 expired damaged, removed without a marker" in caplog.text
        st = js.stream_info(S).state
        assert (st.messages, st.first_seq, st.last_seq) == (1, 3, 3)
