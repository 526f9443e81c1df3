"""A block: one stretch of a stream's sequences in three files (.idx, .dat, .hdr)."""

from __future__ import annotations

import mmap
import os
from pathlib import Path


class Block:
    """One block's three files; the tail block is also mapped for the writer."""

    __slots__ = ("first", "count", "dlen", "hlen", "path", "ifd", "dfd", "hfd", "imm", "dmm", "dcap")

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
        self.imm = self.dmm = None
        self.dcap = 0

    def map_for_writing(self, index_capacity: int, data_capacity: int) -> None:
        """Map the index and payload files at their full block capacity.

        A store into a shared mapping lands in the page cache just as a
        pwrite() does (it survives the process being killed, and readers'
        pread() sees it), without a system call per message.  The files are
        sparse: unwritten capacity takes no disk space.
        """
        icap = index_capacity
        if os.fstat(self.ifd).st_size < icap:
            os.ftruncate(self.ifd, icap)
        self.imm = mmap.mmap(self.ifd, icap)
        self.dcap = max(data_capacity, os.fstat(self.dfd).st_size)
        if os.fstat(self.dfd).st_size < self.dcap:
            os.ftruncate(self.dfd, self.dcap)
        self.dmm = mmap.mmap(self.dfd, self.dcap)

    def close(self) -> None:
        for mm in (self.imm, self.dmm):
            if mm is not None:
                try:
                    mm.close()
                except (BufferError, ValueError):
                    pass
        self.imm = self.dmm = None
        for fd in (self.ifd, self.dfd, self.hfd):
            try:
                os.close(fd)
            except OSError:
                pass

    def unlink(self) -> None:
        for ext in (".idx", ".dat", ".hdr"):
            try:
                os.unlink(f"{self.path}{ext}")
            except FileNotFoundError:
                pass
