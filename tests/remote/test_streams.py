"""Streams and messages over a real server: the engine's verbs, dataclasses and errors."""

from __future__ import annotations

import datetime as dt

import pytest

from jetspark import (
    BadRequestError,
    DiscardPolicy,
    MsgNotFoundError,
    NoStreamResponseError,
    PubAck,
    RawStreamMsg,
    RetentionPolicy,
    ServerError,
    ServiceUnavailableError,
    StorageType,
    StreamConfig,
    StreamInfo,
    StreamNotFoundError,
)

pytestmark = pytest.mark.server


def test_stream_lifecycle(js, name):
    s = name()
    info = js.add_stream(name=s, subjects=[f"{s}.>"], max_age=3600.0, storage="memory", metadata={"team": "data"})
    assert isinstance(info, StreamInfo)
    c = info.config
    assert (c.name, c.subjects, c.max_age, c.storage, c.retention, c.duplicate_window) == (
        s,
        [f"{s}.>"],
        3600.0,
        StorageType.MEMORY,
        RetentionPolicy.LIMITS,
        120.0,
    )
    assert c.metadata == {"team": "data"}  # the server's _nats.* keys are not the user's
    assert info.created.tzinfo is not None and info.state.messages == 0
    assert (
        js.add_stream(
            StreamConfig(
                name=s, subjects=[f"{s}.>"], max_age=3600.0, storage=StorageType.MEMORY, metadata={"team": "data"}
            )
        ).config
        == c
    )
    updated = js.update_stream(c.evolve(max_msgs=10, description="ten"))
    assert (updated.config.max_msgs, updated.config.description) == (10, "ten")
    assert s in js.stream_names()
    assert [i.config.name for i in js.streams_info() if i.config.name == s] == [s]
    assert js.find_stream_name_by_subject(f"{s}.a.b") == s
    assert js.delete_stream(s) is True
    with pytest.raises(StreamNotFoundError) as err:
        js.stream_info(s)
    assert (err.value.code, err.value.err_code, err.value.description) == (404, 10059, "stream not found")


def test_stream_errors_carry_the_servers_codes(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    with pytest.raises(BadRequestError) as err:  # same name, other config
        js.add_stream(name=s, subjects=[f"{s}.other"])
    assert err.value.err_code == 10058
    with pytest.raises(BadRequestError) as err:
        js.add_stream(name=name(), subjects=[f"{s}.x"])
    assert err.value.err_code == 10065  # subjects overlap
    with pytest.raises(ServerError) as err:
        js.add_stream(name="a.b", subjects=["ab.>"])
    assert (err.value.code, err.value.err_code) == (500, 10052)
    with pytest.raises(ServerError) as err:
        js.update_stream(name=s, subjects=[f"{s}.>"], storage="memory")
    assert err.value.err_code == 10052 and "storage type" in err.value.description
    with pytest.raises(StreamNotFoundError):
        js.update_stream(name=name(), subjects=["zz.>"])
    for call in (
        lambda: js.delete_stream("nope"),
        lambda: js.purge_stream("nope"),
        lambda: js.get_msg("nope", 1),
        lambda: js.stream_info("a.b"),
    ):
        with pytest.raises(StreamNotFoundError):
            call()
    with pytest.raises(StreamNotFoundError):
        js.find_stream_name_by_subject("nobody.listens")
    with pytest.raises(BadRequestError, match="unknown stream config"):
        js.add_stream(name=s, bogus=1)


def test_listing_pages_past_the_servers_page_size(js, name):
    prefix = name("P")
    names = [f"{prefix}_{i:03d}" for i in range(260)]  # STREAM.LIST pages 256 at a time
    for n in names:
        js.add_stream(name=n, subjects=[f"{n}.>"], storage="memory")
    assert [n for n in js.stream_names() if n.startswith(prefix)] == names
    assert [i.config.name for i in js.streams_info() if i.config.name.startswith(prefix)] == names


def test_publish_and_get(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    ack = js.publish(f"{s}.a", b"one", headers={"Nats-Msg-Id": "m1", "X-Num": "7"})
    assert ack == PubAck(stream=s, seq=1)
    assert js.publish(f"{s}.a", b"one", headers={"Nats-Msg-Id": "m1"}).duplicate is True
    js.publish(f"{s}.b", bytearray(b"two"), headers={"X-Multi": ["1", "2"]})
    js.publish(f"{s}.a", b"three")
    m = js.get_msg(s, 1)
    assert isinstance(m, RawStreamMsg)
    assert (m.subject, m.seq, m.data, m.stream, m.headers) == (
        f"{s}.a",
        1,
        b"one",
        s,
        {"Nats-Msg-Id": "m1", "X-Num": "7"},
    )
    assert m.time.tzinfo is not None and abs(m.time - dt.datetime.now(dt.timezone.utc)) < dt.timedelta(minutes=1)
    multi = js.get_msg(s, 2)
    assert multi.hdrs.count(b"X-Multi:") == 2 and multi.headers == {"X-Multi": "2"}
    assert js.get_last_msg(s, f"{s}.a").seq == 3
    assert js.get_msg(s, next_by_subj=f"{s}.b").seq == 2
    assert js.delete_msg(s, 2) is True
    with pytest.raises(MsgNotFoundError) as err:
        js.get_msg(s, 2)
    assert (err.value.code, err.value.err_code) == (404, 10037)
    state = js.stream_info(s, deleted_details=True).state
    assert (state.messages, state.num_deleted, state.deleted) == (2, 1, [2])
    assert js.stream_info(s, subjects_filter=">").state.subjects == {f"{s}.a": 2}


def test_publish_errors(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"], max_msgs=1, discard=DiscardPolicy.NEW)
    with pytest.raises(NoStreamResponseError):
        js.publish("nobody.captures.this", b"x")
    with pytest.raises(NoStreamResponseError):
        js.publish(f"{s}..x", b"x")
    with pytest.raises(BadRequestError):
        js.publish(f"{s}.has space", b"x")
    with pytest.raises(BadRequestError) as err:
        js.publish(f"{s}.a", b"x", stream="OTHER")
    assert err.value.err_code == 10060
    js.publish(f"{s}.a", b"x")
    with pytest.raises(ServiceUnavailableError) as err:
        js.publish(f"{s}.a", b"y")
    assert (err.value.code, err.value.err_code) == (503, 10077)


def test_purge_variants(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    for i in range(10):
        js.publish(f"{s}.{'a' if i % 2 else 'b'}", b"%d" % i)
    assert js.purge_stream(s, subject=f"{s}.a") is True
    assert js.stream_info(s).state.messages == 5
    js.purge_stream(s, keep=2)
    assert js.stream_info(s).state.messages == 2
    js.publish(f"{s}.b", b"10")
    js.purge_stream(s, seq=10)  # everything below seq 10
    assert js.stream_info(s).state.messages == 1 and js.get_last_msg(s, f"{s}.b").seq == 11
    js.purge_stream(s)
    assert js.stream_info(s).state.messages == 0
