"""Cross-process locks, and knowing when this process is a forked child."""

from __future__ import annotations

import fcntl
import os

# Bumped in every child right after fork(): handles compare it to the value they
# opened with and reopen their files, because flock() belongs to the open file,
# which a forked child shares with its parent.
FORK_GENERATION = [0]
os.register_at_fork(after_in_child=lambda: FORK_GENERATION.__setitem__(0, FORK_GENERATION[0] + 1))


class FLock:
    """An exclusive flock() held for a with-block."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self):
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
