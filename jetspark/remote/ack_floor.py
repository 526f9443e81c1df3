"""``advance_ack_floor``: move a durable consumer's ack floor to a stream sequence.

Fetch exactly the durable's matching messages up to ``seq`` and acknowledge
them (the last of each pull under ack policy all); the count comes from
``num_pending`` of the durable and of a throw-away consumer starting after
``seq``.  Work-queue streams allow no second consumer over a durable's
subjects: there the pulls are bounded by the sequence span instead.
"""

from __future__ import annotations

from typing import Optional

from jetspark.api import AckPolicy, RetentionPolicy, SequenceInfo
from jetspark.remote import jsapi
from jetspark.remote.puller import PULL_BATCH, Puller, count_from
from jetspark.remote.session import PROGRESS, Session


def advance_ack_floor(session: Session, stream: str, durable: str, seq: int) -> SequenceInfo:
    return session.run(_advance(session, stream, durable, seq), what=f"advance_ack_floor of {durable!r} on {stream!r}", timeout=PROGRESS)


async def _advance(session: Session, stream: str, durable: str, seq: int) -> SequenceInfo:
    info = await jsapi.consumer_info(session, stream, durable)
    cfg = info.config
    filters = cfg.filter_subjects or ([cfg.filter_subject] if cfg.filter_subject else None)
    policy = cfg.ack_policy or AckPolicy.EXPLICIT
    stall = 0
    for _ in range(1000):
        floor = info.ack_floor.stream_seq
        delivered = info.delivered.stream_seq
        if floor >= seq or delivered >= seq:
            break
        sinfo = await jsapi.stream_info(session, stream)
        if seq >= sinfo.state.last_seq:
            count = info.num_pending
        elif sinfo.config.retention == RetentionPolicy.WORK_QUEUE:
            # A work-queue stream allows no counting consumer next to the durable: ask for
            # no more than (delivered, seq] can hold.  Where that span has gaps (deleted
            # messages, other subjects) a delivery past seq can come; it is handed back (NAK).
            count = min(info.num_pending, seq - delivered)
        else:
            count = info.num_pending - await count_from(session, stream, seq + 1, filters)  # matching messages in (delivered, seq]
        if count <= 0:
            break
        got = await _fetch_and_ack(session, stream, durable, seq, count, policy, cfg.max_ack_pending)
        info = await jsapi.consumer_info(session, stream, durable)
        if got == 0:
            stall += 1
            if stall >= 3:
                break
    return SequenceInfo(consumer_seq=info.ack_floor.consumer_seq, stream_seq=info.ack_floor.stream_seq)


async def _fetch_and_ack(session: Session, stream: str, durable: str, seq: int, count: int, policy: AckPolicy, max_ack_pending: Optional[int]) -> int:
    """Pull ``count`` messages from the durable (one request in flight) and acknowledge those <= seq."""
    nc = await session.ready()
    pull = PULL_BATCH if not max_ack_pending or max_ack_pending < 0 else max(1, min(PULL_BATCH, max_ack_pending))
    puller = Puller(session, stream, durable, 1 << 62, limit=count, pull_batch=pull, in_flight=1, eager=False)
    await puller.start()
    got = 0
    try:
        while not puller.done:
            chunk = await puller.next_chunk(pull)
            if not len(chunk):
                break
            got += len(chunk)
            if policy == AckPolicy.NONE:
                continue
            mine = [r.decode() for r, s in zip(chunk.replies, chunk.seqs) if s <= seq]
            late = [r.decode() for r, s in zip(chunk.replies, chunk.seqs) if s > seq]
            if policy == AckPolicy.EXPLICIT:
                for r in mine[:-1]:
                    await nc.publish(r, b"+ACK")
            if mine:
                await session.ack(mine[-1], b"+ACK", session.timeout)  # best effort: consumer_info tells the truth
            for r in late:  # should not happen (the count stops at seq); hand them back at once
                await nc.publish(r, b"-NAK")
            if late:
                break
    finally:
        await puller.close()
    return got
