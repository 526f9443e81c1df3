"""One API handle per store per process: Spark's Python workers are reused across tasks.

The connector never creates an embedded store: reads and writes open an
existing one (``create=False``), so a mistyped ``store`` option fails with a
StoreError naming the path instead of leaving an empty store behind.  The
sink needs an existing store too: it writes to streams that must exist.
"""

from __future__ import annotations

import os
import threading

import jetspark
from jetspark.connection import is_server_url

_handles: dict[tuple[int, str, tuple[tuple[str, str], ...]], object] = {}
_lock = threading.Lock()


def handle(store: str, connection: tuple[tuple[str, str], ...] = ()):
    """The jetspark handle for ``store`` in this process (opened on first use, and again
    once the one kept is closed); ``connection``: options for a nats:// store
    (credentials, TLS, timeouts): handles opened with other options are others."""
    key = (os.getpid(), store, connection)
    js = _handles.get(key)
    if js is None or not _usable(js):
        with _lock:
            js = _handles.get(key)
            if js is None or not _usable(js):
                if js is not None:
                    _close_quietly(js)
                js = _handles[key] = _open(store, connection)
    return js


def _usable(js) -> bool:
    """Is a kept handle still worth handing out?  Not once ``closed``: closed, or (a
    nats:// store) its connection closed for good, so every call on it would fail.  A
    connection that is reconnecting is kept."""
    return not js.closed


def _close_quietly(js) -> None:
    try:
        js.close()
    except Exception:  # noqa: BLE001 - a handle that is gone already: nothing to keep
        pass


def _open(store: str, connection: tuple[tuple[str, str], ...]):
    if not connection:
        if is_server_url(store):
            return jetspark.connect(store)
        return jetspark.connect(store, create=False)
    return jetspark.connect(jetspark.ConnectOptions.from_strings(store, dict(connection)))
