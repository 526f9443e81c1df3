"""Work-queue range reads through pipelined batched direct gets (jetspark/remote/direct.py) and
their reply parser (jetspark/remote/direct_frames.py): what pipelining could break.

Windows are made small here (``DIRECT_BATCH``) so a few hundred messages span many windows,
several in flight: answers that come in another order than asked, an answer lost, messages
deleted while the read goes on, gaps wider than a window, a filter matching few."""

from __future__ import annotations

import datetime as dt
import threading
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jetspark
from jetspark import AckPolicy, RetentionPolicy
from jetspark.errors import JetSparkError, RequestTimeoutError, StreamNotFoundError
from jetspark.protocol import frames as F
from jetspark.remote import direct, direct_frames, reads, wire
from jetspark.remote.direct_frames import copy_out, reply_fields

pytestmark = pytest.mark.server


def fill(h, s: str, n: int) -> None:
    """A work-queue stream ``s`` with allow_direct, its durable, ``n`` messages: seq q on
    ``<s>.<q % 3>``, payload ``p<q>``."""
    h.add_stream(name=s, subjects=[f"{s}.>"], retention=RetentionPolicy.WORK_QUEUE, allow_direct=True)
    h.add_consumer(s, durable_name="spark", ack_policy=AckPolicy.EXPLICIT)
    h.publish_batch(
        pa.table({"subject": [f"{s}.{q % 3}" for q in range(1, n + 1)], "data": [b"p%d" % q for q in range(1, n + 1)]}),
        stream=s,
    )


def rows(batches) -> list[tuple[int, str, bytes]]:
    got = []
    for b in batches:
        got += zip(b.column("seq").to_pylist(), b.column("subject").to_pylist(), b.column("data").to_pylist())
    return got


def expected(s: str, seqs) -> list[tuple[int, str, bytes]]:
    return [(q, f"{s}.{q % 3}", b"p%d" % q) for q in seqs]


@pytest.fixture
def small_windows(monkeypatch):
    """Windows of 16 sequences, 4 in flight; the readers made are kept in ``made``."""
    monkeypatch.setattr(direct, "DIRECT_BATCH", 16)
    monkeypatch.setattr(direct, "DIRECT_IN_FLIGHT", 4)
    made: list = []

    def use(cls):
        class Recorded(cls):
            def __init__(self, *args, **kw) -> None:
                super().__init__(*args, **kw)
                made.append(self)

        monkeypatch.setattr(reads, "DirectRead", Recorded)

    use(direct.DirectRead)
    return made, use


class Reversed(direct.DirectRead):
    """Sends the requests queued together in the reverse order: the server answers the later
    windows first (as replicas of an R3 stream may)."""

    most_at_once = 0

    async def _flush(self) -> None:
        self.most_at_once = max(self.most_at_once, len(self._outbox))
        self._outbox.reverse()
        await super()._flush()


def test_answers_to_later_windows_first_come_out_in_sequence_order(js, name, small_windows):
    made, use = small_windows
    use(Reversed)
    s = name()
    fill(js, s, 300)
    for q in (5, 17, 18, 40, 41, 42, 43, 100):
        js.delete_msg(s, q)
    live = [q for q in range(1, 301) if q not in (5, 17, 18, 40, 41, 42, 43, 100)]
    got = rows(js.read_batches(s, batch_size=37))
    assert got == expected(s, live)  # (in this order: sequence order, each once)
    reader = made[-1]
    assert reader.most_at_once > 1 and reader.requests >= 300 // 16
    # A filter the server applies, and several matched here.
    assert rows(js.read_batches(s, 3, 250, subjects=[f"{s}.1"])) == expected(
        s, [q for q in live if 3 <= q <= 250 and q % 3 == 1]
    )
    two = [f"{s}.0", f"{s}.2"]
    assert rows(js.read_batches(s, 3, 250, subjects=two)) == expected(
        s, [q for q in live if 3 <= q <= 250 and q % 3 != 1]
    )


def test_nats_py_public_path_reads_the_same(js, name, small_windows):
    # (nats-py's own subscription callbacks instead of the bulk framing: tuples made into runs)
    s = name()
    fill(js, s, 200)
    for q in (3, 50, 51, 52, 200):
        js.delete_msg(s, q)
    js._session.public_path = True
    got = rows(js.read_batches(s, batch_size=33))
    assert got == expected(s, [q for q in range(1, 201) if q not in (3, 50, 51, 52, 200)])
    assert rows(js.read_batches(s, 10, 120, subjects=[f"{s}.2"])) == expected(
        s, [q for q in range(10, 121) if q % 3 == 2 and q not in (50, 200)]
    )


def test_ordered_consumer_over_direct_gets_matches_the_engine(js, engine, name, small_windows):
    # ordered_consumer reads the range twice (a count for num_pending, then the messages):
    # subjects, payloads, own headers and pending as the engine gives them.
    s = name()
    for h in (js, engine):
        fill(h, s, 90)
        h.publish(f"{s}.h", b"with", headers={"k": ["1", "2"], "Nats-Msg-Id": "m"})
        for q in (2, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 60):
            h.delete_msg(s, q)

    def seen(h, subjects):
        return [
            (m.metadata.sequence.stream, m.subject, m.data, m.headers, m.metadata.num_pending)
            for m in h.ordered_consumer(s, subjects=subjects, start_seq=1, end_seq=91, batch_size=7)
        ]

    for subjects in (None, [f"{s}.0"], [f"{s}.1", f"{s}.h"]):
        want = seen(engine, subjects)
        assert seen(js, subjects) == want and want, subjects
    assert seen(js, None)[-1][3] == {"k": "2", "Nats-Msg-Id": "m"}  # (the last value of a repeated key)


class LosesOne(direct.DirectRead):
    """The first request for the third window never reaches the server."""

    lost = False

    async def _flush(self) -> None:
        if not LosesOne.lost:
            for i, (payload, _reply) in enumerate(self._outbox):
                if b'"seq": 33' in payload:
                    del self._outbox[i]
                    LosesOne.lost = True
                    break
        await super()._flush()


def test_a_window_whose_answer_does_not_come_is_asked_again(server, name, small_windows):
    made, use = small_windows
    use(LosesOne)
    LosesOne.lost = False
    s = name()
    with jetspark.connect(server.url, timeout=1) as js:
        fill(js, s, 200)
        got = rows(js.read_batches(s, batch_size=64))
        assert got == expected(s, range(1, 201))
        assert LosesOne.lost and made[-1].resent >= 1
        js.delete_stream(s)


def test_silence_past_the_retries_is_a_timeout_naming_the_read(server, name, small_windows):
    class Deaf(direct.DirectRead):
        async def _flush(self) -> None:
            self._outbox.clear()  # nothing reaches the server

    s = name()
    with jetspark.connect(server.url, timeout=0.3) as js:
        fill(js, s, 100)
        reader = Deaf(js._session, s, 1, 100, None)
        js._session.run(reader.open(), what="open")
        try:
            with pytest.raises(RequestTimeoutError, match=f"direct get of 16 messages from stream '{s}'"):
                js._session.run(reader.next_chunk(50), what="read")
            assert reader.resent == direct.DIRECT_RETRIES * direct.DIRECT_IN_FLIGHT
        finally:
            js._session.run(reader.close(), what="close")
        js.delete_stream(s)


def test_messages_deleted_while_the_read_goes_on(js, name, small_windows):
    made, _ = small_windows
    s = name()
    fill(js, s, 1000)
    it = js.read_batches(s, batch_size=50)
    got = rows([next(it)])
    assert got == expected(s, range(1, 51))
    # Far past what is in flight (4 windows of 16): these must not come back.
    gone = {*range(400, 520), *range(700, 703), 777, 1000}
    for q in sorted(gone):
        js.delete_msg(s, q)
    got += rows(it)
    seqs = [q for q, _, _ in got]
    assert seqs == sorted(set(seqs))
    assert got == expected(s, [q for q in range(1, 1000) if q not in gone])
    # A gap of 120 sequences: the windows widen after it (each answer ran past its window).
    assert made[-1].requests < 1000 // 16 + 20


@pytest.mark.parametrize("filters", [None, "1", ["0", "2"]], ids=["all", "one", "two"])
def test_gaps_filters_and_the_end_match_the_engine(js, engine, name, small_windows, filters):
    s = name()
    for h in (js, engine):
        fill(h, s, 700)
        assert h.advance_ack_floor(s, "spark", 40).stream_seq == 40  # 1..40 acknowledged: gone
        for q in [*range(100, 180), 181, 183, *range(300, 302), 699, 700]:
            h.delete_msg(s, q)
    subjects = None if filters is None else [f"{s}.{x}" for x in ([filters] if isinstance(filters, str) else filters)]
    for lo, hi in ((1, 700), (50, 100), (170, 190), (600, None), (699, 700)):
        want = rows(engine.read_batches(s, lo, hi, subjects=subjects, batch_size=29))
        assert rows(js.read_batches(s, lo, hi, subjects=subjects, batch_size=29)) == want, (lo, hi)


class OneFrameAtATime(direct.DirectRead):
    """Takes every run of frames one frame at a time: an answer split over many runs."""

    def _absorb(self, buf, f) -> None:
        for i in range(len(f)):
            super()._absorb(buf, f[i : i + 1])


@pytest.mark.parametrize("filters", [None, ["0", "2"]], ids=["all", "two"])
def test_answers_split_over_many_runs(js, engine, name, small_windows, filters):
    # (An answer that runs past its window's end shows a gap only from its first message past
    # the end: the runs after it must not move the next window further.)
    _, use = small_windows
    use(OneFrameAtATime)
    s = name()
    for h in (js, engine):
        fill(h, s, 300)
        for q in [*range(100, 180), 181, 250]:
            h.delete_msg(s, q)
    subjects = None if filters is None else [f"{s}.{x}" for x in filters]
    want = rows(engine.read_batches(s, 1, 300, subjects=subjects, batch_size=41))
    assert rows(js.read_batches(s, 1, 300, subjects=subjects, batch_size=41)) == want


def test_a_sparse_filter_widens_the_windows(js, name, small_windows):
    made, _ = small_windows
    s = name()
    fill(js, s, 60)
    js.publish_batch(pa.table({"subject": [f"{s}.many"] * 2000, "data": [b"x"] * 2000}), stream=s)
    js.publish_batch(pa.table({"subject": [f"{s}.0"] * 5, "data": [b"late"] * 5}), stream=s)
    got = rows(js.read_batches(s, subjects=[f"{s}.0"]))
    assert [q for q, _, _ in got] == [*range(3, 61, 3), *range(2061, 2066)]
    # (The server filters: answers bring matches only, the windows span many sequences.)
    assert made[-1].requests <= 8


def test_large_messages_cut_answers_short_and_the_rest_is_asked_for(js, name, small_windows, monkeypatch):
    monkeypatch.setattr(direct, "DIRECT_MAX_BYTES", 1 << 20)
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"], retention=RetentionPolicy.WORK_QUEUE, allow_direct=True)
    js.add_consumer(s, durable_name="spark", ack_policy=AckPolicy.EXPLICIT)
    big = [bytes([q]) * 300_000 for q in range(40)]
    js.publish_batch(pa.table({"subject": [f"{s}.b"] * 40, "data": big}), stream=s)
    js.delete_msg(s, 7)
    got = concat_rows(js.read_batches(s, batch_size=9))
    assert [r["seq"] for r in got] == [q for q in range(1, 41) if q != 7]
    assert all(r["data"] == big[r["seq"] - 1] for r in got)


def concat_rows(batches) -> list[dict]:
    return pa.Table.from_batches(list(batches)).to_pylist()


def test_a_server_restart_in_the_middle_of_a_read(start_server, name, small_windows):
    srv = start_server()
    with jetspark.connect(srv.url, timeout=1, reconnect_time_wait=0.2) as js:
        fill(js, "RS", 400)
        it = js.read_batches("RS", batch_size=100)
        got = rows([next(it)])
        srv.kill()
        restart = threading.Timer(0.5, srv.start)  # same port, same store
        restart.start()
        try:
            got += rows(it)
        finally:
            restart.join()
    assert got == expected("RS", range(1, 401))


def test_a_read_of_a_stream_deleted_under_it_says_the_stream_is_gone(server, name, small_windows):
    # No server answers the direct gets of a deleted stream (503): asked again for the
    # session's timeout, then the stream is looked up, with the retry budget as it stands.
    s = name()
    for budget in (0, 2):
        with jetspark.connect(server.url, timeout=0.5, retry_budget=budget) as js:
            fill(js, s, 300)
            it = js.read_batches(s, batch_size=50)
            next(it)
            js.delete_stream(s)
            with pytest.raises(StreamNotFoundError, match=s):
                list(it)


def test_direct_gets_no_server_answers_for_a_while_are_asked_again(server, name, small_windows):
    # (A node going away leaves no subscriber for a moment: the first answers are 503.)
    made, use = small_windows

    class Unheard(direct.DirectRead):
        turned = 0

        async def _flush(self) -> None:
            if Unheard.turned < 3:  # the first three rounds go to a subject nobody listens on
                Unheard.turned += 1
                nc = await self.session.ready()
                out, self._outbox = self._outbox, []
                for payload, reply in out:
                    await nc.publish("nobody.listens.here", payload, reply=reply)
                return
            await super()._flush()

    use(Unheard)
    s = name()
    with jetspark.connect(server.url, timeout=2, retry_budget=0) as js:
        fill(js, s, 100)
        assert rows(js.read_batches(s, batch_size=30)) == expected(s, range(1, 101))
        assert made[-1].resent >= 1
        js.delete_stream(s)


def test_an_error_status_from_the_server_is_raised_by_the_read(server, name, small_windows):
    # (Answers are read as they arrive, inside nats-py's read loop: an error found there is
    # raised by the read, not by nats-py.)
    _, use = small_windows

    class Garbled(direct.DirectRead):
        async def _flush(self) -> None:
            self._outbox = [(b"{not json", reply) for _, reply in self._outbox]
            await super()._flush()

    use(Garbled)
    s = name()
    with jetspark.connect(server.url, timeout=2, retry_budget=0) as js:
        fill(js, s, 50)
        with pytest.raises(JetSparkError, match=f"direct get from stream '{s}' answered 408 Malformed Request"):
            list(js.read_batches(s))
        assert js.stream_info(s).state.messages == 50  # the handle goes on
        js.delete_stream(s)


# ---------------------------------------------------------------------- the reply parser

_SUBJECT_CHARS = st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=" *>.")
subject_st = st.lists(st.text(_SUBJECT_CHARS, min_size=1, max_size=8), min_size=1, max_size=4).map(".".join)
stamp_st = st.builds(
    lambda t, digits: wire.rfc3339_ns(t) if digits is None else _stamp(t, digits),
    st.integers(min_value=0, max_value=(1 << 62)),
    st.one_of(st.none(), st.integers(min_value=0, max_value=9)),
)


def _stamp(ns: int, digits: int) -> str:
    """The server's form with ``digits`` fraction digits kept, trailing zeros trimmed."""
    base = dt.datetime.fromtimestamp(ns // 10**9, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    frac = str(ns % 10**9).rjust(9, "0")[:digits].rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"


own_st = st.one_of(
    st.none(),
    st.lists(
        st.tuples(
            st.sampled_from(["k", "Nats-Msg-Id", "Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp"]),
            st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12).map(str.strip),
        ),
        min_size=1,
        max_size=4,
    ),
)
message_st = st.tuples(
    subject_st, st.integers(1, 2**63 - 1), stamp_st, own_st, st.binary(max_size=20), st.booleans(), st.integers(0, 99)
)


def _reply(inbox: str, stream: str, msg) -> tuple[bytes, tuple]:
    subject, seq, stamp, own, data, trailer, req = msg
    block = b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in own or [])
    block += f"Nats-Stream: {stream}\r\nNats-Subject: {subject}\r\n".encode()
    block += f"Nats-Sequence: {seq}\r\nNats-Time-Stamp: {stamp}\r\n".encode()
    if trailer:
        block += f"Nats-Num-Pending: {seq % 1000}\r\nNats-Last-Sequence: {seq - 1}\r\n".encode()
    block += b"\r\n"
    frame = b"HMSG %s.%d 1 %d %d\r\n%s%s\r\n" % (inbox.encode(), req, len(block), len(block) + len(data), block, data)
    return frame, (req, subject.encode(), seq, wire.time_to_ns(stamp), data, block)


def _status_reply(inbox: str, status: bytes, lines: bytes) -> bytes:
    """A status answer to request 7 of a window (an EOB, a 404, a 408): no message, only
    the status line and the server's ``lines`` after it."""
    block = b"NATS/1.0 " + status + b"\r\n" + lines + b"\r\n"
    return b"HMSG %s.7 1 %d %d\r\n%s\r\n" % (inbox.encode(), len(block), len(block), block)


def _window_fields(inbox: str, stream: str, pieces: list[bytes]):
    """A window's answers framed whole by ``scan`` and read by ``reply_fields``: (buf, frames, fields)."""
    buf = b"".join(pieces)
    f, end = F.scan(buf)
    assert end == len(buf) and len(f) == len(pieces)
    return buf, f, reply_fields(buf, f, stream, len(inbox) + 1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(message_st, st.sampled_from([b"204 EOB", b"404 Message Not Found"])), max_size=30),
    st.sampled_from(["S", "WQD", "a-b_c"]),
)
def test_reply_fields_agree_with_a_one_by_one_reading(items, stream):
    inbox = "_INBOX.abc"
    pieces, want = [], []
    for item in items:
        if isinstance(item, bytes):
            pieces.append(_status_reply(inbox, item, b"Nats-Num-Pending: 0\r\n"))
            want.append(None)
        else:
            frame, w = _reply(inbox, stream, item)
            pieces.append(frame)
            want.append(w)
    buf, f, d = _window_fields(inbox, stream, pieces)
    for i, w in enumerate(want):
        if w is None:
            assert d.status[i] and d.req[i] == 7
            continue
        req, subject, seq, ns, data, block = w
        own, subj, q, stamp = direct.strip_direct_headers(block)
        assert not d.status[i] and d.ok[i] and d.req[i] == req
        assert (buf[d.subj_lo[i] : d.subj_hi[i]], int(d.seq[i]), int(d.time[i])) == (subject, seq, ns) == (subj, q, ns)
        own_got = buf[int(f.hdr_lo[i]) : int(d.own_end[i])] + b"\r\n" if d.own_end[i] else None
        assert own_got == own
    # What a window keeps of them: their subjects and payloads copied out, nothing else.
    keep = np.flatnonzero(~d.status)
    if len(keep):
        cbuf, cf = copy_out(buf, d.subj_lo[keep], d.subj_hi[keep], f.data_lo[keep], f.data_hi[keep])
        cb = bytes(cbuf)
        got = [(cb[cf.subj_lo[k] : cf.subj_hi[k]], cb[cf.data_lo[k] : cf.data_hi[k]]) for k in range(len(keep))]
        assert got == [(want[i][1], want[i][4]) for i in keep.tolist()]
        assert len(cb) == sum(len(want[i][1]) + len(want[i][4]) for i in keep.tolist())
        assert (cf.hdr_lo == cf.data_lo).all() and (cf.reply_lo == cf.reply_hi).all()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(message_st, st.just(b"204 EOB")), min_size=1, max_size=30),
    st.lists(st.integers(0, 1 << 12), max_size=8),
)
def test_reply_fields_of_reads_cut_anywhere_agree_with_a_one_by_one_reading(items, cuts):
    """The replies as a connection receives them: cut into reads at arbitrary points, framed
    read by read (``FrameReader``, whose frames carry the line ends it found), each run read
    by ``reply_fields`` with those line ends and without them (searched again): the same
    fields as ``strip_direct_headers`` reads one by one."""
    inbox, stream = "_INBOX.abc", "WQD"
    pieces, want = [], []
    for item in items:
        if isinstance(item, bytes):
            pieces.append(_status_reply(inbox, item, b"Nats-Num-Pending: 0\r\nNats-Last-Sequence: 5\r\n"))
            want.append(None)
        else:
            frame, w = _reply(inbox, stream, item)
            pieces.append(frame)
            own, subject, seq, stamp = direct.strip_direct_headers(w[5])
            want.append((w[0], subject, seq, wire.time_to_ns(stamp.decode()), own, w[4]))
    data = b"".join(pieces)
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    reader = F.FrameReader()
    got = []
    for lo, hi in zip(bounds, bounds[1:]):
        buf, f = reader.feed(data[lo:hi])
        if not len(f):
            continue
        assert f.lines is not None and np.array_equal(f.lines, np.flatnonzero(np.frombuffer(buf, np.uint8) == 10))
        d = reply_fields(buf, f, stream, len(inbox) + 1)
        again = reply_fields(buf, F.Frames(*(getattr(f, c) for c in F.COLUMNS)), stream, len(inbox) + 1)
        for k in ("status", "ok", "req", "seq", "time", "subj_lo", "subj_hi", "own_end"):
            assert np.array_equal(getattr(d, k), getattr(again, k)), k
        for i in range(len(f)):
            if d.status[i]:
                got.append(None)
                continue
            assert d.ok[i]
            own = buf[int(f.hdr_lo[i]) : int(d.own_end[i])] + b"\r\n" if d.own_end[i] else None
            got.append((int(d.req[i]), buf[d.subj_lo[i] : d.subj_hi[i]], int(d.seq[i]), int(d.time[i]), own,
                        buf[f.data_lo[i] : f.data_hi[i]]))  # fmt: skip
    assert got == want


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 10**19),
    st.lists(
        st.one_of(
            st.tuples(stamp_st, own_st, st.binary(max_size=20), st.integers(0, 2)),
            st.sampled_from([b"204 EOB", b"404 Message Not Found", b"408 Request Timeout"]),
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from(["S", "WQD", "a-b_c", "a-much-longer-stream-name"]),
)
def test_reply_fields_of_consecutive_sequences_agree_with_a_one_by_one_reading(first, items, stream):
    """A window's answer as the server sends it: consecutive sequences, mostly of one width
    (read as one column), crossing a power of ten, past int64 (refused), with status frames
    (whose lines are no sequence) and own headers among them: the same fields as
    ``strip_direct_headers`` reads one by one, the sequences as int() reads them."""
    inbox = "_INBOX.abc"
    pieces, want = [], []
    seq = first
    for item in items:
        if isinstance(item, bytes):
            pieces.append(_status_reply(inbox, item, b"Nats-Num-Pending: 0\r\nNats-Last-Sequence: 12345\r\n"))
            want.append(None)
            continue
        stamp, own, data, req = item
        frame, w = _reply(inbox, stream, ("a.b", seq, stamp, own, data, True, req))
        pieces.append(frame)
        want.append(w)
        seq += 1
    buf, f, d = _window_fields(inbox, stream, pieces)
    for i, w in enumerate(want):
        if w is None:
            assert d.status[i] and d.req[i] == 7
            continue
        req, subject, q, ns, data, block = w
        assert not d.status[i] and d.req[i] == req
        if q >= 1 << 63:  # (no int64: the array reading leaves it, the read refuses it one by one)
            assert not d.ok[i]
            continue
        own, subj, q2, _ = direct.strip_direct_headers(block)
        assert d.ok[i]
        assert (buf[d.subj_lo[i] : d.subj_hi[i]], int(d.seq[i]), int(d.time[i])) == (subject, q, ns) and q2 == q
        assert (buf[int(f.hdr_lo[i]) : int(d.own_end[i])] + b"\r\n" if d.own_end[i] else None) == own


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 10**19), min_size=1, max_size=20),
    st.one_of(st.none(), st.integers(1, 19)),
    st.lists(st.booleans(), min_size=20, max_size=20),
)
def test_row_number_reads_what_int_reads_at_one_width_or_many(values, width, taken):
    """Numbers at one width (leading zeros), of many widths, past int64, and rows not taken
    read at another width: each taken row is int()'s value where it is a number in int64."""
    texts = [str(v).rjust(width or 0, "0").encode() for v in values]
    rows = np.zeros((len(texts), 48), dtype=np.uint8)
    for k, t in enumerate(texts):
        rows[k, 17 : 17 + min(len(t), 31)] = np.frombuffer(t[:31], dtype=np.uint8)
    lens = np.array([len(t) for t in texts], dtype=np.int64)
    mask = np.array(taken[: len(texts)])
    for t_mask in (None, mask):
        got, ok = direct_frames._row_number(rows, 17, lens, t_mask)
        for k, t in enumerate(texts):
            if t_mask is not None and not t_mask[k]:
                continue
            fits = len(t) <= 19 and int(t) < 1 << 63
            assert bool(ok[k]) == fits
            if fits:
                assert int(got[k]) == int(t)


def test_reply_fields_refuses_what_is_no_direct_get_reply():
    block = b"NATS/1.0\r\nk: v\r\n\r\n"
    buf = b"HMSG _INBOX.x.1 1 %d %d\r\n%sxy\r\n" % (len(block), len(block) + 2, block) + b"MSG _INBOX.x.2 1 2\r\nhi\r\n"
    f, _ = F.scan(buf)
    d = reply_fields(buf, f, "S", len("_INBOX.x."))
    assert list(d.ok) == [False, False] and list(d.status) == [False, False] and list(d.req) == [1, 2]
    bad_time = b"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: a\r\nNats-Sequence: 3\r\n"
    bad_time += b"Nats-Time-Stamp: 2026-1x-01T00:00:00Z\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 2\r\n\r\n"
    buf = b"HMSG _INBOX.x.1 1 %d %d\r\n%s\r\n" % (len(bad_time), len(bad_time), bad_time)
    f, _ = F.scan(buf)
    assert not reply_fields(buf, f, "S", len("_INBOX.x.")).ok[0]
    assert np.array_equal(reply_fields(buf, f[:0], "S", 9).seq, np.zeros(0, dtype=np.int64))


def _read_run(pieces: list[bytes]) -> direct._Window:
    """The frames ``pieces`` (answers to request 0 of inbox ``_INBOX.x``) taken by a read of
    [1, 10] of stream S as they would arrive: its window, with what it kept."""
    read = direct.DirectRead(SimpleNamespace(api_prefix="$JS.API"), "S", 1, 10, None)  # (no request is sent)
    read._inbox_subject = "_INBOX.x"
    w = direct._Window(1, 10)
    w.req = 0
    read._by_req[0] = w
    buf = b"".join(pieces)
    f, end = F.scan(buf)
    assert end == len(buf)
    read._absorb(buf, f)
    return w


def test_a_reply_the_array_reading_does_not_take_is_read_one_by_one():
    """A time stamp with more than nine fraction digits, or an offset for its zone, is no
    reply_fields row: the read takes it one by one (as wire.time_to_ns reads it) among the others."""
    stamps = ["2026-11-24T01:49:36.660992921Z", "2026-11-24T01:49:36.6609929219Z", "2026-11-24T02:49:36.5+01:00"]
    pieces = [_reply("_INBOX.x", "S", ("a.b", q, t, None, b"p%d" % q, True, 0))[0] for q, t in enumerate(stamps, 1)]
    buf = b"".join(pieces)
    assert reply_fields(buf, F.scan(buf)[0], "S", len("_INBOX.x.")).ok.tolist() == [True, False, False]
    w = _read_run(pieces)
    (part,) = w.parts
    assert part.seq.tolist() == [1, 2, 3]
    assert part.time.tolist() == [wire.time_to_ns(stamps[0])] * 2 + [wire.time_to_ns("2026-11-24T01:49:36.5Z")]
    assert [bytes(part.buf[part.frames.data_lo[k] : part.frames.data_hi[k]]) for k in range(3)] == [b"p1", b"p2", b"p3"]


def test_a_reply_without_the_servers_lines_is_an_error_naming_it():
    block = b"NATS/1.0\r\nk: v\r\n\r\n"
    with pytest.raises(JetSparkError, match="not a direct get reply"):
        _read_run([b"HMSG _INBOX.x.0 1 %d %d\r\n%sxy\r\n" % (len(block), len(block) + 2, block)])
    # The server's lines with a sequence that is no number: the same error, no ValueError.
    bad = b"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: a\r\nNats-Sequence: 1x\r\n"
    bad += b"Nats-Time-Stamp: 2026-11-24T01:49:36Z\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 0\r\n\r\n"
    with pytest.raises(JetSparkError, match="not a direct get reply"):
        _read_run([b"HMSG _INBOX.x.0 1 %d %d\r\n%s\r\n" % (len(bad), len(bad), bad)])


def test_a_reader_used_before_it_is_open_says_so():
    """The readers' inbox and puller exist between open and close only: used outside, a
    JetSparkError naming the read, not an AttributeError on None."""
    import asyncio

    from jetspark.remote.range_reader import RangeRead

    read = direct.DirectRead(SimpleNamespace(api_prefix="$JS.API"), "S", 1, 10, None)
    with pytest.raises(JetSparkError, match="direct read of stream 'S' is not open"):
        read._opened()
    ranged = RangeRead(SimpleNamespace(api_prefix="$JS.API"), "S", 1, 10, None, replies=False)
    with pytest.raises(JetSparkError, match="range read of stream 'S' is not open"):
        asyncio.run(ranged.next_chunk(5))
