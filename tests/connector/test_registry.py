"""The streaming sink's registry of committed micro-batches (jetspark/connector/registry.py),
over the embedded engine (beside file and memory streams) and a real nats-server.

No Spark here: the registry is plain API calls; test_exactly_once.py runs it under Spark.
"""

from __future__ import annotations

import json
import pickle
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jetspark
from jetspark.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from jetspark.connector import registry
from jetspark.connector.registry import REGISTRY_STREAM
from jetspark.errors import BadRequestError, NoStreamResponseError, SinkRegistryError, StoreFullError
from jetspark.protocol import subjects as subj
from tests.conftest import KEEPER, drop_streams
from tests.servers import NatsServer


class Store:
    def __init__(self, url: str, kind: str, storage: str) -> None:
        self.url, self.kind, self.storage = url, kind, storage
        self.js = jetspark.connect(url)
        self._others: list = []

    def other(self):
        """A second handle on the same store (another executor or driver)."""
        js = jetspark.connect(self.url)
        self._others.append(js)
        return js

    def user_stream(self, name: str, subjects: list[str], **kw):
        return self.js.add_stream(name=name, subjects=subjects, storage=self.storage, **kw)

    def close(self) -> None:
        for js in self._others:
            js.close()
        if self.kind == "server":
            drop_streams(self.js)
        else:
            for name in self.js.stream_names():  # memory streams live in /dev/shm
                self.js.delete_stream(name)
        self.js.close()


@pytest.fixture(params=["engine-file", "engine-memory", "server"])
def store(request, tmp_path):
    kind, _, storage = request.param.partition("-")
    url = str(tmp_path / "store") if kind == "engine" else request.getfixturevalue("server").url
    if kind == "engine":
        jetspark.connect(url).close()  # the connector opens existing stores only
    s = Store(url, kind, storage or "file")
    yield s
    s.close()


def user_streams(js) -> list[str]:
    return sorted(n for n in js.stream_names() if n != KEEPER)


# ---------------------------------------------------------------------- the contract


def test_a_lookup_creates_nothing(store):
    assert registry.last_batch(store.js, "q1") == -1
    assert user_streams(store.js) == []


def test_commit_and_lookup(store):
    js = store.js
    registry.commit_batch(js, "q1", 0)
    assert registry.last_batch(js, "q1") == 0
    assert user_streams(js) == [REGISTRY_STREAM]  # listed like any stream
    registry.commit_batch(js, "q1", 3)
    registry.commit_batch(js, "q2", 1)
    assert (registry.last_batch(js, "q1"), registry.last_batch(js, "q2"), registry.last_batch(js, "q3")) == (3, 1, -1)
    info = js.stream_info(REGISTRY_STREAM, subjects_filter=">")
    assert info.state.subjects == {"$JETSPARK.sinks.q1": 1, "$JETSPARK.sinks.q2": 1}  # one message per query
    c = info.config
    assert (c.subjects, c.max_msgs_per_subject, c.storage, c.retention) == (
        ["$JETSPARK.sinks.>"], 1, StorageType.FILE, RetentionPolicy.LIMITS,
    )  # fmt: skip
    assert registry.last_batch(store.other(), "q1") == 3  # another handle reads the same


def test_a_commit_never_moves_backwards(store):
    js = store.js
    registry.commit_batch(js, "q", 5)
    seq = js.stream_info(REGISTRY_STREAM).state.last_seq
    for older in (5, 4, 0):
        registry.commit_batch(js, "q", older)
    assert registry.last_batch(js, "q") == 5
    assert js.stream_info(REGISTRY_STREAM).state.last_seq == seq  # nothing was written
    registry.commit_batch(js, "q", 2**63 - 1)
    assert registry.last_batch(js, "q") == 2**63 - 1


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda js: registry.commit_batch(js, "q", -1), "batch_id"),
        (lambda js: registry.commit_batch(js, "q", 2**63), "batch_id"),
        (lambda js: registry.commit_batch(js, "q", "3"), "batch_id"),
        (lambda js: registry.commit_batch(js, "", 1), "query_id"),
        (lambda js: registry.last_batch(js, ""), "query_id"),
        (lambda js: registry.last_batch(js, None), "query_id"),
        (lambda js: registry.last_batch(js, "\ud800"), "query_id"),
    ],
)  # fmt: skip
def test_bad_arguments_are_named_and_write_nothing(store, call, name):
    with pytest.raises((TypeError, ValueError), match=name):
        call(store.js)
    assert user_streams(store.js) == []


# ---------------------------------------------------------------------- two writers


class Interleaved:
    """A handle whose first registry read is followed, before the caller acts on it, by
    ``then()``: another writer committing between this commit's read and its publish."""

    def __init__(self, js, then) -> None:
        self._js, self._then = js, then

    def get_last_msg(self, stream, subject):
        msg = self._js.get_last_msg(stream, subject)
        if self._then is not None and stream == REGISTRY_STREAM:
            then, self._then = self._then, None
            then()
        return msg

    def __getattr__(self, name):
        return getattr(self._js, name)


@pytest.mark.parametrize("other_batch, final", [(9, 9), (5, 7)])
def test_a_commit_that_lost_a_race_reads_again(store, other_batch, final):
    """Someone commits between this commit's read (3) and its publish of 7: the stream refuses
    the publish (10071 wrong last sequence) and the commit decides again on what is there now."""
    registry.commit_batch(store.js, "q", 3)
    other = store.other()
    racing = Interleaved(store.js, lambda: registry.commit_batch(other, "q", other_batch))
    registry.commit_batch(racing, "q", 7)
    assert registry.last_batch(store.js, "q") == final
    # A publish that ignored the read's sequence would have stored 7 over 9.


def test_two_creators_at_once(store):
    other = store.other()
    racing = Interleaved(store.js, lambda: registry.commit_batch(other, "q", 1))
    registry.commit_batch(racing, "q", 2)  # the other handle creates the stream after our read found none
    assert registry.last_batch(store.js, "q") == 2


def test_two_handles_committing_concurrently(store):
    handles = [store.js, store.other()]
    barrier = threading.Barrier(2)
    errors = []

    def run(js, ids):
        try:
            barrier.wait()
            for i in ids:
                registry.commit_batch(js, "q", i)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(js, range(k, 200, 2))) for k, js in enumerate(handles)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert registry.last_batch(store.js, "q") == 199


# ---------------------------------------------------------------------- query ids

ODD_IDS = [
    "q/1",
    "q_1",
    "q.1",
    "q 1",
    "*",
    ">",
    "é",
    "-",
    "_",
    "a" * 128,
    "a" * 129,
    "x" * 5000,
    "日本",
    "q\n1",
    "$JS.API",
]


def test_odd_query_ids_have_entries_of_their_own(store):
    for i, q in enumerate(ODD_IDS):
        registry.commit_batch(store.js, q, i)
    assert [registry.last_batch(store.js, q) for q in ODD_IDS] == list(range(len(ODD_IDS)))
    assert store.js.stream_info(REGISTRY_STREAM).state.messages == len(ODD_IDS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=st.text(min_size=1, max_size=200), b=st.text(min_size=1, max_size=200))
def test_query_id_tokens_are_valid_and_distinct(a, b):
    for q in (a, b):
        t = registry.token(q)
        assert subj.is_valid(registry.subject(q), wildcards=False) and subj.is_literal(registry.subject(q))
        assert "." not in t and not subj.has_whitespace(t) and len(t) <= 130
    assert (registry.token(a) == registry.token(b)) == (a == b)


def test_a_spark_query_id_is_its_own_token():
    q = "0f7b3c5e-2d1a-4c4e-9a8b-1234567890ab"
    assert registry.subject(q) == f"$JETSPARK.sinks.{q}"


# ---------------------------------------------------------------------- damage


def test_a_damaged_entry_is_reported_never_guessed(store):
    js = store.js
    registry.commit_batch(js, "q", 4)
    js.publish(registry.subject("q"), b"not json")
    with pytest.raises(SinkRegistryError, match=rf"{REGISTRY_STREAM} message \d+ holds no batch id") as err:
        registry.last_batch(js, "q")
    again = pickle.loads(pickle.dumps(err.value))  # Spark ships an executor's error to the driver
    assert type(again) is SinkRegistryError and str(again) == str(err.value)
    with pytest.raises(SinkRegistryError):
        registry.commit_batch(js, "q", 5)
    js.publish(registry.subject("q"), json.dumps({"query": "another", "batch": 9}).encode())
    with pytest.raises(SinkRegistryError, match="belongs to query 'another', not 'q'"):
        registry.last_batch(js, "q")


def test_a_deleted_registry_is_created_again(store):
    registry.commit_batch(store.js, "q", 4)
    store.js.delete_stream(REGISTRY_STREAM)
    assert registry.last_batch(store.js, "q") == -1
    registry.commit_batch(store.js, "q", 1)
    assert registry.last_batch(store.js, "q") == 1


# ---------------------------------------------------------------------- subjects


def test_the_registry_captures_no_user_subject(store):
    js = store.js
    registry.commit_batch(js, "q", 1)
    for s in ("jetspark.sinks.q", "sinks.q", "q", "JETSPARK_SINKS"):
        with pytest.raises(NoStreamResponseError):
            js.publish(s, b"x")
    store.user_stream("U", ["jetspark.>", "sinks.>", "JETSPARK.>"])  # no overlap
    assert js.publish("jetspark.sinks.q", b"x").stream == "U"
    assert registry.last_batch(js, "q") == 1


@pytest.fixture
def lone(store):
    """A store with no KEEPER stream, for a user stream on ">" (which would overlap it):
    the engine store itself, or a server of its own."""
    if store.kind == "engine":
        yield store
        return
    server = NatsServer().start()
    s = Store(server.url, "lone-server", store.storage)
    try:
        yield s
    finally:
        s.close()
        server.stop()


@pytest.mark.parametrize("subjects, no_ack", [([">"], True), (["$JETSPARK.>"], False), (["$JETSPARK.sinks.*"], False)])
def test_a_user_stream_over_the_registry_subjects_is_named_in_the_error(lone, subjects, no_ack):
    js = lone.js
    lone.user_stream("ALL", subjects, no_ack=no_ack)
    assert registry.last_batch(js, "q") == -1
    with pytest.raises(SinkRegistryError, match=r"stream ALL overlap them \(10065 subjects overlap\)") as err:
        registry.commit_batch(js, "q", 1)
    assert REGISTRY_STREAM in str(err.value) and "$JETSPARK.sinks.>" in str(err.value)
    assert sorted(js.stream_names()) == ["ALL"]  # nothing created, nothing published


def test_once_the_registry_exists_a_stream_over_its_subjects_is_refused(lone):
    registry.commit_batch(lone.js, "q", 1)
    with pytest.raises(BadRequestError) as err:
        lone.user_stream("ALL", [">"], no_ack=True)
    assert err.value.err_code == 10065


def test_a_registry_stream_made_elsewhere(store):
    """Another config under the registry's name (another version, a user): used if it captures
    the registry's subjects, refused with its subjects named otherwise."""
    js = store.js
    js.add_stream(name=REGISTRY_STREAM, subjects=["$JETSPARK.>"], max_msgs_per_subject=5)
    registry.commit_batch(js, "q", 1)
    registry.commit_batch(js, "q", 2)
    assert registry.last_batch(js, "q") == 2
    js.delete_stream(REGISTRY_STREAM)
    js.add_stream(name=REGISTRY_STREAM, subjects=["elsewhere.>"])
    with pytest.raises(SinkRegistryError, match=r"exists with subjects \['elsewhere.>'\].*delete or rename"):
        registry.commit_batch(js, "q", 3)


# ---------------------------------------------------------------------- legacy


def legacy_bucket(js) -> None:
    """The KV bucket jetspark's nats:// backend kept the registry in before (what nats-py's
    create_key_value(bucket="jetspark_sinks", history=1) makes), on any backend."""
    js.add_stream(
        StreamConfig(
            name="KV_jetspark_sinks", subjects=["$KV.jetspark_sinks.>"], max_msgs_per_subject=1,
            discard=DiscardPolicy.NEW, allow_rollup_hdrs=True, deny_delete=True, allow_direct=True,
            duplicate_window=120.0, storage=StorageType.FILE, num_replicas=1, retention=RetentionPolicy.LIMITS,
        )
    )  # fmt: skip


def test_a_query_recorded_in_the_legacy_bucket_is_not_written_twice(store):
    js = store.js
    legacy_bucket(js)
    js.publish("$KV.jetspark_sinks.query_1", b'{"batch": 5}')  # that version's key for "query/1"
    js.publish("$KV.jetspark_sinks.gone", b"", headers={"KV-Operation": "DEL"})
    assert registry.last_batch(js, "query/1") == 5
    assert registry.last_batch(js, "gone") == -1
    registry.commit_batch(js, "query/1", 4)  # older than the legacy record: nothing to do
    assert REGISTRY_STREAM not in js.stream_names()
    registry.commit_batch(js, "query/1", 6)
    assert registry.last_batch(js, "query/1") == 6
    assert js.stream_info(REGISTRY_STREAM).state.messages == 1
    js.publish("$KV.jetspark_sinks.bad", b"?")
    with pytest.raises(SinkRegistryError, match="KV_jetspark_sinks message"):
        registry.last_batch(js, "bad")


# ---------------------------------------------------------------------- a full disk


def test_a_commit_on_a_full_disk_fails_loudly_and_keeps_the_last_entry(tmpfs):
    # The registry stream is a stream like any other: a full disk refuses the commit with the
    # store's typed error (nothing half written), the entry stays at the previous batch, and
    # the same handle commits once space is freed.
    disk = tmpfs("4m")
    url = str(disk / "store")
    js = jetspark.connect(url)
    try:
        registry.commit_batch(js, "q", 1)
        disk.fill()
        with pytest.raises(StoreFullError) as err:
            for batch in range(2, 10_000):  # until the reserved tail of the block runs out
                registry.commit_batch(js, "q", batch)
        refused = batch
        assert str(disk) in err.value.filename
        assert registry.last_batch(js, "q") == refused - 1
        disk.free()
        registry.commit_batch(js, "q", refused)
        assert registry.last_batch(js, "q") == refused
    finally:
        js.close()
    with jetspark.connect(url) as again:
        assert registry.last_batch(again, "q") == refused
        assert again.stream_info(REGISTRY_STREAM).state.messages == 1
