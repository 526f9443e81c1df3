"""Reading a streaming query's next range ahead, in the Python worker that read the last one.

Between two micro-batches Spark's driver writes its offset and commit logs and plans
the next batch, while the executors' Python workers sit idle; a read from a nats://
store, by contrast, spends its time waiting on the server and framing messages.  So
the task that reads a micro-batch's last range, given a hint from the driver
(``SeqRange.ahead``: where the next micro-batch's first range probably ends), starts
reading the sequences after its own in a background thread of its worker; the next
micro-batch's first task, when Spark runs it in the same worker (Python workers are
reused across tasks) and it starts where the read ahead starts, takes those batches
instead of asking the server again.

What a task yields is the same either way: a read ahead covers exactly the sequences
it was asked for (up to the stream's last sequence when it starts: nothing past that
exists yet), the task takes only the batches' rows up to its own last sequence and
reads whatever the read ahead did not cover itself.  A read ahead that failed, or one
that starts anywhere else than the task, is dropped and the task reads as it would
have (tests/connector/test_readahead.py).  Memory is bounded (``MAX_BYTES`` of
batches, then the reading thread waits), and a read ahead no task takes within
``KEEP_S`` seconds lets its batches go.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from typing import Iterator, Optional

log = logging.getLogger("jetspark.connector")

# At most this many bytes of Arrow batches wait in a read ahead; its thread then waits
# for a task to take them (the server's deliveries wait in the puller's bounded pulls).
MAX_BYTES = 64 << 20
# A read ahead no task has taken after this long lets its batches (and its thread) go.
KEEP_S = 60.0
# At most this many sequences are read ahead: a hint past it is cut to it.
MAX_SEQS = 1_000_000

Key = tuple


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()


class ReadAhead:
    """A background ``read_batches`` of ``lo..hi`` into a buffer of at most ``MAX_BYTES``."""

    def __init__(self, js, stream: str, lo: int, hi: int, subjects: Optional[list[str]], headers: bool,
                 batch_size: int) -> None:  # fmt: skip
        self.lo = lo  # the first sequence the batches not yet taken may hold
        self.hi = hi  # the last sequence it reads (lowered to the stream's last one when it starts)
        self.failed = False
        self._js, self._stream, self._subjects = js, stream, subjects
        self._headers, self._batch_size = headers, batch_size
        self._items: deque = deque()
        self._bytes = 0
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"jetspark-readahead-{stream}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        gen = None
        try:
            # The range as it stands now: past the stream's last sequence nothing exists yet,
            # and the task reads that part itself.
            top = min(self.hi, self._js.stream_info(self._stream).state.last_seq)
            with self._cond:
                self.hi = top
            if self.lo <= top:
                gen = self._js.read_batches(
                    self._stream, self.lo, top, subjects=self._subjects, headers=self._headers,
                    batch_size=self._batch_size,
                )  # fmt: skip
                for batch in gen:
                    if not self._put(batch, batch.nbytes):
                        return
            self._put(_END, 0)
        except BaseException as exc:  # noqa: BLE001 - handed to the task, which reads afresh
            self._put(_Failed(exc), 0)
        finally:
            if gen is not None:
                gen.close()  # ends the read (its consumer is deleted)

    def _put(self, item, nbytes: int) -> bool:
        with self._cond:
            while not self._stopped and self._bytes and self._bytes + nbytes > MAX_BYTES:
                self._cond.wait()
            if self._stopped:
                return False
            self._items.append(item)
            self._bytes += nbytes
            self._cond.notify_all()
            return True

    def _get(self):
        with self._cond:
            self._cond.wait_for(lambda: self._items or self._stopped)
            if self._stopped:
                return _Failed(RuntimeError("the read ahead was stopped"))
            item = self._items.popleft()
            if item is not _END and not isinstance(item, _Failed):
                self._bytes -= item.nbytes
            self._cond.notify_all()
            return item

    def _unget(self, batch) -> None:
        with self._cond:
            self._items.appendleft(batch)
            self._bytes += batch.nbytes

    def stop(self) -> None:
        """Let the batches go and end the reading thread (and its read)."""
        with self._cond:
            self._stopped = True
            self._items.clear()
            self._bytes = 0
            self._cond.notify_all()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def take(self, hi: int) -> Iterator:
        """The batches up to sequence ``hi``, the rows of the last one past ``hi`` kept for a
        next ``take``.  After it, ``lo`` is the first sequence not covered yet; ``failed``
        says the read ahead ended in an error (logged; the caller reads on from ``lo``)."""
        import pyarrow.compute as pc

        while self.lo <= hi:
            item = self._get()
            if item is _END:
                self.lo = self.hi + 1
                return
            if isinstance(item, _Failed):
                log.info("read ahead of stream %r from seq %d: %s; reading on afresh", self._stream, self.lo, item.exc)
                self.failed = True
                return
            seqs = item.column("seq")
            if seqs[len(seqs) - 1].as_py() <= hi:
                self.lo = seqs[len(seqs) - 1].as_py() + 1
                yield item
                continue
            keep = int(pc.sum(pc.less_equal(seqs, hi)).as_py() or 0)  # seqs ascend
            self._unget(item.slice(keep))
            self.lo = hi + 1
            if keep:
                yield item.slice(0, keep)


_lock = threading.Lock()
_aheads: dict[Key, ReadAhead] = {}


def _take(key: Key) -> Optional[ReadAhead]:
    """The read ahead kept for ``key`` in this process, no longer kept (or None)."""
    with _lock:
        return _aheads.pop((os.getpid(), *key), None)


def _keep(key: Key, ahead: ReadAhead) -> None:
    """Keep ``ahead`` for the next task of ``key`` in this process, for ``KEEP_S`` at most."""
    full = (os.getpid(), *key)
    with _lock:
        old = _aheads.pop(full, None)
        _aheads[full] = ahead
    if old is not None and old is not ahead:
        old.stop()
    timer = threading.Timer(KEEP_S, _expire, (full, ahead))
    timer.daemon = True
    timer.start()


def _expire(full: Key, ahead: ReadAhead) -> None:
    with _lock:
        if _aheads.get(full) is not ahead:
            return  # taken meanwhile
        del _aheads[full]
    ahead.stop()


def read(js, stream: str, lo: int, hi: int, subjects: Optional[list[str]], headers: bool, batch_size: int,
         key: Key, ahead: int) -> Iterator:  # fmt: skip
    """The batches of ``lo..hi`` (as ``js.read_batches`` gives them), taken from the read
    ahead kept for ``key`` if it starts at ``lo``; then, when ``ahead`` > ``hi``, a read
    ahead of ``hi + 1 .. ahead`` is started and kept for the next task."""
    pos = lo
    found = _take(key)
    try:
        if found is not None and found.lo == lo and not found.stopped:
            yield from found.take(hi)
            pos = min(found.lo, hi + 1)
            if not found.failed and found.lo <= found.hi:
                _keep(key, found)  # it reaches past this task: the next one may go on with it
                found = None
        if pos <= hi:
            yield from js.read_batches(stream, pos, hi, subjects=subjects, headers=headers, batch_size=batch_size)
    finally:
        if found is not None:
            found.stop()
    ahead = min(ahead, hi + MAX_SEQS)
    if ahead > hi:
        with _lock:
            current = _aheads.get((os.getpid(), *key))
        if current is None or current.lo != hi + 1:
            _keep(key, ReadAhead(js, stream, hi + 1, ahead, subjects, headers, batch_size))
