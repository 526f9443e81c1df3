"""Backups of an embedded stream: its files, copied under its lock (``JetStream.backup_stream``).

A stream's state is its files, and every change to them is made holding the stream's
``flock`` (storage.py), consumers' acks and deliveries included; so the files copied while
holding it are one committed state, whatever other processes do meanwhile (their writes
to this stream wait; other streams are not held up).  What is copied, into the backup's
``data/`` (jetspark/backend/archive.py has the manifest and the checksums):

- the stream's data directory: the state header, the subject dictionary, the journals,
  and, unless ``consumers=False``, every consumer's directory (config and state log);
- each block cut at its committed length: the tail block's files are mapped and
  reserved far beyond it (blocks.py), and a block past the last sequence (a writer
  killed before its commit) or wholly below the first (its unlink pending) holds nothing;
- not the leftovers of a crash (``.new-*``/``.deleted-*`` consumers, ``*.tmp*`` files).

The stream's config and creation time travel in the manifest.  ``fill`` writes the files
back into the data directory of a stream that ``JetStream.restore_stream`` builds aside and
renames into place, as ``add_stream`` does; the restored stream gets a new uid, so a
process that had a deleted stream of that name open opens the restored one afresh.
"""

from __future__ import annotations

import os
from pathlib import Path

from jetspark.api import BackupInfo, StreamConfig
from jetspark.backend.archive import Archive, Meter, Writer
from jetspark.engine import config as cfg
from jetspark.engine import diskio, stream_state, wakeup
from jetspark.engine.records import ENTRY, ENTRY_SIZE
from jetspark.engine.storage import StreamStorage
from jetspark.engine.stream import Stream, config_from_json
from jetspark.err_codes import STREAM_NOT_FOUND
from jetspark.errors import BackupError, CorruptStoreError, api_error

__all__ = ["archived_stream", "fill", "write"]

DATA = "data"  # the backup's directory of the stream's files
_CHUNK = 1 << 20


def write(st: Stream, writer: Writer, consumers: bool, meter: Meter, store_format: int) -> BackupInfo:
    """Copy the stream's files into ``writer`` and finish the backup."""
    with st.locked():
        pass  # what every lock holder does first (expiry, consumers catching up), committed before the copy
    if consumers and st.consumers.broken:
        key, err = sorted(st.consumers.broken.items())[0]
        raise BackupError(
            f"cannot back up stream {st.name!r} with its consumers: "
            f"the consumer in {err.path or key} is damaged ({err}); "
            "delete it (or back up without consumers)",
            err.path,
        )
    s = st.storage
    with s.locked():  # changes nothing: only holds off every writer while the files are copied
        if s.header.deleted:
            raise api_error(STREAM_NOT_FOUND)
        st._reload_config()
        meta = st.load_meta()
        plan = _plan(s, consumers)
        meter.total = sum(n for _, _, n in plan)
        state = stream_state.stream_info(st, None, False).state  # (the lock held)
        for rel, path, length in plan:
            with writer.part(f"{DATA}/{rel}") as part:
                _copy(path, length, part, meter)
        count = len({rel.split("/")[1] for rel, _, _ in plan if rel.startswith("cons/")})
    state.consumer_count = count
    config = config_from_json(meta["config"])
    return writer.finish(config, state, count, {"store_format": store_format, "created": int(meta["created"])})


def _plan(s: StreamStorage, consumers: bool) -> list[tuple[str, Path, int]]:
    """(path in the backup, file, bytes to copy) of every file the stream's state is in."""
    out = []
    for p in sorted(s.dir.rglob("*")):
        rel = p.relative_to(s.dir)
        top = rel.parts[0]
        if top == "blk" or not p.is_file() or ".tmp" in p.name or rel.as_posix() == wakeup.NAME:
            continue  # (notify: the running processes' wake-ups, no state; opening the stream makes it)
        if top == "cons" and (not consumers or len(rel.parts) < 3 or rel.parts[1].startswith(".")):
            continue
        out.append((rel.as_posix(), p, p.stat().st_size))
    return out + _blocks(s)


def _blocks(s: StreamStorage) -> list[tuple[str, Path, int]]:
    """The block files, each cut where the committed sequences end."""
    h = s.header
    firsts = sorted(int(p.name[:-4], 16) for p in (s.dir / "blk").glob("*.idx"))
    firsts = [f for f in firsts if f <= h.last_seq]  # one starting later holds nothing committed
    out = []
    for i, first in enumerate(firsts):
        end = firsts[i + 1] - 1 if i + 1 < len(firsts) else h.last_seq
        if end < h.first_seq:
            continue  # wholly removed: its unlink is pending
        base = s.dir / "blk" / f"{first:016x}"
        n = end - first + 1
        with diskio.io_errors(f"{base}.idx", "backing up the stream"), open(f"{base}.idx", "rb") as f:
            raw = os.pread(f.fileno(), ENTRY_SIZE, (n - 1) * ENTRY_SIZE)
        if len(raw) != ENTRY_SIZE:
            raise CorruptStoreError(
                f"{base}.idx: the index entry of sequence {end} is missing (truncated); "
                "`jetspark stream check` tells more",
                f"{base}.idx",
            )
        _, doff, hoff, dlen, hlen, _, _ = ENTRY.unpack(raw)
        out += [(f"blk/{base.name}.idx", Path(f"{base}.idx"), n * ENTRY_SIZE)]
        out += [
            (f"blk/{base.name}.dat", Path(f"{base}.dat"), doff + dlen),
            (f"blk/{base.name}.hdr", Path(f"{base}.hdr"), hoff + hlen),
        ]
        if os.path.exists(f"{base}.sum"):
            out.append((f"blk/{base.name}.sum", Path(f"{base}.sum"), os.path.getsize(f"{base}.sum")))
    return out


def _copy(path: Path, length: int, part, meter: Meter) -> None:
    with diskio.io_errors(path, "backing up the stream"), open(path, "rb") as f:
        left = length
        while left:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                raise CorruptStoreError(
                    f"{path}: the file ends at byte {length - left} but the stream commits {length} bytes (truncated); "
                    "`jetspark stream check` tells more",
                    path,
                )
            part.write(chunk)
            meter.add(len(chunk))
            left -= len(chunk)


# ---------------------------------------------------------------------- restore


def archived_stream(archive: Archive, store_format: int) -> tuple[StreamConfig, int]:
    """The config and creation time (ns) of the stream in an engine backup."""
    manifest = archive.path / "backup.json"
    if archive.extra.get("store_format") != store_format:
        raise BackupError(
            f"{manifest}: a backup of store format {archive.extra.get('store_format')!r}; "
            f"this jetspark reads format {store_format}",
            manifest,
        )
    created = archive.extra.get("created")
    try:
        config = config_from_json(archive.config)
    except (KeyError, ValueError, TypeError) as exc:
        raise BackupError(
            f"{manifest}: the stream config cannot be read: {type(exc).__name__}: {exc}", manifest
        ) from None
    if type(created) is not int or any(not f["path"].startswith(f"{DATA}/") for f in archive.files):
        raise BackupError(
            f"{manifest} is not the manifest of an engine backup (no creation time, or files outside {DATA}/)", manifest
        )
    return cfg.normalize_stream_config(config), created


def fill(archive: Archive, data_dir: Path, meter: Meter, fsync: bool) -> None:
    """Write the backup's files into a new stream's data directory, checking each again."""
    for f in archive.files:
        dest = data_dir / f["path"][len(DATA) + 1 :]
        with diskio.io_errors(dest, "restoring the stream"):
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "xb") as out:
                for chunk in archive.read_part(f["path"]):
                    out.write(chunk)
                    meter.add(len(chunk))
                if fsync:
                    out.flush()
                    os.fsync(out.fileno())
