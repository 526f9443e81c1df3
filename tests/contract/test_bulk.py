"""The bulk verbs the Spark connector depends on, one contract for every jetspark backend.

``read_batches``, ``publish_batch``, ``seq_for_time``, ``seq_for_bytes``,
``advance_ack_floor``, ``ack_floor`` and ``ordered_consumer`` are jetspark's own
(nats-py has none of them), so the oracle cannot run them.  Instead each result is
checked against what the plain verbs see of the same stream: on a nats-server
through the oracle (nats-py, tests/oracle.py), on the engine through the same
handle's ``get_msg``/``stream_info``/``consumer_info``.  Runs on engine-file,
engine-memory, nats-file and nats-memory (the ``jetspark_backend`` fixture).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

import jetspark
from jetspark import AckPolicy, RetentionPolicy
from jetspark.api import BatchAck, datetime_to_ns
from jetspark.errors import (
    APIError,
    BadRequestError,
    NoStreamResponseError,
    StreamNotFoundError,
)
from jetspark.protocol.arrow import HEADERS_TYPE, schema
from tests.conftest import CLUSTER_TIMEOUT, JETSPARK_BACKENDS, with_cluster
from tests.contract.consumer_support import eventually
from tests.oracle import OracleJS
from tests.oracle import stored as oracle_stored

S = "B"

# The bulk verbs on the 3-node cluster too (R3 streams): where replication changes how
# pulls, acks and consumers behave.
jetspark_backend = with_cluster(JETSPARK_BACKENDS)


@pytest.fixture
def js(jetspark_backend):
    return jetspark_backend


@pytest.fixture
def plain(jetspark_backend):
    """The plain verbs' view of the same streams: the oracle on the same server, or the engine handle."""
    if jetspark_backend.url is None:
        yield jetspark_backend
    else:
        with OracleJS(jetspark_backend.url, timeout=CLUSTER_TIMEOUT) as oracle:
            yield oracle


def stored(plain, stream: str = S) -> dict:
    return oracle_stored(plain, stream)


def concat(batches) -> pa.Table | None:
    batches = list(batches)
    return pa.Table.from_batches(batches) if batches else None


def rows(table: pa.Table | None) -> list[dict]:
    return [] if table is None else table.to_pylist()


def fill(js, n: int = 30) -> None:
    """Stream B on b.>: n messages on b.0, b.1, b.2 in turn (seq q on b.{(q-1) % 3}); seq 5 has
    headers, seq 7 two values of one; then seq 10 is deleted."""
    js.add_stream(name=S, subjects=["b.>"])
    for q in range(1, n + 1):
        headers = {"K": "v5"} if q == 5 else {"M": ["x", "y"]} if q == 7 else None
        js.publish(f"b.{(q - 1) % 3}", b"m%d" % q, headers=headers)
    if n >= 10:
        js.delete_msg(S, 10)


def matches(subject: str, filters) -> bool:
    if not filters:
        return True
    for f in filters:
        ft, st = f.split("."), subject.split(".")
        if ft[-1] == ">" and len(st) >= len(ft) and all(a in ("*", b) for a, b in zip(ft[:-1], st)):
            return True
        if len(ft) == len(st) and all(a in ("*", b) for a, b in zip(ft, st)):
            return True
    return False


# ---------------------------------------------------------------------- read_batches


@pytest.mark.parametrize("headers", [False, True])
def test_read_batches_is_what_get_msg_sees(js, plain, headers):
    fill(js)
    want = stored(plain)
    batches = list(js.read_batches(S, headers=headers))
    assert batches and all(b.schema == schema(headers) for b in batches)
    got = rows(concat(batches))
    assert [r["seq"] for r in got] == sorted(want) and 10 not in [r["seq"] for r in got]
    for r in got:
        m = want[r["seq"]]
        assert (r["stream"], r["subject"], r["data"], r["timestamp"]) == (S, m.subject, m.data, m.time)
        if headers:
            hdrs = r["headers"]
            assert (hdrs is None) == (m.headers is None)
            if hdrs is not None:
                assert {k: v[-1] for k, v in hdrs} == m.headers
    if headers:
        by_seq = {r["seq"]: r["headers"] for r in got}
        assert by_seq[5] == [("K", ["v5"])] and by_seq[7] == [("M", ["x", "y"])]
    assert plain.consumers_info(S) == []  # a reader leaves nothing behind


CASES = [
    # (start_seq, end_seq, subjects)
    (1, None, None),
    (5, 20, None),
    (9, 11, None),  # around the deleted seq 10
    (25, None, ["b.1"]),
    (1, 40, ["b.1", "b.2"]),
    (1, None, ["b.*"]),
    (1, None, [">"]),
    (3, 3, None),
    (31, None, None),  # past the last: nothing
    (8, 4, None),  # empty range
    (10, 10, None),  # only a removed seq
    (1, None, ["b.none"]),
]


@pytest.mark.parametrize("start, end, subjects", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_read_batches_ranges_and_filters(js, plain, start, end, subjects):
    fill(js)
    want = stored(plain)
    hi = 30 if end is None else end
    expected = [q for q in sorted(want) if start <= q <= hi and matches(want[q].subject, subjects)]
    batches = list(js.read_batches(S, start, end, subjects=subjects, batch_size=4))
    assert all(0 < b.num_rows <= 4 for b in batches)
    assert [r["seq"] for r in rows(concat(batches))] == expected


def test_read_batches_stop_at_the_last_seq_of_the_call(js):
    fill(js, 12)
    it = js.read_batches(S, batch_size=5)
    js.publish("b.0", b"later")  # after the call: not part of this read
    assert [r["seq"] for r in rows(concat(it))] == [q for q in range(1, 13) if q != 10]


def test_read_batches_refusals(js):
    fill(js, 3)
    with pytest.raises(StreamNotFoundError):
        list(js.read_batches("NOPE"))
    with pytest.raises(BadRequestError):
        list(js.read_batches(S, subjects=["b..bad"]))


# ---------------------------------------------------------------------- publish_batch


def test_publish_batch_stores_rows_as_publish_would(js, plain):
    js.add_stream(name=S, subjects=["b.>"])
    js.publish("b.x", b"first")
    t = pa.table({
        "subject": ["b.a", "b.b", "b.a"],
        "data": pa.array([b"one", None, b"three"]),
        "headers": pa.array([[("K", ["1"])], None, [("A", ["x", "y"]), ("B", ["z"])]], HEADERS_TYPE),
    })  # fmt: skip
    ack = js.publish_batch(t)  # routed by the first row's subject
    assert isinstance(ack, BatchAck) and ack.stream == S and ack.count == 3
    assert ack.seqs.to_pylist() == [2, 3, 4] and ack.duplicate.to_pylist() == [False] * 3
    m2, m3, m4 = (plain.get_msg(S, q) for q in (2, 3, 4))
    assert (m2.subject, m2.data, m2.headers) == ("b.a", b"one", {"K": "1"})
    assert (m3.subject, m3.data, m3.headers) == ("b.b", b"", None)
    assert m4.data == b"three" and m4.hdrs.count(b"A:") == 2 and m4.headers["B"] == "z"
    state = plain.stream_info(S).state
    assert (state.messages, state.last_seq) == (4, 4)
    assert (
        js.publish_batch(
            pa.table({"subject": pa.array([], pa.string()), "data": pa.array([], pa.binary())}), stream=S
        ).count
        == 0
    )


def test_publish_batch_msg_ids_and_duplicates(js, plain):
    js.add_stream(name=S, subjects=["b.>"])
    js.publish("b.a", b"x", headers={"Nats-Msg-Id": "id-1"})
    t = pa.table(
        {
            "subject": ["b.a"] * 5,
            "data": [b"%d" % i for i in range(5)],
            "msg_id": ["id-0", "id-1", "id-2", "id-0", None],
        }
    )
    ack = js.publish_batch(t, stream=S)
    # id-1 is the earlier single publish's; the second id-0 is the first row's; a null id is none.
    assert ack.seqs.to_pylist() == [2, 1, 3, 2, 4]
    assert ack.duplicate.to_pylist() == [False, True, False, True, False]
    assert plain.get_msg(S, 3).headers == {"Nats-Msg-Id": "id-2"} and plain.get_msg(S, 4).headers is None
    again = js.publish_batch(t, stream=S)  # a retried batch: the same seqs, all duplicates but the id-less row
    assert again.seqs.to_pylist()[:4] == [2, 1, 3, 2] and again.duplicate.to_pylist() == [True, True, True, True, False]
    assert plain.stream_info(S).state.messages == 5


def test_publish_batch_msg_id_column_without_nulls(js, plain):
    # Every row with an id (the server backends build these in bulk, ASCII ends or not).
    js.add_stream(name=S, subjects=["b.>"])
    js.publish("b.a", b"x", headers={"Nats-Msg-Id": "id-1"})
    ids = ["id-0", "id-1", "é-2", "id-0", "ü", "i d 5"]
    t = pa.table({"subject": ["b.a", "b.b"] * 3, "data": [b"%d" % i for i in range(6)], "msg_id": ids})
    ack = js.publish_batch(t, stream=S)
    assert ack.seqs.to_pylist() == [2, 1, 3, 2, 4, 5]
    assert ack.duplicate.to_pylist() == [False, True, False, True, False, False]
    assert [plain.get_msg(S, q).headers["Nats-Msg-Id"] for q in (2, 5)] == ["id-0", "i d 5"]
    assert js.publish("b.b", b"x", headers={"Nats-Msg-Id": "é-2"}).duplicate is True
    assert js.publish_batch(t, stream=S).duplicate.to_pylist() == [True] * 6
    # A bad id anywhere refuses the batch by its row, nothing stored.
    for bad, error in (("a\r\nNats-Msg-Id: b", ValueError), ("", BadRequestError)):
        rows = pa.table({"subject": ["b.a"] * 3, "data": [b"1"] * 3, "msg_id": ["n-0", bad, "n-2"]})
        with pytest.raises(error, match="row 1 of the batch"):
            js.publish_batch(rows, stream=S)
    assert plain.stream_info(S).state.messages == 5


def test_publish_batch_generated_msg_ids(js, plain):
    js.add_stream(name=S, subjects=["b.>"])
    t = pa.table({"subject": ["b.a"] * 5, "data": [b"%d" % i for i in range(5)]})
    ack = js.publish_batch(t, msg_id_prefix="q:0:", stream=S)
    assert ack.seqs.to_pylist() == [1, 2, 3, 4, 5] and not any(ack.duplicate.to_pylist())
    assert plain.get_msg(S, 4).headers == {"Nats-Msg-Id": "q:0:3"}
    # A replay overlapping the first: the overlap is duplicate, the rest is new.
    ack = js.publish_batch(t, msg_id_prefix="q:0:", msg_id_start=3, stream=S)
    assert ack.seqs.to_pylist() == [4, 5, 6, 7, 8]
    assert ack.duplicate.to_pylist() == [True, True, False, False, False]
    # A single publish sees the generated ids; the same digits with a leading zero are another id.
    assert js.publish("b.a", b"x", headers={"Nats-Msg-Id": "q:0:6"}).duplicate is True
    assert js.publish("b.a", b"x", headers={"Nats-Msg-Id": "q:0:06"}).seq == 9
    assert plain.publish("b.a", b"y", headers={"Nats-Expected-Last-Msg-Id": "q:0:06"}).seq == 10
    # A generated batch sees an id a single publish stored.
    js.publish("b.a", b"z", headers={"Nats-Msg-Id": "r:7"})
    ack = js.publish_batch(t.slice(0, 3), msg_id_prefix="r:", msg_id_start=6, stream=S)
    assert ack.duplicate.to_pylist() == [False, True, False] and ack.seqs.to_pylist() == [12, 11, 13]


@pytest.mark.parametrize("with_headers", [False, True], ids=["ids-only", "ids-and-headers"])
def test_publish_batch_generated_msg_ids_across_digit_counts(js, plain, with_headers):
    # Ids 98..102 change their digit count in the middle; with a headers column each row's
    # headers and its generated id share one header block.
    js.add_stream(name=S, subjects=["b.>"])
    cols = {"subject": ["b.a"] * 5, "data": [b"%d" % i for i in range(5)]}
    if with_headers:
        cols["headers"] = pa.array([[("K", [str(i)])] if i % 2 else None for i in range(5)], HEADERS_TYPE)
    ack = js.publish_batch(pa.table(cols), msg_id_prefix="d.", msg_id_start=98, stream=S)
    assert ack.seqs.to_pylist() == [1, 2, 3, 4, 5] and not any(ack.duplicate.to_pylist())
    for i in range(5):
        want = {"Nats-Msg-Id": f"d.{98 + i}"}
        if with_headers and i % 2:
            want["K"] = str(i)
        assert plain.get_msg(S, i + 1).headers == want
    assert js.publish("b.a", b"x", headers={"Nats-Msg-Id": "d.100"}).duplicate is True


BAD_ROWS = [
    # (the second row, what it breaks)
    ({"subject": "c.a"}, "not captured by the stream"),
    ({"subject": "b..a"}, "an invalid subject"),
    ({"subject": None}, "a null subject"),
    ({"data": b"x" * 101}, "over max_msg_size"),
]


@pytest.mark.parametrize("row, why", BAD_ROWS, ids=[w for _, w in BAD_ROWS])
def test_publish_batch_with_a_bad_row_stores_nothing(js, plain, row, why):
    js.add_stream(name=S, subjects=["b.>"], max_msg_size=100)
    js.add_stream(name="C", subjects=["c.>"])
    js.publish("b.a", b"before")
    cols = {"subject": ["b.a", row.get("subject", "b.b"), "b.c"], "data": [b"1", row.get("data", b"2"), b"3"]}
    with pytest.raises((jetspark.JetSparkError, ValueError)):
        js.publish_batch(pa.table(cols), stream=S)
    state = plain.stream_info(S).state
    assert (state.messages, state.last_seq) == (1, 1), why
    assert plain.stream_info("C").state.messages == 0


def test_publish_batch_routing_refusals(js, plain):
    js.add_stream(name=S, subjects=["b.>"])
    t = pa.table({"subject": ["b.a"], "data": [b"1"]})
    with pytest.raises(StreamNotFoundError):
        js.publish_batch(t, stream="NOPE")
    with pytest.raises(NoStreamResponseError):
        js.publish_batch(pa.table({"subject": ["nobody.a"], "data": [b"1"]}))
    with pytest.raises(BadRequestError):
        js.publish_batch(pa.table({"data": [b"x"]}), stream=S)  # no subject column
    assert plain.stream_info(S).state.messages == 0


# ---------------------------------------------------------------------- seq_for_time / seq_for_bytes


def test_seq_for_time(js, plain):
    js.add_stream(name=S, subjects=["b.>"])
    now = dt.datetime.now(dt.timezone.utc)
    assert js.seq_for_time(S, now) == 1  # empty: last_seq + 1
    for q in range(1, 7):
        js.clock.advance(0.002)
        js.publish("b.a", b"%d" % q)
    js.delete_msg(S, 3)
    want = stored(plain)
    times = {q: m.time for q, m in want.items()}
    assert js.seq_for_time(S, times[1] - dt.timedelta(days=1)) == 1
    for q, t in times.items():
        assert js.seq_for_time(S, t) == q
        assert js.seq_for_time(S, datetime_to_ns(t)) == q  # ns since the epoch too
    # Just after the time of 2: the next stored one (3 is gone).
    assert js.seq_for_time(S, datetime_to_ns(times[2]) + 1000) == 4
    assert js.seq_for_time(S, datetime_to_ns(times[6]) + 1000) == 7  # after the last: last + 1
    js.purge_stream(S, seq=5)
    assert js.seq_for_time(S, times[1]) == 5  # the first stored


def test_seq_for_bytes_counts_what_stream_info_counts(js, plain):
    fill(js, 20)
    js.purge_stream(S, seq=3)  # 1, 2 gone too
    want = stored(plain)
    state = plain.stream_info(S).state
    assert js.seq_for_bytes(S, state.first_seq, state.last_seq, state.bytes) == state.last_seq
    # Each message's bytes as stream_info counts them: what it gives back when deleted.
    size = {}
    for q in sorted(want):
        size[q] = js.msg_bytes(want[q].subject, want[q].data, want[q].hdrs or b"")
    assert sum(size.values()) == state.bytes
    lo = 4
    total = 0
    for q in range(lo, 21):
        total += size.get(q, 0)
        # The last seq whose running total fits: past q only while the seqs after it are gone.
        expected = q
        while expected + 1 <= 20 and expected + 1 not in size:
            expected += 1
        assert js.seq_for_bytes(S, lo, 20, total) == expected, q
        if q in size and q > lo:
            assert js.seq_for_bytes(S, lo, 20, total - 1) <= q - 1
    assert js.seq_for_bytes(S, lo, 20, 1) == lo  # at least lo
    assert js.seq_for_bytes(S, lo, 12, 10**9) == 12  # at most hi


# ---------------------------------------------------------------------- advance_ack_floor / ack_floor


POLICIES = [
    (RetentionPolicy.LIMITS, AckPolicy.ALL),
    (RetentionPolicy.LIMITS, AckPolicy.EXPLICIT),
    (RetentionPolicy.INTEREST, AckPolicy.ALL),
    (RetentionPolicy.INTEREST, AckPolicy.EXPLICIT),
    (RetentionPolicy.WORK_QUEUE, AckPolicy.EXPLICIT),  # a work queue takes explicit acks only
]


def floor_stream(js, retention, policy, filtered: bool):
    """20 messages on b.0/b.1 in turn (b.1 at even seqs), consumer 'spark' made first; seq 6 deleted."""
    js.add_stream(name=S, subjects=["b.>"], retention=retention)
    js.add_consumer(S, durable_name="spark", ack_policy=policy, **({"filter_subject": "b.1"} if filtered else {}))
    for q in range(1, 21):
        js.publish(f"b.{(q - 1) % 2}", b"%d" % q)
    js.delete_msg(S, 6)
    pending_settles(js, 9 if filtered else 19)


def pending_settles(js, n: int) -> None:
    """Wait until the consumer's num_pending counts ``n``: a server takes a deleted message
    out of it on a goroutine of its own, after answering the delete, and a replicated
    consumer later still.  A call counting from the number before that pulls one message
    too many, past seq (handed back and logged: jetspark/remote/ack_floor.py); seen on the
    cluster under load."""
    eventually(js, lambda: js.consumer_info(S, "spark").num_pending, n, timeout=10)


def floor_and_pending(plain) -> tuple[int, int]:
    info = plain.consumer_info(S, "spark")
    return (info.ack_floor.stream_seq, info.num_ack_pending)


def check_floor(js, plain, seq: int, floor: int, returned) -> None:
    info = plain.consumer_info(S, "spark")
    assert info.ack_floor.stream_seq == floor
    assert (returned.stream_seq, returned.consumer_seq) == (info.ack_floor.stream_seq, info.ack_floor.consumer_seq)
    mine = js.ack_floor(S, "spark")
    assert (mine.stream_seq, mine.consumer_seq) == (info.ack_floor.stream_seq, info.ack_floor.consumer_seq)
    assert info.num_ack_pending == 0 and info.num_redelivered == 0
    assert info.delivered.stream_seq <= seq
    # What it passed counts as delivered, and acked unless the consumer takes no acks: the
    # times of its last delivery and last ack (`jetspark consumer ls`) are set as a server sets them.
    acked = floor > 0 and info.config.ack_policy != AckPolicy.NONE
    assert (info.delivered.last_active is not None, info.ack_floor.last_active is not None) == (floor > 0, acked)


@pytest.mark.parametrize("filtered", [False, True], ids=["all", "filtered"])
@pytest.mark.parametrize("retention, policy", POLICIES, ids=[f"{r.value}-{p.value}" for r, p in POLICIES])
def test_advance_ack_floor(request, js, plain, retention, policy, filtered):
    floor_stream(js, retention, policy, filtered)
    before = set(stored(plain))
    mine = (lambda q: q % 2 == 0) if filtered else (lambda q: True)
    releases = retention != RetentionPolicy.LIMITS

    returned = js.advance_ack_floor(S, "spark", 9)
    floor = 8 if filtered else 9  # the last message it matches at or below 9
    check_floor(js, plain, 9, floor, returned)
    released = {q for q in before if q <= 9 and mine(q)} if releases else set()
    assert set(stored(plain)) == before - released
    # Nothing at or below 9 comes again; the next delivery is the first matching one past it.
    sub = js.pull_subscribe_bind("spark", stream=S)
    (m,) = sub.fetch(1, timeout=2)
    assert m.metadata.sequence.stream == 10
    m.ack_sync()

    # Never backwards; past the last: the last matching one.
    assert js.advance_ack_floor(S, "spark", 3).stream_seq == 10
    returned = js.advance_ack_floor(S, "spark", 10**6)
    check_floor(js, plain, 10**6, 20, returned)
    if releases:
        assert set(stored(plain)) == {q for q in before if not mine(q)}
    else:
        assert set(stored(plain)) == before


@pytest.mark.parametrize("retention, policy", POLICIES, ids=[f"{r.value}-{p.value}" for r, p in POLICIES])
def test_advance_ack_floor_settles_deliveries_already_pending(request, js, plain, retention, policy):
    # Deliveries fetched and not acknowledged, at and below seq: the floor passes them too.
    floor_stream(js, retention, policy, False)
    sub = js.pull_subscribe_bind("spark", stream=S)
    assert [m.metadata.sequence.stream for m in sub.fetch(3, timeout=2)] == [1, 2, 3]
    check_floor(js, plain, 5, 5, js.advance_ack_floor(S, "spark", 5))


@pytest.mark.parametrize("filtered", [False, True], ids=["all", "filtered"])
@pytest.mark.parametrize("retention, policy", POLICIES, ids=[f"{r.value}-{p.value}" for r, p in POLICIES])
def test_advance_ack_floor_under_deliveries_pending_past_seq(js, plain, retention, policy, filtered):
    # Someone fetched past seq and acknowledged nothing: the floor passes what is at or below
    # seq and stops just before the first delivery past it, which stays pending.
    floor_stream(js, retention, policy, filtered)
    mine = (lambda q: q % 2 == 0) if filtered else (lambda q: True)
    before = set(stored(plain))
    sub = js.pull_subscribe_bind("spark", stream=S)
    fetched = [m.metadata.sequence.stream for m in sub.fetch(3 if filtered else 7, timeout=2)]
    assert fetched == ([2, 4, 8] if filtered else [1, 2, 3, 4, 5, 7, 8])
    js.delete_msg(S, 4)  # a pending delivery's message removed: it leaves the pending set
    before.discard(4)
    # (under ack policy all, taking everything below it along: the floor moves to 4).  A
    # server settles it after answering the delete, a replicated consumer's floor later
    # still (through its raft group): the call starts from the settled state, or it could
    # answer the floor the consumer shows before the settlement (seen in CI on the cluster).
    settled = (4, sum(q > 4 for q in fetched)) if policy == AckPolicy.ALL else (0, len(fetched) - 1)
    eventually(js, lambda: floor_and_pending(plain), settled, timeout=10)
    returned = js.advance_ack_floor(S, "spark", 5)
    info = plain.consumer_info(S, "spark")
    assert returned.stream_seq == info.ack_floor.stream_seq
    # At least the last match at or below 5, below the first delivery past it (6 is deleted).
    assert (4 if filtered else 5) <= info.ack_floor.stream_seq < (8 if filtered else 7)
    past = [q for q in fetched if q > 5]
    assert info.num_ack_pending == len(past) and info.delivered.stream_seq == 8
    if retention != RetentionPolicy.LIMITS:
        assert set(stored(plain)) == before - {q for q in before if q <= 5 and mine(q)}
    # Up to the last delivery: everything pending goes, nothing more is delivered.
    returned = js.advance_ack_floor(S, "spark", 8)
    check_floor(js, plain, 8, 8, returned)


@pytest.mark.parametrize("filtered", [False, True], ids=["all", "filtered"])
@pytest.mark.parametrize("retention, policy", POLICIES + [(RetentionPolicy.LIMITS, AckPolicy.NONE)],
                         ids=[f"{r.value}-{p.value}" for r, p in POLICIES] + ["limits-none"])  # fmt: skip
def test_advance_ack_floor_one_seq_at_a_time(js, plain, retention, policy, filtered):
    # A commit per sequence (many small pulls), across the deleted 6 and past the last.
    floor_stream(js, retention, policy, filtered)
    mine = (lambda q: q % 2 == 0) if filtered else (lambda q: True)
    live = set(stored(plain))
    last = 0
    for q in range(1, 23):
        if q in live and mine(q):
            last = q
        returned = js.advance_ack_floor(S, "spark", q)
        if last:
            check_floor(js, plain, q, last, returned)
        else:
            assert returned.stream_seq == 0 and plain.consumer_info(S, "spark").delivered.stream_seq == 0
    if retention != RetentionPolicy.LIMITS:
        assert set(stored(plain)) == {q for q in live if not mine(q)}


@pytest.mark.parametrize("retention, policy", POLICIES, ids=[f"{r.value}-{p.value}" for r, p in POLICIES])
def test_advance_ack_floor_with_several_filters_and_later_messages(js, plain, retention, policy):
    js.add_stream(name=S, subjects=["b.>"], retention=retention)
    js.add_consumer(S, durable_name="spark", ack_policy=policy, filter_subjects=["b.0", "b.2"])
    for q in range(1, 31):
        js.publish(f"b.{(q - 1) % 3}", b"%d" % q)  # b.0 at 1, 4, 7 ..., b.2 at 3, 6, 9 ...
    js.delete_msg(S, 9)
    js.delete_msg(S, 10)
    pending_settles(js, 18)  # 20 on b.0 and b.2, less the two deleted
    # 10 and 9 are gone, 8 is b.1: the last match at or below 11 is 7.
    check_floor(js, plain, 11, 7, js.advance_ack_floor(S, "spark", 11))
    check_floor(js, plain, 12, 12, js.advance_ack_floor(S, "spark", 12))
    # Past the last: messages published afterwards below seq are taken by the next call.
    check_floor(js, plain, 100, 30, js.advance_ack_floor(S, "spark", 100))
    for q in range(31, 36):
        js.publish(f"b.{(q - 1) % 3}", b"%d" % q)
    check_floor(js, plain, 100, 34, js.advance_ack_floor(S, "spark", 100))
    if retention == RetentionPolicy.WORK_QUEUE:
        assert {m.subject for m in stored(plain).values()} == {"b.1"}  # kept for a consumer to come
    elif retention == RetentionPolicy.INTEREST:
        assert stored(plain) == {}  # b.1 interests nobody: never kept


def test_advance_ack_floor_refusals(js):
    floor_stream(js, RetentionPolicy.LIMITS, AckPolicy.ALL, False)
    with pytest.raises(StreamNotFoundError):
        js.advance_ack_floor("NOPE", "spark", 1)
    with pytest.raises(jetspark.ConsumerNotFoundError):
        js.advance_ack_floor(S, "nobody", 1)


# ---------------------------------------------------------------------- ordered_consumer


@pytest.mark.parametrize(
    "start, end, subjects",
    [(None, None, None), (5, 20, ["b.1"]), (9, 12, None), (2, None, ["b.0", "b.2"]), (31, None, None)],
)
def test_ordered_consumer(js, plain, start, end, subjects):
    fill(js)
    want = stored(plain)
    lo, hi = start or 1, end or 30
    expected = [q for q in sorted(want) if lo <= q <= hi and matches(want[q].subject, subjects)]
    msgs = list(js.ordered_consumer(S, subjects=subjects, start_seq=start, end_seq=end, batch_size=4))
    assert [m.metadata.sequence.stream for m in msgs] == expected
    assert [m.metadata.sequence.consumer for m in msgs] == list(range(1, len(expected) + 1))
    assert [m.metadata.num_pending for m in msgs] == list(range(len(expected) - 1, -1, -1))
    for m in msgs:
        raw = want[m.metadata.sequence.stream]
        assert (m.subject, m.data, m.metadata.timestamp, m.metadata.stream) == (raw.subject, raw.data, raw.time, S)
        assert (m.headers is None) == (raw.headers is None)
        m.ack()  # does nothing: no consumer to ack to
    assert plain.stream_info(S).state.messages == len(want)
    assert plain.consumers_info(S) == []  # nothing left behind


@pytest.mark.parametrize("subjects", [None, ["b.1"]])
def test_ordered_consumer_on_a_work_queue_stream_beside_its_durable(js, plain, subjects):
    # A work-queue stream admits no ack-less consumer (10084) and no second one over the
    # durable's subjects (10100): the ordered read still sees every stored message, in
    # order, and takes nothing away from the durable.
    js.add_stream(name=S, subjects=["b.>"], retention=RetentionPolicy.WORK_QUEUE)
    js.add_consumer(S, durable_name="d", ack_policy=AckPolicy.EXPLICIT)
    for q in range(1, 13):
        js.publish(f"b.{(q - 1) % 3}", b"m%d" % q)
    js.delete_msg(S, 4)
    want = stored(plain)
    expected = [q for q in sorted(want) if 2 <= q <= 11 and matches(want[q].subject, subjects)]
    msgs = list(js.ordered_consumer(S, subjects=subjects, start_seq=2, end_seq=11, batch_size=3))
    assert [m.metadata.sequence.stream for m in msgs] == expected
    assert [m.metadata.num_pending for m in msgs] == list(range(len(expected) - 1, -1, -1))
    assert [(m.subject, m.data) for m in msgs] == [(want[q].subject, want[q].data) for q in expected]
    assert plain.stream_info(S).state.messages == 11
    assert [c.name for c in plain.consumers_info(S)] == ["d"]
    assert plain.consumer_info(S, "d").num_pending == 11


def test_a_batch_refused_part_way_says_which_rows_were_stored(js, plain):
    # A refusal only the store can make while storing (discard new at max_msgs): the
    # engine stores nothing (all or nothing), a server the rows before the refused one;
    # either way the error's batch_ack says which rows are stored, and where.
    js.add_stream(name=S, subjects=["b.>"], max_msgs=5, discard="new")
    table = pa.table({"subject": [f"b.{i}" for i in range(8)], "data": [b"d%d" % i for i in range(8)]})
    with pytest.raises(APIError) as err:
        js.publish_batch(table, stream=S)
    assert err.value.err_code == 10077
    seqs = err.value.batch_ack.seqs.to_pylist()
    kept = {q: m.data for q, m in stored(plain).items()}
    assert {q: b"d%d" % i for i, q in enumerate(seqs) if q} == kept
    assert seqs == ([0] * 8 if js.kind == "engine" else [1, 2, 3, 4, 5, 0, 0, 0])
