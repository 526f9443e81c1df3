"""pause_consumer / resume_consumer on the 3-node cluster: a pause is part of the
consumer's replicated config, so it holds on the leader elected after its leader's node
is killed, and a resume sent through jetspark then ends it there.

On a cluster the meta leader answers a pause or resume once it has proposed the change;
the consumer's leader applies it a moment later and says so with a CONSUMER.PAUSE
advisory.  The tests wait on the server's own word: that advisory, and the consumer's
LEADER_ELECTED advisory after the kill, each subscribed to before the call it answers.
Every expected value is what nats-server answers (tests/contract/test_consumer_pause.py
pins the same calls on one server and on the engine).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading

import pytest

import jetspark
from jetspark import AckPolicy
from jetspark.errors import FetchTimeoutError
from tests.cluster.conftest import TIMEOUT, delete_stream_if_there

pytestmark = pytest.mark.cluster

S, C = "PAUSED", "C"
# Short per-request timeouts with a budget: a request to the dead leader is given up on
# and retried through the election (tests/cluster/test_elections.py).
FAST = dict(timeout=2.0, retry_budget=60.0)
HOUR = dt.timedelta(hours=1)
# How long a fetch waits for a message a paused consumer must not deliver.
NOTHING_WAIT = 1.0
# An election after a SIGKILL on a loaded machine.
ELECTION_WAIT = 120.0


@pytest.fixture
def stream(cluster):
    """S (R3) with messages m0..m2."""
    with jetspark.connect(cluster.url, timeout=TIMEOUT) as js:
        js.add_stream(name=S, subjects=["pause.>"], num_replicas=3)
        for i in range(3):
            js.publish("pause.a", b"m%d" % i)
    try:
        yield
    finally:
        delete_stream_if_there(cluster, S)


class Advisories:
    """The consumer C's advisories ($JS.EVENT.ADVISORY.CONSUMER.<kind>.S.C) as the server
    sends them, on a nats-py connection to the given nodes (run on a thread of its own, so
    the subscription outlives the calls between the waits)."""

    def __init__(self, urls: list[str]) -> None:
        import nats

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def subscribe():
            nc = await nats.connect(urls, allow_reconnect=False)
            sub = await nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.*.{S}.{C}")
            await nc.flush()  # subscribed before the caller's next call
            return nc, sub

        self.nc, self.sub = self._run(subscribe())

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def wait(self, kind: str, within: float, where=lambda advisory: True) -> dict:
        """The next ``kind`` advisory ``where`` is true of (others are passed over)."""
        while True:
            msg = self._run(self.sub.next_msg(timeout=within))
            advisory = json.loads(msg.data)
            if msg.subject.split(".")[4] == kind and where(advisory):
                return advisory

    def close(self) -> None:
        self._run(self.nc.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@pytest.mark.parametrize("how", ["pause_consumer", "created paused"])
def test_a_pause_holds_on_the_consumers_new_leader_and_a_resume_ends_it(cluster, stream, how):
    until = (dt.datetime.now(dt.timezone.utc) + HOUR).replace(microsecond=0)
    with jetspark.connect(cluster.url, **FAST) as js:
        pause = {"pause_until": until} if how == "created paused" else {}
        info = js.add_consumer(S, durable_name=C, ack_policy=AckPolicy.EXPLICIT, **pause)
        assert info.cluster is not None and len(info.cluster.replicas or []) == 2  # R3, like its stream
        old = cluster.names.index(info.cluster.leader)
        # On the nodes that stay up: nothing they send is lost to the kill.
        advisories = Advisories([cluster.node_url(i) for i in range(cluster.size) if i != old])
        try:
            if how == "pause_consumer":
                answer = js.pause_consumer(S, C, until)
                assert (answer.paused, answer.pause_until) == (True, until)
                advisories.wait("PAUSE", TIMEOUT, lambda a: a["paused"])  # the leader has applied it
            else:
                assert (info.paused, info.config.pause_until) == (True, until)
            sub = js.pull_subscribe_bind(C, S)
            with pytest.raises(FetchTimeoutError):
                sub.fetch(1, timeout=NOTHING_WAIT)

            cluster.kill(old)
            try:
                elected = advisories.wait("LEADER_ELECTED", ELECTION_WAIT, lambda a: a["leader"] != cluster.names[old])
                new = elected["leader"]
                info = js.consumer_info(S, C)
                assert info.cluster.leader == new
                # The new leader keeps the pause: the same time, still ahead, and nothing delivered.
                assert (info.paused, info.config.pause_until) == (True, until)
                assert 0 < info.pause_remaining <= HOUR.total_seconds() * 1e9
                assert (info.num_pending, info.num_ack_pending, info.delivered.stream_seq) == (3, 0, 0)
                with pytest.raises(FetchTimeoutError):
                    sub.fetch(1, timeout=NOTHING_WAIT)
                assert [i.paused for i in js.consumers_info(S)] == [True]

                # Resumed through jetspark: the new leader applies it and delivers.
                resumed = js.resume_consumer(S, C)
                assert (resumed.paused, resumed.pause_until, resumed.pause_remaining) == (False, None, None)
                advisories.wait("PAUSE", TIMEOUT, lambda a: not a["paused"])
                info = js.consumer_info(S, C)
                assert (info.cluster.leader, info.paused, info.pause_remaining) == (new, None, None)
                assert info.config.pause_until is None
                msgs = sub.fetch(3, timeout=TIMEOUT)
                assert [m.data for m in msgs] == [b"m0", b"m1", b"m2"]
                for m in msgs:
                    m.ack_sync()
            finally:
                cluster.restart(old)
        finally:
            advisories.close()
        # With the node back, the consumer stays resumed with its acks.
        with jetspark.connect(cluster.node_url(old), timeout=TIMEOUT) as back:
            info = back.consumer_info(S, C)
            assert (info.paused, info.config.pause_until) == (None, None)
            assert (info.num_pending, info.num_ack_pending, info.ack_floor.stream_seq) == (0, 0, 3)
