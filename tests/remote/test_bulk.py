"""The nats:// backend's own bulk paths: large pipelined reads and appends, the reader's
consumer and its cleanup, partial batches, floors advanced in rounds, the sink registry
and recovery.  What every backend must do is in tests/contract/test_bulk.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

from jetspark import AckPolicy, ConsumerConfig, RetentionPolicy, ServiceUnavailableError
from jetspark.api import BatchAck
from jetspark.engine import bulk as engine_bulk

pytestmark = pytest.mark.server


def table(prefix: str, n: int, subjects: int = 3, **extra) -> pa.Table:
    cols = {"subject": [f"{prefix}.{i % subjects}" for i in range(n)], "data": [b"payload-%d" % i for i in range(n)]}
    cols.update(extra)
    return pa.table(cols)


def concat(batches) -> pa.Table:
    batches = list(batches)
    return pa.Table.from_batches(batches) if batches else None


# ---------------------------------------------------------------------- read_batches


def test_read_batches_returns_what_was_published_with_the_engines_schema(js, engine, name):
    s = name()
    t = table(s, 5000)
    for h in (js, engine):
        h.add_stream(name=s, subjects=[f"{s}.>"])
        ack = h.publish_batch(t, stream=s)
        assert isinstance(ack, BatchAck) and ack.seqs.to_pylist() == list(range(1, 5001))
    remote = list(js.read_batches(s, batch_size=2000))
    assert [b.num_rows for b in remote] == [2000, 2000, 1000]
    assert all(b.schema == engine_bulk.schema(False) for b in remote)
    got, want = concat(remote), concat(engine.read_batches(s, batch_size=2000))
    assert got.schema == want.schema
    for col in ("stream", "subject", "seq", "data"):
        assert got.column(col).equals(want.column(col)), col
    # timestamps are the server's: they match get_msg's
    for seq in (1, 2500, 5000):
        assert got.column("timestamp")[seq - 1].as_py() == js.get_msg(s, seq).time
    assert not js.consumers_info(s)  # the reader's consumer is gone


def test_a_read_stopped_early_deletes_its_consumer(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    js.publish_batch(table(s, 100), stream=s)
    partial = js.read_batches(s, batch_size=10)
    next(partial)
    assert len(js.consumers_info(s)) == 1
    partial.close()
    assert not js.consumers_info(s)


# ---------------------------------------------------------------------- publish_batch


def test_a_row_the_server_refuses_mid_batch_leaves_the_rows_before_it(js, name):
    # Unlike the engine's all-or-nothing batches (tests/engine/test_bulk.py): rows are
    # pipelined publishes, so a refusal only the server can make (here discard new at
    # max_msgs) comes after the rows before it were stored.  Rows that can be checked
    # first are refused before anything is sent (tests/contract/test_bulk.py).
    other = name()
    js.add_stream(name=other, subjects=[f"{other}.>"], max_msgs=5, discard="new")
    with pytest.raises(ServiceUnavailableError) as err:
        js.publish_batch(table(other, 8), stream=other)
    assert err.value.err_code == 10077 and "row 5 of the batch was refused" in " ".join(err.value.__notes__)
    assert js.stream_info(other).state.messages == 5


# ---------------------------------------------------------------------- seq_for_time / seq_for_bytes


# ---------------------------------------------------------------------- advance_ack_floor


@pytest.mark.parametrize("policy", [AckPolicy.ALL, AckPolicy.EXPLICIT])
def test_advance_ack_floor_in_rounds_of_max_ack_pending(js, name, policy):
    # 1000 messages past a floor, fetched at most max_ack_pending (100) at a time.
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"], retention=RetentionPolicy.INTEREST)
    js.add_consumer(
        s,
        ConsumerConfig(durable_name="spark", ack_policy=policy, max_ack_pending=-1 if policy == AckPolicy.ALL else 100),
    )
    js.publish_batch(table(s, 1000), stream=s)
    floor = js.advance_ack_floor(s, "spark", 600)
    assert floor.stream_seq == 600 and js.ack_floor(s, "spark").stream_seq == 600
    state = js.stream_info(s).state
    assert (state.messages, state.first_seq) == (400, 601)  # the server removed what the floor passed
    info = js.consumer_info(s, "spark")
    assert (info.num_ack_pending, info.delivered.stream_seq, info.num_redelivered) == (
        0,
        600,
        0,
    )  # nothing fetched past 600
    assert js.advance_ack_floor(s, "spark", 300).stream_seq == 600  # never backwards
    assert js.advance_ack_floor(s, "spark", 10**6).stream_seq == 1000
    assert js.stream_info(s).state.messages == 0


# ---------------------------------------------------------------------- robustness


def test_a_reader_whose_consumer_vanishes_resumes_after_its_last_seq(js, name, monkeypatch, caplog):
    from jetspark.remote import range_reader

    monkeypatch.setattr(range_reader, "PULL_BATCH", 500)
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    js.publish_batch(table(s, 20_000), stream=s)
    it = js.read_batches(s, batch_size=1000)
    seqs = next(it).column("seq").to_pylist()
    for c in js.consumers_info(s):  # as an inactive_threshold or an operator would
        js.delete_consumer(s, c.name)
    with caplog.at_level("INFO", logger="jetspark.remote"):
        for batch in it:
            seqs.extend(batch.column("seq").to_pylist())
    assert seqs == list(range(1, 20_001))
    assert "restarting after seq" in caplog.text
    assert not js.consumers_info(s)


def test_the_bulk_paths_without_the_fast_path(js, name):
    """nats-py's own queues (used when its internals differ from what the fast path expects)."""
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    fast_ack = js.publish_batch(table(s, 500, msg_id=[f"i{i}" for i in range(500)]), stream=s)
    js.publish(f"{s}.h", b"h", headers={"A": ["1", "2"]})
    fast = concat(js.read_batches(s, headers=True, batch_size=100))
    js._session.public_path = True
    slow_ack = js.publish_batch(table(s, 500, msg_id=[f"i{i}" for i in range(500)]), stream=s)
    assert slow_ack.seqs.equals(fast_ack.seqs) and all(slow_ack.duplicate.to_pylist())
    slow = concat(js.read_batches(s, headers=True, batch_size=100))
    assert slow.equals(fast)
    assert dict(slow.column("headers")[-1].as_py())["A"] == ["1", "2"]
    assert js.seq_for_bytes(s, 1, 501, js.stream_info(s).state.bytes - 1) == 500


@pytest.mark.parametrize("direct", [True, False], ids=["allow_direct", "msg_get"])
def test_a_work_queue_stream_is_read_without_a_consumer(js, engine, name, direct):
    # The server allows no second consumer over a work-queue durable's subjects, nor one
    # without acks (10084): read_batches and seq_for_bytes read such a stream with batched
    # direct gets (allow_direct) or plain gets, which skip what is gone.
    s = name()
    for h in (js, engine):
        h.add_stream(name=s, subjects=[f"{s}.>"], retention=RetentionPolicy.WORK_QUEUE, allow_direct=direct)
        h.add_consumer(s, durable_name="spark", ack_policy=AckPolicy.EXPLICIT)
        h.publish_batch(table(s, 600), stream=s)
        assert h.advance_ack_floor(s, "spark", 100).stream_seq == 100  # 1..100 acknowledged: gone
        h.delete_msg(s, 300)
    for filters in (None, [f"{s}.1"], [f"{s}.*"], [f"{s}.0", f"{s}.2"]):
        got = concat(js.read_batches(s, start_seq=1, end_seq=500, subjects=filters, batch_size=128))
        want = concat(engine.read_batches(s, start_seq=1, end_seq=500, subjects=filters, batch_size=128))
        for col in ("subject", "seq", "data"):
            assert got.column(col).equals(want.column(col)), (filters, col)
    everything = concat(js.read_batches(s)).column("seq").to_pylist()
    assert everything[0] == 101 and 300 not in everything and len(everything) == 499
    state = js.stream_info(s).state
    assert js.seq_for_bytes(s, 101, 600, state.bytes - 1) == 599
    assert [c.name for c in js.consumers_info(s)] == ["spark"]  # no reader consumer came and went
    assert js.advance_ack_floor(s, "spark", 400).stream_seq == 400
    assert js.stream_info(s).state.messages == 200


# ---------------------------------------------------------------------- advance_ack_floor: trying to break it


def last_match(seq: int, live, filters) -> int:
    return max((q for q, subject in live.items() if q <= seq and (filters is None or subject in filters)), default=0)


def check_exact(js, s: str, seq: int, floor: int) -> None:
    info = js.consumer_info(s, "spark")
    assert info.ack_floor.stream_seq == floor, (seq, info)
    assert info.delivered.stream_seq <= seq and info.num_ack_pending == 0 and info.num_redelivered == 0, (seq, info)


FLOOR_CASES = [
    (RetentionPolicy.LIMITS, AckPolicy.ALL, None),
    (RetentionPolicy.LIMITS, AckPolicy.EXPLICIT, ["1"]),
    (RetentionPolicy.INTEREST, AckPolicy.EXPLICIT, ["0", "2"]),
    (RetentionPolicy.WORK_QUEUE, AckPolicy.EXPLICIT, None),
    (RetentionPolicy.WORK_QUEUE, AckPolicy.EXPLICIT, ["1"]),
]


@pytest.mark.parametrize(
    "retention, policy, tails", FLOOR_CASES, ids=[f"{r.value}-{p.value}-{t}" for r, p, t in FLOOR_CASES]
)
def test_advance_ack_floor_while_a_publisher_appends_past_seq(js, server, name, monkeypatch, retention, policy, tails):
    # Small pulls (many requests, many counts) while another connection keeps appending
    # past seq: the floor lands exactly and nothing past seq is delivered.
    import threading

    import jetspark
    from jetspark.remote import ack_floor

    monkeypatch.setattr(ack_floor, "PULL_BATCH", 37)
    s = name()
    filters = [f"{s}.{t}" for t in tails] if tails else None
    js.add_stream(name=s, subjects=[f"{s}.>"], retention=retention)
    kw = {} if not filters else {"filter_subject": filters[0]} if len(filters) == 1 else {"filter_subjects": filters}
    js.add_consumer(s, ConsumerConfig(durable_name="spark", ack_policy=policy, **kw))
    js.publish_batch(table(s, 900), stream=s)
    stored = concat(js.read_batches(s))  # (an interest stream keeps only what the consumer takes)
    live = dict(zip(stored.column("seq").to_pylist(), stored.column("subject").to_pylist()))
    for q in (100, 101, 102, 450):
        if live.pop(q, None):
            js.delete_msg(s, q)
    stop = threading.Event()
    other = jetspark.connect(server.url, timeout=5)

    def publish() -> None:
        while not stop.is_set():
            other.publish_batch(table(s, 50), stream=s)

    t = threading.Thread(target=publish)
    t.start()
    try:
        for seq in (90, 101, 300, 451, 900):
            floor = last_match(seq, live, filters)
            assert js.advance_ack_floor(s, "spark", seq).stream_seq == floor
            check_exact(js, s, seq, floor)
    finally:
        stop.set()
        t.join()
        other.close()
    if retention != RetentionPolicy.LIMITS:  # all it took up to 900 is gone, the rest is there
        left = concat(js.read_batches(s, end_seq=900))
        left = left.column("seq").to_pylist() if left is not None else []
        assert left == [q for q in sorted(live) if filters and live[q] not in filters]


@pytest.mark.parametrize("policy", [AckPolicy.ALL, AckPolicy.EXPLICIT])
def test_advance_ack_floor_when_num_pending_still_counts_deleted_messages(js, name, monkeypatch, caplog, policy):
    # A server takes a deleted message out of a consumer's num_pending a moment after the
    # delete was answered (a replicated consumer later still): here the consumer's info
    # keeps counting two deleted ones.  The call must still deliver nothing past seq.
    from jetspark.remote import ack_floor, jsapi

    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    js.add_consumer(s, ConsumerConfig(durable_name="spark", ack_policy=policy, filter_subjects=[f"{s}.0", f"{s}.2"]))
    js.publish_batch(table(s, 30), stream=s)  # seq q on {s}.{(q - 1) % 3}
    js.delete_msg(s, 9)
    js.delete_msg(s, 10)
    real = jsapi.consumer_info

    async def lagging(session, stream, durable):
        info = await real(session, stream, durable)
        info.num_pending += 2
        return info

    monkeypatch.setattr(ack_floor.jsapi, "consumer_info", lagging)
    assert js.advance_ack_floor(s, "spark", 11).stream_seq == 7  # 9 and 10 gone, 8 not matched
    check_exact(js, s, 11, 7)
    assert "past seq" not in caplog.text


def statuses_first(base):
    """The call's pulls answered out of order, on a real server: statuses (closing ones and
    stale ones of earlier pulls, as a cluster's leader can send them) ahead of the messages
    they came with, which arrive at the next read."""

    class Floor(base):
        async def open_inbox(self):
            nc = await super().open_inbox()
            inbox = self.inbox
            if getattr(inbox, "held", None) is None:
                inbox.held = []
                take = inbox.take

                async def reordered(timeout: float) -> list:
                    if inbox.held:
                        items, inbox.held = inbox.held, []
                        return items
                    items = await take(timeout)
                    stale = [
                        (f"{self.inbox_prefix}.{n}".encode(), b"", b"", b"NATS/1.0 408 Request Timeout\r\n\r\n")
                        for n in range(1, self.requests)
                    ]
                    statuses, msgs = [i for i in items if not i[1]], [i for i in items if i[1]]
                    if statuses and msgs:
                        inbox.held = msgs
                        return stale + statuses
                    return stale + items

                inbox.take = reordered
            return nc

    return Floor


@pytest.mark.parametrize("policy", [AckPolicy.ALL, AckPolicy.EXPLICIT])
def test_a_pull_status_ahead_of_its_messages_neither_overfetches_nor_stops_short(js, name, monkeypatch, policy):
    from jetspark.remote import ack_floor

    monkeypatch.setattr(ack_floor, "_Floor", statuses_first(ack_floor._Floor))
    monkeypatch.setattr(ack_floor, "PULL_BATCH", 25)
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    js.add_consumer(s, ConsumerConfig(durable_name="spark", ack_policy=policy, filter_subject=f"{s}.1"))
    js.publish_batch(table(s, 600), stream=s)
    for seq in (7, 299, 300, 600):
        floor = max(q for q in range(1, seq + 1) if (q - 1) % 3 == 1)
        assert js.advance_ack_floor(s, "spark", seq).stream_seq == floor
        check_exact(js, s, seq, floor)
    # Messages removed between the count and the pull: the server serves fewer than asked
    # and closes the pull with a status (here ahead of the messages).
    js.publish_batch(table(s, 600), stream=s)
    base = ack_floor._Floor
    removed, short = [], []

    class Removing(base):
        async def pull(self, batch: int) -> int:
            from jetspark.remote import jsapi

            info = await jsapi.consumer_info(self.session, self.stream, self.durable)
            q = await self.next_matching(info.delivered.stream_seq + 1)
            if q is not None and q < 1199:  # the last stays: the floor ends on it
                await self.session.api(
                    self.session.stream_subject("MSG.DELETE", self.stream), {"seq": q}, what="deleting"
                )
                removed.append(q)
            got = await super().pull(batch)
            short.append(got < batch)
            return got

    monkeypatch.setattr(ack_floor, "_Floor", Removing)
    assert js.advance_ack_floor(s, "spark", 10**6).stream_seq == 1199
    check_exact(js, s, 10**6, 1199)
    assert len(removed) >= 7 and any(short)  # 200 messages in pulls of at most 25; closed by a status


def test_a_consumer_deleted_midway_is_consumer_not_found(js, name, monkeypatch):
    from jetspark.errors import ConsumerNotFoundError
    from jetspark.remote import ack_floor

    class Floor(ack_floor._Floor):
        async def pull(self, batch: int) -> int:
            got = await super().pull(batch)
            await self.session.api(
                self.session.consumer_subject("DELETE", self.stream, self.durable), what="deleting it"
            )
            return got

    monkeypatch.setattr(ack_floor, "_Floor", Floor)
    monkeypatch.setattr(ack_floor, "PULL_BATCH", 10)
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    js.add_consumer(s, ConsumerConfig(durable_name="spark", ack_policy=AckPolicy.EXPLICIT))
    js.publish_batch(table(s, 100), stream=s)
    with pytest.raises(ConsumerNotFoundError):
        js.advance_ack_floor(s, "spark", 50)


@pytest.mark.parametrize("policy", [AckPolicy.ALL, AckPolicy.EXPLICIT])
def test_a_floor_the_server_will_not_deliver_to_raises(js, name, policy):
    # A paused consumer delivers nothing: the call says so instead of returning a lower floor.
    import datetime as dt

    from jetspark import AckFloorError

    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    js.add_consumer(s, ConsumerConfig(durable_name="spark", ack_policy=policy))
    js.publish_batch(table(s, 20), stream=s)
    assert js.advance_ack_floor(s, "spark", 5).stream_seq == 5
    until = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    session = js._session
    session.run(
        session.api(session.consumer_subject("PAUSE", s, "spark"), {"pause_until": until}, what="pausing"),
        what="pausing",
    )
    with pytest.raises(AckFloorError) as exc:
        js.advance_ack_floor(s, "spark", 10)
    assert (exc.value.stream, exc.value.consumer, exc.value.seq, exc.value.floor) == (s, "spark", 10, 5)
    assert "spark" in str(exc.value) and js.ack_floor(s, "spark").stream_seq == 5
    assert js.consumer_info(s, "spark").delivered.stream_seq == 5


def test_direct_reads_keep_each_messages_own_headers_and_split_large_batches(js, name):
    # A direct get adds its own headers (Nats-Sequence, Nats-Subject, ...) to each message's:
    # read_batches returns what a reader consumer returns from a limits stream of the same messages.
    from jetspark.remote import direct

    wq, limits = name(), name()
    big = b"x" * 1_000_000  # a batch's max_bytes (DIRECT_MAX_BYTES) ends it early
    for s, retention in ((wq, RetentionPolicy.WORK_QUEUE), (limits, RetentionPolicy.LIMITS)):
        js.add_stream(name=s, subjects=[f"{s}.>"], retention=retention, allow_direct=True)
        js.publish(f"{s}.a", b"plain")
        js.publish(f"{s}.a", b"with", headers={"k": "v", "Nats-Msg-Id": "m1"})
        js.publish(f"{s}.b", b"repeated", headers={"k": ["1", "2"]})
        js.publish_batch(pa.table({"subject": [f"{s}.c"] * 40, "data": [big] * 40}), stream=s)
    js.add_consumer(wq, durable_name="spark", ack_policy=AckPolicy.EXPLICIT)
    got, want = concat(js.read_batches(wq, headers=True)), concat(js.read_batches(limits, headers=True))
    assert got.column("seq").to_pylist() == list(range(1, 44))
    for col in ("seq", "data", "headers"):
        assert got.column(col).equals(want.column(col)), col
    assert got.column("headers")[0].as_py() is None and dict(got.column("headers")[1].as_py()) == {
        "k": ["v"],
        "Nats-Msg-Id": ["m1"],
    }
    assert direct.DIRECT_MAX_BYTES < 40 * len(big)
    assert js.stream_info(wq).state.messages == 43 and [c.name for c in js.consumers_info(wq)] == ["spark"]


@pytest.mark.parametrize(
    "block, own",
    [
        (b"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: a.b\r\nNats-Sequence: 7\r\nNats-Time-Stamp: T\r\n\r\n", None),
        (
            b"NATS/1.0\r\nk: v\r\nk: w\r\nNats-Stream: S\r\nNats-Subject: a.b\r\nNats-Sequence: 7\r\nNats-Time-Stamp: "
            b"T\r\nNats-Num-Pending: 3\r\nNats-Last-Sequence: 6\r\n\r\n",
            b"NATS/1.0\r\nk: v\r\nk: w\r\n\r\n",
        ),
    ],
)
def test_strip_direct_headers(block, own):
    from jetspark.remote.direct import strip_direct_headers

    assert strip_direct_headers(block) == (own, b"a.b", 7, b"T")
