"""A nats:// fetch whose pull request finds no responder (503) for a moment.

A replicated consumer has no responder just after its creation or through its leader's
election (jetspark/remote/pull.py); the fetch then asks the consumer's info and pulls again.
An election cannot be timed from a test, so the moment is made on a real server with a
JetStream domain ("relay") that no server serves: this test's own subscriptions relay that
domain's consumer requests to the server's ``$JS.API`` (the server itself answers each one,
straight to the fetch's inbox), and the relay for pull requests starts only once the fetch's
first request has gone unanswered.
"""

from __future__ import annotations

import asyncio
import threading

import nats
import pytest

import jetspark

pytestmark = pytest.mark.server


class Relay:
    """``$JS.relay.API.CONSUMER.<verb>.S.D`` -> ``$JS.API.CONSUMER.<verb>.S.D``, on its own loop."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.fetching = threading.Event()  # set by the test just before its fetch
        self.next_relayed = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.run(self._start())

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    async def _start(self) -> None:
        self.nc = await nats.connect(self.url)
        self.next_sub = None
        await self.nc.subscribe("$JS.relay.API.CONSUMER.INFO.S.D", cb=self._info)

    async def _forward(self, msg, verb: str) -> None:
        await self.nc.publish(f"$JS.API.CONSUMER.{verb}.S.D", msg.data, reply=msg.reply)

    async def _info(self, msg) -> None:
        if self.fetching.is_set() and self.next_sub is None:
            # The fetch's first pull request has found no responder: from now on one answers.
            self.next_sub = await self.nc.subscribe("$JS.relay.API.CONSUMER.MSG.NEXT.S.D", cb=self._next)
            await self.nc.flush()
        await self._forward(msg, "INFO")

    async def _next(self, msg) -> None:
        self.next_relayed += 1
        await self._forward(msg, "MSG.NEXT")

    def close(self) -> None:
        self.run(self.nc.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def test_a_fetch_whose_request_finds_no_responder_pulls_again_once_the_consumer_answers(js, server):
    js.add_stream(name="S", subjects=["s.>"])
    js.add_consumer("S", durable_name="D")
    for i in range(3):
        js.publish("s.x", b"m%d" % i)
    relay = Relay(server.url)
    try:
        with jetspark.connect(server.url, domain="relay", timeout=5) as through:
            sub = through.pull_subscribe_bind(stream="S", durable="D")
            relay.fetching.set()
            msgs = sub.fetch(3, timeout=5)
            assert [m.data for m in msgs] == [b"m0", b"m1", b"m2"]
            assert relay.next_relayed == 1  # the first request went unanswered; the second was relayed
            assert [m.metadata.sequence.stream for m in msgs] == [1, 2, 3]
    finally:
        relay.close()
