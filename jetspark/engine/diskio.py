"""The store's writes: each lands whole or fails with a typed error naming the file.

A full disk must neither kill the process nor leave half a record
acknowledged.  Storing into a page of a shared mapping that the filesystem
cannot back raises SIGBUS, which no ``try`` catches, so mapped ranges are
allocated (``posix_fallocate``) before anything is stored in them.  A
``pwrite`` may write less than asked when the disk fills; the rest is
retried, and the retry reports why it cannot go on.  Every ``OSError`` on
the way becomes a ``StoreIOError`` (``StoreFullError`` for ENOSPC and
EDQUOT) naming the file, and since a writer commits the stream header only
after its writes succeeded, a failed call stored nothing that anyone sees.
"""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from typing import Iterator

from jetspark.errors import StoreError, StoreFullError, StoreIOError

FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
# Filesystems without fallocate (or with a different notion of it): fall back to writing zeros.
_NO_FALLOCATE = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})


def translate(exc: OSError, path, action: str = "") -> StoreIOError:
    """The typed error for an OSError met while touching ``path``."""
    if isinstance(exc, StoreIOError):
        return exc
    cls = StoreFullError if exc.errno in FULL else StoreIOError
    return cls(exc.errno or errno.EIO, exc.strerror or str(exc), str(exc.filename or path), action)


def pwrite(fd: int, data, offset: int, path) -> None:
    """Write all of ``data`` at ``offset`` or raise StoreIOError/StoreFullError."""
    try:
        n = os.pwrite(fd, data, offset)
        if n != len(data):
            _write_rest(fd, memoryview(data).cast("B"), offset, n)
    except OSError as exc:
        raise translate(exc, path, "writing") from exc


def _write_rest(fd: int, view: memoryview, offset: int, done: int) -> None:
    while done < len(view):
        k = os.pwrite(fd, view[done:], offset + done)
        if k <= 0:
            raise OSError(errno.EIO, "the write made no progress")
        done += k


def allocate(fd: int, offset: int, length: int, path) -> None:
    """Reserve disk space for ``offset .. offset+length`` (extending the file if needed)."""
    if length <= 0:
        return
    try:
        try:
            os.posix_fallocate(fd, offset, length)
        except OSError as exc:
            if exc.errno not in _NO_FALLOCATE:
                raise
            # No fallocate here: zeros written through the filesystem reserve the space too.
            # Only ranges nobody has committed are ever allocated, so overwriting them is safe.
            step = 1 << 20
            for off in range(offset, offset + length, step):
                _write_rest(fd, memoryview(bytes(min(step, offset + length - off))), off, 0)
    except OSError as exc:
        raise translate(exc, path, "allocating space") from exc


@contextmanager
def io_errors(path, action: str) -> Iterator[None]:
    """Turn a raw OSError inside the block into the store's typed error naming ``path``."""
    try:
        yield
    except StoreError:
        raise
    except OSError as exc:
        raise translate(exc, path, action) from exc
