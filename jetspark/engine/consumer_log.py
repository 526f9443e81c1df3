"""A consumer's log: its state changes as checksummed records, read back by every process.

::

    cons/<name>/log     "JSPKCL01" | u64 committed length, then records:
                        u32 len | u32 crc | op, scalars, items

A record's scalars are the consumer's sequences and times (``SCALARS_TIMED``);
its items, stream sequences with their consumer sequence, delivery count and
due time (``ITEM``).  What a record means is the consumer's business
(consumer.py); this module writes records, reads those other processes
appended, tells a torn last record (a writer that died mid-record: cut off
with a warning) from damage (``CorruptStoreError``, nothing cut), and
writes records whole or not at all: a record that would grow the log past
``COMPACT_BYTES`` is written as a snapshot of the state it leaves instead,
the log rewritten as that one record.  It never holds the consumer's state:
it reads records to an ``Apply`` callback and is given the snapshot to write.

The header holds the length of the records that calls completed (written
after each record), so a log cut anywhere below it (records lost, not a torn
tail: their acks would silently roll back) is damage.  A log written before
the header existed (no magic) is read as it is, without that check, until
its next rewrite gives it one.  The first record is always written before
the log is in place (into the new consumer's directory before it is renamed
into ``cons/``, or into ``log.tmp`` before a rewrite renames it over
``log``), so a crash can never tear it: a bad first record is damage too.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from pathlib import Path
from typing import Callable

import numpy as np

from jetspark.engine import diskio, metafile
from jetspark.errors import CorruptStoreError

log = logging.getLogger("jetspark")

# len, crc, op, n, then the scalars: delivered_consumer_seq, next_stream_seq,
# ack_floor_consumer_seq, ack_floor_stream_seq, last_active, and in a TIMED record
# delivered_ns and acked_ns.
_HEAD = struct.Struct("<IIBI")
LOG_MAGIC = b"JSPKCL01"
_LOG_HEAD = struct.Struct("<8sQ")  # magic, committed length (the records' end when the last call returned)
_COMMITTED_OFF = 8
_REC = struct.Struct("<IIBIqqqqqqq")
_BODY = struct.Struct("<BIqqqqqqq")  # _REC after len and crc: what the crc covers
_REC_UNTIMED = struct.Struct("<IIBIqqqqq")  # records written before the two times were kept
# One item: stream sequence, consumer sequence, delivery count, due time.  Here and in the
# loops that apply records, sseq/cseq are short for the stream and consumer sequence.
ITEM = np.dtype([("sseq", "<u8"), ("cseq", "<u8"), ("count", "<u4"), ("due", "<i8")])
SCALARS, DELIVER, DROP, DUE, MAXED, SNAPSHOT, LAST_PER_SUBJECT = range(7)
TIMED = 0x80  # in a record's op: its scalars end with delivered_ns and acked_ns
_OP = 0x7F  # the op itself
COMPACT_BYTES = 4 << 20  # a log that would grow past this is rewritten as one snapshot

# What a reader does with each valid record: op (without TIMED), the scalars (seven, or five
# in an untimed record), the items.
Apply = Callable[[int, tuple, np.ndarray], None]


def encode(op: int, scalars: tuple, items: np.ndarray) -> bytes:
    """One record: the op, the seven scalars and the items, with a CRC-32."""
    body = _BODY.pack(op | TIMED, len(items), *scalars) + items.tobytes()
    return struct.pack("<II", 8 + len(body), zlib.crc32(body)) + body


def decode(raw: bytes, pos: int) -> tuple[int, tuple, np.ndarray]:
    """The op, scalars and items of the valid record at ``pos`` (see _record_at)."""
    head = _REC if raw[pos + 8] & TIMED else _REC_UNTIMED
    _, _, op, n, *scalars = head.unpack_from(raw, pos)
    return op & _OP, tuple(scalars), np.frombuffer(raw, dtype=ITEM, count=n, offset=pos + head.size)


class ConsumerLog:
    """One consumer's log file, and how far this process has read it."""

    def __init__(self, home: Path, name: str, *, fresh: bool, fsync: bool) -> None:
        """Open the log in ``home``; CorruptStoreError if it is missing or its header damaged.

        ``fresh``: a consumer being created, whose empty log gets its first record next.
        """
        self.home = home
        self.name = name
        self.fsync = fsync
        self.damaged: CorruptStoreError | None = None
        flags = os.O_RDWR | (os.O_CREAT if fresh else 0)
        try:
            self.fd = os.open(home / "log", flags, 0o644)
        except FileNotFoundError:
            raise CorruptStoreError(
                f"{home / 'log'} is missing: the consumer's state is lost", path=str(home / "log")
            ) from None
        except OSError as exc:
            raise diskio.translate(exc, home / "log", "opening") from exc
        self.base = _LOG_HEAD.size  # where records start (0 in a log without the header)
        self.pos = self.base  # how far this process has read (and written)
        self._synced = False
        try:
            if fresh:
                diskio.pwrite(self.fd, _LOG_HEAD.pack(LOG_MAGIC, _LOG_HEAD.size), 0, self.path)
            else:
                self._read_head()
        except BaseException:
            self.close()
            raise

    @property
    def path(self) -> Path:
        return self.home / "log"

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass

    def rewind(self) -> None:
        """Read the log from its first record again (its reader starts over from nothing)."""
        self.pos = self.base

    def _read_head(self) -> None:
        """A new log starts with its header; one without it was written before it existed."""
        head = os.pread(self.fd, _LOG_HEAD.size, 0)
        if not head:
            raise self._damage("is empty: its first record, written before the log is in place, is missing")
        if head[:8] == LOG_MAGIC:
            if len(head) < _LOG_HEAD.size:
                raise self._damage(f"is {len(head)} bytes, shorter than its header: its records were lost")
        elif LOG_MAGIC.startswith(head[:8]) and len(head) < 8:
            raise self._damage(f"is {len(head)} bytes, shorter than its header: its records were lost")
        else:
            self.base = self.pos = 0

    def _committed(self) -> int:
        if not self.base:
            return 0
        return _LOG_HEAD.unpack(os.pread(self.fd, _LOG_HEAD.size, 0))[1]

    def sync(self, apply: Apply) -> bool:
        """Apply records other processes appended (``apply`` each); cut a torn tail off
        (caller holds the stream's lock).

        False if the log file was replaced or removed since this process opened it: a
        process rewrote it (compact) or deleted the consumer and died before its cons_gen
        bump was committed; the caller reopens the consumers.  CorruptStoreError if the
        log is damaged (see the module docstring); the consumer is then unusable.
        """
        if self.damaged is not None:
            raise self.damaged
        with diskio.io_errors(self.path, "reading the consumer's state"):
            st = os.fstat(self.fd)
            if st.st_nlink == 0:
                return False
            size = st.st_size
            if size < self.pos:
                raise self._damage(
                    f"is {size} bytes, shorter than the {self.pos} bytes of records already read: records were lost"
                )
            if size == self.pos and self._synced:
                return True
            committed = self._committed()
            if size < committed:
                raise self._damage(
                    f"is {size} bytes, shorter than the {committed} bytes its header commits (cut short):"
                    " records were lost"
                )
            raw = os.pread(self.fd, size - self.pos, self.pos)
            pos = 0
            while pos < len(raw):
                length = _record_at(raw, pos)
                if not length:
                    break
                apply(*decode(raw, pos))
                pos += length
            bad = self.pos + pos
            self.pos = bad
            if bad < size:
                why = _what_is_wrong(raw, pos)
                if bad == self.base:
                    raise self._damage(f"has a damaged first record ({why}); a crash cannot tear it, so it is not cut")
                if _record_after(raw, pos):
                    raise self._damage(
                        f"has a damaged record at offset {bad} ({why}) followed by valid records; nothing was cut"
                    )
                if bad < committed:
                    raise self._damage(
                        f"has a damaged record at offset {bad} ({why}) below the {committed} bytes its header"
                        " commits; nothing was cut"
                    )
                log.warning(
                    "%s: the last record, at offset %d (%d bytes), is torn (%s) and was cut off:"
                    " a writer died mid-record",
                    self.path,
                    bad,
                    size - bad,
                    why,
                )
                os.ftruncate(self.fd, bad)
            if committed > self.pos:
                raise self._damage(
                    f"holds {self.pos} bytes of records, less than the {committed} its header commits (cut short):"
                    " records were lost"
                )
            self._synced = True
        return True

    def _damage(self, what: str) -> CorruptStoreError:
        self.damaged = CorruptStoreError(
            f"{self.path} {what}: the state of consumer {self.name!r} cannot be trusted", path=str(self.path)
        )
        return self.damaged

    def write(self, rec: bytes, snapshot: Callable[[], bytes]) -> bool:
        """Write one record, whole or not at all (caller holds the stream's lock): appended, or,
        when the log would grow past COMPACT_BYTES, the log rewritten as ``snapshot()`` (the
        record of the state ``rec`` leaves, so the rewrite is this call's one write).  True if
        the log was rewritten: the caller tells the other processes to reopen it.  On a disk
        error nothing was written and StoreIOError / StoreFullError (naming the log) is raised."""
        compact = self.pos > self.base and self.pos + len(rec) > COMPACT_BYTES
        try:
            if compact:
                self.rewrite(snapshot())
            else:
                self.append(rec)
        except OSError as exc:
            action = "compacting the consumer's log (into log.tmp)" if compact else "appending to the consumer's log"
            raise diskio.translate(OSError(exc.errno, exc.strerror), self.path, action) from exc
        return compact

    def append(self, rec: bytes) -> None:
        """Write ``rec`` after the records read, then commit it in the header.  On an error
        the torn bytes are cut (when the disk lets us) and the error raised."""
        try:
            diskio.pwrite(self.fd, rec, self.pos, self.path)
            if self.base:
                diskio.pwrite(self.fd, struct.pack("<Q", self.pos + len(rec)), _COMMITTED_OFF, self.path)
        except OSError:
            try:
                os.ftruncate(self.fd, self.pos)  # cut the torn bytes (shrinking needs no space)
            except OSError:
                pass  # the next reader sees a torn last record and cuts it
            raise
        self.pos += len(rec)

    def rewrite(self, rec: bytes) -> None:
        """Replace the log by one holding ``rec`` alone (a snapshot): written into ``log.tmp``,
        renamed over the log.  Other processes learn of it from their owner (cons_gen)."""
        tmp = self.home / "log.tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            diskio.pwrite(
                fd, _LOG_HEAD.pack(LOG_MAGIC, _LOG_HEAD.size + len(rec)) + rec, 0, tmp
            )  # all of it, or StoreIOError/StoreFullError
            if self.fsync:
                os.fsync(fd)
            os.replace(tmp, self.path)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        os.close(self.fd)
        self.fd = fd  # the snapshot's file is the log now
        self.base = _LOG_HEAD.size
        self.pos = _LOG_HEAD.size + len(rec)
        if self.fsync:
            metafile.fsync_dir(self.home)


def _head_size(op: int) -> int:
    """The size of a record's fixed part for its op byte, 0 for no known op."""
    if op & _OP > LAST_PER_SUBJECT:
        return 0
    return _REC.size if op & TIMED else _REC_UNTIMED.size


def _record_at(raw: bytes, pos: int) -> int:
    """The length of the valid record starting at ``pos``, or 0."""
    if pos + _HEAD.size > len(raw):
        return 0
    length, crc, op, n = _HEAD.unpack_from(raw, pos)
    head = _head_size(op)
    if not head or length != head + n * ITEM.itemsize or pos + length > len(raw):
        return 0
    return length if zlib.crc32(memoryview(raw)[pos + 8 : pos + length]) == crc else 0


def _what_is_wrong(raw: bytes, pos: int) -> str:
    if pos + _HEAD.size > len(raw):
        return f"{len(raw) - pos} bytes, less than a record header"
    length, _, op, n = _HEAD.unpack_from(raw, pos)
    head = _head_size(op)
    if not head or length != head + n * ITEM.itemsize:
        return f"its header is inconsistent: length {length}, op {op}, {n} items"
    if pos + length > len(raw):
        return f"its length {length} runs past the end of the log"
    return "it fails its checksum"


def _record_after(raw: bytes, start: int) -> bool:
    """Does a valid record start anywhere after the bad one at ``start``?  The bad record's
    own length is tried first, then every later offset whose header is consistent."""
    if start + 4 <= len(raw):
        (length,) = struct.unpack_from("<I", raw, start)
        if length > 0 and _record_at(raw, start + length):
            return True
    b = np.frombuffer(raw, dtype=np.uint8)
    last = len(raw) - _REC_UNTIMED.size  # the last offset the smaller record header fits at
    step = 1 << 20
    for lo in range(start + 1, last + 1, step):
        q = np.arange(lo, min(lo + step, last + 1), dtype=np.int64)
        length = _u32(b, q)
        n = _u32(b, q + 9)
        op = b[q + 8]
        head = np.where(op & TIMED, _REC.size, _REC_UNTIMED.size)
        ok = (length == head + n * ITEM.itemsize) & (q + length <= len(raw)) & ((op & _OP) <= LAST_PER_SUBJECT)
        for cand in q[ok].tolist():
            if _record_at(raw, cand):
                return True
    return False


def _u32(b: np.ndarray, q: np.ndarray) -> np.ndarray:
    return (
        b[q].astype(np.int64)
        | (b[q + 1].astype(np.int64) << 8)
        | (b[q + 2].astype(np.int64) << 16)
        | (b[q + 3].astype(np.int64) << 24)
    )
