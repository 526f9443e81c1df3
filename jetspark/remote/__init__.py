"""jetspark's second backend: the embedded engine's synchronous API, served by a real NATS
JetStream server (or cluster) through nats-py.

``jetspark.connect("nats://host:4222", **options)`` returns a ``NatsJetStream``;
``ConnectOptions`` lists the connection options (credentials, TLS, timeouts).

Modules: ``loop`` (the private event-loop thread), ``connect_options`` (connection
options), ``wire`` (JSON <-> dataclasses), ``client`` (the handle), ``pull``
(pull subscriptions and messages), ``bulk`` (Arrow range reads and batch
appends, time/bytes -> sequence, ack floors, the sink registry).
"""

from __future__ import annotations

from jetspark.remote.client import NatsJetStream
from jetspark.connect_options import ConnectOptions

__all__ = ["ConnectOptions", "NatsJetStream"]
