"""What the engine does differently from nats-server (docs/reference/differences-nats-server.md),
each on the engine and on a real nats-server (v2.15.1), which decides its side.

- Acks: ``Msg.ack()`` is applied by the engine before the handle's next call (``ack_sync()``
  at once); a server is sent it at once, so another client sees it with no further call.
- Push subscriptions take their messages when they need them on the engine (up to 64 at
  a time, when ``next_msg`` asks), so ``consumer_info`` counts them as delivered then; a
  server pushes them to a bound subscription as they are stored.
- ``clock=``, ``sync=`` and ``create=`` are the engine's: a nats:// URL with any of them
  is a ``TypeError`` before any connection is tried.
"""

from __future__ import annotations

import pytest

import jetspark
from jetspark.engine.push import TAKE
from tests.contract import consumer_support as cs
from tests.contract.consumer_support import server_streams_removed, settles  # noqa: F401  (autouse)
from tests.servers import free_port

# An upper bound for the server's work after it answered (not a pause).
WAIT = 10.0


def _stream(js, n: int) -> None:
    cs.add_stream(js, name="S", subjects=["a.*"])
    for seq in range(1, n + 1):
        assert js.publish("a.x", b"m%d" % seq).seq == seq


def _second_handle(js):
    """Another client on the same streams: a handle on the same store, or on the same server."""
    return jetspark.connect(js.url if js.is_server else js.path)


def test_an_ack_reaches_others_at_the_handle_s_next_call_on_the_engine_and_at_once_on_a_server(jetspark_backend):
    js = jetspark_backend
    _stream(js, 3)
    js.add_consumer("S", durable_name="D", ack_policy="explicit")
    sub = js.pull_subscribe_bind("D", "S")
    with _second_handle(js) as other:

        def acked():
            info = other.consumer_info("S", "D")
            return info.num_ack_pending, info.ack_floor.stream_seq

        [m1] = sub.fetch(1, timeout=5)
        assert acked() == (1, 0)
        m1.ack()
        if js.is_server:
            # Sent at once: the server applies it with no further call from this handle.
            settles(acked, (0, 1), WAIT)
        else:
            # Held by the handle until its next call, whatever that call is.
            assert acked() == (1, 0)
            js.stream_info("S")
            assert acked() == (0, 1)

        # ack_sync: applied (and, on a server, confirmed) before it returns, on both.
        [m2] = sub.fetch(1, timeout=5)
        m2.ack_sync()
        assert acked() == (0, 2)


def test_a_push_subscription_takes_its_messages_when_it_needs_them_on_the_engine(js):
    n = TAKE + 36
    _stream(js, n)
    js.add_consumer("S", durable_name="D", deliver_subject="deliver.d", ack_policy="explicit")
    sub = js.subscribe_bind("S", "D", manual_ack=True)

    def delivered():
        info = js.consumer_info("S", "D")
        return info.delivered.stream_seq, info.num_ack_pending

    try:
        if js.is_server:
            # Bound, the consumer pushes everything (max_ack_pending 1000) before anyone asks.
            cs.settles(delivered, (n, n), WAIT)
        else:
            # Nothing is delivered until next_msg asks; then up to TAKE at once.
            assert delivered() == (0, 0)
        got = [sub.next_msg(timeout=5).data]
        assert delivered() == ((n, n) if js.is_server else (TAKE, TAKE))
        got += [sub.next_msg(timeout=5).data for _ in range(TAKE - 1)]
        assert delivered() == ((n, n) if js.is_server else (TAKE, TAKE))  # the first take is not all handed out yet
        got += [sub.next_msg(timeout=5).data for _ in range(n - TAKE)]
        assert delivered() == (n, n)
        assert got == [b"m%d" % seq for seq in range(1, n + 1)]
    finally:
        sub.unsubscribe()


@pytest.mark.parametrize(
    "setting", [dict(clock=lambda: 0), dict(sync="fsync"), dict(sync="os"), dict(create=False), dict(create=True)]
)
def test_the_engine_s_settings_on_a_server_url_are_a_type_error_before_connecting(setting):
    # Nothing listens there: a connection tried would be a connection error, not this.
    url = f"nats://127.0.0.1:{free_port()}"
    with pytest.raises(TypeError, match=r"clock=, sync= and create= apply to the embedded engine \(a path\), not to"):
        jetspark.connect(url, **setting)


def test_the_engine_takes_its_settings_and_refuses_a_bad_sync(tmp_path):
    with jetspark.connect(tmp_path / "store", sync="fsync", clock=lambda: 10**18, create=True) as js:
        js.add_stream(name="S", subjects=["a.*"])
        assert js.publish("a.x", b"x").seq == 1
        assert js.get_msg("S", 1).time.timestamp() == 10**9
    with pytest.raises(ValueError, match="sync must be 'os' or 'fsync', not 'always'"):
        jetspark.connect(tmp_path / "other", sync="always")
    assert not (tmp_path / "other").exists()
    # And a server's connection options are refused on a path.
    with pytest.raises(TypeError, match=r"connection options \['token'\] apply to a nats:// server"):
        jetspark.connect(tmp_path / "store", token="t")
