"""Every stream kind reads and commits on R3 (issue 10, item 1).

Each retention (limits, interest, work-queue) and storage (file, memory) as an R3
stream on the 3-node cluster, with the durable consumer ``spark`` made first (an
interest stream keeps only what some consumer is interested in): jetspark's bulk
verbs against what nats-py's own client (the oracle) sees of the same stream.
Every consumer jetspark makes internally (range reads, byte counting, ordered reads,
ack-floor advance) must be one the server accepts on such a stream: an R1 consumer
of an R3 interest or work-queue stream is refused (10134).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from jetspark import AckPolicy, RetentionPolicy, StorageType
from jetspark.protocol.arrow import HEADERS_TYPE
from tests.contract.consumer_support import settles
from tests.oracle import stored as oracle_stored

pytestmark = pytest.mark.cluster

S = "R3"
N = 60
KINDS = [
    (r, s)
    for r in (RetentionPolicy.LIMITS, RetentionPolicy.INTEREST, RetentionPolicy.WORK_QUEUE)
    for s in (StorageType.FILE, StorageType.MEMORY)
]


@pytest.fixture(params=KINDS, ids=[f"{r.value}-{s.value}" for r, s in KINDS])
def kind(request):
    return request.param


def make_stream(js, kind, n: int = N, headers: bool = True) -> None:
    """Stream R3 on k.>, replicated on the three nodes, durable ``spark`` (explicit acks), then
    ``n`` rows through publish_batch: seq q on k.{(q-1) % 3}, payload p<q:03>, headers on every 7th."""
    retention, storage = kind
    info = js.add_stream(name=S, subjects=["k.>"], retention=retention, storage=storage, num_replicas=3)
    assert info.config.num_replicas == 3
    js.add_consumer(S, durable_name="spark", ack_policy=AckPolicy.EXPLICIT)
    cols = {"subject": [f"k.{q % 3}" for q in range(n)], "data": [b"p%03d" % (q + 1) for q in range(n)]}
    if headers:
        cols["headers"] = pa.array(
            [[("H", [str(q + 1)])] if (q + 1) % 7 == 0 else None for q in range(n)], HEADERS_TYPE
        )
    ack = js.publish_batch(pa.table(cols), stream=S)
    assert ack.seqs.to_pylist() == list(range(1, n + 1)) and not any(ack.duplicate.to_pylist())


def stored(oracle) -> dict:
    return oracle_stored(oracle, S)


def held(oracle):
    """A reader for ``settles``: the seqs the stream holds.  A replicated interest or
    work-queue stream removes an acknowledged message through its raft group after the
    ack is answered, so the removal shows a moment later (seen once in a CI run: the
    consumer's floor at 5, the stream still counting message 5)."""
    return lambda: set(stored(oracle))


def read(js, *args, **kw) -> list[dict]:
    batches = list(js.read_batches(S, *args, **kw))
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def test_read_batches(js, oracle, kind):
    make_stream(js, kind)
    want = stored(oracle)
    assert sorted(want) == list(range(1, N + 1))
    got = read(js, headers=True, batch_size=16)
    assert [r["seq"] for r in got] == list(range(1, N + 1))
    for r in got:
        m = want[r["seq"]]
        assert (r["stream"], r["subject"], r["data"], r["timestamp"]) == (S, m.subject, m.data, m.time)
        assert (r["headers"] is None) == (m.headers is None)
        if m.headers is not None:
            assert r["headers"] == [("H", [str(r["seq"])])]
    # A range and a filter.
    assert [r["seq"] for r in read(js, 10, 30, subjects=["k.1"])] == [q for q in range(10, 31) if (q - 1) % 3 == 1]
    assert [r["seq"] for r in read(js, 55, None, subjects=["k.0", "k.2"])] == [
        q for q in range(55, N + 1) if (q - 1) % 3 != 1
    ]
    # The readers leave only the durable; nothing was consumed.
    assert [c.name for c in oracle.consumers_info(S)] == ["spark"]
    assert oracle.stream_info(S).state.messages == N


def test_seq_for_time_and_bytes(js, oracle, kind):
    make_stream(js, kind, headers=False)  # every message the same size
    want = stored(oracle)
    for q in (1, 17, N):
        assert js.seq_for_time(S, want[q].time) <= q  # messages of one batch can share a timestamp
        assert want[js.seq_for_time(S, want[q].time)].time == want[q].time
    assert js.seq_for_time(S, want[1].time - dt.timedelta(days=1)) == 1
    assert js.seq_for_time(S, want[N].time + dt.timedelta(seconds=1)) == N + 1
    state = oracle.stream_info(S).state
    size = state.bytes // N
    assert size * N == state.bytes
    for lo, k in ((1, 1), (1, 25), (10, 7), (30, 31)):
        assert js.seq_for_bytes(S, lo, N, k * size) == lo + k - 1
        assert js.seq_for_bytes(S, lo, N, k * size + size - 1) == lo + k - 1
    assert js.seq_for_bytes(S, 1, N, state.bytes) == N
    assert [c.name for c in oracle.consumers_info(S)] == ["spark"]


def test_ordered_consumer(js, oracle, kind):
    make_stream(js, kind)
    want = stored(oracle)
    msgs = list(js.ordered_consumer(S, subjects=["k.2"], start_seq=5, end_seq=40, batch_size=4))
    expected = [q for q in range(5, 41) if (q - 1) % 3 == 2]
    assert [m.metadata.sequence.stream for m in msgs] == expected
    assert [m.metadata.num_pending for m in msgs] == list(range(len(expected) - 1, -1, -1))
    for m in msgs:
        raw = want[m.metadata.sequence.stream]
        assert (m.subject, m.data, m.headers) == (raw.subject, raw.data, raw.headers)
    assert [c.name for c in oracle.consumers_info(S)] == ["spark"]
    assert oracle.stream_info(S).state.messages == N


def test_durable_fetch_and_ack(js, oracle, kind):
    make_stream(js, kind)
    sub = js.pull_subscribe_bind("spark", stream=S)
    msgs = sub.fetch(5, timeout=5)
    assert [m.metadata.sequence.stream for m in msgs] == [1, 2, 3, 4, 5]
    assert [m.data for m in msgs] == [b"p001", b"p002", b"p003", b"p004", b"p005"]
    for m in msgs:
        m.ack_sync()
    info = oracle.consumer_info(S, "spark")
    assert (info.ack_floor.stream_seq, info.num_ack_pending, info.num_pending) == (5, 0, N - 5)
    settles(
        held(oracle), set(range(1, N + 1)) if kind[0] == RetentionPolicy.LIMITS else set(range(6, N + 1)), timeout=10
    )


def test_advance_ack_floor(js, oracle, kind):
    # On a cluster a pull's "409 Batch Completed" can overtake its last deliveries: the
    # advance must neither fetch past seq nor stop short (jetspark/remote/ack_floor.py).
    make_stream(js, kind)
    releases = kind[0] != RetentionPolicy.LIMITS
    returned = js.advance_ack_floor(S, "spark", 25)
    info = oracle.consumer_info(S, "spark")
    assert returned.stream_seq == info.ack_floor.stream_seq == 25
    assert info.num_ack_pending == 0 and info.delivered.stream_seq == 25
    settles(held(oracle), set(range(26 if releases else 1, N + 1)), timeout=10)
    returned = js.advance_ack_floor(S, "spark", N)
    info = oracle.consumer_info(S, "spark")
    assert returned.stream_seq == info.ack_floor.stream_seq == N
    assert (info.num_ack_pending, info.num_pending) == (0, 0)
    settles(held(oracle), set() if releases else set(range(1, N + 1)), timeout=10)
    assert [c.name for c in oracle.consumers_info(S)] == ["spark"]
