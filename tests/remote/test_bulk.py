"""The bulk paths over a real server: Arrow range reads and batch appends, time/bytes ->
sequence, ack floors, ordered reads and the sink registry -- against the engine's behaviour."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from jetspark import (
    AckPolicy,
    BadRequestError,
    ConsumerConfig,
    NoStreamResponseError,
    RetentionPolicy,
    ServiceUnavailableError,
    StreamNotFoundError,
)
from jetspark.api import datetime_to_ns
from jetspark.engine import bulk as engine_bulk
from jetspark.api import BatchAck

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


def test_read_batches_ranges_filters_and_headers(js, engine, name):
    s = name()
    for h in (js, engine):
        h.add_stream(name=s, subjects=[f"{s}.>"])
        h.publish_batch(table(s, 300, subjects=4), stream=s)
        h.publish(f"{s}.h", b"with headers", headers={"A": "1", "B": ["x", "y"]})
        h.delete_msg(s, 10)

    def cols(h, *args, **kw):
        t = concat(h.read_batches(s, *args, **kw))
        return None if t is None else {c: t.column(c).to_pylist() for c in t.column_names if c != "timestamp"}

    cases = [((), {}), ((5, 20), {}), ((250,), {"subjects": [f"{s}.1"]}), ((1, 400), {"subjects": [f"{s}.2", f"{s}.3"]}),
             ((), {"subjects": [f"{s}.*"]}), ((295,), {"headers": True}), ((400,), {}), ((1, 0), {}), ((), {"subjects": [f"{s}.none"]})]  # fmt: skip
    for args, kw in cases:
        assert cols(js, *args, **kw) == cols(engine, *args, **kw), (args, kw)
    hdr = concat(js.read_batches(s, 301, headers=True))
    assert hdr.schema == engine_bulk.schema(True)
    assert dict(hdr.column("headers")[0].as_py())["A"] == ["1"]
    with pytest.raises(BadRequestError):
        list(js.read_batches(s, subjects=["bad..filter"]))
    with pytest.raises(StreamNotFoundError):
        js.read_batches("NOPE")


def test_read_stops_at_the_last_seq_when_called_and_cleans_up_early(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    js.publish_batch(table(s, 100), stream=s)
    it = js.read_batches(s, batch_size=10)
    js.publish_batch(table(s, 50), stream=s)  # after the call: not part of this read
    assert sum(b.num_rows for b in it) == 100
    partial = js.read_batches(s, batch_size=10)
    next(partial)
    assert len(js.consumers_info(s)) == 1
    partial.close()
    assert not js.consumers_info(s)


def test_ordered_consumer(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    js.publish_batch(table(s, 30), stream=s)
    msgs = list(js.ordered_consumer(s, subjects=[f"{s}.1"], start_seq=5, end_seq=20))
    assert [m.metadata.sequence.stream for m in msgs] == [5, 8, 11, 14, 17, 20]
    assert [m.metadata.sequence.consumer for m in msgs] == [1, 2, 3, 4, 5, 6]
    assert [m.metadata.num_pending for m in msgs] == [5, 4, 3, 2, 1, 0]
    assert msgs[0].data == b"payload-4"
    msgs[0].ack()  # does nothing


# ---------------------------------------------------------------------- publish_batch


def test_publish_batch_with_msg_ids_dedups(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    t = table(s, 1000, msg_id=[f"id-{i % 900}" for i in range(1000)])  # the last 100 repeat ids of this batch
    ack = js.publish_batch(t, stream=s)
    assert ack.count == 1000 and ack.stream == s
    assert ack.seqs.to_pylist() == list(range(1, 901)) + list(range(1, 101))
    assert ack.duplicate.to_pylist() == [False] * 900 + [True] * 100
    again = js.publish_batch(t)  # a retried batch: all duplicates, same seqs
    assert again.seqs.equals(ack.seqs) and all(again.duplicate.to_pylist())
    info = js.stream_info(s).state
    assert (info.messages, info.last_seq) == (900, 900)
    assert js.get_msg(s, 7).headers == {"Nats-Msg-Id": "id-6"}


def test_publish_batch_headers_and_routing(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    hdr_type = pa.map_(pa.string(), pa.list_(pa.string()))
    t = pa.table({
        "subject": [f"{s}.a", f"{s}.b"], "data": pa.array(["text", None], pa.string()),
        "headers": pa.array([[("K", ["1", "2"])], None], hdr_type),
    })  # fmt: skip
    ack = js.publish_batch(t)
    assert ack.seqs.to_pylist() == [1, 2] and not any(ack.duplicate.to_pylist())
    first = js.get_msg(s, 1)
    assert first.data == b"text" and first.hdrs.count(b"K:") == 2
    assert js.get_msg(s, 2).data == b""
    assert js.publish_batch(pa.table({"subject": pa.array([], pa.string()), "data": pa.array([], pa.binary())}), stream=s).count == 0


def test_publish_batch_errors(js, name):
    s, other = name(), name()
    js.add_stream(name=s, subjects=[f"{s}.>"], max_msg_size=100)
    js.add_stream(name=other, subjects=[f"{other}.>"], max_msgs=5, discard="new")
    with pytest.raises(NoStreamResponseError):
        js.publish_batch(table("nobody", 3))
    with pytest.raises(StreamNotFoundError):
        js.publish_batch(table(s, 3), stream="NOPE")
    with pytest.raises(BadRequestError, match="not captured") as err:  # checked before anything is sent
        js.publish_batch(pa.table({"subject": [f"{s}.a", f"{other}.a"], "data": [b"1", b"2"]}), stream=s)
    assert err.value.err_code == 10003
    with pytest.raises(BadRequestError) as err:
        js.publish_batch(pa.table({"subject": [f"{s}.a", f"{s}.b"], "data": [b"ok", b"x" * 101]}))
    assert err.value.err_code == 10054 and "row 1" in str(err.value.__notes__)
    assert js.stream_info(s).state.messages == 0  # nothing was stored
    with pytest.raises(BadRequestError):
        js.publish_batch(pa.table({"data": [b"x"]}))
    with pytest.raises(ServiceUnavailableError) as err:  # refused by the server itself, mid-batch
        js.publish_batch(table(other, 8), stream=other)
    assert err.value.err_code == 10077 and "row 5 of the batch was refused" in " ".join(err.value.__notes__)
    assert js.stream_info(other).state.messages == 5


# ---------------------------------------------------------------------- seq_for_time / seq_for_bytes


def test_seq_for_time(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    assert js.seq_for_time(s, dt.datetime.now(dt.timezone.utc)) == 1  # empty: last_seq + 1
    js.publish_batch(table(s, 5), stream=s)
    js.publish(f"{s}.late", b"x")
    times = [js.get_msg(s, q).time for q in range(1, 7)]
    assert js.seq_for_time(s, times[0] - dt.timedelta(days=1)) == 1
    assert js.seq_for_time(s, times[5]) == times.index(times[5]) + 1
    assert js.seq_for_time(s, datetime_to_ns(times[5]) + 1000) == 7  # after the last: last + 1
    assert js.seq_for_time(s, datetime_to_ns(times[5])) <= 6


@pytest.mark.parametrize("storage", ["file", "memory"])
def test_seq_for_bytes_counts_as_the_server_does(js, name, storage):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"], storage=storage)
    js.publish_batch(table(s, 200), stream=s)
    js.publish(f"{s}.h", b"headers too", headers={"Nats-Msg-Id": "x", "Other": "y"})
    js.publish_batch(table(s, 20), stream=s)
    state = js.stream_info(s).state
    # every message counted, and counted as the server counts it
    assert js.seq_for_bytes(s, 1, state.last_seq, state.bytes) == state.last_seq
    assert js.seq_for_bytes(s, 1, state.last_seq, state.bytes - 1) == state.last_seq - 1
    js.purge_stream(s, seq=150)
    part = js.stream_info(s).state
    assert js.seq_for_bytes(s, 150, part.last_seq, part.bytes - 1) == part.last_seq - 1
    assert js.seq_for_bytes(s, 150, 160, 1) == 150  # at least lo
    assert js.seq_for_bytes(s, 150, 160, 10**9) == 160


# ---------------------------------------------------------------------- advance_ack_floor


@pytest.mark.parametrize("policy", [AckPolicy.ALL, AckPolicy.EXPLICIT])
def test_advance_ack_floor_releases_an_interest_stream(js, name, policy):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"], retention=RetentionPolicy.INTEREST)
    js.add_consumer(s, ConsumerConfig(durable_name="spark", ack_policy=policy, max_ack_pending=-1 if policy == AckPolicy.ALL else 100))
    js.publish_batch(table(s, 1000), stream=s)
    floor = js.advance_ack_floor(s, "spark", 600)
    assert floor.stream_seq == 600 and js.ack_floor(s, "spark").stream_seq == 600
    state = js.stream_info(s).state
    assert (state.messages, state.first_seq) == (400, 601)  # the server removed what the floor passed
    info = js.consumer_info(s, "spark")
    assert (info.num_ack_pending, info.delivered.stream_seq, info.num_redelivered) == (0, 600, 0)  # nothing fetched past 600
    assert js.advance_ack_floor(s, "spark", 300).stream_seq == 600  # never backwards
    assert js.advance_ack_floor(s, "spark", 10**6).stream_seq == 1000
    assert js.stream_info(s).state.messages == 0


def test_advance_ack_floor_on_a_filtered_consumer(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    js.add_consumer(s, durable_name="f", ack_policy=AckPolicy.ALL, filter_subject=f"{s}.1")
    js.publish_batch(table(s, 30), stream=s)  # subject .1 at seqs 2, 5, 8, ...
    js.advance_ack_floor(s, "f", 10)
    info = js.consumer_info(s, "f")
    assert info.delivered.stream_seq == 8 and info.ack_floor.stream_seq >= 8 and info.num_pending == 7
    with pytest.raises(StreamNotFoundError):
        js.advance_ack_floor("NOPE", "f", 1)


# ---------------------------------------------------------------------- sink registry


def test_sink_registry_lives_in_a_kv_bucket(js):
    assert js.sink_last_batch("query/1") == -1  # reading creates nothing
    assert "KV_jetspark_sinks" not in js.stream_names()
    js.sink_commit_batch("query/1", 3)
    js.sink_commit_batch("query/1", 2)  # older: ignored
    js.sink_commit_batch("q2", 0)
    assert (js.sink_last_batch("query/1"), js.sink_last_batch("q2"), js.sink_last_batch("q3")) == (3, 0, -1)
    js.sink_commit_batch("query/1", 7)
    assert js.sink_last_batch("query/1") == 7
    info = js.stream_info("KV_jetspark_sinks", subjects_filter=">")
    assert info.state.subjects == {"$KV.jetspark_sinks.query_1": 1, "$KV.jetspark_sinks.q2": 1}


# ---------------------------------------------------------------------- robustness


def test_a_reader_whose_consumer_vanishes_resumes_after_its_last_seq(js, name, monkeypatch, caplog):
    from jetspark.remote import puller

    monkeypatch.setattr(puller, "PULL_BATCH", 500)
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


def test_a_work_queue_stream_is_read_without_a_consumer(js, engine, name):
    # The server allows no second consumer over a work-queue durable's subjects, nor one
    # without acks (10084): read_batches and seq_for_bytes read such a stream with plain
    # gets, which skip what is gone and apply the subject filters themselves.
    s = name()
    for h in (js, engine):
        h.add_stream(name=s, subjects=[f"{s}.>"], retention=RetentionPolicy.WORK_QUEUE)
        h.add_consumer(s, durable_name="spark", ack_policy=AckPolicy.EXPLICIT)
        h.publish_batch(table(s, 600), stream=s)
        assert h.advance_ack_floor(s, "spark", 100).stream_seq == 100  # 1..100 acknowledged: gone
        h.delete_msg(s, 300)
    for filters in (None, [f"{s}.1"]):
        got = concat(js.read_batches(s, start_seq=1, end_seq=500, subjects=filters, batch_size=128))
        want = concat(engine.read_batches(s, start_seq=1, end_seq=500, subjects=filters, batch_size=128))
        for col in ("subject", "seq", "data"):
            assert got.column(col).equals(want.column(col)), (filters, col)
    assert got.column("seq")[0].as_py() == 101 and 300 not in concat(js.read_batches(s)).column("seq").to_pylist()
    state = js.stream_info(s).state
    assert js.seq_for_bytes(s, 101, 600, state.bytes - 1) == 599
    assert [c.name for c in js.consumers_info(s)] == ["spark"]  # no reader consumer came and went
    assert js.advance_ack_floor(s, "spark", 400).stream_seq == 400
    assert js.stream_info(s).state.messages == 200
