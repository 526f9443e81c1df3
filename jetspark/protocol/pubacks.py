"""The PubAcks of a batch append, read in bulk: pure, no I/O.

A batch append gives row i the reply subject ``<inbox>.<i>``; the server answers every
stored message with one PubAck written from a template it makes once per stream::

    {"stream":"ORDERS","seq":42}
    {"stream":"ORDERS","seq":42,"duplicate": true}        (a msg id seen before)
    {"stream":"ORDERS", "domain":"hub", "seq":42}         (a server with a JetStream domain)

so a run of them differs only in the digits of the sequence and in the duplicate tail.
``read_pubacks`` learns the template from the run itself (the bytes up to ``"seq":`` of the
first answer that starts as one), then checks every answer against it and reads every
sequence with a few array operations over the whole run.  An answer that is not exactly
template, digits, tail (an error, a status with headers, a counter's value, JSON spaced or
ordered otherwise) is left for the caller to read one by one; what the bulk reading does take
it reads as ``json.loads`` of each answer would (tests/remote/test_pubacks.py).
"""

from __future__ import annotations

import re
from typing import Optional

import numpy as np

from jetspark.protocol.frames import Frames, byte_windows, parse_ints

__all__ = ["DUPLICATE_TAILS", "read_pubacks", "template_of"]

# What follows the sequence of a duplicate's PubAck: the server's form, and the same without
# the space (as JSON written by a marshaller would be).
DUPLICATE_TAILS = (b',"duplicate": true}', b',"duplicate":true}')

# A template the bulk reading trusts: the stream (and a domain) as plain JSON strings (no
# escapes, no control characters), then "seq":.  Anything else is read one by one.
_TEMPLATE = re.compile(rb'\{"stream":"[^"\\\x00-\x1f]*", ?(?:"domain":"[^"\\\x00-\x1f]*", ?)?"seq":')
_START = b'{"stream":"'


def template_of(data: bytes) -> Optional[bytes]:
    """The bytes of a PubAck up to and including ``"seq":`` when they are a template the bulk
    reading trusts (valid UTF-8, the layouts above), else None."""
    m = _TEMPLATE.match(data)
    if m is None:
        return None
    head = m.group()
    try:
        head.decode()
    except UnicodeDecodeError:
        return None
    return head


def _starts_with(a: np.ndarray, at: np.ndarray, pattern: bytes) -> np.ndarray:
    """Whether ``a[at:at + len(pattern)] == pattern`` for each of ``at`` (False past the end).
    A pattern of eight bytes or more is compared as the little-endian words that cover it
    (the last one overlapping the one before), one gather and compare per word."""
    width = len(pattern)
    fits = at + width <= len(a)
    if len(a) < width:
        return fits
    at = np.where(fits, at, 0)
    if width < 8:
        items = byte_windows(a, width)[at]
        return fits & (items == np.frombuffer(pattern, dtype=np.dtype((np.void, width)))[0])
    words = np.ndarray((len(a) - 7,), dtype="<u8", buffer=a, strides=(1,))
    for k in [*range(0, width - 7, 8), width - 8]:
        fits &= words[at + k] == np.frombuffer(pattern[k : k + 8], dtype="<u8")[0]
    return fits


def read_pubacks(
    buf: bytes, f: Frames, prefix_len: int, rows: int, template: Optional[bytes] = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, Optional[bytes]]:
    """The PubAcks among the frames ``f`` of ``buf`` (MSG/HMSG to ``<inbox>.<row>``, the inbox
    ``prefix_len`` bytes with its dot): (the frames that name a row below ``rows``, those rows,
    their seqs, duplicate flags, whether each answer was read here (``plain``: template,
    digits, ``}`` or a duplicate tail, no headers; the others are for a closer look, and
    their seq and flag mean nothing), and the template used, to pass to the next call)."""
    runs = getattr(f, "runs", None)  # (protocol.ack_frames: the rows and sequences of runs read already)
    if runs:
        done = _from_runs(runs, len(f), prefix_len, rows, template)
        if done is not None:
            return done
    a = np.frombuffer(buf, dtype=np.uint8)
    row, ok = parse_ints(a, f.subj_lo + prefix_len, f.subj_hi)
    ok &= row < rows
    at = np.flatnonzero(ok)
    row = row[at]
    lo, hi = f.data_lo[at], f.data_hi[at]
    plain = f.hdr_lo[at] == lo
    if template is not None and len(at) and not _starts_with(a, lo[:1], template)[0]:
        template = None  # (not the template of the run before: learnt again)
    if template is None:
        starts = np.flatnonzero(plain & _starts_with(a, lo, _START))
        if len(starts):
            k = int(starts[0])
            template = template_of(buf[int(lo[k]) : int(hi[k])])
    if template is None:
        return at, row, np.zeros(len(at), dtype=np.int64), np.zeros(len(at), dtype=bool), plain & False, None
    p = len(template)
    plain &= (hi - lo >= p + 2) & _starts_with(a, lo, template)
    last = a[np.maximum(hi - 1, 0)] if len(a) else np.zeros(len(at), dtype=np.uint8)
    plain &= last == ord("}")
    end = hi - 1
    dup = np.zeros(len(at), dtype=bool)
    # A duplicate's tail ends with "true}": the byte before its "}" is no digit.
    maybe = plain & ((a[np.maximum(hi - 2, 0)] < 48) | (a[np.maximum(hi - 2, 0)] > 57))
    if maybe.any():
        for tail in DUPLICATE_TAILS:
            hit = maybe & ~dup & (hi - lo >= p + 1 + len(tail)) & _starts_with(a, hi - len(tail), tail)
            dup |= hit
            end = np.where(hit, hi - len(tail), end)
    seq_lo = lo + p
    seq, good = parse_ints(a, seq_lo, end)
    # (JSON writes no leading zero: "007" is no number to json.loads, so not read here)
    good &= (end - seq_lo == 1) | (a[np.minimum(seq_lo, len(a) - 1)] != ord("0"))
    plain &= good
    return at, row, seq, dup & plain, plain, template


def _from_runs(
    runs: tuple, n: int, prefix_len: int, rows: int, template: Optional[bytes]
) -> Optional[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, Optional[bytes]]]:
    """``read_pubacks`` of frames that are all runs of ``protocol.ack_frames.scan`` of one
    template, their rows after ``prefix_len`` bytes of the subject (every answer plain: the
    framer checked each against its shape), else None (read as any frames are)."""
    head = runs[0].head
    if sum(r.n for r in runs) != n or any(r.row_at != prefix_len or r.head != head for r in runs):
        return None
    one = len(runs) == 1
    row = runs[0].rows if one else np.concatenate([r.rows for r in runs])
    seq = runs[0].seqs if one else np.concatenate([r.seqs for r in runs])
    dup = np.repeat(np.array([r.duplicate for r in runs], dtype=bool), [r.n for r in runs])
    keep = row < rows
    if keep.all():
        return np.arange(n, dtype=np.int64), row, seq, dup, np.ones(n, dtype=bool), head
    at = np.flatnonzero(keep)
    return at, row[at], seq[at], dup[at], np.ones(len(at), dtype=bool), head if len(at) else template
