"""A node that hangs instead of dying (SIGSTOP, then SIGCONT): its sockets stay open and
silent, so only silence tells.  The client pings its server (``ping_interval``,
``max_outstanding_pings``: jetspark/connect_options.py) and moves to another node; a
connect tries each server of its list in turn; ``advance_ack_floor`` waits out a consumer
state that makes no progress for a while (jetspark/remote/ack_floor.py).  The other two
nodes keep the quorum throughout, so work goes on during a freeze, not after it."""

from __future__ import annotations

import socket
import threading
import time

import pyarrow as pa
import pytest

import jetspark
from jetspark import AckPolicy
from tests.cluster.conftest import TIMEOUT, delete_stream_if_there

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

S = "HUNG"
ROWS = 40  # rows published per round


def rows(r: int) -> pa.Table:
    """Round r's rows: subject hung.<i % 2>, data r<r>-<i>, msg id id-<r>-<i>."""
    return pa.table({
        "subject": [f"hung.{i % 2}" for i in range(ROWS)],
        "data": [f"r{r}-{i}".encode() for i in range(ROWS)],
        "msg_id": [f"id-{r}-{i}" for i in range(ROWS)],
    })  # fmt: skip


def connected_node(cluster, js) -> int:
    """The index of the node the handle's connection is on."""
    return cluster.ports.index(js._session._nc.connected_url.port)


@pytest.fixture
def stream(cluster):
    with jetspark.connect(cluster.url, timeout=TIMEOUT) as js:
        js.add_stream(name=S, subjects=["hung.>"], num_replicas=3)
        js.add_consumer(S, durable_name="spark", ack_policy=AckPolicy.ALL, max_ack_pending=-1)
    try:
        yield
    finally:
        for i in range(cluster.size):
            cluster.thaw(i)
        cluster.wait_ready()
        delete_stream_if_there(cluster, S)


class Worker(threading.Thread):
    """What a streaming query asks of the server, round after round: append a batch with
    msg ids (a sink), read the new range back (a source's partition), advance the
    consumer's ack floor to its end (the commit).  Each finished round is an event
    (when, round, its last seq, the node the connection was on)."""

    def __init__(self, cluster, js) -> None:
        super().__init__(daemon=True)
        self.cluster, self.js = cluster, js
        self.events: list[tuple[float, int, int, int]] = []
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.progress = threading.Condition()

    def run(self) -> None:
        r = 0
        try:
            while not self.stop.is_set():
                ack = self.js.publish_batch(rows(r), stream=S)
                lo, hi = ack.seqs[0].as_py(), ack.seqs[-1].as_py()
                assert ack.seqs.to_pylist() == list(range(lo, hi + 1)), f"round {r}: {ack.seqs.to_pylist()}"
                got = pa.Table.from_batches(list(self.js.read_batches(S, lo, hi)))
                assert got.column("data").to_pylist() == rows(r).column("data").to_pylist(), f"round {r} read back"
                assert self.js.advance_ack_floor(S, "spark", hi).stream_seq == hi
                with self.progress:
                    self.events.append((time.monotonic(), r, hi, connected_node(self.cluster, self.js)))
                    self.progress.notify_all()
                r += 1
        except BaseException as exc:  # the test reports it
            self.error = exc
            with self.progress:
                self.progress.notify_all()

    def rounds_after(self, t: float, within: float) -> list:
        """The rounds finished after ``t``, once there is one (or ``within`` s passed, or the
        worker failed)."""
        with self.progress:
            self.progress.wait_for(lambda: self.error is not None or any(e[0] > t for e in self.events), timeout=within)
            return [e for e in self.events if e[0] > t]


def test_work_goes_on_during_a_freeze_of_each_node_that_matters(cluster, stream):
    """The stream's leader, the consumer's leader, then the node the client is connected to,
    each frozen under running work: rounds finish while the node is still frozen (after the
    election the two others hold, or the client's move to one of them); the last freeze
    outlasts the retry budget.  Every round's rows are stored exactly once, read back
    whole, and the consumer's floor follows them."""
    budget = 20.0
    with jetspark.connect(cluster.url, retry_budget=budget) as js:  # the default timeout (5 s)
        worker = Worker(cluster, js)
        worker.start()
        try:
            assert worker.rounds_after(0, 60), f"no round before any freeze: {worker.error!r}"
            # A leader frozen: the two others elect one (raft's election timeout, 4-9 s after
            # its last heartbeat), and a request that went to the frozen one is given up on
            # after the timeout (5 s): 20 s leaves room for both on a loaded machine.
            targets = [
                ("stream leader", lambda: cluster.stream_leader(S), 20.0),
                ("consumer leader", lambda: cluster.names.index(js.consumer_info(S, "spark").cluster.leader), 20.0),
                ("connected node", lambda: connected_node(cluster, js), budget + 5),
            ]
            for role, which, seconds in targets:
                node = which()
                with cluster.frozen(node):
                    frozen_at = time.monotonic()
                    during = worker.rounds_after(frozen_at, seconds)
                    # The freeze lasts its time whatever happens meanwhile: a fault, not a poll.
                    time.sleep(max(0.0, frozen_at + seconds - time.monotonic()))
                    thawed_at = time.monotonic()
                assert worker.error is None, (
                    f"freezing the {role} ({cluster.names[node]}) stopped the work: {worker.error!r}"
                )
                during = [e for e in worker.rounds_after(frozen_at, 0) if e[0] < thawed_at]
                assert during, (
                    f"no round finished while the {role} ({cluster.names[node]}) was frozen for {seconds:g} s"
                )
                if role == "connected node":
                    assert all(e[3] != node for e in during), "the client stayed on the frozen node"
                cluster.wait_ready()
                assert worker.rounds_after(time.monotonic(), 60), f"no round after the {role} resumed: {worker.error!r}"
        finally:
            worker.stop.set()
            worker.join(120)
        assert not worker.is_alive() and worker.error is None, repr(worker.error)
        rounds = [e[1] for e in worker.events]
        assert rounds == list(range(len(rounds)))
        last = worker.events[-1][2]
        # Exactly once: every round's rows, in order, each once, and nothing else.
        stored = pa.Table.from_batches(list(js.read_batches(S))).column("data").to_pylist()
        assert stored == [d for r in rounds for d in rows(r).column("data").to_pylist()]
        assert last == len(rounds) * ROWS
        info = js.consumer_info(S, "spark")
        assert info.ack_floor.stream_seq == last and info.num_pending == 0


def test_connect_follows_a_first_server_that_hangs(cluster, monkeypatch):
    """Servers that accept the connection and then say nothing (listening sockets no one
    serves: the kernel completes the handshake) listed before a live node: the connect
    gives each its attempt and reaches the live one.  nats-py shuffles the list; kept in
    the given order here, the hung ones always come first."""
    import nats.aio.client

    monkeypatch.setattr(nats.aio.client, "shuffle", lambda pool: None)
    hung = [socket.socket() for _ in range(2)]
    try:
        for s in hung:
            s.bind(("127.0.0.1", 0))
            s.listen(16)
        url = ",".join([*(f"nats://127.0.0.1:{s.getsockname()[1]}" for s in hung), cluster.node_url(0)])
        with jetspark.connect(url, timeout=1.0) as js:
            assert connected_node(cluster, js) == 0
            assert S not in js.stream_names()
    finally:
        for s in hung:
            s.close()


def test_a_consumer_state_that_lags_is_waited_out(cluster, stream, monkeypatch):
    """A consumer's info answered from a copy of the stream that is behind (a leader just
    elected on a node catching up) says nothing is pending: advance_ack_floor pulls nothing
    on its word and starts over until the state is current, then reaches seq exactly,
    neither raising nor moving the floor past it.  The lag is injected into the call's
    reads of the consumer's info (the real server answers everything else)."""
    from jetspark.remote import ack_floor, jsapi

    real = jsapi.consumer_info
    stale = {"left": 8}

    async def lagging(session, stream_name, consumer):
        info = await real(session, stream_name, consumer)
        if stale["left"] > 0:
            stale["left"] -= 1
            info.num_pending = 0  # as the node behind reports it
        return info

    with jetspark.connect(cluster.url, timeout=TIMEOUT) as js:
        js.publish_batch(pa.concat_tables([rows(0), rows(1)]), stream=S)
        monkeypatch.setattr(ack_floor.jsapi, "consumer_info", lagging)
        assert js.advance_ack_floor(S, "spark", 50).stream_seq == 50
        assert stale["left"] == 0
        info = js.consumer_info(S, "spark")
        assert info.ack_floor.stream_seq == 50 and info.delivered.stream_seq == 50 and info.num_pending == 2 * ROWS - 50


def test_the_ping_options_reach_nats_py_and_are_checked():
    """The defaults that notice a silent server in seconds, a user's own values (also as
    Spark's nats.* strings), and values nats-py could not use refused, naming the option."""
    from jetspark.connect_options import ConnectOptions

    kw = ConnectOptions.build("nats://127.0.0.1:4222").nats_kwargs()
    assert (kw["ping_interval"], kw["max_outstanding_pings"]) == (2.0, 2)
    kw = ConnectOptions.from_strings(
        "nats://127.0.0.1:4222", {"ping_interval": "10", "max-outstanding-pings": "5"}
    ).nats_kwargs()
    assert (kw["ping_interval"], kw["max_outstanding_pings"]) == (10.0, 5)
    for bad in (
        {"ping_interval": 0},
        {"ping_interval": -1.0},
        {"ping_interval": "2"},
        {"max_outstanding_pings": 0},
        {"max_outstanding_pings": 1.5},
    ):
        with pytest.raises((TypeError, ValueError), match=next(iter(bad))):
            ConnectOptions.build("nats://127.0.0.1:4222", **bad)
