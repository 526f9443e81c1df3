"""Push subscriptions bound to a consumer, seen by every process (``ConsumerInfo.push_bound``).

A subscription binds by holding an exclusive ``flock`` on a file of its own,
``bound-<id>``, in the consumer's directory.  The kernel drops the lock when
the process ends, however it ends, so a binding never outlives its
subscriber: a file nobody holds is left over from a dead process, and the
next look removes it.  The file is locked before it takes its name (it is
made as ``.binding-<id>`` and renamed), so a live subscriber's file is never
seen unlocked.  Deleting the consumer removes its directory, bindings and all.

What a binding means is the server's notion of interest on the deliver
subject: a bound push consumer shows ``push_bound``, is not removed for
inactivity, and keeps its deliver subject (docs/semantics.md §5.6).
"""

from __future__ import annotations

import fcntl
import os
import uuid
from pathlib import Path

from jetspark.engine import diskio

PREFIX = "bound-"


class Binding:
    """This subscription's hold on a consumer (``release()`` when it ends; a binding dropped
    without one is released when collected, or at the latest when its process ends)."""

    def __init__(self, home: Path) -> None:
        token = uuid.uuid4().hex[:16]
        tmp = home / f".binding-{token}"
        self.path = home / f"{PREFIX}{token}"
        self._pid = os.getpid()
        self._fd = -1
        try:
            self._fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else holds it
            os.replace(tmp, self.path)
        except FileNotFoundError:
            self._close()
            raise  # the consumer's directory is gone: it was deleted meanwhile
        except OSError as exc:
            self._close()
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise diskio.translate(exc, tmp, "binding a subscription to the consumer") from exc

    def release(self) -> None:
        if self._fd < 0:
            return
        if os.getpid() == self._pid:  # (a forked child's copy of the fd leaves the parent's binding alone)
            try:
                os.unlink(self.path)
            except OSError:
                pass  # the consumer was deleted, its directory with it
        self._close()

    def _close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def is_bound(home: Path) -> bool:
    """Does a live subscription hold a binding on the consumer in ``home``?  Bindings left by
    dead processes are removed on the way."""
    try:
        names = [n for n in os.listdir(home) if n.startswith(PREFIX)]
    except OSError:
        return False
    for name in names:
        path = home / name
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue  # released meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            try:
                os.unlink(path)  # nobody holds it: its subscriber is gone
            except OSError:
                pass
        finally:
            os.close(fd)
    return False
