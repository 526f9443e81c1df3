"""jetspark/protocol/frames.py against nats-py's own protocol parser, and the delivery metadata
read from frames (jetspark/protocol/deliveries.py).

The frame streams are what a server writes (single spaces in control lines),
with everything it can send a client: deliveries with and without reply
subjects and headers, status frames (100 idle heartbeat and flow control,
404, 408, 409), empty payloads, payloads holding protocol text, PING, PONG,
+OK, -ERR and INFO; split into reads at arbitrary points.
"""

from __future__ import annotations

import asyncio
import datetime
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.errors import ProtocolError
from nats.protocol.parser import Parser

from jetspark.protocol import frames as F
from jetspark.protocol.deliveries import FrameChunk, ack_fields, compact


class _Recorder:
    """What nats-py's Parser calls back, in order."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    async def _process_msg(self, sid, subject, reply, data, headers):
        self.events.append(
            ("msg", sid, bytes(subject), bytes(reply), bytes(data), None if headers is None else bytes(headers))
        )

    async def _process_ping(self):
        self.events.append(("ping",))

    async def _process_pong(self):
        self.events.append(("pong",))

    async def _process_info(self, info):
        self.events.append(("info", info))

    async def _process_err(self, err):
        self.events.append(("err", err))


def nats_py_events(reads: list[bytes]) -> list[tuple]:
    rec = _Recorder()
    parser = Parser(rec)

    async def feed():
        for data in reads:
            await parser.parse(data)

    asyncio.run(feed())
    return rec.events


def our_events(reads: list, group: int = 1) -> list[tuple]:
    """What FrameReader frames of ``reads``, fed one at a time, or ``group`` reads per call."""
    reader = F.FrameReader()
    events: list[tuple] = []
    feeds = reads if group == 1 else [reads[i : i + group] for i in range(0, len(reads), group)]
    for data in feeds:
        buf, f = reader.feed(data)
        for kind, sid, sl, sh, rl, rh, hl, dl, dh in zip(*(getattr(f, c).tolist() for c in F.COLUMNS)):
            if kind in (F.MSG, F.HMSG):
                events.append(("msg", sid, buf[sl:sh], buf[rl:rh], buf[dl:dh], buf[hl:dl] if dl > hl else None))
            elif kind == F.PING:
                events.append(("ping",))
            elif kind == F.PONG:
                events.append(("pong",))
            elif kind == F.INFO:
                events.append(("info", json.loads(buf[sl:sh])))
            elif kind == F.ERR:
                events.append(("err", buf[sl:sh].decode().lower()))
            else:
                assert kind == F.OK
    return events


# Every character a subject token can hold (no whitespace, no ".", no wildcards), some beyond ASCII.
_SUBJECT_CHARS = [chr(c) for c in range(0x21, 0x7F) if chr(c) not in ".*>"] + ["é", "ß", "日", "🙂"]
tokens = st.text(alphabet=_SUBJECT_CHARS, min_size=1, max_size=8)
subjects = st.lists(tokens, min_size=1, max_size=4).map(lambda ts: ".".join(ts).encode())
replies = st.one_of(
    st.just(b""),
    subjects,
    st.builds(
        lambda s, q, c, t, p: b"$JS.ACK.S.c.1.%d.%d.%d.%d" % (s, q, t, p),
        st.integers(1, 10**12),
        st.integers(1, 10**12),
        st.just(0),
        st.integers(0, 2**62),
        st.integers(0, 10**9),
    ),
)
payloads = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"", b"\r\n", b"\r\nMSG a 1 3\r\n", b"x\r\nHMSG a 1 12 12\r\n", b"PING\r\n", b"MSG "]),
    st.lists(st.sampled_from([b"\r\n", b"MSG ", b"HMSG ", b" ", b"1", b"\n", b"\r", b"a"]), max_size=12).map(b"".join),
)
header_blocks = st.one_of(
    st.just(b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n"),
    st.just(b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 5\r\nNats-Last-Stream: 9\r\n\r\n"),
    st.just(b"NATS/1.0 100 FlowControl Request\r\n\r\n"),
    st.just(b"NATS/1.0 404 No Messages\r\n\r\n"),
    st.just(b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 3\r\nNats-Pending-Bytes: 0\r\n\r\n"),
    st.just(b"NATS/1.0 409 Batch Completed\r\n\r\n"),
    st.just(b"NATS/1.0 409 Consumer Deleted\r\n\r\n"),
    st.builds(
        lambda k, v: b"NATS/1.0\r\n%s: %s\r\n\r\n" % (k, v),
        st.sampled_from([b"K", b"Nats-Msg-Id", b"x-y"]),
        st.binary(max_size=10).filter(lambda v: b"\r" not in v and b"\n" not in v),
    ),
)


@st.composite
def frame(draw) -> bytes:
    what = draw(st.sampled_from(["msg", "msg", "msg", "hmsg", "hmsg", "ping", "pong", "ok", "err", "info"]))
    if what in ("msg", "hmsg"):
        subject, sid, reply, data = draw(subjects), draw(st.integers(1, 10**6)), draw(replies), draw(payloads)
        to = b"%s %d%s" % (subject, sid, b" " + reply if reply else b"")
        if what == "msg":
            return b"MSG %s %d\r\n%s\r\n" % (to, len(data), data)
        hdr = draw(header_blocks)
        return b"HMSG %s %d %d\r\n%s%s\r\n" % (to, len(hdr), len(hdr) + len(data), hdr, data)
    if what == "err":
        return b"-ERR '%s'\r\n" % draw(
            st.sampled_from(
                [b'Permissions Violation for Subscription to "x"', b"Stale Connection", b"Unknown Protocol Operation"]
            )
        )
    if what == "info":
        return (
            b"INFO %s\r\n"
            % json.dumps({"server_id": draw(tokens), "max_payload": draw(st.integers(1, 1 << 26))}).encode()
        )
    return {"ping": b"PING\r\n", "pong": b"PONG\r\n", "ok": b"+OK\r\n"}[what]


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:])]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frame(), min_size=1, max_size=40), st.lists(st.integers(0, 1 << 16), max_size=12))
def test_frames_match_nats_py_parser_split_anywhere(frames, cuts):
    data = b"".join(frames)
    reads = split(data, cuts)
    assert our_events(reads) == nats_py_events(reads)
    assert our_events([data]) == nats_py_events([data])
    assert our_events(reads, group=3) == nats_py_events(reads)  # (several reads per call, as FrameFeed hands them)


@st.composite
def few_sids_frame(draw) -> bytes:
    """A MSG/HMSG of one of a few sids, whose last digits repeat (2, 12, 22, 102) or not, after
    subjects and reply subjects that change from frame to frame (the bytes before a sid)."""
    subject, reply, data = draw(subjects), draw(replies), draw(payloads)
    sid = draw(st.sampled_from([2, 12, 22, 102, 7]))
    to = b"%s %d%s" % (subject, sid, b" " + reply if reply else b"")
    if draw(st.booleans()):
        return b"MSG %s %d\r\n%s\r\n" % (to, len(data), data)
    hdr = draw(header_blocks)
    return b"HMSG %s %d %d\r\n%s%s\r\n" % (to, len(hdr), len(hdr) + len(data), hdr, data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.lists(few_sids_frame(), min_size=1, max_size=40),
        st.lists(st.just(b"MSG a 2 1\r\nx\r\n"), max_size=5).map(
            lambda fs: fs + [b"MSG b 12 1\r\ny\r\n", b"MSG c 22 1\r\nz\r\n"]
        ),
    ),
    st.lists(st.integers(0, 1 << 16), max_size=6),
)
def test_runs_of_a_few_sids_read_like_nats_py(frames, cuts):
    """A run's sids are read once when they are one token (whatever precedes them), else each."""
    data = b"".join(frames)
    reads = split(data, cuts)
    assert our_events(reads) == nats_py_events(reads)
    assert our_events([data]) == nats_py_events([data])


@settings(max_examples=100, deadline=None)
@given(st.lists(frame(), min_size=1, max_size=30), st.integers(1, 40))
def test_a_stream_cut_short_keeps_its_tail_for_the_next_read(frames, cut):
    """Every frame whole in the bytes so far comes out; the rest waits for the next read."""
    data = b"".join(frames)
    head = data[: max(0, len(data) - cut)]
    reader = F.FrameReader()
    _, f = reader.feed(head)
    whole = 0
    at = 0
    for fr in frames:
        if at + len(fr) <= len(head):
            whole += 1
        at += len(fr)
    assert len(f) == whole
    buf, rest = reader.feed(data[len(head) :])
    assert len(f) + len(rest) == len(frames)


def test_many_deliveries_in_one_buffer_take_the_array_path_and_read_like_nats_py():
    rng = np.random.default_rng(7)
    frames = []
    for i in range(1, 2001):
        data = rng.bytes(int(rng.integers(0, 200)))
        reply = b"$JS.ACK.S.C.1.%d.%d.1764139000%09d.%d" % (i, i, i, 2000 - i)
        frames.append(b"MSG s.%d 7 %s %d\r\n%s\r\n" % (i % 16, reply, len(data), data))
        if i % 300 == 0:
            status = b"NATS/1.0 409 Batch Completed\r\n\r\n"
            frames.append(b"HMSG _INBOX.a 7 %d %d\r\n%s\r\n" % (len(status), len(status), status))
    data = b"".join(frames)
    reads = [data[i : i + 32768] for i in range(0, len(data), 32768)]
    assert our_events(reads) == nats_py_events(reads)
    f, end = F.scan(data)
    assert end == len(data) and len(f) == len(frames)


@pytest.mark.parametrize("long", [200, 3000, 5000])
def test_long_control_lines_among_short_ones_read_like_nats_py(long):
    """A control line's spaces are looked for in the lines only, as rows as wide as the
    longest: lines past 128 bytes (a long subject or reply subject) in rows of their own,
    those past 4,096 bytes framed one by one; each frame as nats-py's parser reads it, and
    the runs of short lines after a long one still read in bulk."""
    rng = np.random.default_rng(long)
    frames = []
    for i in range(1, 601):
        data = rng.bytes(int(rng.integers(0, 60))).replace(b"\n", b"")
        subject = b"s.%d" % i if i % 50 else b"t." + b"x" * long + b".%d" % i
        reply = b" r.%d" % i if i % 3 else b""
        if i % 7:
            frames.append(b"MSG %s 7%s %d\r\n%s\r\n" % (subject, reply, len(data), data))
        else:
            hdr = b"NATS/1.0\r\nK: %d\r\n\r\n" % i
            frames.append(
                b"HMSG %s 7%s %d %d\r\n%s%s\r\n" % (subject, reply, len(hdr), len(hdr) + len(data), hdr, data)
            )
    data = b"".join(frames)
    for size in (len(data), 4096, 1000):
        reads = [data[i : i + size] for i in range(0, len(data), size)]
        assert our_events(reads) == nats_py_events(reads)
    f, end = F.scan(data)
    assert end == len(data) and len(f) == len(frames)
    assert np.array_equal(f.lines, np.flatnonzero(np.frombuffer(data, np.uint8) == 10))
    assert f[3:9].lines is f.lines and F.Frames.concat([f[:3], f[3:]]).lines is f.lines


@pytest.mark.parametrize(
    "line",
    [b"BOGUS\r\n", b"MSG a b 3\r\nabc\r\n", b"HMSG a 1 9 3\r\nabc\r\n", b"MSG a 1\r\n"],
)
def test_what_nats_py_refuses_is_a_frame_error(line):
    """A line no NATS protocol knows, a sid that is no number, a header bigger than its message."""
    with pytest.raises(F.FrameError):
        F.scan(line)
    if line.startswith(b"HMSG"):
        return  # (nats-py reads that one without a complaint, slicing nonsense: never sent by a server)
    with pytest.raises(ProtocolError):
        nats_py_events([line])


def test_parse_ints_reads_numbers_and_flags_what_is_not_one():
    buf = b"12 0 1764139000123456789 x9 99999999999999999999 "
    a = np.frombuffer(buf, dtype=np.uint8)
    lo = np.array([0, 3, 5, 25, 28, 3])
    hi = np.array([2, 4, 24, 27, 48, 3])
    values, ok = F.parse_ints(a, lo, hi)
    assert ok.tolist() == [True, True, True, False, False, False]
    assert values[:3].tolist() == [12, 0, 1764139000123456789]


def test_parse_ints_flags_backward_spans_as_no_number():
    # (a search that found no field gives hi < lo: every span backward by more than a word)
    a = np.frombuffer(b"0123456789abcdefghij", dtype=np.uint8)
    values, ok = F.parse_ints(a, np.array([16, 12]), np.array([-1, 2]))
    assert len(values) == 2 and ok.tolist() == [False, False]


numbers = st.one_of(
    st.integers(0, 2**63 - 1).map(lambda v: b"%d" % v),
    st.integers(0, 10**25).map(lambda v: b"%d" % v),  # (past int64 and past 19 digits too)
    st.text(alphabet="0123456789", max_size=22).map(str.encode),  # (leading zeros, empty)
    st.binary(max_size=22),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(numbers, min_size=1, max_size=30), st.binary(max_size=9), st.binary(max_size=3))
def test_parse_ints_reads_what_int_reads_anywhere_in_a_buffer(tokens, head, gap):
    """Each span is a number exactly when it is 1 to 19 ASCII digits of an int64, and then its
    value is int()'s, wherever it lies (at the buffer's start, its end, inside a word)."""
    buf, lo, hi = bytearray(head), [], []
    for t in tokens:
        lo.append(len(buf))
        buf += t
        hi.append(len(buf))
        buf += gap
    values, ok = F.parse_ints(np.frombuffer(bytes(buf), dtype=np.uint8), np.array(lo), np.array(hi))
    for t, v, good in zip(tokens, values.tolist(), ok.tolist()):
        number = 1 <= len(t) <= 19 and all(48 <= c <= 57 for c in t) and int(t) < 2**63
        assert good == number, t
        if number:
            assert v == int(t)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 20).flatmap(
        lambda w: st.lists(
            st.one_of(
                st.integers(0, 10**w - 1).map(lambda v, w=w: b"%0*d" % (w, v)),
                st.binary(min_size=w, max_size=w),
            ),
            min_size=1,
            max_size=30,
        )
    ),
    st.binary(max_size=20),
    st.binary(max_size=3),
)
def test_parse_ints_of_numbers_of_one_width_read_what_int_reads(tokens, head, gap):
    """Spans all of one width (read with one mask per group of eight digits when none is
    within a word of the buffer's start) against int(): the same as any other spans."""
    buf, lo, hi = bytearray(head), [], []
    for t in tokens:
        lo.append(len(buf))
        buf += t
        hi.append(len(buf))
        buf += gap
    values, ok = F.parse_ints(np.frombuffer(bytes(buf), dtype=np.uint8), np.array(lo), np.array(hi))
    for t, v, good in zip(tokens, values.tolist(), ok.tolist()):
        number = 1 <= len(t) <= 19 and all(48 <= c <= 57 for c in t) and int(t) < 2**63
        assert good == number, t
        if number:
            assert v == int(t)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(frame(), min_size=1, max_size=40),
    st.booleans(),
    st.integers(0, 40),
    st.integers(0, 40),
    st.integers(0, 40),
)
def test_compact_keeps_every_span_of_the_messages_it_copies(frames, replies, i, j, cut):
    """compact() copies a run of messages out of the buffer they came in: each one's subject,
    header block and payload (and reply subject, when asked) read the same from the copy,
    also from a slice of it; the columns a chunk makes of either are the same."""
    data = b"".join(frames)
    f, _ = F.scan(data)
    msgs = f[np.flatnonzero(f.kind <= F.HMSG)]
    part = msgs[min(i, j) : max(i, j)]
    copied = compact(data, part, replies=replies)
    assert len(copied) == len(part)

    def spans(fr, lo, hi):
        return [data[x:y] for x, y in zip(getattr(fr, lo).tolist(), getattr(fr, hi).tolist())]

    want = {
        "subject": spans(part, "subj_lo", "subj_hi"),
        "headers": spans(part, "hdr_lo", "data_lo"),
        "data": spans(part, "data_lo", "data_hi"),
        "reply": spans(part, "reply_lo", "reply_hi") if replies else [b""] * len(part),
    }
    for what, values in want.items():
        assert [copied.span(what, k) for k in range(len(part))] == values
    lo, hi = sorted((cut % (len(part) + 1), (cut * 7) % (len(part) + 1)))
    assert [copied[lo:hi].span("data", k) for k in range(hi - lo)] == want["data"][lo:hi]
    whole = FrameChunk([(data, part[:lo]), (data, part[lo:])], part.sid, part.sid)
    mixed = FrameChunk([copied[:lo], (data, part[lo:])], part.sid, part.sid)
    for what in ("subject", "data", "headers"):
        (o1, b1), (o2, b2) = whole.column(what), mixed.column(what)
        assert o1.tolist() == o2.tolist() and bytes(b1) == bytes(b2)
    assert whole.headers == mixed.headers and whole.datas == mixed.datas == want["data"]


def test_compact_copies_spans_of_one_length_as_rows_and_others_through_a_mask():
    """Both ways of copying a run's spans (items of a window for spans of about one length,
    a mask over the buffer for the rest) give the same bytes, up to the buffer's last byte."""
    long_one = b"z" * 500
    for payloads in ([b"%05d" % i for i in range(50)], [b"%05d" % i if i != 7 else long_one for i in range(50)]):
        data = b"".join(b"MSG s.%d 1 r.%d %d\r\n%s\r\n" % (i, i, len(p), p) for i, p in enumerate(payloads))
        f, _ = F.scan(data)
        copied = compact(data, f, replies=True)
        assert FrameChunk([copied], f.sid, f.sid).datas == payloads
        assert FrameChunk([copied], f.sid, f.sid).replies == [b"r.%d" % i for i in range(50)]
        assert FrameChunk([copied], f.sid, f.sid).subjects == [b"s.%d" % i for i in range(50)]


def test_ack_fields_read_both_reply_subject_forms():
    replies = [b"$JS.ACK.S.C.2.17.5.1764139000000000001.0", b"$JS.ACK.dom.ACC.S.C.1.18.6.1764139000000000002.4.tok"]
    buf = b"".join(b"MSG a 1 %s 1\r\nx\r\n" % r for r in replies)
    f, _ = F.scan(buf)
    ack = ack_fields(buf, f)
    assert ack.sseq.tolist() == [17, 18]
    assert ack.cseq.tolist() == [5, 6]
    assert ack.time.tolist() == [1764139000000000001, 1764139000000000002]
    assert ack.last.tolist() == [True, False]
    chunk = FrameChunk([(buf, f)], ack.sseq, ack.time)
    assert chunk.subjects == [b"a", b"a"] and chunk.datas == [b"x", b"x"] and chunk.replies == replies
    assert chunk.headers == [None, None] and chunk.seqs == [17, 18]


ack_replies = st.one_of(
    st.builds(
        lambda st_, c, d, q, cq, t, p: b"$JS.ACK.%s.%s.%d.%d.%d.%d.%d" % (st_, c, d, q, cq, t, p),
        tokens.map(str.encode), tokens.map(str.encode), st.integers(1, 10**6), st.integers(1, 2**63 - 1),
        st.integers(1, 2**63 - 1), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1),
    ),
    st.builds(
        lambda dom, st_, c, q, cq, t, p, tail: b"$JS.ACK.%s.ACCHASH.%s.%s.1.%d.%d.%d.%d.%s"
        % (dom, st_, c, q, cq, t, p, tail),
        st.sampled_from([b"_", b"hub"]), tokens.map(str.encode), tokens.map(str.encode), st.integers(1, 10**12),
        st.integers(1, 10**12), st.integers(0, 2**63 - 1), st.integers(0, 10**9), st.sampled_from([b"r4nd", b"x.y"]),
    ),
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(ack_replies, st.binary(max_size=20)), min_size=1, max_size=30))
def test_ack_fields_read_what_ack_reply_parse_reads(deliveries):
    """The bulk reading of reply subjects (all v1, the fast way, or v1 and v2 mixed) against
    the one-at-a-time grammar, ack_reply.parse, on arbitrary deliveries in one buffer."""
    from jetspark.protocol import ack_reply

    buf = b"".join(b"MSG s 1 %s %d\r\n%s\r\n" % (r, len(d), d) for r, d in deliveries)
    f, end = F.scan(buf)
    assert end == len(buf) and len(f) == len(deliveries)
    ack = ack_fields(buf, f)
    want = [ack_reply.parse(r.decode()) for r, _ in deliveries]
    assert ack.sseq.tolist() == [w.stream_seq for w in want]
    assert ack.cseq.tolist() == [w.consumer_seq for w in want]
    assert ack.time.tolist() == [w.time_ns for w in want]
    assert ack.last.tolist() == [w.pending == 0 for w in want]


spoilers = st.sampled_from(
    [
        b"$JS.ACK.S.D.1.5.5.1764139000000000001.0",  # another consumer's (a prefix of another length)
        b"$JS.ACK.S.CC.1.5.5.1764139000000000001.0",  # another consumer's (a prefix of the same length)
        b"$JS.ACK.S.C.1.5.5.1764139000000000001.0.7",  # a token too many
        b"$JS.ACK.S.C.5.5.1764139000000000001.0",  # a token too few
        b"$JS.ACK.dom.ACCHASH.S.C.1.18.6.1764139000000000002.4.tok",  # the v2 form
        b"$JS.ACK.S.C.1.x5.5.1764139000000000001.0",  # a sequence that is no number
        b"$JS.ACK.S.C.1.5..1764139000000000001.0",  # an empty token
        b"_INBOX.abc",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 10**6), st.integers(1, 2**63 - 1), st.integers(1, 2**63 - 1),
                  st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.binary(max_size=12)),
        min_size=1, max_size=40,
    ),
    st.one_of(st.none(), st.tuples(st.integers(0, 40), spoilers)),
)  # fmt: skip
def test_ack_fields_of_one_consumer_read_what_ack_reply_parse_reads(deliveries, spoiled):
    """A run of one consumer's deliveries (the usual case, whose dots are looked for in the
    tails of its reply subjects only), maybe with one reply of another shape anywhere in it:
    the same numbers as ack_reply.parse, or the same refusal."""
    from jetspark.protocol import ack_reply
    from jetspark.protocol.deliveries import _one_consumer_dots

    replies = [b"$JS.ACK.S.C.%d.%d.%d.%d.%d" % r[:5] for r in deliveries]
    if spoiled is not None:
        at = spoiled[0] % len(replies)
        replies[at] = spoiled[1]
    buf = b"".join(b"MSG s 1 %s %d\r\n%s\r\n" % (r, len(d[5]), d[5]) for r, d in zip(replies, deliveries))
    f, end = F.scan(buf)
    assert end == len(buf) and len(f) == len(replies)
    a = np.frombuffer(buf, dtype=np.uint8)
    if spoiled is None:  # (the tails' way is taken, not only the general one)
        assert _one_consumer_dots(a, f.reply_lo, f.reply_hi) is not None
    else:  # (a reply of another shape, or another consumer's among them: the general way reads them)
        other_shape = spoiled[1].count(b".") != 8
        other_consumer = spoiled[1].split(b".")[:4] != [b"$JS", b"ACK", b"S", b"C"]
        if other_shape or other_consumer and len(replies) > 1:
            assert _one_consumer_dots(a, f.reply_lo, f.reply_hi) is None
    try:
        want = [ack_reply.parse(r.decode()) for r in replies]
    except ValueError:
        with pytest.raises(Exception, match="not a JetStream delivery reply subject"):
            ack_fields(buf, f)
        return
    ack = ack_fields(buf, f)
    assert ack.sseq.tolist() == [w.stream_seq for w in want]
    assert ack.cseq.tolist() == [w.consumer_seq for w in want]
    assert ack.time.tolist() == [w.time_ns for w in want]
    assert ack.last.tolist() == [w.pending == 0 for w in want]


def test_ack_fields_refuse_a_reply_subject_that_is_no_delivery():
    buf = b"MSG a 1 _INBOX.abc 1\r\nx\r\n"
    f, _ = F.scan(buf)
    with pytest.raises(Exception, match="not a JetStream delivery reply subject"):
        ack_fields(buf, f)


@settings(max_examples=200, deadline=None)
@given(
    st.datetimes(min_value=datetime.datetime(1700, 1, 1), max_value=datetime.datetime(2261, 12, 31)),
    st.integers(0, 9),
    st.integers(0, 999_999_999),
)
def test_rfc3339_ns_reads_the_servers_times_as_wire_does(when, digits, ns):
    from jetspark.protocol.deliveries import rfc3339_ns
    from jetspark.remote import wire

    frac = (b".%09d" % ns)[: 1 + digits] if digits else b""
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S").encode() + frac + b"Z"
    buf = b"x " + stamp + b" y"
    got, ok = rfc3339_ns(np.frombuffer(buf, dtype=np.uint8), np.array([2]), np.array([2 + len(stamp)]))
    assert ok.tolist() == [True]
    assert got.tolist() == [wire.time_to_ns(stamp.decode())]


def test_direct_fields_read_a_batch_of_direct_get_replies():
    from jetspark.protocol.deliveries import direct_fields
    from jetspark.remote.direct import strip_direct_headers
    from jetspark.remote.fastpath import frames_of

    blocks = [
        b"NATS/1.0\r\nOwn: 1\r\nNats-Stream: W\r\nNats-Subject: w.a\r\nNats-Sequence: 1\r\n"
        b"Nats-Time-Stamp: 2026-11-26T06:44:06.403389347Z\r\nNats-Num-Pending: 1\r\n\r\n",
        b"NATS/1.0\r\nNats-Stream: W\r\nNats-Subject: w.b\r\nNats-Sequence: 22\r\n"
        b"Nats-Time-Stamp: 2026-11-26T06:44:06Z\r\nNats-Num-Pending: 0\r\n\r\n",
        b"NATS/1.0\r\nNats-Stream: W\r\nNats-Subject: w.c\r\nNats-Sequence: 23\r\n"
        b"Nats-Time-Stamp: 2026-11-26T06:44:06+01:00\r\n\r\n",
        b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 2\r\n\r\n",
    ]
    buf, f = frames_of([(b"_INBOX.x", b"", b"data%d" % i, h) for i, h in enumerate(blocks)])
    d = direct_fields(buf, f)
    assert d.status.tolist() == [False, False, False, True]
    assert d.ok.tolist() == [True, True, False, True]  # (an offset time: read one by one, as before)
    for i in range(2):
        own, subject, seq, _ = strip_direct_headers(blocks[i])
        assert (buf[d.subj_lo[i] : d.subj_hi[i]], int(d.seq[i])) == (subject, seq)
        assert (buf[f.hdr_lo[i] : d.own_end[i]] + b"\r\n" if d.own_end[i] else None) == own
    assert d.time[1] - d.time[0] == -403389347


def test_a_large_message_in_many_small_reads_reads_like_nats_py():
    """A frame whose control line is in is waited for whole (FrameReader keeps its reads
    apart until then); frames before and after it, split anywhere, come out as nats-py's."""
    big = np.random.default_rng(3).bytes(300_000) + b"\r\nMSG a 1 3\r\n"
    data = (
        b"PING\r\nMSG s 1 r 2\r\nhi\r\n"
        + b"HMSG big.x 9 _INBOX.r 12 %d\r\nNATS/1.0\r\n\r\n%s\r\nMSG t 2 1\r\nx\r\n" % (12 + len(big), big)
    )
    reads = [data[i : i + 997] for i in range(0, len(data), 997)]
    assert our_events(reads) == nats_py_events(reads)
    events = our_events(reads)
    assert [e[0] for e in events] == ["ping", "msg", "msg", "msg"] and events[2][4] == big
