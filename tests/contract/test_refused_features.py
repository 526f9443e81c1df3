"""Publish headers that ask for a feature the stream does not have: refused, nothing left behind.

A stream made without ``allow_msg_ttl``, ``allow_msg_counter``, ``allow_msg_schedules`` or
``allow_atomic`` (the embedded engine implements only the first: a stream with it stores
TTLs, tests/contract/test_msg_ttl.py) refuses a message carrying
``Nats-TTL``, ``Nats-Incr``, ``Nats-Schedule*`` or ``Nats-Batch-Id``, at the point of the
server's order of checks where the server refuses it (docs/semantics.md §3.6).  A refused
message stores nothing and records no ``Nats-Msg-Id``: a later publish with that id is
stored.  Every expected answer here is the real server's (the ``js`` fixture runs each test
on nats-server 2.15 too); jetspark/engine/refusals.py is the engine's side.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from jetspark.errors import APIError, BadRequestError

S = "FEAT"
MSG_ID = "Nats-Msg-Id"


def err(code: int, description: str, http: int = 400):
    return (code, http, description)


TTL_INVALID = err(10165, "invalid per-message TTL")
TTL_DISABLED = err(10166, "per-message TTL is disabled")
COUNTERS_DISABLED = err(10168, "message counters is disabled")
INCR_INVALID = err(10171, "message counter increment is invalid")
ATOMIC_DISABLED = err(10174, "atomic publish is disabled")
SCHEDULES_DISABLED = err(10188, "message schedules is disabled")
SCHEDULER_INVALID = err(10212, "message schedules invalid scheduler")
SOURCE_NOT_ALLOWED = err(10227, "message stream source header is not allowed")
WRONG_STREAM = err(10060, "expected stream does not match")
SEALED = err(10109, "invalid operation on sealed stream")
TOO_BIG = err(10054, "message size exceeds maximum allowed")
ROLLUP_NOT_PERMITTED = err(10111, "rollup not permitted", 500)
MAX_MSGS = err(10077, "maximum messages exceeded", 503)


def wrong_last_seq(seq: int):
    return err(10071, f"wrong last sequence: {seq}")


def answer(fn, *args, **kwargs):
    """(err_code, code, description) of the APIError ``fn`` raises, else its PubAck's seq."""
    try:
        return fn(*args, **kwargs).seq
    except APIError as exc:
        return (exc.err_code, exc.code, exc.description)


def state(js, stream: str = S) -> tuple[int, int, int]:
    st = js.stream_info(stream).state
    return st.messages, st.bytes, st.last_seq


REFUSED = [
    ({"Nats-TTL": "5s"}, TTL_DISABLED),
    ({"Nats-TTL": "10"}, TTL_DISABLED),
    ({"Nats-TTL": "1h30m"}, TTL_DISABLED),
    ({"Nats-TTL": "never"}, TTL_DISABLED),
    ({"Nats-TTL": "NEVER"}, TTL_DISABLED),
    ({"Nats-TTL": "0"}, TTL_INVALID),
    ({"Nats-TTL": "500ms"}, TTL_INVALID),
    ({"Nats-TTL": "-5"}, TTL_INVALID),
    ({"Nats-TTL": "abc"}, TTL_INVALID),
    ({"Nats-Incr": "1"}, COUNTERS_DISABLED),
    ({"Nats-Incr": "+1"}, COUNTERS_DISABLED),
    ({"Nats-Incr": "-12345678901234567890123"}, COUNTERS_DISABLED),
    ({"Nats-Incr": "abc"}, INCR_INVALID),
    ({"Nats-Incr": "1.5"}, INCR_INVALID),
    ({"Nats-Schedule": "@every 1s"}, SCHEDULES_DISABLED),
    ({"Nats-Schedule": "garbage"}, SCHEDULES_DISABLED),
    ({"Nats-Schedule-Time-Zone": "Nowhere/Bad"}, SCHEDULES_DISABLED),
    ({"Nats-Schedule-Next": "purge", "Nats-Scheduler": "feat.other"}, SCHEDULES_DISABLED),
    ({"Nats-Schedule-Next": "purge"}, SCHEDULER_INVALID),
    ({"Nats-Schedule-Next": "soon", "Nats-Scheduler": "feat.other"}, SCHEDULER_INVALID),
    ({"Nats-Schedule-Next": "purge", "Nats-Scheduler": "feat.a"}, SCHEDULER_INVALID),  # its own subject
    ({"Nats-Scheduler": "feat.other"}, SCHEDULER_INVALID),
    ({"Nats-Batch-Id": "b1"}, ATOMIC_DISABLED),
    ({"Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "1", "Nats-Batch-Commit": "1"}, ATOMIC_DISABLED),
    ({"Nats-Batch-Id": "x" * 70}, ATOMIC_DISABLED),
    ({"Nats-Stream-Source": "OTHER 1 > >"}, SOURCE_NOT_ALLOWED),
]


@pytest.mark.parametrize(
    ("headers", "error"), REFUSED, ids=[f"{next(iter(h))}={h[next(iter(h))][:12]}-{e[0]}" for h, e in REFUSED]
)
def test_feature_header_is_refused_and_leaves_nothing(js, headers, error):
    js.add_stream(name=S, subjects=["feat.>"])
    js.publish("feat.a", b"before")
    before = state(js)
    assert answer(js.publish, "feat.a", b"", headers={**headers, MSG_ID: "m1"}) == error
    assert state(js) == before
    # The refused message's id was not recorded: the same id is a new message.
    ack = js.publish("feat.a", b"genuine", headers={MSG_ID: "m1"})
    assert (ack.seq, ack.duplicate) == (2, None)


# Headers the server stores as they are on a stream without the features: they are only
# meaningful alongside another header (Nats-Batch-Sequence without Nats-Batch-Id), are
# the server's own (markers, counters' sources) or hold an empty value (the server reads
# an empty header as absent).
STORED = [
    {"Nats-Batch-Sequence": "1"},
    {"Nats-Batch-Commit": "1"},
    {"Nats-Schedule-Time-Zone": "UTC"},
    {"Nats-Schedule-TTL": "5s"},
    {"Nats-Schedule-Target": "feat.x"},
    {"Nats-Schedule-Rollup": "sub"},
    {"Nats-Schedule-Source": "feat.y"},
    {"Nats-Counter-Sources": "{}"},
    {"Nats-Marker-Reason": "MaxAge"},
    {"Nats-Msg-Size": "5"},
    {"Nats-TTL": "00"},
    {"Nats-TTL": ""},
    {"Nats-Incr": ""},
    {"Nats-Schedule": ""},
    {"Nats-Batch-Id": ""},
    {"nats-ttl": "5s"},  # header names are case-sensitive to the server
    # the server's own headers on what it sends (deliveries, direct gets, republish, flow
    # control, markers): a client publishing them gets them stored as given
    *({name: "1"} for name in (
        "Nats-Consumer-Stalled", "Nats-Last-Consumer", "Nats-Last-Sequence", "Nats-Last-Stream", "Nats-No-Masking",
        "Nats-Num-Pending", "Nats-Pending-Bytes", "Nats-Pending-Messages", "Nats-Pin-Id", "Nats-Required-Api-Level",
        "Nats-Response-Type", "Nats-Sequence", "Nats-Server-Xkey", "Nats-Stream", "Nats-Stream-Identity",
        "Nats-Subject", "Nats-Time-Stamp", "Nats-Trace-Hop", "Nats-Trace-Only", "Nats-Trace-Origin-Account",
        "Nats-UpTo-Sequence",
    )),
]  # fmt: skip


@pytest.mark.parametrize("headers", STORED, ids=[f"{k}={v}" for h in STORED for k, v in h.items()])
def test_header_the_server_stores(js, headers):
    js.add_stream(name=S, subjects=["feat.>"])
    assert answer(js.publish, "feat.a", b"x", headers=headers) == 1
    assert js.get_msg(S, 1).headers == headers


# Every Nats-* header nats-server 2.15 reads or writes (its source's header constants).
SERVER_HEADERS = (
    "Nats-Batch-Commit", "Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Consumer-Stalled", "Nats-Counter-Sources",
    "Nats-Expected-Last-Msg-Id", "Nats-Expected-Last-Sequence", "Nats-Expected-Last-Subject-Sequence",
    "Nats-Expected-Last-Subject-Sequence-Subject", "Nats-Expected-Stream", "Nats-Incr", "Nats-Last-Consumer",
    "Nats-Last-Sequence", "Nats-Last-Stream", "Nats-Marker-Reason", "Nats-Msg-Id", "Nats-Msg-Size", "Nats-No-Masking",
    "Nats-Num-Pending", "Nats-Pending-Bytes", "Nats-Pending-Messages", "Nats-Pin-Id", "Nats-Request-Info",
    "Nats-Required-Api-Level", "Nats-Response-Type", "Nats-Rollup", "Nats-Schedule", "Nats-Schedule-Next",
    "Nats-Schedule-Rollup", "Nats-Schedule-Source", "Nats-Schedule-TTL", "Nats-Schedule-Target",
    "Nats-Schedule-Time-Zone", "Nats-Scheduler", "Nats-Sequence", "Nats-Server-Xkey", "Nats-Stream",
    "Nats-Stream-Identity", "Nats-Stream-Source",
    "Nats-Subject", "Nats-TTL", "Nats-Time-Stamp", "Nats-Trace-Dest", "Nats-Trace-Hop", "Nats-Trace-Only",
    "Nats-Trace-Origin-Account", "Nats-UpTo-Sequence",
)  # fmt: skip
# Implemented as the server does: tests/contract/test_publish_rules.py.
IMPLEMENTED = (
    "Nats-Msg-Id", "Nats-Expected-Stream", "Nats-Expected-Last-Sequence", "Nats-Expected-Last-Subject-Sequence",
    "Nats-Expected-Last-Subject-Sequence-Subject", "Nats-Expected-Last-Msg-Id", "Nats-Rollup",
)  # fmt: skip
# Dropped as the server drops it (below); refused by the engine alone (tests/engine/test_refusals.py).
DROPPED, ENGINE_REFUSED = ("Nats-Request-Info",), ("Nats-Trace-Dest",)


def test_every_server_header_is_implemented_refused_or_stored_as_the_server_does():
    refused = {k for h, _ in REFUSED if len(h) == 1 for k in h}
    stored = {k for h in STORED for k in h if h[k]}  # (an empty value is read as absent)
    for name in SERVER_HEADERS:
        # (some are refused or stored by their value: Nats-Schedule-Time-Zone)
        assert name in {*IMPLEMENTED, *refused, *stored, *DROPPED, *ENGINE_REFUSED}, (
            f"{name}: no test says what the engine does with it"
        )
    assert set(IMPLEMENTED) <= set(PUBLISH_RULES_HEADERS())


def PUBLISH_RULES_HEADERS():  # noqa: N802 - the header names test_publish_rules.py exercises
    from tests.contract import test_publish_rules as rules

    return [v for k, v in vars(rules).items() if k.isupper() and isinstance(v, str) and v.startswith("Nats-")]


def test_request_info_is_dropped_as_the_server_drops_it(js):
    js.add_stream(name=S, subjects=["feat.>"])
    js.publish("feat.a", b"x", headers={"Nats-Request-Info": '{"acc":"X"}', "X-Kept": "y"})
    assert js.get_msg(S, 1).headers == {"X-Kept": "y"}
    one = js.stream_info(S).state.bytes
    js.publish("feat.a", b"x", headers={"X-Kept": "y"})
    assert js.stream_info(S).state.bytes == 2 * one  # counted without the dropped header


# ---------------------------------------------------------------------- the order of checks

ORDER = [
    # sealed, then size, then an atomic batch, before every header check
    ("sealed", {"Nats-Batch-Id": "b"}, SEALED),
    ("sealed", {"Nats-TTL": "5s"}, SEALED),
    ("small", {"Nats-Batch-Id": "b"}, TOO_BIG),
    ("small", {"Nats-TTL": "abc"}, TOO_BIG),
    ("small", {"Nats-Incr": "1"}, TOO_BIG),
    ("plain", {"Nats-Batch-Id": "b", "Nats-Expected-Stream": "OTHER"}, ATOMIC_DISABLED),
    # counters first, then the expected stream, then the TTL
    ("plain", {"Nats-Incr": "1", "Nats-Expected-Stream": "OTHER"}, COUNTERS_DISABLED),
    ("plain", {"Nats-Incr": "abc", "Nats-Expected-Stream": "OTHER"}, INCR_INVALID),
    ("plain", {"Nats-Incr": "1", "Nats-TTL": "5s"}, COUNTERS_DISABLED),
    ("plain", {"Nats-TTL": "5s", "Nats-Incr": "abc"}, INCR_INVALID),
    ("plain", {"Nats-TTL": "5s", "Nats-Expected-Stream": "OTHER"}, WRONG_STREAM),
    # a TTL before the expected sequences, schedules and the source header after them
    ("plain", {"Nats-TTL": "5s", "Nats-Expected-Last-Sequence": "99"}, TTL_DISABLED),
    ("plain", {"Nats-TTL": "5s", "Nats-Expected-Last-Subject-Sequence": "99"}, TTL_DISABLED),
    ("plain", {"Nats-Schedule": "@every 1s", "Nats-Expected-Last-Sequence": "99"}, wrong_last_seq(1)),
    ("plain", {"Nats-Schedule": "@every 1s", "Nats-Expected-Stream": "OTHER"}, WRONG_STREAM),
    ("plain", {"Nats-Scheduler": "feat.b", "Nats-Expected-Last-Sequence": "99"}, wrong_last_seq(1)),
    ("plain", {"Nats-Stream-Source": "x", "Nats-Expected-Last-Sequence": "99"}, wrong_last_seq(1)),
    # ... and before dedup: a refused header is refused even with a known id
    ("plain", {"Nats-Stream-Source": "x", MSG_ID: "m0"}, SOURCE_NOT_ALLOWED),
    ("plain", {"Nats-TTL": "5s", MSG_ID: "m0"}, TTL_DISABLED),
    ("plain", {"Nats-Schedule": "@every 1s", MSG_ID: "m0"}, SCHEDULES_DISABLED),
    # an invalid TTL only after dedup, the expected last msg id and the rollup
    ("plain", {"Nats-TTL": "abc", MSG_ID: "m0"}, 1),
    ("plain", {"Nats-TTL": "abc", "Nats-Expected-Last-Msg-Id": "zz"}, err(10070, "wrong last msg ID: m0")),
    ("plain", {"Nats-TTL": "abc", "Nats-Rollup": "all"}, ROLLUP_NOT_PERMITTED),
    # ... but before the discard-new limits
    ("full", {"Nats-TTL": "abc"}, TTL_INVALID),
    ("full", {"Nats-TTL": "5s"}, TTL_DISABLED),
    # an interest stream takes a message no consumer wants before the TTL's check
    ("interest", {"Nats-TTL": "abc"}, 1),
    ("interest", {"Nats-TTL": "5s"}, TTL_DISABLED),
    ("interest", {"Nats-Batch-Id": "b"}, ATOMIC_DISABLED),
    # on a stream with allow_msg_ttl a valid TTL passes on to the checks after it
    ("ttl", {"Nats-TTL": "5s", "Nats-Expected-Last-Sequence": "99"}, wrong_last_seq(1)),
    ("ttl", {"Nats-TTL": "5s", MSG_ID: "m0"}, 1),
    ("ttl", {"Nats-TTL": "abc", MSG_ID: "m0"}, 1),
    ("ttl", {"Nats-TTL": "abc", "Nats-Incr": "1"}, COUNTERS_DISABLED),
    ("ttl", {"Nats-TTL": "5s"}, 2),
    ("ttl-full", {"Nats-TTL": "abc"}, TTL_INVALID),
    ("ttl-full", {"Nats-TTL": "5s"}, MAX_MSGS),
]


@pytest.mark.parametrize(("kind", "headers", "expected"), ORDER)
def test_order_of_checks(js, kind, headers, expected):
    config = {
        "plain": {},
        "sealed": {},
        "small": {"max_msg_size": 10},
        "full": {"max_msgs": 1, "discard": "new"},
        "interest": {"retention": "interest"},
        "ttl": {"allow_msg_ttl": True},
        "ttl-full": {"allow_msg_ttl": True, "max_msgs": 1, "discard": "new"},
    }[kind]
    js.add_stream(name=S, subjects=["feat.>"], **config)
    if kind in ("plain", "full", "ttl", "ttl-full"):
        js.publish("feat.a", b"first", headers={MSG_ID: "m0"})
    if kind == "sealed":
        js.update_stream(name=S, subjects=["feat.>"], sealed=True)
    before = state(js)
    assert answer(js.publish, "feat.a", b"x" * 20 if kind == "small" else b"x", headers=headers) == expected
    if isinstance(expected, tuple):
        assert state(js) == before


# ---------------------------------------------------------------------- a header block past 64 KiB

HEADER_TOO_BIG = err(10097, "header size exceeds maximum allowed of 64k")


@pytest.mark.parametrize(("block", "expected"), [(65535, 1), (65536, HEADER_TOO_BIG), (70000, HEADER_TOO_BIG)])
def test_a_header_block_past_64k_is_refused(js, block, expected):
    js.add_stream(name=S, subjects=["feat.>"])
    overhead = len(b"NATS/1.0\r\nX-Big: \r\nNats-Msg-Id: big\r\n\r\n")  # the block as nats-py writes it
    assert answer(js.publish, "feat.a", b"x", headers={"X-Big": "v" * (block - overhead), MSG_ID: "big"}) == expected
    assert state(js)[0] == (1 if expected == 1 else 0)
    if expected != 1:
        assert js.publish("feat.a", b"x", headers={MSG_ID: "big"}).duplicate is None


@pytest.mark.parametrize(
    ("config", "headers", "expected"),
    [
        ({"max_msg_size": 100}, {}, TOO_BIG),
        ({}, {"Nats-Batch-Id": "b"}, ATOMIC_DISABLED),
        ({}, {"Nats-Incr": "1"}, HEADER_TOO_BIG),
        ({}, {"Nats-Expected-Stream": "OTHER"}, HEADER_TOO_BIG),
        ({}, {"Nats-TTL": "5s"}, HEADER_TOO_BIG),
        ({}, {"Nats-Rollup": "all"}, HEADER_TOO_BIG),
    ],
)
def test_a_big_header_is_refused_after_size_and_batch_before_the_other_headers(js, config, headers, expected):
    js.add_stream(name=S, subjects=["feat.>"], **config)
    assert answer(js.publish, "feat.a", b"x", headers={"X-Big": "v" * 70000, **headers}) == expected
    assert state(js) == (0, 0, 0)


# ---------------------------------------------------------------------- every publish path


def test_publish_async_refuses_and_records_no_id(jetspark_backend):
    # (not the oracle: nats-py 2.16 never completes a publish_async future whose PubAck is an error)
    js = jetspark_backend
    js.add_stream(name=S, subjects=["feat.>"])
    futures = [
        js.publish_async("feat.a", b"ok"),
        js.publish_async("feat.a", b"", headers={"Nats-TTL": "5s", MSG_ID: "a1"}),
        js.publish_async("feat.a", b"", headers={"Nats-Incr": "1", MSG_ID: "a2"}),
        js.publish_async("feat.a", b"", headers={"Nats-Batch-Id": "b", MSG_ID: "a3"}),
        js.publish_async("feat.a", b"", headers={"Nats-Schedule": "@every 1s", MSG_ID: "a4"}),
    ]
    js.publish_async_completed(timeout=30)
    assert futures[0].result().seq == 1
    got = [(f.exception().err_code, f.exception().description) for f in futures[1:]]
    assert got == [(c, d) for c, _, d in (TTL_DISABLED, COUNTERS_DISABLED, ATOMIC_DISABLED, SCHEDULES_DISABLED)]
    assert state(js)[0::2] == (1, 1)
    acks = [js.publish("feat.a", b"genuine", headers={MSG_ID: f"a{i}"}) for i in range(1, 5)]
    assert [(a.seq, a.duplicate) for a in acks] == [(2, None), (3, None), (4, None), (5, None)]


def test_publish_batch_refuses_a_row_and_records_no_id(jetspark_backend):
    js = jetspark_backend
    js.add_stream(name=S, subjects=["feat.>"])
    table = pa.table(
        {
            "subject": ["feat.a"],
            "data": [b""],
            "headers": pa.array([[("Nats-TTL", "5s")]], pa.map_(pa.string(), pa.string())),
            "msg_id": ["r1"],
        }
    )
    with pytest.raises(BadRequestError) as exc:
        js.publish_batch(table, stream=S)
    assert (exc.value.err_code, exc.value.description) == (10166, "per-message TTL is disabled")
    assert state(js) == (0, 0, 0)
    ack = js.publish("feat.a", b"genuine", headers={MSG_ID: "r1"})
    assert (ack.seq, ack.duplicate) == (1, None)
