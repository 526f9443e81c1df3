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

DEDUP_DTYPE = np.dtype([("ts", "<i8"), ("seq", "<u8"), ("h", "V16")])
DEDUP = struct.Struct("<qQ16s")
RANGE = struct.Struct("<qQ16sQQ")  # ts, first seq, blake2b(prefix), first index, last index



def msgid_hash(msg_id: str) -> bytes:
    return hashlib.blake2b(msg_id.encode(), digest_size=16).digest()


_M32 = 0xFFFFFFFF
_MIX = (0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F)


def _mix(seq, ts, sid):
    """Binds a record's checksum to its sequence, time and subject (works on ints and uint64 arrays)."""
    return (seq * _MIX[0] + (ts & _M32) * _MIX[1] + (ts >> 32) * _MIX[2] + sid * _MIX[3]) & _M32


def record_crc(seq: int, ts: int, sid: int, hdr: bytes, data: bytes) -> int:
    """crc32 of header block and payload, xor the record's (seq, ts, subject) mix."""
    return zlib.crc32(data, zlib.crc32(hdr)) ^ _mix(seq, ts, sid)


def record_crcs(seqs: np.ndarray, ts: np.ndarray, sids: np.ndarray, hdr, hdr_offsets, data, data_offsets) -> np.ndarray:
    """record_crc for a run of records; the crc32 calls iterate in C (map), the mix in NumPy."""
    n = len(seqs)
    dv, hv = memoryview(data), memoryview(hdr)
    d = data_offsets.tolist()
    if hdr_offsets[-1] > hdr_offsets[0]:
        h = hdr_offsets.tolist()
        hcrc = map(zlib.crc32, map(hv.__getitem__, map(slice, h[:-1], h[1:])))
        crc = np.fromiter(map(zlib.crc32, map(dv.__getitem__, map(slice, d[:-1], d[1:])), hcrc), dtype=np.uint32, count=n)
    else:
        crc = np.fromiter(map(zlib.crc32, map(dv.__getitem__, map(slice, d[:-1], d[1:]))), dtype=np.uint32, count=n)
    mix = _mix(seqs.astype(np.uint64), ts.astype(np.uint64), sids.astype(np.uint64)).astype(np.uint32)
    return crc ^ mix


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of inclusive ranges, dropping empty ones."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(r for r in ranges if r[0] <= r[1]):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _runs(seqs: np.ndarray) -> list[tuple[int, int]]:
    """Sorted unique sequences -> inclusive (first, last) runs."""
    if not len(seqs):
        return []
    seqs = np.asarray(seqs, dtype=np.int64)
    breaks = np.flatnonzero(np.diff(seqs) != 1)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [len(seqs) - 1]])
    return [(int(seqs[s]), int(seqs[e])) for s, e in zip(starts, ends)]
