"""What both JetStream handles share, written once: ``HandleBase``.

``jetspark.engine.handle.JetStream`` and ``jetspark.remote.client.NatsJetStream``
inherit it.  It writes every public verb of ``jetspark.backend.JetStreamAPI``
once: the arguments are checked here, once for both backends (so both accept
and refuse exactly the same arguments, before doing anything), and the
logic both share is here too (config-with-overrides, ``pull_subscribe``
over ``pull_subscribe_bind``, ``subscribe`` over the backend's push
subscription, ``publish_batch``'s routing, ``publish_async``'s window, the
aliases).  What differs is the backend's, through the hooks declared whole,
each with its signature and contract, in ``jetspark.backend.hooks.Hooks``.

The contract of every verb is its docstring in ``jetspark.backend``; a verb
without a docstring of its own gets that one, so ``help(js.read_batches)``
shows the contract.  This module imports neither backend
(tests/test_imports.py).
"""

from __future__ import annotations

import os
import secrets
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence

from jetspark import validate as V
from jetspark.api import (
    AckPolicy,
    BackupInfo,
    BatchAck,
    ConsumerConfig,
    ConsumerInfo,
    ConsumerPause,
    DeliverPolicy,
    PubAck,
    RawStreamMsg,
    SequenceInfo,
    StreamConfig,
    StreamInfo,
)
from jetspark.backend import JetStreamAPI, archive
from jetspark.backend.hooks import Hooks, consumer_arg, stream_arg, stream_config_name
from jetspark.backend.window import settle
from jetspark.err_codes import BAD_REQUEST, INVALID_JSON, STREAM_NOT_FOUND
from jetspark.errors import (
    BadRequestError,
    ClosedError,
    ConsumerNotFoundError,
    JetSparkError,
    NoStreamResponseError,
    StreamNotFoundError,
    SubscriptionError,
    api_error,
)
from jetspark.protocol import subjects as subj

if TYPE_CHECKING:
    from concurrent.futures import Future
    from datetime import datetime

    import pyarrow as pa

    from jetspark.backend import MsgAPI, PullSubscriptionAPI, PushSubscriptionAPI

__all__ = ["HandleBase", "call_timeout", "new_consumer_name"]

_NEW_PUBLISHER = threading.Lock()


def new_consumer_name() -> str:
    """A generated consumer name: 22 random letters and digits, like nats-py's NUID."""
    return secrets.token_urlsafe(16).replace("-", "x").replace("_", "y")[:22]


def call_timeout(value: Any) -> Optional[float]:
    """nats-py's per-call ``timeout=`` (``publish``, ``add_consumer``, ``consumer_info``): None
    for the handle's own, else a finite number of seconds > 0."""
    if value is None:
        return None
    wait = V.timeout(value, "timeout")
    if wait == 0:
        raise ValueError("timeout must be a finite number of seconds > 0 (None: the handle's timeout), not 0")
    return wait


class HandleBase(Hooks):
    """The verbs of both backends, written once (see the module docstring)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _document(cls)

    def __init__(self) -> None:
        # This process's publish_async publisher, made by the first publish_async (see there).
        self._async_pub: Any = None
        # The live push subscriptions, ended by close().
        self._push_subscriptions: weakref.WeakSet[Any] = weakref.WeakSet()
        # Subjects publish has accepted: checked once, not at every publish (bounded, see publish).
        self._subjects_ok: set[str] = set()

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        pub = self._async_pub
        if pub is not None and pub.pid == os.getpid():
            pub.close(f"the JetStream handle on {self._location} is closed")  # stores what publish_async queued
        self._end_subscriptions()
        self._close()

    # ------------------------------------------------------------------ streams

    def add_stream(self, config: Optional[StreamConfig] = None, **params: Any) -> StreamInfo:
        return self._add_stream(_stream_config(config, params))

    def update_stream(self, config: Optional[StreamConfig] = None, **params: Any) -> StreamInfo:
        return self._update_stream(_stream_config(config, params))

    def delete_stream(self, name: str) -> bool:
        return self._delete_stream(stream_arg(name))

    def streams_info(self) -> list[StreamInfo]:
        return self._streams_info()

    def stream_names(self) -> list[str]:
        return self._stream_names()

    def find_stream_name_by_subject(self, subject: str) -> str:
        if not isinstance(subject, str) or not subj.is_valid(subject):
            raise api_error(STREAM_NOT_FOUND)  # as the server answers: no stream has that subject
        return self._find_stream_name_by_subject(subject)

    def stream_info(
        self, name: str, subjects_filter: Optional[str] = None, deleted_details: bool = False
    ) -> StreamInfo:
        V.filter_subject(subjects_filter, "subjects_filter")
        V.boolean(deleted_details, "deleted_details", api=True)
        return self._stream_info(stream_arg(name), subjects_filter, deleted_details)

    def purge_stream(
        self, name: str, subject: Optional[str] = None, seq: Optional[int] = None, keep: Optional[int] = None
    ) -> bool:
        return self._purge_stream(stream_arg(name), *V.purge_args(subject, seq, keep))

    # ------------------------------------------------------------------ messages

    def publish(
        self,
        subject: str,
        payload: bytes = b"",
        headers: Optional[Mapping[str, object]] = None,
        stream: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
    ) -> PubAck:
        wait = None if timeout is None else call_timeout(timeout)
        # The hot path (bytes, no headers, a subject accepted before) checks types only.
        if type(payload) is not bytes:
            payload = V.payload(payload)
        hdrs = None if headers is None and stream is None else V.publish_headers(headers, stream)
        if type(subject) is not str or subject not in self._subjects_ok:
            V.publish_subject(subject)
            if len(self._subjects_ok) >= 100_000:
                self._subjects_ok.clear()
            self._subjects_ok.add(subject)
        return self._publish(subject, payload, hdrs, wait)

    def get_msg(
        self,
        stream: str,
        seq: Optional[int] = None,
        subject: Optional[str] = None,
        direct: bool = False,
        next: bool = False,
        *,
        last_by_subj: Optional[str] = None,
        next_by_subj: Optional[str] = None,
    ) -> RawStreamMsg:
        # nats-py's arguments (subject=, next=) are the request's last_by_subj / next_by_subj.
        V.boolean(direct, "direct", optional=True)  # (None and False alike, as nats-py reads them)
        next = bool(V.boolean(next, "next", optional=True))
        V.filter_subject(subject, "subject")
        if subject is not None:
            if last_by_subj is not None or next_by_subj is not None:
                raise BadRequestError(
                    400,
                    BAD_REQUEST,
                    "bad request: get_msg takes subject= (with next=) or last_by_subj=/next_by_subj=, not both",
                )
            if next:
                next_by_subj = subject
            elif seq is not None:
                # nats-py drops seq here and returns the last message on subject: refused
                # rather than answering a question that was not asked.
                raise BadRequestError(
                    400,
                    BAD_REQUEST,
                    "bad request: get_msg with seq= and subject= needs next=True (the first message "
                    "at or after seq on subject); subject= alone reads the last message on it",
                )
            else:
                last_by_subj = subject
        elif next and next_by_subj is None:
            raise BadRequestError(
                400,
                BAD_REQUEST,
                "bad request: get_msg(next=True) needs subject= (the first message at or after seq on it; "
                "'>' for any subject)",
            )
        if seq is None and last_by_subj is None and next_by_subj is None:
            raise BadRequestError(
                400,
                BAD_REQUEST,
                "bad request: get_msg needs seq= (a stream sequence) or subject= (the last message on it; "
                "with next=True, the first at or after seq)",
            )
        return self._get_msg(stream_arg(stream), *V.get_msg_args(seq, last_by_subj, next_by_subj))

    def get_last_msg(self, stream: str, subject: str, direct: bool = False) -> RawStreamMsg:
        V.boolean(direct, "direct", optional=True)
        return self.get_msg(stream, last_by_subj=subject)

    def delete_msg(self, stream: str, seq: int) -> bool:
        return self._delete_msg(stream_arg(stream), V.seq(seq, "seq", api=True, optional=False, hi=V.UINT64_MAX))

    def publish_batch(
        self, data: Any, stream: Optional[str] = None, msg_id_prefix: Optional[str] = None, msg_id_start: int = 0
    ) -> BatchAck:
        table = V.batch_table(data, msg_id_prefix, msg_id_start)
        if msg_id_prefix is not None:
            # Row i's id is "<prefix><n>" as the header codec sends it, without the blanks at
            # its start (tests/contract/test_msg_id_blanks.py).
            msg_id_prefix = msg_id_prefix.lstrip()
        if stream is None:
            stream = self._stream_of_batch(table)
        try:
            return self._publish_batch(table, stream_arg(stream), msg_id_prefix, int(msg_id_start))
        except JetSparkError as err:
            if getattr(err, "batch_ack", None) is None:
                # Refused before anything was stored (the engine's batches are all or nothing).
                import pyarrow as pa

                n = table.num_rows
                err.batch_ack = BatchAck(stream, pa.array([0] * n, pa.int64()), pa.array([False] * n, pa.bool_()))  # type: ignore[attr-defined]
            raise

    # publish_async: the arguments and the window here; the backend's publisher
    # (``_new_async_publisher()``: ``window``, ``pid``, ``submit(subject, payload,
    # headers, future)``) stores the messages and completes the futures.

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
                        pub.window.fail_pending(
                            lambda: ClosedError("publish_async from before fork(): the parent process completes it")
                        )
                    pub = self._async_pub = self._new_async_publisher()
        return pub

    def _stream_of_batch(self, table: "pa.Table") -> str:
        """The stream ``publish`` of the first row's subject would reach."""
        if table.num_rows == 0:
            raise BadRequestError(400, BAD_REQUEST, "publish_batch of an empty table needs stream=")
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
        return self._read_batches(stream_arg(stream), *V.read_args(start_seq, end_seq, subjects, batch_size, headers))

    def seq_for_bytes(self, stream: str, lo: int, hi: int, max_bytes: int) -> int:
        return self._seq_for_bytes(stream_arg(stream), *V.seq_for_bytes_args(lo, hi, max_bytes))

    def seq_for_time(self, stream: str, when: Any) -> int:
        return self._seq_for_time(stream_arg(stream), V.when(when))

    def advance_ack_floor(self, stream: str, durable: str, seq: int) -> SequenceInfo:
        return self._advance_ack_floor(stream_arg(stream), consumer_arg(durable), V.seq(seq, "seq", optional=False))

    def ordered_consumer(
        self,
        stream: str,
        subjects: Optional[Sequence[str]] = None,
        start_seq: Optional[int] = None,
        end_seq: Optional[int] = None,
        batch_size: int = 4096,
    ) -> Iterator["MsgAPI"]:
        start_seq, end_seq, subjects, batch_size, _ = V.read_args(start_seq, end_seq, subjects, batch_size, False)
        return self._ordered_consumer(stream_arg(stream), subjects, start_seq, end_seq, batch_size)

    # ------------------------------------------------------------------ consumers

    def delete_consumer(self, stream: str, consumer: str) -> bool:
        return self._delete_consumer(stream_arg(stream), consumer_arg(consumer))

    def pause_consumer(
        self, stream: str, consumer: str, pause_until: "datetime | str", timeout: Optional[float] = None
    ) -> ConsumerPause:
        wait = call_timeout(timeout)
        if pause_until is None:  # (the server reads a null as "resume": said out loud instead)
            raise api_error(INVALID_JSON, err="pause_until must be a datetime or an RFC 3339 time, not None")
        until = V.start_time(pause_until, "pause_until")
        return self._pause_consumer(stream_arg(stream), consumer_arg(consumer), until, wait)

    def resume_consumer(self, stream: str, consumer: str, timeout: Optional[float] = None) -> ConsumerPause:
        return self._pause_consumer(stream_arg(stream), consumer_arg(consumer), None, call_timeout(timeout))

    def consumer_info(self, stream: str, consumer: str, timeout: Optional[float] = None) -> ConsumerInfo:
        wait = call_timeout(timeout)
        return self._consumer_info(stream_arg(stream), consumer_arg(consumer), wait)

    def consumers_info(self, stream: str) -> list[ConsumerInfo]:
        return self._consumers_info(stream_arg(stream))

    def add_consumer(
        self, stream: str, config: Optional[ConsumerConfig] = None, timeout: Optional[float] = None, **params: Any
    ) -> ConsumerInfo:
        wait = call_timeout(timeout)
        return self._put_consumer(*_consumer_args(stream, config, params), "", wait)

    def create_consumer(
        self, stream: str, config: Optional[ConsumerConfig] = None, timeout: Optional[float] = None, **params: Any
    ) -> ConsumerInfo:
        wait = call_timeout(timeout)
        return self._put_consumer(*_consumer_args(stream, config, params), "create", wait)

    def update_consumer(
        self, stream: str, config: Optional[ConsumerConfig] = None, timeout: Optional[float] = None, **params: Any
    ) -> ConsumerInfo:
        wait = call_timeout(timeout)
        return self._put_consumer(*_consumer_args(stream, config, params), "update", wait)

    def pull_subscribe(
        self,
        subject: Optional[str] = None,
        durable: Optional[str] = None,
        stream: Optional[str] = None,
        config: Optional[ConsumerConfig] = None,
    ) -> "PullSubscriptionAPI":
        V.pull_subscribe_args(subject, durable, stream, config)
        if stream is None:
            stream = self.find_stream_name_by_subject(subject)  # type: ignore[arg-type]  # (a subject without a stream: V.pull_subscribe_args)
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

    def pull_subscribe_bind(
        self, durable: Optional[str] = None, stream: Optional[str] = None, consumer: Optional[str] = None
    ) -> "PullSubscriptionAPI":
        name = V.bind_args(durable, stream, consumer)
        checked = stream_arg(stream)
        self.consumer_info(checked, name)
        return self._subscription(checked, name)

    def ack_floor(self, stream: str, durable: str) -> SequenceInfo:
        return self.consumer_info(stream, durable).ack_floor

    # ------------------------------------------------------------------ push subscriptions

    def subscribe(
        self,
        subject: str,
        queue: Optional[str] = None,
        cb: Optional[Callable[["MsgAPI"], Any]] = None,
        durable: Optional[str] = None,
        stream: Optional[str] = None,
        config: Optional[ConsumerConfig] = None,
        manual_ack: bool = False,
        ordered_consumer: bool = False,
        idle_heartbeat: Optional[float] = None,
        flow_control: bool = False,
        deliver_policy: Optional[DeliverPolicy] = None,
        headers_only: Optional[bool] = None,
        inactive_threshold: Optional[float] = None,
    ) -> "PushSubscriptionAPI":
        # nats-py's JetStreamContext.subscribe, step for step (its client-side refusals included).
        V.subscribe_args(subject, queue, cb, durable, stream, config, manual_ack, ordered_consumer)
        if stream is None:
            stream = self.find_stream_name_by_subject(subject)
        if queue:
            if durable and durable != queue:
                raise SubscriptionError(
                    f"cannot create queue subscription {queue!r} to consumer {durable!r}: "
                    "a queue subscription's durable is its queue's name"
                )
            durable = queue
        if durable:
            try:
                info = self.consumer_info(stream, durable)
            except ConsumerNotFoundError:
                info = None
            if info is not None:
                _check_bindable(info, queue)
                return self._push_subscribe(stream, info, cb, manual_ack, None, owned=False)
        config = V.consumer_config(config, {})
        if ordered_consumer and (config.durable_name or config.name or config.deliver_group):
            raise ValueError(
                "ordered_consumer=True takes a config without durable_name, name or deliver_group: "
                "an ordered consumer is an ephemeral of its own"
            )
        changes: dict[str, Any] = {}
        if durable and not config.durable_name:
            changes["durable_name"] = durable
        if queue and not config.deliver_group:
            changes["deliver_group"] = queue
        if headers_only and not config.headers_only:
            changes["headers_only"] = headers_only
        if deliver_policy:
            changes["deliver_policy"] = deliver_policy
        if inactive_threshold:
            changes["inactive_threshold"] = inactive_threshold
        if not config.deliver_subject:
            changes["deliver_subject"] = self._new_inbox()
        if subject and not config.filter_subject and not config.filter_subjects:
            changes["filter_subject"] = subject
        if flow_control:
            changes["flow_control"] = flow_control
        if idle_heartbeat:
            changes["idle_heartbeat"] = idle_heartbeat
        if ordered_consumer:
            # At most one message in flight, none acknowledged, made again on a gap (ADR-17).
            changes.update(
                flow_control=True,
                ack_policy=AckPolicy.NONE,
                max_deliver=1,
                ack_wait=22 * 3600.0,
                idle_heartbeat=idle_heartbeat or config.idle_heartbeat or 5.0,
                num_replicas=1,
                mem_storage=True,
            )
        config = config.evolve(**changes)
        info = self.add_consumer(stream, config)
        owned = not info.config.durable_name
        try:
            return self._push_subscribe(stream, info, cb, manual_ack, config if ordered_consumer else None, owned=owned)
        except BaseException:
            if owned:
                try:
                    self.delete_consumer(stream, info.name)
                except JetSparkError:
                    pass
            raise

    def subscribe_bind(
        self, stream: str, consumer: str, cb: Optional[Callable[["MsgAPI"], Any]] = None, manual_ack: bool = False
    ) -> "PushSubscriptionAPI":
        V.subscribe_bind_args(stream, consumer, cb, manual_ack)
        info = self.consumer_info(stream, consumer)
        if not info.config.deliver_subject:
            raise SubscriptionError(_PULL_CONSUMER.format(name=consumer))
        return self._push_subscribe(stream, info, cb, manual_ack, None, owned=False)

    def _push_subscribe(
        self, stream: str, info: ConsumerInfo, cb, manual_ack: bool, ordered: Optional[ConsumerConfig], owned: bool
    ) -> "PushSubscriptionAPI":
        # Without manual_ack a callback's messages are acknowledged after it returns, as nats-py's
        # auto-ack (not on an ack-none consumer).
        auto_ack = cb is not None and not manual_ack and info.config.ack_policy != AckPolicy.NONE
        sub = self._push_subscription(stream, info, cb, auto_ack, ordered, owned)
        self._push_subscriptions.add(sub)
        return sub

    def _end_subscriptions(self) -> None:
        """The handle closes: its push subscriptions stop (their callback threads finish the
        message in hand), asking the store or server nothing more."""
        for sub in list(self._push_subscriptions):
            sub._shutdown()

    # ------------------------------------------------------------------ backup and restore (archive.py)

    def backup_stream(
        self,
        name: str,
        path: Any,
        consumers: bool = True,
        progress: Optional[Callable[[int, Optional[int]], None]] = None,
    ) -> BackupInfo:
        stream_arg(name)
        V.boolean(consumers, "consumers")
        with archive.Writer(_path(path), self._BACKUP_KIND, name) as writer:
            return self._backup_stream(name, writer, consumers, archive.Meter(_progress(progress)))

    def restore_stream(self, path: Any, progress: Optional[Callable[[int, Optional[int]], None]] = None) -> StreamInfo:
        found = archive.open_archive(_path(path), self._BACKUP_KIND)
        meter = archive.Meter(_progress(progress), 2 * found.bytes)  # every part is read twice: checked, then restored
        found.verify(meter)
        return self._restore_stream(found, meter)


def _stream_config(config: Any, params: dict) -> StreamConfig:
    """add/update_stream's config, checked (its fields first, then the name, as the server)."""
    checked = V.stream_config(config, params)
    stream_config_name(checked.name)
    return checked


def _consumer_args(stream: Any, config: Any, params: dict) -> tuple[str, ConsumerConfig]:
    """add/create/update_consumer's stream and config, checked (the config first, as both backends did)."""
    checked = V.consumer_config(config, params)
    return stream_arg(stream), checked


_PULL_CONSUMER = "consumer {name!r} is a pull consumer (it has no deliver_subject): bind it with pull_subscribe_bind"


def _check_bindable(info: ConsumerInfo, queue: Optional[str]) -> None:
    """nats-py's checks before subscribing to an existing durable (its texts)."""
    if not info.config.deliver_subject:
        raise SubscriptionError(_PULL_CONSUMER.format(name=info.name))
    group = info.config.deliver_group
    if not group:
        if queue:
            raise SubscriptionError(
                f"cannot create a queue subscription {queue!r} for consumer {info.name!r}, which has no deliver group"
            )
        if info.push_bound:
            raise SubscriptionError(f"consumer {info.name!r} is already bound to a subscription")
    elif not queue:
        raise SubscriptionError(
            f"cannot create a subscription for consumer {info.name!r}, which has the deliver group {group!r}: "
            f"subscribe with queue={group!r}"
        )
    elif queue != group:
        raise SubscriptionError(
            f"cannot create a queue subscription {queue!r} for consumer {info.name!r}, "
            f"which has the deliver group {group!r}"
        )


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
