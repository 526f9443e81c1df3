"""jetspark's second backend: the embedded engine's synchronous API, served by a real NATS
JetStream server (or cluster) through nats-py.

``jetspark.connect("nats://host:4222", **options)`` returns a ``NatsJetStream``;
``jetspark.ConnectOptions`` lists the connection options (credentials, TLS, timeouts).

Modules, each importing only those above it (nothing imports ``client``):

- ``loop``: the private event-loop thread; ``wire``: JSON <-> dataclasses;
  ``fastpath``: nats-py's private hooks (raw deliveries and writes), each
  with a fallback to nats-py's public API; ``retry``: retrying through a time
  the server cannot answer (a leader election, a cold cluster);
- ``session``: the connection, requests, reconnects, ack batching, and the
  one place where nats-py's errors become jetspark errors;
- ``jsapi``: stream and consumer infos, shared by the handle and the bulk paths;
- ``pull_messages``: ``PullSubscription.messages()``, pull requests kept outstanding;
  ``pull``: pull subscriptions and delivered messages; ``push``: push subscriptions;
- ``range_reader``: pipelined pulls of a range (ephemeral consumers, plain gets);
  ``direct_frames``: batched direct-get replies read in bulk;
  ``direct``: a range read with pipelined batched direct gets, no consumer;
- ``reads``: Arrow range reads, the ordered consumer, time/bytes -> sequence;
- ``appends``: batch appends; ``async_publish``: ``publish_async``, pipelined;
  ``ack_floor``: advancing a durable's ack floor;
- ``snapshot``: stream backups through the server's snapshot and restore API;
- ``client``: ``NatsJetStream``, the handle, its verbs over all of the above.
"""

from __future__ import annotations

from jetspark.connect_options import ConnectOptions
from jetspark.remote.client import NatsJetStream

__all__ = ["ConnectOptions", "NatsJetStream"]
