"""The engine's expiry against a model of the server's rules (docs/semantics.md §3.8), with Hypothesis.

The engine keeps a TTL index per handle, caught up incrementally, a max_age cursor past the
messages that never expire, and applies what came due at the next operation
(jetspark/engine/expiry.py).  The model recomputes everything from the messages at each step:
every live message's deadline (its TTL, or max_age first unless its TTL is "never"), the
earliest first; an expiry that would remove a subject's last message, not a marker itself,
stores a marker at the expiry's time instead.  Random publishes, deletes, subject purges and
clock steps go through two handles on one store (each with its own caches, as two processes);
after each step both must report what the model holds.  The model's rules are the ones the
server showed (tests/contract/test_msg_ttl.py).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import jetspark
from jetspark.errors import MsgNotFoundError
from tests.conftest import FakeClock

NS = 1_000_000_000
S = "M"
SUBJECTS = ["m.a", "m.b", "m.c"]


@dataclass
class Msg:
    subject: str
    ts: int
    ttl: int  # seconds, -1 never, 0 none
    marker: bool = False


class Model:
    def __init__(self, max_age: float, marker_ttl: float) -> None:
        self.max_age = int(max_age * NS)
        self.marker_ttl = int(marker_ttl)
        self.msgs: dict[int, Msg] = {}
        self.last_seq = 0
        self.last_ts = 0

    def _store(self, subject: str, ts: int, ttl: int, marker: bool = False) -> int:
        ts = ts if ts > self.last_ts else self.last_ts + 1000
        self.last_seq += 1
        self.last_ts = ts
        self.msgs[self.last_seq] = Msg(subject, ts, ttl, marker)
        return self.last_seq

    def publish(self, subject: str, ttl: int, now: int) -> int:
        if self.marker_ttl and 0 < ttl < self.marker_ttl:
            ttl = self.marker_ttl  # raised to the marker TTL
        return self._store(subject, now, ttl)

    def _deadline(self, m: Msg) -> int | None:
        due = []
        if m.ttl > 0:
            due.append(m.ts + m.ttl * NS)
        if self.max_age and m.ttl != -1:
            due.append(m.ts + self.max_age)
        return min(due) if due else None

    def expire(self, now: int) -> None:
        while True:
            due = [(d, q) for q, m in self.msgs.items() if (d := self._deadline(m)) is not None and d <= now]
            if not due:
                return
            at, seq = min(due)
            m = self.msgs.pop(seq)
            last = not any(o.subject == m.subject for o in self.msgs.values())
            if self.marker_ttl and last and not m.marker:
                self._store(m.subject, at, self.marker_ttl, marker=True)

    def view(self) -> list[tuple[int, str, bool]]:
        return [(q, m.subject, m.marker) for q, m in sorted(self.msgs.items())]


def engine_view(js) -> tuple[list[tuple[int, str, bool]], int]:
    state = js.stream_info(S).state
    out = []
    for q in range(max(state.first_seq, 1), state.last_seq + 1):
        try:
            m = js.get_msg(S, q)
        except MsgNotFoundError:
            continue
        out.append((q, m.subject, bool(m.headers and "Nats-Marker-Reason" in m.headers)))
    return out, state.last_seq


TTLS = {0: None, 1: "1s", 2: "2", 5: "5s", -1: "never", 3: "3s"}
op = st.one_of(
    st.tuples(st.just("pub"), st.sampled_from(SUBJECTS), st.sampled_from(sorted(TTLS)), st.integers(0, 1)),
    st.tuples(st.just("wait"), st.floats(0.001, 3.0), st.integers(0, 1), st.just(0)),
    st.tuples(st.just("delete"), st.integers(0, 10), st.integers(0, 1), st.just(0)),
    st.tuples(st.just("purge"), st.sampled_from(SUBJECTS), st.integers(0, 1), st.just(0)),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# A marker whose own TTL passed before anyone looked: stored and removed at once.
@example(max_age=0.0, marker_ttl=1.0, ops=[("pub", "m.a", 1, 0), ("wait", 2.5, 1, 0)])
# A "never" message at the head, max_age removing what follows it, markers by max_age.
@example(
    max_age=2.0,
    marker_ttl=2.5,
    ops=[("pub", "m.a", -1, 0), ("pub", "m.b", 0, 1), ("pub", "m.b", 5, 0), ("wait", 2.1, 1, 0), ("wait", 2.9, 0, 0)],
)
@given(
    max_age=st.sampled_from([0.0, 2.0, 4.5]),
    marker_ttl=st.sampled_from([0.0, 1.0, 2.5]),
    ops=st.lists(op, min_size=1, max_size=25),
)
def test_the_engine_expires_as_the_model(max_age, marker_ttl, ops):
    tmp = tempfile.mkdtemp()
    clock = FakeClock()
    model = Model(max_age, marker_ttl)
    try:
        handles = [jetspark.connect(f"{tmp}/store", clock=clock) for _ in range(2)]
        config = {"allow_msg_ttl": True, "max_age": max_age}
        if marker_ttl:
            config["subject_delete_marker_ttl"] = marker_ttl
        handles[0].add_stream(name=S, subjects=["m.>"], **config)
        for kind, a, b, c in ops:
            if kind == "pub":
                js = handles[c]
                model.expire(clock())
                headers = {"Nats-TTL": TTLS[b]} if TTLS[b] else None
                seq = js.publish(a, b"x", headers=headers).seq
                assert seq == model.publish(a, b if TTLS[b] else 0, clock())
            elif kind == "wait":
                clock.advance(a)
                js = handles[b]
            elif kind == "delete":
                js = handles[b]
                model.expire(clock())
                live = sorted(model.msgs)
                if live:
                    seq = live[a % len(live)]
                    js.delete_msg(S, seq)
                    del model.msgs[seq]
            else:
                js = handles[b]
                model.expire(clock())
                js.purge_stream(S, subject=a)
                model.msgs = {q: m for q, m in model.msgs.items() if m.subject != a}
            model.expire(clock())
            for h in (js, handles[1 - handles.index(js)]):
                view, last_seq = engine_view(h)
                assert view == model.view(), (kind, a, b)
                assert last_seq == model.last_seq
        for h in handles:
            h.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
