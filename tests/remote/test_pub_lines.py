"""jetspark/protocol/pub_lines.py: the PUB/HPUB lines of a batch built in bulk are byte for byte
the lines each message formatted on its own gives (``pub_lines.line``, which the writer used
for every row before), for any rows, sizes, subjects, msg ids and chunk boundaries."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetspark.protocol import headers as H
from jetspark.protocol.pub_lines import PubBatch, int_rows, join_rows, line

_NUMBERS = st.one_of(st.integers(0, 12), st.integers(0, 10**6), st.integers(0, 2**63 - 1))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_NUMBERS, _NUMBERS), max_size=40),
    st.lists(st.binary(max_size=4), min_size=1, max_size=3),
    st.binary(min_size=1, max_size=3).filter(lambda b: not b.endswith(b"\0")),
)
def test_int_rows_formats_as_python(values, pieces, last):
    pieces = [*pieces[:2], last] if len(pieces) >= 2 else [b"", pieces[0], last]
    cols = [np.array([v[0] for v in values], dtype=np.int64), np.array([v[1] for v in values], dtype=np.int64)]
    want = [pieces[0] + b"%d" % a + pieces[1] + b"%d" % b + pieces[2] for a, b in values]
    assert int_rows(pieces, cols) == want


def test_int_rows_refuses_what_it_cannot_hand_back():
    with pytest.raises(ValueError, match="last piece"):
        int_rows([b"", b"x\0"], [np.arange(3)])
    with pytest.raises(ValueError, match="one more piece"):
        int_rows([b"", b"x"], [np.arange(3), np.arange(3)])


_SUBJECTS = st.lists(
    st.binary(min_size=1, max_size=12).filter(lambda b: not any(c in b for c in b" \t\r\n")), min_size=1, max_size=4
)
_IDS = st.binary(min_size=1, max_size=10).filter(lambda b: b"\r" not in b and b"\n" not in b)


@st.composite
def batches(draw):
    subjects = draw(_SUBJECTS)
    n = draw(st.integers(1, 30))
    sid = np.array(draw(st.lists(st.integers(0, len(subjects) - 1), min_size=n, max_size=n)), dtype=np.int64)
    datas = draw(st.lists(st.binary(max_size=300), min_size=n, max_size=n))
    batch = PubBatch(subjects, sid, datas)
    kind = draw(st.sampled_from(["none", "gen", "ids", "blocks"]))
    if kind == "gen":
        prefix = draw(_IDS | st.just(b""))
        start = draw(_NUMBERS.filter(lambda s: s < 2**62))
        batch.generated_ids(prefix, start)
        blocks = [H._PREFIX + b"Nats-Msg-Id: " + prefix + b"%d\r\n\r\n" % (start + i) for i in range(n)]
    elif kind == "ids":
        ids = draw(st.lists(_IDS, min_size=n, max_size=n))
        batch.msg_ids(ids)
        blocks = [H._PREFIX + b"Nats-Msg-Id: " + x + b"\r\n\r\n" for x in ids]
    elif kind == "blocks":
        blocks = draw(st.lists(st.sampled_from([b"", H.encode({"A": "1"}), H.encode({"K": ["x", "y"]})]), min_size=n))
        blocks = blocks[:n]
        batch.header_blocks(blocks)
    else:
        blocks = [b""] * n
    return batch, [subjects[k] for k in sid.tolist()], datas, blocks


@settings(max_examples=300, deadline=None)
@given(batches(), st.data())
def test_pieces_join_to_the_lines_formatted_one_by_one(drawn, data):
    batch, subjects, datas, blocks = drawn
    n = batch.n
    rows = np.flatnonzero(np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool))
    prefix = data.draw(st.sampled_from([b"_INBOX.abc.", b"_INBOX.x%d%%."]))
    pieces = batch.pieces(rows, prefix)
    assert all(len(p) == len(rows) for p in pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=4)))
    got = b"".join(join_rows([p[a:b] for p in pieces], b - a) for a, b in zip([0, *cuts], [*cuts, len(rows)]))
    want = b"".join(line(subjects[i], b"%b%d" % (prefix, i), blocks[i], datas[i]) for i in rows.tolist())
    assert got == want
    for i in rows.tolist():  # (the public path's blocks, and the sizes the limits are checked on)
        assert batch.block(i) == blocks[i]
        assert batch.subject(i) == subjects[i]
        assert int(batch.hlen[i]) == len(blocks[i]) and int(batch.dlen[i]) == len(datas[i])


def test_line_is_the_protocol_line():
    assert line(b"a.b", b"_INBOX.x.7", b"", b"hi") == b"PUB a.b _INBOX.x.7 2\r\nhi\r\n"
    block = H.encode({H.MSG_ID: "m1"})
    assert line(b"a", b"r.0", block, b"") == b"HPUB a r.0 %d %d\r\n%b\r\n" % (len(block), len(block), block)


@pytest.mark.server
@pytest.mark.parametrize("layouts", [1, 32])
@pytest.mark.parametrize("ids", ["none", "column", "generated"])
def test_publish_batch_across_chunks_and_piece_blocks(js, name, monkeypatch, ids, layouts):
    # Tiny chunks (by rows and by bytes) and piece blocks, so that one batch crosses many of
    # both, its lines built by PubBatch.lines (32 layouts) or left to pieces (1); and rows
    # already stored, the duplicates of a batch sent again, answered in the same stream of acks.
    from jetspark.protocol import pub_lines
    from jetspark.remote import appends

    monkeypatch.setattr(appends, "PUBLISH_CHUNK", 3)
    monkeypatch.setattr(appends, "CHUNK_BYTES", 40)
    monkeypatch.setattr(appends, "PIECES_ROWS", 7)
    monkeypatch.setattr(pub_lines, "MAX_LAYOUTS", layouts)
    name = name("P")
    js.add_stream(name=name, subjects=[f"{name}.>"])
    n = 50
    cols = {
        "subject": [f"{name}.{'x' * (i % 4)}{i % 3}" for i in range(n)],
        "data": [b"d" * (i % 11) for i in range(n)],
    }
    if ids == "column":
        cols["msg_id"] = [f"m-{i}" for i in range(n)]
    extra = {"msg_id_prefix": "g-", "msg_id_start": 95} if ids == "generated" else {}
    ack = js.publish_batch(pa.table(cols), stream=name, **extra)
    assert ack.seqs.to_pylist() == list(range(1, n + 1)) and not any(ack.duplicate.to_pylist())
    for i in (0, 6, 7, 49):
        msg = js.get_msg(name, i + 1)
        assert (msg.subject, msg.data) == (cols["subject"][i], cols["data"][i])
        want = {"column": {"Nats-Msg-Id": f"m-{i}"}, "generated": {"Nats-Msg-Id": f"g-{95 + i}"}}.get(ids)
        assert msg.headers == want
    again = js.publish_batch(pa.table(cols), stream=name, **extra)
    if ids == "none":
        assert again.seqs.to_pylist() == list(range(n + 1, 2 * n + 1))
    else:
        assert again.seqs.to_pylist() == list(range(1, n + 1)) and all(again.duplicate.to_pylist())


def _reply(batch: PubBatch, prefix: bytes, verb: bytes, i: int) -> bytes:
    """Row i's reply subject as ``PubBatch.lines`` writes it (``reply_heads``' padding)."""
    heads, width = batch.reply_heads(prefix, verb)
    pad = heads[int(batch.sid[i])][len(verb) + len(batch.subject(i)) + 1 :]
    return pad + (b"%0*d" % (width, i) if width else b"%d" % i)


@settings(max_examples=300, deadline=None)
@given(batches(), st.data())
def test_lines_are_the_lines_formatted_one_by_one(drawn, data):
    batch, subjects, datas, blocks = drawn
    n = batch.n
    if data.draw(st.booleans()):  # (payloads of one length: one layout, never left to pieces)
        size = data.draw(st.integers(0, 40))
        datas = [bytes([i % 251]) * size for i in range(n)]
        batch.data = batch.data.of(datas)
        batch.dlen, batch._datas = batch.data.lens, datas
        one_length = True
    else:
        one_length = False
    rows = np.flatnonzero(np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool))
    prefix = data.draw(st.sampled_from([b"_INBOX.abc.", b"_INBOX.x%d%%."]))
    got = batch.lines(rows, prefix)
    if batch._blocks is not None or not len(rows):
        assert got is None
        return
    if got is None:
        assert not one_length
        return
    verb = b"PUB " if all(b == b"" for b in blocks) else b"HPUB "
    want = b"".join(line(subjects[i], _reply(batch, prefix, verb, i), blocks[i], datas[i]) for i in rows.tolist())
    assert got == want


def test_lines_pad_to_one_layout_and_leave_many_layouts_to_pieces(monkeypatch):
    from jetspark.protocol import pub_lines

    batch = PubBatch([b"a", b"bbbb"], np.array([0, 1, 1, 0]), [b"x", b"yy", b"z", b"w"])
    got = batch.lines(np.arange(4), b"_I.")
    # (every reply subject one length: the PubAcks that carry them back too)
    assert got == (b"PUB a    _I.0 1\r\nx\r\nPUB bbbb _I.1 2\r\nyy\r\nPUB bbbb _I.2 1\r\nz\r\nPUB a    _I.3 1\r\nw\r\n")
    big = PubBatch([b"a", b"bb"], np.array([0] * 11 + [1]), [b"x"] * 12)
    assert big.lines(np.array([1, 11]), b"_I.") == b"PUB a  _I.01 1\r\nx\r\nPUB bb _I.11 1\r\nx\r\n"
    wide = PubBatch([b"a", b"b" * 30], np.array([0, 1]), [b"x", b"y"])  # (more than MAX_SPACES: no padding)
    assert wide.lines(np.arange(2), b"_I.") == b"PUB a _I.0 1\r\nx\r\nPUB " + b"b" * 30 + b" _I.1 1\r\ny\r\n"
    monkeypatch.setattr(pub_lines, "MAX_LAYOUTS", 1)
    many = PubBatch([b"a"], np.zeros(3, dtype=np.int64), [b"x", b"yy", b"zzz"])
    assert many.lines(np.arange(3), b"_I.") is None and many.lines(np.arange(1), b"_I.") is None  # (remembered)


@pytest.mark.parametrize(
    "arr",
    [
        pa.array([b"ab", None, b"", b"cde"], pa.binary()),
        pa.array([b"zz", b"ab", None, b"", b"cde"], pa.large_binary()).slice(1),
        pa.chunked_array([pa.array(["ab", None]), pa.array(["", "cde"])]),
        pa.array(["xx", "ab", None, "", "cde"], pa.string()).slice(1),
    ],
)
def test_spans_read_arrow_arrays_in_place(arr):
    from jetspark.protocol.pub_lines import Spans

    spans = Spans.of(arr)
    assert spans.tolist() == [b"ab", b"", b"", b"cde"] and [spans.get(i) for i in range(4)] == spans.tolist()
    assert spans.lens.tolist() == [2, 0, 0, 3] and len(spans) == 4
    assert Spans.of([b"ab", b"", b"", b"cde"]).tolist() == spans.tolist() and Spans.of([]).tolist() == []
    with pytest.raises(TypeError, match="binary or string"):
        Spans.of(pa.array([1, 2]))
