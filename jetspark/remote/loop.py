"""An asyncio event loop on a private daemon thread, so the nats:// backend stays synchronous.

``Loop.run(coro, timeout)`` runs a coroutine on the loop and blocks the
calling thread for its result, at most ``timeout`` seconds: nothing waits
forever.  On timeout the coroutine is cancelled and ``LoopTimeout`` is
raised (the caller turns it into a jetspark error that says what timed out).
Any number of threads may call ``run`` at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Callable, Coroutine, Optional

__all__ = ["Loop", "LoopTimeout"]


class LoopTimeout(Exception):
    """``Loop.run`` gave up waiting."""


class Loop:
    def __init__(self, name: str = "jetspark-nats") -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()
        self._ready.wait(10)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
                for t in pending:
                    t.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.wait(pending, timeout=1))
            except Exception:
                pass
            self.loop.close()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive() and not self.loop.is_closed()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self.thread

    def run(self, coro: Coroutine[Any, Any, Any], timeout: Optional[float]) -> Any:
        """The coroutine's result; ``LoopTimeout`` after ``timeout`` seconds (None: no limit,
        for coroutines that bound themselves)."""
        if self.in_loop_thread():
            raise RuntimeError(
                "a jetspark nats handle was called from its own event loop thread (e.g. a nats callback)"
            )
        if not self.alive:
            if asyncio.iscoroutine(coro):
                coro.close()
            raise RuntimeError("the handle's event loop is stopped")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            if fut.done():
                # Python 3.11 made this the builtin TimeoutError: the coroutine raised it
                # itself (a RequestTimeoutError that says what timed out), or finished just now.
                return fut.result()
            fut.cancel()
            raise LoopTimeout() from None
        except concurrent.futures.CancelledError:
            raise LoopTimeout() from None

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
        """Start a coroutine without waiting for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call_soon(self, fn: Callable, *args) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self, timeout: float = 5.0) -> None:
        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            return
        if not self.in_loop_thread():
            self.thread.join(timeout)
