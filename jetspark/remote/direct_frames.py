"""Batched direct-get replies read in bulk: pure, no I/O (``direct.DirectRead``'s parser).

A message the server sends in answer to ``$JS.API.DIRECT.GET.<stream>`` with
``batch`` has a header block of the message's own headers (often none) and the
server's, appended in a fixed order::

    NATS/1.0\\r\\nNats-Stream: S\\r\\nNats-Subject: a.b\\r\\nNats-Sequence: 7\\r\\n
    Nats-Time-Stamp: 2026-11-24T01:49:36.660992921Z\\r\\nNats-Num-Pending: 3\\r\\n
    Nats-Last-Sequence: 6\\r\\n\\r\\n

``reply_fields`` reads a run of such frames with array operations.  A message
without headers of its own, the common case, has its subject at a fixed place
(after the stream's name) and each next value a short, bounded distance after the
line end before it, so each line end is looked for in a few bytes per message
rather than in the whole buffer; a block is taken this way only if it ends with
nothing but the two trailing lines (a message whose own headers imitate the
server's is not).  Any other message (own headers, another layout) is read by
``protocol.deliveries.direct_fields``, which searches the whole block.
tests/remote/test_direct.py checks both against ``strip_direct_headers`` on
arbitrary blocks.
"""

from __future__ import annotations

import datetime as _dt
from typing import Optional

import numpy as np

from jetspark.protocol.deliveries import DirectFields, direct_fields, rfc3339_ns
from jetspark.protocol.frames import Frames, parse_ints

__all__ = ["ReplyFields", "reply_fields"]

_SEQUENCE = b"\r\nNats-Sequence: "
_STAMP = b"\r\nNats-Time-Stamp: "
# After the time stamp's line, only the server's Num-Pending and Last-Sequence lines (up to 20
# digits each) and the blank line: a longer rest holds another block of the server's headers
# (the message's own headers imitated the server's), which the general reading sorts out.
_TAIL_MAX = len(b"\r\nNats-Num-Pending: ") + 20 + len(b"\r\nNats-Last-Sequence: ") + 20 + 4
_ZEROS = 0x3030303030303030
_HIGH = 0xF0F0F0F0F0F0F0F0
_SIX = 0x0606060606060606
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

    def at(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The words at ``pos``, and whether each lies inside the buffer."""
        inside = (pos >= 0) & (pos <= self.top)
        if self.w is None:
            return np.zeros(len(pos), dtype=np.uint64), inside
        return self.w[np.where(inside, pos, 0)], inside

    def equal(self, pos: np.ndarray, pattern: bytes) -> np.ndarray:
        """Whether ``pattern`` (8 bytes or more) is at each ``pos``."""
        ok = np.ones(len(pos), dtype=bool)
        for off in [*range(0, len(pattern) - 7, 8), len(pattern) - 8]:
            word, inside = self.at(pos + off)
            ok &= inside & (word == np.uint64(int.from_bytes(pattern[off : off + 8], "little")))
        return ok


def reply_fields(buf: bytes, f: Frames, stream: str, prefix_len: int) -> ReplyFields:
    """The direct-get replies ``f`` of ``buf`` (to reply subjects ``<prefix><request number>``,
    ``prefix_len`` bytes of prefix) of stream ``stream``: see ``DirectFields``."""
    a = np.frombuffer(buf, dtype=np.uint8)
    n = len(f)
    hdr_lo, data_lo = f.hdr_lo, f.data_lo
    req, good = parse_ints(a, f.subj_lo + prefix_len, f.subj_hi)
    req = np.where(good, req, -1)
    status = (data_lo - hdr_lo > 9) & (a[np.minimum(hdr_lo + 8, max(len(a) - 1, 0))] == 32)
    # The fast reading: no headers of the message's own, so the block starts with the stream's
    # line, and the next line ends are the subject's, the sequence's and the time stamp's.
    words = _Words(buf)
    head = b"NATS/1.0\r\nNats-Stream: " + stream.encode() + b"\r\nNats-Subject: "
    ok = ~status & (data_lo - hdr_lo > len(head)) & words.equal(hdr_lo, head)
    cr = np.flatnonzero(a == 13)
    k = np.searchsorted(cr, hdr_lo + len(head)) + np.arange(3)[:, None]
    ok &= k[2] < len(cr)
    subj_hi, q_hi, t_hi = cr[np.minimum(k, max(len(cr) - 1, 0))] if len(cr) else np.zeros((3, n), dtype=np.int64)
    subj_lo = hdr_lo + len(head)
    ok &= (subj_hi > subj_lo) & words.equal(subj_hi, _SEQUENCE) & words.equal(q_hi, _STAMP)
    ok &= (t_hi < data_lo) & (data_lo - t_hi <= _TAIL_MAX)
    seq, good = parse_ints(a, subj_hi + len(_SEQUENCE), q_hi)
    ok &= good
    time, good = _stamps(a, words, q_hi + len(_STAMP), t_hi, ok)
    ok &= good
    own_end = np.zeros(n, dtype=np.int64)
    slow = np.flatnonzero(~ok & ~status)
    if len(slow):  # the general reading, for the blocks the fast one did not take
        d = direct_fields(buf, f[slow])
        subj_lo[slow], subj_hi[slow], seq[slow], time[slow] = d.subj_lo, d.subj_hi, d.seq, d.time
        own_end[slow] = d.own_end
        ok[slow] = d.ok
    out = ReplyFields(status=status, subj_lo=subj_lo, subj_hi=subj_hi, seq=seq, time=time, own_end=own_end,
                      ok=ok | status)  # fmt: skip
    out.req = req
    return out


def _stamps(a: np.ndarray, words: _Words, lo: np.ndarray, hi: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, ...]:
    """The server's times ``a[lo:hi]`` (``2026-11-24T01:49:36.660992921Z``, the fraction's
    trailing zeros left out) -> ns, and whether each was one.  Messages stored together share
    their second: a row whose first 19 bytes differ from the row before's is read whole
    (``rfc3339_ns``), the others only their fraction (its digits 8 at a time, as one word)."""
    n = len(lo)
    time = np.zeros(n, dtype=np.int64)
    if not n:
        return time, ok
    top = len(a) - 1
    lens = hi - lo
    digits = np.where(lens > 21, lens - 21, 0)  # of the fraction
    good = ok & (lens >= 20) & (lens <= 30) & (a[np.clip(hi - 1, 0, top)] == ord("Z"))
    good &= np.where(digits > 0, a[np.clip(lo + 19, 0, top)] == ord("."), lens == 20)
    # The fraction's first 8 digits, left-aligned (missing ones 0), then the 9th.
    word, inside = words.at(lo + 20)
    d8 = np.minimum(digits, 8).astype(np.uint64)
    mask = np.where(d8 >= 8, np.uint64(0xFFFFFFFFFFFFFFFF), (np.uint64(1) << (d8 * np.uint64(8))) - np.uint64(1))
    good &= inside | (digits == 0)
    good &= ((word & np.uint64(_HIGH)) ^ np.uint64(_ZEROS)) & mask == 0
    good &= (((word + np.uint64(_SIX)) & np.uint64(_HIGH)) ^ np.uint64(_ZEROS)) & mask == 0
    x = (word & mask) - (np.uint64(_ZEROS) & mask)
    x = (x * np.uint64(10) + (x >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    x = (x * np.uint64(100) + (x >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    x = (x * np.uint64(10000) + (x >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
    ninth = a[np.clip(lo + 28, 0, top)].astype(np.int64) - 48
    good &= (digits < 9) | ((ninth >= 0) & (ninth <= 9))
    frac = x.astype(np.int64) * 10 + np.where(digits >= 9, ninth, 0)
    # The date and second: read where they change.
    h0, _ = words.at(lo)
    h1, _ = words.at(lo + 8)
    h2, _ = words.at(lo + 11)
    first = np.ones(n, dtype=bool)
    first[1:] = (h0[1:] != h0[:-1]) | (h1[1:] != h1[:-1]) | (h2[1:] != h2[:-1]) | ~good[1:] | ~good[:-1]
    lead = np.flatnonzero(first)
    if len(lead) <= 8:  # (the usual few: one by one costs less than the array reading's passes)
        second = [_second_ns(bytes(a[i : i + 19])) for i in lo[lead].tolist()]
        read = np.array([s is not None for s in second], dtype=bool)
        base = np.array([s or 0 for s in second], dtype=np.int64)
    else:
        whole, read = rfc3339_ns(a, lo[lead], hi[lead])
        base = whole - frac[lead]
    group = np.cumsum(first) - 1
    return base[group] + frac, good & read[group]


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


def pending_zero(hdr: Optional[bytes]) -> bool:
    """Whether a header block says nothing more is stored after it (``Nats-Num-Pending: 0``)."""
    return bool(hdr) and b"\r\nNats-Num-Pending: 0\r\n" in hdr  # type: ignore[operator]
