"""The record format every stream file shares, and the checksums that guard it."""

from __future__ import annotations

import hashlib
import struct
import zlib

import numpy as np

IDX_DTYPE = np.dtype(
    [("ts", "<i8"), ("doff", "<u8"), ("hoff", "<u8"), ("dlen", "<u4"), ("hlen", "<u4"), ("sid", "<u4"), ("crc", "<u4")]
)
ENTRY = struct.Struct("<qQQIIII")
ENTRY_SIZE = ENTRY.size
assert ENTRY_SIZE == IDX_DTYPE.itemsize == 40
SID_NONE = 0xFFFFFFFF  # a sequence that was consumed but nothing stored (interest retention)

# Dedup journal records end with the CRC-32 of the bytes before it: a damaged id must
# neither drop a new message as a duplicate nor let a re-sent one in (see checked_records).
DEDUP_DTYPE = np.dtype([("ts", "<i8"), ("seq", "<u8"), ("h", "V16"), ("crc", "<u4")])
DEDUP = struct.Struct("<qQ16sI")  # ts, seq, blake2b(id), crc
RANGE = struct.Struct("<qQ16sQQI")  # ts, first seq, blake2b(prefix), first index, last index, crc


def sealed(st: struct.Struct, *fields) -> bytes:
    """One journal record of ``st`` (whose last field is the crc) with its checksum."""
    body = st.pack(*fields, 0)[:-4]
    return body + struct.pack("<I", zlib.crc32(body))


def record_checks(raw, size: int) -> np.ndarray:
    """True for each ``size``-byte record of ``raw`` whose trailing CRC-32 holds."""
    n = len(raw) // size
    if not n:
        return np.zeros(0, dtype=bool)
    mv = memoryview(raw)
    starts = range(0, n * size, size)
    got = np.fromiter(
        map(zlib.crc32, map(mv.__getitem__, map(slice, starts, range(size - 4, n * size, size)))),
        dtype=np.uint32,
        count=n,
    )
    want = np.frombuffer(raw, dtype=np.uint8)[: n * size].reshape(n, size)[:, size - 4 :].copy().view("<u4").ravel()
    return got == want


def msgid_hash(msg_id: str) -> bytes:
    return hashlib.blake2b(msg_id.encode(), digest_size=16).digest()


_M32 = 0xFFFFFFFF
_MIX = (0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F)


def seq_mix(seq, ts, sid):
    """Binds a record's checksum to its sequence, time and subject (works on ints and uint64 arrays)."""
    return (seq * _MIX[0] + (ts & _M32) * _MIX[1] + (ts >> 32) * _MIX[2] + sid * _MIX[3]) & _M32


def rotl1(x):
    """Rotate a 32-bit value left by one (ints and uint64 arrays)."""
    return ((x << 1) | (x >> 31)) & _M32


def record_crc(seq: int, ts: int, sid: int, hdr: bytes | memoryview, data: bytes | memoryview) -> int:
    """A record's checksum: crc32 of the payload, xor the header block's crc32 rotated
    (so a header and a payload cannot stand in for each other), xor the record's
    (seq, ts, subject) mix.  Without headers it is crc32(payload) ^ mix."""
    return zlib.crc32(data) ^ rotl1(zlib.crc32(hdr)) ^ seq_mix(seq, ts, sid)


def record_crcs(
    seqs: np.ndarray, ts: np.ndarray, sids: np.ndarray, hdr, hdr_offsets, data, data_offsets, hdr_crcs=None
) -> np.ndarray:
    """record_crc for a run of records: the crc32 calls iterate in C (map), the rest in NumPy.
    ``hdr_crcs``: the header blocks' crc32s when the caller already has them."""
    n = len(seqs)
    dv = memoryview(data)
    d = data_offsets.tolist()
    crc = np.fromiter(map(zlib.crc32, map(dv.__getitem__, map(slice, d[:-1], d[1:]))), dtype=np.uint32, count=n).astype(
        np.uint64
    )
    if hdr_crcs is None and hdr_offsets[-1] > hdr_offsets[0]:
        hv = memoryview(hdr)
        h = hdr_offsets.tolist()
        hdr_crcs = np.fromiter(
            map(zlib.crc32, map(hv.__getitem__, map(slice, h[:-1], h[1:]))), dtype=np.uint32, count=n
        )
    if hdr_crcs is not None:
        crc ^= rotl1(np.asarray(hdr_crcs, dtype=np.uint64))
    mix = seq_mix(seqs.astype(np.uint64), ts.astype(np.uint64), sids.astype(np.uint64))
    return (crc ^ mix).astype(np.uint32)


def template_crcs(head: bytes, tail: bytes, digits: np.ndarray) -> np.ndarray:
    """crc32 of ``head + digits + tail`` for every row of a (rows, d) array of digit values.

    CRC-32 is affine over GF(2): for messages of one length, the crc of a message
    differing from a base message in some bytes is the base's crc xor the effect
    of each differing byte alone.  So a table of d x 10 crcs replaces one crc32
    call per row.
    """
    rows, d = digits.shape
    base = bytearray(head + b"0" * d + tail)
    c0 = zlib.crc32(base)
    table = np.zeros((d, 10), dtype=np.uint32)
    for j in range(d):
        for v in range(1, 10):
            base[len(head) + j] = 48 + v
            table[j, v] = zlib.crc32(base) ^ c0
        base[len(head) + j] = 48
    out = np.full(rows, c0, dtype=np.uint32)
    for j in range(d):
        out ^= table[j, digits[:, j]]
    return out


def merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of inclusive ranges, dropping empty ones."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(r for r in ranges if r[0] <= r[1]):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def runs_of(seqs: np.ndarray) -> list[tuple[int, int]]:
    """Sorted unique sequences -> inclusive (first, last) runs."""
    if not len(seqs):
        return []
    seqs = np.asarray(seqs, dtype=np.int64)
    breaks = np.flatnonzero(np.diff(seqs) != 1)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [len(seqs) - 1]])
    return [(int(seqs[s]), int(seqs[e])) for s, e in zip(starts, ends)]
