"""The connector's handles, one per store and connection options per process
(jetspark/connector/store.py): Spark's Python workers are reused across tasks, so a
task takes the handle an earlier task opened, unless it can no longer be used."""

from __future__ import annotations

import pytest

from jetspark.connector import store as cache
from jetspark.errors import ServerConnectionError, StoreError
from natsdev.servers import NatsServer


@pytest.fixture
def fresh_cache():
    """The cache emptied before and after the test (its handles closed)."""

    def empty():
        for js in list(cache._handles.values()):
            cache._close_quietly(js)
        cache._handles.clear()

    empty()
    yield cache
    empty()


def test_one_handle_per_store_and_options(fresh_cache, server, tmp_path):
    import jetspark

    jetspark.connect(str(tmp_path / "a")).close()  # an engine store to open
    a = fresh_cache.handle(server.url)
    assert fresh_cache.handle(server.url) is a
    # Other connection options: another handle, even on the same server.
    b = fresh_cache.handle(server.url, (("timeout", "7"),))
    assert b is not a and b.timeout == 7.0
    assert fresh_cache.handle(server.url, (("timeout", "7"),)) is b
    e = fresh_cache.handle(str(tmp_path / "a"))
    assert e is not a and fresh_cache.handle(str(tmp_path / "a")) is e
    e.close()
    assert e.closed and fresh_cache.handle(str(tmp_path / "a")) is not e  # an engine handle too
    assert len(fresh_cache._handles) == 3


def test_two_servers_never_share_a_handle(fresh_cache, server):
    other = NatsServer().start()
    try:
        a, b = fresh_cache.handle(server.url), fresh_cache.handle(other.url)
        assert a is not b
        b.add_stream(name="ONLY_ON_OTHER", subjects=["other.>"])
        assert "ONLY_ON_OTHER" in b.stream_names()
        assert "ONLY_ON_OTHER" not in a.stream_names()
    finally:
        other.stop()


def test_a_closed_handle_is_replaced(fresh_cache, server):
    a = fresh_cache.handle(server.url)
    assert not a.closed
    a.close()
    assert a.closed
    b = fresh_cache.handle(server.url)
    assert b is not a and not b.closed
    assert b.stream_info("KEEPER").config.name == "KEEPER"


def test_a_connection_the_server_closed_is_replaced_not_reused(fresh_cache):
    """The server goes away and the handle's client gives up reconnecting (one attempt
    allowed): its connection is closed for good.  The next task gets a new handle on
    the server, which is back, instead of one whose every call fails."""
    srv = NatsServer().start()
    try:
        opts = (("max_reconnect_attempts", "1"), ("reconnect_time_wait", "0.1"), ("timeout", "10"))
        a = fresh_cache.handle(srv.url, opts)
        a.add_stream(name="S", subjects=["s.>"])
        assert not a.closed
        srv.kill()  # the store stays: start() brings the same server back
        with pytest.raises(ServerConnectionError, match="is closed") as err:
            a.stream_info("S")  # waits out the reconnect attempts, then the connection is closed
        # Closed for good: raised as it is, not repeated through the retry budget.
        assert "retry_budget" not in str(err.value)
        assert a.closed  # its public state says so: the connector's cache reads it
        srv.start()
        with pytest.raises(ServerConnectionError, match="is closed") as err:
            a.stream_info("S")  # and stays so, the server back or not
        assert "retry_budget" not in str(err.value)
        b = fresh_cache.handle(srv.url, opts)
        assert b is not a
        assert b.stream_info("S").config.name == "S"
        assert fresh_cache.handle(srv.url, opts) is b
    finally:
        srv.stop()


def test_a_reconnecting_handle_is_kept(fresh_cache):
    """A connection that is down but reconnecting is the same handle after the server is back."""
    srv = NatsServer().start()
    try:
        a = fresh_cache.handle(srv.url)
        a.add_stream(name="S", subjects=["s.>"])
        srv.kill()
        assert not a.closed  # down, but reconnecting
        srv.start()
        assert fresh_cache.handle(srv.url) is a
        assert a.stream_info("S").config.name == "S"  # calls wait for the reconnect
    finally:
        srv.stop()


def test_a_store_that_does_not_exist_is_not_created_nor_kept(fresh_cache, tmp_path):
    missing = str(tmp_path / "nothing-here")
    with pytest.raises(StoreError):
        fresh_cache.handle(missing)
    assert not (tmp_path / "nothing-here").exists()
    assert fresh_cache._handles == {}
