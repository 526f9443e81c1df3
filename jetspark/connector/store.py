"""One API handle per store per process: Spark's Python workers are reused across tasks."""

from __future__ import annotations

import os
import threading

import jetspark

_handles: dict[tuple[int, str], object] = {}
_lock = threading.Lock()


def handle(store: str):
    """The jetspark handle for ``store`` in this process (opened on first use)."""
    key = (os.getpid(), store)
    js = _handles.get(key)
    if js is None:
        with _lock:
            js = _handles.get(key)
            if js is None:
                js = _handles[key] = jetspark.connect(store)
    return js
