"""The embedded engine's JetStream handle: nats-py's verbs, synchronously, on a store directory.

Store layout::

    <store>/store.json          the store's id (names its memory-storage area)
    <store>/store.lock          serialises stream create / update / delete across processes
    <store>/store.gen           8-byte generation, bumped whenever the set of streams changes
    <store>/streams/<NAME>/     config.json, lock, and (file storage) the data files

Every JSON document (``*.json``) is checksummed and kept twice, as
``<file>`` and ``<file>.1`` (metafile.py): one damaged copy is rewritten
from the other with a warning, both damaged is a ``CorruptStoreError``
naming the file.  Memory-storage streams keep their data files under
``/dev/shm`` (tmpfs), so every process on the machine sees them and a reboot
forgets them, as a memory stream on the server forgets its messages on
restart.

Every directory in ``streams/`` is a stream (names never start with ``.``;
``.new-*`` and ``.deleted-*`` are a create or delete in progress, each one
rename away from done).  One whose config cannot be read is a damaged stream:
it is listed by ``stream_names``, left out of ``streams_info`` (with a
warning), answers every call with its ``CorruptStoreError``, and its name
cannot be created again; nothing of it is removed but by ``delete_stream``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import mmap
import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Optional

import numpy as np

from jetspark import validate as V
from jetspark.api import (
    AckPolicy,
    BackupInfo,
    BatchAck,
    ConsumerConfig,
    ConsumerInfo,
    PubAck,
    RawStreamMsg,
    RetentionPolicy,
    SequenceInfo,
    StorageType,
    StreamConfig,
    StreamInfo,
    datetime_to_ns,
)
from jetspark.backend.archive import Archive, Meter, Writer
from jetspark.backend.base import HandleBase, call_timeout
from jetspark.engine import check, diskio, metafile, wakeup
from jetspark.engine import config as cfg
from jetspark.engine import consumer_config as ccfg
from jetspark.engine.async_writer import AsyncWriter
from jetspark.engine.bindings import Binding
from jetspark.engine.check import CheckReport, Problem
from jetspark.engine.consumer import SCALARS
from jetspark.engine.locking import FORK_GENERATION, FLock
from jetspark.engine.pull import Msg, PullSubscription
from jetspark.engine.push import PushSubscription
from jetspark.engine.storage import StreamStorage
from jetspark.engine.stream import Stream, config_from_json, config_to_json, load_stream_meta
from jetspark.errors import (
    APIError,
    ClosedError,
    CorruptStoreError,
    JetSparkError,
    NoStreamResponseError,
    StoreError,
    StoreIOError,
    api_error,
    push_based_error,
)
from jetspark.protocol import headers as H
from jetspark.protocol import subjects as subj

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("jetspark")
_UNROUTED = object()
STORE_FORMAT = 2  # 2: checksummed JSON documents with mirrors (metafile.py)
PUBLISH_ASYNC_MAX_PENDING = 4000  # nats-py's default publish_async_max_pending
_SHM = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())


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
        self._publish_async_max_pending = V.integer(publish_async_max_pending, "publish_async_max_pending", 1, V.INT32[1])
        self.path = Path(str(path).removeprefix("file://")).absolute()
        self.clock = clock or time.time_ns
        self._fsync = sync == "fsync"
        self._create = create
        self._closed = False
        self._lock = threading.RLock()
        if create:
            try:
                (self.path / "streams").mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create store directory {self.path}: {exc}", self.path) from exc
        self._open_store()
        log.debug("opened store %s (sync=%s)", self.path, sync)

    def _open_store(self) -> None:
        if not self._create:
            # Open an existing store only (readers: a mistyped path must fail, not leave
            # an empty store behind).  Nothing is created before this check.
            self._check_exists()
        self._fork_gen = FORK_GENERATION[0]
        with diskio.io_errors(self.path / "store.lock", "opening"):
            self._store_lock_fd = os.open(self.path / "store.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            with self._store_locked():
                doc = self._load_store_doc()
                gen = self.path / "store.gen"
                if not gen.exists() or gen.stat().st_size < 8:
                    with diskio.io_errors(gen, "creating"):
                        gen.write_bytes(b"\0" * 8)
        except BaseException:
            os.close(self._store_lock_fd)
            raise
        self.store_id = doc["id"]
        self._gen_fd = os.open(self.path / "store.gen", os.O_RDWR)
        self._gen_mm = mmap.mmap(self._gen_fd, 8)
        self._streams: dict[str, Stream] = {}
        # Msg.ack() calls not applied yet, as the messages' metadata tuples (stream, consumer,
        # stream seq, consumer seq, ...): a deque, because appending and popping are atomic, so
        # callback threads ack without a lock and a flush in another thread loses none.
        self._acks: collections.deque = collections.deque()
        self._broken: dict[str, StoreError] = {}
        self._gen = -1
        self._routes: dict[str, Optional[Stream]] = {}
        # Set by close() to end the waits of fetches under way in other threads (made on
        # the first wait; a forked child makes its own).
        self._closing: Optional[wakeup.Interrupt] = None

    def _check_exists(self) -> None:
        has_meta = any((self.path / n).is_file() for n in ("store.json", "store.json" + metafile.MIRROR_SUFFIX))
        if has_meta and (self.path / "streams").is_dir():
            return
        if not self.path.exists():
            reason = "the directory does not exist"
        elif not self.path.is_dir():
            reason = "it is not a directory"
        else:
            missing = [n for n in ("store.json", "streams/") if not (self.path / n).exists()]
            reason = f"the directory holds no {' and no '.join(missing)}"
        raise StoreError(
            f"no jetspark store at {self.path}: {reason}; jetspark.connect(path) (create=True, the default) or `jetspark stream add` creates one",
            self.path,
        )

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self._closed:
            return
        pub = self._async_pub
        if pub is not None and pub.pid == os.getpid():
            pub.close(f"the JetStream handle on {self.path} is closed")  # stores what publish_async queued
        self._end_subscriptions()
        try:
            self._flush_acks()
        finally:
            self._closed = True
            if self._closing is not None:
                self._closing.set()
        for st in self._streams.values():
            st.close()
        self._streams.clear()
        for closer in (self._gen_mm.close, lambda: os.close(self._gen_fd), lambda: os.close(self._store_lock_fd)):
            try:
                closer()
            except (OSError, BufferError, ValueError):
                pass

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the JetStream handle on {self.path} is closed")

    def _new_async_publisher(self) -> AsyncWriter:
        return AsyncWriter(self, self._publish_async_max_pending)

    def _check(self) -> None:
        if self._closed:
            raise ClosedError(f"the JetStream handle on {self.path} is closed")
        if FORK_GENERATION[0] != self._fork_gen:
            # After fork: flock belongs to the open file, so the child needs its own.
            for st in self._streams.values():
                st.storage.check_fork()
            self._open_store()

    def _store_locked(self):
        return FLock(self._store_lock_fd)

    def _load_store_doc(self) -> dict:
        """store.json, created with a new id in a new store (caller holds the store lock)."""
        meta = self.path / "store.json"
        try:
            doc = metafile.load(meta, fsync=self._fsync)
        except FileNotFoundError:
            if any(not p.name.startswith(".") for p in (self.path / "streams").iterdir()):
                # A new id would lose the memory streams' data (it names their area): report it.
                raise CorruptStoreError(
                    f"{meta} and its mirror {meta.name}{metafile.MIRROR_SUFFIX} are missing, but {self.path / 'streams'} holds streams: the store's id is lost",
                    path=str(meta),
                ) from None
            doc = {"id": uuid.uuid4().hex, "format": STORE_FORMAT}
            metafile.save(meta, doc, fsync=self._fsync)
        except CorruptStoreError:
            if _legacy_store_doc(meta):
                raise StoreError(
                    f"{self.path} was written by an older jetspark (store format 1, no checksums); this version reads format {STORE_FORMAT}", path=str(meta)
                ) from None
            raise
        if not isinstance(doc.get("id"), str) or doc.get("format") != STORE_FORMAT:
            raise CorruptStoreError(f"{meta} is not a jetspark store document of format {STORE_FORMAT}: {doc!r}", path=str(meta))
        return doc

    def _read_gen(self) -> int:
        return int.from_bytes(self._gen_mm[0:8], "little")

    def _bump_gen(self) -> None:
        self._gen_mm[0:8] = (self._read_gen() + 1).to_bytes(8, "little")

    # ------------------------------------------------------------------ registry

    def _sync_registry(self) -> None:
        gen = self._read_gen()
        if gen == self._gen:
            return
        names = set(self._list_names())
        for name in list(self._streams):
            st = self._streams[name]
            if name not in names or self._uid(st.home) != st.uid:
                st.close()
                del self._streams[name]
        self._broken = {}
        for name in names - set(self._streams):
            try:
                self._streams[name] = self._open_stream(name)
            except (StoreError, ValueError, KeyError, OSError) as exc:
                if not (self.path / "streams" / name).is_dir():
                    continue  # deleted while we looked
                # One damaged stream must not take the store down: it answers with
                # the error, the others keep working.
                self._broken[name] = self._open_error(name, exc)
        self._gen = gen
        self._routes.clear()

    def _open_error(self, name: str, exc: Exception) -> StoreError:
        if isinstance(exc, StoreError):
            return exc
        home = self.path / "streams" / name
        if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError):
            return diskio.translate(exc, exc.filename or home, "opening the stream")
        return CorruptStoreError(f"stream {name!r} in {self.path} cannot be opened: {type(exc).__name__}: {exc}", path=str(home))

    def _list_names(self) -> list[str]:
        """Every stream directory, damaged or not (see the module docstring)."""
        root = self.path / "streams"
        return sorted(p.name for p in root.iterdir() if not p.name.startswith(".") and p.is_dir())

    def _uid(self, home: Path) -> str:
        try:
            return str(metafile.load(home / "config.json", fsync=self._fsync).get("uid", ""))
        except (FileNotFoundError, StoreError):
            return ""

    def _data_dir(self, home: Path, config: StreamConfig, uid: str) -> Path:
        if config.storage == StorageType.MEMORY:
            return _SHM / f"jetspark-{self.store_id}" / uid
        return home / "data"

    def _open_stream(self, name: str) -> Stream:
        home = self.path / "streams" / name
        meta = load_stream_meta(home, self._fsync)
        config = config_from_json(meta["config"])
        st = Stream(home, self._data_dir(home, config, meta["uid"]), self.clock, self._fsync, meta=meta)
        st.uid = meta["uid"]
        h = st.storage.header
        log.debug("opened stream %s: %d messages, seq %d..%d", name, h.msgs, h.first_seq, h.last_seq)
        return st

    def _damaged(self, name: str) -> Optional[StoreError]:
        """Why the stream ``name`` cannot be opened, if it is damaged; a stream fixed (or an
        I/O error gone) since it was found so is opened now."""
        if name not in self._broken:
            return None
        try:
            st = self._open_stream(name)
        except (StoreError, ValueError, KeyError, OSError) as exc:
            if not (self.path / "streams" / name).is_dir():
                del self._broken[name]
                return None
            self._broken[name] = self._open_error(name, exc)
            return self._broken[name]
        del self._broken[name]
        self._streams[name] = st
        self._routes.clear()
        return None

    def _unrouted(self, subject: str) -> Stream:
        """No intact stream captures ``subject``; a damaged one may, and then its error is the
        honest answer (the subjects of a stream whose config is damaged are unknown)."""
        if any(self._damaged(name) is None for name in sorted(self._broken)):
            st = self._route(subject)  # a stream came back
            if st is not None:
                return st
        for name, err in sorted(self._broken.items()):
            try:
                subjects = config_from_json(load_stream_meta(self.path / "streams" / name)["config"]).subjects
            except (StoreError, OSError):
                raise err from None
            if subj.matches_any(subjects, subject):
                raise err
        raise NoStreamResponseError(subject)

    def _stream(self, name: str) -> Stream:
        self._check()
        if self._acks:
            self._flush_acks()
        V.stream_name(name)
        self._sync_registry()
        st = self._streams.get(name)
        if st is None:
            err = self._damaged(name)
            if err is not None:
                raise err
            st = self._streams.get(name)
            if st is None:
                raise api_error(10059)
        return st

    # ------------------------------------------------------------------ streams

    def _add_stream(self, config: StreamConfig) -> StreamInfo:
        """Create a stream; creating an existing one with the same config is a no-op.

        The stream's directory is built aside (config, lock, data files) and renamed into
        place whole: a failure leaves nothing behind, and a directory of that name that is
        not a usable stream is a damaged one, which is never replaced (CorruptStoreError).
        """
        self._check()
        new = cfg.normalize_stream_config(config)
        cfg.check_create(new)
        with self._lock, self._store_locked():
            self._sync_registry()
            err = self._damaged(new.name)
            if err is not None:
                raise err
            existing = self._streams.get(new.name)
            if existing is not None:
                existing.refresh()
                if existing.config != new:
                    raise api_error(10058)
                return existing.info().evolve(did_create=True)  # as the server answers
            self._check_overlap(new)
            cfg.check_storable_name(new.name, "stream")
            home = self.path / "streams" / new.name
            if os.path.lexists(home):
                raise CorruptStoreError(f"{home} exists but is not a usable stream; it is left as it is", path=str(home))
            self._remove_leftovers()
            uid = uuid.uuid4().hex[:12]
            meta = {"config": config_to_json(new), "created": self.clock(), "uid": uid}
            self._build_stream(home, new, meta)
            st = self._open_stream(new.name)
            self._streams[new.name] = st
            self._bump_gen()
            self._gen = self._read_gen()
            self._routes.clear()
            return st.info().evolve(did_create=True)

    def _build_stream(self, home: Path, config: StreamConfig, meta: dict, fill: Optional[Callable[[Path], None]] = None) -> None:
        """Make the stream's directory under a temporary name, then rename it to ``home``.
        ``fill(data_dir)``: write a restored stream's files first (engine/backup.py)."""
        tmp = home.with_name(f".new-{meta['uid']}")
        data_dir = self._data_dir(tmp, config, meta["uid"])
        try:
            with diskio.io_errors(tmp, "creating the stream"):
                tmp.mkdir()
                metafile.save(tmp / "config.json", meta, fsync=self._fsync)
                if fill is not None:
                    fill(data_dir)
                storage = StreamStorage(data_dir, tmp / "lock", memory=config.storage == StorageType.MEMORY, fsync=self._fsync)
                try:
                    if fill is None and config.first_seq and config.first_seq > 1:
                        with storage.locked():
                            storage.set_floor(config.first_seq)
                            storage.header.held = 0
                finally:
                    storage.close()
                os.replace(tmp, home)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if config.storage == StorageType.MEMORY:
                shutil.rmtree(data_dir, ignore_errors=True)
            if isinstance(exc, StoreIOError) and exc.path.startswith(str(tmp)):
                raise type(exc)(exc.errno, exc.strerror, str(home) + exc.path[len(str(tmp)) :], exc.action) from exc
            raise
        if self._fsync:
            metafile.fsync_dir(home.parent)

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
        with self._lock, self._store_locked():
            self._sync_registry()
            home = self.path / "streams" / config.name
            if config.name in self._streams or config.name in self._broken or os.path.lexists(home):
                raise api_error(10130)
            try:
                self._check_overlap(config)
            except APIError as exc:  # as the server words it
                raise api_error(10062, err=f"error adding stream: {exc.description} ({exc.err_code})") from None
            self._remove_leftovers()
            meta = {"config": config_to_json(config), "created": created, "uid": uuid.uuid4().hex[:12]}
            self._build_stream(home, config, meta, fill=lambda data_dir: backup.fill(archive, data_dir, meter, self._fsync))
            st = self._open_stream(config.name)
            self._streams[config.name] = st
            self._bump_gen()
            self._gen = self._read_gen()
            self._routes.clear()
            return st.info()

    def _remove_leftovers(self) -> None:
        """Streams a crash left half created (``.new-*``) or half deleted (``.deleted-*``);
        both are only ever made under the store lock, which the caller holds."""
        for p in (self.path / "streams").iterdir():
            if p.name.startswith((".new-", ".deleted-")):
                self._remove_stream_files(p)

    def _remove_stream_files(self, home: Path) -> None:
        """Remove a stream directory no one uses any more, and its memory-storage data."""
        try:
            meta = load_stream_meta(home)
            config = config_from_json(meta["config"])
            data_dir = self._data_dir(home, config, meta["uid"]) if config.storage == StorageType.MEMORY else None
        except (StoreError, OSError):
            data_dir = None  # its memory data (if any) goes at the next reboot
        shutil.rmtree(home, ignore_errors=True)
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
            try:
                data_dir.parent.rmdir()  # the store's memory area, once its last stream is gone
            except OSError:
                pass

    def _update_stream(self, config: StreamConfig) -> StreamInfo:
        """Replace a stream's config as a whole (omitted fields return to their defaults)."""
        self._check()
        new = cfg.normalize_stream_config(config)
        with self._lock, self._store_locked():
            st = self._stream(new.name)
            with st.locked():
                new = cfg.check_update(st.config, new)
                if new.subjects != st.config.subjects:
                    self._check_overlap(new, exclude=new.name)
                old_retention = st.config.retention
                st.write_config(new)
                if old_retention != RetentionPolicy.INTEREST and new.retention == RetentionPolicy.INTEREST:
                    # Limits -> interest (check_update refuses work-queue changes): what the
                    # consumers acked goes now, as nats-server does (test_retention_update.py).
                    st.consumers.became_interest()
                st.enforce_limits()
            self._bump_gen()
            self._gen = self._read_gen()
            self._routes.clear()
            return st.info()

    def _check_overlap(self, new: StreamConfig, exclude: Optional[str] = None) -> None:
        for name, other in self._streams.items():
            if name == exclude or name == new.name:
                continue
            other._reload_config()
            for a in new.subjects:
                for b in other.config.subjects:
                    if subj.collide(a, b):
                        raise api_error(10065)

    def delete_stream(self, name: str) -> bool:
        """Delete a stream and its messages; a damaged stream (see the module docstring) too."""
        with self._lock, self._store_locked():
            try:
                st = self._stream(name)
            except StoreError:
                if name not in self._broken:
                    raise
                return self._delete_damaged(name)
            with st.storage.locked():
                st.storage.header.deleted = 1
            data_dir = st.storage.dir
            st.close()
            del self._streams[name]
            trash = self.path / "streams" / f".deleted-{st.uid}-{uuid.uuid4().hex[:8]}"
            with diskio.io_errors(st.home, "deleting the stream"):
                os.replace(st.home, trash)
            self._bump_gen()
            self._gen = self._read_gen()
            self._routes.clear()
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
        with self._lock, self._store_locked():
            self._check()
            self._sync_registry()
            problems: list[Problem] = []
            st = self._streams.get(name) if isinstance(name, str) else None
            if st is None:
                err = self._broken.get(name) if isinstance(name, str) else None
                if err is None:
                    raise api_error(10059)
                problems.append(Problem(err.path or str(self.path / "streams" / name), str(err)))
                if not check.header_is_unusable(err):
                    return CheckReport(name, 0, tuple(problems))
                problems += check.rebuild_header(self._stream_data_dir(name), repair)
                if not repair:
                    return CheckReport(name, 0, tuple(problems))
                try:
                    st = self._open_stream(name)
                except StoreError as exc:
                    problems.append(Problem(exc.path, str(exc)))
                    return CheckReport(name, 0, tuple(problems))
                problems[0] = dataclasses.replace(problems[0], repaired=True)
                self._streams[name] = st
                self._broken.pop(name, None)
                self._bump_gen()  # other handles open it again
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

    def _stream_data_dir(self, name: str) -> Path:
        home = self.path / "streams" / name
        meta = load_stream_meta(home)
        return self._data_dir(home, config_from_json(meta["config"]), meta["uid"])

    def _delete_damaged(self, name: str) -> bool:
        """The user asked: remove a damaged stream's files (caller holds the store lock).
        Renamed away first, so another process sees the stream whole or gone."""
        home = self.path / "streams" / name
        trash = home.with_name(f".deleted-{uuid.uuid4().hex[:12]}")
        with diskio.io_errors(home, "deleting the stream"):
            os.replace(home, trash)
        del self._broken[name]
        self._bump_gen()
        self._gen = self._read_gen()
        self._routes.clear()
        self._remove_stream_files(trash)
        return True

    def _stream_info(self, name: str, subjects_filter: Optional[str], deleted_details: bool) -> StreamInfo:
        with self._lock:
            return self._stream(name).info(subjects_filter=subjects_filter, deleted_details=deleted_details)

    def streams_info(self) -> list[StreamInfo]:
        with self._lock:
            self._check()
            self._sync_registry()
            for name, err in sorted(self._broken.items()):
                log.warning("streams_info leaves out the damaged stream %r: %s", name, err)
            # As a lone nats-server's STREAM.LIST: no cluster field (its STREAM.INFO has one).
            return [self._streams[n].info().evolve(cluster=None) for n in sorted(self._streams)]

    def stream_names(self) -> list[str]:
        """Every stream's name, the damaged ones' too (their name is taken)."""
        with self._lock:
            self._check()
            self._sync_registry()
            return sorted(set(self._streams) | set(self._broken))

    def find_stream_name_by_subject(self, subject: str) -> str:
        if not isinstance(subject, str) or not subj.is_valid(subject):
            raise api_error(10059)  # as the server answers: no stream has that subject
        with self._lock:
            st = self._route(subject)
            if st is None:
                raise api_error(10059)
            return st.name

    def _purge_stream(self, name: str, subject: Optional[str], seq: Optional[int], keep: Optional[int]) -> bool:
        with self._lock:
            self._stream(name).purge(subject=subject, seq=seq, keep=keep)
            return True

    # ------------------------------------------------------------------ messages

    def _route(self, subject: str) -> Optional[Stream]:
        self._check()
        self._sync_registry()
        if subject in self._routes:
            return self._routes[subject]
        found = None
        for st in self._streams.values():
            st._reload_config()
            if subj.matches_any(st.config.subjects, subject):
                found = st
                break
        if len(self._routes) > 100_000:
            self._routes.clear()
        # publish trusts a cached subject without checking it again: cache only those it accepts.
        if subj.is_valid(subject) and V.publish_subject_ok(subject):
            self._routes[subject] = found
        return found

    def publish(
        self,
        subject: str,
        payload: bytes = b"",
        headers: Optional[Mapping[str, object]] = None,
        stream: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
    ) -> PubAck:
        """Store one message; returns the PubAck (``duplicate=True`` for a repeated Nats-Msg-Id)."""
        if timeout is not None:
            call_timeout(timeout)  # checked as on a server; a local write waits on no network
        with self._lock:
            self._check()
            # The hot path (bytes, no headers, a subject routed before) checks types only.
            if type(payload) is not bytes:
                payload = V.payload(payload)
            if headers is not None or stream is not None:
                headers = V.publish_headers(headers, stream)
            if type(subject) is not str or subject not in self._routes:
                V.publish_subject(subject)  # before anything queued is stored: a refused call does nothing
            pub = self._async_pub
            if pub is not None and pub.queue:  # (the attribute, not the property: the hot path)
                self._drain_async()
            if self._acks:
                self._flush_acks()
            self._sync_registry()
            st = self._routes.get(subject)
            if st is None:
                st = self._publish_target(subject)
            if not headers:
                return st.publish_plain(subject, payload)
            return st.publish(subject, payload, H.encode(headers))

    def _drain_async(self) -> None:
        """Store what earlier publish_async calls of this process queued (caller holds the lock)."""
        pub = self._async_pub
        if pub is not None and pub.queued and pub.pid == os.getpid():
            pub.drain()

    def _publish_target(self, subject: str) -> Stream:
        """The stream a publish to ``subject`` (a subject ``V.publish_subject`` accepts) stores in."""
        st = self._routes.get(subject, _UNROUTED)
        if st is _UNROUTED:
            # Like the server, a subject with empty tokens reaches no stream, and
            # '*' or '>' tokens in a published subject are stored literally.
            st = self._route(subject) if subj.is_valid(subject) else None
        if st is None:
            if not self._broken or not subj.is_valid(subject):
                raise NoStreamResponseError(subject)
            st = self._unrouted(subject)
        return st  # type: ignore[return-value]  # (not the _UNROUTED sentinel: replaced above)

    @staticmethod
    def _store(st: Stream, subject: str, payload: bytes, headers: Optional[dict]) -> PubAck:
        if not headers:
            return st.publish_plain(subject, payload)
        return st.publish(subject, payload, H.encode(headers))

    def _get_msg(self, stream: str, seq: Optional[int], last_by_subj: Optional[str], next_by_subj: Optional[str]) -> RawStreamMsg:
        with self._lock:
            return self._stream(stream).get_msg(seq=seq, last_by_subj=last_by_subj, next_by_subj=next_by_subj)

    def _delete_msg(self, stream: str, seq: int) -> bool:
        with self._lock:
            self._stream(stream).delete_msg(seq)
            return True

    # ------------------------------------------------------------------ bulk paths for Spark

    def _read_batches(self, stream: str, start_seq: int, end_seq: Optional[int], subjects, batch_size: int, headers: bool) -> Iterator["pa.RecordBatch"]:
        from jetspark.engine import bulk

        with self._lock:
            st = self._stream(stream)
        return bulk.read_batches(st, start_seq, end_seq, subjects=subjects, batch_size=batch_size, headers=headers)

    def _publish_batch(self, table: "pa.Table", stream: str, msg_id_prefix: Optional[str], msg_id_start: int) -> BatchAck:
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

    def _seq_for_time(self, stream: str, when) -> int:
        from jetspark.engine import bulk

        with self._lock:
            return bulk.seq_for_time(self._stream(stream), when)

    # ------------------------------------------------------------------ consumers

    def _put_consumer(self, stream: str, config: ConsumerConfig, action: str, timeout: Optional[float] = None) -> ConsumerInfo:
        with self._lock:  # (timeout: nothing here waits on a network)
            st = self._stream(stream)
            with st.locked():
                new = ccfg.normalize_consumer_config(config, st.config)
                now = st.clock()
                existing = st.consumers.by_name.get(new.name) if new.name else None
                if existing is None:
                    st.consumers.check_not_broken(new.name)  # never replaced: see consumer_set.py
                if existing is not None:
                    if existing.config == new:
                        return existing.info(now)
                    if action == "create":
                        raise api_error(10148)
                    ccfg.check_update(existing.config, new, bound=existing.is_bound())
                    ccfg.check_workqueue(st.config, new, (c.config for c in st.consumers.by_name.values()))
                    return st.consumers.update(existing, new).info(now)
                if action == "update":
                    raise api_error(10149)
                if st.config.max_consumers > 0 and len(st.consumers.by_name) >= st.config.max_consumers:
                    raise api_error(10026)
                ccfg.check_workqueue(st.config, new, (c.config for c in st.consumers.by_name.values()))
                # An ephemeral consumer gets a generated name; its config keeps name=None, as the server echoes it.
                return st.consumers.create(new, now, new.name or ccfg.new_ephemeral_name()).info(now)

    def delete_consumer(self, stream: str, consumer: str) -> bool:
        with self._lock:
            st = self._stream(stream)
            V.consumer_name(consumer)
            with st.locked():
                if consumer not in st.consumers.by_name and st.consumers.broken_error(consumer) is None:
                    raise api_error(10014)
                st.consumers.delete(consumer)  # a damaged one too: the user asked
            return True

    def _consumer(self, st: Stream, name: str):
        c = st.consumers.by_name.get(V.consumer_name(name))
        if c is None:
            st.consumers.check_not_broken(name)  # damaged: its CorruptStoreError
            raise api_error(10014)
        return c

    def consumer_info(self, stream: str, consumer: str, timeout: Optional[float] = None) -> ConsumerInfo:
        call_timeout(timeout)
        with self._lock:
            st = self._stream(stream)
            with st.locked():
                return self._consumer(st, consumer).info(st.clock())

    def _subscription(self, stream: str, consumer: str) -> PullSubscription:
        return PullSubscription(self, stream, consumer)

    # ------------------------------------------------------------------ push subscriptions (push.py)

    def _push_subscription(self, stream: str, info: ConsumerInfo, cb, auto_ack: bool, ordered: Optional[ConsumerConfig], owned: bool) -> PushSubscription:
        return PushSubscription(self, stream, info, cb, auto_ack, ordered, owned)

    def _new_inbox(self) -> str:
        return "_INBOX." + ccfg.new_ephemeral_name()

    def _bind(self, stream: str, consumer: str) -> Binding:
        """Bind a subscription to the push consumer (bindings.py); 10014 if it is gone."""
        with self._lock:
            st = self._stream(stream)
            with st.locked():
                c = self._consumer(st, consumer)
                try:
                    return Binding(c.home)
                except FileNotFoundError:
                    raise api_error(10014) from None

    def _unbind(self, binding: Binding, stream: str, consumer: str) -> None:
        """Release a binding; the consumer's inactive_threshold counts from now, as the server's
        does from the moment its interest goes.  Quiet if the stream or consumer is gone."""
        binding.release()
        if self._closed:
            return
        try:
            with self._lock:
                st = self._stream(stream)
                with st.locked():
                    c = st.consumers.by_name.get(consumer)
                    if c is not None and c.config.inactive_threshold:
                        c.last_active = st.clock()
                        c.write(SCALARS)
        except JetSparkError as exc:  # the stream is gone, or its store refuses: the binding is released all the same
            log.debug("unbinding from consumer %r of stream %r: %s", consumer, stream, exc)

    def consumers_info(self, stream: str) -> list[ConsumerInfo]:
        with self._lock:
            st = self._stream(stream)
            with st.locked():
                now = st.clock()
                for key, err in sorted(st.consumers.broken.items()):
                    log.warning("consumers_info of stream %r leaves out the damaged consumer in %r: %s", stream, key, err)
                return [st.consumers.by_name[n].info(now) for n in sorted(st.consumers.by_name)]

    def _fetch(self, stream: str, consumer: str, batch: int, max_bytes: int, push: bool = False) -> list[Msg]:
        """Deliver up to ``batch`` messages: a pull request (``fetch``), or with ``push`` what a
        push consumer's subscription takes (jetspark/engine/push.py)."""
        return self._pull(stream, consumer, batch, max_bytes, push=push)[0]

    def _fetch_wait(
        self, stream: str, consumer: str, batch: int, max_bytes: int, timeout: float, interrupt: Optional[wakeup.Interrupt] = None, push: bool = False
    ) -> list[Msg]:
        """``_fetch``, waiting up to ``timeout`` seconds (``math.inf``: until ``interrupt``) for
        the first message: woken by another process's commit (wakeup.py) or when the earliest
        pending redelivery falls due.  [] when none came, or on ``interrupt``."""
        wait = timeout > 0
        msgs, due, path, seen = self._pull(stream, consumer, batch, max_bytes, wait, push)
        if msgs or not wait:
            return msgs
        deadline = time.monotonic() + timeout
        with self._lock:
            self._check()
            if self._closing is None:
                self._closing = wakeup.Interrupt()
            interrupts = (self._closing,) if interrupt is None else (self._closing, interrupt)
        with wakeup.Waiter(path, interrupts) as waiter:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or waiter.interrupted():
                    self._check()  # closed meanwhile: ClosedError, not an empty fetch
                    return []
                waiter.wait(left if due is None else min(left, due), seen)
                msgs, due, _, seen = self._pull(stream, consumer, batch, max_bytes, True, push)
                if msgs:
                    return msgs

    def _pull(
        self, stream: str, consumer: str, batch: int, max_bytes: int, arm: bool = False, push: bool = False
    ) -> tuple[list[Msg], Optional[float], Optional[Path], int]:
        """The messages of one fetch (with ``push``: of a push subscription's take).  When
        there are none, also the seconds until the consumer's earliest pending delivery is
        due again (None: none is), the path of the stream's notify file and, with ``arm``,
        the notify counter after arming it under the stream's lock (wakeup.py), for a caller
        that waits."""
        with self._lock:
            st = self._stream(stream)
            with st.locked():
                c = self._consumer(st, consumer)
                if c.config.deliver_subject and not push:
                    raise push_based_error()  # the server's answer to a pull request
                now = st.clock()
                out = c.next_batch(batch, now, max_bytes)
                if not out:
                    due = c.next_due(now)
                    notifier = st.storage.notifier
                    if notifier is None:
                        return [], None if due is None else (due - now) / 1e9, None, 0
                    return [], None if due is None else (due - now) / 1e9, notifier.path, notifier.arm() if arm else 0
                if c.config.ack_policy == AckPolicy.NONE:
                    st.consumers.release([q for q, _, _ in out])  # with ack none, delivery is the release
                pending = c.num_pending()
                recs = st.storage.read_messages([q for q, _, _ in out])
                name, cname, headers_only = st.name, c.name, bool(c.config.headers_only)
                # num_pending after each delivery: the new messages still to come after it.
                new_after = sum(1 for _, _, n in out if n == 1)
                msgs: list = []
                append = msgs.append
                for (sseq, cseq, delivered), (subject, hdr, data, ts) in zip(out, recs):
                    if delivered == 1:
                        new_after -= 1
                    headers = H.decode(hdr) if hdr else None
                    if headers_only:
                        headers = dict(headers or {})
                        headers["Nats-Msg-Size"] = str(len(data))
                        data = b""
                    append(Msg(self, subject, data, headers, (name, cname, sseq, cseq, delivered, pending + new_after, ts)))
                return msgs, None, None, 0

    def _buffer_ack(self, meta: tuple) -> None:
        acks = self._acks
        acks.append(meta)
        if len(acks) >= 8192:
            self._flush_acks()

    def _flush_acks(self) -> None:
        """Apply buffered Msg.ack() calls: one lock and one log record per consumer."""
        if not self._acks:
            return
        with self._lock:
            acks, by_consumer = self._acks, dict[tuple, list]()
            for _ in range(len(acks)):  # those there now; later ones wait for the next flush
                meta = acks.popleft()
                by_consumer.setdefault((meta[0], meta[1]), []).append((meta[2], meta[3]))
            self._sync_registry()
            for (stream, consumer), items in by_consumer.items():
                st = self._streams.get(stream)
                if st is None:
                    continue
                with st.locked():
                    c = st.consumers.by_name.get(consumer)
                    if c is None:
                        continue
                    now = st.clock()
                    if c.is_explicit:
                        released = c.ack_many([q for q, _ in items], now)
                    else:
                        released = []
                        for q, cseq in items:
                            released.extend(c.ack(q, cseq, now))
                    st.consumers.release(released)

    def _consumer_action(self, kind: str, meta: tuple, delay: Optional[float]) -> None:
        self._flush_acks()
        stream, consumer, sseq, cseq = meta[0], meta[1], meta[2], meta[3]
        with self._lock:
            st = self._stream(stream)
            with st.locked():
                c = st.consumers.by_name.get(consumer)
                if c is None:
                    return
                now = st.clock()
                if kind == "nak":
                    c.nak(sseq, cseq, delay, now)
                elif kind == "progress":
                    c.in_progress(sseq, now)
                else:
                    st.consumers.release(c.term(sseq, cseq, now))

    # ------------------------------------------------------------------ for the Spark connector

    def _advance_ack_floor(self, stream: str, durable: str, seq: int) -> SequenceInfo:
        # Everything the consumer matches up to seq counts as delivered and acknowledged
        # (ack-all semantics), released at once on interest and work-queue streams.
        with self._lock:
            st = self._stream(stream)
            with st.locked():
                c = self._consumer(st, durable)
                old = c.ack_floor_stream_seq
                c.advance_floor(seq, st.clock())
                if c.ack_floor_stream_seq > old:
                    st.consumers.release(np.arange(old + 1, c.ack_floor_stream_seq + 1, dtype=np.int64))
                return SequenceInfo(consumer_seq=c.ack_floor_consumer_seq, stream_seq=c.ack_floor_stream_seq)

    def _ordered_consumer(self, stream: str, subjects, start_seq: Optional[int], end_seq: Optional[int], batch_size: int) -> Iterator[Msg]:
        from jetspark.engine import bulk

        with self._lock:
            st = self._stream(stream)
            st.refresh()
            lo, hi = bulk.clamp(st, start_seq, end_seq)
            total = bulk.count_range(st, lo, hi, subjects) if lo <= hi else 0
        return _ordered(self, st, lo, hi, subjects, batch_size, total)


def _ordered(js, st, lo, hi, subjects, batch_size, total) -> Iterator[Msg]:
    from jetspark.engine import bulk

    cseq = 0
    if lo > hi:
        return
    for batch in bulk.read_batches(st, lo, hi, subjects=subjects, batch_size=batch_size, headers=True):
        cols = batch.to_pydict()
        for subject, seq, ts, data, hdrs in zip(cols["subject"], cols["seq"], cols["timestamp"], cols["data"], cols["headers"]):
            cseq += 1
            headers = {k: v[-1] for k, v in hdrs} if hdrs else None
            yield Msg(None, subject, data, headers, (st.name, "", seq, cseq, 1, total - cseq, datetime_to_ns(ts)))


def _legacy_store_doc(path: Path) -> bool:
    """Is ``path`` a store.json of format 1 (plain JSON, before checksums)?"""
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("format") == 1 and "crc32" not in doc
