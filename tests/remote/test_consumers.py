"""Consumers, pull subscriptions and message acks over a real server."""

from __future__ import annotations

import time

import pytest

from jetspark import (
    AckPolicy,
    BadRequestError,
    ConsumerConfig,
    ConsumerInfo,
    ConsumerNotFoundError,
    DeliverPolicy,
    FetchTimeoutError,
    RetentionPolicy,
    SequenceInfo,
    ServerError,
    StreamNotFoundError,
)
from jetspark.api import MsgMetadata

pytestmark = pytest.mark.server


@pytest.fixture
def stream(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    for i in range(10):
        js.publish(f"{s}.{'a' if i % 2 else 'b'}", b"m%d" % i)
    return s


def test_consumer_verbs(js, stream):
    info = js.add_consumer(
        stream,
        durable_name="D",
        ack_wait=30.0,
        filter_subject=f"{stream}.a",
        deliver_policy="all",
        backoff=None,
        metadata={"k": "v"},
    )
    assert isinstance(info, ConsumerInfo)
    assert (info.name, info.stream_name, info.num_pending, info.config.ack_wait, info.config.filter_subject) == (
        "D",
        stream,
        5,
        30.0,
        f"{stream}.a",
    )
    assert info.config.ack_policy == AckPolicy.EXPLICIT and info.config.metadata == {"k": "v"}
    assert js.add_consumer(stream, info.config).config == info.config  # same config: no-op
    assert js.add_consumer(stream, info.config.evolve(ack_wait=10.0)).config.ack_wait == 10.0  # add updates
    with pytest.raises(BadRequestError) as err:
        js.create_consumer(stream, info.config.evolve(ack_wait=20.0))
    assert err.value.err_code == 10148
    assert js.create_consumer(stream, name="C2", ack_policy=AckPolicy.NONE).config.ack_policy == AckPolicy.NONE
    assert js.update_consumer(stream, name="C2", ack_policy=AckPolicy.NONE, description="d").config.description == "d"
    with pytest.raises(BadRequestError) as err:
        js.update_consumer(stream, name="C3")
    assert err.value.err_code == 10149
    assert [c.name for c in js.consumers_info(stream)] == ["C2", "D"]
    assert js.consumer_info(stream, "D").name == "D"
    assert js.delete_consumer(stream, "D") is True
    with pytest.raises(ConsumerNotFoundError) as err:
        js.consumer_info(stream, "D")
    assert (err.value.code, err.value.err_code) == (404, 10014)
    with pytest.raises(ConsumerNotFoundError):
        js.delete_consumer(stream, "D")
    with pytest.raises(StreamNotFoundError):
        js.add_consumer("NOPE", durable_name="X")
    with pytest.raises(BadRequestError, match="unknown consumer config"):
        js.add_consumer(stream, durable="X")
    with pytest.raises(ServerError) as err:
        js.add_consumer(stream, durable_name="a.b")
    assert err.value.err_code == 10052


def test_fetch_and_acks(js, stream):
    sub = js.pull_subscribe(f"{stream}.a", durable="W", stream=stream)
    msgs = sub.fetch(batch=3, timeout=1)
    assert [m.data for m in msgs] == [b"m1", b"m3", b"m5"]
    md = msgs[0].metadata
    assert isinstance(md, MsgMetadata)
    assert (md.stream, md.consumer, md.sequence.stream, md.sequence.consumer, md.num_delivered, md.num_pending) == (
        stream,
        "W",
        2,
        1,
        1,
        4,
    )
    for m in msgs:
        m.ack()  # fire-and-forget; confirmed before the next call
    assert js.consumer_info(stream, "W").ack_floor == SequenceInfo(
        consumer_seq=3, stream_seq=6, last_active=js.consumer_info(stream, "W").ack_floor.last_active
    )
    rest = sub.fetch(batch=10, timeout=1)
    assert [m.metadata.sequence.stream for m in rest] == [8, 10]
    rest[0].ack_sync()
    rest[1].nak()
    again = sub.fetch(batch=1, timeout=2)
    assert again[0].metadata.sequence.stream == 10 and again[0].metadata.num_delivered == 2
    again[0].term()
    info = js.consumer_info(stream, "W")
    assert (info.num_ack_pending, info.ack_floor.stream_seq) == (0, 10)
    t = time.monotonic()
    with pytest.raises(FetchTimeoutError):
        sub.fetch(batch=1, timeout=0.3)
    assert time.monotonic() - t < 2
    with pytest.raises(TimeoutError):
        sub.fetch(batch=1, no_wait=True)
    # the same durable again binds it
    assert js.pull_subscribe(f"{stream}.a", durable="W", stream=stream).consumer == "W"


def test_nak_with_delay_and_in_progress(js, stream):
    js.add_consumer(stream, durable_name="N", ack_wait=1.0)
    sub = js.pull_subscribe_bind(durable="N", stream=stream)
    m = sub.fetch(1, timeout=1)[0]
    m.nak(delay=0.5)
    nxt = sub.fetch(1, timeout=1)[0]
    assert nxt.metadata.sequence.stream == 2  # the nak'd one waits
    nxt.in_progress()
    nxt.ack()
    time.sleep(0.6)
    back = [m for m in sub.fetch(10, timeout=1) if m.metadata.sequence.stream == 1]
    assert back and back[0].metadata.num_delivered == 2


def test_ephemeral_pull_subscribe_and_bind_errors(js, stream):
    sub = js.pull_subscribe(
        f"{stream}.b", config=ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.LAST)
    )
    info = sub.consumer_info()
    assert info.config.durable_name is None and info.config.filter_subject == f"{stream}.b"
    assert [m.data for m in sub.fetch(5, timeout=1)] == [b"m8"]
    sub.unsubscribe()
    with pytest.raises(ConsumerNotFoundError):
        js.pull_subscribe_bind(durable="missing", stream=stream)
    by_subject = js.pull_subscribe(f"{stream}.a")  # the stream found from the subject
    assert by_subject.stream == stream
    big = js.pull_subscribe(f"{stream}.>", durable="B", stream=stream)
    assert len(big.fetch(10, timeout=1, max_bytes=120)) < 10  # max_bytes bounds the batch


def test_work_queue_acks_remove_messages(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"], retention=RetentionPolicy.WORK_QUEUE)
    js.add_consumer(s, durable_name="Q")
    for i in range(4):
        js.publish(f"{s}.x", b"%d" % i)
    sub = js.pull_subscribe_bind(durable="Q", stream=s)
    for m in sub.fetch(4, timeout=1):
        m.ack()
    assert js.stream_info(s).state.messages == 0
    with pytest.raises(BadRequestError) as err:  # work queues take explicit-ack consumers only
        js.add_consumer(s, durable_name="bad", ack_policy="none", filter_subject=f"{s}.y")
    assert err.value.err_code == 10084
