"""Batched direct-get replies read in bulk: pure, no I/O (``direct.DirectRead``'s parser).

A message the server sends in answer to ``$JS.API.DIRECT.GET.<stream>`` with
``batch`` has a header block of the message's own headers (often none) and the
server's, appended in a fixed order::

    NATS/1.0\\r\\nNats-Stream: S\\r\\nNats-Subject: a.b\\r\\nNats-Sequence: 7\\r\\n
    Nats-Time-Stamp: 2026-11-24T01:49:36.660992921Z\\r\\nNats-Num-Pending: 3\\r\\n
    Nats-Last-Sequence: 6\\r\\n\\r\\n

``reply_fields`` reads a run of such frames with array operations.  A header
value holds no ``\r``, so the server's six lines end at the block's last six line
ends, whatever headers of the message's own come before them: the line ends are
found once for the whole buffer, each line's name is checked where it must be (8
bytes to a word), and the values lie between.  A block of another layout (a server
that adds other lines) is read by ``protocol.deliveries.direct_fields``, which
searches the whole block.  tests/remote/test_direct.py checks the reading against
``direct.strip_direct_headers`` on arbitrary blocks, own headers imitating the
server's among them.
"""

from __future__ import annotations

import datetime as _dt
from typing import Optional

import numpy as np

from jetspark.protocol.deliveries import DirectFields, direct_fields, joined_spans, rfc3339_ns
from jetspark.protocol.frames import HMSG, Frames, byte_windows, eight_digits, parse_ints, windows

__all__ = ["ReplyFields", "copy_out", "reply_fields"]

_STREAM = b"\r\nNats-Stream: "
_SUBJECT = b"\r\nNats-Subject: "
_SEQUENCE = b"\r\nNats-Sequence: "
_STAMP = b"\r\nNats-Time-Stamp: "
_PENDING = b"\r\nNats-Num-Pending: "
_LAST = b"\r\nNats-Last-Sequence: "
_ZEROS = 0x3030303030303030
_ZEROS64 = np.uint64(_ZEROS)
_EPOCH_DAYS = _dt.date(1970, 1, 1).toordinal()


class ReplyFields(DirectFields):
    """``DirectFields`` of a run, plus which request each frame answers (``req``: the
    number after the reply prefix, -1 if none)."""

    __slots__ = ("req",)
    req: np.ndarray


class _Words:
    """The 8 bytes at every position of a buffer as one little-endian uint64 (no copy)."""

    def __init__(self, buf: bytes) -> None:
        self.top = len(buf) - 8
        self.w = np.ndarray((max(self.top + 1, 0),), dtype="<u8", buffer=buf, strides=(1,)) if self.top >= 0 else None

    def at(self, pos: np.ndarray) -> np.ndarray:
        """The words at ``pos`` (>= 0; past the last whole word: the last one)."""
        if self.w is None:
            return np.zeros(len(pos), dtype=np.uint64)
        return self.w[np.minimum(pos, self.top)]

    def equal(self, pos: np.ndarray, pattern: bytes) -> np.ndarray:
        """Whether the 8 bytes at each ``pos`` are ``pattern``."""
        return (pos <= self.top) & (self.at(pos) == np.uint64(int.from_bytes(pattern[:8], "little")))


def reply_fields(buf: bytes, f: Frames, stream: str, prefix_len: int) -> ReplyFields:
    """The direct-get replies ``f`` of ``buf`` (to reply subjects ``<prefix><request number>``,
    ``prefix_len`` bytes of prefix) of stream ``stream``: see ``DirectFields``."""
    a = np.frombuffer(buf, dtype=np.uint8)
    n = len(f)
    hdr_lo, data_lo = f.hdr_lo, f.data_lo
    words = _Words(buf)
    req = _requests(buf, words, f.subj_lo + prefix_len, f.subj_hi)
    status = (data_lo - hdr_lo > 9) & (a[np.minimum(hdr_lo + 8, max(len(a) - 1, 0))] == 32)
    # The fast reading: the server's lines are the block's last six, each ending at one of the
    # block's last line ends (a header value holds no "\r" nor "\n"), whatever headers of its
    # own the message has before them.  The line ends are the scan's (``Frames.lines``), each
    # line's "\r" the byte before its "\n" (checked with the names below).
    nl = f.lines if f.lines is not None else np.flatnonzero(a == 10)
    e = _blank_lines(nl, f, data_lo)
    ok = ~status & (e >= 7)
    c = nl[np.maximum(e[None, :] - np.arange(8)[:, None], 0)] - 1 if len(nl) else np.zeros((8, n), dtype=np.int64)
    # The lines in their order, each told by its name (its first 8 bytes for the lines whose
    # values are not read), the stream's line by its length.  The stream's line with the
    # subject's name after it, and the lines whose values are read, are taken as rows of bytes
    # from their "\r" on, one copy each: the names and values of a row are then read at fixed
    # columns of it, without going back to the buffer.
    ok &= (c[0] == data_lo - 2) & (c[1] == data_lo - 4) & (c[7] >= hdr_lo + 8)
    ok &= (a[np.maximum(c[0], 0)] == 13) & (a[np.maximum(c[1], 0)] == 13)
    stream_line = len(_STREAM) + len(stream.encode())  # (its value is not read: its length only)
    head = windows(a, c[7], stream_line + len(_SUBJECT))  # (the stream's line and the subject's name: one row)
    ok &= (c[6] - c[7] == stream_line) & _names(head, _STREAM) & _names(head, _SUBJECT, stream_line)
    ok &= words.equal(c[3], _PENDING) & words.equal(c[2], _LAST)
    subj_lo, subj_hi = c[6] + len(_SUBJECT), c[5]
    ok &= subj_hi > subj_lo
    rows = windows(a, c[5], _SEQ_ROW)
    ok &= _names(rows, _SEQUENCE)
    seq, good = _row_number(rows, len(_SEQUENCE), c[4] - c[5] - len(_SEQUENCE), ok)
    ok &= good
    rows = windows(a, c[4], _STAMP_ROW)
    ok &= _names(rows, _STAMP)
    time, good = _stamps(rows, len(_STAMP), c[3] - c[4] - len(_STAMP), ok)
    ok &= good
    own_end = np.where(c[7] > hdr_lo + 8, c[7] + 2, 0)
    slow = np.flatnonzero(~ok & ~status)
    if len(slow):  # the general reading, for the blocks the fast one did not take (that hold the server's lines)
        slow = np.array([i for i in slow.tolist() if _has_lines(buf, int(hdr_lo[i]), int(data_lo[i]))], dtype=np.int64)
    if len(slow):
        d = direct_fields(buf, f[slow])
        subj_lo[slow], subj_hi[slow], seq[slow], time[slow] = d.subj_lo, d.subj_hi, d.seq, d.time
        own_end[slow] = d.own_end
        ok[slow] = d.ok
    out = ReplyFields(status=status, subj_lo=subj_lo, subj_hi=subj_hi, seq=seq, time=time, own_end=own_end,
                      ok=ok | status)  # fmt: skip
    out.req = req
    return out


def _blank_lines(nl: np.ndarray, f: Frames, data_lo: np.ndarray) -> np.ndarray:
    """The index in ``nl`` of each header block's last line end (the blank line's, at most the
    last one).  A block of the server's six lines alone ends 8 line ends after its control line
    (``f.ctl``, from ``scan``): that one is taken where it is the blank line's, the others
    searched for."""
    if f.ctl is None or f.lines is not nl or not len(nl):
        return np.searchsorted(nl, data_lo) - 1
    e = f.ctl + 8
    at = np.minimum(e, len(nl) - 1)
    hit = (f.ctl >= 0) & (nl[at] == data_lo - 1)
    if hit.all():
        return e
    miss = ~hit
    e[miss] = np.searchsorted(nl, data_lo[miss]) - 1
    return e


def _requests(buf: bytes, words: _Words, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The request numbers ``buf[lo:hi]`` (-1: not one).  The frames of a run answer few
    requests, one after another: a number (of up to 8 digits, the 8 bytes ending with it
    telling it apart, the reply prefix before it being the same in every frame) is read
    where those 8 bytes or its length change from the frame before."""
    n = len(lo)
    if not n:
        return np.zeros(0, dtype=np.int64)
    lens = hi - lo
    if int(lens.max()) > 8 or int(lens.min()) < 1 or int(hi.min()) < 8:
        req, good = parse_ints(np.frombuffer(buf, dtype=np.uint8), lo, np.maximum(hi, lo))
        return np.where(good, req, -1)
    last = words.at(hi - 8)
    new = np.ones(n, dtype=bool)
    new[1:] = (last[1:] != last[:-1]) | (lens[1:] != lens[:-1])
    lead = np.flatnonzero(new)
    spans = [buf[i:j] for i, j in zip(lo[lead].tolist(), hi[lead].tolist())]
    values = np.array([int(t) if t.isdigit() else -1 for t in spans], dtype=np.int64)
    return np.repeat(values, np.diff(np.append(lead, n)))  # (each value to its frames: few runs)


def _has_lines(buf: bytes, lo: int, hi: int) -> bool:
    """Whether ``buf[lo:hi]`` has the server's four lines, in their order."""
    at = lo
    for line in (b"\r\nNats-Stream: ", _SUBJECT, _SEQUENCE, _STAMP):
        at = buf.find(line, at, hi)
        if at < 0:
            return False
    return buf.find(b"\r\n", at + len(_STAMP), hi) >= 0


# Row widths (from a line's "\r") of the lines whose values are read: the name and the
# longest value the rows read (19 digits; a time of 30 bytes), as whole 8-byte words.
_SEQ_ROW = 48
_STAMP_ROW = 56
_U64 = np.uint64
_POW10 = np.array([10**k for k in range(20)], dtype=np.uint64)


def _word_column(rows: np.ndarray, col: int) -> np.ndarray:
    """The 8 bytes at column ``col`` of every row of ``rows`` as one little-endian uint64 (no copy)."""
    if not len(rows):
        return np.zeros(0, dtype=np.uint64)
    return np.ndarray((len(rows),), dtype="<u8", buffer=rows, offset=col, strides=(rows.shape[1],))


def _names(rows: np.ndarray, name: bytes, col: int = 0) -> np.ndarray:
    """Whether each row has ``name`` at column ``col`` (checked as 8-byte words, the last overlapping)."""
    ok = np.ones(len(rows), dtype=bool)
    for off in (*range(0, len(name) - 8, 8), len(name) - 8):
        ok &= _word_column(rows, col + off) == _U64(int.from_bytes(name[off : off + 8], "little"))
    return ok


def _row_number(
    rows: np.ndarray, col: int, lens: np.ndarray, taken: Optional[np.ndarray] = None
) -> tuple[np.ndarray, np.ndarray]:
    """The decimal numbers of ``lens`` digits (1 to 19) at column ``col`` of the rows, and
    whether each is one: each group of up to 8 digits read as one word, moved to the word's
    end with "0"s before it (leading zeros change nothing).  Rows not ``taken`` (refused
    already, their numbers unused: a run's end-of-batch status) may be read at another width."""
    some = np.flatnonzero(taken)[:1] if taken is not None else np.zeros(min(len(lens), 1), dtype=np.int64)
    width = int(lens[some[0]]) if len(some) else 0
    if 1 <= width <= 19 and col + width <= rows.shape[1]:
        same = lens == width
        if (same if taken is None else same | ~taken).all():
            return _same_width_number(rows, col, width)
    ok = (lens >= 1) & (lens <= 19) & (col + lens <= rows.shape[1])
    value = np.zeros(len(rows), dtype=np.uint64)
    for k in range(3):
        have = np.minimum(np.maximum(lens - 8 * k, 0), 8)
        if not have.any():
            break
        missing = (8 - have).astype(np.uint64) * _U64(4)
        w = (_word_column(rows, col + 8 * k) << missing) << missing  # (twice: a shift by 64 is no shift)
        w |= ~((~_U64(0) << missing) << missing) & _ZEROS64
        d, good = eight_digits(w)
        ok &= good
        value = value * _POW10[have] + d
    ok &= value <= _U64((1 << 63) - 1)
    return value.view(np.int64), ok


def _same_width_number(rows: np.ndarray, col: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """``_row_number`` of numbers all ``width`` digits long (a run's sequences mostly are): each
    group's shift and fill are one number for all rows, not one per row."""
    value, ok = _NO_NUMBERS, _NO_NUMBERS
    for k in range((width + 7) // 8):
        have = min(width - 8 * k, 8)
        w = _word_column(rows, col + 8 * k)
        if have < 8:
            w = (w << _U64(8 * (8 - have))) | _U64(_ZEROS & ((1 << (8 * (8 - have))) - 1))
        d, good = eight_digits(w)
        ok = good if k == 0 else ok & good
        value = d if k == 0 else value * _POW10[have] + d
    if width == 19:  # (fewer digits cannot pass int64)
        ok &= value <= _U64((1 << 63) - 1)
    return value.view(np.int64), ok


_NO_NUMBERS = np.zeros(0, dtype=np.uint64)


def _stamps(rows: np.ndarray, col: int, lens: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, ...]:
    """The server's times at column ``col`` of the rows, ``lens`` bytes each
    (``2026-11-24T01:49:36.660992921Z``, the fraction's trailing zeros left out) -> ns, and
    whether each was one.  Messages stored together share their second: a row whose first 19
    bytes differ from the row before's is read whole, the others only their fraction (its
    digits 8 at a time, as one word)."""
    n = len(rows)
    time = np.zeros(n, dtype=np.int64)
    if not n:
        return time, ok
    width = rows.shape[1]
    digits = np.minimum(np.maximum(lens - 21, 0), 9)  # of the fraction (up to 9 of a good time)
    end = np.minimum(np.maximum(col + lens - 1, 0), width - 1)
    good = ok & (lens >= 20) & (lens <= 30) & (rows.reshape(-1)[np.arange(0, n * width, width) + end] == ord("Z"))
    good &= np.where(digits > 0, rows[:, col + 19] == ord("."), lens == 20)
    # The fraction's first 8 digits, left-aligned (missing ones 0), then the 9th.
    mask = _FRACTION_MASKS[digits]
    x, digits_ok = eight_digits((_word_column(rows, col + 20) & mask) | (_ZEROS64 & ~mask))
    good &= digits_ok
    ninth = rows[:, col + 28].astype(np.int64) - 48
    good &= (digits < 9) | ((ninth >= 0) & (ninth <= 9))
    frac = x.astype(np.int64) * 10 + np.where(digits >= 9, ninth, 0)
    # The date and second (the 19 bytes before the "."): read where they change.
    h0, h1 = _word_column(rows, col), _word_column(rows, col + 8)
    h2 = _word_column(rows, col + 11)
    first = np.ones(n, dtype=bool)
    first[1:] = (h0[1:] != h0[:-1]) | (h1[1:] != h1[:-1]) | (h2[1:] != h2[:-1]) | ~good[1:] | ~good[:-1]
    lead = np.flatnonzero(first)
    if len(lead) <= 8:  # (the usual few: one by one costs less than the array reading's passes)
        second = [_second_ns(rows[i, col : col + 19].tobytes()) for i in lead.tolist()]
        read = np.array([s is not None for s in second], dtype=bool)
        base = np.array([s or 0 for s in second], dtype=np.int64)
    else:
        flat = rows.reshape(-1)
        at = lead * rows.shape[1] + col
        whole, read = rfc3339_ns(flat, at, at + lens[lead])
        base = whole - frac[lead]
    runs = np.diff(np.append(lead, n))  # (the rows of each second: few runs)
    return np.repeat(base, runs) + frac, good & np.repeat(read, runs)


# The bytes of the word after a time's "." that hold its fraction's first digits, by the
# fraction's number of digits (0 to 9).
_FRACTION_MASKS = np.array([(1 << (8 * min(d, 8))) - 1 for d in range(10)], dtype=np.uint64)


def _second_ns(head: bytes) -> Optional[int]:
    """``YYYY-MM-DDTHH:MM:SS`` (UTC) -> ns since the epoch, None if it is not one."""
    if len(head) != 19 or head[4:5] + head[7:8] + head[10:11] + head[13:14] + head[16:17] != b"--T::":
        return None
    parts = (head[0:4], head[5:7], head[8:10], head[11:13], head[14:16], head[17:19])
    if not all(p.isdigit() for p in parts):
        return None
    y, mo, d, h, mi, sec = map(int, parts)
    try:
        days = _dt.date(y, mo, d).toordinal() - _EPOCH_DAYS
    except ValueError:
        return None
    if h > 23 or mi > 59 or sec > 60 or not 1678 <= y <= 2261:  # (ns in an int64)
        return None
    return ((days * 24 + h) * 60 + mi) * 60 * 1_000_000_000 + sec * 1_000_000_000


def copy_out(
    buf: bytes, subj_lo: np.ndarray, subj_hi: np.ndarray, data_lo: np.ndarray, data_hi: np.ndarray
) -> tuple[np.ndarray, Frames]:
    """The subjects ``buf[subj_lo:subj_hi]`` and payloads ``buf[data_lo:data_hi]`` of messages
    copied into a buffer of their own (all subjects, then all payloads), and their frames in
    it (no header blocks, no reply subjects).  Done while ``buf`` is still in the CPU's caches,
    it lets ``buf`` go, and a chunk's columns are then plain slices of the copies."""
    a = np.frombuffer(buf, dtype=np.uint8)
    n = len(subj_lo)
    lens = np.concatenate((subj_hi - subj_lo, data_hi - data_lo))
    offsets = np.zeros(2 * n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    s_total = int(offsets[n])
    body = np.empty(int(offsets[-1]), dtype=np.uint8)
    if s_total:  # (short spans: one gather of their bytes, each at its place in buf less its place in body)
        at = np.repeat(subj_lo - offsets[:n], lens[:n])
        at += np.arange(s_total)
        np.take(a, at, out=body[:s_total])
    width = int(lens[n]) if n else 0
    if width and (lens[n:] == width).all() and int(data_lo.max()) + width <= len(a):
        body[s_total:] = byte_windows(a, width)[data_lo].view(np.uint8)  # (payloads of one size: one item each)
    elif n:
        body[s_total:] = joined_spans(a, data_lo, data_hi)[1]
    zero = np.zeros(n, dtype=np.int64)
    lo = offsets[n : 2 * n]
    frames = Frames(np.full(n, HMSG), zero, offsets[:n], offsets[1 : n + 1], zero, zero, lo, lo, offsets[n + 1 :])
    return body, frames


def pending_zero(hdr: Optional[bytes]) -> bool:
    """Whether a header block says nothing more is stored after it (``Nats-Num-Pending: 0``)."""
    return hdr is not None and b"\r\nNats-Num-Pending: 0\r\n" in hdr
