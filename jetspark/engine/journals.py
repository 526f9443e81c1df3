"""The stream's journals (``ops``, ``dedup``, ``dedup_ranges``): their files, and replacing
one with a compacted copy.

Each journal is append-only and read up to the length the stream header
commits.  A journal is compacted by writing its live part to a new file
``<journal>.<gen>`` that the header commit setting ``jgen`` (the journal
generation) publishes; the file it replaces is unlinked after that commit.
So a header never names a missing file, a crash before the commit leaves the
old journal in force (the new file is an orphan, removed by the next
compaction), and a process that sees ``jgen`` change reopens the files
(``open_generation``).  What the records mean is the business of removed.py
(``ops``) and dedup.py (the other two); this module only knows files and
generations, which all three share.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Optional

from jetspark.engine import diskio
from jetspark.engine.state_header import HeaderFile, StreamHeader
from jetspark.errors import CorruptStoreError

log = logging.getLogger("jetspark")

KINDS = ("ops", "dedup", "dedup_ranges")
# Journals smaller than this are never compacted (read through the module by removed.py and
# dedup.py, so that tests can lower it).
COMPACT_MIN = 256 << 10


class FilesMoved(CorruptStoreError):
    """A file changed under a read made without the lock (a journal was replaced, a block
    dropped): refresh() reads the header again.  Under the lock nothing moves, so there
    it means the file is missing: damage."""


def read_committed(fd: int, n: int, off: int, path: Path) -> bytes:
    """Committed bytes of a file: all there, or the file is damaged (never read as empty)."""
    raw = os.pread(fd, n, off)
    if len(raw) != n:
        raise CorruptStoreError(
            f"{path}: the file ends at byte {off + len(raw)} but the "
            f"stream header commits {off + n} bytes (truncated or removed)",
            path,
        )
    return raw


class Journals:
    """The open file of each journal, and the generation it belongs to."""

    def __init__(self, directory: Path, fsync: bool, header_file: HeaderFile) -> None:
        self.dir = directory
        self.fsync = fsync
        self.header_file = header_file
        self.fds: dict[str, int] = {}
        try:
            for kind in KINDS:
                self.fds[kind] = os.open(directory / kind, os.O_RDWR | os.O_CREAT, 0o644)
        except BaseException:
            self.close()
            raise
        self.jgen = 0  # the header journal generation the open files belong to
        self.gens = dict.fromkeys(KINDS, 0)  # each open file's own generation
        self.retired: list[tuple[int, Path]] = []  # replaced files, unlinked after the commit

    def path(self, kind: str, gen: Optional[int] = None) -> Path:
        """The file of journal ``kind`` at generation ``gen`` (default: the one open)."""
        g = self.gens[kind] if gen is None else gen
        return self.dir / (kind if g == 0 else f"{kind}.{g}")

    def read(self, kind: str, n: int, off: int) -> bytes:
        return read_committed(self.fds[kind], n, off, self.path(kind))

    def write(self, kind: str, raw: bytes, at: int) -> None:
        """Append committed-to-be bytes at ``at`` (the header's length of the journal)."""
        diskio.pwrite(self.fds[kind], raw, at, self.path(kind))

    def any_data(self) -> bool:
        return any(os.fstat(fd).st_size for fd in self.fds.values())

    def files(self) -> dict[str, list[int]]:
        """The generations of each journal's files in the directory."""
        found: dict[str, list[int]] = {k: [] for k in KINDS}
        for name in os.listdir(self.dir):
            kind, dot, g = name.partition(".")
            if kind in found and (not dot or g.isdigit()):
                found[kind].append(int(g) if dot else 0)
        return found

    def open_generation(self, jgen: int) -> list[str]:
        """Have open the journal files a header with generation ``jgen`` commits: for each
        journal, its file with the highest generation <= jgen (newer ones are a compaction
        that has not committed).  Returns the journals whose file changed: the caller reads
        them again from their start.  FilesMoved when a commit replaced files meanwhile."""
        if jgen == self.jgen:
            return []
        found = self.files()
        want = {}
        for kind in KINDS:
            g = max((x for x in found[kind] if x <= jgen), default=None)
            if g is None:
                raise FilesMoved(
                    f"{self.path(kind, 0)}: no file of this journal at generation {jgen}", self.path(kind, 0)
                )
            if g != self.gens[kind]:
                want[kind] = g
        chosen = {kind: want.get(kind, self.gens[kind]) for kind in KINDS}
        opened: dict[str, int] = {}
        try:
            for kind, g in want.items():
                opened[kind] = os.open(self.path(kind, g), os.O_RDWR)
            # Unchanged generation after the opens: no commit replaced a journal meanwhile, so
            # none of the files current at jgen was unlinked before we listed them.
            if self.header_file.read().jgen != jgen:
                raise FilesMoved(f"{self.dir}: a journal was replaced while being opened", self.dir)
        except FileNotFoundError:
            for fd in opened.values():
                os.close(fd)
            raise FilesMoved(f"{self.dir}: a journal was replaced while being opened", self.dir) from None
        except BaseException:
            for fd in opened.values():
                os.close(fd)
            raise
        for kind, fd in opened.items():
            os.close(self.fds[kind])
            self.fds[kind] = fd
            self.gens[kind] = want[kind]
        self.jgen = jgen
        # Older generations are replaced files a crash kept, or an empty file of the original
        # name that opening the stream recreates: garbage for this header and every later
        # one.  A process still on an older header that lists them missing reads its header
        # again (FilesMoved); newer generations may be a compaction under way: kept.
        for kind, g in chosen.items():
            for old in found[kind]:
                if old < g:
                    self.path(kind, old).unlink(missing_ok=True)
        return list(opened)

    def replace(self, kind: str, write: Callable[[int], object], h: StreamHeader) -> bool:
        """Write a compacted ``kind`` journal to its file of the next generation (``write(fd)``)
        and switch to it, setting ``h.jgen``; the header commit that ends this change
        publishes it, and the replaced file is unlinked after that commit (``retire``).
        False if the journal was already replaced in this change, or the new file could not
        be written (the old one stays in force; compaction is retried later)."""
        committed = self.header_file.read().jgen
        if h.jgen == committed:
            # The first replacement of this change: files of other generations than the
            # open ones are leftovers (replaced files a crash kept, or a crashed compaction's).
            self.clean()
            gen = committed + 1
        elif self.gens[kind] == h.jgen:
            return False
        else:
            gen = h.jgen
        path = self.path(kind, gen)
        nfd = -1
        try:
            nfd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            write(nfd)
            if self.fsync:
                os.fdatasync(nfd)
                dfd = os.open(self.dir, os.O_RDONLY)
                try:
                    os.fsync(dfd)  # the new name is durable before a header names it
                finally:
                    os.close(dfd)
        except BaseException as exc:
            if nfd >= 0:
                os.close(nfd)
            path.unlink(missing_ok=True)
            if not isinstance(exc, OSError):
                raise
            # Housekeeping only: the change it rode on (a publish) goes ahead without it.
            log.warning(
                "stream data in %s: compacting the %s journal failed (%s); it stays as it is", self.dir, kind, exc
            )
            return False
        self.retired.append((self.fds[kind], self.path(kind)))
        self.fds[kind] = nfd
        self.gens[kind] = gen
        h.jgen = self.jgen = gen
        log.debug("stream data in %s: compacted the %s journal (generation %d)", self.dir, kind, gen)
        return True

    def clean(self) -> None:
        """Unlink journal files that are not the open ones (under the lock, at a committed state)."""
        for kind, gens in self.files().items():
            for g in gens:
                if g != self.gens[kind]:
                    self.path(kind, g).unlink(missing_ok=True)

    def retire(self) -> None:
        """After the commit that published compacted journals: the files they replaced go."""
        retired, self.retired = self.retired, []
        for fd, path in retired:
            os.close(fd)
            path.unlink(missing_ok=True)

    def keep_retired(self) -> None:
        """A change that replaced journals failed before its commit: the old files stay in
        force (this process reopens the committed generation when it next catches up)."""
        for fd, _ in self.retired:
            os.close(fd)
        self.retired = []

    def sync(self) -> None:
        for fd in self.fds.values():
            os.fdatasync(fd)

    def close(self) -> None:
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = {}
