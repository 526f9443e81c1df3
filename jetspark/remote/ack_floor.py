"""``advance_ack_floor``: move a durable consumer's ack floor to a stream sequence, exactly.

The server has no "ack up to" request, so the call acknowledges, round by round,
what the consumer still holds at or below ``seq``, re-reading the consumer's state
from the server before each round (never from what this client has received: on a
cluster a pull's closing status can overtake the tail of its messages):

1. Done when nothing the consumer matches is stored in (ack floor, ``seq``]
   (``reached``: one ``next_by_subj`` get per filter).  Acknowledged messages are
   below the floor or, under ack policy explicit, removed or counted as not pending,
   so this is exactly "every matching message <= seq is acknowledged".
2. Deliveries already pending at or below ``seq`` (fetched earlier, by anyone, and
   not acknowledged) are acknowledged on their ack subject
   (``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>...``):
   the server finds a pending delivery by its stream sequence, ignores an ack for
   one that is not pending (``processAckMsg``) and removes a message from an
   interest or work-queue stream only when no consumer still needs it.  Under
   ack policy explicit each candidate sequence is acknowledged (only the ones the
   filter matches: an ack for another subject could release a message nobody
   else consumes); under ack policy all one ack of the last of them.
3. Messages not yet delivered in (delivered, ``seq``] are counted on the server
   (``undelivered``) and pulled with a batch never larger than that count (no
   ``max_bytes``), so the server cannot deliver past ``seq``; they are acked as
   they come, the last one as a request so the next round's consumer info sees it.
   A pull is over when all its messages came or its own closing status did (sent
   once the server served it); only then is the consumer re-read.
A consumer that cannot deliver (paused, push) or whose limits stop it (max_ack_pending
held by deliveries past ``seq``) raises ``AckFloorError`` at once.  Rounds that move
nothing three times running, or a floor that does not show the call's acks within the
timeout, are a transient state (a consumer leader answering from a copy of the stream
still catching up, acks in transit through a raft group): the call starts over, after a
pause, from the consumer's state as the server then reports it, and raises
``AckFloorError`` only when the retry budget is spent.  Nothing read from such a state
moves the floor past what the call acknowledged itself: the floor is never left short
silently, nor moved on a stale count.

The only way left to deliver past ``seq`` is a message in (delivered, ``seq``]
removed between the count and the pull (a concurrent delete or age limit); such
a delivery is handed back (NAK) and logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Optional, Sequence

from jetspark.api import AckPolicy, ConsumerInfo, RetentionPolicy, SequenceInfo
from jetspark.errors import AckFloorError, JetSparkError, MsgNotFoundError
from jetspark.protocol import ack_reply
from jetspark.protocol import subjects as subj
from jetspark.remote import jsapi
from jetspark.remote.fastpath import RawInbox, status_of
from jetspark.remote.range_reader import GET_WINDOW, PULL_BATCH, PULL_MAX_BYTES, count_from, first_stored
from jetspark.remote.session import PROGRESS, Session

log = logging.getLogger("jetspark.remote")

# Rounds in a row that move neither the floor nor the consumer before the call starts over
# (within the retry budget), and the pause after each such round, times its number.
STALLS = 3
STALL_WAIT = 0.05
# Ack subjects sent per round for deliveries already pending (then the floor is re-read).
FORGE_CHUNK = 16384
# Matching sequences listed per round where they cannot be counted (gets of the range).
WALK_CHUNK = 4096
# A stream with at most this many deleted sequences inside it is counted from their list.
DETAILS_MAX = 100_000


class _NoProgress(AckFloorError):
    """Rounds that moved nothing, or a floor that did not show the call's acks in time, on a
    consumer that can deliver: a transient state (a consumer leader elected on a node whose
    copy of the stream is still behind answers from that copy; a replicated consumer applies
    acks through its raft group), waited out within the retry budget, the call starting
    over from the consumer's state as the server then gives it."""


def advance_ack_floor(session: Session, stream: str, durable: str, seq: int) -> SequenceInfo:
    # Acknowledging is idempotent: through a leader election, or a state that makes no
    # progress for a while, the call starts over from the consumer's state on the server
    # (jetspark.remote.retry), within the session's retry budget.
    what = f"advance_ack_floor of {durable!r} on {stream!r}"
    try:
        return session.run_retrying(lambda: _advance(session, stream, durable, seq), what=what, timeout=PROGRESS,
                                    also=lambda e: isinstance(e, _NoProgress))  # fmt: skip
    except _NoProgress as exc:
        raise AckFloorError(
            exc.stream,
            exc.consumer,
            exc.seq,
            exc.floor,
            f"{exc.reason}, and still so after the retry_budget ({session.retry_budget:g} s)",
        ) from None


def _filters(info: ConsumerInfo) -> Optional[list[str]]:
    cfg = info.config
    filters = cfg.filter_subjects or ([cfg.filter_subject] if cfg.filter_subject else None)
    if not filters or ">" in filters:
        return None
    return list(filters)


class _Floor:
    """One call: the consumer, its filters and ack policy, and the inbox its pulls answer to."""

    def __init__(self, session: Session, stream: str, durable: str, seq: int, info: ConsumerInfo) -> None:
        self.session = session
        self.stream = stream
        self.durable = durable
        self.seq = seq
        self.filters = _filters(info)
        self.policy = info.config.ack_policy or AckPolicy.EXPLICIT
        self.max_ack_pending = info.config.max_ack_pending
        self.retention: Optional[RetentionPolicy] = None
        self.inbox: Optional[RawInbox] = None
        self.inbox_prefix = ""
        self.requests = 0
        self.received = 0  # the highest stream sequence this call was delivered
        self.acked = 0  # the highest stream sequence this call acknowledged
        self.tried_last = False
        self.msg_bytes = 1  # the stream's mean message size: pulls ask for about PULL_MAX_BYTES

    def fail(self, info: ConsumerInfo, reason: str) -> AckFloorError:
        return AckFloorError(self.stream, self.durable, self.seq, info.ack_floor.stream_seq, reason)

    async def stalled(self, info: ConsumerInfo) -> AckFloorError:
        """The error for rounds that moved nothing: final when the consumer cannot deliver
        (paused, push), else ``_NoProgress``, which the call waits out."""
        raw = await self.session.api(
            self.session.consumer_subject("INFO", self.stream, self.durable), what=f"consumer_info {self.durable!r}"
        )
        cfg = raw.get("config") or {}
        if raw.get("paused"):
            return self.fail(info, f"the consumer is paused (until {cfg.get('pause_until')}): it delivers nothing")
        if cfg.get("deliver_subject"):
            return self.fail(
                info, "it is a push consumer: the server delivers its messages to its subscribers, not to pulls"
            )
        return _NoProgress(
            self.stream, self.durable, self.seq, info.ack_floor.stream_seq,
            f"the server delivered and acknowledged nothing more in {STALLS} rounds ({info.num_pending} matching "
            f"messages undelivered, {info.num_ack_pending} deliveries ack-pending, the last delivered at stream seq "
            f"{info.delivered.stream_seq})",
        )  # fmt: skip

    # ------------------------------------------------------------------ reading the stream

    async def next_matching(self, start: int) -> Optional[int]:
        """The first stored sequence >= ``start`` that the consumer matches, or None."""
        return await first_stored(self.session, self.stream, start, self.filters)

    async def _subject_at(self, seq: int) -> Optional[str]:
        try:
            resp = await self.session.api(
                self.session.stream_subject("MSG.GET", self.stream),
                {"seq": seq},
                what=f"reading stream {self.stream!r}",
            )
        except MsgNotFoundError:
            return None
        return resp["message"]["subject"]

    async def matching(self, lo: int, hi: int, limit: int) -> list[int]:
        """The first ``limit`` stored sequences in [lo, hi] the consumer matches: gets of
        ``GET_WINDOW`` sequences at once, and past a window with none of them a jump to
        the next one (so sparse matches cost a get each, dense ones a round trip per window)."""
        out: list[int] = []
        q = lo
        while q <= hi and len(out) < limit:
            top = min(hi, q + GET_WINDOW - 1)
            subjects = await asyncio.gather(*(self._subject_at(x) for x in range(q, top + 1)))
            found = [
                x
                for x, sub in zip(range(q, top + 1), subjects)
                if sub is not None and (not self.filters or subj.matches_any(self.filters, sub))
            ]
            out.extend(found)
            q = top + 1
            if not found and q <= hi:
                nxt = await self.next_matching(q)
                if nxt is None:
                    break
                q = nxt
        return out[:limit]

    async def reached(self, info: ConsumerInfo) -> bool:
        """Is every message <= seq that the consumer matches acknowledged?"""
        floor = info.ack_floor.stream_seq
        if floor >= self.seq:
            return True
        if self.policy == AckPolicy.NONE and info.delivered.stream_seq >= self.seq:
            return True
        q = await self.next_matching(floor + 1)
        return q is None or q > self.seq

    async def undelivered(self, info: ConsumerInfo) -> int:
        """A count of the messages the consumer matches in (delivered, seq] not yet delivered,
        never above it: appends past seq while it counts can make it lower, never higher."""
        n = info.num_pending
        delivered = info.delivered.stream_seq
        if n <= 0 or delivered >= self.seq:
            # (num_pending 0 with matching messages in (delivered, seq] is a consumer answering
            # from a stale copy of the stream: nothing is pulled on its word, and the rounds
            # that then move nothing are waited out, _NoProgress.)
            return 0
        sinfo = await jsapi.stream_info(self.session, self.stream)
        state = sinfo.state
        self.retention = sinfo.config.retention
        self.msg_bytes = max(1, state.bytes // max(1, state.messages))
        if self.seq >= state.last_seq:
            return n  # all of them: they were stored when the consumer was read
        lo, hi = max(delivered + 1, state.first_seq), self.seq
        if lo > hi:
            return 0
        if not self.filters and state.num_deleted <= DETAILS_MAX:
            # It takes every stored message: the stored sequences in the range, counted
            # from the stream's list of deleted ones (appends do not change it).
            gone = 0
            if state.num_deleted:
                state = (await jsapi.stream_info(self.session, self.stream, deleted_details=True)).state
                gone = sum(1 for q in (state.deleted or ()) if lo <= q <= hi)
            return max(0, min(n, hi - lo + 1 - gone))
        if self.retention != RetentionPolicy.WORK_QUEUE:
            # What a throw-away consumer from delivered + 1 matches, less what one from seq + 1
            # matches (read later: appends meanwhile lower the difference).  Not from the
            # durable's num_pending alone: a server counts a deleted message out of it a moment
            # after answering the delete (a replicated consumer later still), and a count from
            # it would pull past seq (tests/remote/test_bulk.py, a num_pending that lags).
            fresh = await count_from(self.session, self.stream, delivered + 1, self.filters)
            lower = min(n, fresh) - await count_from(self.session, self.stream, self.seq + 1, self.filters)
            if lower > 0:
                return lower
        elif await self.next_matching(self.seq + 1) is None:
            return n  # nothing it matches lies past seq
        # A work-queue stream takes no second consumer over the durable's subjects, and
        # appends may have raced the count: list what is left.
        return len(await self.matching(delivered + 1, self.seq, WALK_CHUNK))

    # ------------------------------------------------------------------ acknowledging

    def ack_subject(self, sseq: int, dseq: int) -> str:
        # The server reads the stream and consumer sequences from the subject (ackReplyInfo);
        # delivered count, timestamp and pending are informational.
        return ack_reply.build(self.stream, self.durable, 1, sseq, dseq, 0, 0)

    async def ack_all(self, replies: Sequence[str], top: int) -> None:
        """Acknowledge ``replies`` (up to stream sequence ``top``) in order, the last as a
        request: once it is answered the server has applied them all (one consumer processes
        its acks in order)."""
        if not replies:
            return
        self.acked = max(self.acked, top)
        nc = await self.session.ready()
        for r in replies[:-1]:
            await nc.publish(r, b"+ACK")
        await self.session.ack(replies[-1], b"+ACK", self.session.timeout)

    async def settle_pending(self, info: ConsumerInfo) -> bool:
        """Acknowledge deliveries already pending at or below seq (earlier fetches, anyone's);
        False when there are none."""
        floor, delivered = info.ack_floor, info.delivered
        if info.num_ack_pending <= 0 or floor.stream_seq >= min(delivered.stream_seq, self.seq):
            return False
        lo, hi = floor.stream_seq + 1, min(delivered.stream_seq, self.seq)
        if self.policy == AckPolicy.ALL:
            # One ack of the last pending delivery at or below seq acknowledges all below it;
            # the server takes it only for a sequence that is pending.
            if delivered.stream_seq <= self.seq and not self.tried_last:
                self.tried_last = True  # the last delivery: exact floors (unless it is gone)
                await self.ack_all(
                    [self.ack_subject(delivered.stream_seq, delivered.consumer_seq)], delivered.stream_seq
                )
                return True
            seqs = await self.matching(lo, hi, WALK_CHUNK)
            if not seqs:
                return False
            # That delivery's consumer sequence is not known here: the floor's plus one per
            # message between is at most it (each had a delivery of its own, in order), and
            # below those of the deliveries past seq, whose acks must still count.
            await self.ack_all([self.ack_subject(seqs[-1], floor.consumer_seq + len(seqs))], seqs[-1])
            return True
        if self.filters:
            seqs = await self.matching(lo, hi, FORGE_CHUNK)
        else:
            seqs = list(range(lo, min(hi, lo + FORGE_CHUNK - 1) + 1))
        await self.ack_all([self.ack_subject(q, delivered.consumer_seq) for q in seqs], seqs[-1] if seqs else 0)
        return bool(seqs)

    # ------------------------------------------------------------------ pulling

    async def open_inbox(self):
        """The inbox all pulls of the call answer to: ``<inbox>.<request number>``."""
        nc = await self.session.ready()
        if self.inbox is None:
            self.inbox_prefix = nc.new_inbox()
            self.inbox = await RawInbox(public=self.session.public_path).open(nc, f"{self.inbox_prefix}.*")
        return nc

    async def pull(self, batch: int) -> int:
        """One pull of ``batch`` messages (``batch`` <= what (delivered, seq] still holds); acks
        what comes.  Returns the deliveries received (late ones of earlier pulls included)."""
        nc = await self.open_inbox()
        inbox = self.inbox
        if inbox is None:  # (close() ran meanwhile: the call is over, nothing may be pulled for it)
            raise JetSparkError(f"consumer {self.durable!r} on stream {self.stream!r}: a pull after the call ended")
        self.requests += 1
        reply = f"{self.inbox_prefix}.{self.requests}"
        req = {"batch": int(batch), "no_wait": True}
        await nc.publish(
            f"{self.session.api_prefix}.CONSUMER.MSG.NEXT.{self.stream}.{self.durable}",
            json.dumps(req).encode(),
            reply=reply,
        )
        got = 0
        ended = False
        last: Optional[tuple[int, str]] = None  # the highest delivery <= seq: acked last, as a request
        late: list[str] = []
        while got < batch and not ended:
            try:
                items = await inbox.take(self.session.timeout)
            except asyncio.TimeoutError as exc:
                # Neither all its messages nor its closing status: the request may still be
                # waiting to be served, and the consumer's state would not show it yet; a
                # next pull counted from that state could take messages past seq.
                raise self.session.silence(
                    f"a pull of {batch} messages from consumer {self.durable!r} on stream {self.stream!r}",
                    self.session.timeout,
                ) from exc
            for subject, r, _data, hdr in items:
                if not r:
                    st = status_of(hdr)
                    # Only this request's own closing status ends the wait: the server sends
                    # it once it has served the request, so the consumer's state then counts
                    # all its deliveries, even those the status overtook on the way (a
                    # cluster); an earlier request's status ends nothing.
                    if st is not None and st[0] != b"100" and subject.decode() == reply:
                        ended = True
                    continue
                got += 1
                sseq = ack_reply.stream_seq(r)
                self.received = max(self.received, sseq)
                if sseq > self.seq:
                    late.append(r.decode())
                    continue
                done = r.decode()  # acked as they come but the highest, acked below
                if last is None or sseq > last[0]:
                    last, done = (sseq, done), (last[1] if last is not None else None)
                if done is not None and self.policy == AckPolicy.EXPLICIT:
                    await nc.publish(done, b"+ACK")
        if late:
            for r in late:  # a message inside the count was removed meanwhile: hand these back
                await nc.publish(r, b"-NAK")
            log.warning(
                "advance_ack_floor of %r on %r to seq %d: %d deliveries past seq came (messages removed during "
                "the call) and were handed back",
                self.durable,
                self.stream,
                self.seq,
                len(late),
            )
        if last is not None and self.policy != AckPolicy.NONE:
            await self.ack_all([last[1]], last[0])  # under ack policy all it acknowledges everything below it
        return got

    async def close(self) -> None:
        if self.inbox is not None:
            inbox, self.inbox = self.inbox, None
            await inbox.close()

    async def consumer_info(self) -> ConsumerInfo:
        """The consumer's state once it counts every delivery this call received, or as it is
        after the session's timeout.  On a cluster an info answered right after a pull can
        predate its deliveries (seen under ack policy none: a count made from it would pull
        past seq)."""
        deadline = asyncio.get_running_loop().time() + self.session.timeout
        while True:
            info = await jsapi.consumer_info(self.session, self.stream, self.durable)
            if info.delivered.stream_seq >= self.received or asyncio.get_running_loop().time() > deadline:
                return info
            await asyncio.sleep(0.01)

    async def answer(self, info: ConsumerInfo) -> ConsumerInfo:
        """The consumer's state once its floor shows this call's acks (under ack policy none,
        its deliveries), re-read for up to the session's timeout.  An interest or work-queue
        stream drops an acknowledged message before the consumer's info shows the ack
        (tests/contract/test_bulk.py, deliveries pending past seq: the stream says "reached"
        while the floor is stale), and a replicated consumer moves its floor when its raft
        group applies the ack or delivery.  A floor that never shows them is an
        AckFloorError, not a stale answer."""
        want = min(self.received if self.policy == AckPolicy.NONE else self.acked, self.seq)
        deadline = asyncio.get_running_loop().time() + self.session.timeout
        while info.ack_floor.stream_seq < want:
            if asyncio.get_running_loop().time() > deadline:
                raise _NoProgress(
                    self.stream, self.durable, self.seq, info.ack_floor.stream_seq,
                    f"its ack floor still shows {info.ack_floor.stream_seq} after {self.session.timeout:g}s, while "
                    f"this call acknowledged (or, under ack policy none, was delivered) up to {want}",
                )  # fmt: skip
            await asyncio.sleep(0.01)
            info = await jsapi.consumer_info(self.session, self.stream, self.durable)
        return info


async def _advance(session: Session, stream: str, durable: str, seq: int) -> SequenceInfo:
    info = await jsapi.consumer_info(session, stream, durable)
    call = _Floor(session, stream, durable, seq, info)
    stalls = 0
    try:
        while not await call.reached(info):
            before = (
                info.ack_floor.stream_seq,
                info.ack_floor.consumer_seq,
                info.delivered.consumer_seq,
                info.num_ack_pending,
            )
            if call.policy != AckPolicy.NONE and await call.settle_pending(info):
                info = await call.consumer_info()
                if await call.reached(info):
                    break
            count = await call.undelivered(info)
            if count > 0:
                room = count
                if call.policy != AckPolicy.NONE and call.max_ack_pending and call.max_ack_pending > 0:
                    room = min(room, call.max_ack_pending - info.num_ack_pending)
                    if room <= 0:
                        raise call.fail(
                            info,
                            f"max_ack_pending ({call.max_ack_pending}) is taken by {info.num_ack_pending} "
                            "deliveries past seq that are not acknowledged",
                        )
                # No max_bytes (it would end a pull early with a status of its own): the batch
                # size alone keeps a pull's deliveries near PULL_MAX_BYTES.
                await call.pull(max(1, min(room, PULL_BATCH, PULL_MAX_BYTES // call.msg_bytes)))
            info = await call.consumer_info()
            after = (
                info.ack_floor.stream_seq,
                info.ack_floor.consumer_seq,
                info.delivered.consumer_seq,
                info.num_ack_pending,
            )
            stalls = 0 if after != before else stalls + 1
            if stalls >= STALLS:
                raise await call.stalled(info)
            if stalls:
                # A round that moved nothing: give a consumer state in transit a moment.
                await asyncio.sleep(STALL_WAIT * stalls)
        info = await call.answer(info)
    finally:
        await call.close()
    return SequenceInfo(consumer_seq=info.ack_floor.consumer_seq, stream_seq=info.ack_floor.stream_seq)
