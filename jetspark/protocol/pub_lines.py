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

and every piece of the chunk is joined with one ``bytes.join``.  The bytes are exactly
the ones ``%`` formatting gives (tests/remote/test_pub_lines.py compares the two on
Hypothesis batches).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

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
    ``<prefix><start + row>`` or given), or any block per row."""

    def __init__(self, subjects: list[bytes], sid: np.ndarray, datas: list[bytes]) -> None:
        self.subjects = subjects
        self.sid = np.asarray(sid, dtype=np.int64)
        self.datas = datas
        self.n = len(datas)
        self.dlen = np.fromiter(map(len, datas), dtype=np.int64, count=self.n)
        self.hlen = np.zeros(self.n, dtype=np.int64)
        self._gen: Optional[tuple[bytes, int]] = None
        self._ids: Optional[list[bytes]] = None
        self._blocks: Optional[list[bytes]] = None

    def generated_ids(self, prefix: bytes, start: int) -> None:
        """Row i's block: ``Nats-Msg-Id: <prefix><start + i>``."""
        self._gen = (prefix, start)
        self.hlen = len(MSG_ID_HEAD) + len(prefix) + digits(start + np.arange(self.n, dtype=np.int64)) + 4

    def msg_ids(self, ids: list[bytes]) -> None:
        """Row i's block: ``Nats-Msg-Id: <ids[i]>`` (as the header codec writes it: no CR or LF
        in an id, nothing to strip at its ends)."""
        self._ids = ids
        self.hlen = len(MSG_ID_HEAD) + 4 + np.fromiter(map(len, ids), dtype=np.int64, count=self.n)

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
            return MSG_ID_HEAD + self._ids[i] + b"\r\n\r\n"
        return self._blocks[i] if self._blocks is not None else b""

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
        ids = self._ids if every else list(map(self._ids.__getitem__, rows.tolist()))
        nums = int_rows([b"", b" ", b" ", b"\r\n" + MSG_ID_HEAD], [rows, hlen, hlen + dlen])
        return [head, nums, ids, [b"\r\n\r\n"] * m, datas, crlf]


MSG_ID_HEAD = b"NATS/1.0\r\nNats-Msg-Id: "
