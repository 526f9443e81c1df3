"""The subject dictionary: the file ``subjects`` and this process's copy of it.

Every index entry names its subject by a small id (``sid``), the subject's
position in the dictionary; the file appends each new subject once::

    u16 len | u32 crc | utf-8

so ids never change and a reader only reads what was appended since it last
looked (up to the header's committed ``subj_len``).  The table also keeps
each subject's UTF-8 length, which the byte accounting of every append and
removal needs (docs/semantics.md §3.1).
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import numpy as np

from jetspark.engine import diskio
from jetspark.engine.journals import read_committed
from jetspark.errors import CorruptStoreError

SUBJECT_RECORD = struct.Struct("<HI")  # len, crc of the utf-8 bytes that follow


class SubjectTable:
    """Subject ids <-> names, as far as this process has read the file."""

    __slots__ = ("fd", "path", "names", "ids", "lens", "len_list", "read_upto")

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path
        self.clear()

    def clear(self) -> None:
        self.names: list[str] = []  # by id
        self.ids: dict[str, int] = {}
        self.lens = np.zeros(0, dtype=np.int64)  # UTF-8 length by id, for vectorised accounting
        self.len_list: list[int] = []  # the same, for scalar lookups (cheaper than NumPy's)
        self.read_upto = 0

    def read(self, upto: int) -> None:
        """Learn the subjects committed up to byte ``upto``."""
        pos0 = self.read_upto
        if upto <= pos0:
            return
        raw = read_committed(self.fd, upto - pos0, pos0, self.path)
        pos, lens = 0, []
        while pos < len(raw):
            if pos + SUBJECT_RECORD.size > len(raw):
                raise CorruptStoreError(f"{self.path}: truncated record", self.path)
            n, crc = SUBJECT_RECORD.unpack_from(raw, pos)
            b = raw[pos + SUBJECT_RECORD.size : pos + SUBJECT_RECORD.size + n]
            if len(b) != n or zlib.crc32(b) != crc:
                raise CorruptStoreError(f"{self.path}: record at {pos0 + pos} fails its checksum", self.path)
            s = b.decode()
            self.ids[s] = len(self.names)
            self.names.append(s)
            lens.append(n)
            pos += SUBJECT_RECORD.size + n
        self.lens = np.concatenate([self.lens, np.array(lens, dtype=np.int64)])
        self.len_list.extend(lens)
        self.read_upto = upto

    def add(self, subject: str, at: int) -> int:
        """Append a subject not in the table at byte ``at`` (under the lock); returns the
        record's length (the caller moves the header's subj_len)."""
        b = subject.encode()
        rec = SUBJECT_RECORD.pack(len(b), zlib.crc32(b)) + b
        diskio.pwrite(self.fd, rec, at, self.path)
        self.read_upto = at + len(rec)
        self.ids[subject] = len(self.names)
        self.names.append(subject)
        self.lens = np.append(self.lens, len(b))
        self.len_list.append(len(b))
        return len(rec)

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
