"""The stream header: two checksummed slots in a shared 4 KiB mapping, and which is live.

A writer fills the inactive slot and then flips the active index with one
aligned 8-byte store, so a reader (or a process recovering after a crash)
always finds a whole slot.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Optional

MAGIC = b"JSPKST01"
ACTIVE_OFF = 8
SLOT_OFF = (64, 1024)
# 16 u64 fields, the last stored message's Nats-Msg-Id (u16 length + 400 bytes), the
# checksums of the tail block's open check interval (3 u32, see blocks.CHECK_EVERY), then a u32 crc.
MAX_LAST_ID = 400
SLOT = struct.Struct(f"<16QH{MAX_LAST_ID}s3I")
CRC = struct.Struct("<I")
U64 = struct.Struct("<Q")
ACTIVE = ((0).to_bytes(8, "little"), (1).to_bytes(8, "little"))
FIELDS = (
    "commit", "first_seq", "last_seq", "last_ts", "msgs", "bytes", "num_subjects",
    "ops_len", "subj_len", "dedup_len", "cfg_gen", "deleted", "held", "cons_gen", "ranges_len", "jgen",
)  # fmt: skip


@dataclass
class Header:
    commit: int = 0
    first_seq: int = 1  # the floor: every sequence below it is gone
    last_seq: int = 0
    last_ts: int = 0
    msgs: int = 0
    bytes: int = 0
    num_subjects: int = 0
    ops_len: int = 0
    subj_len: int = 0
    dedup_len: int = 0
    cfg_gen: int = 0
    deleted: int = 0
    held: int = 0  # 1 once the stream has held (or skipped) a message, or was purged
    cons_gen: int = 0  # bumped when a consumer is added, changed, deleted or its log rewritten
    ranges_len: int = 0  # committed length of the dedup_ranges journal
    # Journal generation: bumped by each commit that replaces a journal file (ops, dedup,
    # dedup_ranges) with a compacted one; the current file of each journal is the one
    # with the highest generation <= jgen (see StreamStorage._open_journals).  0: the
    # original names, which is also what stores written before compaction existed hold.
    jgen: int = 0
    last_id: bytes = b""  # Nats-Msg-Id of the last stored message (Nats-Expected-Last-Msg-Id)
    # CRC-32s of the payload, header and index bytes of the tail block's records since its
    # last checkpoint: what a reader checks that open interval against (StreamStorage.verify).
    tail_dcrc: int = 0
    tail_hcrc: int = 0
    tail_icrc: int = 0


def pack_slot(h: Header) -> bytes:
    """A header slot's bytes, its checksum last."""
    raw = SLOT.pack(
        h.commit, h.first_seq, h.last_seq, h.last_ts, h.msgs, h.bytes, h.num_subjects, h.ops_len,
        h.subj_len, h.dedup_len, h.cfg_gen, h.deleted, h.held, h.cons_gen, h.ranges_len, h.jgen, len(h.last_id), h.last_id,
        h.tail_dcrc, h.tail_hcrc, h.tail_icrc,
    )
    return raw + CRC.pack(zlib.crc32(raw))


def unpack_slot(raw: bytes) -> Optional[Header]:
    """The header a slot holds, or None when its checksum fails."""
    (crc,) = CRC.unpack_from(raw, SLOT.size)
    if zlib.crc32(raw[: SLOT.size]) != crc:
        return None
    v = SLOT.unpack_from(raw)
    return Header(*v[: len(FIELDS)], last_id=v[17][: v[16]], tail_dcrc=v[18], tail_hcrc=v[19], tail_icrc=v[20])
