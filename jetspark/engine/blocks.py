"""A block: one stretch of a stream's sequences in files .idx, .dat, .hdr and .sum.

``.sum`` holds, for every ``CHECK_EVERY`` records of the block (a check
interval), the CRC-32s of the interval's payload, header and index bytes,
each computed over the bytes back to back.  A reader checks a whole interval
with three ``crc32`` calls instead of one per record; the tail block's open
interval is checked against the checksums in the stream header.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from jetspark.engine import diskio
from jetspark.errors import CorruptStoreError, StoreFullError

# Mapped files get disk space this far ahead of the writer (see reserve_*): a store
# into a mapped page the filesystem cannot back would be a SIGBUS, not an error.
INDEX_CHUNK = 64 << 10
DATA_CHUNK = 1 << 20

CHECK_EVERY = 4096  # records per check interval
SUM = struct.Struct("<III")  # payload, header, index CRC-32 of one interval


class Block:
    """One block's three files; the tail block is also mapped for the writer."""

    __slots__ = (
        "first", "count", "dlen", "hlen", "path", "ifd", "dfd", "hfd", "sfd", "imm", "dmm", "dcap",
        "ialloc", "dalloc", "verified",
    )  # fmt: skip

    def __init__(self, path: Path, first: int, create: bool = False) -> None:
        self.path = path
        self.first = first
        self.count = 0
        self.dlen = 0
        self.hlen = 0
        # Only the writer creates block files: a reader racing an unlink must not bring one back.
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        self.ifd = os.open(f"{path}.idx", flags, 0o644)
        self.dfd = os.open(f"{path}.dat", flags, 0o644)
        self.hfd = os.open(f"{path}.hdr", flags, 0o644)
        try:
            self.sfd = os.open(f"{path}.sum", flags, 0o644)
        except FileNotFoundError:
            self.sfd = -1  # no interval checksums: readers check each record's own
        self.imm: mmap.mmap | None = None
        self.dmm: mmap.mmap | None = None
        self.dcap = 0
        self.ialloc = self.dalloc = 0  # bytes of the mapped files known to have disk space
        self.verified: list[tuple[int, int]] = []  # sequence ranges whose checksums held (see verify.verify)

    def checkpoint(self, k: int, crcs: tuple[int, int, int]) -> None:
        """Record interval ``k``'s checksums (before the header commit that covers it)."""
        diskio.pwrite(self.sfd, SUM.pack(*crcs), k * SUM.size, f"{self.path}.sum")

    def interval_sums(self, k: int) -> "tuple[int, int, int] | None":
        """Interval ``k``'s recorded checksums, or None when the file does not have them."""
        if self.sfd < 0:
            return None
        raw = os.pread(self.sfd, SUM.size, k * SUM.size)
        return SUM.unpack(raw) if len(raw) == SUM.size else None

    def read_data(self, off: int, n: int) -> bytes:
        """``n`` payload bytes at ``off`` (CorruptStoreError when the file is shorter)."""
        return _pread_bounded(self.dfd, n, off, f"{self.path}.dat") if n else b""

    def read_hdrs(self, off: int, n: int) -> bytes:
        """``n`` header-block bytes at ``off`` (CorruptStoreError when the file is shorter)."""
        return _pread_bounded(self.hfd, n, off, f"{self.path}.hdr") if n else b""

    def reserve_index(self, end: int) -> None:
        """Make sure index bytes up to ``end`` have disk space before they are stored into."""
        if end > self.ialloc:
            assert self.imm is not None, "reserve_index before map_for_writing"
            self.ialloc = _reserve(
                self.ifd, self.ialloc, end, min(self.ialloc + INDEX_CHUNK, len(self.imm)), f"{self.path}.idx"
            )

    def reserve_data(self, end: int) -> None:
        """Make sure payload bytes up to ``end`` (within the mapping) have disk space."""
        if end > self.dalloc:
            self.dalloc = _reserve(
                self.dfd, self.dalloc, end, min(self.dalloc + DATA_CHUNK, self.dcap), f"{self.path}.dat"
            )

    def map_for_writing(self, index_capacity: int, data_capacity: int) -> None:
        """Map the index and payload files at their full block capacity.

        A store into a shared mapping lands in the page cache just as a
        pwrite() does (it survives the process being killed, and readers'
        pread() sees it), without a system call per message.  The files are
        sparse: capacity takes disk space only as reserve_index/reserve_data
        allocate it, a chunk ahead of the writer.
        """
        icap = index_capacity
        with diskio.io_errors(f"{self.path}.idx", "mapping the block"):
            if os.fstat(self.ifd).st_size < icap:
                os.ftruncate(self.ifd, icap)
            self.imm = mmap.mmap(self.ifd, icap)
            self.dcap = max(data_capacity, os.fstat(self.dfd).st_size)
            if os.fstat(self.dfd).st_size < self.dcap:
                os.ftruncate(self.dfd, self.dcap)
            self.dmm = mmap.mmap(self.dfd, self.dcap)
        self.ialloc = self.dalloc = 0

    def close(self) -> None:
        for mm in (self.imm, self.dmm):
            if mm is not None:
                try:
                    mm.close()
                except (BufferError, ValueError):
                    pass
        self.imm = self.dmm = None
        self.ialloc = self.dalloc = 0
        for fd in (self.ifd, self.dfd, self.hfd, self.sfd):
            if fd < 0:
                continue
            try:
                os.close(fd)
            except OSError:
                pass

    def unlink(self) -> None:
        for ext in (".idx", ".dat", ".hdr", ".sum"):
            try:
                os.unlink(f"{self.path}{ext}")
            except FileNotFoundError:
                pass


def _reserve(fd: int, have: int, need: int, ahead: int, path: str) -> int:
    """Allocate up to ``ahead`` (at least ``need``); on a nearly full disk, just ``need``.
    Returns the new allocated length."""
    want = max(need, ahead)
    try:
        diskio.allocate(fd, have, want - have, path)
    except StoreFullError:
        if want == need:
            raise
        diskio.allocate(fd, have, need - have, path)
        want = need
    return want


def _pread_bounded(fd: int, n: int, off: int, path: str) -> bytes:
    # Bounds first: a damaged length must not become a gigabyte read.
    raw = os.pread(fd, n, off) if off + n <= os.fstat(fd).st_size else b""
    if len(raw) != n:
        raise CorruptStoreError(
            f"{path}: the file ends at byte {off + len(raw)} but a record reaches byte {off + n} (truncated)", path
        )
    return raw
