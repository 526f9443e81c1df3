"""The direct-get replies' bulk reading (jetspark/remote/direct_frames.py) against nats-py's own
parser: reply runs as a connection receives them (cut into reads anywhere), framed by
``frames.FrameReader`` and read by ``reply_fields`` (the header blocks' line ends counted from
each control line's, ``Frames.ctl``, or searched for), then copied out by ``copy_out``: the
subject, sequence, time and payload nats-py's parser and header parsing give each message.
No server: pure functions on bytes."""

from __future__ import annotations

import asyncio

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.protocol.parser import Parser

from jetspark.errors import JetSparkError
from jetspark.protocol import frames as F
from jetspark.remote import direct, wire
from jetspark.remote.direct_frames import copy_out, reply_fields
from tests.remote.test_direct import _stamp

INBOX = "_INBOX.abc"

# Every character a subject token can hold (no whitespace, no ".", no wildcards), some beyond ASCII.
_SUBJECT_CHARS = [chr(c) for c in range(0x21, 0x7F) if chr(c) not in ".*>"] + ["é", "ß", "日", "🙂"]
subjects = st.lists(st.text(_SUBJECT_CHARS, min_size=1, max_size=8), min_size=1, max_size=4).map(".".join)


@st.composite
def stamps(draw) -> str:
    """The server's form of a time: 0 to 9 fraction digits, trailing zeros trimmed."""
    return _stamp(draw(st.integers(0, (1 << 62))), draw(st.integers(0, 9)))


# Headers of the message's own (names the server does not write: nats-py's dict keeps one value a name).
own_headers = st.one_of(
    st.none(),
    st.lists(
        st.tuples(
            st.sampled_from(["k", "Nats-Msg-Id", "x-y"]),
            st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12),
        ),
        min_size=1,
        max_size=3,
        unique_by=lambda kv: kv[0],
    ),
)


def _reply(stream: str, subject: str, seq: int, stamp: str, pending: int, own, data: bytes, req: int) -> bytes:
    block = b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in own or [])
    block += f"Nats-Stream: {stream}\r\nNats-Subject: {subject}\r\nNats-Sequence: {seq}\r\n".encode()
    block += (
        f"Nats-Time-Stamp: {stamp}\r\nNats-Num-Pending: {pending}\r\nNats-Last-Sequence: {seq - 1}\r\n\r\n".encode()
    )
    return b"HMSG %s.%d 1 %d %d\r\n%s%s\r\n" % (INBOX.encode(), req, len(block), len(block) + len(data), block, data)


def _status(status: bytes, lines: bytes, req: int) -> bytes:
    block = b"NATS/1.0 " + status + b"\r\n" + lines + b"\r\n"
    return b"HMSG %s.%d 1 %d %d\r\n%s\r\n" % (INBOX.encode(), req, len(block), len(block), block)


@st.composite
def answers(draw) -> tuple[str, list[bytes]]:
    """A window's answer: consecutive sequences from anywhere (widths crossing powers of ten,
    past int64), pending counting down across its own powers of ten, subjects of every legal
    character, payloads of one size (empty too) or of many, own headers, and statuses
    (end of batch, 404, 408) among them; the stream's name of several lengths."""
    stream = draw(st.sampled_from(["S", "WQD", "a-b_c", "a-much-longer-stream-name"]))
    seq = draw(st.one_of(st.integers(1, 10**6), st.sampled_from([9, 98, 999_999_990, 10**18 - 3, (1 << 63) - 4])))
    pending = draw(st.integers(0, 10**7))
    size = draw(st.one_of(st.none(), st.integers(0, 40)))
    same_subject = draw(st.one_of(st.none(), subjects))
    count = draw(st.integers(1, 40))
    frames = []
    for _ in range(count):
        what = draw(st.sampled_from(["msg"] * 8 + ["own", "status"]))
        req = draw(st.sampled_from([3, 3, 3, 4, 12]))
        if what == "status":
            status = draw(st.sampled_from([b"204 EOB", b"404 Message Not Found", b"408 Request Timeout"]))
            frames.append(_status(status, b"Nats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n" % (pending, seq), req))
            continue
        subject = same_subject or draw(subjects)
        data = draw(st.binary(min_size=size, max_size=size) if size is not None else st.binary(max_size=40))
        own = draw(own_headers) if what == "own" else None
        frames.append(_reply(stream, subject, seq, draw(stamps()), pending, own, data, req))
        seq += 1
        pending = max(pending - 1, 0)
    return stream, frames


def _nats_py(reads: list[bytes]) -> list[tuple]:
    """(reply subject, headers as nats-py's client reads them, payload) of every message, by
    nats-py's own parser and header parsing."""
    got: list[tuple] = []
    client = Client()

    class Recorder:
        async def _process_msg(self, sid, subject, reply, data, headers):
            hdr = await client._process_headers(bytes(headers)) if headers else None
            got.append((bytes(subject), hdr, bytes(data)))

    parser = Parser(Recorder())

    async def feed() -> None:
        for data in reads:
            await parser.parse(data)

    asyncio.run(feed())
    return got


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers(), st.lists(st.integers(0, 1 << 14), max_size=8))
def test_reply_fields_read_what_nats_py_reads_cut_anywhere(answer, cuts):
    stream, frames = answer
    reads = _cut(b"".join(frames), cuts)
    want = _nats_py(reads)
    reader = F.FrameReader()
    got: list[tuple] = []
    for data in reads:
        buf, f = reader.feed(data)
        if not len(f):
            continue
        assert f.ctl is not None and f.lines is not None
        # Each chained frame's control-line end, as an index of the line ends: what the header
        # block's lines are counted from.
        known = f.ctl >= 0
        assert np.array_equal(f.lines[f.ctl[known]], f.hdr_lo[known] - 1)
        d = reply_fields(buf, f, stream, len(INBOX) + 1)
        # The same without the control lines' ends (searched for) and without any line ends.
        cols = [getattr(f, c) for c in F.COLUMNS]
        for other in (F.Frames(*cols, lines=f.lines), F.Frames(*cols)):
            again = reply_fields(buf, other, stream, len(INBOX) + 1)
            for k in ("status", "ok", "req", "seq", "time", "subj_lo", "subj_hi", "own_end"):
                assert np.array_equal(getattr(d, k), getattr(again, k)), k
        keep = np.flatnonzero(d.ok & ~d.status)
        cbuf, cf = copy_out(buf, d.subj_lo[keep], d.subj_hi[keep], f.data_lo[keep], f.data_hi[keep])
        copied = bytes(cbuf)
        kept = {int(i): k for k, i in enumerate(keep)}
        for i in range(len(f)):
            if d.status[i]:
                got.append(("status", bytes(buf[f.hdr_lo[i] + 9 : f.hdr_lo[i] + 12])))
                continue
            if not d.ok[i]:  # (a sequence past int64: the read takes it one by one, and refuses it)
                got.append(("one by one", int(d.req[i])))
                continue
            k = kept[i]
            subject = copied[cf.subj_lo[k] : cf.subj_hi[k]]
            data = copied[cf.data_lo[k] : cf.data_hi[k]]
            own = buf[int(f.hdr_lo[i]) : int(d.own_end[i])] + b"\r\n" if d.own_end[i] else None
            got.append((int(d.req[i]), subject, int(d.seq[i]), int(d.time[i]), own, data))
    assert len(got) == len(want) == len(frames)
    for g, (reply_subject, hdr, data) in zip(got, want):
        if g[0] == "status":
            assert hdr is not None and hdr["Status"] == g[1].decode()
            continue
        req = int(reply_subject.rsplit(b".", 1)[1])
        if g[0] == "one by one":
            assert g[1] == req and int(hdr["Nats-Sequence"]) >= 1 << 63
            continue
        assert g[0] == req and g[5] == data
        assert g[1].decode() == hdr["Nats-Subject"] and g[2] == int(hdr["Nats-Sequence"])
        assert g[3] == wire.time_to_ns(hdr["Nats-Time-Stamp"])
        own = {k: v for k, v in hdr.items() if k not in _SERVER_LINES}
        # The message's own block, as the read keeps it, reads as nats-py reads those headers.
        assert (asyncio.run(Client()._process_headers(g[4])) if g[4] is not None else None) == (own or None)


_SERVER_LINES = {"Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Num-Pending"}
_SERVER_LINES.add("Nats-Last-Sequence")


_NAMES = ["Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Num-Pending", "Nats-Last-Sequence"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(range(6)),
    st.integers(0, 40),
    st.sampled_from(["flip", "drop", "twice", "swap"]),
    st.lists(st.tuples(subjects, st.integers(1, 10**9), stamps()), min_size=1, max_size=6),
    st.integers(0, 5),
)
def test_a_damaged_reply_is_never_read_as_another(line, at, how, messages, which):
    """Replies among good ones with one of the server's lines damaged (a byte of its name
    changed, the line left out, written twice, or swapped with the next): ``reply_fields``
    takes such a block only where the one-by-one reading (``strip_direct_headers``) reads the
    same subject, sequence and time from it; otherwise it is left for that reading (which
    raises), never served as data."""
    which %= len(messages)
    pieces, blocks = [], []
    for k, (subject, seq, stamp) in enumerate(messages):
        values = ["WQD", subject, str(seq), stamp, "0", str(seq - 1)]
        lines = [f"{n}: {v}\r\n" for n, v in zip(_NAMES, values)]
        if k == which:
            if how == "flip":
                name = _NAMES[line]
                j = at % len(name)
                lines[line] = name[:j] + chr(ord(name[j]) ^ 1) + lines[line][j + 1 :]
            elif how == "drop":
                del lines[line]
            elif how == "twice":
                lines.insert(line, lines[line])
            else:
                j = min(line, 4)
                lines[j], lines[j + 1] = lines[j + 1], lines[j]
        block = ("NATS/1.0\r\n" + "".join(lines) + "\r\n").encode()
        blocks.append(block)
        pieces.append(b"HMSG %s.3 1 %d %d\r\n%sxyz\r\n" % (INBOX.encode(), len(block), len(block) + 3, block))
    buf = b"".join(pieces)
    f, end = F.scan(buf)
    assert end == len(buf) and len(f) == len(messages)
    d = reply_fields(buf, f, "WQD", len(INBOX) + 1)
    for i, block in enumerate(blocks):
        try:
            _, subject, seq, stamp = direct.strip_direct_headers(block)
            one = (subject, seq, wire.time_to_ns(stamp.decode()))
        except (JetSparkError, ValueError):
            one = None
        if i != which:
            assert d.ok[i] and one is not None
        if d.ok[i]:
            assert one == (bytes(buf[d.subj_lo[i] : d.subj_hi[i]]), int(d.seq[i]), int(d.time[i]))
