"""JetStream consumer deliveries among parsed frames (``jetspark.protocol.frames``), in bulk:
pure, no I/O.

A pull consumer delivers each message with a reply subject that carries its
metadata: ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time
ns>.<pending>`` (nine tokens), or with ``<domain>.<account hash>`` after ``ACK``
(eleven or more).  ``ack_fields`` reads those numbers for a whole run of
frames with array operations; ``FrameChunk`` holds a range read's messages
as frames of the buffers they came in, and builds the Arrow columns from them
without a Python object per message where it can.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from jetspark.errors import JetSparkError
from jetspark.protocol.frames import Frames, parse_ints

__all__ = ["AckFields", "FrameChunk", "ack_fields"]


class AckFields:
    """Per frame of a run: stream and consumer sequences, time (ns), and whether pending is 0."""

    __slots__ = ("sseq", "cseq", "time", "last")

    def __init__(self, sseq: np.ndarray, cseq: np.ndarray, time: np.ndarray, last: np.ndarray) -> None:
        self.sseq, self.cseq, self.time, self.last = sseq, cseq, time, last


def ack_fields(buf: bytes, f: Frames) -> AckFields:
    """The metadata in the reply subjects of the frames ``f`` of ``buf`` (every one a delivery)."""
    a = np.frombuffer(buf, dtype=np.uint8)
    dots = np.flatnonzero(a == 46)
    lo, hi = f.reply_lo, f.reply_hi
    j0 = np.searchsorted(dots, lo)
    ndots = np.searchsorted(dots, hi) - j0
    if not ((ndots == 8) | (ndots >= 10)).all():
        bad = int(np.flatnonzero(~((ndots == 8) | (ndots >= 10)))[0])
        raise JetSparkError(f"not a JetStream delivery reply subject: {bytes(buf[lo[bad] : min(hi[bad], lo[bad] + 200)])!r}")
    off = np.where(ndots == 8, 2, 4)
    top = len(dots) - 1

    def token(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        start = dots[np.minimum(j0 + k - 1, top)] + 1
        end = np.where(k < ndots, dots[np.minimum(j0 + k, top)], hi)
        return start, end

    out = []
    for k in (3, 4, 5):
        values, ok = parse_ints(a, *token(off + k))
        if not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            raise JetSparkError(f"not a JetStream delivery reply subject: {bytes(buf[lo[bad] : min(hi[bad], lo[bad] + 200)])!r}")
        out.append(values)
    p_lo, p_hi = token(off + 6)
    last = (p_hi - p_lo == 1) & (a[np.minimum(p_lo, len(a) - 1)] == 48)
    return AckFields(out[0], out[1], out[2], last)


def _spans(parts: list[tuple[bytes, Frames]], lo_name: str, hi_name: str) -> tuple[np.ndarray, bytes]:
    """Offsets (n + 1, int64) and the bytes of one span per frame, joined.  The spans of a
    buffer are in order and apart, so they are what is left of it once the bytes between
    them are masked out: one ``np.repeat`` and one compress per buffer, no slice per span."""
    bodies: list[np.ndarray] = []
    lens = []
    for buf, f in parts:
        lo, hi = getattr(f, lo_name), getattr(f, hi_name)
        if not len(lo):
            continue
        a = np.frombuffer(buf, dtype=np.uint8, count=int(hi[-1]), offset=0)[int(lo[0]) :]
        span = hi - lo
        runs = np.empty(2 * len(lo), dtype=np.int64)
        runs[0::2] = span
        runs[1::2] = np.append(lo[1:], hi[-1]) - hi  # the bytes after each span, to the next
        pattern = _KEEP_SKIP[: len(runs)] if len(runs) <= len(_KEEP_SKIP) else np.tile(np.array([True, False]), len(lo))
        keep = np.repeat(pattern, runs)
        bodies.append(a[keep])
        lens.append(span)
    n = sum(len(x) for x in lens)
    offsets = np.zeros(n + 1, dtype=np.int64)
    if n:
        np.cumsum(np.concatenate(lens), out=offsets[1:])
    return offsets, b"".join(bodies)


_KEEP_SKIP = np.tile(np.array([True, False]), 1 << 17)


class FrameChunk:
    """Messages in stream order, kept as frames of the buffers they came in (``parts``), with
    their stream sequences and times (ns) as arrays.  The list views (``subjects``,
    ``datas``, ``headers``, ``replies``, ``seqs``, ``times``) match ``puller.Chunk``'s."""

    def __init__(self, parts: list[tuple[bytes, Frames]], seq_array: np.ndarray, time_array: np.ndarray) -> None:
        self.parts = parts
        self.seq_array = seq_array
        self.time_array = time_array

    def __len__(self) -> int:
        return len(self.seq_array)

    def column(self, what: str) -> tuple[np.ndarray, bytes]:
        """(offsets, body) of ``"subject"``, ``"data"``, ``"headers"`` or ``"reply"``."""
        lo, hi = {"subject": ("subj_lo", "subj_hi"), "data": ("data_lo", "data_hi"), "headers": ("hdr_lo", "data_lo"), "reply": ("reply_lo", "reply_hi")}[what]
        return _spans(self.parts, lo, hi)

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
        return [h or None for h in self._list("headers")]

    @property
    def seqs(self) -> list[int]:
        return self.seq_array.tolist()

    @property
    def times(self) -> list[int]:
        return self.time_array.tolist()
