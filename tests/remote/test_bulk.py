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
