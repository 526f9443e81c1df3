"""jetspark: Spark pipelines on a log with NATS JetStream semantics.

``jetspark.connect(path)`` opens the embedded engine on a directory, and
``jetspark.connect("nats://host:4222")`` a real NATS JetStream server; both
return a synchronous JetStream handle whose verbs and dataclasses are
nats-py's.
"""

from __future__ import annotations

import typing

from jetspark._version import __version__ as __version__
from jetspark.api import (
    AckPolicy,
    BackupInfo,
    ClusterInfo,
    ConsumerConfig,
    ConsumerInfo,
    ConsumerPause,
    DeliverPolicy,
    DiscardPolicy,
    ExternalStream,
    PeerInfo,
    PersistMode,
    Placement,
    PubAck,
    RawStreamMsg,
    ReplayPolicy,
    RePublish,
    RetentionPolicy,
    SequenceInfo,
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamConsumerLimits,
    StreamConsumerSource,
    StreamInfo,
    StreamSource,
    StreamSourceInfo,
    StreamState,
    SubjectTransform,
)
from jetspark.connect_options import ConnectOptions
from jetspark.connection import connect
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
    LocationError,
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
    from pyspark.sql import SparkSession

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
    "ConsumerPause",
    "CorruptBackupError",
    "CorruptStoreError",
    "DataLossError",
    "DeliverPolicy",
    "DiscardPolicy",
    "ExternalStream",
    "FetchTimeoutError",
    "JetSparkError",
    "LocationError",
    "MsgNotFoundError",
    "NextMsgTimeoutError",
    "NoHeartbeatError",
    "NoStreamResponseError",
    "NotFoundError",
    "OptionError",
    "PeerInfo",
    "PermissionDeniedError",
    "PersistMode",
    "Placement",
    "PubAck",
    "PublishAsyncTimeoutError",
    "RawStreamMsg",
    "RePublish",
    "ReplayPolicy",
    "RequestTimeoutError",
    "RetentionPolicy",
    "SequenceInfo",
    "ServerConnectionError",
    "ServerError",
    "ServiceUnavailableError",
    "SinkRegistryError",
    "StorageType",
    "StoreCompression",
    "StoreError",
    "StoreFullError",
    "StoreIOError",
    "StreamConfig",
    "StreamConsumerLimits",
    "StreamConsumerSource",
    "StreamInfo",
    "StreamNotFoundError",
    "StreamSource",
    "StreamSourceInfo",
    "StreamState",
    "SubjectTransform",
    "SubscriptionError",
    "TooManyStalledMsgsError",
    "connect",
    "local_session",
    "register",
]


def register(spark: SparkSession) -> None:
    """Make ``format("jetstream")`` available in a SparkSession."""
    from jetspark.connector import register as _register

    _register(spark)


def local_session(app_name: str = "jetspark", master: str = "local[2]", **conf: typing.Any) -> SparkSession:
    """A local SparkSession set up for jetspark, with ``format("jetstream")`` registered.

    ``conf``: Spark settings on top of jetspark's (``**{"spark.ui.enabled": "true"}``)."""
    from jetspark.connector.session import local_session as _local_session

    return _local_session(app_name, master, **conf)
