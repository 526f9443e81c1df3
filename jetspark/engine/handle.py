"""The embedded engine's JetStream handle: nats-py's verbs, synchronously, on a store directory.

The handle is its verbs.  What they stand on: the store directory and its
registry of streams (``StoreDirectory``, store_dir.py, which describes the
layout and damaged streams), and the deliveries and acks of consumers
(``Deliveries``, deliveries.py), which the subscriptions (pull.py, push.py)
and ``publish_async``'s writer (async_writer.py) use in turn.  Each stream's
messages and consumers: ``Stream`` (stream.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

import numpy as np

from jetspark import err_codes as E
from jetspark import validate as V
from jetspark.api import (
    BackupInfo,
    BatchAck,
    ConsumerConfig,
    ConsumerInfo,
    ConsumerPause,
    PubAck,
    RawStreamMsg,
    RetentionPolicy,
    SequenceInfo,
    StreamConfig,
    StreamInfo,
    datetime_to_ns,
)
from jetspark.backend.archive import Archive, Meter, Writer
from jetspark.backend.base import HandleBase
from jetspark.engine import check, diskio
from jetspark.engine import config as cfg
from jetspark.engine import consumer_config as ccfg
from jetspark.engine.async_writer import AsyncWriter
from jetspark.engine.check import CheckReport, Problem
from jetspark.engine.deliveries import Deliveries, Msg, consumer_of
from jetspark.engine.pull import PullSubscription
from jetspark.engine.push import PushSubscription
from jetspark.engine.store_dir import STORE_FORMAT, StoreDirectory
from jetspark.engine.stream import Stream, config_to_json
from jetspark.errors import APIError, CorruptStoreError, StoreError, api_error
from jetspark.protocol import headers as H

if TYPE_CHECKING:
    import datetime as dt

    import pyarrow as pa

    from jetspark.backend import MsgAPI

log = logging.getLogger("jetspark")
PUBLISH_ASYNC_MAX_PENDING = 4000  # nats-py's default publish_async_max_pending


class JetStream(HandleBase):
    """A synchronous JetStream handle on an embedded store (see ``jetspark.connect``).

    Its verbs and their contracts: ``jetspark.backend.JetStreamAPI``; what both
    backends share is in ``jetspark.backend.base.HandleBase``."""

    def __init__(
        self,
        path,
        *,
        clock: Optional[Callable[[], int]] = None,
        sync: str = "os",
        create: bool = True,
        publish_async_max_pending: int = PUBLISH_ASYNC_MAX_PENDING,
    ) -> None:
        if sync not in ("os", "fsync"):
            raise ValueError(f"sync must be 'os' or 'fsync', not {sync!r}")
        if not isinstance(create, bool):
            raise TypeError(f"create must be True or False, not {create!r}")
        super().__init__()
        self._publish_async_max_pending = V.integer(
            publish_async_max_pending, "publish_async_max_pending", 1, V.INT32[1]
        )
        self.path = Path(str(path).removeprefix("file://")).absolute()
        self.clock = clock or time.time_ns
        self._store = StoreDirectory(self.path, clock=self.clock, fsync=sync == "fsync", create=create)
        self._deliveries = Deliveries(self._store)
        self._lock = self._store.lock
        self.store_id = self._store.store_id
        log.debug("opened store %s (sync=%s)", self.path, sync)

    # ------------------------------------------------------------------ lifecycle

    @property
    def _closed(self) -> bool:
        return self._store.closed

    @property
    def _location(self) -> str:
        return str(self.path)

    def _close(self) -> None:
        self._deliveries.close()

    def _check_open(self) -> None:
        if self._store.closed:
            raise self._store.closed_error()

    def _new_async_publisher(self) -> AsyncWriter:
        return AsyncWriter(self._deliveries, self._publish_async_max_pending)

    def _check(self) -> None:
        self._deliveries.check()

    def _stream(self, name: str) -> Stream:
        return self._deliveries.stream(name)

    # ------------------------------------------------------------------ streams

    def _add_stream(self, config: StreamConfig) -> StreamInfo:
        """Create a stream; creating an existing one with the same config is a no-op.

        The stream's directory is built aside (config, lock, data files) and renamed into
        place whole: a failure leaves nothing behind, and a directory of that name that is
        not a usable stream is a damaged one, which is never replaced (CorruptStoreError).
        """
        self._check()
        cfg.check_create_name(config.name)
        new = cfg.normalize_stream_config(config)
        cfg.check_create(new)
        name = cfg.name_of(new)
        with self._lock, self._store.locked():
            self._store.sync()
            err = self._store.damaged(name)
            if err is not None:
                raise err
            existing = self._store.streams.get(name)
            if existing is not None:
                existing.refresh()
                if existing.config != new:
                    raise api_error(E.STREAM_NAME_EXIST)
                return existing.info().evolve(did_create=True)  # as the server answers
            self._store.check_overlap(new)
            cfg.check_storable_name(name, "stream")
            home = self.path / "streams" / name
            if os.path.lexists(home):
                raise CorruptStoreError(
                    f"{home} exists but is not a usable stream; it is left as it is", path=str(home)
                )
            self._store.remove_leftovers()
            uid = uuid.uuid4().hex[:12]
            meta = {"config": config_to_json(new), "created": self.clock(), "uid": uid}
            self._store.build_stream(home, new, meta)
            st = self._store.open_stream(name)
            self._store.streams[name] = st
            self._store.changed()
            return st.info().evolve(did_create=True)

    # ------------------------------------------------------------------ backup and restore (engine/backup.py)

    _BACKUP_KIND = "engine"

    def _backup_stream(self, name: str, writer: Writer, consumers: bool, meter: Meter) -> BackupInfo:
        from jetspark.engine import backup

        with self._lock:
            return backup.write(self._stream(name), writer, consumers, meter, STORE_FORMAT)

    def _restore_stream(self, archive: Archive, meter: Meter) -> StreamInfo:
        """As ``_add_stream``, with the backup's files in the new stream's directory before it
        is renamed into place (so a failure leaves nothing), and a name in use refused (10130)."""
        from jetspark.engine import backup

        self._check()
        config, created = backup.archived_stream(archive, STORE_FORMAT)
        name = cfg.name_of(config)
        with self._lock, self._store.locked():
            self._store.sync()
            home = self.path / "streams" / name
            if name in self._store.streams or name in self._store.broken or os.path.lexists(home):
                raise api_error(E.STREAM_NAME_EXIST_RESTORE_FAILED)
            try:
                self._store.check_overlap(config)
            except APIError as exc:  # as the server words it
                raise api_error(
                    E.STREAM_RESTORE, err=f"error adding stream: {exc.description} ({exc.err_code})"
                ) from None
            self._store.remove_leftovers()
            meta = {"config": config_to_json(config), "created": created, "uid": uuid.uuid4().hex[:12]}
            self._store.build_stream(
                home, config, meta, fill=lambda data_dir: backup.fill(archive, data_dir, meter, self._store.fsync)
            )
            st = self._store.open_stream(name)
            self._store.streams[name] = st
            self._store.changed()
            return st.info()

    def _update_stream(self, config: StreamConfig) -> StreamInfo:
        """Replace a stream's config as a whole (omitted fields return to their defaults)."""
        self._check()
        new = cfg.normalize_stream_config(config)
        with self._lock, self._store.locked():
            st = self._stream(cfg.name_of(new))
            with st.locked():
                new = cfg.check_update(st.config, new)
                if new.subjects != st.config.subjects:
                    self._store.check_overlap(new, exclude=new.name)
                old_retention = st.config.retention
                st.write_config(new)
                if old_retention != RetentionPolicy.INTEREST and new.retention == RetentionPolicy.INTEREST:
                    # Limits -> interest (check_update refuses work-queue changes): what the
                    # consumers acked goes now, as nats-server does (test_retention_update.py).
                    st.consumers.became_interest()
                st.enforce_limits()
            self._store.changed()
            return st.info()

    def _delete_stream(self, name: str) -> bool:
        """A damaged stream (store_dir.py) too: its files are removed."""
        with self._lock, self._store.locked():
            try:
                st = self._stream(name)
            except StoreError:
                if name not in self._store.broken:
                    raise
                return self._store.delete_damaged(name)
            with st.storage.locked():
                st.storage.header.deleted = 1
            data_dir = st.storage.dir
            st.close()
            del self._store.streams[name]
            trash = self.path / "streams" / f".deleted-{st.uid}-{uuid.uuid4().hex[:8]}"
            with diskio.io_errors(st.home, "deleting the stream"):
                os.replace(st.home, trash)
            self._store.changed()
        shutil.rmtree(trash, ignore_errors=True)
        shutil.rmtree(data_dir, ignore_errors=True)
        try:
            data_dir.parent.rmdir()  # the store's memory area, once its last stream is gone
        except OSError:
            pass
        return True

    def check_stream(self, name: str, repair: bool = False) -> CheckReport:
        """Check every file of a stream: header slots, journals, each record's checksum,
        leftover files.  With ``repair=True``, also fix what can be fixed while keeping
        every intact message (see ``jetspark.engine.check``); dropped messages are listed
        in the report and in ``state.lost``.  Repair a stream no other process is using."""
        if not isinstance(repair, bool):
            raise TypeError(f"repair must be True or False, not {repair!r}")
        with self._lock, self._store.locked():
            self._check()
            self._store.sync()
            problems: list[Problem] = []
            st = self._store.streams.get(name) if isinstance(name, str) else None
            if st is None:
                err = self._store.broken.get(name) if isinstance(name, str) else None
                if err is None:
                    raise api_error(E.STREAM_NOT_FOUND)
                problems.append(Problem(err.path or str(self.path / "streams" / name), str(err)))
                if not check.header_is_unusable(err):
                    return CheckReport(name, 0, tuple(problems))
                problems += check.rebuild_header(self._store.stream_data_dir(name), repair)
                if not repair:
                    return CheckReport(name, 0, tuple(problems))
                try:
                    st = self._store.open_stream(name)
                except StoreError as exc:
                    problems.append(Problem(exc.path, str(exc)))
                    return CheckReport(name, 0, tuple(problems))
                problems[0] = dataclasses.replace(problems[0], repaired=True)
                self._store.streams[name] = st
                self._store.broken.pop(name, None)
                self._store.changed()  # other handles open it again
                with st.locked():
                    st.storage.recount()
                    st.enforce_limits()
            with st.locked():
                found, dropped = check.check_records(st.storage, repair)
                if dropped:
                    st.consumers.dropped(np.asarray(dropped, dtype=np.int64))
                found += check.consumer_problems(st.consumers)
            problems += found
            return CheckReport(name, st.storage.header.msgs, tuple(problems), tuple(dropped))

    def _stream_info(self, name: str, subjects_filter: Optional[str], deleted_details: bool) -> StreamInfo:
        with self._lock:
            return self._stream(name).info(subjects_filter=subjects_filter, deleted_details=deleted_details)

    def _streams_info(self) -> list[StreamInfo]:
        with self._lock:
            self._check()
            self._store.sync()
            for name, err in sorted(self._store.broken.items()):
                log.warning("streams_info leaves out the damaged stream %r: %s", name, err)
            # As a lone nats-server's STREAM.LIST: no cluster field (its STREAM.INFO has one).
            return [self._store.streams[n].info().evolve(cluster=None) for n in sorted(self._store.streams)]

    def _stream_names(self) -> list[str]:
        """The damaged streams' names too (their name is taken)."""
        with self._lock:
            self._check()
            self._store.sync()
            return sorted(set(self._store.streams) | set(self._store.broken))

    def _find_stream_name_by_subject(self, subject: str) -> str:
        with self._lock:
            self._check()
            st = self._store.route(subject)
            if st is None:
                raise api_error(E.STREAM_NOT_FOUND)
            return st.name

    def _purge_stream(self, name: str, subject: Optional[str], seq: Optional[int], keep: Optional[int]) -> bool:
        with self._lock:
            self._stream(name).purge(subject=subject, seq=seq, keep=keep)
            return True

    # ------------------------------------------------------------------ messages

    def _publish(self, subject: str, payload: bytes, headers: Optional[dict], timeout: Optional[float]) -> PubAck:
        # (timeout: checked as on a server; a local write waits on no network)
        with self._lock:
            self._check()
            pub = self._async_pub
            if pub is not None and pub.queue:  # (the attribute, not the property: the hot path)
                self._drain_async()
            deliveries = self._deliveries
            if deliveries.acks:
                deliveries.flush()
            store = self._store
            store.sync()
            st = store.routes.get(subject)
            if st is None:
                st = store.target(subject)
            if not headers:
                return st.publish_plain(subject, payload)
            return st.publish(subject, payload, H.encode(headers))

    def _drain_async(self) -> None:
        """Store what earlier publish_async calls of this process queued (caller holds the lock)."""
        pub = self._async_pub
        if pub is not None and pub.queued and pub.pid == os.getpid():
            pub.drain()

    def _get_msg(
        self, stream: str, seq: Optional[int], last_by_subj: Optional[str], next_by_subj: Optional[str]
    ) -> RawStreamMsg:
        with self._lock:
            return self._stream(stream).get_msg(seq=seq, last_by_subj=last_by_subj, next_by_subj=next_by_subj)

    def _delete_msg(self, stream: str, seq: int) -> bool:
        with self._lock:
            self._stream(stream).delete_msg(seq)
            return True

    # ------------------------------------------------------------------ bulk paths for Spark

    def _read_batches(
        self,
        stream: str,
        start_seq: int,
        end_seq: Optional[int],
        subjects: Optional[Sequence[str]],
        batch_size: int,
        headers: bool,
    ) -> Iterator["pa.RecordBatch"]:
        from jetspark.engine import bulk

        with self._lock:
            st = self._stream(stream)
        return bulk.read_batches(st, start_seq, end_seq, subjects=subjects, batch_size=batch_size, headers=headers)

    def _publish_batch(
        self, table: "pa.Table", stream: str, msg_id_prefix: Optional[str], msg_id_start: int
    ) -> BatchAck:
        """All or nothing.  With ``msg_id_prefix`` the batch is deduplicated as one range
        (how the Spark sink makes its writes exactly-once cheaply)."""
        from jetspark.engine import bulk

        with self._lock:
            self._drain_async()
            return bulk.publish_batch(self._stream(stream), table, msg_id_prefix, msg_id_start)

    def _seq_for_bytes(self, stream: str, lo: int, hi: int, max_bytes: int) -> int:
        from jetspark.engine import bulk

        with self._lock:
            return bulk.seq_for_bytes(self._stream(stream), lo, hi, max_bytes)

    def _seq_for_time(self, stream: str, when: int) -> int:
        from jetspark.engine import bulk

        with self._lock:
            return bulk.seq_for_time(self._stream(stream), when)

    # ------------------------------------------------------------------ consumers

    def _put_consumer(self, stream: str, config: ConsumerConfig, action: str, timeout: Optional[float]) -> ConsumerInfo:
        with self._lock:  # (timeout: nothing here waits on a network)
            st = self._stream(stream)
            with st.locked():
                new = ccfg.normalize_consumer_config(config, st.config)
                now = st.clock()
                existing = st.consumers.by_name.get(new.name) if new.name else None
                if existing is None:
                    st.consumers.check_not_broken(new.name)  # never replaced: see consumer_set.py
                if existing is not None:
                    new = ccfg.keep_pause(existing.config, new)
                    if existing.config == new:
                        return existing.info(now)
                    if action == "create":
                        raise api_error(E.CONSUMER_ALREADY_EXISTS)
                    ccfg.check_update(existing.config, new, bound=existing.is_bound())
                    ccfg.check_workqueue(st.config, new, (c.config for c in st.consumers.by_name.values()))
                    return st.consumers.update(existing, new).info(now)
                if action == "update":
                    raise api_error(E.CONSUMER_DOES_NOT_EXIST)
                if 0 < st.limits.max_consumers <= len(st.consumers.by_name):
                    raise api_error(E.MAXIMUM_CONSUMERS_LIMIT)
                ccfg.check_workqueue(st.config, new, (c.config for c in st.consumers.by_name.values()))
                # An ephemeral consumer gets a generated name; its config keeps name=None, as the server echoes it.
                return st.consumers.create(new, now, new.name or ccfg.new_ephemeral_name()).info(now)

    def _delete_consumer(self, stream: str, consumer: str) -> bool:
        with self._lock:
            st = self._stream(stream)
            with st.locked():
                if consumer not in st.consumers.by_name and st.consumers.broken_error(consumer) is None:
                    raise api_error(E.CONSUMER_NOT_FOUND)
                st.consumers.delete(consumer)  # a damaged one too: the user asked
            return True

    def _pause_consumer(
        self, stream: str, consumer: str, pause_until: Optional[dt.datetime], timeout: Optional[float]
    ) -> ConsumerPause:
        with self._lock:  # (timeout: nothing here waits on a network)
            st = self._stream(stream)
            with st.locked():
                c = consumer_of(st, consumer)
                if c.config.pause_until != pause_until:
                    # A commit (the consumers' generation moves): fetches waiting in any handle wake.
                    c = st.consumers.update(c, c.config.evolve(pause_until=pause_until))
                left = ccfg.paused_for(c.config, st.clock())
                return ConsumerPause(paused=left > 0, pause_until=pause_until, pause_remaining=left or None)

    def _consumer_info(self, stream: str, consumer: str, timeout: Optional[float]) -> ConsumerInfo:
        return self._deliveries.consumer_info(stream, consumer)  # (timeout: nothing here waits on a network)

    def _subscription(self, stream: str, consumer: str) -> PullSubscription:
        return PullSubscription(self._deliveries, stream, consumer)

    # ------------------------------------------------------------------ push subscriptions (push.py)

    def _push_subscription(
        self,
        stream: str,
        info: ConsumerInfo,
        cb: Optional[Callable[[MsgAPI], Any]],
        auto_ack: bool,
        ordered: Optional[ConsumerConfig],
        owned: bool,
    ) -> PushSubscription:
        return PushSubscription(self, self._deliveries, stream, info, cb, auto_ack, ordered, owned)

    def _new_inbox(self) -> str:
        return self._deliveries.new_inbox()

    def _consumers_info(self, stream: str) -> list[ConsumerInfo]:
        with self._lock:
            st = self._stream(stream)
            with st.locked():
                now = st.clock()
                for key, err in sorted(st.consumers.broken.items()):
                    log.warning(
                        "consumers_info of stream %r leaves out the damaged consumer in %r: %s", stream, key, err
                    )
                return [st.consumers.by_name[n].info(now) for n in sorted(st.consumers.by_name)]

    # ------------------------------------------------------------------ for the Spark connector

    def _advance_ack_floor(self, stream: str, durable: str, seq: int) -> SequenceInfo:
        # Everything the consumer matches up to seq counts as delivered and acknowledged
        # (ack-all semantics), released at once on interest and work-queue streams.
        with self._lock:
            st = self._stream(stream)
            with st.locked():
                c = consumer_of(st, durable)
                old = c.ack_floor_stream_seq
                c.advance_floor(seq, st.clock())
                if c.ack_floor_stream_seq > old:
                    st.consumers.release(np.arange(old + 1, c.ack_floor_stream_seq + 1, dtype=np.int64))
                return SequenceInfo(consumer_seq=c.ack_floor_consumer_seq, stream_seq=c.ack_floor_stream_seq)

    def _ordered_consumer(
        self,
        stream: str,
        subjects: Optional[Sequence[str]],
        start_seq: Optional[int],
        end_seq: Optional[int],
        batch_size: int,
    ) -> Iterator[Msg]:
        from jetspark.engine import bulk

        with self._lock:
            st = self._stream(stream)
            st.refresh()
            lo, hi = bulk.clamp(st, start_seq, end_seq)
            total = bulk.count_range(st, lo, hi, subjects) if lo <= hi else 0
        return _ordered(st, lo, hi, subjects, batch_size, total)


def _ordered(st: Stream, lo: int, hi: int, subjects, batch_size: int, total: int) -> Iterator[Msg]:
    from jetspark.engine import bulk

    cseq = 0
    if lo > hi:
        return
    for batch in bulk.read_batches(st, lo, hi, subjects=subjects, batch_size=batch_size, headers=True):
        cols = batch.to_pydict()
        for subject, seq, ts, data, hdrs in zip(
            cols["subject"], cols["seq"], cols["timestamp"], cols["data"], cols["headers"]
        ):
            cseq += 1
            headers = {k: v[-1] for k, v in hdrs} if hdrs else None
            yield Msg(None, subject, data, headers, st.name, "", seq, cseq, 1, total - cseq, datetime_to_ns(ts))
