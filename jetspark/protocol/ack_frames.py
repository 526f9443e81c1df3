"""The PubAck frames a batch append receives, framed by their shape: pure, no I/O.

While a batch append awaits its PubAcks, nearly everything its connection receives is::

    MSG <inbox>.<row> <sid> <size>\\r\\n{"stream":"S","seq":N}\\r\\n

(or with a duplicate's tail, or a JetStream domain): frames of one shape whose only varying
bytes are the digits of the row and of the sequence, all of one length until one of those
gains a digit.  ``scan`` learns that shape from a frame (its bytes, the two digit runs
left as holes), checks the frames that follow against it with a few array operations over
the whole run (every byte outside the holes the shape's own, every hole a number as
``pubacks.read_pubacks`` reads one) and frames them by arithmetic, reading their rows and
sequences on the way; where a frame differs (another length, an error, a status, ``HMSG``,
``PING``, ``INFO``, another subscription's message, a frame cut short), it learns again,
and what is no PubAck of that form is framed by ``frames.scan``.  The frames are the ones
``frames.scan`` finds (tests/remote/test_ack_frames.py, Hypothesis); the runs' rows and
sequences go with them (``AckFrames.runs``), for ``read_pubacks`` to take as they are.

``AckReader`` stands in for a connection's ``frames.FrameReader`` while batch appends
await PubAcks on it.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

import numpy as np

from jetspark.protocol import frames as F
from jetspark.protocol.pubacks import DUPLICATE_TAILS, template_of

__all__ = ["AckFrames", "AckReader", "Run", "scan", "stand_down", "stand_in"]

# The control line of a PubAck: MSG, the reply subject (printable ASCII, the row's digits
# after its last dot), the sid and the size, single spaces, no reply subject.
_LINE = re.compile(rb"MSG ([\x21-\x7e]*\.)([0-9]{1,18}) ([0-9]{1,9}) ([0-9]{1,9})\r\n")
_SEQ = re.compile(rb"[0-9]{1,18}")
_TAILS = (b"}", *DUPLICATE_TAILS)


class Run(NamedTuple):
    """Frames ``first`` to ``first + n`` of an ``AckFrames``: PubAcks of one shape, their
    subjects' rows (the digits from ``row_at`` bytes into the subject) and sequences."""

    first: int
    n: int
    row_at: int
    rows: np.ndarray
    seqs: np.ndarray
    duplicate: bool
    head: bytes  # the answers' bytes up to their sequence (``pubacks.template_of``)


class AckFrames(F.Frames):
    """``frames.Frames`` with the runs of PubAcks ``scan`` read (its slices are plain ``Frames``)."""

    __slots__ = ("runs",)

    def __init__(self, *columns: np.ndarray, lines: Optional[np.ndarray] = None, runs: tuple[Run, ...] = ()) -> None:
        super().__init__(*columns, lines=lines)
        self.runs = runs


class _Shape:
    """One PubAck frame's bytes with the digits of its row and sequence as holes, and the same
    bytes and their mask repeated for many frames (as little-endian words: a whole run is
    checked with three array operations)."""

    __slots__ = (
        "length", "sid", "slen", "reply", "line", "size", "row_at", "row_w", "seq_at", "seq_w", "dup", "head",
        "seq_lo", "key", "_bytes", "_mask", "_reps", "_words", "_masks",
    )  # fmt: skip

    def __init__(self, frame: bytes, m: re.Match, pos: int, head: bytes, seq_w: int, dup: bool) -> None:
        self.length = len(frame)
        self.sid = int(m.group(3))
        self.slen = m.end(2) - m.start(1)
        self.reply = m.end(3) - pos  # (where frames.scan puts the empty reply subject: the space after the sid)
        self.line = m.end() - pos
        self.size = int(m.group(4))
        self.row_at, self.row_w = m.start(2) - pos, m.end(2) - m.start(2)
        self.seq_at, self.seq_w = self.line + len(head), seq_w
        self.dup, self.head = dup, head
        self.seq_lo = 0 if seq_w == 1 else 10 ** (seq_w - 1)  # (no leading zero: json.loads reads none)
        mask = np.full(self.length, 0xFF, dtype=np.uint8)
        mask[self.row_at : self.row_at + self.row_w] = 0
        mask[self.seq_at : self.seq_at + seq_w] = 0
        self._bytes = np.frombuffer(frame, dtype=np.uint8) & mask
        self._mask = mask
        self.key = self._bytes.tobytes() + mask.tobytes()
        self._reps = 0
        self._words = self._masks = np.zeros(0, dtype="<u8")

    def _tiles(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The shape's bytes and mask repeated ``count`` times, as the whole words they fill."""
        if self._reps < count:
            self._reps = max(count, 2 * self._reps)
            whole = self._reps * self.length // 8 * 8
            self._words = np.tile(self._bytes, self._reps)[:whole].view("<u8")
            self._masks = np.tile(self._mask, self._reps)[:whole].view("<u8")
        words = count * self.length // 8
        return self._words[:words], self._masks[:words]

    def _first_bad(self, a: np.ndarray, pos: int, lo: int, hi: int) -> int:
        """The first byte in ``lo:hi`` (offsets from ``pos``) outside the holes that differs from
        the shape's, or ``hi``."""
        idx = np.arange(lo, hi) % self.length
        bad = np.flatnonzero((a[pos + lo : pos + hi] & self._mask[idx]) != self._bytes[idx])
        return lo + int(bad[0]) if len(bad) else hi

    def run(self, buf: bytes, a: np.ndarray, pos: int) -> tuple[int, np.ndarray, np.ndarray]:
        """How many frames from ``pos`` on are of this shape (at least the one it was learnt
        from, when ``pos`` is where), and their rows and sequences."""
        length = self.length
        span = (len(a) - pos) // length * length
        words, masks = self._tiles(span // length)
        nw = len(words)
        diff = (np.frombuffer(buf, dtype="<u8", count=nw, offset=pos) ^ words) & masks if nw else words
        if nw and diff.any():
            k = int(np.argmax(diff != 0))
            bad = self._first_bad(a, pos, 8 * k, 8 * k + 8)
        else:
            bad = self._first_bad(a, pos, 8 * nw, span)  # (the bytes after the last whole word)
        count = bad // length
        rows, ok = _numbers(buf, pos + self.row_at, self.row_w, length, count)
        seqs, ok_seq = _numbers(buf, pos + self.seq_at, self.seq_w, length, count)
        ok &= ok_seq
        if self.seq_lo:
            ok &= seqs >= self.seq_lo
        if not ok.all():
            count = int(np.argmin(ok))
            rows, seqs = rows[:count], seqs[:count]
        return count, rows, seqs

    def frames(self, pos: int, count: int) -> list[np.ndarray]:
        """The ``frames.Frames`` columns of ``count`` frames of this shape from ``pos``."""
        starts = pos + self.length * np.arange(count, dtype=np.int64)
        data = starts + self.line
        reply = starts + self.reply
        return [
            np.full(count, F.MSG, dtype=np.int64),
            np.full(count, self.sid, dtype=np.int64),
            starts + 4,
            starts + 4 + self.slen,
            reply,
            reply,
            data,
            data,
            data + self.size,
        ]


def _numbers(buf: bytes, at: int, width: int, stride: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` decimal numbers of ``width`` digits (at most 18: within int64) at ``at``,
    ``at + stride``, ...: their values, and whether each is digits only.  Each group of eight
    digits (from the right) is read through a strided view of ``buf``, one little-endian word
    per number (no gather), the bytes before a shorter group read as zeros; ``at`` is at
    least 8 bytes into ``buf``."""
    value = ok = None
    for k in range((width + 7) // 8):
        c = min(width - 8 * k, 8)
        words = np.ndarray((count,), dtype="<u8", buffer=buf, offset=at + width - 8 * k - 8, strides=(stride,))
        if c < 8:
            words = (words & _KEEP[c]) | _FILL[c]
        d, good = F.eight_digits(words)
        value = d if value is None else value + d * np.uint64(10 ** (8 * k))
        ok = good if ok is None else ok & good
    assert value is not None and ok is not None
    return value.view(np.int64), ok


# The last c bytes of a word (its high bytes, little-endian) kept, the others read as "0".
_KEEP = [np.uint64(((1 << (8 * c)) - 1) << (8 * (8 - c))) for c in range(9)]
_FILL = [np.uint64(0x3030303030303030 & ~int(k)) for k in _KEEP]

# Control lines longer than this are left to frames.scan (which frames lines over 4,096 bytes
# another way).
_MAX_LINE = 1024


def _learn(buf: bytes, pos: int) -> tuple[Optional[_Shape], bool]:
    """(the shape of the frame at ``pos`` when it is a whole PubAck of the form ``scan`` frames
    by shape, else None; whether the frame is not whole yet, and one of those if it were)."""
    m = _LINE.match(buf, pos)
    if m is None or m.end() - pos > _MAX_LINE or m.end(2) - pos < 8:
        # (and a row whose last digit is within 8 bytes of the frame's start: _numbers reads a word ending with it)
        return None, m is None and buf.find(b"\r\n", pos) < 0
    end = m.end() + int(m.group(4)) + 2
    if end > len(buf):
        return None, True
    # (the frame ends with its line end, so the next one starts a line, as frames.scan wants)
    if buf[end - 2 : end] != b"\r\n":
        return None, False
    data = buf[m.end() : end - 2]
    head = template_of(data)
    if head is None:
        return None, False
    digits = _SEQ.match(data, len(head))
    if digits is None or data[digits.end() :] not in _TAILS:
        return None, False
    width = digits.end() - len(head)
    if width > 1 and data[len(head)] == 48:
        return None, False
    return _Shape(buf[pos:end], m, pos, head, width, data[digits.end() :] != b"}"), False


def scan(buf: bytes, pos: int = 0, shapes: Optional[dict] = None) -> tuple[F.Frames, int]:
    """What ``frames.scan(buf, pos)`` returns (the frames, where the rest begins), runs of
    PubAcks framed by their shape (an ``AckFrames`` with their rows and sequences, when there
    are any).  ``shapes``: the shapes learnt so far (kept by the caller between reads, each
    with its bytes repeated for a run)."""
    n = len(buf)
    a = np.frombuffer(buf, dtype=np.uint8)
    parts: list[list[np.ndarray]] = []
    runs: list[Run] = []
    count = 0
    while pos < n:
        shape, partial = _learn(buf, pos)
        if shape is None:
            if partial:  # (frames.scan frames nothing of a frame not yet whole)
                return _joined(parts, runs, pos)
            break
        if shapes is not None:  # (a shape seen before keeps its repeated bytes)
            known = shapes.get(shape.key)
            if known is None:
                if len(shapes) >= 8:
                    shapes.clear()
                shapes[shape.key] = shape
            else:
                shape = known
        k, rows, seqs = shape.run(buf, a, pos)
        if not k:  # (not reached: a shape takes the frame it was learnt from)
            break
        parts.append(shape.frames(pos, k))
        runs.append(Run(count, k, shape.row_at - 4, rows, seqs, shape.dup, shape.head))
        count += k
        pos += k * shape.length
    if not runs:
        return F.scan(buf, pos)
    if pos == n:
        return _joined(parts, runs, pos)
    rest, end = F.scan(buf, pos)
    if len(rest):
        parts.append([getattr(rest, c) for c in F.COLUMNS])
    return _joined(parts, runs, end)


def _joined(parts: list[list[np.ndarray]], runs: list[Run], end: int) -> tuple[F.Frames, int]:
    if len(parts) == 1:
        return AckFrames(*parts[0], runs=tuple(runs)), end
    if not parts:
        return AckFrames(*(np.zeros(0, dtype=np.int64) for _ in F.COLUMNS)), end
    return AckFrames(*(np.concatenate(cols) for cols in zip(*parts)), runs=tuple(runs)), end


class AckReader:
    """Stands in for a connection's ``frames.FrameReader`` (``feed``, ``reset``) while batch
    appends await PubAcks on it: the same frames, those of PubAck runs framed by ``scan``.

    It takes over from the reader it stands in for once that one holds nothing (a read it
    framed ended with a whole message), and hands back what it holds when done (``restore``);
    a rest longer than a PubAck (a large message arriving in many reads) goes to that reader,
    which waits for it whole without framing it again, until it holds nothing again."""

    __slots__ = ("inner", "users", "_busy", "_rest", "_shapes")

    # A rest longer than this is no PubAck cut short: the reader it stands in for takes it.
    REST_BYTES = 1024

    def __init__(self, inner) -> None:
        self.inner = inner
        self.users = 0
        self._busy = True  # (the inner reader may hold an unfinished frame)
        self._rest = b""
        self._shapes: dict = {}

    def reset(self) -> None:
        self.inner.reset()
        self._busy, self._rest = False, b""

    def feed(self, data: bytes | list[bytes]) -> tuple[bytes, F.Frames]:
        reads = data if isinstance(data, list) else [data]
        if self._busy:
            buf, frames = self.inner.feed(reads)
            n = len(frames)
            if n and frames.kind[n - 1] <= F.HMSG and int(frames.data_hi[n - 1]) + 2 == len(buf):
                self._busy = False  # (its last frame ended the buffer: it holds nothing)
            return buf, frames
        if self._rest:
            buf = b"".join([self._rest, *reads])
        else:
            buf = reads[0] if len(reads) == 1 and isinstance(reads[0], bytes) else b"".join(reads)
        frames, end = scan(buf, 0, self._shapes)
        rest = buf[end:]
        if len(rest) > self.REST_BYTES:
            self.inner.feed(rest)  # (no whole frame in it: the inner reader keeps it)
            self._busy, self._rest = True, b""
        else:
            self._rest = rest
        return buf, frames

    def restore(self):
        """The reader it stood in for, holding what this one holds."""
        if not self._busy and self._rest:
            self.inner.feed(self._rest)
        self._rest = b""
        return self.inner


def stand_in(feed) -> AckReader:
    """Put an ``AckReader`` in place of ``feed.reader`` (a ``fastpath.FrameFeed``'s), or count
    one more user of the one there; each call is paired with ``stand_down``."""
    reader = feed.reader
    if not isinstance(reader, AckReader):
        reader = feed.reader = AckReader(reader)
    reader.users += 1
    return reader


def stand_down(feed, reader: AckReader) -> None:
    """The reader ``stand_in`` replaced back in place once its last user is done."""
    reader.users -= 1
    if reader.users <= 0 and feed.reader is reader:
        feed.reader = reader.restore()
