"""A consumer works out its ack waits (ack_wait, or backoff by delivery count) when it opens
(jetspark/engine/consumer.py): an update of them reopens it, in this handle and in any other
on the store, so the next delivery waits by the new config."""

from __future__ import annotations

import pytest

import jetspark
from jetspark.errors import FetchTimeoutError
from tests.conftest import FakeClock


def _seqs(msgs) -> list[tuple[int, int]]:
    """(stream seq, num_delivered) per message."""
    return [(m.metadata.sequence.stream, m.metadata.num_delivered) for m in msgs]


@pytest.mark.parametrize("change", ["ack_wait", "backoff"])
def test_an_update_of_the_ack_wait_applies_to_the_next_delivery_in_every_handle(tmp_path, change):
    clock = FakeClock()
    old = {"ack_wait": 10.0} if change == "ack_wait" else {"backoff": [10.0, 10.0], "max_deliver": 5}
    new = {"ack_wait": 1.0} if change == "ack_wait" else {"backoff": [1.0, 3.0], "max_deliver": 5}
    with jetspark.connect(tmp_path, clock=clock) as js, jetspark.connect(tmp_path, clock=clock) as other:
        js.add_stream(name="S", subjects=["s.>"])
        for i in range(3):
            js.publish("s.x", b"%d" % i)
        js.add_consumer("S", durable_name="D", ack_policy="explicit", **old)
        sub = js.pull_subscribe_bind("D", stream="S")
        theirs = other.pull_subscribe_bind("D", stream="S")
        assert _seqs(sub.fetch(1)) == [(1, 1)]  # due again at +10 s
        assert other.consumer_info("S", "D").config.ack_wait == 10.0  # the other handle has it open

        js.update_consumer("S", durable_name="D", ack_policy="explicit", **new)
        assert _seqs(sub.fetch(1)) == [(2, 1)]  # due again at +1 s
        assert _seqs(theirs.fetch(1)) == [(3, 1)]  # likewise, from the other handle
        clock.advance(2)
        # 2 and 3 are due by the new wait; 1 keeps the wait it was delivered with.
        assert _seqs(sub.fetch(3, no_wait=True)) == [(2, 2), (3, 2)]
        if change == "backoff":
            # The second delivery waits by the new config's second step (3 s), not 1 s again.
            clock.advance(2)
            with pytest.raises(FetchTimeoutError):
                theirs.fetch(3, no_wait=True)
            clock.advance(2)
            assert _seqs(theirs.fetch(3, no_wait=True)) == [(2, 3), (3, 3)]
        clock.advance(10)
        assert _seqs(theirs.fetch(1, no_wait=True))[0] == (1, 2)
