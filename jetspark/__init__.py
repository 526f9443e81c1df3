"""jetspark: Spark pipelines on a log with NATS JetStream semantics.

``jetspark.connect(path)`` opens the embedded engine on a directory and
returns a synchronous JetStream handle whose verbs and dataclasses are
nats-py's.
"""

from __future__ import annotations

from jetspark.api import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DeliverPolicy,
    DiscardPolicy,
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
from jetspark.errors import (
    APIError,
    BadRequestError,
    ClosedError,
    ConsumerNotFoundError,
    CorruptStoreError,
    FetchTimeoutError,
    JetSparkError,
    MsgNotFoundError,
    NoStreamResponseError,
    NotFoundError,
    ServerError,
    ServiceUnavailableError,
    StoreError,
    StreamNotFoundError,
)

__version__ = "0.1.0"

__all__ = [
    "APIError",
    "AckPolicy",
    "BadRequestError",
    "ClosedError",
    "ConsumerConfig",
    "ConsumerInfo",
    "ConsumerNotFoundError",
    "CorruptStoreError",
    "DeliverPolicy",
    "DiscardPolicy",
    "FetchTimeoutError",
    "JetSparkError",
    "MsgNotFoundError",
    "NoStreamResponseError",
    "NotFoundError",
    "PubAck",
    "RawStreamMsg",
    "ReplayPolicy",
    "RetentionPolicy",
    "SequenceInfo",
    "ServerError",
    "ServiceUnavailableError",
    "StorageType",
    "StoreError",
    "StreamConfig",
    "StreamInfo",
    "StreamNotFoundError",
    "StreamState",
    "connect",
    "local_session",
    "register",
]


def register(spark) -> None:
    """Make ``format("jetstream")`` available in a SparkSession."""
    from jetspark.connector import register as _register

    _register(spark)


def local_session(app_name: str = "jetspark", master: str = "local[2]", **conf):
    """A local SparkSession set up for jetspark, with ``format("jetstream")`` registered."""
    from jetspark.connector.session import local_session as _local_session

    return _local_session(app_name, master, **conf)


def connect(path, *, clock=None, sync: str = "os"):
    """Open (creating if needed) the store at ``path`` and return its JetStream handle.

    ``sync="os"`` (the default): a returned publish has been written to the
    operating system and survives the process being killed.  ``sync="fsync"``:
    it has also been flushed to the disk.  ``clock`` is a callable returning
    nanoseconds since the epoch; tests inject one to move time without sleeping.
    """
    from jetspark.engine.handle import JetStream

    return JetStream(path, clock=clock, sync=sync)
