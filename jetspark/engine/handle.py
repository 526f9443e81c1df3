"""The embedded engine's JetStream handle: nats-py's verbs, synchronously, on a store directory.

Store layout::

    <store>/store.json          the store's id (names its memory-storage area)
    <store>/store.lock          serialises stream create / update / delete across processes
    <store>/store.gen           8-byte generation, bumped whenever the set of streams changes
    <store>/streams/<NAME>/     config.json, lock, and (file storage) the data files

Memory-storage streams keep their data files under ``/dev/shm`` (tmpfs), so
every process on the machine sees them and a reboot forgets them, as a
memory stream on the server forgets its messages on restart.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Sequence

import numpy as np

from jetspark.api import PubAck, RawStreamMsg, StorageType, StreamConfig, StreamInfo, datetime_to_ns
from jetspark.engine import config as cfg
from jetspark.engine import headers as H
from jetspark.engine import subjects as subj
from jetspark.engine.storage import FORK_GENERATION
from jetspark.engine.stream import Stream, config_from_json, config_to_json
from jetspark.errors import BadRequestError, ClosedError, CorruptStoreError, NoStreamResponseError, StoreError, api_error

_UNROUTED = object()
_SHM = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())


class JetStream:
    """A synchronous JetStream handle on an embedded store (see ``jetspark.connect``)."""

    def __init__(self, path, *, clock: Optional[Callable[[], int]] = None, sync: str = "os") -> None:
        if sync not in ("os", "fsync"):
            raise ValueError(f"sync must be 'os' or 'fsync', not {sync!r}")
        self.path = Path(str(path).removeprefix("file://")).absolute()
        self.clock = clock or time.time_ns
        self._fsync = sync == "fsync"
        self._closed = False
        self._lock = threading.RLock()
        try:
            (self.path / "streams").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create store directory {self.path}: {exc}") from exc
        self._open_store()

    def _open_store(self) -> None:
        self._fork_gen = FORK_GENERATION[0]
        self._store_lock_fd = os.open(self.path / "store.lock", os.O_RDWR | os.O_CREAT, 0o644)
        with self._store_locked():
            meta = self.path / "store.json"
            if not meta.exists():
                tmp = meta.with_suffix(".tmp")
                tmp.write_text(json.dumps({"id": uuid.uuid4().hex, "format": 1}))
                os.replace(tmp, meta)
            gen = self.path / "store.gen"
            if not gen.exists() or gen.stat().st_size < 8:
                gen.write_bytes(b"\0" * 8)
        try:
            self.store_id = json.loads((self.path / "store.json").read_text())["id"]
        except (ValueError, KeyError) as exc:
            raise StoreError(f"{self.path / 'store.json'} is damaged: {exc}") from exc
        self._gen_fd = os.open(self.path / "store.gen", os.O_RDWR)
        self._gen_mm = mmap.mmap(self._gen_fd, 8)
        self._streams: dict[str, Stream] = {}
        self._broken: dict[str, StoreError] = {}
        self._gen = -1
        self._routes: dict[str, Optional[Stream]] = {}

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for st in self._streams.values():
            st.close()
        self._streams.clear()
        for closer in (self._gen_mm.close, lambda: os.close(self._gen_fd), lambda: os.close(self._store_lock_fd)):
            try:
                closer()
            except (OSError, BufferError, ValueError):
                pass

    def __enter__(self) -> "JetStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check(self) -> None:
        if self._closed:
            raise ClosedError(f"the JetStream handle on {self.path} is closed")
        if FORK_GENERATION[0] != self._fork_gen:
            # After fork: flock belongs to the open file, so the child needs its own.
            for st in self._streams.values():
                st.storage.check_fork()
            self._open_store()

    def _store_locked(self):
        return _FLock(self._store_lock_fd)

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
            if name not in names or not (st.home / "config.json").exists() or self._uid(st.home) != st.uid:
                st.close()
                del self._streams[name]
        self._broken = {}
        for name in names - set(self._streams):
            try:
                self._streams[name] = self._open_stream(name)
            except FileNotFoundError:
                continue  # deleted while we looked
            except (StoreError, ValueError, KeyError, OSError) as exc:
                # One damaged stream must not take the store down: it answers with
                # the error, the others keep working.
                err = exc if isinstance(exc, StoreError) else CorruptStoreError(
                    f"stream {name!r} in {self.path} cannot be opened: {type(exc).__name__}: {exc}"
                )
                self._broken[name] = err
        self._gen = gen
        self._routes.clear()

    def _list_names(self) -> list[str]:
        root = self.path / "streams"
        return sorted(p.name for p in root.iterdir() if (p / "config.json").exists())

    @staticmethod
    def _uid(home: Path) -> str:
        try:
            return json.loads((home / "config.json").read_text()).get("uid", "")
        except (FileNotFoundError, ValueError):
            return ""

    def _data_dir(self, home: Path, config: StreamConfig, uid: str) -> Path:
        if config.storage == StorageType.MEMORY:
            return _SHM / f"jetspark-{self.store_id}" / uid
        return home / "data"

    def _open_stream(self, name: str) -> Stream:
        home = self.path / "streams" / name
        meta = json.loads((home / "config.json").read_text())
        config = config_from_json(meta["config"])
        st = Stream(home, self._data_dir(home, config, meta["uid"]), self.clock, self._fsync)
        st.uid = meta["uid"]
        return st

    def _stream(self, name: str) -> Stream:
        self._check()
        if not isinstance(name, str) or not name:
            raise api_error(10059)
        self._sync_registry()
        st = self._streams.get(name)
        if st is None:
            if name in self._broken:
                raise self._broken[name]
            raise api_error(10059)
        return st

    # ------------------------------------------------------------------ streams

    def add_stream(self, config: Optional[StreamConfig] = None, **params) -> StreamInfo:
        """Create a stream; creating an existing one with the same config is a no-op."""
        self._check()
        config = _config(config, params)
        new = cfg.normalize_stream_config(config)
        cfg.check_create(new)
        with self._lock, self._store_locked():
            self._sync_registry()
            existing = self._streams.get(new.name)
            if existing is not None:
                existing.refresh()
                if existing.config != new:
                    raise api_error(10058)
                return existing.info().evolve(did_create=True)  # as the server answers
            self._check_overlap(new)
            home = self.path / "streams" / new.name
            if home.exists():
                shutil.rmtree(home)  # leftovers of a create that died halfway
            home.mkdir(parents=True)
            uid = uuid.uuid4().hex[:12]
            meta = {"config": config_to_json(new), "created": self.clock(), "uid": uid}
            tmp = home / "config.json.tmp"
            tmp.write_text(json.dumps(meta))
            data_dir = self._data_dir(home, new, uid)
            if data_dir.exists():
                shutil.rmtree(data_dir)
            os.replace(tmp, home / "config.json")
            st = self._open_stream(new.name)
            if new.first_seq and new.first_seq > 1:
                with st.locked():
                    st.storage.set_floor(new.first_seq)
                    st.storage.h.held = 0
            self._streams[new.name] = st
            self._bump_gen()
            self._gen = self._read_gen()
            self._routes.clear()
            return st.info().evolve(did_create=True)

    def update_stream(self, config: Optional[StreamConfig] = None, **params) -> StreamInfo:
        """Replace a stream's config as a whole (omitted fields return to their defaults)."""
        self._check()
        config = _config(config, params)
        new = cfg.normalize_stream_config(config)
        with self._lock, self._store_locked():
            st = self._stream(new.name)
            with st.locked():
                new = cfg.check_update(st.config, new)
                if new.subjects != st.config.subjects:
                    self._check_overlap(new, exclude=new.name)
                st.write_config(new)
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
        with self._lock, self._store_locked():
            st = self._stream(name)
            with st.storage.locked():
                st.storage.h.deleted = 1
            data_dir = st.storage.dir
            st.close()
            del self._streams[name]
            trash = self.path / "streams" / f".deleted-{name}-{uuid.uuid4().hex[:8]}"
            os.replace(st.home, trash)
            self._bump_gen()
            self._gen = self._read_gen()
            self._routes.clear()
        shutil.rmtree(trash, ignore_errors=True)
        shutil.rmtree(data_dir, ignore_errors=True)
        return True

    def stream_info(self, name: str, subjects_filter: Optional[str] = None, deleted_details: bool = False) -> StreamInfo:
        with self._lock:
            return self._stream(name).info(subjects_filter=subjects_filter, deleted_details=deleted_details)

    def streams_info(self) -> list[StreamInfo]:
        with self._lock:
            self._check()
            self._sync_registry()
            return [self._streams[n].info() for n in sorted(self._streams)]  # damaged streams are left out

    def stream_names(self) -> list[str]:
        with self._lock:
            self._check()
            self._sync_registry()
            return sorted(self._streams)

    def find_stream_name_by_subject(self, subject: str) -> str:
        with self._lock:
            st = self._route(subject)
            if st is None:
                raise api_error(10059)
            return st.name

    def purge_stream(self, name: str, subject: Optional[str] = None, seq: Optional[int] = None, keep: Optional[int] = None) -> bool:
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
        self._routes[subject] = found
        return found

    def publish(self, subject: str, payload: bytes = b"", headers: Optional[Mapping[str, object]] = None, stream: Optional[str] = None) -> PubAck:
        """Store one message; returns the PubAck (``duplicate=True`` for a repeated Nats-Msg-Id)."""
        with self._lock:
            self._check()
            self._sync_registry()
            st = self._routes.get(subject, _UNROUTED)
            if st is _UNROUTED:
                if not isinstance(subject, str) or not subject or subj.has_whitespace(subject):
                    raise BadRequestError(400, 10003, f"invalid publish subject {subject!r}: a subject is non-empty dot-separated tokens without whitespace")
                # Like the server, a subject with empty tokens reaches no stream, and
                # '*' or '>' tokens in a published subject are stored literally.
                st = self._route(subject) if subj.is_valid(subject) else None
            if st is None:
                raise NoStreamResponseError(subject)
            if stream is not None:
                headers = dict(headers or {})
                headers[H.EXPECTED_STREAM] = stream
            return st.publish(subject, payload if type(payload) is bytes else bytes(payload), H.encode(headers) if headers else b"")

    def get_msg(self, stream: str, seq: Optional[int] = None, last_by_subj: Optional[str] = None, next_by_subj: Optional[str] = None) -> RawStreamMsg:
        with self._lock:
            return self._stream(stream).get_msg(seq=seq, last_by_subj=last_by_subj, next_by_subj=next_by_subj)

    def get_last_msg(self, stream: str, subject: str) -> RawStreamMsg:
        return self.get_msg(stream, last_by_subj=subject)

    def delete_msg(self, stream: str, seq: int) -> bool:
        with self._lock:
            self._stream(stream).delete_msg(seq)
            return True


    # ------------------------------------------------------------------ bulk paths for Spark

    def read_batches(
        self,
        stream: str,
        start_seq: int = 1,
        end_seq: Optional[int] = None,
        subjects: Optional[Sequence[str]] = None,
        batch_size: int = 65536,
        headers: bool = False,
    ) -> Iterator["pa.RecordBatch"]:
        """Messages with start_seq <= seq <= end_seq (inclusive, optionally filtered by
        subjects, wildcards allowed) as Arrow batches with the columns
        stream, subject, seq, timestamp, data (and headers when asked)."""
        from jetspark.engine import bulk

        with self._lock:
            st = self._stream(stream)
        return bulk.read_batches(st, start_seq, end_seq, subjects=subjects, batch_size=batch_size, headers=headers)

    def publish_batch(self, data, stream: Optional[str] = None):
        """Append an Arrow table/batch (columns subject, data, optional headers, msg_id) with
        the rules of single publishes, all or nothing; returns a BatchAck with one seq per row."""
        import pyarrow as pa

        from jetspark.engine import bulk

        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        if not isinstance(table, pa.Table) or "subject" not in table.column_names or "data" not in table.column_names:
            raise BadRequestError(400, 10003, "publish_batch takes a pyarrow Table or RecordBatch with columns 'subject' and 'data' (optional 'headers', 'msg_id')")
        with self._lock:
            if stream is None:
                if table.num_rows == 0:
                    raise BadRequestError(400, 10003, "publish_batch of an empty table needs stream=")
                first = table.column("subject")[0].as_py()
                st = self._route(first) if isinstance(first, str) and subj.is_valid(first) else None
                if st is None:
                    raise NoStreamResponseError(first)
            else:
                st = self._stream(stream)
            return bulk.publish_batch(st, table)

    def seq_for_time(self, stream: str, when) -> int:
        """The first sequence stored at or after ``when`` (a datetime, or ns since the epoch)."""
        from jetspark.engine import bulk

        with self._lock:
            return bulk.seq_for_time(self._stream(stream), when)


def _config(config: Optional[StreamConfig], params: dict) -> StreamConfig:
    if config is None:
        config = StreamConfig()
    elif isinstance(config, dict):
        config = StreamConfig.from_response(config)
    unknown = set(params) - set(StreamConfig.__dataclass_fields__)
    if unknown:
        raise BadRequestError(400, 10003, f"unknown stream config field(s) {sorted(unknown)}; accepted: {sorted(StreamConfig.__dataclass_fields__)}")
    return config.evolve(**params) if params else config


class _FLock:
    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self):
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
