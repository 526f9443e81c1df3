"""The reply subject of a consumer delivery (``$JS.ACK...``): its one grammar, built and read.

A consumer delivers each message with a reply subject that carries its metadata
and is where its acknowledgement goes:

- v1 (nine tokens): ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time ns>.<pending>``;
- v2 (eleven or more): ``$JS.ACK.<domain>.<account hash>.<stream>.<consumer>...`` the same
  five numbers, then a random token (and maybe more); the domain ``_`` means none.

The engine builds v1 (``build``); the nats-py backend reads either (``parse``, a
message at a time; ``stream_token`` where only the offset is wanted).
``jetspark.protocol.deliveries.ack_fields`` reads the same grammar for a whole
run of frames at once, with array operations.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

__all__ = ["PREFIX", "AckReply", "build", "parse", "stream_seq", "stream_token"]

PREFIX = "$JS.ACK."
V1_TOKENS = 9
V2_MIN_TOKENS = 11


class AckReply(NamedTuple):
    """What a delivery's reply subject says about it."""

    stream: str
    consumer: str
    delivered: int
    stream_seq: int
    consumer_seq: int
    time_ns: int
    pending: int
    domain: Optional[str] = None


def build(
    stream: str, consumer: str, delivered: int, stream_seq: int, consumer_seq: int, time_ns: int, pending: int
) -> str:
    """The v1 reply subject of a delivery (as a server without a domain sends it)."""
    return f"{PREFIX}{stream}.{consumer}.{delivered}.{stream_seq}.{consumer_seq}.{time_ns}.{pending}"


def stream_token(reply: Union[str, bytes]) -> int:
    """Index of the stream's token in ``reply`` split on ``.``: 2 (v1) or 4 (v2).

    Raises ValueError for a subject that is no delivery's reply."""
    n = (reply.count(".") if isinstance(reply, str) else reply.count(b".")) + 1
    if n == V1_TOKENS:
        return 2
    if n >= V2_MIN_TOKENS:
        return 4
    raise ValueError(f"not a JetStream delivery reply subject: {reply[:200]!r}")


def parse(reply: str) -> AckReply:
    """A delivery's reply subject, read (ValueError if it is none)."""
    t = reply.split(".")
    o = stream_token(reply)
    domain = None if o == 2 or t[2] == "_" else t[2]
    try:
        return AckReply(
            t[o], t[o + 1], int(t[o + 2]), int(t[o + 3]), int(t[o + 4]), int(t[o + 5]), int(t[o + 6]), domain
        )
    except ValueError:
        raise ValueError(f"not a JetStream delivery reply subject: {reply[:200]!r}") from None


def stream_seq(reply: bytes) -> int:
    """The stream sequence of the delivery whose reply subject is ``reply``."""
    return int(reply.split(b".")[stream_token(reply) + 3])
