"""What both JetStream handles share, written once: ``HandleBase``.

``jetspark.engine.handle.JetStream`` and ``jetspark.remote.client.NatsJetStream``
inherit it.  It owns the verbs whose logic is the same on both (argument
checks and config-with-overrides, ``pull_subscribe`` over
``pull_subscribe_bind``, ``publish_batch``'s routing, the aliases) and calls
the backend for what differs, through these hooks:

- ``_add_stream(config)`` / ``_update_stream(config)``: a checked ``StreamConfig``;
- ``_put_consumer(stream, config, action)``: a checked ``ConsumerConfig``;
  ``action`` is ``""`` (create or update), ``"create"`` or ``"update"``,
  as in the server's ``CONSUMER.CREATE`` request;
- ``_publish_batch(table, stream, msg_id_prefix, msg_id_start)``: a table as
  ``jetspark.validate.batch_table`` returns it, for a named stream;
- ``_subscription(stream, consumer)``: the backend's pull subscription on an
  existing consumer;
- and the verbs of ``jetspark.backend.JetStreamAPI`` not defined here.

The contract of every verb is its docstring in ``jetspark.backend``.  This
module imports neither backend (tests/test_imports.py).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, Optional

from jetspark import validate as V
from jetspark.api import (
    BatchAck,
    ConsumerConfig,
    ConsumerInfo,
    RawStreamMsg,
    SequenceInfo,
    StreamConfig,
    StreamInfo,
)
from jetspark.errors import (
    BadRequestError,
    ConsumerNotFoundError,
    NoStreamResponseError,
    StreamNotFoundError,
)
from jetspark.protocol import subjects as subj

if TYPE_CHECKING:
    import pyarrow as pa

    from jetspark.backend import PullSubscriptionAPI

__all__ = ["HandleBase", "new_consumer_name"]


def new_consumer_name() -> str:
    """A generated consumer name: 22 random letters and digits, like nats-py's NUID."""
    return secrets.token_urlsafe(16).replace("-", "x").replace("_", "y")[:22]


class HandleBase:
    """The verbs both backends implement alike (see the module docstring)."""

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ streams

    def add_stream(self, config: Optional[StreamConfig] = None, **params: Any) -> StreamInfo:
        return self._add_stream(V.stream_config(config, params))

    def update_stream(self, config: Optional[StreamConfig] = None, **params: Any) -> StreamInfo:
        return self._update_stream(V.stream_config(config, params))

    # ------------------------------------------------------------------ messages

    def get_last_msg(self, stream: str, subject: str) -> RawStreamMsg:
        return self.get_msg(stream, last_by_subj=subject)

    def publish_batch(self, data: Any, stream: Optional[str] = None, msg_id_prefix: Optional[str] = None, msg_id_start: int = 0) -> BatchAck:
        table = V.batch_table(data, msg_id_prefix, msg_id_start)
        if stream is None:
            stream = self._stream_of_batch(table)
        return self._publish_batch(table, stream, msg_id_prefix, int(msg_id_start))

    def _stream_of_batch(self, table: "pa.Table") -> str:
        """The stream ``publish`` of the first row's subject would reach."""
        if table.num_rows == 0:
            raise BadRequestError(400, 10003, "publish_batch of an empty table needs stream=")
        first = table.column("subject")[0].as_py()
        if not (subj.is_valid(first) and V.publish_subject_ok(first)):
            raise NoStreamResponseError(first)
        try:
            return self.find_stream_name_by_subject(first)
        except StreamNotFoundError:
            raise NoStreamResponseError(first) from None

    # ------------------------------------------------------------------ consumers

    def add_consumer(self, stream: str, config: Optional[ConsumerConfig] = None, **params: Any) -> ConsumerInfo:
        return self._put_consumer(stream, V.consumer_config(config, params), "")

    def create_consumer(self, stream: str, config: Optional[ConsumerConfig] = None, **params: Any) -> ConsumerInfo:
        return self._put_consumer(stream, V.consumer_config(config, params), "create")

    def update_consumer(self, stream: str, config: Optional[ConsumerConfig] = None, **params: Any) -> ConsumerInfo:
        return self._put_consumer(stream, V.consumer_config(config, params), "update")

    def pull_subscribe(
        self, subject: Optional[str] = None, durable: Optional[str] = None, stream: Optional[str] = None, config: Optional[ConsumerConfig] = None
    ) -> "PullSubscriptionAPI":
        V.pull_subscribe_args(subject, durable, stream, config)
        if stream is None:
            stream = self.find_stream_name_by_subject(subject)
        if durable:
            try:
                return self.pull_subscribe_bind(durable, stream)
            except ConsumerNotFoundError:
                pass
        config = V.consumer_config(config, {})
        if subject and not config.filter_subject and not config.filter_subjects:
            config = config.evolve(filter_subject=subject)
        if durable:
            config = config.evolve(name=durable, durable_name=durable)  # as nats-py names it
        elif not config.name and not config.durable_name:
            config = config.evolve(name=new_consumer_name())
        info = self.add_consumer(stream, config)
        return self._subscription(stream, info.name)

    def pull_subscribe_bind(self, durable: Optional[str] = None, stream: Optional[str] = None, consumer: Optional[str] = None) -> "PullSubscriptionAPI":
        name = V.bind_args(durable, stream, consumer)
        self.consumer_info(stream, name)
        return self._subscription(stream, name)

    def ack_floor(self, stream: str, durable: str) -> SequenceInfo:
        return self.consumer_info(stream, durable).ack_floor
