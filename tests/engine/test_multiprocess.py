"""Several processes on one store: concurrent writers and readers, fork, and a dead lock holder.

Every process here is real (multiprocessing ``spawn`` or ``fork``); the only
coordination is the engine's flock and the mmap'd commit header.  Children
report through pipes and exceptions inside a child are sent back as text, so
a failure shows the child's traceback.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
import traceback
from collections import Counter

import pytest

import jetspark
from jetspark.errors import MsgNotFoundError

STREAM = "MP"
SPAWN = multiprocessing.get_context("spawn")
FORK = multiprocessing.get_context("fork")
PAYLOAD_LEN = 32

# A hang guard only (a lost wake-up would otherwise sit until the global timeout); nothing here is timed.
pytestmark = pytest.mark.timeout(120)


def wpayload(wid: int, i: int) -> bytes:
    """Writer ``wid``'s ``i``-th payload: fixed length, so a stream's bytes are messages x one size."""
    return (b"w%d:%08d:" % (wid, i)).ljust(PAYLOAD_LEN, b"abcdefghij"[i % 10 : i % 10 + 1])


def parse(data: bytes) -> tuple[int, int]:
    w, i, _ = data.split(b":", 2)
    return int(w[1:]), int(i)


def msg_size(storage: str) -> int:
    subject_len = len("mp.w0")
    return subject_len + PAYLOAD_LEN + (16 if storage == "memory" else 30)


# ---------------------------------------------------------------- children


def _run(conn, fn, *args):
    """A child's entry point: ship ``fn``'s result, or its traceback, through the pipe."""
    try:
        conn.send(("ok", fn(*args)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def _small_blocks(block_msgs: int) -> None:
    if block_msgs:
        from jetspark.engine import block_writer

        block_writer.BLOCK_MAX_MSGS = block_msgs


def _writer_body(store, wid, n, barrier, block_msgs):
    _small_blocks(block_msgs)
    js = jetspark.connect(store)
    js.stream_info(STREAM)
    barrier.wait()
    acks = []
    for i in range(n):
        ack = js.publish(f"mp.w{wid}", wpayload(wid, i))
        assert not ack.duplicate
        acks.append(ack.seq)
    js.close()
    return acks


def _reader_body(store, storage, barrier, done, max_msgs, removals):
    """Read while the writers write: every answer must be a whole, committed state."""
    js = jetspark.connect(store)
    rng = random.Random(os.getpid())
    barrier.wait()
    seen, prev_last, rounds = [], 0, 0
    while True:
        finished = done.is_set()  # read before the last round, so one full round follows the writers
        rounds += 1
        st = js.stream_info(STREAM, subjects_filter=">" if rounds % 8 == 0 else None).state
        last = st.last_seq
        expect_msgs = min(last, max_msgs) if max_msgs else last
        assert last >= prev_last, (prev_last, st)
        assert st.messages <= expect_msgs, st
        if st.messages:
            assert st.first_seq == last - st.messages + 1 and st.num_deleted == 0, st
        assert st.bytes == st.messages * msg_size(storage), st
        assert st.num_subjects <= 4, st
        if st.subjects is not None or (rounds % 8 == 0 and st.messages):
            assert sum(st.subjects.values()) == st.messages, st
        prev_last = last
        if last:
            for seq in (last, rng.randint(max(1, last - 2000), last), rng.randint(1, last)):
                try:
                    m = js.get_msg(STREAM, seq=seq)
                except MsgNotFoundError:
                    # Only a removal (limits, purges) makes a committed sequence go away.
                    assert removals, seq
                    continue
                wid, i = parse(m.data)
                assert m.seq == seq and m.data == wpayload(wid, i) and m.subject == f"mp.w{wid}", (seq, m)
                seen.append((seq, wid, i))
        if finished:
            break
    js.close()
    return seen, rounds


def _purger_body(store, barrier, done, threshold):
    """Purge the whole stream whenever it holds ``threshold`` messages, while writers write."""
    js = jetspark.connect(store)
    barrier.wait()
    purges = 0
    while True:
        finished = done.is_set()  # one round after the writers are done: at least one purge happens
        if js.stream_info(STREAM).state.messages >= threshold:
            js.purge_stream(STREAM)
            purges += 1
        if finished:
            break
    js.close()
    return purges


def _result(conn, proc):
    try:
        status, value = conn.recv()
    except EOFError:
        proc.join()
        raise AssertionError(f"child {proc.name} died without a result (exit code {proc.exitcode})") from None
    proc.join()
    assert status == "ok", f"child {proc.name} failed:\n{value}"
    assert proc.exitcode == 0, proc.exitcode
    return value


def assert_gapless(seqs: list[int], total: int) -> None:
    """seqs are exactly 1..total, each once."""
    dups = sorted(s for s, c in Counter(seqs).items() if c > 1)
    missing = sorted(set(range(1, total + 1)) - set(seqs))
    extra = sorted(set(seqs) - set(range(1, total + 1)))
    assert not (dups or missing or extra), f"duplicates {dups[:10]}, missing {missing[:10]}, out of range {extra[:10]}"


# ---------------------------------------------------------------- fixtures


def _start(procs, ctx, target, *args):
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_run, args=(child, target, *args))
    p.start()
    child.close()
    procs.append(p)
    return parent, p


# ---------------------------------------------------------------- 2. concurrent writers and readers

WRITERS = 4
PER_WRITER = 2500


@pytest.mark.slow
@pytest.mark.parametrize(
    "storage, block_msgs, max_msgs, purge",
    [
        ("file", 0, 0, False),
        ("memory", 0, 0, False),
        ("file", 256, 0, False),  # block creation under contention, readers crossing blocks
        ("memory", 256, 1000, False),  # max_msgs: old blocks removed while others read them
        ("file", 256, 0, True),  # a fifth process purges the whole stream again and again
    ],
    ids=["file", "memory", "file-small-blocks", "memory-small-blocks-max-msgs", "file-small-blocks-purger"],
)
def test_concurrent_writers_and_readers(store, procs, storage, block_msgs, max_msgs, purge):
    with jetspark.connect(store) as js:
        js.add_stream(name=STREAM, subjects=["mp.>"], storage=storage, max_msgs=max_msgs or None)
    n_children = WRITERS + 1 + purge
    barrier, done = SPAWN.Barrier(n_children + 1), SPAWN.Event()
    writers = [
        _start(procs, SPAWN, _writer_body, str(store), w, PER_WRITER, barrier, block_msgs) for w in range(WRITERS)
    ]
    readers = [
        _start(procs, SPAWN, _reader_body, str(store), storage, barrier, done, max_msgs, bool(max_msgs or purge))
    ]
    purgers = [_start(procs, SPAWN, _purger_body, str(store), barrier, done, 700)] if purge else []
    barrier.wait()
    acks = [_result(conn, p) for conn, p in writers]
    done.set()
    seen, rounds = _result(*readers[0])
    purges = _result(*purgers[0]) if purge else 0

    total = WRITERS * PER_WRITER
    assert_gapless([seq for seqs in acks for seq in seqs], total)
    owner = {}
    for wid, seqs in enumerate(acks):
        assert seqs == sorted(seqs)  # one process's publishes are ordered
        owner.update((seq, (wid, i)) for i, seq in enumerate(seqs))
    assert rounds >= 1 and (seen or purge)
    for seq, wid, i in seen:
        assert owner[seq] == (wid, i), f"reader saw writer {wid}'s #{i} at {seq}, acknowledged as {owner[seq]}"

    with jetspark.connect(store) as js:
        st = js.stream_info(STREAM, subjects_filter=">").state
        assert st.last_seq == total
        if max_msgs:
            assert (st.messages, st.first_seq) == (max_msgs, total - max_msgs + 1)
        elif purge:
            assert purges > 0 and st.messages < total
            assert st.messages == 0 or st.first_seq == total - st.messages + 1
        else:
            assert (st.messages, st.first_seq) == (total, 1)
        assert (st.num_deleted, st.bytes, st.lost) == (0, st.messages * msg_size(storage), None)
        assert sum((st.subjects or {}).values()) == st.messages
        for seq in range(st.first_seq, total + 1):
            m = js.get_msg(STREAM, seq=seq)
            assert m.data == wpayload(*owner[seq]) and m.subject == f"mp.w{owner[seq][0]}", seq
        assert js.publish("mp.w0", b"next").seq == total + 1
        js.delete_stream(STREAM)


# ---------------------------------------------------------------- 3. a handle survives fork


def _fork_child_body(js, barrier, n):
    # The inherited handle, used as is: the engine must notice the fork and reopen.
    js.stream_info(STREAM)
    barrier.wait()
    acks = [js.publish("mp.w1", wpayload(1, i)).seq for i in range(n)]
    assert js.stream_info(STREAM).state.last_seq >= acks[-1]
    return acks


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["file", "memory"])
def test_handle_survives_fork(store, procs, storage):
    n = 4000
    js = jetspark.connect(store)
    try:
        js.add_stream(name=STREAM, subjects=["mp.>"], storage=storage)
        before = [js.publish("mp.w0", wpayload(0, i)).seq for i in range(100)]
        assert before == list(range(1, 101))
        barrier = FORK.Barrier(2)
        conn, p = _start(procs, FORK, _fork_child_body, js, barrier, n)
        barrier.wait()
        mine = before + [js.publish("mp.w0", wpayload(0, 100 + i)).seq for i in range(n)]
        theirs = _result(conn, p)
        assert_gapless(mine + theirs, 2 * n + 100)
        assert mine == sorted(mine) and theirs == sorted(theirs)
        # The child's exit took nothing of ours with it: the parent's handle still works.
        st = js.stream_info(STREAM).state
        assert (st.messages, st.last_seq, st.num_deleted) == (2 * n + 100, 2 * n + 100, 0)
        for wid, seqs in ((0, mine), (1, theirs)):
            for i, seq in enumerate(seqs):
                assert js.get_msg(STREAM, seq=seq).data == wpayload(wid, i), seq
        assert js.publish("mp.w0", b"next").seq == 2 * n + 101
        js.delete_stream(STREAM)
    finally:
        js.close()


# ---------------------------------------------------------------- 5. SIGKILL of the lock holder


def _hold_lock(conn, store, which):
    """Take a lock, write past the commit point (stream lock), say so, and wait to be killed."""
    js = jetspark.connect(store)
    if which == "stream":
        st = js._stream(STREAM)
        with st.locked():
            st.storage.append("mp.dead", b"", b"never committed", time.time_ns())
            conn.send("holding")
            conn.recv()
    else:
        with js._store.locked():
            conn.send("holding")
            conn.recv()


def _blocked_body(store, which, ready, go):
    js = jetspark.connect(store)
    js.stream_info(STREAM)
    ready.set()
    go.wait()  # the lock is held now: the next call waits for it
    if which == "stream":
        return js.publish("mp.w1", wpayload(1, 0)).seq
    js.add_stream(name="OTHER1", subjects=["o1"], storage="file")
    return js.stream_names()


@pytest.mark.slow
@pytest.mark.parametrize("which", ["stream", "store"])
@pytest.mark.parametrize("storage", ["file", "memory"])
def test_sigkill_of_lock_holder_blocks_nobody(store, procs, storage, which):
    with jetspark.connect(store) as js:
        js.add_stream(name=STREAM, subjects=["mp.>"], storage=storage)
        for i in range(10):
            js.publish("mp.w0", wpayload(0, i))
    # The waiter opens the store first (opening takes the store lock too), then waits for its turn.
    ready, go = SPAWN.Event(), SPAWN.Event()
    conn, waiter = _start(procs, SPAWN, _blocked_body, str(store), which, ready, go)
    ready.wait()
    holder_conn, child_conn = SPAWN.Pipe()
    holder = SPAWN.Process(target=_hold_lock, args=(child_conn, str(store), which))
    holder.start()
    child_conn.close()
    procs.append(holder)
    assert holder_conn.recv() == "holding"
    go.set()
    os.kill(holder.pid, signal.SIGKILL)  # the kernel drops its flock with its files
    holder.join()
    assert holder.exitcode == -signal.SIGKILL

    with jetspark.connect(store) as js:
        if which == "stream":
            mine = js.publish("mp.w0", wpayload(0, 10)).seq
            theirs = _result(conn, waiter)
            assert sorted([mine, theirs]) == [11, 12]
            st = js.stream_info(STREAM, subjects_filter=">").state
            # Nothing of the dead holder's uncommitted write is visible.
            assert (st.messages, st.last_seq, st.subjects) == (12, 12, {"mp.w0": 11, "mp.w1": 1})
            assert js.get_msg(STREAM, seq=theirs).data == wpayload(1, 0)
            assert js.get_msg(STREAM, seq=mine).data == wpayload(0, 10)
        else:
            js.add_stream(name="OTHER0", subjects=["o0"], storage="file")
            assert set(_result(conn, waiter)) >= {STREAM, "OTHER1"}
            assert js.stream_names() == [STREAM, "OTHER0", "OTHER1"]
            assert js.publish("mp.w0", b"x").seq == 11
        js.delete_stream(STREAM)


# ---------------------------------------------------------------- removals seen by other processes


def _empty_stream_body(store, how):
    js = jetspark.connect(store)
    if how == "purge":
        js.purge_stream(STREAM)
    else:
        st = js.stream_info(STREAM).state
        for seq in range(st.first_seq, st.last_seq + 1):
            js.delete_msg(STREAM, seq)
    js.close()


def _read_all_body(store):
    js = jetspark.connect(store)
    st = js.stream_info(STREAM).state
    msgs = [js.get_msg(STREAM, seq=s).data for s in range(st.first_seq, st.last_seq + 1)]
    js.close()
    return st.first_seq, st.last_seq, st.messages, msgs


@pytest.mark.slow
@pytest.mark.parametrize("how", ["purge", "delete_msg"])
@pytest.mark.parametrize("storage", ["file", "memory"])
def test_publish_after_another_process_emptied_the_stream(store, procs, storage, how):
    """The emptying process removes the stream's block files; a process that had them open must not write there."""
    with jetspark.connect(store) as js:
        js.add_stream(name=STREAM, subjects=["mp.>"], storage=storage)
        for i in range(3):
            js.publish("mp.w0", wpayload(0, i))
        assert js.get_msg(STREAM, seq=3).data == wpayload(0, 2)  # this handle has the block open
        _result(*_start(procs, SPAWN, _empty_stream_body, str(store), how))
        ack = js.publish("mp.w0", b"after")
        assert ack.seq == 4
        assert _result(*_start(procs, SPAWN, _read_all_body, str(store))) == (4, 4, 1, [b"after"])
    with jetspark.connect(store) as js:
        assert js.get_msg(STREAM, seq=4).data == b"after"
        js.delete_stream(STREAM)
