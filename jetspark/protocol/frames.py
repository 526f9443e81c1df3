"""What a NATS server sends a client, split into frames in bulk: pure, no I/O.

``scan(buf)`` finds every whole frame in ``buf`` (the bytes a connection
received, any number of frames, the last one possibly cut short) and returns
them as ``Frames``: NumPy arrays of positions into ``buf`` (subject, reply
subject, header block, payload) and numbers (kind, sid), plus where the
first frame not yet whole begins.  Nothing is copied out of ``buf``.

Runs of ``MSG``/``HMSG`` frames, nearly everything a bulk read receives, are
framed with array operations over the whole buffer: every ``MSG ``/``HMSG ``
right after a line end is a candidate frame start, each candidate's control
line is read with vector arithmetic, and a run is accepted as far as each
frame ends exactly where the next candidate begins (a payload that happens
to hold ``\\r\\nMSG `` breaks the chain there, and the frame after it is
framed again from its true start).  Anything else (``PING``, ``PONG``,
``+OK``, ``-ERR``, ``INFO``, a control line spaced unusually) is framed one
at a time with regular expressions that accept what nats-py's own parser
accepts (``nats.protocol.parser``); tests/remote/test_frames.py feeds both
the same bytes split at arbitrary points and compares.

``FrameReader`` keeps the unfinished tail between reads.
"""

from __future__ import annotations

import re
from typing import Optional

import numpy as np

from jetspark.errors import JetSparkError

__all__ = [
    "COLUMNS",
    "ERR",
    "HMSG",
    "INFO",
    "MSG",
    "OK",
    "PING",
    "PONG",
    "FrameError",
    "FrameReader",
    "Frames",
    "scan",
    "parse_ints",
    "eight_digits",
]

MSG, HMSG, PING, PONG, OK, ERR, INFO = 1, 2, 3, 4, 5, 6, 7

# nats-py waits for more bytes while a line without its end stays under this; past it, or a
# whole line it does not know, is a protocol error.
MAX_CONTROL_LINE = 4096

_MSG = re.compile(rb"MSG\s+(\S+)\s+(\S+)\s+((\S+)[^\S\r\n]+)?(\d+)\r\n")
_HMSG = re.compile(rb"HMSG\s+(\S+)\s+(\S+)\s+((\S+)[^\S\r\n]+)?(\d+)\s+(\d+)\r\n")
_OK = re.compile(rb"\+OK\s*\r\n")
_ERR = re.compile(rb"-ERR\s+('.+')?\r\n")
_PING = re.compile(rb"PING\s*\r\n")
_PONG = re.compile(rb"PONG\s*\r\n")
_INFO = re.compile(rb"INFO\s+([^\r\n]+)\r\n")

# The per-frame columns of ``Frames``, in this order.
COLUMNS = ("kind", "sid", "subj_lo", "subj_hi", "reply_lo", "reply_hi", "hdr_lo", "data_lo", "data_hi")


class FrameError(JetSparkError):
    """Bytes from the server that are no NATS protocol."""


class Frames:
    """Frames found in one buffer, as parallel int64 arrays of positions into it.

    ``kind``: MSG, HMSG, PING, PONG, OK, ERR or INFO; ``sid``: the subscription
    (MSG/HMSG, else 0).  A message's subject is ``buf[subj_lo:subj_hi]``, its
    reply subject ``buf[reply_lo:reply_hi]`` (empty: none), its header block
    ``buf[hdr_lo:data_lo]`` (empty: none, as nats-py says for ``HMSG`` with a
    zero header size) and its payload ``buf[data_lo:data_hi]``.  ``-ERR`` and
    ``INFO`` keep their argument in ``subj_lo:subj_hi``.  ``lines``: where ``scan``
    found every ``\n`` of the buffer (ascending), for readers of the frames' header
    blocks to reuse instead of searching the buffer again; None when not known.  ``ctl``:
    the index in ``lines`` of each frame's control-line end (-1: not known), so a reader
    finds the line ends of a header block by counting from it; None when not known."""

    __slots__ = (*COLUMNS, "lines", "ctl")
    # The columns, set by __init__ from COLUMNS (declared for the type checker).
    kind: np.ndarray
    sid: np.ndarray
    subj_lo: np.ndarray
    subj_hi: np.ndarray
    reply_lo: np.ndarray
    reply_hi: np.ndarray
    hdr_lo: np.ndarray
    data_lo: np.ndarray
    data_hi: np.ndarray
    lines: Optional[np.ndarray]
    ctl: Optional[np.ndarray]

    def __init__(
        self, *columns: np.ndarray, lines: Optional[np.ndarray] = None, ctl: Optional[np.ndarray] = None
    ) -> None:
        for name, col in zip(COLUMNS, columns):
            setattr(self, name, col)
        self.lines = lines
        self.ctl = ctl

    def __len__(self) -> int:
        return len(self.kind)

    def __getitem__(self, key) -> "Frames":
        ctl = None if self.ctl is None else self.ctl[key]
        return Frames(*(getattr(self, name)[key] for name in COLUMNS), lines=self.lines, ctl=ctl)

    @staticmethod
    def concat(parts: list["Frames"]) -> "Frames":
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return Frames(*(np.zeros(0, dtype=np.int64) for _ in COLUMNS))
        lines = parts[0].lines if all(p.lines is parts[0].lines for p in parts) else None
        cols = (np.concatenate([getattr(p, name) for p in parts]) for name in COLUMNS)
        if lines is None or any(p.ctl is None for p in parts):
            return Frames(*cols, lines=lines)
        return Frames(*cols, lines=lines, ctl=np.concatenate([p.ctl for p in parts if p.ctl is not None]))


# Decimal digits read eight at a time, each group of eight as one little-endian uint64 (its
# first digit in the lowest byte): checked to be digits and turned into a number with three
# multiply-add steps (pairs, then fours, then eights) instead of one step per digit.
_U64 = np.uint64
_ASCII_ZEROS = _U64(0x3030303030303030)
_HIGH_NIBBLES = _U64(0xF0F0F0F0F0F0F0F0)
_PLUS_SIX = _U64(0x0606060606060606)
_PAIRS, _FOURS, _EIGHTS = _U64(0x00FF00FF00FF00FF), _U64(0x0000FFFF0000FFFF), _U64(0xFFFFFFFF)
# The bytes of a word that hold digits when only its last c do (the rest are read as "0").
_KEEP = np.array([((1 << (8 * c)) - 1) << (8 * (8 - c)) if c else 0 for c in range(9)], dtype=np.uint64)
_FILL = _ASCII_ZEROS & ~_KEEP
_INT64_MAX = _U64((1 << 63) - 1)
_NO_DIGITS = np.zeros(0, dtype=np.uint64)
# "MSG " and "HMSG " as the low bytes of a little-endian word.
_FOUR_BYTES, _FIVE_BYTES = _U64(0xFFFFFFFF), _U64(0xFFFFFFFFFF)
_MSG_WORD = _U64(int.from_bytes(b"MSG ", "little"))
_HMSG_WORD = _U64(int.from_bytes(b"HMSG ", "little"))


def _words(a: np.ndarray) -> np.ndarray:
    """Every 8 bytes of ``a`` (at each byte position) as a little-endian uint64, without a copy."""
    return np.ndarray((len(a) - 7,), dtype="<u8", buffer=a, strides=(1,))


def eight_digits(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each word of ``w`` (eight ASCII bytes, the first digit in the lowest byte) as the number
    its digits spell (uint64), and whether all eight are digits."""
    ok = ((w & _HIGH_NIBBLES) == _ASCII_ZEROS) & (((w + _PLUS_SIX) & _HIGH_NIBBLES) == _ASCII_ZEROS)
    d = w - _ASCII_ZEROS
    d = (d * _U64(10) + (d >> _U64(8))) & _PAIRS
    d = (d * _U64(100) + (d >> _U64(16))) & _FOURS
    return (d * _U64(10_000) + (d >> _U64(32))) & _EIGHTS, ok


def parse_ints(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The decimal numbers ``a[lo:hi]`` (each 1 to 19 digits: an int64 time in ns), and whether each is one."""
    lens = hi - lo
    ok = (lens >= 1) & (lens <= 19)
    if not len(lo):
        return np.zeros(0, dtype=np.int64), ok
    if len(a) < 8:  # (room for one word: the numbers move along with the padding)
        a = np.concatenate((np.zeros(8, dtype=np.uint8), a))
        lo, hi = lo + 8, hi + 8
    words = _words(a)
    width, widest = int(lens.min()), int(lens.max())
    groups = max((min(widest, 19) + 7) // 8, 1)  # (one pass even when no span is a number)
    # Numbers all one width (a run's sizes, sids, times, most sequences), none within a word
    # of the buffer's start nor past its end: their digits kept by one mask per group of
    # eight, not one per number.
    same = width == widest and 1 <= width <= 19 and 8 * groups <= int(hi.min()) and int(hi.max()) <= len(a)
    if not same and int(hi.max()) > len(a):  # (past the end: none of it is read)
        ok &= hi <= len(a)
        hi = np.minimum(hi, len(a))
    value = _NO_DIGITS  # (the first group's number replaces it: there is at least one group)
    for k in range(groups):
        # The k-th group of eight from the right: the word ending at hi - 8k.
        at = hi - 8 * (k + 1)
        if same:
            w, c = words[at], min(width - 8 * k, 8)
        else:
            w = words[np.maximum(at, 0)]
            early = at < 0
            if early.any():  # (a number near the start: its word is read from 0 and moved into place)
                w[early] <<= (np.minimum(-at[early], 7) * 8).astype(np.uint64)
            c = np.minimum(np.maximum(lens - 8 * k, 0), 8)
        if not same or c < 8:
            w = (w & _KEEP[c]) | _FILL[c]
        d, good = eight_digits(w)
        ok &= good
        value = d if k == 0 else value + d * _U64(10 ** (8 * k))
    ok &= value <= _INT64_MAX
    return value.view(np.int64), ok


def byte_windows(a: np.ndarray, width: int) -> np.ndarray:
    """Every ``width`` bytes of ``a`` (at each byte position) as one item, without a copy."""
    return np.ndarray((len(a) - width + 1,), dtype=np.dtype((np.void, width)), buffer=a, strides=(1,))


def windows(a: np.ndarray, lo: np.ndarray, width: int) -> np.ndarray:
    """``a[lo[i]:lo[i] + width]`` as the rows of one array (``lo`` ascending), each copied as
    one item; the last rows, running past the end of ``a``, padded with zeros."""
    if not len(lo):
        return np.zeros((0, width), dtype=np.uint8)
    fit = int(np.searchsorted(lo, len(a) - width, side="right"))
    if fit == len(lo):
        return byte_windows(a, width)[lo].view(np.uint8).reshape(-1, width)
    start = int(lo[fit])
    pad = np.zeros(len(a) - start + width, dtype=np.uint8)
    pad[: len(a) - start] = a[start:]
    rest = windows(pad, lo[fit:] - start, width)
    return np.concatenate((windows(a, lo[:fit], width), rest)) if fit else rest


# Control lines are read as rows of a matrix as wide as the longest: those longer than
# _SHORT_LINE in a matrix of their own (a long line does not widen every row), none longer
# than MAX_CONTROL_LINE (those are framed one by one), at most _LINE_BYTES at a time.
_SHORT_LINE = 128
_LINE_BYTES = 1 << 22


def _spaces(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The spaces of the lines ``a[lo:hi]`` (ascending, apart), looked for in those lines only,
    not in the payloads between them: (their positions in order, how many each line has; 0
    for a line longer than ``MAX_CONTROL_LINE``)."""
    lens = hi - lo
    width = int(lens.max()) if len(lens) else 0
    if 0 < width <= _SHORT_LINE and int(lens.min()) == width and len(lo) * width <= _LINE_BYTES:
        # Lines of one length (the answers to one request mostly are): when every one has its
        # spaces where the first has, they are those columns of each, without a search per line.
        spaces = windows(a, lo, width) == 32
        if (spaces == spaces[0]).all():
            cols = np.flatnonzero(spaces[0])
            return (lo[:, None] + cols).reshape(-1), np.full(len(lo), len(cols), dtype=np.int64)
    long = lens > _SHORT_LINE
    groups = [np.flatnonzero(~long), np.flatnonzero(long & (lens <= MAX_CONTROL_LINE))] if long.any() else [None]
    at, rows = [], []
    for group in groups:
        g_lo, g_lens = (lo, lens) if group is None else (lo[group], lens[group])
        if not len(g_lo):
            continue
        width = int(g_lens.max())
        step = max(1, _LINE_BYTES // width)
        for i in range(0, len(g_lo), step):
            c, n = g_lo[i : i + step], g_lens[i : i + step]
            p = np.flatnonzero(windows(a, c, width) == 32)
            row = p // width
            col = p - row * width
            if int(n.min()) < width:  # (a row's bytes past its line: not its spaces)
                inside = col < n[row]
                row, col = row[inside], col[inside]
            at.append(c[row] + col)
            rows.append(row + i if group is None else group[row + i])
    if len(at) == 1:
        return at[0], np.bincount(rows[0], minlength=len(lo))
    if not at:  # (every line too long)
        return np.zeros(0, dtype=np.int64), np.zeros(len(lo), dtype=np.int64)
    where = np.concatenate(at)
    return np.sort(where), np.bincount(np.concatenate(rows), minlength=len(lo))


def _same_ints(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``parse_ints``, for numbers most often all the same (the sids of a run): when every span
    is as long as the first (at most 8 bytes) and its bytes (the last ``width`` of the 8
    ending with it, whatever comes before: a reply subject changing from frame to frame)
    are the same, the first is read once."""
    width = int(hi[0] - lo[0])
    if 1 <= width <= 8 and int(hi.min()) >= 8 and int(hi.max()) <= len(a):
        w = _words(a)[hi - 8] & _KEEP[width]
        if (w == w[0]).all() and (hi - lo == width).all():
            token = a[int(lo[0]) : int(hi[0])].tobytes()
            if token.isdigit():
                return np.full(len(lo), int(token), dtype=np.int64), np.ones(len(lo), dtype=bool)
    return parse_ints(a, lo, hi)


def _chain(
    a: np.ndarray, n: int, pos: int, cands: np.ndarray, k: np.ndarray, nl: np.ndarray
) -> tuple[Optional[Frames], int, bool]:
    """The run of MSG/HMSG frames from ``pos`` (``cands``: candidate starts, ``pos`` first;
    ``k``: the index in ``nl`` of the first line end at or after each), framed with array
    operations; (None, pos) when the frame at ``pos`` is not one of them as a server writes
    it (single spaces) or is not whole yet."""
    whole_line = k < len(nl)
    cands, k = cands[whole_line], k[whole_line]
    if not len(cands) or cands[0] != pos:
        return None, pos, False
    ce = nl[k]  # each control line's "\n"
    sp, cnt = _spaces(a, cands, ce)  # (every line has one, "MSG " / "HMSG " begins it, unless too long)
    if not cnt[0]:
        return None, pos, False
    m = len(cands)
    is_h = a[cands] == 72
    spaces = cnt - is_h  # 3: no reply subject, 4: one
    valid = (a[ce - 1] == 13) & ((spaces == 3) | (spaces == 4))
    c0 = int(cnt[0])
    if len(sp) == c0 * m and (cnt == c0).all():
        # Lines of one kind, as a run's mostly are: the j-th spaces of all are one column.
        grid = sp.reshape(m, c0)
        s = [grid[:, min(j, c0 - 1)] for j in range(5)]
        last, before_last = grid[:, -1], grid[:, max(c0 - 2, 0)]
    else:
        i1 = np.cumsum(cnt)
        i0 = i1 - cnt
        top = len(sp) - 1
        s = [sp[np.minimum(i0 + j, top)] for j in range(5)]
        last, before_last = sp[i1 - 1], sp[np.maximum(i1 - 2, 0)]
    has_reply = spaces == 4
    all_h = bool(is_h.all())
    any_h = all_h or bool(is_h.any())
    # No empty token: each space is followed by something other than a space.
    valid &= (s[1] > s[0] + 1) & (s[2] > s[1] + 1) & (last < ce - 2)
    valid &= ~has_reply | (s[3] > s[2] + 1)
    if any_h:
        valid &= ~(is_h & has_reply) | (s[4] > s[3] + 1)
    sid, ok_sid = _same_ints(a, s[1] + 1, s[2])
    if all_h:  # (the sizes of all, in one pass)
        sizes, ok = parse_ints(a, np.concatenate((last + 1, before_last + 1)), np.concatenate((ce - 1, last)))
        total, hsize, ok_total, ok_h = sizes[:m], sizes[m:], ok[:m], ok[m:]
    else:
        total, ok_total = parse_ints(a, last + 1, ce - 1)
        hsize = np.zeros(m, dtype=np.int64)
        ok_h = np.ones(m, dtype=bool)
        if any_h:
            hsize[is_h], ok_h[is_h] = parse_ints(a, before_last[is_h] + 1, last[is_h])
    valid &= ok_total & (~is_h | ok_h & (hsize <= total))
    # nats-py reads the sid with int(): any token of digits (here the common ones).
    valid &= ok_sid
    data_hi = ce + 1 + total
    fe = data_hi + 2
    bad = ~valid | (fe > n)
    bad[1:] |= fe[:-1] != cands[1:]
    stop = int(np.argmax(bad)) if bad.any() else len(cands)
    if stop == 0:
        return None, pos, False
    # The run stops at a frame as a server writes it, right after the run, that is not whole
    # yet: nothing after it is either (the caller need not look again).
    waiting = stop < m and bool(valid[stop]) and int(fe[stop]) > n and int(fe[stop - 1]) == int(cands[stop])
    sl = slice(0, stop)
    kind = np.where(is_h[sl], HMSG, MSG).astype(np.int64)
    if has_reply[sl].all():  # (deliveries: every one with its reply subject)
        reply_lo, reply_hi = s[2][sl] + 1, s[3][sl]
    else:
        reply_lo = np.where(has_reply[sl], s[2][sl] + 1, s[2][sl])
        reply_hi = np.where(has_reply[sl], s[3][sl], s[2][sl])
    hdr_lo = ce[sl] + 1
    frames = Frames(kind, sid[sl], s[0][sl] + 1, s[1][sl], reply_lo, reply_hi, hdr_lo, hdr_lo + hsize[sl], data_hi[sl])
    frames.ctl = k[sl]  # (each control line's "\n" is nl[k])
    return frames, int(fe[stop - 1]), waiting


def _one(buf: bytes, pos: int, n: int) -> tuple[Optional[tuple], int]:
    """One frame at ``pos`` as nats-py's parser reads it: (row, end), (None, pos) if not whole yet."""
    m = _MSG.match(buf, pos)
    h = None if m else _HMSG.match(buf, pos)
    g = m if m is not None else h
    if g is not None:
        try:
            sid = int(g.group(2))
            total = int(g.group(6 if h else 5))
            hsize = int(g.group(5)) if h else 0
        except ValueError:
            raise FrameError(f"malformed {'HMSG' if h else 'MSG'}: {bytes(buf[pos : g.end()])[:200]!r}") from None
        start = g.end()
        if start + total + 2 > n:
            return None, pos
        if hsize > total:
            raise FrameError(f"malformed HMSG: header size {hsize} > total size {total}")
        r_lo, r_hi = g.span(4) if g.group(4) is not None else (start, start)
        return (
            HMSG if h else MSG,
            sid,
            g.start(1),
            g.end(1),
            r_lo,
            r_hi,
            start,
            start + hsize,
            start + total,
        ), start + total + 2
    for kind, rx in ((OK, _OK), (ERR, _ERR), (PING, _PING), (PONG, _PONG), (INFO, _INFO)):
        line = rx.match(buf, pos)
        if line is not None:
            lo, hi = line.span(1) if kind in (ERR, INFO) and line.group(1) is not None else (line.end(), line.end())
            return (kind, 0, lo, hi, 0, 0, 0, 0, 0), line.end()
    if n - pos < MAX_CONTROL_LINE and buf.find(b"\r\n", pos) >= 0:
        raise FrameError(f"not a NATS protocol line: {bytes(buf[pos : pos + 80])!r}")
    return None, pos


def scan(buf: bytes, pos: int = 0) -> tuple[Frames, int]:
    """Every whole frame of ``buf`` from ``pos`` on, and where the rest (a frame not yet
    whole, or nothing) begins.  Raises ``FrameError`` on bytes nats-py's parser refuses."""
    n = len(buf)
    if pos >= n:
        return Frames.concat([]), pos
    a = np.frombuffer(buf, dtype=np.uint8)
    nl = np.flatnonzero(a == 10)
    # Candidate frame starts: "MSG " or "HMSG " right after a "\n" (the first byte looked at
    # for all, the rest, as one word, for those starting with "M" or "H"), and the index in nl
    # of the line end after each: the next "\n".
    q = nl + 1
    if len(q) and q[-1] == n:
        q = q[:-1]
    first = a[q]
    at = np.flatnonzero((first == 77) | (first == 72))
    q = q[at]
    w = q + 8 <= n
    word = _words(a)[q[w]] if n >= 8 else np.zeros(0, dtype=np.uint64)
    is_start = ((word & _FOUR_BYTES) == _MSG_WORD) | ((word & _FIVE_BYTES) == _HMSG_WORD)
    if not w.all():  # (the last few, too near the end for a word: byte by byte)
        t = q[~w]
        is_m = (a[t] == 77) & (a[np.minimum(t + 1, n - 1)] == 83) & (a[np.minimum(t + 2, n - 1)] == 71)
        is_m &= a[np.minimum(t + 3, n - 1)] == 32
        is_hm = (a[t] == 72) & (a[np.minimum(t + 1, n - 1)] == 77) & (a[np.minimum(t + 2, n - 1)] == 83)
        is_hm &= (a[np.minimum(t + 3, n - 1)] == 71) & (a[np.minimum(t + 4, n - 1)] == 32)
        is_start = np.concatenate((is_start, (is_m | is_hm) & (t + 5 <= n)))
    starts, starts_k = q[is_start], at[is_start] + 1
    parts: list[Frames] = []
    rows: list[tuple] = []
    while pos < n:
        if buf.startswith((b"MSG ", b"HMSG "), pos):
            i = np.searchsorted(starts, pos, side="right")
            cands = np.concatenate(([pos], starts[i:]))
            k = np.concatenate(([np.searchsorted(nl, pos)], starts_k[i:]))
            run, end, waiting = _chain(a, n, pos, cands, k, nl)
            if run is not None:
                if rows:
                    parts.append(_rows(rows, nl))
                    rows = []
                run.lines = nl
                parts.append(run)
                pos = end
                if waiting:  # (the next frame is not whole: framing it again would find so)
                    break
                continue
        row, end = _one(buf, pos, n)
        if row is None:
            break
        rows.append(row)
        pos = end
    if rows:
        parts.append(_rows(rows, nl))
    frames = Frames.concat(parts)
    if frames.lines is not nl:  # (no frames)
        frames.lines, frames.ctl = nl, None
    return frames, pos


def _rows(rows: list[tuple], nl: np.ndarray) -> Frames:
    """Frames read one at a time (``_one``), their control lines' ends not looked up (ctl -1)."""
    return Frames(*(np.array(c, dtype=np.int64) for c in zip(*rows)), lines=nl, ctl=np.full(len(rows), -1))


class FrameReader:
    """Frames from a connection's reads: ``feed(data)`` -> (buffer, frames in it), the
    unfinished tail kept for the next read.  A frame whose size its control line already
    gives is waited for without framing again (or copying) until all of it is there: a
    large message arriving in many small reads costs one pass, not one per read."""

    __slots__ = ("_rest", "_pieces", "_have", "_need")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._rest = b""
        self._pieces: list[bytes] = []
        self._have = 0
        self._need = 0

    def feed(self, data: bytes | list[bytes]) -> tuple[bytes, Frames]:
        """The frames of what came so far: ``data`` is one read, or many reads in order (joined
        with the unfinished tail in one copy)."""
        reads = data if isinstance(data, list) else [data]
        if self._need:
            self._pieces += reads
            self._have += sum(map(len, reads))
            if self._have < self._need:
                return b"", _NONE
            buf = b"".join(self._pieces)
            self._pieces, self._have, self._need = [], 0, 0
        elif self._rest:
            buf = b"".join([self._rest, *reads])
        else:
            buf = reads[0] if len(reads) == 1 and isinstance(reads[0], bytes) else b"".join(reads)
        frames, end = scan(buf)
        rest = buf[end:]
        need = _needed(rest)
        if need > len(rest):
            self._rest, self._pieces, self._have, self._need = b"", [rest], len(rest), need
        else:
            self._rest = rest
        return buf, frames


_NONE = Frames(*(np.zeros(0, dtype=np.int64) for _ in COLUMNS))


def _needed(rest: bytes) -> int:
    """How many bytes the MSG/HMSG at the start of ``rest`` takes whole, once its control line
    is there (0: not known yet, or not a message)."""
    if len(rest) < 64 or not rest.startswith((b"MSG ", b"HMSG ")) or rest.find(b"\r\n", 0, MAX_CONTROL_LINE) < 0:
        return 0
    g = _MSG.match(rest) or _HMSG.match(rest)
    if g is None:
        return 0
    try:
        return g.end() + int(g.group(6 if g.re is _HMSG else 5)) + 2
    except ValueError:
        return 0
