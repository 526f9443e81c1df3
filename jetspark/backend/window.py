"""``PublishWindow``: the bounded set of pending ``publish_async`` futures, for both backends.

A call takes a place in the window before its message goes anywhere and the
place is freed when its future is done, so a producer faster than the store
(or the server) waits (back-pressure) instead of queueing without bound; after
``wait_stall`` seconds it gets ``TooManyStalledMsgsError``, as in nats-py.
The backend completes the futures, from its own thread (the engine's writer,
the nats:// event loop) marked as such (``settle_all``, ``mark_completing``): a ``publish_async`` made
from a future's callback there cannot wait for room, since only that thread
could make it, and is refused at once instead of hanging.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable, Iterable, Optional

from jetspark.errors import ClosedError, PublishAsyncTimeoutError, TooManyStalledMsgsError

__all__ = ["PublishWindow", "mark_completing", "settle", "settle_all"]

_local = threading.local()


class PublishWindow:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._cond = threading.Condition(threading.Lock())
        self._pending: set[Future] = set()
        self._closed: Optional[str] = None  # why new publishes are refused

    def admit(self, wait_stall: Optional[float]) -> Future:
        """A new pending future, once the window has room (see the module docstring)."""
        with self._cond:
            if self._closed is None and len(self._pending) >= self.limit:
                if getattr(_local, "completing", False):
                    raise TooManyStalledMsgsError(
                        f"publish_async: all {self.limit} places are pending, "
                        "and this thread (a future's callback) is the one that completes them"
                    )
                if not self._cond.wait_for(
                    lambda: self._closed is not None or len(self._pending) < self.limit, wait_stall
                ):
                    raise TooManyStalledMsgsError(
                        f"publish_async: all {self.limit} places "
                        f"(publish_async_max_pending) stayed pending for {wait_stall:g} s"
                    )
            if self._closed is not None:
                raise ClosedError(self._closed)
            fut: Future = Future()
            fut.set_running_or_notify_cancel()  # on its way: cancel() cannot stop it
            self._pending.add(fut)
        fut.add_done_callback(self._done)
        return fut

    def _done(self, fut: Future) -> None:
        with self._cond:
            self._pending.discard(fut)
            if self._cond._waiters:  # type: ignore[attr-defined]  # (a Condition's own list: most calls find no one waiting)
                self._cond.notify_all()

    def pending(self) -> int:
        return len(self._pending)

    def wait(self, timeout: Optional[float]) -> None:
        """Until no future is pending; ``PublishAsyncTimeoutError`` after ``timeout`` seconds."""
        with self._cond:
            if self._pending and getattr(_local, "completing", False):
                raise RuntimeError(
                    "publish_async_completed was called from the thread that completes "
                    "the futures (a future's callback): it would wait for itself"
                )
            if not self._cond.wait_for(lambda: not self._pending, timeout):
                raise PublishAsyncTimeoutError(
                    f"{len(self._pending)} publish_async futures were still pending after {timeout:g} s"
                )

    def close(self, why: str) -> None:
        """Refuse new publishes (and wake the callers waiting for room) with ``ClosedError(why)``."""
        with self._cond:
            self._closed = why
            self._cond.notify_all()

    def fail_pending(self, error: Callable[[], BaseException]) -> None:
        """Fail every pending future with ``error()`` (the handle goes away without their answers)."""
        with self._cond:
            left = list(self._pending)
        settle_all((fut, error()) for fut in left)


def mark_completing() -> None:
    """Mark the current thread, for good, as one that completes futures (a backend's own thread)."""
    _local.completing = True


def settle_all(outcomes: Iterable[tuple[Future, object]]) -> None:
    """Each future's result, or its exception when the outcome is one, the current thread
    marked as completing futures meanwhile (see the module docstring)."""
    before = getattr(_local, "completing", False)
    _local.completing = True
    try:
        for fut, outcome in outcomes:
            settle(fut, outcome)
    finally:
        _local.completing = before


def settle(fut: Future, outcome: object) -> None:
    """The future's result, or its exception when ``outcome`` is one; nothing if it is done."""
    try:
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)
    except Exception:  # InvalidStateError: already done (failed by close, or a timeout)
        pass
