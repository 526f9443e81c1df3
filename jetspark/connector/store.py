"""One API handle per store per process: Spark's Python workers are reused across tasks."""

from __future__ import annotations

import os
import threading

import jetspark

_handles: dict[tuple[int, str], object] = {}
_lock = threading.Lock()


def handle(store: str, connection: tuple[tuple[str, str], ...] = ()):
    """The jetspark handle for ``store`` in this process (opened on first use);
    ``connection``: options for a nats:// store (credentials, TLS, timeouts)."""
    key = (os.getpid(), store, connection)
    js = _handles.get(key)
    if js is None:
        with _lock:
            js = _handles.get(key)
            if js is None:
                js = _handles[key] = _open(store, connection)
    return js


def _open(store: str, connection: tuple[tuple[str, str], ...]):
    if not connection:
        return jetspark.connect(store)
    from jetspark.remote.client import NatsJetStream
    from jetspark.remote.options import ConnectOptions

    return NatsJetStream.from_options(ConnectOptions.from_strings(store, dict(connection)))
