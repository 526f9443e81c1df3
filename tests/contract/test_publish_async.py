"""publish_async, publish_async_pending, publish_async_completed: nats-py's pipelined publish, synchronously.

The ``js`` fixture runs a test on the embedded engine, on jetspark's nats://
backend and on the oracle (nats-py's own ``publish_async`` on the same
nats-server).  nats-py 2.16 never completes a future whose PubAck is an error
(``test_nats_py_leaves_a_refused_future_pending`` shows it), so what the
server refuses is checked on jetspark's backends against ``publish``, whose
errors tests/contract/test_publish_rules.py checks against the oracle.

Back-pressure is checked with the other side stopped for real: on the engine
another holder of the stream's lock (as a writer in another process), on a
server the nats-server process itself (SIGSTOP), so no PubAck can come until
it is let go.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import threading
from concurrent.futures import Future

import nats
import pyarrow as pa
import pytest

import jetspark
from jetspark import ConnectOptions
from jetspark.api import DiscardPolicy, PubAck
from jetspark.errors import (
    APIError,
    BadRequestError,
    ClosedError,
    NoStreamResponseError,
    PublishAsyncTimeoutError,
    RequestTimeoutError,
    TooManyStalledMsgsError,
)
from tests.oracle import OracleJS
from tests.servers import NatsServer

MSG_ID = "Nats-Msg-Id"
EXP_LAST_SEQ = "Nats-Expected-Last-Sequence"


def results(futures: list[Future]) -> list:
    """Each future's PubAck, or its exception."""
    return [f.exception() or f.result() for f in futures]


def error_fields(err: BaseException) -> tuple:
    return (type(err), getattr(err, "code", None), getattr(err, "err_code", None), getattr(err, "description", None))


# ---------------------------------------------------------------- order, acks, dedup (every backend, the oracle too)


def test_futures_resolve_to_the_pubacks_of_the_calls_in_order(js):
    js.add_stream(name="PA", subjects=["pa.>"])
    futures = [js.publish_async(f"pa.{i % 3}", b"%d" % i) for i in range(300)]
    js.publish_async_completed()
    assert js.publish_async_pending() == 0
    assert results(futures) == [PubAck(stream="PA", seq=i + 1) for i in range(300)]
    for seq in (1, 2, 150, 300):
        m = js.get_msg("PA", seq)
        assert (m.subject, m.data) == (f"pa.{(seq - 1) % 3}", b"%d" % (seq - 1))
    # A publish after them is stored after them, whether they are done or not.
    futures = [js.publish_async("pa.0", b"x") for _ in range(50)]
    assert js.publish("pa.0", b"after") == PubAck(stream="PA", seq=351)
    js.publish_async_completed()
    assert [f.result().seq for f in futures] == list(range(301, 351))


def test_a_repeated_msg_id_is_a_duplicate_with_the_first_seq(js):
    js.add_stream(name="PA", subjects=["pa.>"])
    futures = [
        js.publish_async("pa.a", b"one", headers={MSG_ID: "m1"}),
        js.publish_async("pa.b", b"two"),
        js.publish_async("pa.a", b"again", headers={MSG_ID: "m1"}),
        js.publish_async("pa.a", b"three", stream="PA", headers={MSG_ID: "m2"}),
    ]
    js.publish_async_completed()
    assert results(futures) == [
        PubAck(stream="PA", seq=1),
        PubAck(stream="PA", seq=2),
        PubAck(stream="PA", seq=1, duplicate=True),
        PubAck(stream="PA", seq=3),
    ]
    assert js.stream_info("PA").state.messages == 3


def test_no_stream_fails_the_future_and_the_others_go_on(js):
    js.add_stream(name="PA", subjects=["pa.>"])
    futures = [js.publish_async("pa.a"), js.publish_async("nobody.a"), js.publish_async("pa.a")]
    js.publish_async_completed()
    assert isinstance(futures[1].exception(), NoStreamResponseError)
    assert [futures[0].result().seq, futures[2].result().seq] == [1, 2]
    assert js.publish_async_pending() == 0


# ---------------------------------------------------------------- what the stream refuses (jetspark's backends)


def test_refusals_fail_the_future_with_the_error_publish_raises(jetspark_backend):
    js = jetspark_backend
    js.add_stream(name="PA", subjects=["pa.>"], max_msg_size=64, max_msgs=5, discard=DiscardPolicy.NEW)
    # Checked in order against what is stored before each: the expectations chain.
    calls = [
        ("pa.a", b"", {EXP_LAST_SEQ: "0"}, None),  # 1
        ("pa.a", b"", {EXP_LAST_SEQ: "1"}, None),  # 2
        ("pa.a", b"", {EXP_LAST_SEQ: "1"}, None),  # wrong last sequence: 2
        ("pa.a", b"x" * 100, None, None),  # too large
        ("pa.a", b"", None, "OTHER"),  # expected stream
        ("pa.a", b"", {EXP_LAST_SEQ: "2"}, None),  # 3
        ("pa.b", b"", None, None),  # 4
        ("pa.b", b"", None, None),  # 5
        ("pa.b", b"", None, None),  # maximum messages (discard new)
    ]
    futures = [js.publish_async(s, p, headers=h, stream=st) for s, p, h, st in calls]
    js.publish_async_completed()
    got = results(futures)
    assert [a.seq for a in got if isinstance(a, PubAck)] == [1, 2, 3, 4, 5]
    refused = [(i, e) for i, e in enumerate(got) if isinstance(e, BaseException)]
    assert [i for i, _ in refused] == [2, 3, 4, 8]
    assert all(isinstance(e, APIError) for _, e in refused)
    # publish raises the same errors in the state the stream is in now (full, last seq 5).
    state = js.stream_info("PA").state
    for i, err in refused:
        s, p, h, st = calls[i]
        with pytest.raises(APIError) as sync:
            js.publish(s, p, headers=h, stream=st)
        if i == 2:
            assert error_fields(err)[:3] == error_fields(sync.value)[:3] and err.description == "wrong last sequence: 2"
        else:
            assert error_fields(err) == error_fields(sync.value)
    assert js.stream_info("PA").state == state


def test_publish_batch_after_publish_async_comes_after(jetspark_backend):
    js = jetspark_backend
    js.add_stream(name="PA", subjects=["pa.>"])
    futures = [js.publish_async("pa.a") for _ in range(1000)]
    ack = js.publish_batch(pa.table({"subject": ["pa.b", "pa.c"], "data": [b"1", b"2"]}))
    assert ack.seqs.to_pylist() == [1001, 1002]
    js.publish_async_completed()
    assert [f.result().seq for f in futures] == list(range(1, 1001))


HEADERS = [None, {"K": "v"}, {"K": ["a", "b"], "L": "c"}, {MSG_ID: "h1", "X": " y "}, {}]


def test_messages_are_stored_as_publish_stores_them(jetspark_backend):
    js = jetspark_backend
    js.add_stream(name="PA", subjects=["pa.>"])
    futures = [js.publish_async(f"pa.{i}", b"async %d" % i, headers=h) for i, h in enumerate(HEADERS)]
    js.publish_async_completed()
    acks = [js.publish(f"pa.{i}", b"async %d" % i, headers=h) for i, h in enumerate(HEADERS)]
    n = len(HEADERS)
    assert [f.result().seq for f in futures] == list(range(1, n + 1))
    assert [a.seq for a in acks] == [n + 1, n + 2, n + 3, 4, n + 4]  # h1 is a duplicate
    for i in range(n):
        a, b = js.get_msg("PA", i + 1), js.get_msg("PA", acks[i].seq)
        assert (a.subject, a.data, a.hdrs, a.headers) == (b.subject, b.data, b.hdrs, b.headers)


def test_the_nats_backend_without_its_raw_hooks_sends_the_same(nats_server):
    """nats-py's public API instead of the raw writes and deliveries (jetspark.remote.fastpath):
    the same PubAcks and the same stored messages (repeated header keys aside, which nats-py's
    header dict cannot say, as for publish_batch there)."""
    with jetspark.connect(nats_server.url) as js:
        js._session.public_path = True
        js.add_stream(name="PUBLIC", subjects=["pub.>"], storage="memory")
        try:
            headers = [h for h in HEADERS if not (h and any(isinstance(v, list) for v in h.values()))]
            futures = [js.publish_async(f"pub.{i}", b"%d" % i, headers=h) for i, h in enumerate(headers)]
            futures.append(js.publish_async("nobody.x"))
            js.publish_async_completed()
            assert results(futures[:-1]) == [PubAck(stream="PUBLIC", seq=q) for q in range(1, len(headers) + 1)]
            assert isinstance(futures[-1].exception(), NoStreamResponseError)
            assert js.get_msg("PUBLIC", 3).headers == {MSG_ID: "h1", "X": "y"}
        finally:
            js.delete_stream("PUBLIC")


def test_arguments_are_checked_at_the_call_and_nothing_is_sent(jetspark_backend):
    js = jetspark_backend
    js.add_stream(name="PA", subjects=["pa.>"])
    bad = [
        (dict(subject=""), BadRequestError),
        (dict(subject="pa. a"), BadRequestError),
        (dict(subject="pa.a", payload="text"), TypeError),
        (dict(subject="pa.a", headers={"K": "v\r\nNats-Msg-Id: x"}), ValueError),
        (dict(subject="pa.a", headers={"a b": "v"}), ValueError),
        (dict(subject="pa.a", headers={MSG_ID: 5}), TypeError),
        (dict(subject="pa.a", stream=5), TypeError),
        (dict(subject="pa.a", wait_stall=-1), ValueError),
        (dict(subject="pa.a", wait_stall=float("nan")), ValueError),
    ]
    for kwargs, error in bad:
        with pytest.raises(error):
            js.publish_async(**kwargs)
    for timeout in (-1, "1"):
        with pytest.raises((TypeError, ValueError), match="timeout"):
            js.publish_async_completed(timeout)
    assert js.publish_async_pending() == 0
    assert js.stream_info("PA").state.messages == 0
    # A subject no stream can capture (empty tokens) is the future's, as publish's NoStreamResponseError.
    assert isinstance(js.publish_async("pa..a").exception(timeout=5), NoStreamResponseError)


def test_the_window_option_is_checked_on_both_backends(tmp_path):
    for bad, error in (
        (0, ValueError),
        (-1, ValueError),
        (2**31, ValueError),
        ("8", TypeError),
        (True, TypeError),
        (1.5, TypeError),
    ):
        with pytest.raises(error, match="publish_async_max_pending"):
            jetspark.connect(tmp_path / "store", publish_async_max_pending=bad)
        with pytest.raises(error, match="publish_async_max_pending"):
            ConnectOptions.build("nats://127.0.0.1:4222", publish_async_max_pending=bad)
    assert not (tmp_path / "store").exists()
    assert (
        ConnectOptions.from_strings(
            "nats://127.0.0.1:4222", {"publish-async-max-pending": "8"}
        ).publish_async_max_pending
        == 8
    )


# ---------------------------------------------------------------- back-pressure (the other side stopped for real)


class EngineSide:
    def __init__(self, path) -> None:
        self.path = path

    def open(self, window: int):
        return jetspark.connect(self.path, publish_async_max_pending=window)

    @contextlib.contextmanager
    def stalled(self, stream: str):
        """Hold the stream's lock, as a writer in another process would."""
        fd = os.open(self.path / "streams" / stream / "lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


class ServerSide:
    def __init__(self, kind: str, server: NatsServer) -> None:
        self.kind = kind
        self.server = server

    def open(self, window: int, timeout: float = 5.0):
        if self.kind == "oracle":
            return OracleJS(self.server.url, timeout=timeout, publish_async_max_pending=window)
        return jetspark.connect(self.server.url, publish_async_max_pending=window, timeout=timeout)

    @contextlib.contextmanager
    def stalled(self, stream: str):
        """Stop the nats-server process: it reads nothing and answers nothing until it goes on."""
        pid = self.server.proc.pid
        os.kill(pid, signal.SIGSTOP)
        _, status = os.waitpid(pid, os.WUNTRACED)  # returns once every thread of it has stopped
        assert os.WIFSTOPPED(status)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)


def _side(kind: str, tmp_path):
    if kind == "engine":
        yield EngineSide(tmp_path / "store")
        return
    server = NatsServer().start()
    try:
        yield ServerSide(kind, server)
    finally:
        server.stop()


@pytest.fixture(params=["engine", "nats", "oracle"])
def side(request, tmp_path):
    yield from _side(request.param, tmp_path)


@pytest.fixture(params=["engine", "nats"])
def jetspark_side(request, tmp_path):
    yield from _side(request.param, tmp_path)


def test_a_full_window_holds_the_caller_until_a_publish_completes(side):
    js = side.open(window=3)
    try:
        js.add_stream(name="BP", subjects=["bp.>"])
        with side.stalled("BP"):
            first = [js.publish_async("bp.a", b"%d" % i) for i in range(3)]
            assert js.publish_async_pending() == 3
            with pytest.raises(TooManyStalledMsgsError):
                js.publish_async("bp.a", b"stalled", wait_stall=0.1)
            with pytest.raises(PublishAsyncTimeoutError):
                js.publish_async_completed(timeout=0.1)
            assert js.publish_async_pending() == 3
            # A caller without wait_stall waits for room, however long it takes.
            waited: list = []
            caller = threading.Thread(
                target=lambda: waited.append((js.publish_async("bp.a", b"3"), [f.done() for f in first]))
            )
            caller.start()
        caller.join(30)
        assert not caller.is_alive()
        ((fourth, done_then),) = waited
        assert any(done_then), "publish_async returned while the window was still full"
        js.publish_async_completed()
        assert [f.result().seq for f in first + [fourth]] == [1, 2, 3, 4]
        assert js.stream_info("BP").state.messages == 4  # the refused call sent nothing
    finally:
        js.close()


# ---------------------------------------------------------------- close


def test_close_stores_what_the_engine_queued(tmp_path):
    js = jetspark.connect(tmp_path / "store")
    js.add_stream(name="CL", subjects=["cl.>"])
    futures = [js.publish_async("cl.a", b"%d" % i) for i in range(500)]
    js.close()
    assert [f.result(timeout=0).seq for f in futures] == list(range(1, 501))
    for call in (lambda: js.publish_async("cl.a"), js.publish_async_pending, js.publish_async_completed):
        with pytest.raises(ClosedError):
            call()
    with jetspark.connect(tmp_path / "store") as again:
        assert again.stream_info("CL").state.messages == 500


def test_close_fails_what_the_server_never_answered():
    server = NatsServer().start()
    side = ServerSide("nats", server)
    try:
        js = side.open(window=10, timeout=0.5)
        js.add_stream(name="CL", subjects=["cl.>"])
        with side.stalled("CL"):
            futures = [js.publish_async("cl.a") for _ in range(3)]
            js.close()
            for f in futures:
                err = f.exception(timeout=0)
                assert isinstance(err, (RequestTimeoutError, ClosedError)) and "may or may not be stored" in "".join(
                    getattr(err, "__notes__", [])
                ) + str(err)
            with pytest.raises(ClosedError):
                js.publish_async("cl.a")
    finally:
        server.stop()


# ------------------------------------------- why the nats:// backend does not use nats-py's publish_async


def test_nats_py_leaves_a_refused_future_pending(nats_server):
    """nats-py 2.16: a PubAck that is an error never completes its future.  When this fails,
    nats-py completes them, and jetspark.remote.async_publish could use its publish_async."""

    async def scenario() -> tuple[bool, int]:
        nc = await nats.connect(nats_server.url)
        try:
            js = nc.jetstream()
            await js.add_stream(name="NPY", subjects=["npy.>"], storage="memory")
            refused = await js.publish_async("npy.a", b"", headers={EXP_LAST_SEQ: "7"})
            later = await js.publish_async("npy.a", b"")
            await asyncio.wait_for(later, 5)  # its PubAck came after the refusal, through the same handler
            return refused.done(), js.publish_async_pending()
        finally:
            await nc.close()

    done, pending = asyncio.run(scenario())
    with jetspark.connect(nats_server.url) as js:
        js.delete_stream("NPY")
    assert (done, pending) == (False, 1)


def test_a_future_callback_cannot_wait_for_its_own_thread(jetspark_side):
    """Callbacks run in the thread that completes the futures: there, a full window or
    publish_async_completed would wait for that very thread, so they refuse at once."""
    side = jetspark_side
    js = side.open(window=2)
    seen: list = []

    def callback(_: Future) -> None:
        for call in (lambda: [js.publish_async("cb.b") for _ in range(3)], js.publish_async_completed):
            try:
                call()
                seen.append(None)
            except Exception as exc:
                seen.append(type(exc))

    try:
        js.add_stream(name="CB", subjects=["cb.>"])
        with side.stalled("CB"):
            first = js.publish_async("cb.a")
            first.add_done_callback(callback)  # before it can complete
        js.publish_async_completed()
        assert seen == [TooManyStalledMsgsError, RuntimeError]
        assert first.result().seq == 1 and js.stream_info("CB").state.messages == 3  # two of the callback's went in
    finally:
        js.close()
