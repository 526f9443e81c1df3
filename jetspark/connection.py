"""Where a handle connects: ``connect()`` picks the backend, and the location checks it,
the CLI and the Spark connector share.

A location is either a NATS server URL (``nats://``, ``tls://``, ``ws://``, ``wss://``)
or a store directory.  A directory whose name starts like a URL (``nats:/h:4222`` with
one slash, ``nats:h``, ``localhost:4222``) is almost always a mistyped server URL, and
opening it would silently create a local store: ``check_store_path`` refuses it with
``LocationError``, showing the server URL meant.  The rules (tests/test_connect.py):

- ``scheme:`` at the start (a letter, then letters, digits, ``+``, ``-`` or ``.``, then
  ``:``) is refused, except:
- a single letter (``C:\\data``, ``c:/data``): a Windows drive, a path;
- ``file://...``: the path after it (``file:///abs``, ``file://./rel``); other ``file:``
  forms are refused with the ``file://`` form shown.

A directory whose name really holds a colon is reached as ``./nats:x``.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Callable, Optional

from jetspark.connect_options import ConnectOptions, redact_url
from jetspark.errors import LocationError

if TYPE_CHECKING:
    from jetspark.backend import JetStreamAPI

__all__ = ["SERVER_SCHEMES", "check_store_path", "connect", "is_server_url", "server_form"]

SERVER_SCHEMES = ("nats", "tls", "ws", "wss")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_HOST_PORT = re.compile(r"^[A-Za-z0-9.-]+:\d{1,5}$")
# Options both backends take.
_SHARED_OPTIONS = ("publish_async_max_pending",)


def is_server_url(text: str) -> bool:
    """Whether ``text`` names a NATS server (``nats://``, ``tls://``, ``ws://``, ``wss://``; a
    comma-separated list of them starts with one)."""
    return isinstance(text, str) and text.strip().lower().startswith(tuple(s + "://" for s in SERVER_SCHEMES))


def server_form(text: str) -> Optional[str]:
    """The server URL a URL-looking store path probably meant (``nats:/h:4222`` ->
    ``nats://h:4222``, ``localhost:4222`` -> ``nats://localhost:4222``), or None."""
    m = _SCHEME.match(text.strip())
    if m is None:
        return None
    scheme, rest = m.group(1).lower(), text.strip()[m.end() :].lstrip("/")
    if scheme in SERVER_SCHEMES:
        return f"{scheme}://{rest}" if rest else None
    if _HOST_PORT.match(text.strip()):
        return f"nats://{text.strip()}"
    return None


def check_store_path(text: str, *, argument: str = "url", how: str = "connect({url!r})") -> str:
    """``text`` itself when it may name a store directory; ``LocationError`` (a ``ValueError``)
    when it looks like a URL, a server URL included (see the module docstring), naming
    ``argument`` and showing the server URL meant written as ``how`` (``{url}`` is replaced).
    Nothing is created."""
    stripped = text.strip()
    m = _SCHEME.match(stripped)
    if m is None or len(m.group(1)) == 1:  # no scheme, or a Windows drive letter
        return text
    scheme = m.group(1).lower()
    if scheme == "file":
        if stripped[m.end() :].startswith("//"):
            return text
        path = stripped[m.end() :]
        raise LocationError(
            f"{argument + ' ' if argument else ''}{text!r} is not a file URL jetspark reads (file:// then the path): "
            f"write the path itself, {path!r}",
            argument,
        )
    meant = server_form(stripped)
    if meant is not None:
        hint = f"for the NATS server, write {how.format(url=meant)}"
    else:
        hint = f"jetspark connects to {', '.join(s + '://' for s in SERVER_SCHEMES)} servers and to store directories"
    if "://" not in stripped:
        hint += f"; for a directory whose name has a colon, write ./{text}"
    raise LocationError(
        f"{argument + ' ' if argument else ''}{redact_url(text)!r} looks like a URL, not a store directory: {hint}",
        argument,
    )


def connect(
    url: Any,
    *,
    clock: Optional[Callable[[], int]] = None,
    sync: Optional[str] = None,
    create: Optional[bool] = None,
    **options: Any,
) -> "JetStreamAPI":
    """Open a JetStream handle: the embedded engine on a directory, or a real NATS server.

    - a path (``str`` or ``os.PathLike``) or a ``file://`` URL: the embedded
      engine on that directory, created if needed; ``create=False`` opens an
      existing store only (``StoreError`` naming the path otherwise, and
      nothing is created).  ``sync="os"`` (the
      default): a returned publish has been written to the operating system
      and survives the process being killed; ``sync="fsync"``: it has also
      been flushed to the disk.  ``clock`` is a callable returning
      nanoseconds since the epoch; tests inject one to move time without
      sleeping.  A path that starts like a URL (``nats:/host:4222``,
      ``nats:host``, ``host:4222``) is refused with ``LocationError`` showing
      the server URL meant, and nothing is created (``jetspark.connection``).
    - ``nats://host:port`` (also ``tls://``, ``ws://``, ``wss://``; several
      servers of one cluster separated by commas): a real NATS JetStream
      server through nats-py, with the same verbs, dataclasses and errors.
      ``options`` are connection options (see
      ``jetspark.ConnectOptions``): ``timeout`` (seconds, default 5:
      every call gives up within it), ``user``/``password``, ``token``,
      ``user_credentials`` (a .creds file), ``nkeys_seed`` (a seed file) or
      ``nkeys_seed_str`` (the seed), ``tls_ca``/``tls_cert``/``tls_key``,
      ``name``, ``connect_timeout``, ...  A malformed URL is ``LocationError``
      naming it as given.
    - a ``ConnectOptions`` (``jetspark.ConnectOptions.build(url, ...)`` or
      ``.from_strings(url, mapping)``): a NATS server with those options.
    - either backend takes ``publish_async_max_pending`` (default 4000, as in nats-py),
      how many ``publish_async`` futures may be pending at once.

    This is the one place that chooses a backend: the CLI and the Spark
    connector open stores through it too.
    """
    if isinstance(url, ConnectOptions):
        if clock is not None or sync is not None or create is not None or options:
            raise TypeError("connect(ConnectOptions) takes no other arguments: the options are in the ConnectOptions")
        from jetspark.remote import NatsJetStream

        return NatsJetStream.from_options(url)
    if not isinstance(url, (str, os.PathLike)) or not isinstance(os.fspath(url), str):
        raise TypeError(f"url must be a path (str or os.PathLike) or a nats:// URL, not {type(url).__name__}")
    text = os.fspath(url)
    if not text.strip():
        raise ValueError("url must be a path or a nats:// URL, not an empty string")
    if "\0" in text:
        raise ValueError(f"url must not contain a NUL character: {text!r}")
    if clock is not None and not callable(clock):
        raise TypeError(f"clock must be a callable returning nanoseconds since the epoch, not {type(clock).__name__}")
    if sync is not None and not isinstance(sync, str):
        raise TypeError(f"sync must be 'os' or 'fsync', not {sync!r}")
    if is_server_url(text):
        if clock is not None or sync is not None or create is not None:
            raise TypeError("clock=, sync= and create= apply to the embedded engine (a path), not to a nats:// server")
        from jetspark.remote import NatsJetStream

        return NatsJetStream(text, **options)
    if isinstance(url, str):  # an os.PathLike is a path by construction
        check_store_path(text)
    shared = {k: options.pop(k) for k in _SHARED_OPTIONS if k in options}
    if options:
        raise TypeError(
            f"connection options {sorted(options)} apply to a nats:// server, not to the embedded engine at {text!r}"
        )
    from jetspark.engine.handle import JetStream

    return JetStream(url, clock=clock, sync=sync or "os", create=True if create is None else create, **shared)
