"""The store's small JSON documents: checksummed, written atomically, kept twice.

Every metadata document the engine trusts (``store.json``, a stream's and a
consumer's ``config.json``) goes through ``save`` and ``load``.  A document
is kept in two files with the same content, ``<name>`` and its mirror
``<name>.1``, each::

    {"crc32":"<8 hex digits>","gen":<n>,<the document's keys, sorted>}

The CRC-32 covers every byte after its own field, so any flipped byte is
caught (CRC-32 misses no error burst of 32 bits or less), and a truncated
file is no JSON object at all.  ``gen`` grows by one with every save.

``save`` writes both copies to temporary files first (flushed with fsync
when the store runs with ``sync="fsync"``) and only then renames them over
the old ones, the primary first: a save that fails for lack of space changes
nothing, and a process killed between the two renames leaves the primary one
generation ahead, which ``load`` prefers.

``load`` returns the intact copy with the highest generation.  A damaged or
missing copy is rewritten from the other, with a warning on the ``jetspark``
logger naming the file; both damaged is a ``CorruptStoreError`` naming the
file and what is wrong with each copy.  Nothing is ever served unchecked.
Because a rewrite only ever restores a generation that exists intact, a
rewrite racing with a save cannot win over it: the save's newer generation is
still in one of the two files and ``load`` picks it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import zlib
from pathlib import Path
from typing import Optional

from jetspark.engine import diskio
from jetspark.errors import CorruptStoreError

log = logging.getLogger("jetspark")

MIRROR_SUFFIX = ".1"
_PREFIX = b'{"crc32":"'
_HEAD = len(_PREFIX) + 9  # the prefix, 8 hex digits and the closing quote
_HEX = frozenset(b"0123456789abcdef")
_RESERVED = ("crc32", "gen")


def mirror_of(path) -> Path:
    path = Path(path)
    return path.with_name(path.name + MIRROR_SUFFIX)


def encode(doc: dict, gen: int) -> bytes:
    """A document's file content at generation ``gen``."""
    if not isinstance(doc, dict) or any(k in doc for k in _RESERVED):
        raise ValueError(f"a metadata document is a dict without the keys {_RESERVED}, not {doc!r}")
    body = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    tail = (f',"gen":{int(gen)}' + ("}" if body == "{}" else "," + body[1:])).encode()
    return b'%s%08x"%s' % (_PREFIX, zlib.crc32(tail), tail)


def decode(raw: bytes) -> tuple[int, dict]:
    """(generation, document) of a file's content; ValueError saying what is wrong."""
    if len(raw) <= _HEAD or raw[: len(_PREFIX)] != _PREFIX or raw[_HEAD - 1 : _HEAD] != b'"':
        raise ValueError("has no checksum header" if raw else "is empty")
    digits = raw[len(_PREFIX) : _HEAD - 1]
    if not set(digits) <= _HEX:
        raise ValueError("has a damaged checksum field")
    if zlib.crc32(raw[_HEAD:]) != int(digits, 16):
        raise ValueError("fails its checksum")
    try:
        doc = json.loads(raw)
        gen = doc.pop("gen")
        doc.pop("crc32")
    except (ValueError, KeyError, AttributeError, TypeError) as exc:  # pragma: no cover - needs a CRC collision
        raise ValueError(f"is not a metadata document ({exc})") from exc
    if type(gen) is not int:  # pragma: no cover - needs a CRC collision
        raise ValueError("has no generation")
    return gen, doc


def load(path, *, fsync: bool = False) -> dict:
    """The document saved at ``path``, recovered from its mirror if need be.

    FileNotFoundError if neither copy exists; CorruptStoreError (``.path`` is
    ``path``) if no copy is intact.  A bad or missing copy next to a good one
    is rewritten from it (a warning names the file).
    """
    path = Path(path)
    copies = (path, mirror_of(path))
    found: list[Optional[tuple[int, dict, bytes]]] = []
    problems: list[str] = []
    for p in copies:
        raw = _read(p)
        if raw is None:
            found.append(None)
            problems.append(f"{p.name} is missing")
            continue
        try:
            gen, doc = decode(raw)
        except ValueError as exc:
            found.append(None)
            problems.append(f"{p.name} {exc}")
            continue
        found.append((gen, doc, raw))
        problems.append("")
    good = [f for f in found if f is not None]
    if not good:
        if all(p.endswith("is missing") for p in problems):
            raise FileNotFoundError(errno.ENOENT, f"neither {path} nor its mirror {copies[1].name} exists", str(path))
        raise CorruptStoreError(f"{path} is damaged and has no intact copy: {'; '.join(problems)}", path=str(path))
    best = max(good, key=lambda f: f[0])  # the first of equals: the primary
    for p, f, problem in zip(copies, found, problems):
        if f is not None and f[2] == best[2]:
            continue
        other = copies[1] if p == copies[0] else copies[0]
        if f is None:
            log.warning("%s %s; recovered from %s and rewritten", p, problem.removeprefix(p.name + " "), other.name)
        else:
            # One generation behind: a save was interrupted between its two renames.
            log.info("%s is generation %d, %s is %d: finishing an interrupted save", p, f[0], other.name, best[0])
        _rewrite(p, best[2], fsync)
    return best[1]


def save(path, doc: dict, *, fsync: bool = False) -> None:
    """Write ``doc`` to ``path`` and its mirror, all or nothing (StoreIOError/StoreFullError)."""
    path = Path(path)
    copies = (path, mirror_of(path))
    gen = 0
    for p in copies:
        raw = _read(p)
        if raw is not None:
            try:
                gen = max(gen, decode(raw)[0])
            except ValueError:
                pass  # replaced below
    raw = encode(doc, gen + 1)
    tmps: list[Path] = []
    try:
        for p in copies:
            tmps.append(_write_tmp(p, raw, fsync))
        os.replace(tmps[0], path)  # the commit point
    except OSError as exc:
        for t in tmps:
            _unlink(t)
        # Named after the document, not the temporary file that could not be written.
        raise diskio.translate(OSError(exc.errno, exc.strerror), path, "saving") from exc
    try:
        os.replace(tmps[1], copies[1])
    except OSError as exc:
        _unlink(tmps[1])
        log.warning("%s saved, but its mirror could not be replaced (%s); it is rewritten at the next load", path, exc)
    if fsync:
        fsync_dir(path.parent)


def _read(p: Path) -> Optional[bytes]:
    try:
        return p.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise diskio.translate(exc, p, "reading") from exc


def _write_tmp(p: Path, raw: bytes, fsync: bool) -> Path:
    tmp = p.with_name(f"{p.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        diskio.pwrite(fd, raw, 0, tmp)  # all of it, or StoreIOError/StoreFullError
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink(tmp)
        raise
    os.close(fd)
    return tmp


def _rewrite(p: Path, raw: bytes, fsync: bool) -> None:
    """Best effort: the good copy was served either way; the next load tries again."""
    try:
        tmp = _write_tmp(p, raw, fsync)
        try:
            os.replace(tmp, p)
        except OSError:
            _unlink(tmp)
            raise
    except OSError as exc:
        log.warning("%s could not be rewritten (%s); it is tried again at the next load", p, exc)


def _unlink(p: Path) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


def fsync_dir(path) -> None:
    """Make a rename in ``path`` durable (fsync of the directory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
