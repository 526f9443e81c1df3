"""The backend seam: what a backend's handle implements under ``HandleBase``, declared whole.

``HandleBase`` (base.py) writes every public verb once: it checks the
arguments (``jetspark.validate``, and the stream and consumer names here) and
then calls one of these hooks, so a hook receives arguments already checked
and does the backend's part alone.  Each hook is an abstract method with its
signature and a one-line contract; a handle missing one cannot be
instantiated, and tests/test_backend.py checks that both backends' hooks
have these signatures.  Backends: ``jetspark.engine.handle.JetStream`` and
``jetspark.remote.client.NatsJetStream``.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

from jetspark.err_codes import CONSUMER_NOT_FOUND, STREAM_INVALID_CONFIG, STREAM_NOT_FOUND
from jetspark.errors import api_error

if TYPE_CHECKING:
    import datetime as _dt

    import pyarrow as pa

    from jetspark.api import (
        BackupInfo,
        BatchAck,
        ConsumerConfig,
        ConsumerInfo,
        ConsumerPause,
        PubAck,
        RawStreamMsg,
        SequenceInfo,
        StreamConfig,
        StreamInfo,
    )
    from jetspark.backend import MsgAPI
    from jetspark.backend.archive import Archive, Meter, Writer

__all__ = ["Hooks", "consumer_arg", "stream_arg", "stream_config_name", "token_ok"]

_WHITESPACE = frozenset(" \t\r\n\f\v")  # what NATS calls whitespace in a subject


def token_ok(value: Any) -> bool:
    """Can ``value`` be one token of an API subject?  (A str, not empty, no '.', no
    whitespace, not '*' or '>' alone, and UTF-8 can encode it: the protocol line is UTF-8,
    and a lone surrogate would fail inside nats-py instead of here.)"""
    if (
        not isinstance(value, str)
        or not value
        or value in ("*", ">")
        or "." in value
        or not _WHITESPACE.isdisjoint(value)
    ):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def stream_arg(value: Any) -> str:
    """A stream argument: a name a stream can have, else 10059 (no stream has it), as the
    server answers a request whose subject cannot carry the name."""
    if not token_ok(value):
        raise api_error(STREAM_NOT_FOUND)
    return value


def stream_config_name(value: Any) -> str:
    """The name in a stream config (add_stream, update_stream): a name a stream can have,
    else 10052 with the server's text.  The server answers a name its API subject can carry
    ("a*") so, before looking for the stream; one it cannot carry ("a.b") is refused here
    the same way, on either backend."""
    if not token_ok(value):
        raise api_error(
            STREAM_INVALID_CONFIG, err="stream name is required and can not contain '.', '*', '>', '\\', '/'"
        )
    return value


def consumer_arg(value: Any) -> str:
    """A consumer argument: a name a consumer can have, else 10014 (no consumer has it)."""
    if not token_ok(value):
        raise api_error(CONSUMER_NOT_FOUND)
    return value


class Hooks(abc.ABC):
    """The hooks of a backend's handle (see the module docstring)."""

    _BACKUP_KIND: str  # the backups this backend writes and reads: "engine" or "nats" (archive.py)

    # ------------------------------------------------------------------ lifecycle

    @property
    @abc.abstractmethod
    def _closed(self) -> bool:
        """Whether the handle is closed."""

    @property
    @abc.abstractmethod
    def _location(self) -> str:
        """What the handle is on, for messages: the store's path or the server's URL."""

    @abc.abstractmethod
    def _check_open(self) -> None:
        """ClosedError once the handle is closed."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Release what the handle holds (its publish_async queue and push subscriptions are done)."""

    # ------------------------------------------------------------------ streams

    @abc.abstractmethod
    def _add_stream(self, config: StreamConfig) -> StreamInfo:
        """Create the stream of a checked config; the same config again is a no-op."""

    @abc.abstractmethod
    def _update_stream(self, config: StreamConfig) -> StreamInfo:
        """Replace the config of the stream named in a checked config."""

    @abc.abstractmethod
    def _delete_stream(self, name: str) -> bool:
        """Delete the stream ``name`` and its messages (a damaged one too)."""

    @abc.abstractmethod
    def _stream_info(self, name: str, subjects_filter: Optional[str], deleted_details: bool) -> StreamInfo:
        """``stream_info`` of the stream ``name``."""

    @abc.abstractmethod
    def _streams_info(self) -> list[StreamInfo]:
        """Every stream's info, by name."""

    @abc.abstractmethod
    def _stream_names(self) -> list[str]:
        """Every stream's name, sorted."""

    @abc.abstractmethod
    def _find_stream_name_by_subject(self, subject: str) -> str:
        """The stream capturing ``subject`` (a valid subject), else 10059."""

    @abc.abstractmethod
    def _purge_stream(self, name: str, subject: Optional[str], seq: Optional[int], keep: Optional[int]) -> bool:
        """Purge the stream ``name`` (checked ``subject``/``seq``/``keep``)."""

    # ------------------------------------------------------------------ messages

    @abc.abstractmethod
    def _publish(self, subject: str, payload: bytes, headers: Optional[dict], timeout: Optional[float]) -> PubAck:
        """Store one message (``subject``, ``headers`` checked); ``timeout`` the call's, None for the handle's."""

    @abc.abstractmethod
    def _get_msg(
        self, stream: str, seq: Optional[int], last_by_subj: Optional[str], next_by_subj: Optional[str]
    ) -> RawStreamMsg:
        """The message of the server's MSG.GET request with these fields."""

    @abc.abstractmethod
    def _delete_msg(self, stream: str, seq: int) -> bool:
        """Remove the message ``seq`` of ``stream``."""

    @abc.abstractmethod
    def _publish_batch(self, table: pa.Table, stream: str, msg_id_prefix: Optional[str], msg_id_start: int) -> BatchAck:
        """Store a table as ``jetspark.validate.batch_table`` returns it in the stream ``stream``."""

    @abc.abstractmethod
    def _new_async_publisher(self) -> Any:
        """publish_async's store: ``window``, ``pid``, ``submit(subject, payload, headers, future)``, ``close(why)``."""

    # ------------------------------------------------------------------ bulk verbs

    @abc.abstractmethod
    def _read_batches(
        self,
        stream: str,
        start_seq: int,
        end_seq: Optional[int],
        subjects: Optional[Sequence[str]],
        batch_size: int,
        headers: bool,
    ) -> Iterator[pa.RecordBatch]:
        """``read_batches`` with its arguments checked (``jetspark.validate.read_args``)."""

    @abc.abstractmethod
    def _seq_for_bytes(self, stream: str, lo: int, hi: int, max_bytes: int) -> int:
        """``seq_for_bytes`` with its arguments checked."""

    @abc.abstractmethod
    def _seq_for_time(self, stream: str, when: int) -> int:
        """``seq_for_time`` of a time in ns since the epoch."""

    @abc.abstractmethod
    def _advance_ack_floor(self, stream: str, durable: str, seq: int) -> SequenceInfo:
        """``advance_ack_floor`` with ``seq`` checked."""

    @abc.abstractmethod
    def _ordered_consumer(
        self,
        stream: str,
        subjects: Optional[Sequence[str]],
        start_seq: Optional[int],
        end_seq: Optional[int],
        batch_size: int,
    ) -> Iterator[MsgAPI]:
        """``ordered_consumer`` with its arguments checked."""

    # ------------------------------------------------------------------ consumers

    @abc.abstractmethod
    def _put_consumer(self, stream: str, config: ConsumerConfig, action: str, timeout: Optional[float]) -> ConsumerInfo:
        """CONSUMER.CREATE of a checked config; ``action`` "" (create or update), "create" or "update"."""

    @abc.abstractmethod
    def _delete_consumer(self, stream: str, consumer: str) -> bool:
        """Delete the consumer (a damaged one too)."""

    @abc.abstractmethod
    def _pause_consumer(
        self, stream: str, consumer: str, pause_until: Optional[_dt.datetime], timeout: Optional[float]
    ) -> ConsumerPause:
        """CONSUMER.PAUSE: until ``pause_until`` (aware UTC), or resume (None)."""

    @abc.abstractmethod
    def _consumer_info(self, stream: str, consumer: str, timeout: Optional[float]) -> ConsumerInfo:
        """The consumer's info; ``timeout`` the call's own, None for the handle's."""

    @abc.abstractmethod
    def _consumers_info(self, stream: str) -> list[ConsumerInfo]:
        """Every consumer's info of ``stream``, by name."""

    @abc.abstractmethod
    def _subscription(
        self, stream: str, consumer: str
    ) -> Any:  # (a PullSubscriptionAPI: tests/test_backend.py checks it)
        """The backend's pull subscription on an existing consumer."""

    @abc.abstractmethod
    def _push_subscription(
        self,
        stream: str,
        info: ConsumerInfo,
        cb: Optional[Callable[[MsgAPI], Any]],
        auto_ack: bool,
        ordered: Optional[ConsumerConfig],
        owned: bool,
    ) -> Any:  # (a PushSubscriptionAPI: tests/test_backend.py checks it)
        """The backend's push subscription on an existing push consumer (``jetspark.backend.push``)."""

    @abc.abstractmethod
    def _new_inbox(self) -> str:
        """A deliver subject for a new push consumer."""

    # ------------------------------------------------------------------ backup and restore (archive.py)

    @abc.abstractmethod
    def _backup_stream(self, name: str, writer: Writer, consumers: bool, meter: Meter) -> BackupInfo:
        """Copy the stream into ``writer`` and ``finish`` it."""

    @abc.abstractmethod
    def _restore_stream(self, archive: Archive, meter: Meter) -> StreamInfo:
        """Create the stream of an archive whose parts were checked."""
