"""The durable consumer's ack floor following a streaming query's checkpoint, in the background.

Releasing a micro-batch (``advance_ack_floor`` to its end) has the store acknowledge
every message of it through the consumer: on a nats-server each one is delivered to
the driver once more, as long as a micro-batch takes to read.  The source starts the
release when Spark asks for the next offsets and lets the next micro-batch run
meanwhile; the following trigger first waits for it.  A release that cannot take
effect still fails the query, one trigger later at most: the next ``latestOffset``
raises its error, and a trigger that plans no batch waits for its release and raises
there (tests/connector/test_consumers.py).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Optional

from jetspark.errors import JetSparkError

log = logging.getLogger("jetspark.connector")


class Releases:
    """``advance(seq)`` in a thread of its own, one at a time; ``settle()`` waits for it and
    raises what it raised.  Seqs only grow: one at or below what is released (or being
    released) is nothing to do."""

    def __init__(self, what: str, advance: Callable[[int], None]) -> None:
        self.what = what  # "stream 'S', consumer 'c'" for the log
        self._advance = advance
        self.released = -1  # the highest seq released
        self._target = -1  # the highest seq released or being released
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None

    def __getstate__(self):
        # Spark pickles the source's reader for its tasks, which release nothing.
        state = dict(self.__dict__)
        state["_thread"] = None
        return state

    def covered(self, seq: int) -> bool:
        return seq <= self._target

    def start(self, seq: int) -> None:
        """Begin releasing up to ``seq`` (after the release under way, whose error is raised here)."""
        if self.covered(seq):
            return
        self.settle()
        self._target = seq
        self._thread = threading.Thread(target=self._run, args=(seq,), name="jetspark-release", daemon=True)
        self._thread.start()

    def _run(self, seq: int) -> None:
        try:
            self._advance(seq)
        except BaseException as exc:  # noqa: BLE001 - raised to Spark by settle()
            self._error = exc
            if isinstance(exc, JetSparkError):
                log.error("commit of %s up to seq %d: the ack floor did not advance: %s", self.what, seq, exc)
            return
        self.released = seq

    def settle(self) -> None:
        """Wait for the release under way; raise its error (the query then fails with it)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        if error is not None:
            self._target = self.released  # a later trigger may try again
            raise error

    def now(self, seq: int) -> None:
        """Release up to ``seq`` and wait for it."""
        self.start(seq)
        self.settle()
