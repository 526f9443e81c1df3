"""Stream backups on disk: a directory holding a manifest and its parts, every part checksummed.

Both backends write and read backups through this module (``backup_stream`` and
``restore_stream`` in ``jetspark.backend``); what the parts hold is each backend's own::

    <dir>/backup.json     the manifest, written last
    <dir>/data/...        the engine: the stream's files (jetspark/engine/backup.py)
    <dir>/stream.tar.s2   a server: its snapshot of the stream (jetspark/remote/snapshot.py)

The manifest::

    {"format": "jetspark-stream-backup", "version": 1,
     "backend": "engine" or "nats",   which kind of backend wrote it (and alone reads it)
     "stream": NAME, "created": RFC 3339 time (when the backup was taken),
     "config": the StreamConfig, "state": the StreamState when the backup was taken,
     "consumers": how many consumers it holds,
     "files": [{"path": "data/state", "size": 4096, "sha256": "..."}, ...],
     "engine" or "nats": what only that backend reads back,
     "sha256": the SHA-256 of the canonical JSON of everything else}

A backup is written into a hidden directory next to its place and renamed there once
its manifest is on disk (files and directories fsynced first), so a backup that fails
leaves nothing behind and a directory with a ``backup.json`` holds a whole one.  A writer
killed mid-copy cannot remove its hidden directory (``.<name>.partial-<host>-<pid>-<id>``):
the next backup to the same place removes those of writers on this host that are gone.
Reading checks the manifest's own checksum and shape (``open_archive``); ``verify``
checks the size and SHA-256 of every part before a backend writes anything, and
``read_part`` checks them again while the backend copies, in case the files changed
in between.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import uuid
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator, Optional

from jetspark.api import BackupInfo, StreamConfig, StreamState
from jetspark.errors import BackupError, CorruptBackupError

__all__ = ["MANIFEST", "Archive", "Meter", "Writer", "open_archive"]

FORMAT = "jetspark-stream-backup"
VERSION = 1
MANIFEST = "backup.json"
CHUNK = 1 << 20
# Who reads back what: a backup restores only on the kind of backend that wrote it.
BACKENDS = {"engine": "an embedded store", "nats": "a NATS server"}
_SHA256 = re.compile(r"[0-9a-f]{64}")

log = logging.getLogger("jetspark.backup")


class Meter:
    """Bytes done, reported to ``progress(done, total)`` (``total`` None while unknown)."""

    def __init__(self, progress: Optional[Callable[[int, Optional[int]], None]], total: Optional[int] = None) -> None:
        self.progress = progress
        self.total = total
        self.done = 0

    def add(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, self.total)


# ---------------------------------------------------------------------- writing


class Part:
    """One file of a backup being written: its bytes hashed on the way."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = 0
        self._hash = hashlib.sha256()
        with _io(path, "creating"):
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "xb")

    def write(self, data: bytes) -> None:
        with _io(self.path, "writing"):
            self._file.write(data)
        self._hash.update(data)
        self.size += len(data)

    def close(self) -> str:
        """Flush the file to disk; returns its SHA-256."""
        with _io(self.path, "writing"):
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        return self._hash.hexdigest()

    def discard(self) -> None:
        self._file.close()


class Writer:
    """A backup being written to ``target``, which must not exist or be an empty directory.

    Nothing is created before the first part (or ``finish``); leaving the ``with`` block
    with an exception removes whatever was written."""

    def __init__(self, target: Path, backend: str, stream: str) -> None:
        self.target = target.absolute()
        self.backend = backend
        self.stream = stream
        self.files: list[dict] = []
        self._tmp: Optional[Path] = None
        check_target(self.target)

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    @property
    def tmp(self) -> Path:
        if self._tmp is None:
            remove_dead_partials(self.target)
            tmp = self.target.with_name(
                f"{_partial_prefix(self.target)}{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            )
            with _io(tmp, "creating"):
                tmp.parent.mkdir(parents=True, exist_ok=True)
                tmp.mkdir()
            self._tmp = tmp
        return self._tmp

    @contextlib.contextmanager
    def part(self, rel: str) -> Iterator[Part]:
        """A new part at ``rel`` (a relative POSIX path) in the backup."""
        part = Part(self.tmp / rel)
        try:
            yield part
        except BaseException:
            part.discard()
            raise
        self.files.append({"path": rel, "size": part.size, "sha256": part.close()})

    def finish(self, config: StreamConfig, state: StreamState, consumers: int, extra: dict) -> BackupInfo:
        """Write the manifest and put the backup in its place."""
        created = _dt.datetime.now(_dt.timezone.utc)
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "backend": self.backend,
            "stream": self.stream,
            "created": _rfc3339(created),
            "config": config.as_dict(),
            "state": state_json(state),
            "consumers": consumers,
            "files": self.files,
            self.backend: extra,
        }
        doc["sha256"] = _digest(doc)
        tmp = self.tmp
        manifest = tmp / MANIFEST
        with _io(manifest, "writing"):
            with open(manifest, "x") as f:
                json.dump(doc, f, indent=1)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            for d in sorted({(tmp / p["path"]).parent for p in self.files} | {tmp}, key=lambda p: -len(p.parts)):
                _fsync_dir(d)
        try:
            # rename(2) replaces an empty directory, and refuses one that is not (another
            # backup got there first).
            os.replace(tmp, self.target)
        except OSError as exc:
            raise BackupError(
                f"cannot put the backup in place at {self.target}: {exc.strerror or exc}", self.target
            ) from exc
        self._tmp = None
        _fsync_dir(self.target.parent)
        return BackupInfo(
            stream=self.stream,
            path=str(self.target),
            backend=self.backend,
            config=config,
            state=state,
            consumers=consumers,
            files=len(self.files),
            bytes=sum(p["size"] for p in self.files),
            created=created,
        )


def _partial_prefix(target: Path) -> str:
    return f".{target.name}.partial-"


def remove_dead_partials(target: Path) -> None:
    """Remove the hidden work directories of backups to ``target`` whose writer, a process
    on this host, is gone (killed mid-copy: its ``with`` block never ran).  A directory of
    a live process, of another host, or named otherwise is left alone; a pid reused by
    another process only keeps a dead one's directory until that process ends."""
    prefix, host = _partial_prefix(target), socket.gethostname()
    try:
        names = [n for n in os.listdir(target.parent) if n.startswith(prefix)]
    except OSError:
        return  # no parent yet: nothing to remove
    for name in names:
        owner, _, rest = name[len(prefix) :].rpartition("-")  # <host>-<pid>, <id>
        owner_host, _, pid = owner.rpartition("-")
        if owner_host != host or not pid.isdigit() or not rest or _alive(int(pid)):
            continue
        shutil.rmtree(target.parent / name, ignore_errors=True)
        log.warning(
            "removed %s, the work directory of a backup whose process (pid %s) ended before finishing it",
            target.parent / name,
            pid,
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def check_target(target: Path) -> None:
    """A backup goes into a new directory or an empty one."""
    if not os.path.lexists(target):
        return
    if not target.is_dir():
        raise BackupError(
            f"{target} exists and is not a directory: a backup goes into a new or empty directory", target
        )
    try:
        if any(target.iterdir()):
            raise BackupError(f"{target} is not empty: a backup goes into a new or empty directory", target)
    except OSError as exc:
        raise BackupError(f"cannot read {target}: {exc.strerror or exc}", target) from exc


# ---------------------------------------------------------------------- reading


class Archive:
    """A backup on disk whose manifest has been read and checked (``open_archive``)."""

    def __init__(self, path: Path, doc: dict) -> None:
        self.path = path
        self.doc = doc
        self.backend: str = doc["backend"]
        self.stream: str = doc["stream"]
        self.config: dict = doc["config"]
        self.state: dict = doc["state"]
        self.files: list[dict] = doc["files"]
        self.extra: dict = doc.get(self.backend) or {}

    @property
    def bytes(self) -> int:
        return sum(f["size"] for f in self.files)

    def verify(self, meter: Meter) -> None:
        """Check every part's size and SHA-256 (CorruptBackupError naming the first that fails)."""
        for f in self.files:
            for chunk in self.read_part(f["path"]):
                meter.add(len(chunk))

    def read_part(self, rel: str) -> Iterator[builtins.bytes]:  # builtins: this class has a bytes()
        """The part's bytes in chunks; CorruptBackupError (after the last chunk at the latest)
        if it is missing, or its size or SHA-256 is not the manifest's."""
        entry = next(f for f in self.files if f["path"] == rel)
        path = self.path / rel
        digest = hashlib.sha256()
        size = 0
        try:
            with open(path, "rb") as fh:
                while True:
                    chunk = fh.read(CHUNK)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > entry["size"]:
                        raise CorruptBackupError(
                            f"{path}: longer than the {entry['size']} bytes the manifest records: "
                            "the backup is damaged",
                            path,
                        )
                    digest.update(chunk)
                    yield chunk
        except FileNotFoundError:
            raise CorruptBackupError(f"{path} is missing: the backup is incomplete", path) from None
        except CorruptBackupError:
            raise
        except OSError as exc:
            raise BackupError(f"cannot read {path}: {exc.strerror or exc}", path) from exc
        if size < entry["size"]:
            raise CorruptBackupError(
                f"{path}: {size} bytes, the manifest records {entry['size']}: the backup is truncated", path
            )
        if digest.hexdigest() != entry["sha256"]:
            raise CorruptBackupError(f"{path} fails its SHA-256 checksum: the backup is damaged", path)


def open_archive(path: Path, backend: str) -> Archive:
    """The backup in directory ``path``, its manifest checked, for ``backend`` to restore."""
    path = path.absolute()
    manifest = path / MANIFEST
    if not path.is_dir():
        raise BackupError(
            f"no stream backup at {path}: {'it does not exist' if not path.exists() else 'it is not a directory'}", path
        )
    try:
        raw = manifest.read_bytes()
    except FileNotFoundError:
        raise BackupError(f"no stream backup at {path}: it holds no {MANIFEST}", manifest) from None
    except OSError as exc:
        raise BackupError(f"cannot read {manifest}: {exc.strerror or exc}", manifest) from exc
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise CorruptBackupError(f"{manifest} is damaged: not JSON ({exc})", manifest) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BackupError(f"{manifest} is not the manifest of a jetspark stream backup", manifest)
    if doc.get("sha256") != _digest({k: v for k, v in doc.items() if k != "sha256"}):
        raise CorruptBackupError(f"{manifest} fails its SHA-256 checksum: the backup is damaged", manifest)
    if doc.get("version") != VERSION:
        raise BackupError(
            f"{manifest}: backup version {doc.get('version')!r}; this jetspark reads version {VERSION}", manifest
        )
    _check_shape(doc, manifest)
    if doc["backend"] != backend:
        raise BackupError(
            f"{path} holds a backup of stream {doc['stream']!r} taken on {BACKENDS[doc['backend']]}, "
            "which keeps a stream in its own format: "
            f"it restores on {BACKENDS[doc['backend']]}, not on {BACKENDS[backend]}",
            path,
        )
    return Archive(path, doc)


def _check_shape(doc: dict, manifest: Path) -> None:
    """A manifest whose checksum holds but whose fields do not (written by hand, or by another version)."""

    def bad(what: str) -> BackupError:
        return BackupError(f"{manifest} is not a usable backup manifest: {what}", manifest)

    if doc.get("backend") not in BACKENDS:
        raise bad(f"backend {doc.get('backend')!r} (known: {', '.join(BACKENDS)})")
    stream = doc.get("stream")
    config = doc.get("config")
    if not isinstance(stream, str) or not stream or not isinstance(config, dict) or config.get("name") != stream:
        raise bad("its stream name and config do not agree")
    if not isinstance(doc.get("state"), dict) or not isinstance(doc.get(doc["backend"], {}), dict):
        raise bad("no stream state")
    files = doc.get("files")
    if not isinstance(files, list):
        raise bad("no list of files")
    seen = set()
    for f in files:
        ok = isinstance(f, dict) and isinstance(f.get("path"), str) and type(f.get("size")) is int and f["size"] >= 0
        if not ok or not isinstance(f.get("sha256"), str) or not _SHA256.fullmatch(f["sha256"]):
            raise bad(f"file entry {f!r}")
        p = PurePosixPath(f["path"])
        # A part names a file inside the backup, never one outside it.
        if (
            p.is_absolute()
            or not p.parts
            or any(x in ("", ".", "..") for x in p.parts)
            or str(p) != f["path"]
            or f["path"] == MANIFEST
        ):
            raise bad(f"file path {f['path']!r}")
        if f["path"] in seen:
            raise bad(f"file {f['path']!r} listed twice")
        seen.add(f["path"])


# ---------------------------------------------------------------------- helpers


def state_json(state: StreamState) -> dict:
    """A StreamState as the manifest keeps it (times in RFC 3339, as a server's JSON)."""
    out: dict[str, Any] = {}
    for key in (
        "messages",
        "bytes",
        "first_seq",
        "first_ts",
        "last_seq",
        "last_ts",
        "num_subjects",
        "num_deleted",
        "consumer_count",
    ):
        value = getattr(state, key)
        out[key] = _rfc3339(value) if isinstance(value, _dt.datetime) else value
    return out


def _rfc3339(when: _dt.datetime) -> str:
    return when.astimezone(_dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _digest(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _io(path: Path, doing: str) -> Iterator[None]:
    """An OSError writing a backup: a BackupError naming the file."""
    try:
        yield
    except BackupError:
        raise
    except OSError as exc:
        raise BackupError(f"{doing} {path} failed: {exc.strerror or exc}; no backup was written", path) from exc
