"""``AsyncWriter``: the engine's ``publish_async``, a writer thread that stores queued messages in groups.

``publish_async`` queues the message and returns its future; the writer
takes everything queued at once and stores it under the handle's lock
(its ``StoreDirectory``'s, through the handle's ``Deliveries``), each
run of messages to the same stream under one lock of that stream, so a group
costs one commit (and, with ``sync="fsync"``, one flush to the disk) instead
of one per message.  Each message goes through the same steps and checks as
``publish`` (routing, ``Stream.publish``), so it gets the same PubAck or the
same error.  A future is completed only after its group's commit: a result
means stored, exactly as ``publish`` returning does, and a group the commit
fails is failed whole (nothing of it is stored).

``publish`` and ``publish_batch`` store what is queued before their own
messages (``drain``), so the handle's messages keep the order of the calls.
The thread starts at the first message and ends when it has had nothing to do
for a moment; it is not a daemon, so a process that exits without ``close()``
still stores what was queued.  ``close()`` stores everything queued.  After
``fork()`` the child gets a queue and a writer of its own (``HandleBase``);
fork with nothing in flight (after ``publish_async_completed()``), as for any
handle in use by another thread at the fork.
"""

from __future__ import annotations

import collections
import os
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Optional

from jetspark.backend.window import PublishWindow, mark_completing, settle_all
from jetspark.errors import APIError, JetSparkError
from jetspark.protocol import headers as H

if TYPE_CHECKING:
    from jetspark.api import PubAck
    from jetspark.engine.deliveries import Deliveries
    from jetspark.engine.stream import Stream

__all__ = ["AsyncWriter", "store_one"]

# Messages stored per group at most (a bound on how long one group holds the locks).
GROUP = 4096
# Seconds the thread waits for more work before it ends.
LINGER = 0.2


class AsyncWriter:
    def __init__(self, deliveries: "Deliveries", limit: int) -> None:
        self._deliveries = deliveries
        self.pid = os.getpid()
        self.window = PublishWindow(limit)
        self.queue: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._closing = False

    @property
    def queued(self) -> bool:
        return bool(self.queue)

    def submit(self, subject: str, payload: bytes, headers: Optional[dict], fut: Future) -> None:
        with self._cond:
            self.queue.append((subject, payload, headers, fut))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="jetspark-publish-async", daemon=False)
                self._thread.start()
            else:
                self._cond.notify()

    def _run(self) -> None:
        mark_completing()
        while True:
            with self._cond:
                if not self.queue:
                    if not self._closing:
                        self._cond.wait(LINGER)
                    if not self.queue:
                        self._thread = None
                        return
            try:
                self.drain()
            except BaseException as exc:  # the handle's lock or check failed: those messages get the error
                self._fail_queued(exc)

    def close(self, why: str) -> None:
        """Refuse new messages (``ClosedError(why)``), store the queued ones, end the thread."""
        self.window.close(why)
        self.drain()
        with self._cond:
            self._closing = True
            self._cond.notify()

    def drain(self) -> None:
        """Store everything queued, then complete the futures (taken under the handle's lock,
        so a ``publish`` waiting for the lock comes after them)."""
        lock = self._deliveries.store.lock
        while True:
            with lock:
                with self._cond:
                    n = min(len(self.queue), GROUP)
                    items = [self.queue.popleft() for _ in range(n)]
                if not items:
                    return
                try:
                    outcomes = self._store(items)
                except BaseException as exc:  # (a bug, an interrupt): taken messages are never left unanswered
                    settle_all((item[3], exc) for item in items)
                    raise
            settle_all(zip((item[3] for item in items), outcomes))

    def _fail_queued(self, exc: BaseException) -> None:
        with self._cond:
            items, self.queue = list(self.queue), collections.deque()
        settle_all((item[3], exc) for item in items)

    def _store(self, items: list) -> list:
        """Each message's PubAck or error, in order (caller holds the handle's lock)."""
        deliveries = self._deliveries
        store = deliveries.store
        try:
            deliveries.check()
            if deliveries.acks:
                deliveries.flush()
            store.sync()
        except JetSparkError as exc:
            return [exc] * len(items)
        targets: list = []
        for subject, _, _, _ in items:
            try:
                targets.append(store.target(subject))
            except JetSparkError as exc:
                targets.append(exc)
        out: list = [None] * len(items)
        i, n = 0, len(items)
        while i < n:
            st = targets[i]
            if isinstance(st, BaseException):
                out[i] = st
                i += 1
                continue
            j = i + 1
            while j < n and targets[j] is st:
                j += 1
            out[i:j] = _store_run(st, items[i:j])
            i = j
        return out


def store_one(st: "Stream", subject: str, payload: bytes, headers: Optional[dict]) -> "PubAck":
    """Store one message in ``st`` (caller holds its lock), as ``publish`` stores it."""
    if not headers:
        return st.publish_plain(subject, payload)
    return st.publish(subject, payload, H.encode(headers))


def _store_run(st: "Stream", items: list) -> list:
    """Messages to one stream under one lock of it: one commit for all.  A message the stream
    refuses (an APIError before anything is written, as every refusal is) gets its error and
    the others go on; any other failure, or one halfway through a message, undoes the whole
    run (the lock commits nothing), and every message of it not refused gets that error."""
    out: list = [None] * len(items)
    storage = st.storage
    try:
        with st.locked():
            for k, (subject, payload, headers, _) in enumerate(items):
                before = storage.change_key()
                try:
                    out[k] = store_one(st, subject, payload, headers)
                except APIError as exc:
                    if storage.change_key() != before:
                        raise
                    out[k] = exc
    except Exception as exc:
        return [o if isinstance(o, APIError) else exc for o in out]
    return out
