"""The ``PUB``/``HPUB`` lines of a batch of messages, built in bulk: pure, no I/O.

A batch append writes, for every row, ``PUB <subject> <reply> <size>\\r\\n<payload>\\r\\n``
(``HPUB <subject> <reply> <header size> <total size>\\r\\n<headers><payload>\\r\\n`` with a
header block).  Formatting each line with ``%`` costs about as much as the server takes to
store the message, so the lines are cut into the pieces that differ by row:

- the head up to the reply's row number (``PUB <subject> <inbox>.``), one per distinct
  subject, picked per row from a short list;
- the numbers of the line (row, sizes, a generated msg id), written by ``int_rows`` for a
  whole run of rows at once with array arithmetic;
- the payload and header block as they are;

and every piece of the chunk is joined with one ``bytes.join`` (``pieces``, ``join_rows``).
When no row has a header block of its own, ``PubBatch.lines`` goes further: the rows of a
chunk whose pieces all have one width (one layout; the row numbers zero-padded to one
width, a shorter subject followed by more spaces, so that subjects of different lengths
share one) are written as one 2-D byte array, a column
range per piece, payloads and msg ids copied from the table's Arrow buffers, so no Python
object is made per row.  The bytes are exactly the ones ``%`` formatting gives, with the
reply subjects each path writes (tests/remote/test_pub_lines.py compares them on
Hypothesis batches).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from jetspark.protocol.frames import byte_windows

__all__ = ["MSG_ID_HEAD", "PubBatch", "digits", "int_rows", "join_rows", "line"]

_POWERS = 10 ** np.arange(19, dtype=np.int64)


def digits(values: np.ndarray) -> np.ndarray:
    """How many decimal digits each of ``values`` (non-negative int64) has (0 has one)."""
    return np.maximum(np.searchsorted(_POWERS, values, side="right"), 1).astype(np.int64)


def int_rows(pieces: Sequence[bytes], columns: Sequence[np.ndarray]) -> list[bytes]:
    """For every row i: ``pieces[0] + str(columns[0][i]) + pieces[1] + ... + pieces[-1]`` as
    bytes (len(pieces) == len(columns) + 1; values non-negative int64).

    Rows with the same digit counts in every column have the same layout: each such group
    is written as one 2-D byte array, the constant pieces broadcast and the digits computed
    column by column; the groups land in one array of fixed-width byte strings padded with
    NULs, which ``tolist`` hands back unpadded (so the last piece must end with another byte)."""
    if len(pieces) != len(columns) + 1:
        raise ValueError("int_rows takes one more piece than columns")
    if not pieces[-1] or pieces[-1].endswith(b"\0"):
        raise ValueError("int_rows: the last piece must end with a byte other than NUL")
    cols = [np.asarray(c, dtype=np.int64) for c in columns]
    n = len(cols[0]) if cols else 0
    if n == 0:
        return []
    widths = [digits(c) for c in cols]
    key = np.zeros(n, dtype=np.int64)
    for w in widths:
        key = key * 20 + w
    fixed = sum(len(p) for p in pieces)
    total = fixed + np.sum(widths, axis=0)
    out = np.zeros(n, dtype=f"S{int(total.max())}")
    uniq = key[:1] if key.min() == key.max() else np.unique(key)
    for k in uniq.tolist():
        idx = None if len(uniq) == 1 else np.flatnonzero(key == k)
        group = [c if idx is None else c[idx] for c in cols]
        ds = []
        for _ in cols:  # (the key, read back: the digit count of each column, last first)
            ds.append(k % 20)
            k //= 20
        ds.reverse()
        rows = np.empty((len(group[0]), fixed + sum(ds)), dtype=np.uint8)
        at = 0
        for j, piece in enumerate(pieces):
            if piece:
                rows[:, at : at + len(piece)] = np.frombuffer(piece, dtype=np.uint8)
                at += len(piece)
            if j < len(group):
                v = group[j]
                for p in range(at + ds[j] - 1, at - 1, -1):  # (a subtraction is cheaper than a %)
                    q = v // 10
                    rows[:, p] = v - q * 10 + 48
                    v = q
                at += ds[j]
        block = rows.view(f"S{rows.shape[1]}").ravel()
        if idx is None:
            out[:] = block
        else:
            out[idx] = block
    return out.tolist()


def join_rows(columns: Sequence[Sequence[bytes]], n: int) -> bytes:
    """``columns[0][0] + columns[1][0] + ... + columns[0][1] + ...``: every row's pieces in
    order (each column ``n`` long), joined once."""
    parts: list = [None] * (n * len(columns))
    for j, col in enumerate(columns):
        parts[j :: len(columns)] = col
    return b"".join(parts)


def line(subject: bytes, reply: bytes, block: bytes, data: bytes) -> bytes:
    """One message's lines, formatted on their own: ``publish_async``'s, and the reference ``PubBatch`` is held to."""
    if block:
        return b"HPUB %b %b %d %d\r\n%b%b\r\n" % (subject, reply, len(block), len(block) + len(data), block, data)
    return b"PUB %b %b %d\r\n%b\r\n" % (subject, reply, len(data), data)


class PubBatch:
    """The rows of a batch append: distinct subjects and each row's index into them, payloads,
    and the rows' header blocks, either none, a ``Nats-Msg-Id`` each (generated as
    ``<prefix><start + row>`` or given), or any block per row.

    Payloads (and given msg ids) are a list of bytes or an Arrow binary array, which is read
    in place (``Spans``): ``lines`` copies them into the protocol lines without a Python
    object per row."""

    def __init__(self, subjects: list[bytes], sid: np.ndarray, datas) -> None:
        self.subjects = subjects
        self.sid = np.asarray(sid, dtype=np.int64)
        self.data = Spans.of(datas)
        self.n = len(self.data)
        self.dlen = self.data.lens
        self.hlen = np.zeros(self.n, dtype=np.int64)
        self._gen: Optional[tuple[bytes, int]] = None
        self._ids: Optional[Spans] = None
        self._blocks: Optional[list[bytes]] = None
        self._datas: Optional[list[bytes]] = datas if isinstance(datas, list) else None
        self._many = False  # a chunk had too many layouts for ``lines``
        self._heads: Optional[tuple[bytes, Spans, int]] = None  # (verb + prefix, reply_heads' for them)

    @property
    def datas(self) -> list[bytes]:
        """The payloads as bytes, one per row (made on first use: the row-by-row paths')."""
        if self._datas is None:
            self._datas = self.data.tolist()
        return self._datas

    def generated_ids(self, prefix: bytes, start: int) -> None:
        """Row i's block: ``Nats-Msg-Id: <prefix><start + i>``."""
        self._gen = (prefix, start)
        self.hlen = len(MSG_ID_HEAD) + len(prefix) + digits(start + np.arange(self.n, dtype=np.int64)) + 4

    def msg_ids(self, ids) -> None:
        """Row i's block: ``Nats-Msg-Id: <ids[i]>`` (as the header codec writes it: no CR or LF
        in an id, nothing to strip at its ends); ``ids`` a list of bytes or an Arrow array."""
        self._ids = Spans.of(ids)
        self.hlen = len(MSG_ID_HEAD) + 4 + self._ids.lens

    def header_blocks(self, blocks: list[bytes]) -> None:
        """Row i's block: ``blocks[i]`` (b"": none)."""
        self._blocks = blocks
        self.hlen = np.fromiter(map(len, blocks), dtype=np.int64, count=self.n)

    def subject(self, i: int) -> bytes:
        return self.subjects[int(self.sid[i])]

    def block(self, i: int) -> bytes:
        if self._gen is not None:
            return MSG_ID_HEAD + self._gen[0] + b"%d\r\n\r\n" % (self._gen[1] + i)
        if self._ids is not None:
            return MSG_ID_HEAD + self._ids.get(i) + b"\r\n\r\n"
        return self._blocks[i] if self._blocks is not None else b""

    def reply_heads(self, prefix: bytes, verb: bytes) -> tuple[list[bytes], int]:
        """Each subject's line start up to its row number, ``<verb><subject> <prefix>``, and the
        width of the row numbers after it: the numbers zero-padded to one width, and a shorter
        subject followed by as many more spaces as it is shorter (the protocol reads a run of
        spaces as one), so that every subject's start has one length and a chunk's lines
        share a layout (``lines``), and every reply subject, which the server's PubAck carries
        back, has one length too (``protocol.ack_frames`` frames a run of PubAcks of one
        length by their shape); subjects whose lengths differ by more than ``MAX_SPACES``
        have no padding (width 0: each number its own digits)."""
        slen = np.fromiter(map(len, self.subjects), dtype=np.int64, count=len(self.subjects))
        dn = int(digits(np.array([max(self.n - 1, 0)], dtype=np.int64))[0])
        top = int(slen.max())
        if top - int(slen.min()) > MAX_SPACES:
            return [verb + s + b" " + prefix for s in self.subjects], 0
        return [verb + s + b" " * (1 + top - len(s)) + prefix for s in self.subjects], dn

    def lines(self, rows: np.ndarray, prefix: bytes) -> Optional[bytes]:
        """The lines of ``rows`` (ascending row numbers) joined, each with reply subject
        ``<prefix><row>`` (the row as ``reply_heads`` pads it), written into one byte array
        per group of rows with one layout (the same width of every piece) instead of a Python
        object per piece; None when a row has a header block of its own, or the rows have too
        many layouts (payloads of many lengths): ``pieces`` and ``join_rows`` then."""
        rows = np.asarray(rows, dtype=np.int64)
        m = len(rows)
        if self._blocks is not None or m == 0 or self._many:
            return None
        plain = self._gen is None and self._ids is None
        verb = b"PUB " if plain else b"HPUB "
        if self._heads is None or self._heads[0] != verb + prefix:
            heads, width = self.reply_heads(prefix, verb)
            self._heads = (verb + prefix, Spans.of(heads), width)
        _, heads_at, width = self._heads
        dlen = self.dlen[rows]
        segs: list = [heads_at.at(self.sid[rows]), (rows, np.full(m, width) if width else digits(rows))]
        if plain:
            segs += [b" ", (dlen, digits(dlen)), b"\r\n", self.data.at(rows), b"\r\n"]
        else:
            hlen = self.hlen[rows]
            segs += [b" ", (hlen, digits(hlen)), b" ", (hlen + dlen, digits(hlen + dlen)), b"\r\n" + MSG_ID_HEAD]
            if self._gen is not None:
                ids = self._gen[1] + rows
                segs += [self._gen[0], (ids, digits(ids))]
            else:
                assert self._ids is not None
                segs.append(self._ids.at(rows))
            segs += [b"\r\n\r\n", self.data.at(rows), b"\r\n"]
        out = layout(segs, m)
        self._many = out is None  # (payloads of many lengths: the next chunks likely too)
        return out

    def pieces(self, rows: np.ndarray, prefix: bytes) -> list[list[bytes]]:
        """The lines of ``rows`` (ascending row numbers), each with reply subject
        ``<prefix><row>``, as columns of pieces: ``join_rows`` of any slice of them is those
        rows' lines, exactly as ``line`` formats them."""
        rows = np.asarray(rows, dtype=np.int64)
        m = len(rows)
        every = m == self.n
        datas = self.datas if every else list(map(self.datas.__getitem__, rows.tolist()))
        if self._blocks is not None:
            blocks = self._blocks
            return [[line(self.subject(i), b"%b%d" % (prefix, i), blocks[i], self.datas[i]) for i in rows.tolist()]]
        crlf = [b"\r\n"] * m
        verb = b"PUB " if self._gen is None and self._ids is None else b"HPUB "
        heads = [verb + s + b" " + prefix for s in self.subjects]
        head = list(map(heads.__getitem__, self.sid[rows].tolist()))
        dlen = self.dlen[rows]
        if self._gen is None and self._ids is None:
            return [head, int_rows([b"", b" ", b"\r\n"], [rows, dlen]), datas, crlf]
        hlen = self.hlen[rows]
        if self._gen is not None:
            gen_prefix, start = self._gen
            nums = int_rows(
                [b"", b" ", b" ", b"\r\n" + MSG_ID_HEAD + gen_prefix, b"\r\n\r\n"],
                [rows, hlen, hlen + dlen, start + rows],
            )
            return [head, nums, datas, crlf]
        assert self._ids is not None
        all_ids = self._ids.tolist()
        ids = all_ids if every else list(map(all_ids.__getitem__, rows.tolist()))
        nums = int_rows([b"", b" ", b" ", b"\r\n" + MSG_ID_HEAD], [rows, hlen, hlen + dlen])
        return [head, nums, ids, [b"\r\n\r\n"] * m, datas, crlf]


MSG_ID_HEAD = b"NATS/1.0\r\nNats-Msg-Id: "
# The most spaces ``reply_heads`` adds after a subject (bytes on the wire for every row).
MAX_SPACES = 16


class Spans:
    """Byte strings as one buffer and their offsets (string i is ``values[offsets[i]:offsets[i + 1]]``):
    an Arrow binary or string array read in place, or a list of bytes joined once."""

    __slots__ = ("offsets", "values", "lens", "_list")

    def __init__(self, offsets: np.ndarray, values: np.ndarray, as_list: Optional[list[bytes]] = None) -> None:
        self.offsets = offsets
        self.values = values
        self.lens = offsets[1:] - offsets[:-1]
        self._list = as_list

    @staticmethod
    def of(items) -> "Spans":
        if isinstance(items, Spans):
            return items
        if isinstance(items, (list, tuple)):
            items = list(items)
            offsets = np.zeros(len(items) + 1, dtype=np.int64)
            np.cumsum(np.fromiter(map(len, items), dtype=np.int64, count=len(items)), out=offsets[1:])
            return Spans(offsets, np.frombuffer(b"".join(items), dtype=np.uint8), items)
        import pyarrow as pa
        import pyarrow.compute as pc

        arr = items.combine_chunks() if isinstance(items, pa.ChunkedArray) else items
        if arr.null_count:  # (a null row is an empty one; its slot's bytes need not be empty)
            arr = pc.fill_null(arr, b"" if pa.types.is_binary(arr.type) else "")
        if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
            width = np.int64
        elif pa.types.is_binary(arr.type) or pa.types.is_string(arr.type):
            width = np.int32
        else:
            raise TypeError(f"Spans: a binary or string array, not {arr.type}")
        bufs = arr.buffers()
        offsets = np.frombuffer(bufs[1], dtype=width)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
        values = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, dtype=np.uint8)
        return Spans(offsets, values)

    def __len__(self) -> int:
        return len(self.lens)

    def at(self, index: np.ndarray) -> tuple["Spans", np.ndarray]:
        """A ``layout`` piece: string ``index[r]`` on row r."""
        return self, np.asarray(index, dtype=np.int64)

    def get(self, i: int) -> bytes:
        return self.values[int(self.offsets[i]) : int(self.offsets[i + 1])].tobytes()

    def tolist(self) -> list[bytes]:
        if self._list is None:
            raw = self.values.tobytes()
            offs = self.offsets.tolist()
            self._list = [raw[a:b] for a, b in zip(offs, offs[1:])]
        return self._list


# How many layouts a chunk of lines may have before ``lines`` leaves it to ``pieces``: each
# costs a few array calls per piece, a row a Python object per piece.
MAX_LAYOUTS = 32


def layout(segs: list, m: int) -> Optional[bytes]:
    """``m`` rows, each the concatenation of ``segs`` in order, joined: a segment is bytes (the
    same on every row), ``(values, widths)`` (row r's int64 ``values[r] >= 0`` in decimal,
    zero-padded to ``widths[r]`` digits, at least its own) or ``(spans, index)`` (row r's
    string ``spans[index[r]]``).  Rows of one layout are written as one 2-D array, piece by
    piece; None past ``MAX_LAYOUTS`` layouts."""
    segs = [_constant(s) for s in segs]
    var = [s for s in segs if not isinstance(s, bytes)]
    widths = [s[0].lens[s[1]] if isinstance(s[0], Spans) else s[1] for s in var]
    ranges = [(int(w.min()), int(w.max())) for w in widths]
    fixed = sum(len(s) for s in segs if isinstance(s, bytes))
    total = fixed + sum(widths) if widths else np.full(m, fixed, dtype=np.int64)
    if all(lo == hi for lo, hi in ranges):
        groups: list = [(None, 0)]
    else:
        key = np.zeros(m, dtype=np.int64)
        room = 1
        for w, (_, hi) in zip(widths, ranges):
            room *= hi + 1
            if room >= 1 << 62:
                return None
            key = key * (hi + 1) + w
        uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
        if len(uniq) > MAX_LAYOUTS:
            return None
        order = np.argsort(inv, kind="stable")
        bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
        groups = [(order[bounds[g] : bounds[g + 1]], int(first[g])) for g in range(len(uniq))]
    width_max = int(total.max())
    same = int(total.min()) == width_max
    out = None
    for idx, r in groups:
        rows = np.empty((m if idx is None else len(idx), int(total[r])), dtype=np.uint8)
        at = 0
        k = 0
        for s in segs:
            if isinstance(s, bytes):
                if s:
                    rows[:, at : at + len(s)] = np.frombuffer(s, dtype=np.uint8)
                    at += len(s)
                continue
            w = int(widths[k][r])
            k += 1
            if isinstance(s[0], Spans):
                spans, index = s[0], s[1] if idx is None else s[1][idx]
                if w:
                    starts = spans.offsets[index]
                    begin = int(starts[0])
                    if (np.diff(starts) == w).all():  # (strings one after the other, as a chunk's payloads: in place)
                        rows[:, at : at + w] = spans.values[begin : begin + len(starts) * w].reshape(-1, w)
                    else:
                        rows[:, at : at + w] = byte_windows(spans.values, w)[starts].view(np.uint8).reshape(-1, w)
            else:
                v = s[0] if idx is None else s[0][idx]
                for p in range(at + w - 1, at - 1, -1):  # (a subtraction is cheaper than a %)
                    q = v // 10
                    rows[:, p] = v - q * 10 + 48
                    v = q
            at += w
        if idx is None:
            out = rows
        else:
            if out is None:
                out = (np.empty if same else np.zeros)((m, width_max), dtype=np.uint8)
            out[idx, : rows.shape[1]] = rows
    assert out is not None
    if same:
        return out.tobytes()
    # Rows of other lengths: each row's bytes, its tail of NULs dropped (every line ends with "\n").
    return b"".join(out.view(f"S{width_max}").ravel().tolist())


def _constant(seg):
    """A ``layout`` segment of numbers that are all one value, of one width (the payload sizes of
    a table of one payload length), as the bytes it writes on every row; others as they are."""
    if isinstance(seg, bytes) or isinstance(seg[0], Spans):
        return seg
    values, widths = seg
    if not len(values) or values.min() != values.max() or widths.min() != widths.max():
        return seg
    return b"%0*d" % (int(widths[0]), int(values[0]))
