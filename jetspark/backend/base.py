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
- ``_backup_stream(name, writer, consumers, meter)``: copy the stream into an
  ``archive.Writer`` and ``finish`` it; ``_restore_stream(archive, meter)``: create the
  stream of an ``archive.Archive`` whose parts were checked (``_BACKUP_KIND`` names the
  backups a backend reads: ``"engine"`` or ``"nats"``);
- ``_new_async_publisher()``: what stores ``publish_async``'s messages (see
  there), and ``_check_open()``: ``ClosedError`` once the handle is closed;
- ``_stream_info``, ``_purge_stream``, ``_get_msg``, ``_delete_msg``,
  ``_read_batches``, ``_seq_for_bytes``, ``_seq_for_time``,
  ``_advance_ack_floor``, ``_ordered_consumer``: the verb of that name with
  its arguments already checked (``jetspark.validate``), so both backends
  accept and refuse exactly the same arguments, before doing anything;
- and the verbs of ``jetspark.backend.JetStreamAPI`` not defined here.

The contract of every verb is its docstring in ``jetspark.backend``; a verb
without a docstring of its own gets that one, so ``help(js.read_batches)``
shows the contract.  This module imports neither backend
(tests/test_imports.py).
"""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence

from jetspark import validate as V
from jetspark.api import (
    BackupInfo,
    BatchAck,
    ConsumerConfig,
    ConsumerInfo,
    PubAck,
    RawStreamMsg,
    SequenceInfo,
    StreamConfig,
    StreamInfo,
)
from jetspark.backend import JetStreamAPI, archive
from jetspark.backend.window import settle
from jetspark.errors import (
    BadRequestError,
    ClosedError,
    ConsumerNotFoundError,
    JetSparkError,
    NoStreamResponseError,
    StreamNotFoundError,
)
from jetspark.protocol import subjects as subj

if TYPE_CHECKING:
    from concurrent.futures import Future

    import pyarrow as pa

    from jetspark.backend import MsgAPI, PullSubscriptionAPI

__all__ = ["HandleBase", "new_consumer_name"]

_NEW_PUBLISHER = threading.Lock()


def new_consumer_name() -> str:
    """A generated consumer name: 22 random letters and digits, like nats-py's NUID."""
    return secrets.token_urlsafe(16).replace("-", "x").replace("_", "y")[:22]


class HandleBase:
    """The verbs both backends implement alike (see the module docstring)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _document(cls)

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

    def stream_info(self, name: str, subjects_filter: Optional[str] = None, deleted_details: bool = False) -> StreamInfo:
        V.filter_subject(subjects_filter, "subjects_filter")
        V.boolean(deleted_details, "deleted_details", api=True)
        return self._stream_info(name, subjects_filter, deleted_details)

    def purge_stream(self, name: str, subject: Optional[str] = None, seq: Optional[int] = None, keep: Optional[int] = None) -> bool:
        return self._purge_stream(name, *V.purge_args(subject, seq, keep))

    # ------------------------------------------------------------------ messages

    def get_msg(self, stream: str, seq: Optional[int] = None, last_by_subj: Optional[str] = None, next_by_subj: Optional[str] = None) -> RawStreamMsg:
        return self._get_msg(stream, *V.get_msg_args(seq, last_by_subj, next_by_subj))

    def get_last_msg(self, stream: str, subject: str) -> RawStreamMsg:
        return self.get_msg(stream, last_by_subj=subject)

    def delete_msg(self, stream: str, seq: int) -> bool:
        return self._delete_msg(stream, V.seq(seq, "seq", api=True, optional=False, hi=V.UINT64_MAX))

    def publish_batch(self, data: Any, stream: Optional[str] = None, msg_id_prefix: Optional[str] = None, msg_id_start: int = 0) -> BatchAck:
        table = V.batch_table(data, msg_id_prefix, msg_id_start)
        if stream is None:
            stream = self._stream_of_batch(table)
        try:
            return self._publish_batch(table, stream, msg_id_prefix, int(msg_id_start))
        except JetSparkError as err:
            if getattr(err, "batch_ack", None) is None:
                # Refused before anything was stored (the engine's batches are all or nothing).
                import pyarrow as pa

                n = table.num_rows
                err.batch_ack = BatchAck(stream, pa.array([0] * n, pa.int64()), pa.array([False] * n, pa.bool_()))
            raise

    # publish_async: the arguments and the window here; the backend's publisher
    # (``_new_async_publisher()``: ``window``, ``pid``, ``submit(subject, payload,
    # headers, future)``) stores the messages and completes the futures.

    _async_pub: Any = None  # this process's publisher, made by the first publish_async

    def publish_async(
        self,
        subject: str,
        payload: bytes = b"",
        headers: Optional[Mapping[str, object]] = None,
        stream: Optional[str] = None,
        *,
        wait_stall: Optional[float] = None,
    ) -> "Future[PubAck]":
        payload = V.payload(payload)
        hdrs = V.publish_headers(headers, stream) if headers is not None or stream is not None else None
        V.publish_subject(subject)
        wait = None if wait_stall is None else V.timeout(wait_stall, "wait_stall")
        self._check_open()
        pub = self._async_publisher()
        fut = pub.window.admit(wait)
        try:
            pub.submit(subject, payload, hdrs, fut)
        except BaseException as exc:
            settle(fut, exc)
            raise
        return fut

    def publish_async_pending(self) -> int:
        self._check_open()
        pub = self._async_pub
        return pub.window.pending() if pub is not None and pub.pid == os.getpid() else 0

    def publish_async_completed(self, timeout: Optional[float] = None) -> None:
        wait = None if timeout is None else V.timeout(timeout)
        self._check_open()
        pub = self._async_pub
        if pub is not None and pub.pid == os.getpid():
            pub.window.wait(wait)

    def _async_publisher(self) -> Any:
        pub = self._async_pub
        if pub is None or pub.pid != os.getpid():
            with _NEW_PUBLISHER:
                pub = self._async_pub
                if pub is None or pub.pid != os.getpid():
                    if pub is not None:
                        # Copied by fork(): those messages are the parent's to store.
                        pub.window.fail_pending(lambda: ClosedError("publish_async from before fork(): the parent process completes it"))
                    pub = self._async_pub = self._new_async_publisher()
        return pub

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

    # ------------------------------------------------------------------ bulk verbs

    def read_batches(
        self,
        stream: str,
        start_seq: int = 1,
        end_seq: Optional[int] = None,
        subjects: Optional[Sequence[str]] = None,
        batch_size: int = 65536,
        headers: bool = False,
    ) -> Iterator["pa.RecordBatch"]:
        return self._read_batches(stream, *V.read_args(start_seq, end_seq, subjects, batch_size, headers))

    def seq_for_bytes(self, stream: str, lo: int, hi: int, max_bytes: int) -> int:
        return self._seq_for_bytes(stream, *V.seq_for_bytes_args(lo, hi, max_bytes))

    def seq_for_time(self, stream: str, when: Any) -> int:
        return self._seq_for_time(stream, V.when(when))

    def advance_ack_floor(self, stream: str, durable: str, seq: int) -> SequenceInfo:
        return self._advance_ack_floor(stream, durable, V.seq(seq, "seq", optional=False))

    def ordered_consumer(
        self, stream: str, subjects: Optional[Sequence[str]] = None, start_seq: Optional[int] = None, end_seq: Optional[int] = None, batch_size: int = 4096
    ) -> Iterator["MsgAPI"]:
        start_seq, end_seq, subjects, batch_size, _ = V.read_args(start_seq, end_seq, subjects, batch_size, False)
        return self._ordered_consumer(stream, subjects, start_seq, end_seq, batch_size)

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

    # ------------------------------------------------------------------ backup and restore (archive.py)

    def backup_stream(self, name: str, path: Any, consumers: bool = True, progress: Optional[Callable[[int, Optional[int]], None]] = None) -> BackupInfo:
        V.stream_name(name)
        V.boolean(consumers, "consumers")
        with archive.Writer(_path(path), self._BACKUP_KIND, name) as writer:
            return self._backup_stream(name, writer, consumers, archive.Meter(_progress(progress)))

    def restore_stream(self, path: Any, progress: Optional[Callable[[int, Optional[int]], None]] = None) -> StreamInfo:
        found = archive.open_archive(_path(path), self._BACKUP_KIND)
        meter = archive.Meter(_progress(progress), 2 * found.bytes)  # every part is read twice: checked, then restored
        found.verify(meter)
        return self._restore_stream(found, meter)


def _path(value: Any) -> Path:
    try:
        return Path(os.fspath(value))
    except TypeError:
        raise TypeError(f"path must be a str or os.PathLike naming a directory, not {value!r}") from None


def _progress(value: Any) -> Optional[Callable[[int, Optional[int]], None]]:
    if value is not None and not callable(value):
        raise TypeError(f"progress must be None or a callable progress(done_bytes, total_bytes), not {value!r}")
    return value


def _document(cls: type) -> None:
    """Give each verb of ``cls`` that has no docstring the contract's (``jetspark.backend``)."""
    for name, declared in vars(JetStreamAPI).items():
        verb = cls.__dict__.get(name)
        if not name.startswith("_") and callable(verb) and not verb.__doc__:
            verb.__doc__ = declared.__doc__


_document(HandleBase)
