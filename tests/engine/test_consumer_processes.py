"""Consumers across processes: crash safety, work-queue sharing, exact reopening, shared interest.

consumer.py keeps a consumer's state in an append-only checksummed log,
changed only under the stream's lock; pull.py buffers ``Msg.ack()`` per
handle.  These tests hold the engine to what that promises with real
processes (multiprocessing ``spawn``; SIGKILL, no cleanup of any kind):

* a process killed at any moment loses no consumer state it completed: every
  ``ack_sync`` stays applied, every delivery stays recorded with its deadline
  and its count; a plain ``ack`` still buffered may be lost (as an ack lost on
  the network), and then the message is redelivered after its ack_wait, never
  lost and never skipped.  Besides kills at random moments, white-box kills
  land inside a call: a whole log record, a torn one, a log rewrite that the
  other processes were not yet told about, an ack recorded but not yet
  applied to the stream;
* processes fetching from one durable consumer never get the same message
  while nothing expires, and a killed worker's messages go to the others once
  their ack_wait passes;
* a reopened store answers consumers_info exactly as before and then behaves
  exactly like a store that was never closed;
* on an interest stream, a message goes only once every consumer released it,
  whichever process released it.

Time is an injected clock (``jetspark.connect(path, clock=...)``), never a
sleep: a child's clock is its own object, or a shared ``RawValue`` the parent
moves.  Children report through pipes; an exception inside a child comes back
as its traceback.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import traceback
from collections import Counter

import pytest

import jetspark
from jetspark import AckPolicy, ConsumerConfig, DeliverPolicy, FetchTimeoutError
from jetspark.api import ns_to_datetime
from jetspark.errors import MsgNotFoundError

SPAWN = multiprocessing.get_context("spawn")
NS = 1_000_000_000
T0 = 1_700_000_000 * NS
STREAM = "CP"
DURABLE = "work"

# A hang guard only (a lost wake-up would otherwise sit until the global timeout); nothing here is timed.
pytestmark = pytest.mark.timeout(120)


class Clock:
    """A process's injected wall clock, in ns; moved by hand."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * NS)


class SharedClock:
    """A clock every process reads from one shared ``RawValue`` (ns); the parent moves it."""

    def __init__(self, value) -> None:
        self.value = value

    def __call__(self) -> int:
        return self.value.value


# ---------------------------------------------------------------- plumbing (as test_multiprocess.py)


def _run(conn, fn, *args):
    """A child's entry point: ship ``fn``'s result, or its traceback, through the pipe."""
    try:
        conn.send(("ok", fn(*args)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


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


def _start(procs, target, *args):
    """A child running ``_run(target, *args)``; returns the read end of its result pipe."""
    parent, child = SPAWN.Pipe(duplex=False)
    p = SPAWN.Process(target=_run, args=(child, target, *args))
    p.start()
    child.close()
    procs.append(p)
    return parent, p


def _start_talking(procs, target, *args):
    """A child with a two-way pipe as its first argument (it reports events and waits for orders)."""
    parent, child = SPAWN.Pipe()
    p = SPAWN.Process(target=target, args=(child, *args))
    p.start()
    child.close()
    procs.append(p)
    return parent, p


def _kill(p) -> None:
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    assert p.exitcode == -signal.SIGKILL, f"child {p.name} was not killed but exited with {p.exitcode}"


def _drain(conn) -> list:
    """Everything a dead child sent (a message the kill cut short ends the list)."""
    out = []
    while True:
        try:
            out.append(conn.recv())
        except (EOFError, OSError):
            return out


def _fetch_all(sub, batch: int = 64) -> list:
    """Fetch (no_wait) until nothing is due; ack_sync each message; returns (seq, num_delivered) in order."""
    got = []
    while True:
        try:
            msgs = sub.fetch(batch, no_wait=True)
        except FetchTimeoutError:
            return got
        for m in msgs:
            got.append((m.metadata.sequence.stream, m.metadata.num_delivered))
            m.ack_sync()


def _assert_nothing_due(sub) -> None:
    with pytest.raises(FetchTimeoutError):
        sub.fetch(1, no_wait=True)


def _publish(js, n: int, subject=lambda i: f"cp.{i % 5}") -> None:
    for i in range(1, n + 1):
        assert js.publish(subject(i), b"m%d" % i).seq == i


def _meta(m) -> tuple[int, int, int]:
    md = m.metadata
    return md.sequence.stream, md.sequence.consumer, md.num_delivered


# ---------------------------------------------------------------- 1. SIGKILL of a consumer's process

CRASH_TOTAL = 400
CRASH_BATCH = 8
CRASH_ROUNDS = 40
CRASH_ACK_WAIT = 30.0
PAUSE_ROUND = 9  # the round after the second clock jump: its batch starts with redeliveries


def crash_action(seq: int, delivered: int) -> str:
    """What the crash child does with a delivery: a mix of every way an ack can go."""
    r = seq % 8
    if r == 0:
        return "leave"  # never acked by the child: redelivered at each clock jump
    if r == 4:
        return "nak" if delivered == 1 else "sync"
    if r in (2, 6, 7):
        return "plain"
    return "sync"


def _crash_child(conn, store, pause, compact_bytes):
    """Fetch and ack from the durable, reporting every operation before ("will") and after ("did") it.

    ``pause``: "fetch" -> stop right after a fetch, holding its deliveries; "plain" -> stop right
    after a plain ack (buffered, not applied); otherwise run free.  When stopping (or at the end) it
    sends ("paused", consumer_info taken when no ack was buffered) and waits to be killed.
    ``pause`` = (op, how), op "fetch" or "sync": stop inside that call, holding the stream lock,
    right after its consumer-log record was written ("recorded") or with only half of the record
    written ("torn"), and send ("inside", how).
    """
    try:
        from jetspark.engine import consumer_log

        if compact_bytes:
            consumer_log.COMPACT_BYTES = compact_bytes  # log rewrites (snapshot + rename) happen mid-loop
        armed = []
        if isinstance(pause, tuple):
            real_write = consumer_log.ConsumerLog.write

            def write(self, rec, snapshot):
                start = self.pos
                compacted = real_write(self, rec, snapshot)
                if armed:
                    if pause[1] == "torn":
                        # A writer dies mid-record: the header still commits the records before it.
                        os.ftruncate(self.fd, start + (self.pos - start) // 2)
                        os.pwrite(self.fd, start.to_bytes(8, "little"), 8)
                    conn.send(("inside", pause[1]))
                    conn.recv()
                return compacted

            consumer_log.ConsumerLog.write = write
        clock = Clock()
        js = jetspark.connect(store, clock=clock)
        sub = js.pull_subscribe_bind(DURABLE, stream=STREAM)
        for rnd in range(CRASH_ROUNDS):
            if rnd and rnd % 4 == 0:
                clock.advance(CRASH_ACK_WAIT + 1)
                conn.send(("clock", clock.now))
            if isinstance(pause, tuple) and pause[0] == "fetch" and rnd == PAUSE_ROUND:
                armed.append(True)
            conn.send(("will", "fetch", None))
            try:
                msgs = sub.fetch(CRASH_BATCH, no_wait=True)
            except FetchTimeoutError:
                msgs = []
            conn.send(("did", "fetch", [_meta(m) for m in msgs]))
            if pause == "fetch" and rnd == PAUSE_ROUND:
                conn.send(("did", "info", None))
                conn.send(("paused", js.consumer_info(STREAM, DURABLE)))
                conn.recv()
            for m in msgs:
                seq, _, delivered = _meta(m)
                what = crash_action(seq, delivered)
                if what == "leave":
                    continue
                stop = pause == "plain" and what == "plain" and rnd >= PAUSE_ROUND
                if stop:
                    info = js.consumer_info(STREAM, DURABLE)  # applies the acks buffered so far
                    conn.send(("did", "info", None))
                if isinstance(pause, tuple) and pause[0] == "sync" and what == "sync" and rnd >= PAUSE_ROUND:
                    armed.append(True)
                conn.send(("will", what, seq))
                if what == "sync":
                    m.ack_sync()
                elif what == "plain":
                    m.ack()
                else:
                    m.nak()
                conn.send(("did", what, seq))
                if stop:
                    conn.send(("paused", info))
                    conn.recv()
        conn.send(("did", "info", None))
        conn.send(("paused", js.consumer_info(STREAM, DURABLE)))
        conn.recv()
    except BaseException:
        conn.send(("error", traceback.format_exc()))


class CrashModel:
    """What the parent may find after the kill, from the events the child reported."""

    def __init__(self, events: list) -> None:
        self.delivered: dict[int, int] = {}  # seq -> deliveries the child saw
        self.last_delivery: dict[int, int] = {}  # seq -> clock at its last reported delivery
        self.state: dict[int, str] = {}  # seq -> "acked" | "plain" (buffered) | "nak" | "pending"
        self.buffered: set[int] = set()  # plain acks no completed call has applied yet
        self.in_flight = None  # (op, seq): a call begun and not reported done
        self.paused = None
        self.inside = None
        self.clock = T0
        self.deliveries = 0
        for ev in events:
            if ev[0] == "error":
                raise AssertionError(f"crash child failed:\n{ev[1]}")
            if ev[0] == "clock":
                self.clock = ev[1]
            elif ev[0] == "paused":
                self.paused = ev[1]
            elif ev[0] == "inside":
                self.inside = ev[1]
            elif ev[0] == "will":
                self.in_flight = (ev[1], ev[2])
            else:
                _, op, arg = ev
                self.in_flight = None
                if op in ("fetch", "sync", "nak", "info"):
                    # Every handle call applies the acks buffered before it (pull.py).
                    for s in self.buffered:
                        self.state[s] = "acked"
                    self.buffered.clear()
                if op == "fetch":
                    for seq, cseq, n in arg:
                        self.deliveries += 1
                        assert cseq == self.deliveries, (seq, cseq, self.deliveries)
                        assert n == self.delivered.get(seq, 0) + 1, (seq, n, self.delivered.get(seq))
                        self.delivered[seq] = n
                        self.last_delivery[seq] = self.clock
                        self.state[seq] = "pending"
                elif op == "sync":
                    self.state[arg] = "acked"
                elif op == "plain":
                    self.state[arg] = "plain"
                    self.buffered.add(arg)
                elif op == "nak":
                    self.state[arg] = "nak"

    def due_now(self, seq: int) -> bool:
        """Is a pending ``seq`` due at the parent's first clock (the child's last one)?"""
        if self.state[seq] == "nak":
            return True  # a nak without delay is due at once
        return self.last_delivery[seq] + int(CRASH_ACK_WAIT * NS) <= self.clock


def _crash_and_recover(store, procs, storage, kill, compact_bytes=0):
    with jetspark.connect(store, clock=Clock()) as js:
        js.add_stream(name=STREAM, subjects=["cp.>"], storage=storage)
        _publish(js, CRASH_TOTAL)
        js.add_consumer(STREAM, durable_name=DURABLE, ack_wait=CRASH_ACK_WAIT)

    # kill: "fetch"/"plain" (idle at that point), (op, "torn"/"recorded") (inside op, holding the
    # lock), or n: running free, killed once n events arrived (the child is usually well ahead of
    # the parent's reading: it dies wherever it then is, perhaps inside the stream lock).
    running = isinstance(kill, int)
    pause = None if running else kill
    conn, child = _start_talking(procs, _crash_child, str(store), pause, compact_bytes)
    events = []
    while True:
        ev = conn.recv()
        events.append(ev)
        if ev[0] in ("paused", "inside", "error") or (running and len(events) >= kill):
            break
    _kill(child)
    events += _drain(conn)
    model = CrashModel(events)
    assert model.deliveries > 0
    if pause in ("fetch", "plain"):
        assert model.paused is not None
    if isinstance(pause, tuple):
        assert model.inside == pause[1] and model.in_flight[0] == pause[0], (model.inside, model.in_flight)
    if pause == "plain":
        assert model.in_flight is None and len(model.buffered) == 1
    if pause == "fetch":
        assert any(n > 1 for n in model.delivered.values())  # the paused batch included redeliveries

    clock = Clock(model.clock)
    with jetspark.connect(store, clock=clock) as js:
        before = js.consumer_info(STREAM, DURABLE)
        if model.paused is not None:
            # Killed idle: the store holds exactly the state the child last saw (a buffered
            # ack after that is not part of it).
            assert before == model.paused
        sub = js.pull_subscribe_bind(DURABLE, stream=STREAM)
        now_list = _fetch_all(sub)  # new messages and what was already due
        clock.advance(CRASH_ACK_WAIT - 1)
        early = _fetch_all(sub)
        clock.advance(2)
        later_list = _fetch_all(sub)  # everything else that was pending
        clock.advance(3600)
        _assert_nothing_due(sub)
        after = js.consumer_info(STREAM, DURABLE)
        st = js.stream_info(STREAM).state
        js.delete_stream(STREAM)

    # A delivery recorded by a fetch the kill interrupted shows as one delivery more than
    # reported (at most one batch of them; such deliveries happened at the last clock).
    extra = {s for s, n in now_list + later_list if n == model.delivered.get(s, 0) + 2}
    if model.in_flight is None or model.in_flight[0] != "fetch":
        assert not extra, extra
    assert len(extra) <= CRASH_BATCH
    assert not early, f"redelivered before their ack_wait passed: {early}"
    now, later = dict(now_list), dict(later_list)
    assert len(now) + len(later) == len(now_list) + len(later_list), "a message delivered twice to the parent"
    assert not set(now) & set(later)

    child_acked = set()
    for seq in range(1, CRASH_TOTAL + 1):
        state = model.state.get(seq)
        n = model.delivered.get(seq, 0)
        got = ("now", now[seq]) if seq in now else ("later", later[seq]) if seq in later else None
        if got is None:
            # Not redelivered: the child's ack of it was applied.
            child_acked.add(seq)
            possible = state == "acked" or seq in model.buffered or model.in_flight == ("sync", seq)
            assert possible, f"seq {seq} ({state}, delivered {n}x) vanished: neither acked nor redelivered"
            continue
        assert state != "acked", f"seq {seq}: acked with ack_sync (or applied by a later call), yet redelivered {got}"
        if seq in extra:
            assert got == ("later", n + 2), (seq, got)
        elif n == 0:
            assert got == ("now", 1), (seq, got)  # never delivered: a new message
        else:
            when = "now" if model.due_now(seq) else "later"
            if model.in_flight == ("nak", seq):
                assert got in (("now", n + 1), (when, n + 1)), (seq, got)
            else:
                assert got == (when, n + 1), (seq, got, state, model.last_delivery[seq], model.clock)

    # What the reopened consumer said agrees with all that.
    pending = {s for s, n in {**now, **later}.items() if n >= 2}
    assert before.delivered.consumer_seq == model.deliveries + len(extra)
    assert before.delivered.stream_seq == max(set(model.delivered) | extra)
    assert before.num_ack_pending == len(pending)
    assert before.num_redelivered == sum(1 for s in pending if {**now, **later}[s] >= 3)
    assert before.num_pending == CRASH_TOTAL - before.delivered.stream_seq
    assert before.ack_floor.stream_seq <= (min(pending) - 1 if pending else before.delivered.stream_seq)
    if not pending:
        assert before.ack_floor.stream_seq == before.delivered.stream_seq

    # Every message acked exactly once, by the child or by the parent; none skipped.
    parent_acked = set(now) | set(later)
    assert not child_acked & parent_acked
    assert child_acked | parent_acked == set(range(1, CRASH_TOTAL + 1))
    assert (after.num_ack_pending, after.num_redelivered, after.num_pending) == (0, 0, 0)
    assert after.delivered.stream_seq == after.ack_floor.stream_seq == CRASH_TOTAL
    assert after.delivered.consumer_seq == before.delivered.consumer_seq + len(parent_acked)
    assert st.messages == CRASH_TOTAL  # limits retention: acks remove nothing

    # Inside a call: a whole record is applied, a torn one is not (and is cut off).
    if pause == ("fetch", "recorded"):
        assert extra, "the interrupted fetch's recorded deliveries were forgotten"
    elif pause == ("fetch", "torn"):
        assert not extra and before.delivered.consumer_seq == model.deliveries
    elif pause == ("sync", "recorded"):
        assert model.in_flight[1] in child_acked
    elif pause == ("sync", "torn"):
        assert model.in_flight[1] in parent_acked


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["file", "memory"])
@pytest.mark.parametrize(
    "kill",
    [
        "fetch",
        "plain",
        ("fetch", "recorded"),
        ("fetch", "torn"),
        ("sync", "recorded"),
        ("sync", "torn"),
        3,
        150,
        250,
        400,
    ],
    ids=[
        "idle-after-fetch",
        "idle-after-plain-ack",
        "in-fetch-recorded",
        "in-fetch-torn",
        "in-ack-sync-recorded",
        "in-ack-sync-torn",
        "running-3",
        "running-150",
        "running-250",
        "running-400",
    ],
)
def test_consumer_state_survives_sigkill(store, procs, storage, kill):
    _crash_and_recover(store, procs, storage, kill)


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["file", "memory"])
def test_consumer_state_survives_sigkill_around_log_compaction(store, procs, storage):
    """The log is rewritten every few records: the kill lands among snapshots and renames."""
    _crash_and_recover(store, procs, storage, 300, compact_bytes=1500)


# ---------------------------------------------------------------- 1b. a process killed between two writes of one call


def _die_inside(store, where):
    """Child: SIGKILL itself at one point inside a call (the point is patched in, white-box)."""
    from jetspark.engine import consumer_log, consumer_set

    def die(*_):
        os.kill(os.getpid(), signal.SIGKILL)

    js = jetspark.connect(store, clock=Clock())
    if where == "after-log-rewrite":
        real = consumer_log.ConsumerLog.rewrite

        def rewrite_and_die(self, rec):
            real(self, rec)  # the snapshot is renamed over the log ...
            die()  # ... and the cons_gen bump that tells the others is never committed

        consumer_log.ConsumerLog.rewrite = rewrite_and_die
        consumer_log.COMPACT_BYTES = 0  # rewrite at the next record
        js.pull_subscribe_bind(DURABLE, stream=STREAM).fetch(1, no_wait=True)
    else:
        consumer_set.ConsumerSet.release = die  # after the consumer's record, before the stream's removal
        if where == "ack":
            (m,) = js.pull_subscribe_bind(DURABLE, stream=STREAM).fetch(1, no_wait=True)
            m.ack_sync()
        else:
            js.advance_ack_floor(STREAM, DURABLE, 3)
    raise AssertionError(f"still alive after {where}")


def _die(procs, store, where) -> None:
    p = SPAWN.Process(target=_die_inside, args=(str(store), where))
    p.start()
    procs.append(p)
    p.join()
    assert p.exitcode == -signal.SIGKILL, f"the child did not die {where} (exit code {p.exitcode})"


def _holder(conn, store):
    """Child: open the durable (and keep its log open), then fetch 3 when told."""
    try:
        js = jetspark.connect(store, clock=Clock())
        sub = js.pull_subscribe_bind(DURABLE, stream=STREAM)
        conn.send("open")
        conn.recv()
        conn.send([_meta(m) for m in sub.fetch(3, no_wait=True)])
        js.close()
    except BaseException:
        conn.send(("error", traceback.format_exc()))


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["file", "memory"])
def test_kill_right_after_a_log_rewrite_does_not_split_the_consumer(store, procs, storage):
    """A process that rewrote a consumer's log and died before telling the others: a process that
    had the old log open must follow the new one, not keep a private copy of the consumer."""
    with jetspark.connect(store, clock=Clock()) as js:
        js.add_stream(name=STREAM, subjects=["cp.>"], storage=storage)
        js.add_consumer(STREAM, durable_name=DURABLE, ack_wait=3600.0)  # nothing expires
        _publish(js, 30)
    conn, holder = _start_talking(procs, _holder, str(store))
    assert conn.recv() == "open"
    _die(procs, store, "after-log-rewrite")  # delivered seq 1 first
    conn.send("fetch")
    held = conn.recv()
    holder.join()
    with jetspark.connect(store, clock=Clock()) as js:
        mine = [_meta(m) for m in js.pull_subscribe_bind(DURABLE, stream=STREAM).fetch(3, no_wait=True)]
        info = js.consumer_info(STREAM, DURABLE)
        js.delete_stream(STREAM)
    assert held == [(2, 2, 1), (3, 3, 1), (4, 4, 1)], held
    assert mine == [(5, 5, 1), (6, 6, 1), (7, 7, 1)], f"delivered again, with nothing expired: {mine}"
    assert (info.delivered.consumer_seq, info.delivered.stream_seq, info.num_ack_pending) == (7, 7, 7)


@pytest.mark.slow
@pytest.mark.parametrize("retention, where", [("workqueue", "ack"), ("interest", "advance_ack_floor")])
def test_kill_between_ack_record_and_stream_removal_leaks_nothing(store, procs, retention, where):
    with jetspark.connect(store, clock=Clock()) as js:
        js.add_stream(name=STREAM, subjects=["cp.>"], storage="file", retention=retention)
        js.add_consumer(STREAM, durable_name=DURABLE, ack_wait=30.0)
        _publish(js, 5)
    _die(procs, store, where)  # acks seq 1 (or commits 1-3), dies before the stream removes them
    clock = Clock()
    with jetspark.connect(store, clock=clock) as js:
        sub = js.pull_subscribe_bind(DURABLE, stream=STREAM)
        got = _fetch_all(sub)
        clock.advance(31)
        got += _fetch_all(sub)  # whatever the dead process's call did not apply comes back
        st = js.stream_info(STREAM).state
        js.delete_stream(STREAM)
    assert {s for s, _ in got} >= {4, 5}
    # Every message was acked by someone (the dead process's call, or here): none may stay.
    assert (st.messages, st.first_seq) == (0, 6), f"stored though acked: {st}"


# ---------------------------------------------------------------- 2. one durable, several workers

WORKERS = 4
WQ_TOTAL = 3000
WQ_BATCH = 16


def _wq_worker(store, barrier):
    """Fetch batches until nothing is left, acking each (plain acks, the last one ack_sync)."""
    js = jetspark.connect(store)
    sub = js.pull_subscribe_bind(DURABLE, stream=STREAM)
    barrier.wait()
    got = []
    while True:
        try:
            msgs = sub.fetch(WQ_BATCH, no_wait=True)
        except FetchTimeoutError:
            break
        for i, m in enumerate(msgs):
            got.append((m.metadata.sequence.stream, m.metadata.num_delivered))
            if i == len(msgs) - 1:
                m.ack_sync()
            else:
                m.ack()
    js.close()
    return got


@pytest.mark.slow
@pytest.mark.parametrize("retention, storage", [("limits", "file"), ("workqueue", "memory"), ("workqueue", "file")])
def test_workers_sharing_a_durable_get_each_message_once(store, procs, retention, storage):
    with jetspark.connect(store) as js:
        js.add_stream(name=STREAM, subjects=["cp.>"], storage=storage, retention=retention)
        js.add_consumer(STREAM, durable_name=DURABLE, ack_wait=3600.0)  # nothing expires
        _publish(js, WQ_TOTAL)
    barrier = SPAWN.Barrier(WORKERS + 1)
    workers = [_start(procs, _wq_worker, str(store), barrier) for _ in range(WORKERS)]
    barrier.wait()
    results = [_result(conn, p) for conn, p in workers]

    seqs = [s for got in results for s, _ in got]
    dups = sorted(s for s, c in Counter(seqs).items() if c > 1)
    assert not dups, f"delivered to more than one worker (or twice): {dups[:20]}"
    assert sorted(seqs) == list(range(1, WQ_TOTAL + 1))
    assert all(n == 1 for got in results for _, n in got)
    for got in results:
        assert [s for s, _ in got] == sorted(s for s, _ in got)  # each worker sees the stream in order
    assert sum(1 for got in results if got) >= 2  # the workers did share the stream

    with jetspark.connect(store) as js:
        info = js.consumer_info(STREAM, DURABLE)
        assert (info.num_ack_pending, info.num_redelivered, info.num_pending) == (0, 0, 0)
        assert info.delivered.stream_seq == info.ack_floor.stream_seq == WQ_TOTAL
        assert info.delivered.consumer_seq == info.ack_floor.consumer_seq == WQ_TOTAL
        st = js.stream_info(STREAM).state
        if retention == "workqueue":
            assert (st.messages, st.bytes, st.first_seq, st.last_seq) == (0, 0, WQ_TOTAL + 1, WQ_TOTAL)
        else:
            assert st.messages == WQ_TOTAL
        js.delete_stream(STREAM)


# ---------------------------------------------------------------- 3. a worker killed holding messages

HELD = 16


def _victim(conn, store, clock_value, barrier):
    """Fetch a batch and hold it while working with the others; then ack_sync 4 of it, ack 4 (buffered),
    report, and wait to be killed with the other 8 (and the 4 buffered acks) outstanding."""
    try:
        js = jetspark.connect(store, clock=SharedClock(clock_value))
        sub = js.pull_subscribe_bind(DURABLE, stream=STREAM)
        held = sub.fetch(HELD, no_wait=True)
        barrier.wait()
        worked = []
        for _ in range(5):  # a few batches alongside the survivors, all acked
            try:
                msgs = sub.fetch(WQ_BATCH, no_wait=True)
            except FetchTimeoutError:
                break
            for m in msgs:
                worked.append(_meta(m))
                m.ack()
        js.consumer_info(STREAM, DURABLE)  # applies those acks
        for m in held[:4]:
            m.ack_sync()
        for m in held[4:8]:
            m.ack()
        conn.send(("holding", [_meta(m) for m in held], worked))
        conn.recv()
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def _survivor(store, clock_value, barrier, drained, advanced):
    """Work until nothing is due, say so, wait for the clock to pass ack_wait, then take what is due again."""
    js = jetspark.connect(store, clock=SharedClock(clock_value))
    sub = js.pull_subscribe_bind(DURABLE, stream=STREAM)
    barrier.wait()
    got = []
    for phase in (1, 2):
        while True:
            try:
                msgs = sub.fetch(WQ_BATCH, no_wait=True)
            except FetchTimeoutError:
                break
            for i, m in enumerate(msgs):
                got.append((phase, *_meta(m)))
                if i == len(msgs) - 1:
                    m.ack_sync()  # nothing of ours stays buffered once we stop
                else:
                    m.ack()
        if phase == 1:
            drained.wait()
            advanced.wait()
    js.close()
    return got


@pytest.mark.slow
@pytest.mark.parametrize("retention, storage", [("limits", "memory"), ("workqueue", "file")])
def test_killed_worker_messages_go_to_the_survivors(store, procs, retention, storage):
    ack_wait = 60.0
    clock_value = SPAWN.RawValue("q", T0)
    with jetspark.connect(store, clock=SharedClock(clock_value)) as js:
        js.add_stream(name=STREAM, subjects=["cp.>"], storage=storage, retention=retention)
        js.add_consumer(STREAM, durable_name=DURABLE, ack_wait=ack_wait)
        _publish(js, WQ_TOTAL)
    survivors_n = WORKERS - 1
    barrier, drained, advanced = SPAWN.Barrier(WORKERS + 1), SPAWN.Barrier(survivors_n + 1), SPAWN.Event()
    vconn, victim = _start_talking(procs, _victim, str(store), clock_value, barrier)
    survivors = [
        _start(procs, _survivor, str(store), clock_value, barrier, drained, advanced) for _ in range(survivors_n)
    ]
    barrier.wait()
    report = vconn.recv()
    assert report[0] == "holding", report[1] if report[0] == "error" else report
    _, held, worked = report
    _kill(victim)  # the survivors are (likely still) at work
    drained.wait()  # every survivor found nothing due and has applied all its acks
    clock_value.value = T0 + int((ack_wait + 1) * NS)
    advanced.set()
    results = [_result(conn, p) for conn, p in survivors]

    held_seqs = [s for s, _, _ in held]
    assert len(held) == HELD and all(n == 1 for _, _, n in held)
    synced, buffered, left = set(held_seqs[:4]), set(held_seqs[4:8]), set(held_seqs[8:])
    first = [(s, n) for got in results for phase, s, _, n in got if phase == 1]
    second = [(s, n) for got in results for phase, s, _, n in got if phase == 2]
    assert all(n == 1 for _, n in first) and all(n == 1 for _, _, n in worked)
    assert all(n == 2 for _, n in second), second  # redeliveries of the victim's messages
    again = {s for s, _ in second}
    assert len(again) == len(second)
    assert left <= again, f"held by the killed worker and never redelivered: {sorted(left - again)}"
    assert not synced & again, f"acked with ack_sync by the killed worker, yet redelivered: {sorted(synced & again)}"
    assert again <= left | buffered  # the buffered acks may or may not have been applied

    victim_acked = {s for s, _, _ in worked} | synced | (buffered - again)
    survivor_acked = [s for s, _ in first + second]
    assert len(survivor_acked) == len(set(survivor_acked)), "a message acked twice by the survivors"
    assert not victim_acked & set(survivor_acked)
    assert victim_acked | set(survivor_acked) == set(range(1, WQ_TOTAL + 1))

    with jetspark.connect(store, clock=SharedClock(clock_value)) as js:
        info = js.consumer_info(STREAM, DURABLE)
        assert (info.num_ack_pending, info.num_redelivered, info.num_pending) == (0, 0, 0)
        assert info.delivered.stream_seq == info.ack_floor.stream_seq == WQ_TOTAL
        st = js.stream_info(STREAM).state
        assert st.messages == (0 if retention == "workqueue" else WQ_TOTAL)
        clock_value.value += 3600 * NS
        _assert_nothing_due(js.pull_subscribe_bind(DURABLE, stream=STREAM))
        js.delete_stream(STREAM)


# ---------------------------------------------------------------- 4. reopening restores consumers exactly

R_CONSUMERS = [
    ConsumerConfig(durable_name="all", description="every message", ack_wait=10.0, max_deliver=3, metadata={"k": "v"}),
    ConsumerConfig(durable_name="backoff", filter_subject="r.a", ack_wait=1.0, backoff=[1.0, 5.0, 20.0], max_deliver=5),
    ConsumerConfig(
        durable_name="multi",
        filter_subjects=["r.b", "r.c.>"],
        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
        ack_policy=AckPolicy.ALL,
    ),
    ConsumerConfig(durable_name="none", deliver_policy=DeliverPolicy.NEW, ack_policy=AckPolicy.NONE),
    ConsumerConfig(
        durable_name="byseq",
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=20,
        max_ack_pending=5,
        headers_only=True,
    ),
    ConsumerConfig(
        durable_name="bytime",
        deliver_policy=DeliverPolicy.BY_START_TIME,
        opt_start_time=ns_to_datetime(T0 + 30 * 1_000_000),
        ack_wait=4.0,
    ),
    ConsumerConfig(
        durable_name="last", filter_subject="r.b", deliver_policy=DeliverPolicy.LAST, inactive_threshold=3600.0
    ),
    ConsumerConfig(durable_name="idle"),
]


def r_subject(i: int) -> str:
    return ("r.a", "r.b", "r.c.x", "r.c.y", "r.d")[i % 5]


def _build_consumers(js, clock: Clock) -> None:
    """A deterministic history: every consumer has pending, acked, nak'd, redelivered and maxed messages."""
    js.add_stream(name="R", subjects=["r.>"], storage="file")
    for i in range(1, 61):
        clock.advance(0.001)
        js.publish(r_subject(i), b"r%d" % i, headers={"H": str(i)} if i % 4 == 0 else None)
    for cfg in R_CONSUMERS:
        clock.advance(0.5)
        js.add_consumer("R", cfg)
    for i in range(61, 71):
        js.publish(r_subject(i), b"r%d" % i)
    subs = {
        c.durable_name: js.pull_subscribe_bind(c.durable_name, stream="R")
        for c in R_CONSUMERS
        if c.durable_name != "idle"
    }
    for rnd in range(4):
        for name, sub in subs.items():
            try:
                msgs = sub.fetch(7, no_wait=True)
            except FetchTimeoutError:
                continue
            for k, m in enumerate(msgs):
                seq = m.metadata.sequence.stream
                if name == "multi":
                    if k == len(msgs) - 2:
                        m.ack()  # AckAll: everything below goes too
                elif seq % 5 == 0:
                    m.nak(delay=7.0)
                elif seq % 7 == 0:
                    m.in_progress()
                elif seq % 11 == 0:
                    m.term()
                elif seq % 3 == 0:
                    pass  # left pending
                else:
                    m.ack()
        clock.advance(3.0 if rnd % 2 == 0 else 11.0)
    js.consumers_info("R")  # applies the buffered acks


def _consumers_child(conn, store):
    try:
        clock = Clock()
        js = jetspark.connect(store, clock=clock)
        _build_consumers(js, clock)
        conn.send(("infos", js.consumers_info("R"), js.stream_info("R"), clock.now))
        if conn.recv() == "close":
            js.close()
            conn.send(("closed",))
        else:
            conn.recv()  # until killed
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def _continue(js, clock: Clock) -> list:
    """Time passes and every consumer is drained: the deliveries, in order, with their counts."""
    seen = []
    for step in (0.0, 2.0, 4.0, 8.0, 30.0, 3000.0):
        clock.advance(step)
        for c in R_CONSUMERS:
            sub = js.pull_subscribe_bind(c.durable_name, stream="R")
            while True:
                try:
                    msgs = sub.fetch(5, no_wait=True)
                except FetchTimeoutError:
                    break
                seen.append(
                    (
                        step,
                        c.durable_name,
                        [(*_meta(m), m.metadata.num_pending, m.subject, m.data, m.headers) for m in msgs],
                    )
                )
                for m in msgs:
                    if m.metadata.sequence.stream % 2 and m.metadata.num_delivered < 3:
                        continue  # left for the next step
                    m.ack()
        seen.append((step, js.consumers_info("R")))
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("end", ["close", "sigkill"])
def test_reopen_restores_consumers_exactly(store, tmp_path, procs, end):
    conn, child = _start_talking(procs, _consumers_child, str(store))
    msg = conn.recv()
    assert msg[0] == "infos", msg[1] if msg[0] == "error" else msg
    _, infos, sinfo, now = msg
    if end == "close":
        conn.send("close")
        assert conn.recv() == ("closed",)
        child.join()
        assert child.exitcode == 0
    else:
        conn.send("wait")
        _kill(child)

    # The history is as rich as intended.
    by = {i.name: i for i in infos}
    assert [i.name for i in infos] == sorted(c.durable_name for c in R_CONSUMERS)
    assert sum(i.num_ack_pending for i in infos) > 10 and sum(i.num_redelivered for i in infos) > 3
    assert by["none"].delivered.stream_seq == 70 and by["none"].ack_floor.stream_seq == 70
    assert by["idle"].delivered.stream_seq == 0 and by["idle"].num_pending == 70
    assert by["byseq"].num_ack_pending == 5  # max_ack_pending holds it back

    clock = Clock(now)
    with jetspark.connect(store, clock=clock) as js:
        assert js.consumers_info("R") == infos  # configs, created times, sequences, counts
        assert js.stream_info("R") == sinfo
        reopened = _continue(js, clock)
        js.delete_stream("R")

    # A store that was never closed, built the same way, behaves the same from here.
    ref_clock = Clock()
    with jetspark.connect(tmp_path / "reference", clock=ref_clock) as js:
        _build_consumers(js, ref_clock)
        assert js.consumers_info("R") == infos
        assert ref_clock.now == now
        reference = _continue(js, ref_clock)
        js.delete_stream("R")
    assert reopened == reference
    redelivered = [e for x in reopened if len(x) == 3 for e in x[2] if e[2] >= 2]
    assert len(redelivered) > 10  # the continuation exercised the restored deadlines and counts


# ---------------------------------------------------------------- 5. advance_ack_floor vs fetch on an interest stream

INT_TOTAL = 1500
A_FLOOR = 1200  # where the committing process stops
A_STEP = 30
NEVER_ACKED = {37, 38, 600, 601, 1199, 1200, 1201, 1450}  # the fetching process leaves these pending


def _floor_mover(store, barrier):
    """Commit consumer "a" up to A_FLOOR in steps; after each, check what the stream holds."""
    js = jetspark.connect(store, clock=Clock())
    barrier.wait()
    prev, checked = 0, 0
    for floor in range(A_STEP, A_FLOOR + 1, A_STEP):
        got = js.advance_ack_floor(STREAM, "a", floor)
        assert got.stream_seq == floor
        b0 = js.consumer_info(STREAM, "b")
        present = {}
        for seq in range(prev + 1, floor + 1):
            try:
                js.get_msg(STREAM, seq=seq)
                present[seq] = True
            except MsgNotFoundError:
                present[seq] = False
        b1 = js.consumer_info(STREAM, "b")
        for seq, there in present.items():
            if there:
                # "b" had not released it when we looked: not at or below its ack floor then.
                assert seq > b0.ack_floor.stream_seq, (seq, b0.ack_floor)
            else:
                # Gone: "b" must have been given it and acked it.
                assert seq not in NEVER_ACKED, f"seq {seq} removed while consumer b still holds it"
                assert seq <= b1.delivered.stream_seq, f"seq {seq} removed before consumer b got it ({b1.delivered})"
            checked += 1
        prev = floor
    js.close()
    return checked


def _fetcher(store, barrier):
    """Fetch everything from consumer "b", acking all but NEVER_ACKED; check each acked message's fate."""
    js = jetspark.connect(store, clock=Clock())
    sub = js.pull_subscribe_bind("b", stream=STREAM)
    barrier.wait()
    got = []
    while True:
        try:
            msgs = sub.fetch(10, no_wait=True)
        except FetchTimeoutError:
            break
        acked = []
        for m in msgs:
            seq = m.metadata.sequence.stream
            got.append((seq, m.metadata.num_delivered))
            if seq not in NEVER_ACKED:
                m.ack()
                acked.append(seq)
        js.consumer_info(STREAM, "b")  # applies the acks
        a0 = js.consumer_info(STREAM, "a").ack_floor.stream_seq
        present = {}
        for seq in acked:
            try:
                js.get_msg(STREAM, seq=seq)
                present[seq] = True
            except MsgNotFoundError:
                present[seq] = False
        a1 = js.consumer_info(STREAM, "a").ack_floor.stream_seq
        for seq, there in present.items():
            if there:
                assert seq > a0, f"seq {seq} released by both consumers (a's floor {a0}) but still stored"
            else:
                assert seq <= a1, f"seq {seq} removed though consumer a (floor {a1}) still needs it"
        for seq in NEVER_ACKED:
            if seq <= got[-1][0]:
                js.get_msg(STREAM, seq=seq)  # raises if it was removed
    js.close()
    return got


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["file", "memory"])
def test_advance_ack_floor_and_fetch_release_together(store, procs, storage):
    clock = Clock()
    with jetspark.connect(store, clock=clock) as js:
        js.add_stream(name=STREAM, subjects=["cp.>"], storage=storage, retention="interest")
        js.add_consumer(STREAM, durable_name="a", ack_wait=3600.0)
        js.add_consumer(STREAM, durable_name="b", ack_wait=3600.0)
        _publish(js, INT_TOTAL)  # after the consumers: an interest stream keeps only what someone wants
    barrier = SPAWN.Barrier(3)
    mover = _start(procs, _floor_mover, str(store), barrier)
    fetcher = _start(procs, _fetcher, str(store), barrier)
    barrier.wait()
    checked = _result(*mover)
    got = _result(*fetcher)
    assert checked == A_FLOOR
    assert sorted(s for s, _ in got) == list(range(1, INT_TOTAL + 1)) and all(n == 1 for _, n in got)

    with jetspark.connect(store, clock=clock) as js:

        def stored():
            st = js.stream_info(STREAM, deleted_details=True).state
            live = set(range(st.first_seq, st.last_seq + 1)) - set(st.deleted or [])
            assert len(live) == st.messages
            return live if st.messages else set()

        # Released by both = at or below a's floor and acked by b.
        assert stored() == set(range(A_FLOOR + 1, INT_TOTAL + 1)) | NEVER_ACKED
        assert js.advance_ack_floor(STREAM, "a", INT_TOTAL).stream_seq == INT_TOTAL
        assert stored() == NEVER_ACKED
        b = js.consumer_info(STREAM, "b")
        assert (b.num_ack_pending, b.delivered.stream_seq, b.ack_floor.stream_seq) == (
            len(NEVER_ACKED),
            INT_TOTAL,
            min(NEVER_ACKED) - 1,
        )
        clock.advance(3601)
        again = _fetch_all(js.pull_subscribe_bind("b", stream=STREAM))
        assert sorted(again) == [(s, 2) for s in sorted(NEVER_ACKED)]
        assert stored() == set()
        st = js.stream_info(STREAM).state
        assert (st.messages, st.bytes, st.last_seq) == (0, 0, INT_TOTAL)
        js.delete_stream(STREAM)
