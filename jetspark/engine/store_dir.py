"""``StoreDirectory``: the engine's store directory and its registry of streams.

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

A ``StoreDirectory`` holds what one handle knows of the directory: the open
streams (``streams``), the damaged ones (``broken``), the subject routes of
publishes (``routes``), all brought up to date by ``sync`` when the store's
generation moved; the handle's lock (``lock``, one per handle, taken by every
verb) and the cross-process store lock (``locked()``).  It knows nothing of
consumers' deliveries (deliveries.py) nor of the verbs (handle.py).
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Callable, Optional

from jetspark import validate as V
from jetspark.api import StorageType, StreamConfig
from jetspark.engine import diskio, metafile
from jetspark.engine.locking import FORK_GENERATION, FLock
from jetspark.engine.storage import StreamStorage
from jetspark.engine.stream import Stream, config_from_json, load_stream_meta
from jetspark.err_codes import STREAM_NOT_FOUND, STREAM_SUBJECT_OVERLAP
from jetspark.errors import ClosedError, CorruptStoreError, NoStreamResponseError, StoreError, StoreIOError, api_error
from jetspark.protocol import subjects as subj

__all__ = ["STORE_FORMAT", "StoreDirectory"]

log = logging.getLogger("jetspark")
STORE_FORMAT = 2  # 2: checksummed JSON documents with mirrors (metafile.py)
_UNROUTED = object()
_SHM = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())


class StoreDirectory:
    """One handle's view of a store directory (see the module docstring)."""

    def __init__(self, path: Path, *, clock: Callable[[], int], fsync: bool, create: bool) -> None:
        self.path = path
        self.clock = clock
        self.fsync = fsync
        self.closed = False
        self.lock = threading.RLock()
        self._create = create
        if create:
            try:
                (path / "streams").mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create store directory {path}: {exc}", path) from exc
        self._open()

    def _open(self) -> None:
        if not self._create:
            # Open an existing store only (readers: a mistyped path must fail, not leave
            # an empty store behind).  Nothing is created before this check.
            self._check_exists()
        self.fork_gen = FORK_GENERATION[0]
        with diskio.io_errors(self.path / "store.lock", "opening"):
            self._lock_fd = os.open(self.path / "store.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            with self.locked():
                doc = self._load_doc()
                gen = self.path / "store.gen"
                if not gen.exists() or gen.stat().st_size < 8:
                    with diskio.io_errors(gen, "creating"):
                        gen.write_bytes(b"\0" * 8)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self.store_id: str = doc["id"]
        self._gen_fd = os.open(self.path / "store.gen", os.O_RDWR)
        self._gen_mm = mmap.mmap(self._gen_fd, 8)
        self.streams: dict[str, Stream] = {}
        self.broken: dict[str, StoreError] = {}
        self.routes: dict[str, Optional[Stream]] = {}
        self._gen = -1

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
            f"no jetspark store at {self.path}: {reason}; jetspark.connect(path) (create=True, "
            "the default) or `jetspark stream add` creates one",
            self.path,
        )

    def closed_error(self) -> ClosedError:
        return ClosedError(f"the JetStream handle on {self.path} is closed")

    def check(self) -> bool:
        """ClosedError once closed; True when this is a forked child that has just opened the
        store again (flock belongs to the open file, so the child needs files of its own)."""
        if self.closed:
            raise self.closed_error()
        if FORK_GENERATION[0] == self.fork_gen:
            return False
        for st in self.streams.values():
            st.storage.check_fork()
        self._open()
        return True

    def close(self) -> None:
        self.closed = True
        for st in self.streams.values():
            st.close()
        self.streams.clear()
        for closer in (self._gen_mm.close, lambda: os.close(self._gen_fd), lambda: os.close(self._lock_fd)):
            try:
                closer()
            except (OSError, BufferError, ValueError):
                pass

    def locked(self) -> FLock:
        """The store lock, across processes: held to create, update or delete a stream."""
        return FLock(self._lock_fd)

    def _load_doc(self) -> dict:
        """store.json, created with a new id in a new store (caller holds the store lock)."""
        meta = self.path / "store.json"
        try:
            doc = metafile.load(meta, fsync=self.fsync)
        except FileNotFoundError:
            if any(not p.name.startswith(".") for p in (self.path / "streams").iterdir()):
                # A new id would lose the memory streams' data (it names their area): report it.
                raise CorruptStoreError(
                    f"{meta} and its mirror {meta.name}{metafile.MIRROR_SUFFIX} are missing, "
                    f"but {self.path / 'streams'} holds streams: the store's id is lost",
                    path=str(meta),
                ) from None
            doc = {"id": uuid.uuid4().hex, "format": STORE_FORMAT}
            metafile.save(meta, doc, fsync=self.fsync)
        except CorruptStoreError:
            if _legacy_store_doc(meta):
                raise StoreError(
                    f"{self.path} was written by an older jetspark (store format 1, no checksums); "
                    f"this version reads format {STORE_FORMAT}",
                    path=str(meta),
                ) from None
            raise
        if not isinstance(doc.get("id"), str) or doc.get("format") != STORE_FORMAT:
            raise CorruptStoreError(
                f"{meta} is not a jetspark store document of format {STORE_FORMAT}: {doc!r}", path=str(meta)
            )
        return doc

    # ------------------------------------------------------------------ the generation

    def _read_gen(self) -> int:
        return int.from_bytes(self._gen_mm[0:8], "little")

    def changed(self) -> None:
        """The set of streams (or a stream's subjects) changed here: other handles reload
        theirs (the generation moves), this one has it already."""
        self._gen_mm[0:8] = (self._read_gen() + 1).to_bytes(8, "little")
        self._gen = self._read_gen()
        self.routes.clear()

    # ------------------------------------------------------------------ the registry

    def sync(self) -> None:
        """Bring ``streams`` and ``broken`` up to date if another handle changed the set."""
        gen = self._read_gen()
        if gen == self._gen:
            return
        names = set(self._list_names())
        for name in list(self.streams):
            st = self.streams[name]
            if name not in names or self._uid(st.home) != st.uid:
                st.close()
                del self.streams[name]
        self.broken = {}
        for name in names - set(self.streams):
            try:
                self.streams[name] = self.open_stream(name)
            except (StoreError, ValueError, KeyError, OSError) as exc:
                if not (self.path / "streams" / name).is_dir():
                    continue  # deleted while we looked
                # One damaged stream must not take the store down: it answers with
                # the error, the others keep working.
                self.broken[name] = self._open_error(name, exc)
        self._gen = gen
        self.routes.clear()

    def _open_error(self, name: str, exc: Exception) -> StoreError:
        if isinstance(exc, StoreError):
            return exc
        home = self.path / "streams" / name
        if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError):
            return diskio.translate(exc, exc.filename or home, "opening the stream")
        return CorruptStoreError(
            f"stream {name!r} in {self.path} cannot be opened: {type(exc).__name__}: {exc}", path=str(home)
        )

    def _list_names(self) -> list[str]:
        """Every stream directory, damaged or not (see the module docstring)."""
        root = self.path / "streams"
        return sorted(p.name for p in root.iterdir() if not p.name.startswith(".") and p.is_dir())

    def _uid(self, home: Path) -> str:
        try:
            return str(metafile.load(home / "config.json", fsync=self.fsync).get("uid", ""))
        except (FileNotFoundError, StoreError):
            return ""

    def data_dir(self, home: Path, config: StreamConfig, uid: str) -> Path:
        if config.storage == StorageType.MEMORY:
            return _SHM / f"jetspark-{self.store_id}" / uid
        return home / "data"

    def stream_data_dir(self, name: str) -> Path:
        home = self.path / "streams" / name
        meta = load_stream_meta(home)
        return self.data_dir(home, config_from_json(meta["config"]), meta["uid"])

    def open_stream(self, name: str) -> Stream:
        home = self.path / "streams" / name
        meta = load_stream_meta(home, self.fsync)
        config = config_from_json(meta["config"])
        st = Stream(home, self.data_dir(home, config, meta["uid"]), self.clock, self.fsync, meta=meta)
        st.uid = meta["uid"]
        h = st.storage.header
        log.debug("opened stream %s: %d messages, seq %d..%d", name, h.msgs, h.first_seq, h.last_seq)
        return st

    def damaged(self, name: str) -> Optional[StoreError]:
        """Why the stream ``name`` cannot be opened, if it is damaged; a stream fixed (or an
        I/O error gone) since it was found so is opened now."""
        if name not in self.broken:
            return None
        try:
            st = self.open_stream(name)
        except (StoreError, ValueError, KeyError, OSError) as exc:
            if not (self.path / "streams" / name).is_dir():
                del self.broken[name]
                return None
            self.broken[name] = self._open_error(name, exc)
            return self.broken[name]
        del self.broken[name]
        self.streams[name] = st
        self.routes.clear()
        return None

    def stream(self, name: str) -> Stream:
        """The stream ``name`` (a str), after ``sync``: its CorruptStoreError if it is
        damaged, 10059 if there is none."""
        self.sync()
        st = self.streams.get(name)
        if st is None:
            err = self.damaged(name)
            if err is not None:
                raise err
            st = self.streams.get(name)
            if st is None:
                raise api_error(STREAM_NOT_FOUND)
        return st

    # ------------------------------------------------------------------ routes of publishes

    def route(self, subject: str) -> Optional[Stream]:
        """The stream whose subjects match ``subject``, if one does (after ``sync``)."""
        self.sync()
        if subject in self.routes:
            return self.routes[subject]
        found = None
        for st in self.streams.values():
            st._reload_config()
            if subj.matches_any(st.config.subjects, subject):
                found = st
                break
        if len(self.routes) > 100_000:
            self.routes.clear()
        # publish trusts a cached subject without checking it again: cache only those it accepts.
        if subj.is_valid(subject) and V.publish_subject_ok(subject):
            self.routes[subject] = found
        return found

    def target(self, subject: str) -> Stream:
        """The stream a publish to ``subject`` (a subject ``V.publish_subject`` accepts) stores in."""
        st = self.routes.get(subject, _UNROUTED)
        if st is _UNROUTED:
            # Like the server, a subject with empty tokens reaches no stream, and
            # '*' or '>' tokens in a published subject are stored literally.
            st = self.route(subject) if subj.is_valid(subject) else None
        if st is None:
            if not self.broken or not subj.is_valid(subject):
                raise NoStreamResponseError(subject)
            st = self._unrouted(subject)
        return st  # type: ignore[return-value]  # (not the _UNROUTED sentinel: replaced above)

    def _unrouted(self, subject: str) -> Stream:
        """No intact stream captures ``subject``; a damaged one may, and then its error is the
        honest answer (the subjects of a stream whose config is damaged are unknown)."""
        if any(self.damaged(name) is None for name in sorted(self.broken)):
            st = self.route(subject)  # a stream came back
            if st is not None:
                return st
        for name, err in sorted(self.broken.items()):
            try:
                subjects = config_from_json(load_stream_meta(self.path / "streams" / name)["config"]).subjects
            except (StoreError, OSError):
                raise err from None
            if subj.matches_any(subjects, subject):
                raise err
        raise NoStreamResponseError(subject)

    def check_overlap(self, new: StreamConfig, exclude: Optional[str] = None) -> None:
        """10065 if ``new``'s subjects overlap another stream's."""
        for name, other in self.streams.items():
            if name == exclude or name == new.name:
                continue
            other._reload_config()
            for a in new.subjects or ():
                for b in other.config.subjects or ():
                    if subj.collide(a, b):
                        raise api_error(STREAM_SUBJECT_OVERLAP)

    # ----------------------------------------------------------- stream directories (caller holds the store lock)

    def build_stream(
        self, home: Path, config: StreamConfig, meta: dict, fill: Optional[Callable[[Path], None]] = None
    ) -> None:
        """Make the stream's directory under a temporary name, then rename it to ``home``.
        ``fill(data_dir)``: write a restored stream's files first (engine/backup.py)."""
        tmp = home.with_name(f".new-{meta['uid']}")
        data_dir = self.data_dir(tmp, config, meta["uid"])
        try:
            with diskio.io_errors(tmp, "creating the stream"):
                tmp.mkdir()
                metafile.save(tmp / "config.json", meta, fsync=self.fsync)
                if fill is not None:
                    fill(data_dir)
                storage = StreamStorage(
                    data_dir, tmp / "lock", memory=config.storage == StorageType.MEMORY, fsync=self.fsync
                )
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
                raise type(exc)(
                    exc.errno or 0, exc.strerror or "", str(home) + exc.path[len(str(tmp)) :], exc.action
                ) from exc
            raise
        if self.fsync:
            metafile.fsync_dir(home.parent)

    def remove_leftovers(self) -> None:
        """Streams a crash left half created (``.new-*``) or half deleted (``.deleted-*``);
        both are only ever made under the store lock, which the caller holds."""
        for p in (self.path / "streams").iterdir():
            if p.name.startswith((".new-", ".deleted-")):
                self.remove_stream_files(p)

    def remove_stream_files(self, home: Path) -> None:
        """Remove a stream directory no one uses any more, and its memory-storage data."""
        try:
            meta = load_stream_meta(home)
            config = config_from_json(meta["config"])
            data_dir = self.data_dir(home, config, meta["uid"]) if config.storage == StorageType.MEMORY else None
        except (StoreError, OSError):
            data_dir = None  # its memory data (if any) goes at the next reboot
        shutil.rmtree(home, ignore_errors=True)
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
            try:
                data_dir.parent.rmdir()  # the store's memory area, once its last stream is gone
            except OSError:
                pass

    def delete_damaged(self, name: str) -> bool:
        """The user asked: remove a damaged stream's files.  Renamed away first, so another
        process sees the stream whole or gone."""
        home = self.path / "streams" / name
        trash = home.with_name(f".deleted-{uuid.uuid4().hex[:12]}")
        with diskio.io_errors(home, "deleting the stream"):
            os.replace(home, trash)
        del self.broken[name]
        self.changed()
        self.remove_stream_files(trash)
        return True


def _legacy_store_doc(path: Path) -> bool:
    """Is ``path`` a store.json of format 1 (plain JSON, before checksums)?"""
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("format") == 1 and "crc32" not in doc
