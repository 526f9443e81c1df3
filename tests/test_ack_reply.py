"""jetspark.protocol.ack_reply: the one grammar of a delivery's ``$JS.ACK`` reply subject.

What it builds, nats-py reads back the same; what it reads agrees with nats-py's own
reader and with the bulk reader (``deliveries.ack_fields``) on the same subjects; a
subject that is no delivery's reply is refused, never read as numbers."""

from __future__ import annotations

import pytest
from nats.aio.msg import Msg as NatsMsg

from jetspark.protocol import ack_reply
from jetspark.protocol import frames as F
from jetspark.protocol.deliveries import ack_fields

V1 = "$JS.ACK.ORDERS.spark.3.1041.77.1764139000000000001.12"
V2 = "$JS.ACK.hub.ACCHASH.ORDERS.spark.3.1041.77.1764139000000000001.12.r4nd0m"
V2_NO_DOMAIN = "$JS.ACK._.ACCHASH.ORDERS.spark.3.1041.77.1764139000000000001.0.r4nd0m"


def test_build_gives_the_v1_subject_and_parse_reads_it_back():
    reply = ack_reply.build("ORDERS", "spark", 3, 1041, 77, 1764139000000000001, 12)
    assert reply == V1
    assert ack_reply.parse(reply) == ("ORDERS", "spark", 3, 1041, 77, 1764139000000000001, 12, None)
    got = ack_reply.parse(reply)
    assert (got.stream_seq, got.consumer_seq, got.delivered, got.pending) == (1041, 77, 3, 12)


@pytest.mark.parametrize("reply", [V1, V2, V2_NO_DOMAIN])
def test_parse_agrees_with_nats_py(reply):
    theirs = NatsMsg(_client=None, subject="x", reply=reply).metadata
    ours = ack_reply.parse(reply)
    assert (ours.stream, ours.consumer) == (theirs.stream, theirs.consumer)
    assert (ours.stream_seq, ours.consumer_seq) == (theirs.sequence.stream, theirs.sequence.consumer)
    assert (ours.delivered, ours.pending) == (theirs.num_delivered, theirs.num_pending)
    assert abs(ours.time_ns / 1e9 - theirs.timestamp.timestamp()) < 1e-3  # nats-py keeps a float's precision
    # nats-py shows "no domain" as an empty string; jetspark as None.
    assert ours.domain == (theirs.domain or None)


def test_the_domain_and_the_stream_token():
    assert ack_reply.parse(V2).domain == "hub" and ack_reply.parse(V2_NO_DOMAIN).domain is None
    assert ack_reply.stream_token(V1) == 2 and ack_reply.stream_token(V2) == 4
    assert ack_reply.stream_token(V1.encode()) == 2 and ack_reply.stream_token(V2.encode()) == 4
    assert ack_reply.stream_seq(V1.encode()) == ack_reply.stream_seq(V2.encode()) == 1041


@pytest.mark.parametrize("reply", [V1, V2, V2_NO_DOMAIN])
def test_the_bulk_reader_reads_what_parse_reads(reply):
    buf = f"MSG a 1 {reply} 1\r\nx\r\nMSG a 1 {reply} 1\r\ny\r\n".encode()
    f, _ = F.scan(buf)
    bulk = ack_fields(buf, f)
    one = ack_reply.parse(reply)
    assert bulk.sseq.tolist() == [one.stream_seq] * 2 and bulk.cseq.tolist() == [one.consumer_seq] * 2
    assert bulk.time.tolist() == [one.time_ns] * 2 and bulk.last.tolist() == [one.pending == 0] * 2


@pytest.mark.parametrize(
    "reply",
    [
        "_INBOX.abc",  # a plain reply: no delivery
        "",
        "$JS.ACK.ORDERS.spark.3.1041.77.1764139000000000001",  # 8 tokens: one short
        "$JS.ACK.hub.ORDERS.spark.3.1041.77.1764139000000000001.12",  # 10 tokens: neither form
        "$JS.ACK.ORDERS.spark.3.x1041.77.1764139000000000001.12",  # a sequence that is no number
        "$JS.ACK.hub.ACCHASH.ORDERS.spark.3.1041.77.now.12.r4nd0m",
    ],
)
def test_a_subject_that_is_no_delivery_reply_is_refused(reply):
    with pytest.raises(ValueError, match="not a JetStream delivery reply subject"):
        ack_reply.parse(reply)
