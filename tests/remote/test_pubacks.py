"""jetspark/protocol/pubacks.py: the PubAcks of a batch append read in bulk say what
``json.loads`` of each answer says (its seq, whether it is a duplicate), for any run of
answers the server can send (plain, duplicates, a JetStream domain, errors, statuses with
headers, sequences up to and past int64, answers to rows not in the batch or to subjects
that are no row), split into reads at arbitrary points; answers in the server's own forms
are all taken by the bulk reading (the rest go to ``appends._slow_puback``, one by one)."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jetspark.protocol import frames as F
from jetspark.protocol.pubacks import read_pubacks, template_of

INBOX = b"_INBOX.k3Jq9."
ROWS = 50

_NAMES = st.text(st.characters(codec="utf-8", exclude_characters=' .*>\\"\x7f'), min_size=1, max_size=8).filter(
    lambda s: all(ord(c) >= 0x20 for c in s)
)


@st.composite
def answer(draw, stream: str, domain: str | None):
    """(reply subject, header block, payload, taken): one answer to a batch append's row;
    ``taken`` when it is in a form the server writes for a stored message."""
    kind = draw(st.sampled_from(["plain", "plain", "plain", "dup", "error", "status", "headers", "odd"]))
    row = draw(st.one_of(st.integers(0, ROWS - 1), st.integers(ROWS, 10**6)))
    width = draw(st.sampled_from([0, 0, 6, 19]))  # (padded row numbers, as PubBatch.lines writes them)
    token = b"%0*d" % (width, row) if width else b"%d" % row
    if draw(st.integers(0, 20)) == 0:
        token = draw(st.sampled_from([b"x1", b"", b"1.2", b"99999999999999999999"]))
    seq = draw(st.one_of(st.integers(1, 10**6), st.integers(2**62, 2**63 - 1), st.integers(2**63, 2**64 - 1)))
    head = f'{{"stream":{json.dumps(stream, ensure_ascii=False)},'.encode()
    if domain is not None:
        head += f' "domain":{json.dumps(domain, ensure_ascii=False)}, '.encode()
    hdr = b""
    if kind == "plain":
        data = head + b'"seq":%d}' % seq
    elif kind == "dup":
        data = head + b'"seq":%d%s' % (seq, draw(st.sampled_from([b',"duplicate": true}', b',"duplicate":true}'])))
    elif kind == "error":
        code = draw(st.sampled_from([10071, 10077, 10054, 10039]))
        err = {"code": 400 if code != 10077 else 503, "err_code": code, "description": "refused"}
        data = json.dumps({"error": err, "stream": stream, "seq": 0}).encode()
    elif kind == "status":
        hdr, data = b"NATS/1.0 503\r\n\r\n", b""
    elif kind == "headers":  # (a plain answer behind a header block: no form the server writes)
        hdr, data = b"NATS/1.0\r\nX: y\r\n\r\n", head + b'"seq":%d}' % seq
    else:
        data = draw(
            st.sampled_from(
                [
                    head + b'"seq":%d} ' % seq,
                    head + b'"seq": %d}' % seq,
                    head + b'"seq":0%d}' % seq,
                    head + b'"seq":%d,"val":"7"}' % seq,
                    head + b'"seq":%d,"duplicate": false}' % seq,
                    head + b'"seq":-%d}' % seq,
                    b'{"seq":%d,"stream":"S"}' % seq,
                    b"",
                    b"{}",
                ]
            )
        )
    taken = kind in ("plain", "dup") and seq < 2**63 and token.isdigit() and len(token) <= 19
    return INBOX + token, hdr, data, taken


def _frame(subject: bytes, hdr: bytes, data: bytes) -> bytes:
    if hdr:
        return b"HMSG %s 7 %d %d\r\n%s%s\r\n" % (subject, len(hdr), len(hdr) + len(data), hdr, data)
    return b"MSG %s 7 %d\r\n%s\r\n" % (subject, len(data), data)


def reference(subject: bytes, hdr: bytes, data: bytes):
    """What reading the answer on its own says: (row, seq, duplicate), (row, None) when it
    says no seq, None when it is not a PubAck to a row of the batch."""
    token = subject[len(INBOX) :]
    if not (token.isdigit() and len(token) <= 19) or int(token) >= ROWS:
        return None
    if hdr:
        return int(token), None
    try:
        doc = json.loads(data)
    except ValueError:
        return int(token), None
    if not isinstance(doc, dict) or "error" in doc or type(doc.get("seq")) is not int:
        return int(token), None
    return int(token), doc["seq"], doc.get("duplicate") is True


@st.composite
def runs(draw):
    stream = draw(_NAMES)
    domain = draw(st.one_of(st.none(), _NAMES))
    answers = draw(st.lists(answer(stream, domain), min_size=1, max_size=30))
    data = b"".join(_frame(*a[:3]) for a in answers)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    return answers, [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_bulk_pubacks_read_what_json_reads_split_anywhere(drawn):
    answers, reads = drawn
    reader = F.FrameReader()
    template = None
    seen = []  # (frame index in the stream, row, seq, dup, plain)
    base = 0
    for chunk in reads:  # (each read framed and read on its own, the template carried on, as appends does)
        buf, f = reader.feed(chunk)
        at, rows, seqs, dups, plain, template = read_pubacks(buf, f, len(INBOX), ROWS, template)
        seen += [
            (base + int(k), int(r), int(s), bool(d), bool(p)) for k, r, s, d, p in zip(at, rows, seqs, dups, plain)
        ]
        base += len(f)
    want = {i: reference(*a[:3]) for i, a in enumerate(answers)}
    assert [k for k, *_ in seen] == [i for i, w in want.items() if w is not None]
    for k, row, seq, dup, plain in seen:
        ref = want[k]
        assert ref is not None and ref[0] == row
        if plain:
            assert ref[1:] == (seq, dup), answers[k]
        assert plain == answers[k][3], answers[k]  # (every answer the server writes so is taken, no other)


def test_a_run_without_a_template_leaves_every_answer_for_a_closer_look():
    buf = b"".join(
        _frame(INBOX + b"%d" % i, b"", d)
        for i, d in enumerate(
            [b'{"error":{"code":503,"err_code":10077,"description":"x"},"stream":"S","seq":0}', b"{}"]
        )
    )
    f, _ = F.scan(buf)
    at, rows, _, _, plain, template = read_pubacks(buf, f, len(INBOX), ROWS)
    assert rows.tolist() == [0, 1] and not plain.any() and template is None


def test_a_template_of_another_stream_is_learnt_again():
    buf = _frame(INBOX + b"3", b"", b'{"stream":"B","seq":9}')
    f, _ = F.scan(buf)
    *_, seqs, _, plain, template = read_pubacks(buf, f, len(INBOX), ROWS, b'{"stream":"A","seq":')
    assert plain.tolist() == [True] and seqs.tolist() == [9] and template == b'{"stream":"B","seq":'


def test_template_of_takes_the_servers_forms_only():
    assert template_of(b'{"stream":"S","seq":1}') == b'{"stream":"S","seq":'
    assert template_of(b'{"stream":"S", "domain":"hub", "seq":1}') == b'{"stream":"S", "domain":"hub", "seq":'
    for data in (b'{"stream":"S\\"x","seq":1}', b'{"stream":"S","val":"1","seq":1}', b'{"stream":"\xff","seq":1}'):
        assert template_of(data) is None


def test_many_pubacks_in_one_run_are_read_at_once():
    rows = np.random.default_rng(3).permutation(5000)
    buf = b"".join(_frame(INBOX + b"%d" % r, b"", b'{"stream":"S","seq":%d}' % (r + 10)) for r in rows)
    f, _ = F.scan(buf)
    at, got, seqs, dups, plain, _ = read_pubacks(buf, f, len(INBOX), 5000)
    assert plain.all() and not dups.any() and (got == rows).all() and (seqs == rows + 10).all()


def test_answers_that_are_not_plain_pubacks_are_left_for_a_closer_look():
    """An error (which can carry a seq), a 503 status, a row past the batch, a subject that is
    not a row, another layout: left for the one-by-one reading, or not taken at all; a domain
    answer is read in bulk when it is the run's template (publish_async reads its PubAcks
    with the same reader)."""
    acks = [
        (b"_I.x.0", b"", b'{"stream":"S","seq":17}'),
        (b"_I.x.1", b"", b'{"stream":"S","seq":18,"duplicate": true}'),
        (
            b"_I.x.2",
            b"",
            b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"S","seq":0}',
        ),
        (b"_I.x.3", b"NATS/1.0 503\r\n\r\n", b""),
        (b"_I.x.9", b"", b'{"stream":"S","seq":1}'),  # no such row
        (b"_I.x.zz", b"", b'{"stream":"S","seq":2}'),  # not ours
        (b"_I.x.4", b"", b'{"stream":"S","seq":5} '),  # another layout
    ]

    def run(answers):
        return b"".join(
            b"HMSG %s 1 %d %d\r\n%s%s\r\n" % (s, len(h), len(h) + len(d), h, d)
            if h
            else b"MSG %s 1 %d\r\n%s\r\n" % (s, len(d), d)
            for s, h, d in answers
        )

    buf = run(acks)
    f, _ = F.scan(buf)
    at, rows, seqs, dups, plain, template = read_pubacks(buf, f, len(b"_I.x."), 5)
    assert at.tolist() == [0, 1, 2, 3, 6] and rows.tolist() == [0, 1, 2, 3, 4]
    assert plain.tolist() == [True, True, False, False, False]
    assert seqs[:2].tolist() == [17, 18] and dups[:2].tolist() == [False, True]
    assert template == b'{"stream":"S","seq":'
    buf = run([(b"_I.x.0", b"", b'{"stream":"S", "domain":"d", "seq":18,"duplicate": true}')])
    f, _ = F.scan(buf)
    _, _, seqs, dups, plain, template = read_pubacks(buf, f, len(b"_I.x."), 5, template)
    assert (plain.tolist(), seqs.tolist(), dups.tolist()) == ([True], [18], [True])
