"""A process killed (SIGKILL) while it commits a consumer's plan, between or inside its records:
a reopen finds the state the records written whole leave, as the memory of the live process
held it after each of them (consumer.py ``commit``).  The planners here (an ack under ack
policy all, a drop, a floor advance, a purge) write a DROP of what they change, then, when
the last-per-subject sequences change, a second record.

The child builds the consumer's state, plans, sends the state each prefix of the plan's
records leaves (a draft with the records applied, as ``commit`` applies them), and dies
after its ``k``-th record is written (whole, or torn halfway: then the record is cut at the
reopen and the state is the one before it).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import traceback

import numpy as np
import pytest

import jetspark
from jetspark import AckPolicy, ConsumerConfig, DeliverPolicy
from tests.conftest import FakeClock

SPAWN = multiprocessing.get_context("spawn")

pytestmark = pytest.mark.timeout(120)  # a hang guard only; nothing here is timed

# (planner, its argument, consumer config): each leaves a state the reopen must find.
CASES = {
    "ack-all": ("ack", 14, dict(ack_policy=AckPolicy.ALL, ack_wait=1, max_deliver=2)),
    "drop-all": ("drop", [3, 9, 15], dict(ack_policy=AckPolicy.ALL, ack_wait=1, max_deliver=2)),
    "drop-explicit": ("drop", [3, 9, 15], dict(ack_policy=AckPolicy.EXPLICIT, ack_wait=1, max_deliver=2)),
    "floor": ("floor", 12, dict(ack_policy=AckPolicy.EXPLICIT, ack_wait=1, max_deliver=2)),
    "floor-last-per-subject": (
        "floor",
        26,
        dict(ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, filter_subject="s.*"),
    ),
    "purge": ("purged", 11, dict(ack_policy=AckPolicy.EXPLICIT, ack_wait=1, max_deliver=2)),
    "purge-wider": ("purged-wider", 11, dict(ack_policy=AckPolicy.EXPLICIT, ack_wait=1, max_deliver=2)),
    "purge-last-per-subject": (
        "purged",
        28,
        dict(ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, filter_subject="s.*"),
    ),
}


def _state(js):
    """The stream (opened in this handle) and its consumer D."""
    js.stream_info("S")
    s = js._store.streams["S"]
    return s, s.consumers.by_name["D"]


def _child(conn, store: str, case: str, k: int, torn: bool) -> None:
    try:
        from jetspark.engine import consumer_log

        op, arg, _ = CASES[case]
        clock = FakeClock()
        js = jetspark.connect(store, clock=clock)
        s, c = _state(js)
        with s.locked():
            # Pending deliveries, a redelivery queue, one given up at max_deliver (its count kept).
            c.next_batch(16, clock())
            c.nak(5, 5, None, clock())
            c.next_batch(1, clock())
            clock.advance(2)
            c.next_batch(2, clock())
            now = clock()
            if op == "ack":
                plan = c.plan_ack(arg, c.pending[arg][0], now)[1]
            elif op == "drop":
                s.storage.remove(np.array(arg, dtype=np.int64))  # as the stream removes, then tells them
                plan = c.plan_drop(np.array(arg, dtype=np.int64), now)[1]
            elif op == "floor":
                plan = c.plan_advance_floor(arg, now)
            else:
                s.storage.remove(np.array([13, 14], dtype=np.int64))  # gone above the purge: wider drops them
                plan = c.plan_purged(arg, op == "purged-wider", now)
            states, draft = [c.snapshot()], c.copy()
            for rec in plan:
                draft.apply(*rec)
                states.append(draft.snapshot())
            conn.send(("plan", [op for op, _, _ in plan], states))
            real, written = consumer_log.ConsumerLog.write, []

            def write(self, rec, snapshot):
                start = self.pos
                out = real(self, rec, snapshot)
                written.append(rec)
                if len(written) == k:
                    if torn:  # a writer dying mid-record: the header still commits the records before it
                        os.ftruncate(self.fd, start + (self.pos - start) // 2)
                        os.pwrite(self.fd, start.to_bytes(8, "little"), 8)
                    os.kill(os.getpid(), signal.SIGKILL)
                return out

            consumer_log.ConsumerLog.write = write  # type: ignore[method-assign]
            c.commit(plan)
        conn.send(("error", f"still alive after {len(written)} records"))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def _run(procs, store, case: str, k: int, torn: bool) -> tuple[list, list]:
    parent, end = SPAWN.Pipe()
    p = SPAWN.Process(target=_child, args=(end, str(store), case, k, torn))
    p.start()
    end.close()
    procs.append(p)
    msg = parent.recv()
    assert msg[0] == "plan", msg[1]
    p.join()
    assert p.exitcode == -signal.SIGKILL, f"the child was not killed ({p.exitcode}): {parent.recv()}"
    return msg[1], msg[2]


def _setup(store, config: dict) -> None:
    with jetspark.connect(store, clock=FakeClock()) as js:
        js.add_stream(name="S", subjects=["s.>"])
        for i in range(1, 31):
            js.publish(f"s.{i % 25}", b"m%d" % i)  # last per subject: 6 to 30
        js.add_consumer("S", ConsumerConfig(durable_name="D", **config))


@pytest.mark.slow
@pytest.mark.parametrize("torn", [False, True], ids=["whole", "torn"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_reopen_after_a_kill_inside_a_plan_finds_what_its_written_records_leave(store, procs, case, torn):
    _setup(store, CASES[case][2])
    ops, states = _run(procs, store, case, 1, torn)
    with jetspark.connect(store, clock=FakeClock()) as js:
        _, c = _state(js)
        found = c.snapshot()
    assert found == states[0 if torn else 1], ops
    assert states[1] != states[0], "the plan's first record changes nothing: the case tests nothing"
    if case == "purge-wider":
        assert {13, 14} <= set(states[0]["pending"]) and not {13, 14} & set(states[-1]["pending"])


@pytest.mark.slow
@pytest.mark.parametrize("case", ["floor-last-per-subject", "purge-last-per-subject"])
def test_a_kill_between_a_plans_two_records_keeps_the_first(store, procs, case):
    """The DROP is written, the last-per-subject record is not: the reopen has the DROP's
    state, which delivers what the whole plan delivers (nothing the DROP passed)."""
    _setup(store, CASES[case][2])
    ops, states = _run(procs, store, case, 2, True)
    assert len(ops) == 2 and states[2] != states[1]
    with jetspark.connect(store, clock=FakeClock()) as js:
        _, c = _state(js)
        assert c.snapshot() == states[1]
        later = [q for q in states[2]["last_per_subject"] if q >= c.next_stream_seq]
        assert [q for q in c.last_per_subject if q >= c.next_stream_seq] == later
