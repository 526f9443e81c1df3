"""JetStream consumer deliveries among parsed frames (``jetspark.protocol.frames``), in bulk:
pure, no I/O.

A pull consumer delivers each message with a reply subject that carries its
metadata: ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time
ns>.<pending>`` (nine tokens), or with ``<domain>.<account hash>`` after ``ACK``
(eleven or more).  ``ack_fields`` reads those numbers for a whole run of
frames with array operations; ``compact`` copies a run's messages out of the
buffer they came in, column by column (``Messages``); ``FrameChunk`` holds a
range read's messages, as frames of their buffers or copied out, and builds the
Arrow columns from them without a Python object per message where it can.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from jetspark.errors import JetSparkError
from jetspark.protocol.frames import Frames, parse_ints, windows

__all__ = [
    "AckFields",
    "DirectFields",
    "FrameChunk",
    "Messages",
    "ack_fields",
    "compact",
    "direct_fields",
    "joined_spans",
    "rfc3339_ns",
]


class AckFields:
    """Per frame of a run: stream and consumer sequences, time (ns), and whether pending is 0."""

    __slots__ = ("sseq", "cseq", "time", "last")

    def __init__(self, sseq: np.ndarray, cseq: np.ndarray, time: np.ndarray, last: np.ndarray) -> None:
        self.sseq, self.cseq, self.time, self.last = sseq, cseq, time, last


def _one_consumer_dots(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> Optional[list[np.ndarray]]:
    """The last four dots of each reply subject ``a[lo:hi]`` when every one is a v1 delivery
    reply of one stream and consumer, as a run of one pull's deliveries is: the prefix
    ``$JS.ACK.<stream>.<consumer>.`` (four dots) the same bytes in each, checked eight at a
    time, and exactly four dots in what follows it, looked for in those tails only (about a
    quarter of the buffer) rather than in the whole buffer; None otherwise (the general way)."""
    first = bytes(a[int(lo[0]) : int(hi[0])])
    tokens = first.split(b".")
    if len(tokens) != 9 or tokens[:2] != [b"$JS", b"ACK"]:
        return None
    p = len(tokens[2]) + len(tokens[3]) + 10  # "$JS.ACK." + stream + "." + consumer + "."
    tail_lo = lo + p
    lens = hi - tail_lo
    width = int(lens.max())
    if int(lens.min()) < 1 or not (tail_lo[1:] > tail_lo[:-1]).all():
        return None
    words = np.ndarray((len(a) - 7,), dtype="<u8", buffer=a, strides=(1,))
    for k in (*range(0, p - 8, 8), p - 8):  # (the prefix as words, the last one overlapping)
        w = words[lo + k]
        if not (w == w[0]).all():
            return None
    is_dot = windows(a, tail_lo, width) == 46
    if int(lens.min()) < width:
        is_dot &= np.arange(width) < lens[:, None]
    at = np.flatnonzero(is_dot)
    n = len(lo)
    if len(at) != 4 * n:
        return None
    row, col = np.divmod(at.reshape(n, 4), width)
    if not (row == np.arange(n)[:, None]).all():
        return None
    dots = tail_lo[:, None] + col
    return [dots[:, k] for k in range(4)]


def ack_fields(buf: bytes, f: Frames) -> AckFields:
    """The metadata in the reply subjects of the frames ``f`` of ``buf`` (every one a delivery)."""
    a = np.frombuffer(buf, dtype=np.uint8)
    lo, hi = f.reply_lo, f.reply_hi
    at4 = _one_consumer_dots(a, lo, hi) if len(lo) else None
    if at4 is not None:
        return _read_v1(buf, a, lo, hi, at4)
    dots = np.flatnonzero(a == 46)
    j0 = np.searchsorted(dots, lo)
    ndots = np.searchsorted(dots, hi) - j0
    v1 = ndots == 8
    all_v1 = bool(v1.all())
    if not all_v1 and not (v1 | (ndots >= 10)).all():
        bad = int(np.flatnonzero(~(v1 | (ndots >= 10)))[0])
        raise JetSparkError(
            f"not a JetStream delivery reply subject: {bytes(buf[lo[bad] : min(hi[bad], lo[bad] + 200)])!r}"
        )
    top = len(dots) - 1
    if all_v1:  # (as a server without a domain sends them: each token between two dots)
        return _read_v1(buf, a, lo, hi, [dots[j0 + k] for k in (4, 5, 6, 7)])
    off = np.where(v1, 2, 4)

    def token(k: Any) -> tuple[np.ndarray, np.ndarray]:
        start = dots[np.minimum(j0 + k - 1, top)] + 1
        end = np.where(k < ndots, dots[np.minimum(j0 + k, top)], hi)
        return start, end

    return _read_tokens(buf, a, lo, hi, [token(off + k) for k in (3, 4, 5, 6)])


def _read_v1(buf: bytes, a: np.ndarray, lo: np.ndarray, hi: np.ndarray, at: list[np.ndarray]) -> AckFields:
    """v1 reply subjects, given the dots after their delivered count, stream and consumer
    sequences and time: each token between two dots, the pending count to the end."""
    return _read_tokens(buf, a, lo, hi, [(at[0] + 1, at[1]), (at[1] + 1, at[2]), (at[2] + 1, at[3]), (at[3] + 1, hi)])


def _read_tokens(buf: bytes, a: np.ndarray, lo: np.ndarray, hi: np.ndarray, spans: list) -> AckFields:
    """The stream and consumer sequences and the time read from their token ``spans``; the
    last span (pending) only checked for 0."""
    out = []
    for t_lo, t_hi in spans[:3]:
        values, ok = parse_ints(a, t_lo, t_hi)
        if not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            raise JetSparkError(
                f"not a JetStream delivery reply subject: {bytes(buf[lo[bad] : min(hi[bad], lo[bad] + 200)])!r}"
            )
        out.append(values)
    p_lo, p_hi = spans[3]
    last = (p_hi - p_lo == 1) & (a[np.minimum(p_lo, len(a) - 1)] == 48)
    return AckFields(out[0], out[1], out[2], last)


def _find_all(a: np.ndarray, starts: np.ndarray, pattern: bytes, known: int = 0) -> np.ndarray:
    """The positions among ``starts`` where ``pattern`` begins in ``a`` (its first ``known``
    bytes already checked there), the rarest bytes (the last ones) checked first."""
    c = starts[starts + len(pattern) <= len(a)]
    for k in range(len(pattern) - 1, known - 1, -1):
        c = c[a[c + k] == pattern[k]]
    return c


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's algorithm)."""
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


_DATE_COLUMNS = np.arange(19)
_SEPARATORS = [(4, ord("-")), (7, ord("-")), (10, ord("T")), (13, ord(":")), (16, ord(":"))]
_DIGITS = [k for k in range(19) if k not in (4, 7, 10, 13, 16)]


def rfc3339_ns(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """UTC times as the server writes them (``2026-11-24T01:49:36.660992921Z``, the fraction
    optional) in ``a[lo:hi]`` -> ns since the epoch, and whether each had that form."""
    ok = (hi - lo >= 20) & (hi - lo <= 30)
    # The fixed part, YYYY-MM-DDTHH:MM:SS, read as one block of digits.
    head = a[np.clip(lo[:, None] + _DATE_COLUMNS, 0, len(a) - 1)]
    for k, ch in _SEPARATORS:
        ok &= head[:, k] == ch
    digits = head[:, _DIGITS] - np.uint8(48)
    ok &= (digits <= 9).all(axis=1)
    d = digits.astype(np.int64)
    y = d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3]
    mo, day, h, mi, sec = (d[:, 4 + 2 * i] * 10 + d[:, 5 + 2 * i] for i in range(5))
    ok &= a[np.maximum(hi - 1, 0)] == ord("Z")
    ok &= (y >= 1678) & (y <= 2261)  # (int64 ns)
    has_frac = (hi - lo > 21) & (a[np.minimum(lo + 19, len(a) - 1)] == ord("."))
    ok &= has_frac | (hi - lo == 20)
    f_lo, f_hi = lo + 20, np.maximum(hi - 1, lo + 20)
    frac, good = parse_ints(a, f_lo, np.where(has_frac, f_hi, f_lo + 1))
    ok &= ~has_frac | good & (f_hi - f_lo <= 9)
    frac = np.where(has_frac, frac * 10 ** np.clip(9 - (f_hi - f_lo), 0, 9), 0)
    days = _days_from_civil(y, mo, day)
    return ((days * 24 + h) * 60 + mi) * 60 * 1_000_000_000 + sec * 1_000_000_000 + frac, ok


class DirectFields:
    """Per direct-get reply of a run: status or not, the message's subject span, sequence,
    time (ns), where its own headers end (the server's begin there; 0: it has none), and
    whether a status says nothing more is stored (404, or Nats-Num-Pending 0)."""

    __slots__ = ("status", "subj_lo", "subj_hi", "seq", "time", "own_end", "ok")
    # Set by __init__ from its keywords (declared for the type checker).
    status: np.ndarray
    subj_lo: np.ndarray
    subj_hi: np.ndarray
    seq: np.ndarray
    time: np.ndarray
    own_end: np.ndarray
    ok: np.ndarray

    def __init__(self, **kw) -> None:
        for k, v in kw.items():
            setattr(self, k, v)


def direct_fields(buf: bytes, f: Frames) -> DirectFields:
    """Batched direct-get replies (``$JS.API.DIRECT.GET``): the server appends to each
    message's own headers, in this order, ``Nats-Stream``, ``Nats-Subject``,
    ``Nats-Sequence``, ``Nats-Time-Stamp`` (then others); read for the whole run at once.
    Rows that are statuses (``NATS/1.0 <code>``) have ``status`` set and nothing else."""
    a = np.frombuffer(buf, dtype=np.uint8)
    n = len(f)
    hdr_lo, data_lo = f.hdr_lo, f.data_lo
    status = (data_lo - hdr_lo > 9) & (a[np.minimum(hdr_lo + 8, len(a) - 1)] == 32)
    cr = np.flatnonzero(a == 13)
    nats = _find_all(a, cr, b"\r\nNats-")
    stream = _find_all(a, nats, b"\r\nNats-Stream: ", 7)
    subject = _find_all(a, nats, b"\r\nNats-Subject: ", 7)
    sequence = _find_all(a, nats, b"\r\nNats-Sequence: ", 7)
    stamp = _find_all(a, nats, b"\r\nNats-Time-Stamp: ", 7)
    ok = ~status

    def after(points: np.ndarray, pos: np.ndarray) -> np.ndarray:
        k = np.searchsorted(points, pos)
        return np.where(k < len(points), points[np.minimum(k, len(points) - 1)], -1) if len(points) else np.full(n, -1)

    k = np.searchsorted(stream, data_lo) - 1
    i = np.where(k >= 0, stream[np.maximum(k, 0)], -1) if len(stream) else np.full(n, -1)
    ok &= i >= hdr_lo
    j = after(subject, i)
    q = after(sequence, j)
    t = after(stamp, q)
    e = after(cr, t + 19)
    ok &= (j > i) & (q > j) & (t > q) & (e > t) & (e < data_lo)
    seq, good = parse_ints(a, q + 17, t)
    ok &= good
    time, good = rfc3339_ns(a, t + 19, e)
    ok &= good
    return DirectFields(
        status=status,
        subj_lo=j + 16,
        subj_hi=q,
        seq=seq,
        time=time,
        own_end=np.where(i > hdr_lo + 8, i + 2, 0),
        ok=ok | status,
    )


def _masked(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The spans ``a[lo:hi]`` (in order and apart) joined: what is left of ``a[lo[0]:hi[-1]]``
    once the bytes between them are masked out, one ``np.repeat`` and one compress, no
    slice per span; a view of ``a`` when they follow each other with nothing between."""
    region = a[int(lo[0]) : int(hi[-1])]
    gaps = lo[1:] - hi[:-1]  # the bytes after each span, to the next
    if not gaps.any():
        return region
    runs = np.empty(2 * len(lo), dtype=np.int64)
    runs[0::2] = hi - lo
    runs[1:-1:2] = gaps
    runs[-1] = 0
    pattern = _KEEP_SKIP[: len(runs)] if len(runs) <= len(_KEEP_SKIP) else np.tile(np.array([True, False]), len(lo))
    return region[np.repeat(pattern, runs)]


_KEEP_SKIP = np.tile(np.array([True, False]), 1 << 17)


def _gathered(a: np.ndarray, lo: np.ndarray, hi: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The spans ``a[lo:hi]`` (in order and apart, ``lens`` long, none empty) joined.  Spans of
    about one length (subjects, payloads of a fixed size) are copied as items of a window as
    wide as the longest, touching only their own bytes; others through ``_masked``, which
    reads every byte from the first span to the last."""
    width = int(lens.max())
    total = int(lens.sum())
    if width * len(lo) > 2 * total or int(lo[-1]) + width > len(a):
        return _masked(a, lo, hi)
    # Every ``width`` bytes of ``a`` as one item (at each byte position), without a copy: one
    # gather copies the rows (a 2-d window's rows cost ~4x as much to gather when narrow).
    items = np.ndarray((len(a) - width + 1,), dtype=np.dtype((np.void, width)), buffer=a, strides=(1,))
    rows = items[lo].view(np.uint8)
    if total == width * len(lo):
        return rows
    return rows.reshape(-1, width)[np.arange(width) < lens[:, None]]


def joined_spans(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, body) of the spans ``a[lo:hi]`` (in order and apart, some maybe empty): span i
    is ``body[offsets[i]:offsets[i + 1]]``."""
    lens = hi - lo
    offsets = np.empty(len(lo) + 1, dtype=np.int64)
    offsets[0] = 0
    np.cumsum(lens, out=offsets[1:])
    if not offsets[-1]:
        return offsets, _EMPTY
    some = lens > 0
    if some.all():
        return offsets, _gathered(a, lo, hi, lens)
    k = np.flatnonzero(some)
    return offsets, _gathered(a, lo[k], hi[k], lens[k])


_EMPTY = np.zeros(0, dtype=np.uint8)
_SPANS = {
    "subject": ("subj_lo", "subj_hi"),
    "data": ("data_lo", "data_hi"),
    "headers": ("hdr_lo", "data_lo"),
    "reply": ("reply_lo", "reply_hi"),
}


class Messages:
    """Messages copied out of the buffer they came in (``compact``): for each column
    (``"subject"``, ``"data"``, ``"headers"``, ``"reply"``), ``(offsets, body)``: message i's
    bytes are ``body[offsets[i]:offsets[i + 1]]``."""

    __slots__ = ("columns",)

    def __init__(self, columns: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns["data"][0]) - 1

    def __getitem__(self, key: slice) -> "Messages":
        """Messages ``key.start`` to ``key.stop`` (a step of 1), their bodies views of these."""
        i, j, _ = key.indices(len(self))
        j = max(i, j)
        out = {}
        for what, (offsets, body) in self.columns.items():
            lo, hi = int(offsets[i]), int(offsets[j])
            out[what] = (offsets[i : j + 1] - lo, body[lo:hi])
        return Messages(out)

    def span(self, what: str, i: int) -> bytes:
        offsets, body = self.columns[what]
        return bytes(body[int(offsets[i]) : int(offsets[i + 1])])


def compact(buf: bytes, f: Frames, *, replies: bool = True) -> Messages:
    """The messages ``f`` of ``buf`` copied out of it, column by column: subjects, header
    blocks, payloads, and reply subjects (all empty unless ``replies``).

    A read copies out what it takes while the buffer it came in is still in the CPU's
    caches: the buffer (control lines and all) can go, and a chunk's columns
    (``FrameChunk.column``) join these bodies instead of picking spans out of cold buffers."""
    a = np.frombuffer(buf, dtype=np.uint8)
    columns = {
        what: joined_spans(a, getattr(f, lo), getattr(f, hi)) for what, (lo, hi) in _SPANS.items() if what != "reply"
    }
    if replies:
        columns["reply"] = joined_spans(a, f.reply_lo, f.reply_hi)
    else:
        columns["reply"] = (np.zeros(len(f) + 1, dtype=np.int64), _EMPTY)
    return Messages(columns)


def _joined(pieces: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, bytes]:
    """One (offsets, body) of many, in order."""
    n = sum(len(o) - 1 for o, _ in pieces)
    offsets = np.zeros(n + 1, dtype=np.int64)
    at = base = 0
    for o, _ in pieces:
        m = len(o) - 1
        offsets[at + 1 : at + m + 1] = o[1:] + (base - o[0])
        at += m
        base += int(o[-1] - o[0])
    return offsets, b"".join(body for _, body in pieces)  # type: ignore[misc]  # (arrays are buffers)


class FrameChunk:
    """Messages in stream order, kept as frames of the buffers they came in (``parts`` of
    ``(buf, Frames)``) or copied out of them (``Messages``), with their stream sequences
    and times (ns) as arrays.  The list views (``subjects``, ``datas``, ``headers``,
    ``replies``, ``seqs``, ``times``) match ``range_reader.Chunk``'s."""

    def __init__(
        self,
        parts: list,
        seq_array: np.ndarray,
        time_array: np.ndarray,
        headers: Optional[list] = None,
    ) -> None:
        self.parts = parts
        self.seq_array = seq_array
        self.time_array = time_array
        self._headers = headers  # the header blocks, where they are no span of the frames (direct gets)

    def __len__(self) -> int:
        return len(self.seq_array)

    def column(self, what: str) -> tuple[np.ndarray, bytes]:
        """(offsets, body) of ``"subject"``, ``"data"``, ``"headers"`` or ``"reply"``."""
        lo_name, hi_name = _SPANS[what]
        pieces = []
        for part in self.parts:
            if isinstance(part, Messages):
                pieces.append(part.columns[what])
                continue
            buf, f = part
            lo, hi = getattr(f, lo_name), getattr(f, hi_name)
            if len(lo):
                offsets = np.zeros(len(lo) + 1, dtype=np.int64)
                np.cumsum(hi - lo, out=offsets[1:])
                pieces.append((offsets, _masked(np.frombuffer(buf, dtype=np.uint8), lo, hi)))
        return _joined(pieces)

    def _list(self, what: str) -> list[bytes]:
        offsets, body = self.column(what)
        o = offsets.tolist()
        return [body[o[i] : o[i + 1]] for i in range(len(o) - 1)]

    @property
    def subjects(self) -> list[bytes]:
        return self._list("subject")

    @property
    def datas(self) -> list[bytes]:
        return self._list("data")

    @property
    def replies(self) -> list[bytes]:
        return self._list("reply")

    @property
    def headers(self) -> list[Optional[bytes]]:
        if self._headers is not None:
            return self._headers
        return [h or None for h in self._list("headers")]

    @property
    def seqs(self) -> list[int]:
        return self.seq_array.tolist()

    @property
    def times(self) -> list[int]:
        return self.time_array.tolist()
