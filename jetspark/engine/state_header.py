"""The stream's state header: the file ``state``, two checksummed slots in a shared 4 KiB
mapping, and the index of the live one.

It owns the one thing every process of a stream agrees on: the committed
``StreamHeader`` (first and last sequence, counts, the committed length of
every journal, the journal generation, ...).  A writer fills the inactive
slot and then flips the active index with one aligned 8-byte store, so a
reader (or a process recovering after a crash) always finds a whole slot;
it then copies the same header into the other slot (the mirror), so one
damaged slot never rolls a commit back.  Kept apart from storage.py because
this is the stream's commit point: nothing else in the files is trusted
past what the live slot says.
"""

from __future__ import annotations

import builtins
import logging
import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from jetspark.engine import diskio
from jetspark.errors import CorruptStoreError

log = logging.getLogger("jetspark")

STATE_SIZE = 4096
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
class StreamHeader:
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
    # with the highest generation <= jgen (see journals.Journals.open_generation).  0: the
    # original names, which is also what stores written before compaction existed hold.
    jgen: int = 0
    # Nats-Msg-Id of the last stored message (Nats-Expected-Last-Msg-Id); builtins: a field
    # above is named bytes.
    last_id: builtins.bytes = b""
    # CRC-32s of the payload, header and index bytes of the tail block's records since its
    # last checkpoint: what a reader checks that open interval against (verify.verify).
    tail_dcrc: int = 0
    tail_hcrc: int = 0
    tail_icrc: int = 0


def pack_slot(h: StreamHeader) -> bytes:
    """A header slot's bytes, its checksum last."""
    raw = SLOT.pack(
        h.commit,
        h.first_seq,
        h.last_seq,
        h.last_ts,
        h.msgs,
        h.bytes,
        h.num_subjects,
        h.ops_len,
        h.subj_len,
        h.dedup_len,
        h.cfg_gen,
        h.deleted,
        h.held,
        h.cons_gen,
        h.ranges_len,
        h.jgen,
        len(h.last_id),
        h.last_id,
        h.tail_dcrc,
        h.tail_hcrc,
        h.tail_icrc,
    )
    return raw + CRC.pack(zlib.crc32(raw))


def unpack_slot(raw: bytes) -> Optional[StreamHeader]:
    """The header a slot holds, or None when its checksum fails."""
    (crc,) = CRC.unpack_from(raw, SLOT.size)
    if zlib.crc32(raw[: SLOT.size]) != crc:
        return None
    v = SLOT.unpack_from(raw)
    # (mypy cannot tell that v[: len(FIELDS)] stops before last_id)
    return StreamHeader(*v[: len(FIELDS)], last_id=v[17][: v[16]], tail_dcrc=v[18], tail_hcrc=v[19], tail_icrc=v[20])  # type: ignore[misc]


class HeaderFile:
    """The ``state`` file of one stream, mapped: reads the live slot, publishes a new one."""

    __slots__ = ("path", "fd", "mm", "slot_damaged")

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self.mm: Optional[mmap.mmap] = None
        self.slot_damaged = False  # the active slot failed its checksum; the next writer rewrites it

    def written(self) -> bool:
        """Does the file hold a header (its magic is written last)?"""
        return os.fstat(self.fd).st_size >= STATE_SIZE and os.pread(self.fd, 8, 0) == MAGIC

    def create(self, has_data: bool) -> None:
        """A new stream's header (under the lock).  A missing or short header beside
        stored data is damage, not a new stream: starting empty would hide every message."""
        path = self.path
        if os.pread(self.fd, STATE_SIZE, 0).strip(b"\0") or has_data:
            raise CorruptStoreError(
                f"{path}: the stream header is missing or truncated ({os.fstat(self.fd).st_size} of "
                f"{STATE_SIZE} bytes) while the stream holds data; check_stream(name, repair=True) rebuilds it "
                "from the blocks",
                path,
            )
        diskio.allocate(self.fd, 0, STATE_SIZE, path)
        mm = mmap.mmap(self.fd, STATE_SIZE)
        try:
            for off in SLOT_OFF:
                mm[off : off + SLOT.size + 4] = pack_slot(StreamHeader())
            mm[ACTIVE_OFF : ACTIVE_OFF + 8] = ACTIVE[0]
            mm[0:8] = MAGIC  # last: a header without its magic is not one
        finally:
            mm.close()

    def map(self) -> None:
        # The header is stored into through a mapping: its page must be backed (see diskio).
        diskio.allocate(self.fd, 0, STATE_SIZE, self.path)
        self.mm = mm = mmap.mmap(self.fd, STATE_SIZE)
        if mm[0:8] != MAGIC:
            raise CorruptStoreError(f"{self.path}: not a jetspark stream header (bad magic)", self.path)

    def _mapped(self) -> mmap.mmap:
        """The mapping: map() makes it when the stream opens, before any read or write."""
        mm = self.mm
        assert mm is not None, "the stream header is used before map()"
        return mm

    def active(self) -> int:
        """Which slot is live (0 or 1)."""
        return self._mapped()[ACTIVE_OFF] & 1

    def read_slot(self, i: int) -> Optional[StreamHeader]:
        off = SLOT_OFF[i]
        return unpack_slot(self._mapped()[off : off + SLOT.size + 4])

    def write_slot(self, i: int, h: StreamHeader) -> None:
        off = SLOT_OFF[i]
        self._mapped()[off : off + SLOT.size + 4] = pack_slot(h)

    def read(self) -> StreamHeader:
        """The committed header (from the mirror when the live slot is damaged)."""
        mm = self.mm
        assert mm is not None, "the stream header is read before map()"
        for _ in range(1000):
            active = int.from_bytes(mm[ACTIVE_OFF : ACTIVE_OFF + 8], "little")
            h = self.read_slot(active & 1)
            if h is not None:
                return h
            # A writer flipped twice while we read; try again.
        # The active slot stays bad: it is damaged.  Every commit also copies the new
        # header into the other slot (see publish), so that one holds the same commit.
        h = self.read_slot(1 - (active & 1))
        if h is None:
            raise CorruptStoreError(f"{self.path}: both header slots fail their checksum", self.path)
        if not self.slot_damaged:
            log.warning(
                "stream header %s: the active slot fails its checksum; using its mirror (commit %d)",
                self.path,
                h.commit,
            )
        self.slot_damaged = True  # the next writer rewrites it (see storage._Locked)
        return h

    def repair(self) -> None:
        """Rewrite a damaged active slot from its mirror (under the lock)."""
        active = self.active()
        if self.read_slot(active) is None:
            good = self.read_slot(1 - active)
            if good is not None:
                with diskio.io_errors(self.path, "repairing the header"):
                    self.write_slot(active, good)
                log.warning("stream header %s: rewrote the damaged active slot from its mirror", self.path)
        self.slot_damaged = False

    def committed_counter(self) -> int:
        """The active slot's commit counter; only meaningful while holding the lock (no writer can race)."""
        mm = self.mm  # (inline: this runs at every lock; _mapped() is a call more)
        assert mm is not None, "the stream header is read before map()"
        return U64.unpack_from(mm, SLOT_OFF[mm[ACTIVE_OFF] & 1])[0]

    def publish(self, raw: bytes, flush: bool) -> None:
        """Make the packed slot ``raw`` the live header: fill the inactive slot, flip to it,
        then mirror it into the other slot.  Raises OSError as it comes."""
        mm = self.mm
        assert mm is not None, "the stream header is written before map()"
        active = mm[ACTIVE_OFF] & 1
        off = SLOT_OFF[1 - active]
        mm[off : off + len(raw)] = raw
        mm[ACTIVE_OFF : ACTIVE_OFF + 8] = ACTIVE[1 - active]
        off = SLOT_OFF[active]
        mm[off : off + len(raw)] = raw
        if flush:
            mm.flush()

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        if self.mm is not None:
            try:
                self.mm.close()
            except (BufferError, ValueError):
                pass
