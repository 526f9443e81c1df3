"""Checking records against their checksums before they are served.

Each index entry carries the CRC-32 of its record (records.record_crc), and
each check interval of a block (blocks.CHECK_EVERY records) the CRC-32s of
its payload, header and index bytes back to back (``.sum``; the tail
block's open interval: the stream header).  ``verify`` checks a range a
reader is about to serve, an interval at a time (three crc32 calls), record
by record only where the intervals cannot decide, and remembers per block
what passed, so each record is checked once per process.  ``bad_records``
is the record-by-record check that trusts nothing, which repair
(recovery.py, check.py) builds on.  ``read_message``/``read_messages`` read
records for serving, checked on the way.

Depends on the block index (block_index.py) alone, not on the storage
façade that composes it.
"""

from __future__ import annotations

import os
import zlib
from bisect import bisect_right
from typing import Optional

import numpy as np

from jetspark.engine.block_index import BlockIndex
from jetspark.engine.blocks import CHECK_EVERY, Block
from jetspark.engine.records import (
    ENTRY,
    ENTRY_SIZE,
    IDX_DTYPE,
    SID_NONE,
    merge_ranges,
    record_crc,
    runs_of,
)
from jetspark.errors import CorruptStoreError

Record = tuple[str, bytes, bytes, int]  # subject, header block, payload, ts


def verify(
    s: BlockIndex, blk: Block, a: int, b: int, data: Optional[bytes] = None, e: Optional[np.ndarray] = None
) -> None:
    """Check the records a..b of ``blk`` before they are served, once per process.

    Each check interval is checked whole against the block's ``.sum`` (or, for the
    tail block's open interval, the stream header).  Where that cannot decide (no
    checksums, or bytes that no longer matter changed: a removed head), each live
    record is checked against its own checksum.  Ranges that passed are remembered
    per block, so reading them again costs nothing.  ``data``/``e``: the payload
    bytes and index entries of a..b when the caller already read them (saves reading
    twice).
    """
    for lo, hi in blk.verified:
        if lo <= a and b <= hi:
            return
    count = s.block_count(blk)
    K = CHECK_EVERY
    for k in range((a - blk.first) // K, (b - blk.first) // K + 1):
        lo = blk.first + k * K
        hi = min(lo + K, blk.first + count) - 1
        want_lo, want_hi = max(lo, a), min(hi, b)
        if any(v_lo <= want_lo and want_hi <= v_hi for v_lo, v_hi in blk.verified):
            continue
        have = None
        if data is not None and e is not None and a <= lo and hi <= b:
            have = (memoryview(data), int(e["doff"][0]))
        if _interval_ok(s, blk, k, lo, hi, count, have):
            blk.verified = merge_ranges(blk.verified + [(lo, hi)])
        else:
            _verify_records(s, blk, want_lo, want_hi)
            blk.verified = merge_ranges(blk.verified + [(want_lo, want_hi)])


def _interval_ok(s: BlockIndex, blk: Block, k: int, lo: int, hi: int, count: int, have=None) -> bool:
    h = s.header
    is_tail = blk is s.blocks[-1]
    if is_tail and hi == h.last_seq and count % CHECK_EVERY and hi - lo + 1 == count % CHECK_EVERY:
        want: tuple[int, int, int] | None = (h.tail_dcrc, h.tail_hcrc, h.tail_icrc)  # the open interval
    else:
        want = blk.interval_sums(k)
        if want is None:
            return False
    try:
        return interval_crcs(blk, lo, hi, have) == want
    except CorruptStoreError:
        return False


def interval_crcs(blk: Block, lo: int, hi: int, have=None) -> tuple[int, int, int]:
    """CRC-32s of the payload, header and index bytes of records lo..hi, back to back.
    ``have``: (payload bytes, their file offset) already read, used when they cover lo..hi."""
    raw = os.pread(blk.ifd, (hi - lo + 1) * ENTRY_SIZE, (lo - blk.first) * ENTRY_SIZE)
    if len(raw) != (hi - lo + 1) * ENTRY_SIZE:
        raise CorruptStoreError(
            f"{blk.path}.idx: the index entries of {lo}..{hi} are missing (truncated)", f"{blk.path}.idx"
        )
    first, last = ENTRY.unpack_from(raw, 0), ENTRY.unpack_from(raw, len(raw) - ENTRY_SIZE)
    d0, d1 = first[1], last[1] + last[3]
    h0, h1 = first[2], last[2] + last[4]
    if d1 < d0 or h1 < h0:
        raise CorruptStoreError(f"{blk.path}.idx: the index entries of {lo}..{hi} are out of order", f"{blk.path}.idx")
    if have is not None and have[1] <= d0 and d1 - have[1] <= len(have[0]):
        dcrc = zlib.crc32(have[0][d0 - have[1] : d1 - have[1]])
    else:
        dcrc = zlib.crc32(blk.read_data(d0, d1 - d0))
    hcrc = zlib.crc32(blk.read_hdrs(h0, h1 - h0)) if h1 > h0 else 0
    return dcrc, hcrc, zlib.crc32(raw)


def _verify_records(s: BlockIndex, blk: Block, a: int, b: int) -> None:
    """Each live record of a..b against its own checksum; raises on the first bad one."""
    bad = bad_records(s, a, b)
    if len(bad):
        seq = int(bad[0])
        raise CorruptStoreError(
            f"{blk.path}.dat: message {seq} fails its checksum ({len(bad)} of {b - a + 1} records in {a}..{b}); "
            "check_stream(name, repair=True) keeps the intact ones",
            f"{blk.path}.dat",
        )


def bad_records(s: BlockIndex, a: int, b: int) -> np.ndarray:
    """The live, stored sequences in a..b whose record is missing, out of bounds or fails
    its checksum (ascending).  Trusts nothing in the index entries it checks."""
    if a > b:
        return np.zeros(0, dtype=np.int64)
    out = []
    seq = a
    blocks, firsts = s.blocks, s.block_firsts
    while seq <= b:
        i = bisect_right(firsts, seq) - 1
        if i < 0:  # no block file holds these sequences
            nxt = firsts[0] if firsts else b + 1
            out.append(np.arange(seq, min(b, nxt - 1) + 1, dtype=np.int64))
            seq = nxt
            continue
        blk = blocks[i]
        end = b if i + 1 >= len(blocks) else min(b, blocks[i + 1].first - 1)
        out.append(_bad_in_block(blk, seq, end, len(s.subject_table.names)))
        seq = end + 1
    bad = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    return bad[~s.removed.mask(a, b)[bad - a]] if len(bad) else bad


def _bad_in_block(blk: Block, lo: int, hi: int, n_subjects: int) -> np.ndarray:
    have = os.fstat(blk.ifd).st_size // ENTRY_SIZE - (lo - blk.first)
    missing = np.arange(lo + max(have, 0), hi + 1, dtype=np.int64)
    hi = min(hi, lo + have - 1)
    if hi < lo:
        return missing
    e = np.frombuffer(os.pread(blk.ifd, (hi - lo + 1) * ENTRY_SIZE, (lo - blk.first) * ENTRY_SIZE), dtype=IDX_DTYPE)
    stored = e["sid"] != SID_NONE
    dsize, hsize = os.fstat(blk.dfd).st_size, os.fstat(blk.hfd).st_size
    dend = e["doff"].astype(np.int64) + e["dlen"]
    hend = e["hoff"].astype(np.int64) + e["hlen"]
    inside = stored & (dend <= dsize) & (hend <= hsize) & (e["sid"] < max(n_subjects, 1))
    ok = ~stored
    if inside.any():
        k = np.flatnonzero(inside)
        d0, d1 = int(e["doff"][k].min()), int(dend[k].max())
        h0, h1 = int(e["hoff"][k].min()), int(hend[k].max())
        data = memoryview(os.pread(blk.dfd, d1 - d0, d0))
        hdr = memoryview(os.pread(blk.hfd, h1 - h0, h0)) if h1 > h0 else memoryview(b"")
        for j in k.tolist():
            r = e[j]
            ds, hs = int(r["doff"]) - d0, int(r["hoff"]) - h0
            crc = record_crc(
                lo + j, int(r["ts"]), int(r["sid"]), hdr[hs : hs + int(r["hlen"])], data[ds : ds + int(r["dlen"])]
            )
            ok[j] = crc == int(r["crc"])
    return np.concatenate([np.flatnonzero(~ok) + lo, missing]).astype(np.int64)


# ---------------------------------------------------------------------- reads that serve records


def read_message(s: BlockIndex, seq: int) -> Record:
    """(subject, header block, payload, ts) of a live sequence, checked against its own checksum."""
    e = s.entries(seq, seq)[0]
    blk = s.blocks[s.block_index(seq)]
    hdr = blk.read_hdrs(int(e["hoff"]), int(e["hlen"]))
    data = blk.read_data(int(e["doff"]), int(e["dlen"]))
    sid = int(e["sid"])
    if record_crc(seq, int(e["ts"]), sid, hdr, data) != int(e["crc"]):
        raise CorruptStoreError(f"{blk.path}.dat: message {seq} fails its checksum", f"{blk.path}.dat")
    return s.subject_table.names[sid], hdr, data, int(e["ts"])


def read_messages(s: BlockIndex, seqs: list[int]) -> list[Record]:
    """(subject, header block, payload, ts) for each sequence, reading each run of
    consecutive sequences with one pread per file."""
    if seqs and seqs[-1] - seqs[0] == len(seqs) - 1 and all(b > a for a, b in zip(seqs, seqs[1:])):
        return read_run(s, seqs[0], seqs[-1])  # the common case: new deliveries in a row
    found: dict[int, Record] = {}
    for a, b in runs_of(np.unique(np.asarray(seqs, dtype=np.int64))):
        for q, rec in zip(range(a, b + 1), read_run(s, a, b)):
            found[q] = rec
    return [found[q] for q in seqs]


def read_run(s: BlockIndex, a: int, b: int) -> list[Record]:
    """The records a..b, verified (``verify``) as they are read."""
    out: list[Record] = []
    names = s.subject_table.names
    for blk, lo, hi in s.block_spans(a, b):
        e = s.entries(lo, hi)
        d0, h0 = int(e["doff"][0]), int(e["hoff"][0])
        data = blk.read_data(d0, int(e["doff"][-1]) + int(e["dlen"][-1]) - d0)
        verify(s, blk, lo, hi, data, e)
        hdr = blk.read_hdrs(h0, int(e["hoff"][-1]) + int(e["hlen"][-1]) - h0)
        if not hdr:
            out.extend(
                (names[sid] if sid != SID_NONE else "", b"", data[doff - d0 : doff - d0 + dlen], ts)
                for ts, doff, _, dlen, _, sid, _ in e.tolist()
            )
        else:
            out.extend(
                (
                    names[sid] if sid != SID_NONE else "",
                    hdr[hoff - h0 : hoff - h0 + hlen],
                    data[doff - d0 : doff - d0 + dlen],
                    ts,
                )
                for ts, doff, hoff, dlen, hlen, sid, _ in e.tolist()
            )
    return out
