"""The engine's publish_async writer (jetspark/engine/async_writer.py) off the happy path:
a resolved future is stored even when the process is killed right after, another process
publishing to the same stream meanwhile loses nothing, and a full disk fails whole groups
(nothing stored of them) with the typed error, and nothing acknowledged is lost.

The publishing processes are children (a fresh interpreter), so a kill -9 or a signal
takes the child, not the test run.
"""

from __future__ import annotations

import multiprocessing
import signal
import subprocess
import sys
import textwrap

import pytest

import jetspark

pytestmark = pytest.mark.slow


def child(code: str, store) -> subprocess.Popen:
    script = "import os, signal, sys, jetspark\nfrom jetspark.errors import *\n"
    script += f"js = jetspark.connect({str(store)!r})\n" + textwrap.dedent(code)
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, signum: int = 0) -> list[str]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signum, f"exit {proc.returncode}: {err[-3000:]}"
    return out.split()


def stored(js, stream: str) -> list[bytes]:
    last = js.stream_info(stream).state.last_seq
    return [js.get_msg(stream, q).data for q in range(1, last + 1)]


def test_a_resolved_future_is_stored_even_if_the_process_dies_right_after(tmp_path):
    store = tmp_path / "store"
    with jetspark.connect(store) as js:
        js.add_stream(name="K", subjects=["k.>"])
    proc = child(
        """
        futures = [js.publish_async("k.x", b"%06d" % i) for i in range(5000)]
        seqs = [f.result().seq for f in futures[:2000]]
        print(len(seqs), seqs == list(range(1, 2001)), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # the other 3000 may be queued, half written, or stored
        """,
        store,
    )
    assert finish(proc, signal.SIGKILL) == ["2000", "True"]
    with jetspark.connect(store) as js:
        state = js.stream_info("K").state
        assert 2000 <= state.messages == state.last_seq <= 5000 and state.first_seq == 1
        assert stored(js, "K") == [b"%06d" % i for i in range(state.last_seq)]  # a prefix, in order, nothing torn
        assert not js.check_stream("K").problems
        assert js.publish("k.x", b"after").seq == state.last_seq + 1


def test_another_process_publishing_to_the_stream_meanwhile_loses_nothing(tmp_path):
    store = tmp_path / "store"
    n = 3000
    with jetspark.connect(store) as js:
        js.add_stream(name="M", subjects=["m.>"])
        proc = child(
            f"""
            print("ready", flush=True)
            seqs = [js.publish("m.child", b"c%06d" % i).seq for i in range({n})]
            print(len(set(seqs)), seqs == sorted(seqs))
            """,
            store,
        )
        assert proc.stdout.readline().split() == ["ready"]
        futures = [js.publish_async("m.parent", b"p%06d" % i) for i in range(n)]
        js.publish_async_completed()
        assert finish(proc) == [str(n), "True"]
        parent = [f.result().seq for f in futures]
        assert parent == sorted(parent)
        state = js.stream_info("M").state
        assert state.messages == state.last_seq == 2 * n
        data = stored(js, "M")
        assert [d for d in data if d.startswith(b"p")] == [b"p%06d" % i for i in range(n)]
        assert [d for d in data if d.startswith(b"c")] == [b"c%06d" % i for i in range(n)]
        assert {data[q - 1] for q in parent} == {b"p%06d" % i for i in range(n)}


def test_a_full_disk_fails_whole_groups_and_loses_nothing_acknowledged(tmpfs):
    disk = tmpfs("8m")
    store = disk / "store"
    with jetspark.connect(store) as js:
        js.add_stream(name="F", subjects=["f.>"])
    disk.fill(keep=300 << 10)
    proc = child(
        """
        futures = []
        for start in range(0, 1000, 50):  # groups of at most 50: some fit before the disk is full
            futures += [js.publish_async("f.x", b"%08d" % i + b"p" * 1000) for i in range(start, start + 50)]
            js.publish_async_completed()
        for f in futures:
            err = f.exception()
            print(f.result().seq if err is None else type(err).__name__)
        """,
        store,
    )
    out = finish(proc)
    acked = out.index("StoreFullError")
    assert 0 < acked and out[:acked] == [str(q) for q in range(1, acked + 1)]
    assert set(out[acked:]) == {"StoreFullError"}  # the disk stayed full: every later group failed whole
    disk.free()
    with jetspark.connect(store) as js:
        state = js.stream_info("F").state
        assert (state.messages, state.last_seq) == (acked, acked)
        assert stored(js, "F") == [b"%08d" % i + b"p" * 1000 for i in range(acked)]
        assert js.publish_async("f.x", b"after").result(timeout=10).seq == acked + 1


def _forked_child(conn, js) -> None:
    try:
        futures = [js.publish_async("fk.child", b"c%d" % i) for i in range(100)]
        js.publish_async_completed()
        conn.send([f.result().seq for f in futures])
    except BaseException as exc:
        conn.send(repr(exc))


def test_a_forked_child_publishes_on_its_own_and_stores_nothing_twice(tmp_path):
    """A handle used across fork(): the child's publish_async gets a publisher (and a writer
    thread) of its own, and the parent's messages, already stored, are not stored again."""
    fork = multiprocessing.get_context("fork")
    with jetspark.connect(tmp_path / "store") as js:
        js.add_stream(name="FK", subjects=["fk.>"])
        parent = [js.publish_async("fk.parent", b"p%d" % i) for i in range(100)]
        js.publish_async_completed()
        mine, theirs = fork.Pipe()
        proc = fork.Process(target=_forked_child, args=(theirs, js))
        proc.start()
        child_seqs = mine.recv()
        proc.join(60)
        assert proc.exitcode == 0 and child_seqs == list(range(101, 201)), child_seqs
        more = [js.publish_async("fk.parent", b"q%d" % i) for i in range(100)]
        js.publish_async_completed()
        assert [f.result().seq for f in parent + more] == list(range(1, 101)) + list(range(201, 301))
        assert js.stream_info("FK").state.messages == 300
