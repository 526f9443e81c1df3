"""A full disk: a typed error, never a signal; nothing acknowledged lost; batches all-or-nothing;
the store works again once space is freed, without repair by hand.

Each test runs on its own tiny tmpfs (root mounts it; elsewhere the tests skip and say why).  The
writers that fill the disk run in a child process, so a regression that kills the process with
SIGBUS fails the test with the signal's name instead of taking the test run down.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pyarrow as pa
import pytest

import jetspark
from jetspark.errors import BackupError, FetchTimeoutError, StoreFullError
from tests.conftest import FakeClock

pytestmark = pytest.mark.slow


@pytest.fixture
def tiny_disk(tmpfs):
    """An 8 MiB tmpfs (tests/engine/conftest.py)."""
    return tmpfs("8m")


def run_child(code: str, store) -> list[str]:
    """Run ``code`` with ``js`` open on ``store`` in a fresh interpreter; its printed lines."""
    script = "import sys, jetspark, pyarrow as pa\nfrom jetspark.errors import *\n"
    script += f"js = jetspark.connect({str(store)!r})\n" + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    if proc.returncode < 0:
        pytest.fail(f"the writer died of {signal.Signals(-proc.returncode).name}: {proc.stderr[-2000:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()


def payloads(js, stream):
    return [m.data for m in (js.get_msg(stream, q) for q in range(1, js.stream_info(stream).state.last_seq + 1))]


def test_single_publishes_fill_the_disk_with_a_typed_error_and_lose_nothing(tiny_disk):
    store = tiny_disk / "store"
    js = jetspark.connect(store)
    js.add_stream(name="S", subjects=["s.>"])
    js.close()
    tiny_disk.fill(keep=300 << 10)
    out = run_child(
        """
        n = 0
        try:
            while True:
                ack = js.publish("s.x", b"%08d" % n + b"p" * 1000)
                assert ack.seq == n + 1
                n += 1
        except StoreFullError as exc:
            assert exc.errno == 28 and exc.filename, exc
            print(n, type(exc).__name__)
        """,
        store,
    )
    acked = int(out[0])
    assert acked > 0 and out[1] == "StoreFullError"
    tiny_disk.free()
    js = jetspark.connect(store)
    info = js.stream_info("S")
    assert (info.state.first_seq, info.state.last_seq, info.state.messages) == (1, acked, acked)
    assert payloads(js, "S") == [b"%08d" % n + b"p" * 1000 for n in range(acked)]
    # Space is back: the same handle publishes again, gaplessly, and a fresh process agrees.
    assert js.publish("s.x", b"after").seq == acked + 1
    js.close()
    js = jetspark.connect(store)
    assert js.get_msg("S", acked + 1).data == b"after"
    assert js.stream_info("S").state.lost is None


def test_full_disk_error_comes_back_on_every_try_and_the_handle_keeps_working(tiny_disk):
    store = tiny_disk / "store"
    js = jetspark.connect(store)
    js.add_stream(name="S", subjects=["s.>"])
    js.publish("s.a", b"first")
    tiny_disk.fill()
    for _ in range(3):  # the same handle, the same clear error, nothing half-stored
        with pytest.raises(StoreFullError) as err:
            js.publish("s.b", b"x" * (2 << 20))
        assert "No space left" in str(err.value) and str(tiny_disk) in str(err.value)
        assert js.stream_info("S").state.messages == 1
    tiny_disk.free()
    assert js.publish("s.b", b"y" * (2 << 20)).seq == 2
    assert js.get_msg("S", 2).data == b"y" * (2 << 20)


@pytest.mark.parametrize("kind", ["plain", "headers", "msg_ids", "interest"])
def test_a_batch_is_all_or_nothing_when_the_disk_fills_mid_batch(tiny_disk, kind):
    store = tiny_disk / "store"
    js = jetspark.connect(store)
    retention = "interest" if kind == "interest" else "limits"
    js.add_stream(name="S", subjects=["s.>"], retention=retention)
    if kind == "interest":
        js.add_consumer("S", durable_name="C", ack_policy="explicit")
    js.close()
    tiny_disk.fill(keep=1 << 20)
    out = run_child(
        f"""
        kind = {kind!r}
        rows, acked, b = 2000, 0, 0
        try:
            while True:
                cols = {{
                    "subject": ["s.x"] * rows,
                    "data": [b"%06d-" % (b * rows + i) + b"d" * 200 for i in range(rows)],
                }}
                if kind == "headers":
                    cols["headers"] = pa.array(
                        [[("k", ["v%d" % i])] for i in range(rows)], type=pa.map_(pa.string(), pa.list_(pa.string()))
                    )
                table = pa.table(cols)
                if kind == "msg_ids":
                    ack = js.publish_batch(table, stream="S", msg_id_prefix="batch-", msg_id_start=b * rows)
                else:
                    ack = js.publish_batch(table, stream="S")
                assert ack.count == rows, ack
                acked += rows
                b += 1
        except StoreFullError:
            print(acked)
        """,
        store,
    )
    acked = int(out[0])
    assert acked > 0
    tiny_disk.free()
    js = jetspark.connect(store)
    st = js.stream_info("S").state
    assert (st.messages, st.last_seq) == (acked, acked), "a batch was stored in part"
    table = pa.Table.from_batches(list(js.read_batches("S", 1)))
    assert table.column("data").to_pylist() == [b"%06d-" % i + b"d" * 200 for i in range(acked)]
    # Works again: the batch that failed can be sent again in full.
    table = pa.table({"subject": ["s.x"] * 10, "data": [b"again"] * 10})
    assert js.publish_batch(table, stream="S").count == 10
    assert js.stream_info("S").state.last_seq == acked + 10


def test_publish_with_headers_and_msg_ids_fills_the_disk_cleanly(tiny_disk):
    store = tiny_disk / "store"
    js = jetspark.connect(store)
    js.add_stream(name="S", subjects=["s.>"], duplicate_window=60)
    js.close()
    tiny_disk.fill(keep=400 << 10)
    out = run_child(
        """
        n = 0
        try:
            while True:
                js.publish("s.%d" % (n % 50), b"v" * 500, headers={"Nats-Msg-Id": "id-%d" % n, "k": "v"})
                n += 1
        except StoreFullError:
            print(n)
        """,
        store,
    )
    acked = int(out[0])
    tiny_disk.free()
    js = jetspark.connect(store)
    assert js.stream_info("S").state.messages == acked
    # Dedup saw every acknowledged id, and none that was refused.
    assert js.publish("s.0", b"dup", headers={"Nats-Msg-Id": f"id-{acked - 1}"}).duplicate
    ack = js.publish("s.0", b"new", headers={"Nats-Msg-Id": f"id-{acked}"})
    assert not ack.duplicate and ack.seq == acked + 1


def test_consumer_acks_on_a_full_disk_fail_loudly_and_recover(tiny_disk):
    clock = FakeClock()
    store = tiny_disk / "store"
    js = jetspark.connect(store, clock=clock)
    js.add_stream(name="S", subjects=["s.>"], retention="workqueue")
    js.publish_batch(pa.table({"subject": ["s.x"] * 200, "data": [b"m%d" % i for i in range(200)]}), stream="S")
    sub = js.pull_subscribe("s.>", durable="W", stream="S")
    tiny_disk.fill()
    with pytest.raises(StoreFullError):
        for _ in range(200):  # deliveries and acks append to the consumer's log until the disk refuses
            for m in sub.fetch(10, timeout=1):
                m.ack_sync()
    tiny_disk.free()
    left = js.stream_info("S").state.messages
    assert left > 0
    # What was delivered but whose ack the disk refused is redelivered after ack_wait, as
    # on a server: nothing lost, nothing removed without its ack.
    clock.advance(31)
    seen = set()
    for _ in range(50):
        try:
            msgs = sub.fetch(50, timeout=0.2)
        except jetspark.FetchTimeoutError:
            break
        for m in msgs:
            seen.add(m.data)
            m.ack_sync()
    assert len(seen) == left and js.stream_info("S").state.messages == 0
    js.close()


def test_a_new_stream_on_a_full_disk_is_refused_and_leaves_the_store_usable(tiny_disk):
    store = tiny_disk / "store"
    js = jetspark.connect(store)
    js.add_stream(name="OLD", subjects=["old.>"])
    js.publish("old.a", b"kept")
    tiny_disk.fill()
    with pytest.raises(StoreFullError):
        for i in range(100):  # the first few may still fit in the filesystem's slack
            js.add_stream(name=f"N{i}", subjects=[f"n{i}.>"])
            js.publish(f"n{i}.x", b"x" * 4096)
    tiny_disk.free()
    assert js.get_msg("OLD", 1).data == b"kept"
    name = f"AFTER{uuid.uuid4().hex[:6]}"
    js.add_stream(name=name, subjects=["after.>"])
    assert js.publish("after.x", b"ok").seq == 1


def test_a_backup_onto_a_full_disk_fails_whole_and_leaves_nothing(tiny_disk, tmp_path):
    """A backup whose target disk fills: a typed error, no directory at the target and no
    hidden leftover beside it; the same backup then succeeds once there is room."""
    js = jetspark.connect(tmp_path / "store")
    js.add_stream(name="S", subjects=["s.>"])
    js.publish_batch(pa.table({"subject": ["s.x"] * 4000, "data": [b"p" * 1000] * 4000}), stream="S")
    tiny_disk.fill(keep=1 << 20)  # room for a quarter of the stream's 4 MB
    with pytest.raises((BackupError, StoreFullError)) as err:
        js.backup_stream("S", tiny_disk / "bk")
    assert "bk" in str(err.value) and "space" in str(err.value).lower(), str(err.value)  # names the target, says why
    assert [n for n in os.listdir(str(tiny_disk)) if n != "filler"] == []
    tiny_disk.free()
    assert js.backup_stream("S", tiny_disk / "bk").state.messages == 4000
    js.close()


def test_a_restore_into_a_full_store_leaves_no_stream(tiny_disk, tmp_path):
    """A restore whose store disk fills: a typed error, no stream (nor a half one in the
    store's directory), and the store goes on working; with room, the restore succeeds."""
    with jetspark.connect(tmp_path / "src") as src:
        src.add_stream(name="S", subjects=["s.>"])
        src.publish_batch(pa.table({"subject": ["s.x"] * 4000, "data": [b"p" * 1000] * 4000}), stream="S")
        src.backup_stream("S", tmp_path / "bk")
    js = jetspark.connect(tiny_disk / "store")
    js.add_stream(name="OTHER", subjects=["o.>"])
    before = sorted(os.listdir(tiny_disk / "store"))
    tiny_disk.fill(keep=1 << 20)
    with pytest.raises((BackupError, StoreFullError)):
        js.restore_stream(tmp_path / "bk")
    assert js.stream_names() == ["OTHER"]
    assert sorted(os.listdir(tiny_disk / "store")) == before
    tiny_disk.free()
    assert js.restore_stream(tmp_path / "bk").state.messages == 4000
    assert js.publish("o.x", b"still here").seq == 1
    js.close()


def test_a_stream_opens_and_waits_when_its_notify_file_cannot_be_made(tiny_disk):
    """The wake-up file (jetspark/engine/wakeup.py) of a store made before it existed, on a
    full disk: the stream still opens and serves, and a waiting fetch polls instead."""
    store = tiny_disk / "store"
    with jetspark.connect(store) as js:
        js.add_stream(name="S", subjects=["s.>"])
        js.publish("s.x", b"one")
        js.add_consumer("S", durable_name="C")
    for notify in store.rglob("notify"):
        notify.unlink()
    tiny_disk.fill(keep=0)
    js = jetspark.connect(store)
    sub = js.pull_subscribe_bind("C", stream="S")
    assert [m.data for m in sub.fetch(1, timeout=5)] == [b"one"]
    # The disk refused its page: at most an empty file, which nobody maps (a later open
    # with room makes it whole).
    assert all(p.stat().st_size == 0 for p in store.rglob("notify"))
    with pytest.raises(FetchTimeoutError):
        sub.fetch(1, timeout=0.2)  # waits (polling), then the usual timeout
    js.close()
    tiny_disk.free()
    with jetspark.connect(store) as js:
        js.publish("s.x", b"two")
        assert [m.data for m in js.pull_subscribe_bind("C", stream="S").fetch(1, timeout=5)] == [b"two"]
    assert all(p.stat().st_size == 16 for p in store.rglob("notify"))
