"""Bad input on every public verb, on both backends: the engine on a store directory and a
real nats-server through jetspark's nats:// backend.

The property, fuzzed with Hypothesis over garbage of every type for each argument: a
call either succeeds, or raises a ``JetSparkError``, or a ``TypeError``/``ValueError``
whose message names the argument -- never any other exception -- and a refused call
changes nothing (streams, their configs and states, consumers and their positions are
compared before and after).  Then one test per finding of the issue, asserting the
server's err_code on both backends where the server has one.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import jetspark
from jetspark import validate as V
from jetspark.api import ConsumerConfig, StreamConfig
from jetspark.errors import APIError, BadRequestError, JetSparkError
from jetspark.protocol.arrow import HEADERS_TYPE
from tests.conftest import KEEPER
from tests.contract.consumer_support import eventually

STREAM = "BAD"
CONSUMER = "C"
SUBJECTS = ["bad.>"]

# Bounded runs: the whole file stays well under a minute on both backends.
FUZZ = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


# ---------------------------------------------------------------------- the two backends


def snapshot(js) -> dict:
    """What a refused call must leave as it was (times left out: they move by themselves)."""
    out = {}
    for name in js.stream_names():
        info = js.stream_info(name)
        s = info.state
        consumers = {
            c.name: (
                c.config, c.delivered.stream_seq, c.delivered.consumer_seq, c.ack_floor.stream_seq,
                c.ack_floor.consumer_seq, c.num_pending, c.num_ack_pending, c.num_redelivered,
            )
            for c in js.consumers_info(name)
        }  # fmt: skip
        out[name] = (
            info.config,
            s.messages,
            s.bytes,
            s.first_seq,
            s.last_seq,
            s.num_deleted,
            s.num_subjects,
            consumers,
        )
    return out


class Baseline:
    """A handle and the known state every example starts from: stream BAD on bad.> with three
    messages (one with headers) and the durable pull consumer C."""

    def __init__(self, js, kind: str) -> None:
        self.js = js
        self.kind = kind
        self.is_server = kind != "engine"  # (consumer_support.eventually waits only on a server)
        # Server: memory storage, so a stream deleted and made again at once starts empty.
        self.storage = "file" if kind == "engine" else "memory"
        self.reset()

    def reset(self) -> None:
        js = self.js
        for name in js.stream_names():
            if name != KEEPER:
                js.delete_stream(name)
        js.add_stream(name=STREAM, subjects=SUBJECTS, storage=self.storage)
        js.publish("bad.a", b"one")
        js.publish("bad.b", b"two", headers={"H": "1"})
        js.publish("bad.c.d", b"three")
        js.add_consumer(STREAM, durable_name=CONSUMER, ack_policy="explicit", filter_subject="bad.>")
        self.state = snapshot(js)

    def restore(self) -> None:
        """After a call that succeeded: back to the baseline, if the call changed anything."""
        if snapshot(self.js) != self.state:
            self.reset()


@pytest.fixture(scope="module", params=["engine", pytest.param("server", marks=pytest.mark.server)])
def base(request, tmp_path_factory):
    if request.param == "engine":
        js = jetspark.connect(tmp_path_factory.mktemp("bad-input") / "store")
    else:
        js = jetspark.connect(request.getfixturevalue("server").url, timeout=5)
    b = Baseline(js, request.param)
    yield b
    for name in js.stream_names():
        if name != KEEPER:
            js.delete_stream(name)
    js.close()


def attempt(base: Baseline, fn, kwargs: dict, names=()) -> bool:
    """Call ``fn(**kwargs)`` and check the property; True if it succeeded (the baseline is
    then restored)."""
    js = base.js
    before = snapshot(js)
    try:
        out = fn(**kwargs)
        if isinstance(out, Iterator):
            for _ in out:
                pass
    except JetSparkError as exc:
        event(f"refused: {type(exc).__name__}")
    except (TypeError, ValueError) as exc:
        text = str(exc)
        named = [n for n in (*kwargs, *names) if n in text]
        assert named, f"{type(exc).__name__} from {fn.__name__}({kwargs!r}) names no argument: {text}"
        event(f"refused: {type(exc).__name__}")
    else:
        event("succeeded")
        base.restore()
        return True
    assert snapshot(js) == before, f"the refused call {fn.__name__}({kwargs!r}) changed the store"
    return False


# ---------------------------------------------------------------------- garbage

NAN, INF = math.nan, math.inf
HUGE = st.sampled_from(
    [
        2**31,
        2**32,
        2**53 + 1,
        2**63 - 1,
        2**63,
        2**64 - 1,
        2**64,
        10**30,
        -1,
        -(2**31) - 1,
        -(2**63),
        -(2**63) - 1,
        -(10**30),
        10**400,
    ]
)
INTS = st.one_of(st.integers(-5, 20), HUGE)
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([NAN, INF, -INF, -0.0, -1.5, 1e-12, 1e300])
)
WEIRD_TEXT = st.one_of(
    st.sampled_from([
        "", " ", "s a", "bad.*", "bad.>", "bad..x", "bad.", ".bad", "bad.\r\nx", "bad.\x00", "bad.\ud800", "\ud800",
        "é", "bad.é", ">", "*", "a\tb", "bad. x", "x" * 300, "a/b", "A.B", "Nats-Msg-Id", "k: v\r\nNats-Msg-Id: x",
    ]),
    st.text(max_size=12),
)  # fmt: skip


class Odd:
    def __repr__(self) -> str:
        return "<Odd>"


GARBAGE = st.one_of(
    st.none(), st.booleans(), INTS, FLOATS, WEIRD_TEXT, st.binary(max_size=6),
    st.lists(st.integers(-3, 3), max_size=3), st.lists(WEIRD_TEXT, max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.builds(Odd), st.builds(object),
    st.just(dt.datetime(2000, 1, 1)), st.just(dt.datetime(1, 1, 1)), st.just(b"bad.a"), st.just(bytearray(b"x")),
    st.just((1, 2)), st.just(frozenset()), st.just(dt.timedelta(seconds=1)),
)  # fmt: skip


class Arg:
    """An argument: a strategy of valid values and one of bad ones (garbage of any type)."""

    def __init__(self, good, bad=GARBAGE) -> None:
        self.good = good
        self.bad = bad


def arg(*good, bad=GARBAGE) -> Arg:
    return Arg(st.sampled_from(good) if good else st.nothing(), bad)


@st.composite
def calls(draw, required: dict, optional: dict | None = None) -> dict:
    """Keyword arguments: the required ones and any subset of the optional ones, all valid
    but (mostly) one or two drawn from their bad values, so each argument's own check is
    what decides."""
    optional = optional or {}
    specs = {**required, **optional}
    names = list(required) + [n for n in optional if draw(st.integers(0, 3)) == 0]
    bad = set()
    if names and draw(st.integers(0, 9)) < 8:
        bad.add(draw(st.sampled_from(names)))
        if draw(st.integers(0, 9)) == 0:
            bad.add(draw(st.sampled_from(names)))
    out = {}
    for n in names:
        spec = specs[n]
        use_bad = n in bad or spec.good.is_empty
        out[n] = draw(spec.bad if use_bad else spec.good)
    return out


NAMES = ("BAD", "NEW", "NOPE")
DURATION = arg(0.0, 1.0, 120.0, 0.5)
STREAM_FIELDS = dict(
    name=arg(*NAMES), description=arg("d"), subjects=arg(["new.>"], ["new.a", "new.b"], SUBJECTS, ["bad.a"]),
    retention=arg("limits", "interest", "workqueue"), max_consumers=arg(-1, 5), max_msgs=arg(-1, 10),
    max_bytes=arg(-1, 4096), discard=arg("old", "new"), discard_new_per_subject=arg(False, True),
    max_age=DURATION, max_msgs_per_subject=arg(-1, 2), max_msg_size=arg(-1, 100), storage=arg("file", "memory"),
    num_replicas=arg(1), no_ack=arg(False), duplicate_window=DURATION, sealed=arg(False, True),
    deny_delete=arg(False, True), deny_purge=arg(False, True), allow_rollup_hdrs=arg(False, True),
    allow_direct=arg(False, True), first_seq=arg(1, 10), metadata=arg({"k": "v"}),
)  # fmt: skip
CONSUMER_FIELDS = dict(
    name=arg("N", CONSUMER), durable_name=arg("N", CONSUMER), description=arg("d"),
    deliver_policy=arg("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"),
    opt_start_seq=arg(1, 2),
    opt_start_time=arg(dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc), "2000-01-01T00:00:00Z"),
    ack_policy=arg("none", "all", "explicit"), ack_wait=DURATION, max_deliver=arg(-1, 3),
    backoff=arg([1.0], [0.5, 2.0]), filter_subject=arg("bad.a", "bad.>"), filter_subjects=arg(["bad.a", "bad.b"]),
    replay_policy=arg("instant", "original"),
    max_waiting=arg(1, 512), max_ack_pending=arg(-1, 10), headers_only=arg(True, False), inactive_threshold=DURATION,
    num_replicas=arg(0, 1), mem_storage=arg(True, False), metadata=arg({"k": "v"}),
)  # fmt: skip

STREAM_ARG = arg(STREAM, "NOPE")
SUBJECT = arg("bad.a", "bad.b.c", "nobody.a")
SEQ = arg(0, 1, 2, 3, 99)
PAYLOAD = arg(b"", b"x", bytearray(b"y"), memoryview(b"z"))
HEADERS = arg(
    {"K": "v"}, {"K": ["a", "b"]}, {"Nats-Msg-Id": "m1"}, {}, None,
    bad=st.one_of(
        GARBAGE, st.dictionaries(WEIRD_TEXT, WEIRD_TEXT, min_size=1, max_size=2),
        st.dictionaries(st.sampled_from(["K", "Nats-Msg-Id"]), GARBAGE, min_size=1, max_size=2),
    ),
)  # fmt: skip


def not_a_wait(value) -> bool:
    """Values fetch must refuse rather than wait on (a valid timeout could wait seconds)."""
    if value is None:
        return False
    try:
        return not (V.is_real(value) and math.isfinite(value) and value >= 0)
    except OverflowError:
        return True  # an integer beyond any float


TIMEOUT = arg(0, 0.0, 0.01, bad=GARBAGE.filter(not_a_wait))


# ---------------------------------------------------------------------- tables for publish_batch


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


# Arrow strings are UTF-8: a lone surrogate cannot even be put in a table.
ARROW_TEXT = WEIRD_TEXT.filter(_encodable)


def _column(draw, n: int, name: str, good: bool):
    """A column for ``name``: a good one, or one of another type, with nulls or odd values."""
    kinds = {
        "subject": ["nulls", "odd", "int", "binary", "large", "dict"],
        "data": ["nulls", "string", "int", "float", "large", "list"],
        "headers": ["nulls", "odd", "strmap", "int", "struct", "list"],
        "msg_id": ["nulls", "odd", "empty", "int"],
    }[name]
    kind = "good" if good else draw(st.sampled_from(kinds))
    texts = st.one_of(st.sampled_from(["bad.a", "bad.b.c"]), ARROW_TEXT)
    if name == "subject":
        values = draw(
            st.lists(st.sampled_from(["bad.a", "bad.b.c"]) if kind == "good" else texts, min_size=n, max_size=n)
        )
        if kind == "nulls" and n:
            values[draw(st.integers(0, n - 1))] = None
        if kind == "int":
            return pa.array(range(n), pa.int64())
        if kind == "binary":
            return pa.array([v.encode() if v else b"" for v in values], pa.binary())
        if kind == "large":
            return pa.array(values, pa.large_string())
        if kind == "dict":
            return pa.array(values, pa.string()).dictionary_encode()
        return pa.array(values, pa.string())
    if name == "data":
        if kind == "int":
            return pa.array(range(n), pa.int64())
        if kind == "float":
            return pa.array([0.5] * n, pa.float64())
        if kind == "list":
            return pa.array([[1]] * n, pa.list_(pa.int64()))
        if kind == "string":
            return pa.array(["text"] * n, pa.string())
        values = [b"p%d" % i for i in range(n)]
        if kind == "nulls" and n:
            values[0] = None
        return pa.array(values, pa.large_binary() if kind == "large" else pa.binary())
    if name == "headers":
        if kind == "int":
            return pa.array(range(n), pa.int64())
        if kind == "struct":
            return pa.array([{"k": "v"}] * n, pa.struct([("k", pa.string())]))
        if kind == "list":
            return pa.array([["a"]] * n, pa.list_(pa.string()))
        if kind == "strmap":
            return pa.array([[("K", "v")]] * n, pa.map_(pa.string(), pa.string()))
        keys = (
            st.sampled_from(["K", "Nats-Msg-Id"]) if kind == "good" else st.one_of(st.sampled_from(["K"]), ARROW_TEXT)
        )
        vals = st.sampled_from(["v", "w"]) if kind == "good" else st.one_of(st.none(), ARROW_TEXT)
        cell = st.lists(st.tuples(keys, st.lists(vals, max_size=2)), max_size=2)
        cells = draw(st.lists(st.one_of(st.none(), cell), min_size=n, max_size=n))
        return pa.array(cells, HEADERS_TYPE)
    if kind == "int":
        return pa.array(range(n), pa.int64())
    if kind == "empty":
        return pa.array([""] * n, pa.string())
    ids = draw(
        st.lists(
            st.sampled_from(["i1", "i2"]) if kind == "good" else st.one_of(st.none(), ARROW_TEXT),
            min_size=n,
            max_size=n,
        )
    )
    if kind == "nulls" and n:
        ids[0] = None
    return pa.array(ids, pa.string())


@st.composite
def tables(draw, good: bool):
    """A table (or record batch) for publish_batch; a bad one has one wrong column, misses a
    required one, or is not a table at all."""
    if not good and draw(st.integers(0, 5)) == 0:
        return draw(GARBAGE)
    n = draw(st.integers(1 if good else 0, 3))
    names = ["subject", "data"] + [c for c in ("headers", "msg_id") if draw(st.booleans())]
    wrong = None if good else draw(st.sampled_from(names))
    missing = not good and draw(st.integers(0, 5)) == 0 and wrong in ("subject", "data")
    cols = {c: _column(draw, n, c, c != wrong) for c in names if not (missing and c == wrong)}
    table = pa.table(cols)
    return table.to_batches()[0] if n and draw(st.booleans()) else table


TABLE = Arg(tables(True), tables(False))


# ---------------------------------------------------------------------- the property, verb by verb


@FUZZ
@given(kw=calls({}, STREAM_FIELDS))
def test_add_stream(base, kw):
    attempt(base, base.js.add_stream, kw)


@FUZZ
@given(kw=calls({"config": arg(None, StreamConfig(name="NEW", subjects=["new.>"]),
                               {"name": "NEW", "subjects": ["new.>"]})},
                {"name": arg("NEW"), "max_age": DURATION}))  # fmt: skip
def test_add_stream_config_argument(base, kw):
    attempt(base, base.js.add_stream, kw, names=STREAM_FIELDS)


@FUZZ
@given(kw=calls({}, STREAM_FIELDS))
def test_update_stream(base, kw):
    attempt(base, base.js.update_stream, {"name": STREAM, "subjects": SUBJECTS, **kw})


@FUZZ
@given(kw=calls({"name": arg(*NAMES)}))
def test_delete_stream(base, kw):
    attempt(base, base.js.delete_stream, kw)


@FUZZ
@given(kw=calls({"name": STREAM_ARG}, {"subjects_filter": arg("bad.>", "bad.a"), "deleted_details": arg(True, False)}))
def test_stream_info(base, kw):
    attempt(base, base.js.stream_info, kw)


@FUZZ
@given(kw=calls({"subject": SUBJECT}))
def test_find_stream_name_by_subject(base, kw):
    attempt(base, base.js.find_stream_name_by_subject, kw)


@FUZZ
@given(kw=calls({"name": STREAM_ARG}, {"subject": arg("bad.a", "bad.>"), "seq": SEQ, "keep": SEQ}))
def test_purge_stream(base, kw):
    attempt(base, base.js.purge_stream, kw)


@FUZZ
@given(kw=calls({"subject": SUBJECT}, {"payload": PAYLOAD, "headers": HEADERS, "stream": arg(STREAM, "OTHER")}))
def test_publish(base, kw):
    attempt(base, base.js.publish, kw)


def _publish_async(js):
    """publish_async, its future waited for: what the call or its future raises."""

    def publish_async(**kwargs):
        fut = js.publish_async(**kwargs)
        if fut.exception(timeout=10) is not None:
            raise fut.exception()
        return fut.result()

    return publish_async


@FUZZ
@given(
    kw=calls(
        {"subject": SUBJECT},
        {"payload": PAYLOAD, "headers": HEADERS, "stream": arg(STREAM, "OTHER"), "wait_stall": TIMEOUT},
    )
)
def test_publish_async(base, kw):
    attempt(base, _publish_async(base.js), kw)


@FUZZ
@given(kw=calls({"data": TABLE}, {"stream": arg(STREAM), "msg_id_prefix": arg("p-"), "msg_id_start": arg(0, 5)}))
def test_publish_batch(base, kw):
    attempt(base, base.js.publish_batch, kw, names=("subject", "data", "headers", "msg_id", "row"))


@FUZZ
@given(
    kw=calls({"stream": STREAM_ARG}, {"seq": SEQ, "last_by_subj": arg("bad.a", "bad.*"), "next_by_subj": arg("bad.>")})
)
def test_get_msg(base, kw):
    attempt(base, base.js.get_msg, kw)


@FUZZ
@given(kw=calls({"stream": STREAM_ARG, "subject": SUBJECT}))
def test_get_last_msg(base, kw):
    attempt(base, base.js.get_last_msg, kw)


@FUZZ
@given(kw=calls({"stream": STREAM_ARG, "seq": SEQ}))
def test_delete_msg(base, kw):
    attempt(base, base.js.delete_msg, kw)


READ_ARGS = {
    "start_seq": SEQ, "end_seq": SEQ, "subjects": arg(["bad.a"], ["bad.>", "bad.b"], None),
    "batch_size": arg(1, 2, 100),
}  # fmt: skip


@FUZZ
@given(kw=calls({"stream": STREAM_ARG}, {**READ_ARGS, "headers": arg(True, False)}))
def test_read_batches(base, kw):
    attempt(base, base.js.read_batches, kw)


@FUZZ
@given(kw=calls({"stream": STREAM_ARG}, READ_ARGS))
def test_ordered_consumer(base, kw):
    attempt(base, base.js.ordered_consumer, kw)


@FUZZ
@given(
    kw=calls(
        {
            "stream": STREAM_ARG,
            "when": arg(dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc), dt.datetime(2100, 1, 1), 0, 10**18),
        }
    )
)
def test_seq_for_time(base, kw):
    attempt(base, base.js.seq_for_time, kw)


@FUZZ
@given(kw=calls({"stream": STREAM_ARG, "lo": SEQ, "hi": SEQ, "max_bytes": arg(0, 10, 10**6)}))
def test_seq_for_bytes(base, kw):
    attempt(base, base.js.seq_for_bytes, kw)


@FUZZ
@given(
    verb=st.sampled_from(["add_consumer", "create_consumer", "update_consumer"]),
    kw=calls({"stream": STREAM_ARG}, CONSUMER_FIELDS),
)
def test_add_consumer(base, verb, kw):
    attempt(base, getattr(base.js, verb), kw)


@FUZZ
@given(kw=calls({"config": arg(None, ConsumerConfig(durable_name="N"), {"durable_name": "N"})},
                {"ack_wait": DURATION, "opt_start_time": CONSUMER_FIELDS["opt_start_time"]}))  # fmt: skip
def test_add_consumer_config_argument(base, kw):
    attempt(base, base.js.add_consumer, {"stream": STREAM, **kw}, names=CONSUMER_FIELDS)


@FUZZ
@given(
    verb=st.sampled_from(["delete_consumer", "consumer_info"]),
    kw=calls({"stream": STREAM_ARG, "consumer": arg(CONSUMER, "NOPE")}),
)
def test_consumer_by_name(base, verb, kw):
    attempt(base, getattr(base.js, verb), kw)


@FUZZ
@given(kw=calls({"stream": STREAM_ARG, "durable": arg(CONSUMER, "NOPE")}))
def test_ack_floor(base, kw):
    attempt(base, base.js.ack_floor, kw)


@FUZZ
@given(kw=calls({"stream": STREAM_ARG, "durable": arg(CONSUMER), "seq": SEQ}))
def test_advance_ack_floor(base, kw):
    attempt(base, base.js.advance_ack_floor, kw)


@FUZZ
@given(kw=calls({}, {"subject": arg("bad.a", "bad.>"), "durable": arg(CONSUMER, "D2"), "stream": arg(STREAM),
                     "config": arg(ConsumerConfig(ack_policy="explicit"), {"ack_policy": "none"})}))  # fmt: skip
def test_pull_subscribe(base, kw):
    attempt(base, base.js.pull_subscribe, kw)


@FUZZ
@given(kw=calls({}, {"durable": arg(CONSUMER), "stream": arg(STREAM), "consumer": arg(CONSUMER)}))
def test_pull_subscribe_bind(base, kw):
    attempt(base, base.js.pull_subscribe_bind, kw)


@FUZZ
@given(
    kw=calls(
        {"timeout": TIMEOUT}, {"batch": arg(1, 2, 10), "no_wait": arg(True, False), "max_bytes": arg(None, 0, 10**6)}
    )
)
def test_fetch(base, kw):
    # timeout is always given: the default (5 s) would be waited out when nothing fits max_bytes.
    sub = base.js.pull_subscribe_bind(CONSUMER, stream=STREAM)
    attempt(base, sub.fetch, kw)  # a FetchTimeoutError (nothing within max_bytes) is a JetSparkError


@FUZZ
@given(
    verb=st.sampled_from(["nak", "ack_sync", "in_progress"]),
    value=arg(None, 0, 0.5, bad=GARBAGE.filter(not_a_wait)).bad,
)
def test_msg_acks(base, verb, value):
    sub = base.js.pull_subscribe_bind(CONSUMER, stream=STREAM)
    (msg,) = sub.fetch(1, timeout=0, no_wait=True)
    kw = {"nak": {"delay": value}, "ack_sync": {"timeout": value}, "in_progress": {}}[verb]
    if not attempt(base, getattr(msg, verb), kw):
        base.reset()  # the fetch delivered a message


@settings(max_examples=60, deadline=None)
@given(
    url=GARBAGE.filter(lambda v: not isinstance(v, str)), kw=calls({}, {"clock": arg(None), "sync": arg("os", "fsync")})
)
def test_connect_arguments(url, kw):
    # Strings are left out: a fuzzed str is a path, and connect would create it.
    with pytest.raises((TypeError, ValueError)) as err:
        jetspark.connect(url, **kw)
    assert "url" in str(err.value) or any(k in str(err.value) for k in kw)


CONNECT_OPTIONS = dict(
    timeout=arg(1.0), connect_timeout=arg(None, 1.0), name=arg("n"), user=arg("u"), token=arg("t"),
    domain=arg(None, "d"), max_reconnect_attempts=arg(0, 5), reconnect_time_wait=arg(0.1), publish_window=arg(1, 100),
    publish_async_max_pending=arg(1, 4000), tls=arg(None),
    user_credentials=arg(None), tls_hostname=arg(None, "h"),
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(kw=calls({}, CONNECT_OPTIONS))
def test_connect_options(kw):
    # Only the options are built (no connection): a refusal names the option.
    from jetspark.connect_options import ConnectOptions

    try:
        ConnectOptions.build("nats://127.0.0.1:4222", **kw)
    except (TypeError, ValueError) as exc:
        assert any(k in str(exc) for k in kw), str(exc)


# ---------------------------------------------------------------------- the findings, one by one


@pytest.fixture
def js(base):
    """The baseline handle; whatever a test does is undone after it."""
    yield base.js
    base.reset()


def refused(js, fn, *args, error=JetSparkError, **kwargs):
    """``fn`` raises ``error`` and leaves the store as it was; returns the error."""
    before = snapshot(js)
    with pytest.raises(error) as err:
        fn(*args, **kwargs)
    assert snapshot(js) == before
    return err.value


# 1. publish_batch: every row's subject is checked and captured, on every path.

# path -> (stream config, extra columns, publish_batch keywords)
BATCH_PATHS = {
    "plain": ({}, {}, {}),
    "headers column": ({}, {"headers": pa.array([[("K", ["v"])]] * 3, HEADERS_TYPE)}, {}),
    "msg_id column": ({}, {"msg_id": pa.array(["a", "b", "c"])}, {}),
    "msg_id_prefix": ({}, {}, {"msg_id_prefix": "p-"}),
    "interest stream": ({"retention": "interest"}, {}, {}),
    "discard new": ({"discard": "new", "max_msgs": 100}, {}, {}),
    "work queue": ({"retention": "workqueue"}, {}, {}),
}


@pytest.mark.parametrize("subject", ["t a", "t.*", "u.x", "t..x", ""])
@pytest.mark.parametrize("path", list(BATCH_PATHS))
def test_publish_batch_checks_every_row_subject_on_every_path(base, js, path, subject):
    stream_kw, columns, kwargs = BATCH_PATHS[path]
    js.add_stream(name="T", subjects=["t.x", "t.z.>"], storage=base.storage, **stream_kw)
    table = pa.table({"subject": pa.array(["t.x", subject, "t.z.q"]), "data": pa.array([b"1", b"2", b"3"]), **columns})
    for stream in ("T", None):  # by name, and routed by the first row
        err = refused(js, js.publish_batch, table, stream=stream, error=BadRequestError, **kwargs)
        assert err.err_code == 10003
        assert "row 1" in err.description and repr(subject) in err.description
    assert js.stream_info("T").state.last_seq == 0


def test_publish_batch_refuses_what_publish_refuses(js):
    # The same subjects, one message at a time: publish refuses them too.
    for subject in ("t a", ""):
        with pytest.raises(BadRequestError) as err:
            js.publish(subject, b"x")
        assert err.value.err_code == 10003
    with pytest.raises(jetspark.NoStreamResponseError):
        js.publish("bad..x", b"x")


@pytest.mark.parametrize(
    "column, values, error, words",
    [
        ("subject", pa.array(["bad.a", None]), BadRequestError, "row 1"),
        ("subject", pa.array([1, 2]), TypeError, "subject"),
        ("data", pa.array([1, 2]), TypeError, "data"),
        ("data", pa.array([[1], [2]]), TypeError, "data"),
        ("headers", pa.array([1, 2]), TypeError, "headers"),
        ("headers", pa.array([[("K", ["v\r\nNats-Msg-Id: x"])], None], HEADERS_TYPE), ValueError, "row 0"),
        ("headers", pa.array([None, [("bad name", ["v"])]], HEADERS_TYPE), ValueError, "row 1"),
        ("msg_id", pa.array(["", "x"]), BadRequestError, "row 0"),
        ("msg_id", pa.array(["a\r\nb", "x"]), ValueError, "row 0"),
        ("msg_id", pa.array([1, 2]), TypeError, "msg_id"),
    ],
)  # fmt: skip
def test_publish_batch_refuses_bad_columns(js, column, values, error, words):
    cols = {"subject": pa.array(["bad.a", "bad.b"]), "data": pa.array([b"1", b"2"]), column: values}
    err = refused(js, js.publish_batch, pa.table(cols), stream=STREAM, error=error)
    assert words in str(err)


def test_publish_batch_null_ids_and_data(js):
    # A null msg_id is "no id" for its row and null data an empty payload, on both backends.
    table = pa.table({"subject": ["bad.a", "bad.a"], "data": pa.array([None, b"x"]), "msg_id": pa.array([None, "i1"])})
    ack = js.publish_batch(table, stream=STREAM)
    assert ack.seqs.to_pylist() == [4, 5]
    assert js.get_msg(STREAM, 4).data == b"" and js.get_msg(STREAM, 4).headers is None
    assert js.get_msg(STREAM, 5).headers == {"Nats-Msg-Id": "i1"}


# 2. purge_stream: a negative keep (or seq) is the server's 10025, and nothing is purged.

API_REFUSALS = [
    # (case, verb, args, kwargs, err_code, the reference client can send it as JSON)
    ("purge keep=-1", "purge_stream", (STREAM,), dict(keep=-1), 10025, True),
    ("purge seq=-1", "purge_stream", (STREAM,), dict(seq=-1), 10025, True),
    ("purge keep=2**64", "purge_stream", (STREAM,), dict(keep=2**64), 10025, True),
    ("purge keep=1.5", "purge_stream", (STREAM,), dict(keep=1.5), 10025, True),
    ("purge subject=5", "purge_stream", (STREAM,), dict(subject=5), 10025, True),
    ("get_msg seq=-1", "get_msg", (STREAM,), dict(seq=-1), 10025, True),
    ("get_msg last_by_subj=5", "get_msg", (STREAM,), dict(last_by_subj=5), 10025, True),
    ("delete_msg seq=-1", "delete_msg", (STREAM,), dict(seq=-1), 10025, True),
    ("stream_info subjects_filter=5", "stream_info", (STREAM,), dict(subjects_filter=5), 10025, True),
    # 4. durations, sequences and numbers outside the server's fields.
    ("max_age=-1", "add_stream", (), dict(max_age=-1.0), 10052, True),
    ("max_age=nan", "add_stream", (), dict(max_age=NAN), 10025, False),
    ("max_age=inf", "add_stream", (), dict(max_age=INF), 10025, False),
    ("max_age=1e300", "add_stream", (), dict(max_age=1e300), 10025, False),
    ("max_age=1e10 (ns beyond int64)", "add_stream", (), dict(max_age=1e10), 10025, True),
    ("duplicate_window=-1", "add_stream", (), dict(duplicate_window=-1.0), 10052, True),
    ("duplicate_window=nan", "add_stream", (), dict(duplicate_window=NAN), 10025, False),
    ("first_seq=-1", "add_stream", (), dict(first_seq=-1), 10025, True),
    ("first_seq=2**64", "add_stream", (), dict(first_seq=2**64), 10025, True),
    ("max_msgs=2**63", "add_stream", (), dict(max_msgs=2**63), 10025, True),
    ("max_msgs=1.5", "add_stream", (), dict(max_msgs=1.5), 10025, True),
    ("max_msg_size=2**31", "add_stream", (), dict(max_msg_size=2**31), 10025, True),
    ("sealed='yes'", "add_stream", (), dict(sealed="yes"), 10025, True),
    ("subjects='new.>'", "add_stream", (), dict(subjects="new.>"), 10025, True),
    ("metadata values", "add_stream", (), dict(metadata={"k": 1}), 10025, True),
    ("ack_wait=-1", "add_consumer", (STREAM,), dict(durable_name="N", ack_wait=-1.0), 10183, True),
    ("ack_wait=nan", "add_consumer", (STREAM,), dict(durable_name="N", ack_wait=NAN), 10025, False),
    ("ack_wait=inf", "add_consumer", (STREAM,), dict(durable_name="N", ack_wait=INF), 10025, False),
    ("backoff=[-1]", "add_consumer", (STREAM,), dict(durable_name="N", backoff=[-1.0]), 10184, True),
    ("backoff=[nan]", "add_consumer", (STREAM,), dict(durable_name="N", backoff=[NAN]), 10025, False),
    ("opt_start_seq=-1", "add_consumer", (STREAM,),
     dict(durable_name="N", deliver_policy="by_start_sequence", opt_start_seq=-1), 10025, True),
    ("max_deliver=2**63", "add_consumer", (STREAM,), dict(durable_name="N", max_deliver=2**63), 10025, True),
    ("headers_only='x'", "add_consumer", (STREAM,), dict(durable_name="N", headers_only="x"), 10025, True),
    ("opt_start_time=garbage", "add_consumer", (STREAM,),
     dict(durable_name="N", deliver_policy="by_start_time", opt_start_time="garbage"), 10025, False),
]  # fmt: skip
STREAM_DEFAULTS = dict(name="NEW", subjects=["new.>"])


def _call(js, verb, args, kwargs, storage=None):
    if verb == "add_stream":
        kwargs = {**STREAM_DEFAULTS, **({"storage": storage} if storage else {}), **kwargs}
    return getattr(js, verb)(*args, **kwargs)


@pytest.mark.parametrize("case, verb, args, kwargs, err_code, _json", API_REFUSALS, ids=[c[0] for c in API_REFUSALS])
def test_api_arguments_refused_with_the_servers_err_code(base, js, case, verb, args, kwargs, err_code, _json):
    err = refused(js, _call, js, verb, args, kwargs, base.storage, error=APIError)
    assert err.err_code == err_code, str(err)
    if err_code == 10025:
        assert any(name in err.description for name in kwargs), err.description
    # Nothing was half made: the stream still takes messages, its consumer still delivers.
    assert js.publish("bad.a", b"after").seq == 4
    # (a server counts the publish into num_pending just after answering it: consumer_support.eventually)
    eventually(base, lambda: js.consumer_info(STREAM, CONSUMER).num_pending, 4)


@pytest.fixture(scope="module")
def reference(server):
    """The server itself, through nats-py's own API (tests/oracle.py)."""
    from tests.oracle import OracleJS

    ref = OracleJS(server.url)
    for name in ref.stream_names():
        if name != KEEPER:
            ref.delete_stream(name)
    ref.add_stream(name=STREAM, subjects=SUBJECTS, storage="memory")
    ref.publish("bad.a", b"one")
    yield ref
    for name in ref.stream_names():
        if name != KEEPER:
            ref.delete_stream(name)
    ref.close()


JSON_REFUSALS = [c for c in API_REFUSALS if c[5]]


@pytest.mark.server
@pytest.mark.parametrize("case, verb, args, kwargs, err_code, _json", JSON_REFUSALS, ids=[c[0] for c in JSON_REFUSALS])
def test_the_server_answers_those_err_codes(reference, case, verb, args, kwargs, err_code, _json):
    # The err_codes above are the server's own: sent as raw JSON, it answers them.
    with pytest.raises(APIError) as err:
        _call(reference, verb, args, kwargs, "memory")
    assert err.value.err_code == err_code, str(err.value)


def test_first_seq_beyond_int64_is_refused(base, js):
    # The server would take it (uint64), but jetspark's sequences are int64: 10003, not an
    # overflow at the first publish or read.
    err = refused(js, js.add_stream, name="NEW", subjects=["new.>"], first_seq=2**63, error=BadRequestError)
    assert err.err_code == 10003 and "first_seq" in err.description
    info = js.add_stream(name="NEW", subjects=["new.>"], first_seq=2**62, storage=base.storage)
    assert js.publish("new.a", b"x").seq == 2**62 == info.config.first_seq


# 3. payloads and headers.


@pytest.mark.parametrize("payload", [7, "text", None, [1, 2], 1.5, object()])
def test_payload_must_be_bytes_like(js, payload):
    err = refused(js, js.publish, "bad.x", payload, error=TypeError)
    assert "payload" in str(err)


@pytest.mark.parametrize("payload", [b"raw", bytearray(b"raw"), memoryview(b"raw")])
def test_bytes_like_payloads_are_stored_as_given(js, payload):
    seq = js.publish("bad.x", payload).seq
    assert js.get_msg(STREAM, seq).data == b"raw"


@pytest.mark.parametrize(
    "headers, error",
    [
        ({"K": 7}, TypeError),
        ({"K": None}, TypeError),
        ({"K": b"v"}, TypeError),
        ({7: "v"}, TypeError),
        ({"K": ["a", 1]}, TypeError),
        ("K: v", TypeError),
        ([("K", "v")], TypeError),
        ({"K": "v\r\nNats-Msg-Id: forged"}, ValueError),
        ({"K": "v\nX: y"}, ValueError),
        ({"K\r\nNats-Msg-Id": "forged"}, ValueError),
        ({"bad name": "v"}, ValueError),
        ({"K:": "v"}, ValueError),
        ({"": "v"}, ValueError),
    ],
)  # fmt: skip
def test_headers_are_names_to_str_values_without_line_breaks(js, headers, error):
    err = refused(js, js.publish, "bad.x", b"x", headers=headers, error=error)
    assert "headers" in str(err)


def test_a_line_break_cannot_forge_a_msg_id(js):
    with pytest.raises(ValueError):
        js.publish("bad.x", b"one", headers={"K": "v\r\nNats-Msg-Id: m1"})
    # No id m1 was recorded: the real one is not a duplicate.
    ack = js.publish("bad.x", b"two", headers={"Nats-Msg-Id": "m1"})
    assert ack.seq == 4 and not ack.duplicate


def test_repeated_header_values_are_kept(js):
    seq = js.publish("bad.x", b"x", headers={"K": ["a", "b"]}).seq
    assert js.get_msg(STREAM, seq).hdrs.count(b"K: ") == 2


def test_the_stream_argument_of_publish(js):
    with pytest.raises(ValueError, match="stream"):
        js.publish("bad.x", b"x", stream="BAD\r\nNats-Msg-Id: m")
    with pytest.raises(TypeError, match="stream"):
        js.publish("bad.x", b"x", stream=5)
    assert js.stream_info(STREAM).state.messages == 3


def test_a_subject_looked_up_is_still_checked_when_published(js):
    # Looking a subject up must not let publish skip its own check later.
    with pytest.raises(jetspark.StreamNotFoundError):
        js.find_stream_name_by_subject("bad a")
    err = refused(js, js.publish, "bad a", b"x", error=BadRequestError)
    assert err.err_code == 10003


# 4 (continued). fetch and acks: no wait can be endless or negative.


@pytest.mark.parametrize("timeout", [NAN, INF, -1, "1", 1e300])
def test_fetch_refuses_a_timeout_it_cannot_keep(js, timeout):
    sub = js.pull_subscribe_bind(CONSUMER, stream=STREAM)
    err = refused(js, sub.fetch, 1, timeout=timeout, error=(TypeError, ValueError))
    assert "timeout" in str(err)


@pytest.mark.parametrize("kwargs, name", [(dict(batch=0), "batch"), (dict(batch=2**40), "batch"),
                                          (dict(batch=1.5), "batch"), (dict(max_bytes=-1), "max_bytes"),
                                          (dict(no_wait="yes"), "no_wait")])  # fmt: skip
def test_fetch_refuses_bad_options(js, kwargs, name):
    sub = js.pull_subscribe_bind(CONSUMER, stream=STREAM)
    err = refused(js, sub.fetch, timeout=0, error=(TypeError, ValueError), **kwargs)
    assert name in str(err)


@pytest.mark.parametrize("delay", [NAN, INF, -1, "1"])
def test_nak_delay_must_be_seconds(js, delay):
    (msg,) = js.pull_subscribe_bind(CONSUMER, stream=STREAM).fetch(1, timeout=0)
    before = js.consumer_info(STREAM, CONSUMER)
    with pytest.raises((TypeError, ValueError), match="delay"):
        msg.nak(delay)
    after = js.consumer_info(STREAM, CONSUMER)
    assert (after.num_ack_pending, after.num_redelivered) == (before.num_ack_pending, before.num_redelivered)


# 5. what nats-py accepts is accepted; the rest is refused clearly.


@pytest.mark.parametrize(
    "when", ["2000-01-01T00:00:00Z", "2000-01-01T00:00:00.123456789Z", "2000-01-01T01:00:00+01:00"]
)
def test_opt_start_time_as_rfc3339_text(js, when):
    info = js.add_consumer(STREAM, durable_name="T", deliver_policy="by_start_time", opt_start_time=when)
    assert info.config.opt_start_time.replace(microsecond=0) == dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
    assert info.num_pending == 3


def test_enum_fields_take_members_or_values(js):
    assert (
        js.add_stream(name="NEW", subjects=["new.>"], retention="interest", storage="memory").config.retention.value
        == "interest"
    )
    err = refused(js, js.add_stream, name="NEW2", subjects=["new2.>"], retention="sometimes", error=BadRequestError)
    assert err.err_code == 10025 and "retention" in err.description


def test_config_argument_types(js):
    for call in (lambda: js.add_stream(ConsumerConfig(name="X")),
                 lambda: js.add_consumer(STREAM, StreamConfig(name="X")),
                 lambda: js.pull_subscribe("bad.a", config="explicit")):  # fmt: skip
        assert "config" in str(refused(js, call, error=TypeError))


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda js: list(js.read_batches(STREAM, subjects="bad.a")), "subjects"),
        (lambda js: list(js.read_batches(STREAM, batch_size=0)), "batch_size"),
        (lambda js: list(js.read_batches(STREAM, start_seq=-1)), "start_seq"),
        (lambda js: list(js.read_batches(STREAM, end_seq=2**63)), "end_seq"),
        (lambda js: list(js.ordered_consumer(STREAM, batch_size=None)), "batch_size"),
        (lambda js: js.seq_for_time(STREAM, "yesterday"), "when"),
        (lambda js: js.seq_for_time(STREAM, 2**63), "when"),
        (lambda js: js.seq_for_bytes(STREAM, 1, 3, -1), "max_bytes"),
        (lambda js: js.seq_for_bytes(STREAM, 1.0, 3, 10), "lo"),
        (lambda js: js.advance_ack_floor(STREAM, CONSUMER, "2"), "seq"),
        (lambda js: js.publish_batch([("bad.a", b"x")]), "data"),
        (lambda js: js.publish_batch(pa.table({"subject": ["bad.a"], "data": [b"x"]}), msg_id_prefix=5),
         "msg_id_prefix"),
        (lambda js: js.publish_batch(pa.table({"subject": ["bad.a"], "data": [b"x"]}), msg_id_prefix="p",
                                     msg_id_start=-1), "msg_id_start"),
    ],
)  # fmt: skip
def test_jetspark_arguments_are_named_when_refused(js, call, name):
    err = refused(js, call, js, error=(TypeError, ValueError))
    assert name in str(err)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(timeout=NAN), "timeout"),
        (dict(timeout=INF), "timeout"),
        (dict(timeout="5"), "timeout"),
        (dict(user=5), "user"),
        (dict(name=["x"]), "name"),
        (dict(max_reconnect_attempts=1.5), "max_reconnect_attempts"),
        (dict(publish_window=0), "publish_window"),
        (dict(domain="a.b"), "domain"),
        (dict(tls="yes"), "tls"),
    ],
)  # fmt: skip
def test_connect_options_are_named_when_refused(kwargs, name):
    with pytest.raises((TypeError, ValueError), match=name):
        jetspark.connect("nats://127.0.0.1:1", **kwargs)


@pytest.mark.parametrize(
    "url, kwargs",
    [
        (5, {}),
        (b"/tmp/x", {}),
        (None, {}),
        ("", {}),
        ("/tmp/x\0y", {}),
        ("/tmp/x", dict(clock=5)),
        ("/tmp/x", dict(sync=1)),
    ],
)
def test_connect_arguments_are_named_when_refused(url, kwargs):
    with pytest.raises((TypeError, ValueError)) as err:
        jetspark.connect(url, **kwargs)
    assert any(n in str(err.value) for n in ("url", *kwargs))


@pytest.mark.parametrize("verb", ["delete_stream", "stream_info", "consumer_info"])
def test_a_name_utf8_cannot_encode_is_not_found_on_both_backends(js, verb):
    # Found by the fuzzing above: the nats:// backend let a lone surrogate reach nats-py's
    # protocol encoder (UnicodeEncodeError); a name no stream can have is "not found".
    args = ("\ud800",) if verb != "consumer_info" else ("\ud800", "C")
    with pytest.raises((jetspark.StreamNotFoundError, jetspark.ConsumerNotFoundError)):
        getattr(js, verb)(*args)
