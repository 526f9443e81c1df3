"""jetspark/protocol/ack_frames.py: PubAck runs framed by their shape give exactly the frames
``frames.scan`` gives, and ``read_pubacks`` reads from them what it reads from those, for any
stream a connection can receive while a batch append awaits its PubAcks: plain and duplicate
PubAcks (with a JetStream domain or not) to row numbers padded or not and crossing powers of
ten, sequences up to 2**64, errors, 503 statuses, PubAcks behind headers, other
subscriptions' messages, PING, PONG, +OK, -ERR and INFO between them, split into reads at
arbitrary points; ``AckReader`` standing in for a connection's reader and handing back to it
at any point keeps every frame."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jetspark.protocol import ack_frames as A
from jetspark.protocol import frames as F
from jetspark.protocol.pubacks import read_pubacks

INBOX = b"_INBOX.k3Jq9."


@st.composite
def pubacks(draw):
    """A run of answers to rows from a random start, as the server writes them (mostly PubAcks
    of one stream, numbers crossing powers of ten), and some other frames between them."""
    stream = draw(st.sampled_from(["S", "ORDERS", "P123"]))
    head = b'{"stream":"%s",' % stream.encode()
    if draw(st.booleans()):
        head += b' "domain":"hub", '
    width = draw(st.sampled_from([0, 0, 2, 5, 18, 19]))
    row = draw(st.sampled_from([0, 7, 95, 998, 99_990]))
    seq = draw(st.sampled_from([1, 9, 95, 99_999_990, 2**31 - 3, 10**17 - 2, 10**18 - 3, 2**63 - 3, 2**64 - 3]))
    sid = draw(st.sampled_from([b"1", b"7", b"12"]))
    inbox = draw(st.sampled_from([INBOX, INBOX, b"a.", b"_I.x."]))  # (short subjects: other subscriptions')
    out = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["plain"] * 12 + ["dup", "dup2", "error", "503", "hdr", "other", "ping", "info"]))
        token = b"%0*d" % (width, row) if width else b"%d" % row
        subject = inbox + token
        if kind in ("plain", "dup", "dup2", "hdr"):
            tail = {"plain": b"}", "hdr": b"}", "dup": b',"duplicate": true}', "dup2": b',"duplicate":true}'}[kind]
            data = head + b'"seq":%d' % seq + tail
            if kind == "hdr":
                hdr = b"NATS/1.0\r\nX: y\r\n\r\n"
                out.append(b"HMSG %s %s %d %d\r\n%s%s\r\n" % (subject, sid, len(hdr), len(hdr) + len(data), hdr, data))
            else:
                out.append(b"MSG %s %s %d\r\n%s\r\n" % (subject, sid, len(data), data))
            seq += 1
        elif kind == "error":
            data = json.dumps(
                {"error": {"code": 400, "err_code": 10071, "description": "x"}, "stream": stream}
            ).encode()
            out.append(b"MSG %s %s %d\r\n%s\r\n" % (subject, sid, len(data), data))
        elif kind == "503":
            out.append(b"HMSG %s %s 16 16\r\nNATS/1.0 503\r\n\r\n\r\n" % (subject, sid))
        elif kind == "other":
            out.append(b"MSG other.subject 3 reply.to 5\r\nhello\r\n")
        elif kind == "ping":
            out.append(draw(st.sampled_from([b"PING\r\n", b"PONG\r\n", b"+OK\r\n", b"-ERR 'slow consumer'\r\n"])))
        else:
            out.append(b'INFO {"server_id":"x","max_payload":1048576}\r\n')
        row += 1
    return b"".join(out)


def _columns(f: F.Frames) -> list[list[int]]:
    return [getattr(f, c).tolist() for c in F.COLUMNS]


def _messages(buf: bytes, f: F.Frames) -> list[tuple]:
    """Each frame's contents (not its place in its buffer)."""
    cols = zip(*_columns(f))
    return [
        (k, s, buf[sl:sh], buf[rl:rh], buf[hl:dl], buf[dl:dh]) if k <= F.HMSG else (k, buf[sl:sh])
        for k, s, sl, sh, rl, rh, hl, dl, dh in cols
    ]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pubacks(), st.data())
def test_scan_frames_what_frames_scan_frames(stream, data):
    cut = data.draw(st.integers(0, len(stream)))
    for buf in (stream, stream[:cut]):
        want, want_end = F.scan(buf)
        got, end = A.scan(buf, 0, {})
        assert end == want_end and _columns(got) == _columns(want)
        # read_pubacks takes the runs' rows and sequences as they are: what it reads from the frames
        for template in (None, b'{"stream":"S","seq":', b'{"stream":"other","seq":'):
            for rows in (10**6, 100):
                g = read_pubacks(buf, got, len(INBOX), rows, template)
                w = read_pubacks(buf, F.Frames(*(getattr(want, c) for c in F.COLUMNS)), len(INBOX), rows, template)
                plain = w[4]
                assert g[0].tolist() == w[0].tolist() and g[1].tolist() == w[1].tolist()
                assert g[4].tolist() == plain.tolist() and g[5] == w[5]
                assert g[2][plain].tolist() == w[2][plain].tolist() and g[3][plain].tolist() == w[3][plain].tolist()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(pubacks(), min_size=1, max_size=4), st.data())
def test_the_reader_keeps_every_frame_across_reads_and_hand_overs(streams, data):
    stream = b"".join(streams)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    reads = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    plain = F.FrameReader()
    want = [m for r in reads for m in _messages(*plain.feed(r))]

    class Feed:  # (a fastpath.FrameFeed's reader slot)
        reader = F.FrameReader()

    feed = Feed()
    got: list = []
    framer = None
    for r in reads:
        if data.draw(st.booleans()):  # stand in, or hand back, before this read
            if framer is None:
                framer = A.stand_in(feed)
            else:
                A.stand_down(feed, framer)
                framer = None
        got += _messages(*feed.reader.feed(r))
    assert got == want


def _ack(row: bytes, seq: int) -> bytes:
    data = b'{"stream":"S","seq":%d}' % seq
    return b"MSG %s%s 1 %d\r\n%s\r\n" % (INBOX, row, len(data), data)


def test_a_run_is_framed_by_its_shape_and_learnt_again_where_it_changes():
    frames = [_ack(b"%03d" % i, 9 + i) for i in range(6)]
    buf = b"".join(frames) + b"PING\r\n" + frames[0] + frames[1][:30]
    f, end = A.scan(buf, 0, {})
    assert isinstance(f, A.AckFrames) and end == len(buf) - 30
    runs = [(r.first, r.n, r.rows.tolist(), r.seqs.tolist()) for r in f.runs]
    assert runs == [(0, 1, [0], [9]), (1, 5, [1, 2, 3, 4, 5], [10, 11, 12, 13, 14])]
    assert f.kind.tolist() == [F.MSG] * 6 + [F.PING, F.MSG]  # (after the PING: frames.scan)


def test_the_reader_gives_a_large_message_to_the_reader_it_stands_in_for():
    class Feed:
        reader = F.FrameReader()

    feed = Feed()
    framer = A.stand_in(feed)
    assert A.stand_in(feed) is framer and framer.users == 2
    big = b"MSG a.b 1 5000\r\n" + b"x" * 5000 + b"\r\n"
    ack = _ack(b"1", 1)
    assert len(feed.reader.feed(ack)[1]) == 1  # (the reader it stood in for held nothing: its turn now)
    assert len(feed.reader.feed(big[:3000])[1]) == 0
    buf, f = feed.reader.feed([big[3000:], ack])
    assert _messages(buf, f) == [
        (F.MSG, 1, b"a.b", b"", b"", b"x" * 5000),
        (F.MSG, 1, INBOX + b"1", b"", b"", ack[-24:-2]),
    ]
    A.stand_down(feed, framer)
    assert feed.reader is framer
    feed.reader.feed(ack[:10])
    A.stand_down(feed, framer)
    assert isinstance(feed.reader, F.FrameReader)
    assert _messages(*feed.reader.feed(ack[10:])) == [(F.MSG, 1, INBOX + b"1", b"", b"", ack[-24:-2])]


def test_a_short_subject_is_framed_as_frames_scan_frames_it():
    buf = b'MSG a.1 1 22\r\n{"stream":"S","seq":1}\r\nMSG ab.12 1 22\r\n{"stream":"S","seq":2}\r\n'
    got, end = A.scan(buf, 0, {})
    want, want_end = F.scan(buf)
    assert end == want_end == len(buf) and _columns(got) == _columns(want)


@pytest.mark.parametrize("bad", [b"MSG a 1 x\r\n", b"NOPE\r\n", b"MSG %s1 1 2\r\n{}\r\nGARBAGE\r\n" % INBOX])
def test_what_frames_scan_refuses_is_refused(bad):
    with pytest.raises(F.FrameError):
        F.scan(bad)
    with pytest.raises(F.FrameError):
        A.scan(bad, 0, {})


def test_numbers_of_every_width():
    vals = np.array([0, 7, 10**8 - 1, 10**8, 10**17 - 1, 10**18 - 1], dtype=np.int64)
    for width in (8, 9, 16, 17, 18):
        ok_vals = vals[vals < 10**width]
        buf = b"x" * 9 + b"".join(b"%0*d|" % (width, v) for v in ok_vals.tolist())
        got, ok = A._numbers(buf, 9, width, width + 1, len(ok_vals))
        assert ok.all() and got.tolist() == ok_vals.tolist()
    got, ok = A._numbers(b"x" * 9 + b"12a4|1234|", 9, 4, 5, 2)
    assert ok.tolist() == [False, True] and got[1] == 1234
