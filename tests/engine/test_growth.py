"""Bounded growth: a stream's disk and memory follow what it retains, not its history.

storage.py's module docstring describes the mechanisms: the journals (ops,
dedup, dedup_ranges) are compacted into files of a new generation published
by the header commit, the tail block of a stream that keeps less than half a
block is closed early so its removed head goes with it, and the in-memory
dedup caches forget ids that left the window.

Every test runs the real engine on a temporary store.  The kill tests SIGKILL
real child processes, some of them stopped (SIGSTOP, by themselves) at a
chosen point of a compaction, so the crash lands exactly there.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import traceback
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jetspark
from jetspark import AckPolicy, ConsumerConfig
from jetspark.engine import block_writer, dedup, journals, storage
from jetspark.engine.records import RANGE
from jetspark.protocol import headers as H
from tests.conftest import FakeClock

ROOT = Path(__file__).resolve().parents[2]
STREAM = "G"
NS = 1_000_000_000
SPAWN = multiprocessing.get_context("spawn")

# A hang guard only (a child that never answers would otherwise block until the global timeout); nothing is timed.
pytestmark = pytest.mark.timeout(300)


# ---------------------------------------------------------------- helpers


def disk_usage(path: Path) -> tuple[int, int]:
    """(allocated, apparent) bytes of every file under path: st_blocks * 512, and st_size."""
    alloc = apparent = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                st_ = os.stat(os.path.join(root, f))
            except FileNotFoundError:
                continue
            alloc += st_.st_blocks * 512
            apparent += st_.st_size
    return alloc, apparent


def storage_of(js, name: str = STREAM) -> storage.StreamStorage:
    return js._stream(name).storage


def journal_sizes(s: storage.StreamStorage) -> dict[str, int]:
    """Committed length of each journal, and the on-disk size of its files (all generations)."""
    files = {
        k: sum(os.stat(s.dir / n).st_size for n in os.listdir(s.dir) if n.split(".")[0] == k)
        for k in ("ops", "dedup", "dedup_ranges")
    }
    return {
        "ops": s.header.ops_len,
        "dedup": s.header.dedup_len,
        "dedup_ranges": s.header.ranges_len,
        **{f"{k} files": v for k, v in files.items()},
    }


def ids_table(subject: str, start: int, n: int) -> pa.Table:
    return pa.table({
        "subject": [subject] * n,
        "data": [b"%d" % i for i in range(start, start + n)],
        "msg_id": [f"id-{i}" for i in range(start, start + n)],
    })  # fmt: skip


# ---------------------------------------------------------------- 1. a long run stays bounded


@pytest.mark.slow
@pytest.mark.parametrize("storage_type", ["file", "memory"])
def test_unique_ids_at_max_msgs_stay_bounded(store, storage_type):
    """200,000 unique ids on max_msgs=1000 with a 1 s window: disk, journals and the dedup
    cache stay at what the window and the retained messages need, all the way through."""
    clock = FakeClock()
    js = jetspark.connect(store, clock=clock)
    js.add_stream(name=STREAM, subjects=["g.>"], storage=storage_type, max_msgs=1000, duplicate_window=1.0)
    s = storage_of(js)
    step = 100_000  # ns per message: the 1 s window holds 10,000 ids
    window_ids = NS // step
    total, batch, singles = 200_000, 1000, 20_000
    usage = []
    n = 0
    while n < total:
        if n < total - singles:
            # Most of the run as batches with an id per row (one dedup record per row).
            ack = js.publish_batch(ids_table("g.a", n, batch))
            assert not any(ack.duplicate.to_pylist())
            n += batch
            clock.advance(batch * step / NS)
        else:
            for _ in range(batch):  # the single-publish path, the one of the reported run
                ack = js.publish("g.a", b"%d" % n, headers={"Nats-Msg-Id": f"id-{n}"})
                assert (ack.seq, ack.duplicate) == (n + 1, None)
                n += 1
                clock.advance(step / NS)
        if n % 5000 == 0:
            usage.append((n, disk_usage(s.dir)[0], journal_sizes(s), len(s.message_ids.ids or {})))

    # Two blocks around an early roll (closed at most 1,024 messages late), space the writer
    # allocates ahead of itself, and the dedup journal: what the window holds, compacted
    # once mostly dead, plus a replaced file until the commit.
    dedup_bound = 4 * window_ids * 32 + journals.COMPACT_MIN
    bound = 2 * (block_writer.ROLL_MIN_BYTES + 1024 * 200) + (2 << 20) + 2 * dedup_bound
    for n_at, alloc, sizes, cached in usage:
        # Unbounded, the blocks alone would hold n_at * ~180 bytes (36 MB at the end) and
        # the dedup journal n_at * 32 bytes.
        assert alloc <= bound, (n_at, alloc, sizes)
        assert sizes["dedup"] <= dedup_bound, (n_at, sizes)
        assert sizes["dedup files"] <= 2 * dedup_bound, (n_at, sizes)
        assert sizes["ops files"] == 0 and sizes["dedup_ranges files"] == 0, (n_at, sizes)
        # The ids the window holds, plus what the cache may gather before it is pruned again.
        assert cached <= 3 * window_ids + dedup.CACHE_MIN + batch, (n_at, cached)
    assert s.header.jgen > 0  # the dedup journal was compacted

    st_ = js.stream_info(STREAM).state
    assert (st_.messages, st_.first_seq, st_.last_seq, st_.num_deleted) == (1000, total - 999, total, 0)
    assert [js.get_msg(STREAM, seq=q).data for q in (total - 999, total)] == [
        b"%d" % (total - 1000),
        b"%d" % (total - 1),
    ]

    # Dedup is right after all those compactions: in the window a duplicate, out of it not.
    inside, outside = total - window_ids // 2, total - 3 * window_ids
    dup = js.publish("g.a", b"again", headers={"Nats-Msg-Id": f"id-{inside}"})
    assert (dup.seq, dup.duplicate) == (inside + 1, True)
    fresh = js.publish("g.a", b"again", headers={"Nats-Msg-Id": f"id-{outside}"})
    assert (fresh.seq, fresh.duplicate) == (total + 1, None)
    js.close()

    # And in a fresh handle, which reads the compacted journal.
    with jetspark.connect(store, clock=clock) as js2:
        dup = js2.publish("g.a", b"again", headers={"Nats-Msg-Id": f"id-{inside - 1}"})
        assert (dup.seq, dup.duplicate) == (inside, True)
        assert js2.stream_info(STREAM).state.last_seq == total + 1
        js2.delete_stream(STREAM)


def test_generated_id_ranges_compact(store, monkeypatch):
    """Batches with generated ids (one dedup_ranges record each): the ranges journal and its
    cache stay bounded, and a range inside the window still deduplicates afterwards."""
    monkeypatch.setattr(journals, "COMPACT_MIN", 8192)
    monkeypatch.setattr(dedup, "CACHE_MIN", 64)
    clock = FakeClock()
    with jetspark.connect(store, clock=clock) as js:
        js.add_stream(name=STREAM, subjects=["g.>"], max_msgs=100, duplicate_window=1.0)
        s = storage_of(js)
        table = pa.table({"subject": ["g.r"] * 10, "data": [b"x"] * 10})
        rounds = 3 * journals.COMPACT_MIN // RANGE.size  # enough records for several compactions
        for i in range(rounds):
            ack = js.publish_batch(table, msg_id_prefix=f"p{i % 7}-", msg_id_start=10 * i)
            assert not any(ack.duplicate.to_pylist())
            clock.advance(0.01)  # 100 batches per window
        assert s.header.jgen > 0
        # 100 batches (records) in the window: compacted at most once it is mostly dead.
        assert s.header.ranges_len <= 3 * journals.COMPACT_MIN, journal_sizes(s)
        assert s.message_ids.ranges is not None and s.message_ids.ranges_n <= 2 * (100 + dedup.CACHE_MIN) + 1
        last = rounds - 1
        # The whole last batch again: every row a duplicate of its first publish.
        ack = js.publish_batch(table, msg_id_prefix=f"p{last % 7}-", msg_id_start=10 * last)
        assert ack.duplicate.to_pylist() == [True] * 10
        assert ack.seqs.to_pylist() == list(range(10 * last + 1, 10 * last + 11))
        # One generated id as a single publish: found in its range.
        dup = js.publish("g.r", b"y", headers={"Nats-Msg-Id": f"p{(last - 3) % 7}-{10 * (last - 3) + 4}"})
        assert (dup.seq, dup.duplicate) == (10 * (last - 3) + 5, True)
        # A batch that left the window is new again.
        old = js.publish_batch(table, msg_id_prefix="p0-", msg_id_start=0)
        assert old.duplicate.to_pylist() == [False] * 10


# ---------------------------------------------------------------- 2. dedup across processes and compaction


def _dedup_child(conn, store: str) -> None:
    """A second process: answers ("pub", id, now) with (seq, duplicate) from its own handle,
    whose journal and dedup cache stay as they were between requests."""
    try:
        clock = FakeClock()
        js = jetspark.connect(store, clock=clock)
        while True:
            req = conn.recv()
            if req[0] == "stop":
                break
            if req[0] == "jgen":
                conn.send(("ok", storage_of(js).journals.jgen))
                continue
            _, msg_id, now = req
            clock.now_ns = now
            ack = js.publish("g.c", b"child", headers={"Nats-Msg-Id": msg_id})
            conn.send(("ok", (ack.seq, bool(ack.duplicate))))
        js.close()
        conn.send(("ok", None))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def _ask(conn, *req):
    conn.send(req)
    status, value = conn.recv()
    assert status == "ok", value
    return value


@pytest.mark.slow
def test_dedup_across_compaction_in_two_processes(store):
    clock = FakeClock()
    js = jetspark.connect(store, clock=clock)
    js.add_stream(name=STREAM, subjects=["g.>"], max_msgs=500, duplicate_window=1.0)
    s = storage_of(js)
    parent, child = SPAWN.Pipe()
    proc = SPAWN.Process(target=_dedup_child, args=(child, str(store)))
    proc.start()
    child.close()
    try:
        step = 0.0002  # 5,000 ids per window
        n = 0

        def publish_ids(count):
            nonlocal n
            for _ in range(count // 500):
                ack = js.publish_batch(ids_table("g.a", n, 500))
                assert not any(ack.duplicate.to_pylist())
                n += 500
                clock.advance(500 * step)

        publish_ids(5000)
        # The child loads its dedup cache from the journal as it is now (generation 0).
        assert _ask(parent, "pub", "id-4990", clock.now_ns) == (4991, True)
        assert _ask(parent, "jgen") == 0
        jgen = s.header.jgen
        publish_ids(30_000)  # several compactions of the journal the child has cached
        assert s.header.jgen > jgen
        assert not (s.dir / "dedup").exists() or os.stat(s.dir / "dedup").st_size == 0

        # In this process: inside the window still a duplicate, outside not.
        now = clock.now_ns
        dup = js.publish("g.a", b"x", headers={"Nats-Msg-Id": f"id-{n - 10}"})
        assert (dup.seq, dup.duplicate) == (n - 9, True)
        # In the child, which had the replaced journal open and its ids cached.
        assert _ask(parent, "pub", f"id-{n - 20}", now) == (n - 19, True)
        assert _ask(parent, "pub", f"id-{n - 4000}", now) == (n - 3999, True)
        assert _ask(parent, "jgen") == s.header.jgen  # it reopened the journal files
        assert _ask(parent, "pub", "id-4990", now) == (n + 1, False)  # left the window long ago
        # An id the child stored is a duplicate here too.
        dup = js.publish("g.a", b"x", headers={"Nats-Msg-Id": "id-4990"})
        assert (dup.seq, dup.duplicate) == (n + 1, True)
        assert _ask(parent, "stop") is None
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
            proc.join()
    assert proc.exitcode == 0
    js.delete_stream(STREAM)
    js.close()


# ---------------------------------------------------------------- 3. SIGKILL in the middle of compaction

T0 = 1_700_000_000 * NS
TICK = 10_000_000  # the child's clock: message seq is published at T0 + seq * TICK
WINDOW_IDS = 50  # duplicate_window = 50 ticks
KILL_MAX_MSGS = 100


def kill_payload(seq: int) -> bytes:
    return b"%d|" % seq + bytes(seq % 31)


def _publish_ids_forever(store: str, stop_at: str) -> None:
    """Child: publish seq after seq with the id "k-<seq>", printing each acknowledged seq.

    Small thresholds make compactions and block rolls frequent.  ``stop_at`` names a point
    where the child announces itself and stops (SIGSTOP) for the parent's SIGKILL:
    "written" (a compacted journal is written, not committed), "committed" (committed,
    the replaced file not yet unlinked), "roll" (a block closed early, before its
    commit), or "none" (the parent kills at a random ack).
    """
    journals.COMPACT_MIN = 1024
    block_writer.ROLL_MIN_BYTES = 16 << 10

    def stop(point: str) -> None:
        os.write(1, b"STOP %s\n" % point.encode())
        os.kill(os.getpid(), signal.SIGSTOP)

    if stop_at == "written":
        replace = journals.Journals.replace

        def hooked(self, kind, write, h):
            def write_then_stop(fd):
                write(fd)
                stop(kind)

            return replace(self, kind, write_then_stop, h)

        journals.Journals.replace = hooked
    elif stop_at == "committed":
        retire = journals.Journals.retire

        def hooked(self):
            stop("retire")
            retire(self)

        journals.Journals.retire = hooked
    elif stop_at == "roll":
        tail = block_writer.BlockWriter.tail_block

        def hooked(self, seq, dlen, hlen):
            before = len(self.index.blocks)
            blk = tail(self, seq, dlen, hlen)
            if len(self.index.blocks) > before and before:
                stop("roll")
            return blk

        block_writer.BlockWriter.tail_block = hooked

    clock = FakeClock()
    js = jetspark.connect(store, clock=clock)
    seq = js.stream_info(STREAM).state.last_seq + 1
    while True:
        clock.now_ns = T0 + seq * TICK
        ack = js.publish("k.a", kill_payload(seq), headers={"Nats-Msg-Id": f"k-{seq}"})
        if ack.seq != seq or ack.duplicate:
            os.write(1, b"BAD expected %d got %r\n" % (seq, ack))
            os._exit(3)
        os.write(1, b"%d\n" % seq)
        seq += 1


def _run_child_until_killed(children, store: Path, stop_at: str, kill_after: int) -> tuple[list[int], str]:
    code = "import sys; from tests.engine.test_growth import _publish_ids_forever; _publish_ids_forever(*sys.argv[1:])"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen(
        [sys.executable, "-c", code, str(store), stop_at],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    children.append(p)
    acked, stopped = [], ""
    for line in p.stdout:
        if line.startswith(b"STOP"):
            stopped = line.split()[1].decode()
            break
        if not line.strip().isdigit():
            break
        acked.append(int(line))
        if stop_at == "none" and len(acked) >= kill_after:
            break
    os.kill(p.pid, signal.SIGKILL)
    rc = p.wait()
    rest = p.stdout.read().split()
    assert rc == -signal.SIGKILL, f"child exited by itself (rc={rc}): {p.stderr.read().decode(errors='replace')}"
    assert all(x.isdigit() for x in rest), rest[-3:]
    return acked + [int(x) for x in rest], stopped


def _verify_after_kill(store: Path, acked: list[int], prior_last: int) -> int:
    """Every acknowledged message the limit keeps is there, the stream is gapless, and ids
    within the window are duplicates; returns last_seq."""
    # The child went on from the stream's last sequence (an empty list: stopped in its first publish).
    assert acked == list(range(prior_last + 1, prior_last + 1 + len(acked))), (prior_last, acked[:3])
    top = acked[-1] if acked else prior_last
    clock = FakeClock()
    with jetspark.connect(store, clock=clock) as js:
        st_ = js.stream_info(STREAM, deleted_details=True).state
        last = st_.last_seq
        assert last in (top, top + 1), (top, st_)
        kept = min(last, KILL_MAX_MSGS)
        assert (st_.messages, st_.first_seq, st_.num_deleted, st_.deleted, st_.lost) == (
            kept,
            last - kept + 1,
            0,
            None,
            None,
        )
        assert st_.bytes == sum(
            30 + 3 + len(kill_payload(q)) + len(H.encode({"Nats-Msg-Id": f"k-{q}"})) + 4
            for q in range(last - kept + 1, last + 1)
        )
        for q in range(last - kept + 1, last + 1):
            m = js.get_msg(STREAM, seq=q)
            assert (m.data, m.headers["Nats-Msg-Id"]) == (kill_payload(q), f"k-{q}"), q
        clock.now_ns = T0 + last * TICK
        for q in sorted({last, last - 1, last - WINDOW_IDS // 2, last - WINDOW_IDS + 2} & set(range(1, last + 1))):
            dup = js.publish("k.a", b"again", headers={"Nats-Msg-Id": f"k-{q}"})
            assert (dup.seq, dup.duplicate) == (q, True), (q, last)
        assert js.stream_info(STREAM).state.last_seq == last
    return last


@pytest.mark.slow
def test_sigkill_during_compaction(store, children):
    """Children publishing unique ids are killed inside compactions, between a compaction's
    commit and its unlink, around early block rolls, and at random acks; after each kill
    the store opens with everything acknowledged and dedup right within the window."""
    with jetspark.connect(store) as js:
        js.add_stream(name=STREAM, subjects=["k.>"], max_msgs=KILL_MAX_MSGS, duplicate_window=WINDOW_IDS * TICK / NS)
    rng = random.Random(7)
    plan = ["written", "committed", "roll", "none"] * 3
    rng.shuffle(plan)
    last, stops = 0, set()
    for stop_at in plan:
        acked, stopped = _run_child_until_killed(children, store, stop_at, rng.randint(1, 400))
        if stop_at != "none":
            assert stopped, f"the child never reached {stop_at!r}"
            stops.add(stop_at)
        last = _verify_after_kill(store, acked, last)
    assert stops == {"written", "committed", "roll"}
    # Leftovers of the crashes are bounded: at most a replaced or an orphan file per journal.
    with jetspark.connect(store) as js:
        s = storage_of(js)
        for kind, gens in s.journals.files().items():
            assert len(gens) <= 2, (kind, gens)
        js.delete_stream(STREAM)


# ---------------------------------------------------------------- 4. the ops journal


@pytest.mark.parametrize("storage_type", ["file", "memory"])
def test_ops_compaction_with_work_queue_out_of_order_acks(store, storage_type, monkeypatch):
    """A work queue acked out of order journals each removal in ops: the journal is compacted
    to the removed runs still above first_seq, and a second handle that had the old journal
    open agrees with the first at every step."""
    monkeypatch.setattr(journals, "COMPACT_MIN", 2048)
    js = jetspark.connect(store)
    js.add_stream(name=STREAM, subjects=["w.>"], storage=storage_type, retention="workqueue")
    js.add_consumer(STREAM, ConsumerConfig(durable_name="w", ack_policy=AckPolicy.EXPLICIT))
    other = jetspark.connect(store)
    other.stream_info(STREAM)
    s = storage_of(js)
    rng = random.Random(3)
    sub = js.pull_subscribe("w.>", durable="w", stream=STREAM)
    live: set[int] = set()
    published = 0
    max_ops = 0
    held: list = []
    for round_ in range(40):
        for _ in range(100):
            published += 1
            assert js.publish("w.x", b"%d" % published).seq == published
            live.add(published)
        msgs = sub.fetch(batch=100)
        # Ack in random order, a few at a time (each few is one removal in ops), holding
        # some back until the next round: first_seq stays behind them meanwhile.
        rng.shuffle(msgs)
        todo, held = held + msgs[10:], msgs[:10]
        for i in range(0, len(todo), 7):
            for m in todo[i : i + 7]:
                m.ack()
                live.discard(m.metadata.sequence.stream)
            js.stream_info(STREAM)  # applies the acks
            max_ops = max(max_ops, s.header.ops_len)
        for handle in (js, other):
            st_ = handle.stream_info(STREAM, deleted_details=True).state
            assert st_.messages == len(live), round_
            first = min(live) if live else published + 1
            assert st_.first_seq == first
            assert (st_.deleted or []) == [q for q in range(first, published + 1) if q not in live]
    assert s.header.jgen > 0
    assert max_ops <= 4 * journals.COMPACT_MIN
    for q in sorted(live)[:5]:
        assert other.get_msg(STREAM, seq=q).data == b"%d" % q
    js.close()
    other.close()
    with jetspark.connect(store) as js:
        st_ = js.stream_info(STREAM, deleted_details=True).state
        assert st_.messages == len(live) and (st_.deleted or []) == [
            q for q in range(st_.first_seq, published + 1) if q not in live
        ]
        js.delete_stream(STREAM)


def test_ops_compaction_with_interest_skips(store, monkeypatch):
    """An interest stream skips what nobody is interested in: a skip behind a kept message is
    a removal in ops, one record each.  Compacted, each gap between kept messages is one run."""
    monkeypatch.setattr(journals, "COMPACT_MIN", 1024)
    with jetspark.connect(store) as js:
        js.add_stream(name=STREAM, subjects=["i.>"], retention="interest")
        js.add_consumer(STREAM, ConsumerConfig(durable_name="a", ack_policy=AckPolicy.EXPLICIT, filter_subject="i.a"))
        other = jetspark.connect(store)
        other.stream_info(STREAM)
        s = storage_of(js)
        kept = []
        for seq in range(1, 3001):
            if seq % 250 == 1:  # kept until acknowledged (never, here)
                assert js.publish("i.a", b"k%d" % seq).seq == seq
                kept.append(seq)
            else:
                assert js.publish("i.b", b"n").seq == seq  # skipped: the sequence is used, nothing stored
        assert s.header.jgen > 0
        assert s.header.ops_len < 3 * journals.COMPACT_MIN  # uncompacted: 2,988 records of 24 bytes
        for handle in (js, other):
            st_ = handle.stream_info(STREAM, deleted_details=True).state
            assert (st_.messages, st_.first_seq, st_.last_seq) == (len(kept), 1, 3000)
            assert st_.deleted == [q for q in range(1, 3001) if q not in kept]
            assert [handle.get_msg(STREAM, seq=q).data for q in kept[-2:]] == [b"k%d" % q for q in kept[-2:]]
        other.close()


# ---------------------------------------------------------------- 5. fuzzed removals across compaction


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["pub", "del", "purge_a", "reopen"]), st.integers(0, 10_000)),
        min_size=20,
        max_size=120,
    )
)
def test_removals_agree_with_a_model_across_compaction(tmp_path_factory, ops):
    """Publishes, out-of-order deletes and subject purges, with compaction and early block
    rolls forced small: two handles agree with a plain model after every step."""
    old = journals.COMPACT_MIN, block_writer.ROLL_MIN_BYTES
    journals.COMPACT_MIN, block_writer.ROLL_MIN_BYTES = 64, 512
    path = tmp_path_factory.mktemp("model")
    js = jetspark.connect(path)
    other = jetspark.connect(path)
    try:
        js.add_stream(name=STREAM, subjects=["m.*"], max_msgs=60)
        other.stream_info(STREAM)
        model: dict[int, str] = {}
        last = 0
        for op, arg in ops:
            if op == "pub":
                for k in range(arg % 7 + 1):
                    subject = "m.a" if (arg + k) % 3 else "m.b"
                    last += 1
                    assert js.publish(subject, b"%d" % last).seq == last
                    model[last] = subject
                    while len(model) > 60:
                        del model[min(model)]
            elif op == "del" and model:
                seq = sorted(model)[arg % len(model)]
                (js if arg % 2 else other).delete_msg(STREAM, seq)
                del model[seq]
            elif op == "purge_a":
                other.purge_stream(STREAM, subject="m.a")
                model = {q: s_ for q, s_ in model.items() if s_ != "m.a"}
            elif op == "reopen":
                other.close()
                other = jetspark.connect(path)
            for handle in (js, other):
                st_ = handle.stream_info(STREAM, subjects_filter=">", deleted_details=True).state
                first = min(model) if model else last + 1
                assert (st_.messages, st_.last_seq) == (len(model), last)
                if model:
                    assert st_.first_seq == first
                    assert (st_.deleted or []) == [q for q in range(first, last + 1) if q not in model]
                counts = {}
                for s_ in model.values():
                    counts[s_] = counts.get(s_, 0) + 1
                assert (st_.subjects or {}) == counts
        for q in sorted(model)[-3:]:
            assert other.get_msg(STREAM, seq=q).data == b"%d" % q
    finally:
        journals.COMPACT_MIN, block_writer.ROLL_MIN_BYTES = old
        js.close()
        other.close()
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- 6. early block roll and a lagging reader


def test_small_retention_rolls_blocks_and_a_lagging_reader_keeps_up(store, monkeypatch):
    """max_msgs far below a block: tail blocks close early and go, so the store holds about
    two small blocks; a reader that lagged across many dropped blocks still agrees."""
    monkeypatch.setattr(block_writer, "ROLL_MIN_BYTES", 64 << 10)
    with jetspark.connect(store) as js:
        js.add_stream(name=STREAM, subjects=["r.>"], max_msgs=200)
        reader = jetspark.connect(store)
        reader.stream_info(STREAM, subjects_filter=">")  # its per-subject counts are built now
        s = storage_of(js)
        for i in range(1, 20_001):
            js.publish(f"r.{i % 3}", b"p" * 100)
            if i % 5000 == 0:
                assert len(s.blocks) <= 3
                blk_files = list((s.dir / "blk").glob("*.idx"))
                assert len(blk_files) <= 3, blk_files
        st_ = reader.stream_info(STREAM, subjects_filter=">").state
        assert (st_.messages, st_.first_seq, st_.last_seq) == (200, 19_801, 20_000)
        assert st_.subjects == dict(Counter(f"r.{i % 3}" for i in range(19_801, 20_001)))
        assert reader.get_msg(STREAM, last_by_subj="r.1").seq == 19_999
        assert disk_usage(s.dir)[0] < 2 << 20
        reader.close()
