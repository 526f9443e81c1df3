"""jetspark: Spark pipelines on a log with NATS JetStream semantics.

``jetspark.connect(path)`` opens the embedded engine on a directory, and
``jetspark.connect("nats://host:4222")`` a real NATS JetStream server; both
return a synchronous JetStream handle whose verbs and dataclasses are
nats-py's.
"""

from __future__ import annotations

import os
import re
import typing

from jetspark._version import __version__ as __version__
from jetspark.api import (
    AckPolicy,
    BackupInfo,
    ClusterInfo,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    DiscardPolicy,
    PeerInfo,
    PubAck,
    RawStreamMsg,
    ReplayPolicy,
    RetentionPolicy,
    SequenceInfo,
    StorageType,
    StreamConfig,
    StreamInfo,
    StreamState,
)
from jetspark.connect_options import ConnectOptions
from jetspark.errors import (
    AckFloorError,
    APIError,
    AuthenticationError,
    BackupError,
    BadRequestError,
    ClosedError,
    ConsumerNotFoundError,
    CorruptBackupError,
    CorruptStoreError,
    DataLossError,
    FetchTimeoutError,
    JetSparkError,
    MsgNotFoundError,
    NextMsgTimeoutError,
    NoHeartbeatError,
    NoStreamResponseError,
    NotFoundError,
    OptionError,
    PermissionDeniedError,
    PublishAsyncTimeoutError,
    RequestTimeoutError,
    ServerConnectionError,
    ServerError,
    ServiceUnavailableError,
    SinkRegistryError,
    StoreError,
    StoreFullError,
    StoreIOError,
    StreamNotFoundError,
    SubscriptionError,
    TooManyStalledMsgsError,
)

if typing.TYPE_CHECKING:
    from jetspark.backend import JetStreamAPI

__all__ = [
    "APIError",
    "AckFloorError",
    "AckPolicy",
    "AuthenticationError",
    "BackupError",
    "BackupInfo",
    "BadRequestError",
    "ClosedError",
    "ClusterInfo",
    "ConnectOptions",
    "ConsumerConfig",
    "ConsumerInfo",
    "ConsumerNotFoundError",
    "CorruptBackupError",
    "CorruptStoreError",
    "DataLossError",
    "DeliverPolicy",
    "DiscardPolicy",
    "FetchTimeoutError",
    "JetSparkError",
    "MsgNotFoundError",
    "NextMsgTimeoutError",
    "NoHeartbeatError",
    "NoStreamResponseError",
    "NotFoundError",
    "OptionError",
    "PeerInfo",
    "PermissionDeniedError",
    "PubAck",
    "PublishAsyncTimeoutError",
    "RawStreamMsg",
    "ReplayPolicy",
    "RequestTimeoutError",
    "RetentionPolicy",
    "SequenceInfo",
    "ServerConnectionError",
    "ServerError",
    "ServiceUnavailableError",
    "SinkRegistryError",
    "StorageType",
    "StoreError",
    "StoreFullError",
    "StoreIOError",
    "StreamConfig",
    "StreamInfo",
    "StreamNotFoundError",
    "StreamState",
    "SubscriptionError",
    "TooManyStalledMsgsError",
    "connect",
    "local_session",
    "register",
]


def register(spark) -> None:
    """Make ``format("jetstream")`` available in a SparkSession."""
    from jetspark.connector import register as _register

    _register(spark)


def local_session(app_name: str = "jetspark", master: str = "local[2]", **conf):
    """A local SparkSession set up for jetspark, with ``format("jetstream")`` registered.

    ``conf``: Spark settings on top of jetspark's (``**{"spark.ui.enabled": "true"}``)."""
    from jetspark.connector.session import local_session as _local_session

    return _local_session(app_name, master, **conf)


_SERVER_SCHEMES = ("nats://", "tls://", "ws://", "wss://")
# Options both backends take.
_SHARED_OPTIONS = ("publish_async_max_pending",)


def connect(url, *, clock=None, sync: str | None = None, create: bool | None = None, **options) -> JetStreamAPI:
    """Open a JetStream handle: the embedded engine on a directory, or a real NATS server.

    - a path (``str`` or ``os.PathLike``) or a ``file://`` URL: the embedded
      engine on that directory, created if needed; ``create=False`` opens an
      existing store only (``StoreError`` naming the path otherwise, and
      nothing is created).  ``sync="os"`` (the
      default): a returned publish has been written to the operating system
      and survives the process being killed; ``sync="fsync"``: it has also
      been flushed to the disk.  ``clock`` is a callable returning
      nanoseconds since the epoch; tests inject one to move time without
      sleeping.
    - ``nats://host:port`` (also ``tls://``, ``ws://``, ``wss://``; several
      servers of one cluster separated by commas): a real NATS JetStream
      server through nats-py, with the same verbs, dataclasses and errors.
      ``options`` are connection options (see
      ``jetspark.ConnectOptions``): ``timeout`` (seconds, default 5:
      every call gives up within it), ``user``/``password``, ``token``,
      ``user_credentials`` (a .creds file), ``nkeys_seed`` (a seed file) or
      ``nkeys_seed_str`` (the seed), ``tls_ca``/``tls_cert``/``tls_key``,
      ``name``, ``connect_timeout``, ...
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
    if text.strip().lower().startswith(_SERVER_SCHEMES):
        if clock is not None or sync is not None or create is not None:
            raise TypeError("clock=, sync= and create= apply to the embedded engine (a path), not to a nats:// server")
        from jetspark.remote import NatsJetStream

        return NatsJetStream(text, **options)
    if "://" in text and not text.startswith("file://") and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
        raise ValueError(f"cannot connect to {text.split('://', 1)[0]}:// URLs: give a path, file://path, or nats://host:port")
    shared = {k: options.pop(k) for k in _SHARED_OPTIONS if k in options}
    if options:
        raise TypeError(f"connection options {sorted(options)} apply to a nats:// server, not to the embedded engine at {text!r}")
    from jetspark.engine.handle import JetStream

    return JetStream(url, clock=clock, sync=sync or "os", create=True if create is None else create, **shared)
