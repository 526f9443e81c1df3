"""Waking a consumer that waits for messages when another process changes its stream.

There is no server to push on the embedded engine, so a waiting ``fetch`` (and the
``messages``/``consume`` loops built on it) needs a signal from whichever process
publishes or acknowledges.  The stream's own files cannot give one: its commit point is
a store into a shared mapping (state_header.py), which inotify does not report, and the
record bytes are written before that commit, so a waiter woken by them could look too
early and then sleep through the commit.  Each stream's data directory therefore holds a
small file, ``notify``::

    bytes 0..8    armed: nonzero while some process waits and has not been told of a change
    bytes 8..16   a change counter

Both sides act under the stream's lock.  A consumer that looks for messages and finds none
sets ``armed`` before it lets the lock go (``Notifier.arm``, from handle.JetStream._pull)
and notes the counter; then it watches the file with inotify (a ``Waiter``), and waits
unless the counter moved meanwhile.  A writer (``Notifier.notify``, called by
storage._Locked after a commit or a consumer-state record that may make messages
deliverable, before it lets the lock go) reads ``armed`` from its mapping and only when
it is set ``pwrite``s the counter, which inotify reports to every watcher, and clears it.
So a change nobody waits for costs the writer a memory read, and a stream of publishes
one system call per wake-up of the waiters, not one per publish.  No wake-up is lost: a
change the waiter's look missed was committed after it, by a writer that found ``armed``
set (or cleared by an earlier writer, whose bump is just as visible), and that bump is
either seen in the counter before the wait or reported by the watch; a woken waiter arms
again with its next look.  A waiter waits at most ``SLICE`` seconds before looking again
all the same (a writer of an older jetspark does not notify).

A waiter woken less than ``GATHER`` (1 ms) after it began waiting waits out the rest of
that millisecond before it looks: under a stream of publishes its looks, which take the
stream's lock, come at most once a millisecond with what gathered meanwhile, instead of
once per publish (which halved a publisher's rate); a waiter idle for longer reacts at
once.

Each thread keeps one inotify instance for all its waits and adds and removes a watch per
wait (``_thread_inotify``: closing an instance takes the kernel about 20 ms).  Where
inotify is unavailable (not Linux, the per-user limit of instances or watches reached) a
waiter polls the counter through its mapping instead, backing off from ``MIN_PAUSE`` to
``MAX_PAUSE``.

A wait also ends when the consumer's earliest pending delivery falls due (the caller
passes that time, deliveries.Deliveries.fetch_wait), and on an ``Interrupt``: ``stop`` or
``drain`` of a ``messages()`` iterator, ``close`` of the handle.

Old stores get the file when a stream is opened; a stream whose directory refuses it
(``Notifier.open`` returns None) still works, its waiters polling as above.
"""

from __future__ import annotations

import logging
import mmap
import os
import select
import struct
import threading
import time
from pathlib import Path
from typing import Any, Optional

from jetspark.engine import diskio

try:  # Linux only (a sys_platform marker in pyproject.toml): elsewhere waiters poll.
    from inotify_simple import INotify
    from inotify_simple import flags as _flags

    _WATCH = _flags.MODIFY | _flags.ATTRIB | _flags.DELETE_SELF
except ImportError:  # pragma: no cover - exercised by forcing INOTIFY = False in tests
    INotify = None
    _WATCH = 0

log = logging.getLogger("jetspark")

NAME = "notify"
SIZE = 16
_U64 = struct.Struct("<Q")
_ARMED = _U64.pack(1)
_CLEAR = _U64.pack(0)
SLICE = 1.0
GATHER = 0.001
MIN_PAUSE = 0.001
MAX_PAUSE = 0.05
# False: never use inotify (tests force the polling path with it).
INOTIFY = INotify is not None


class Notifier:
    """A stream's ``notify`` file as its writers see it."""

    __slots__ = ("path", "fd", "mm")

    def __init__(self, path: Path, fd: int, mm: mmap.mmap) -> None:
        self.path = path
        self.fd = fd
        self.mm = mm

    @classmethod
    def open(cls, path: Path) -> Optional["Notifier"]:
        """The stream's notify file, created if missing; None (with a debug note) when the
        directory refuses it: waiters then poll."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            log.debug("%s cannot be opened (%s): waiting consumers of this stream poll", path, exc)
            return None
        try:
            if os.fstat(fd).st_size < SIZE:
                diskio.allocate(fd, 0, SIZE, path)
            return cls(path, fd, mmap.mmap(fd, SIZE))
        except (OSError, ValueError) as exc:
            os.close(fd)
            log.debug("%s cannot be mapped (%s): waiting consumers of this stream poll", path, exc)
            return None

    def arm(self) -> int:
        """Ask writers to notify (caller holds the stream's lock and has just looked for
        messages in vain); returns the counter as it is, for ``Waiter.wait``."""
        self.mm[0:8] = _ARMED
        return _U64.unpack_from(self.mm, 8)[0]

    def notify(self) -> None:
        """Tell the waiting processes the stream changed (caller holds the stream's lock)."""
        mm = self.mm
        if mm[0]:
            try:
                os.pwrite(self.fd, _U64.pack(_U64.unpack_from(mm, 8)[0] + 1), 8)
            except OSError:
                return  # waiters look again within SLICE anyway; the change itself is committed
            mm[0:8] = _CLEAR

    def close(self) -> None:
        try:
            self.mm.close()
        except (BufferError, ValueError):
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass


class Interrupt:
    """Ends a wait from another thread (``Messages.stop``, the handle's ``close``): a flag and
    a pipe a waiter polls with its other file descriptors."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._set = False

    def fileno(self) -> int:
        return self._r

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        try:
            os.write(self._w, b"x")  # stays unread: every later wait returns at once
        except OSError:
            pass

    def is_set(self) -> bool:
        return self._set

    def close(self) -> None:
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass


class Waiter:
    """One waiting call's watch on a stream's notify file.  The caller looks for messages
    under the stream's lock and, finding none, arms (``Notifier.arm``) before it lets the
    lock go; then ``wait(timeout, seen)``; repeat.  Close it when done."""

    def __init__(self, path: Optional[Path], interrupts: tuple[Interrupt, ...] = ()) -> None:
        self.interrupts = interrupts
        self._fd: Optional[int] = None
        self._mm: Optional[mmap.mmap] = None
        self._inotify = None
        self._wd = -1
        self._pause = MIN_PAUSE
        self._poll = select.poll()
        self._interrupt_poll = select.poll()
        for it in interrupts:
            self._poll.register(it.fileno(), select.POLLIN)
            self._interrupt_poll.register(it.fileno(), select.POLLIN)
        if path is None:
            return
        try:
            self._fd = os.open(path, os.O_RDONLY)
            self._mm = mmap.mmap(self._fd, SIZE, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            log.debug("%s cannot be opened (%s): polling", path, exc)
            self.close()
            return
        ino = _thread_inotify()
        if ino is None:
            return
        try:
            self._wd = ino.add_watch(path, _WATCH)
        except OSError as exc:  # ENOSPC: the per-user watch limit
            log.debug("inotify cannot watch %s (%s): polling", path, exc)
            return
        self._inotify = ino
        _drain(ino)  # events of earlier waits (a removed watch leaves one) are not news
        self._poll.register(ino.fileno(), select.POLLIN)

    @property
    def watching(self) -> bool:
        """Is inotify in use (else the wait polls the counter)?"""
        return self._inotify is not None

    def interrupted(self) -> bool:
        return any(it.is_set() for it in self.interrupts)

    def wait(self, timeout: float, seen: int) -> None:
        """Return when the stream may have changed since the look that armed and read the
        counter ``seen``, on an interrupt, or after ``timeout`` (at most SLICE) seconds,
        whichever comes first."""
        timeout = max(0.0, min(timeout, SLICE))
        mm = self._mm
        if mm is None:
            # No notify file: sleep one pause (interruptibly) and let the caller look again.
            self._poll.poll(_ms(min(self._pause, timeout)))
            self._pause = min(self._pause * 2, MAX_PAUSE)
            return
        if _U64.unpack_from(mm, 8)[0] != seen:
            return  # notified between the look and the watch (or since): look again now
        if self._inotify is not None:
            started = time.monotonic()
            if self._poll.poll(_ms(timeout)):
                _drain(self._inotify)  # the next wait blocks again
                # Woken within GATHER of the last look: messages are flowing; let a few more
                # come before looking again (see the module docstring).
                gather = min(GATHER - (time.monotonic() - started), timeout)
                if gather > 0 and not self.interrupted():
                    self._interrupt_poll.poll(_ms(gather))
            return
        # Polling: the counter through the mapping, backing off while nothing changes.
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self.interrupted():
                return
            if self._poll.poll(_ms(min(self._pause, left))):
                return
            if _U64.unpack_from(mm, 8)[0] != seen:
                self._pause = MIN_PAUSE
                return
            self._pause = min(self._pause * 2, MAX_PAUSE)

    def close(self) -> None:
        if self._inotify is not None:
            try:
                self._inotify.rm_watch(self._wd)  # the thread keeps its instance (_thread_inotify)
            except OSError:
                pass  # gone with the file (the stream was deleted)
            self._inotify = None
        if self._mm is not None:
            try:
                self._mm.close()
            except (BufferError, ValueError):
                pass
            self._mm = None
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def __enter__(self) -> "Waiter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_local = threading.local()


def _thread_inotify():
    """This thread's inotify instance, made on its first wait and kept: closing one waits for
    a kernel grace period (about 20 ms), too long to pay per wait.  One per thread, since a
    thread waits on one thing at a time and events read by one waiter are gone for others;
    a forked child makes its own.  None where inotify is unavailable."""
    if not INOTIFY or INotify is None:
        return None
    ino = getattr(_local, "inotify", None)
    if ino is not None and _local.pid == os.getpid():
        return ino
    try:
        ino = INotify(nonblocking=True)
    except OSError as exc:  # EMFILE: the per-user instance limit
        log.debug("inotify unavailable (%s): waiting consumers poll", exc)
        return None
    _local.inotify, _local.pid = ino, os.getpid()
    return ino


def _drain(ino: Any) -> None:
    """Take the inotify events that came in (the next wait blocks again)."""
    try:
        ino.read(timeout=0)
    except OSError:
        pass


def _ms(seconds: float) -> int:
    """poll()'s milliseconds, rounded up so a short wait is not a busy one."""
    return max(1, int(seconds * 1000 + 0.999)) if seconds > 0 else 0
