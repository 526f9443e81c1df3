"""Checking a stream's files, and repairing them while keeping every intact message.

``JetStream.check_stream(name, repair=False)`` lists what is wrong; with
``repair=True`` it also fixes what can be fixed:

- a damaged header slot is rewritten from its mirror;
- a missing, truncated or unreadable header (``state``) is rebuilt from the
  block files and journals (see ``rebuild_header`` for what that cannot know);
- damaged records are dropped, and only they: their sequences are listed in
  ``state.lost`` and in the report, every intact message stays;
- block files a crash left behind are removed.

What repair cannot rebuild (a damaged removal journal, a damaged subject
dictionary entry) is reported as a problem that stays unrepaired, and the
records it makes unreadable are dropped as damaged.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from jetspark.engine.blocks import CHECK_EVERY
from jetspark.engine.records import DEDUP, ENTRY_SIZE, IDX_DTYPE, RANGE, SID_NONE
from jetspark.engine.removed import OPS_RECORD
from jetspark.engine.state_header import (
    ACTIVE,
    ACTIVE_OFF,
    MAGIC,
    SLOT_OFF,
    StreamHeader,
    pack_slot,
)
from jetspark.engine.subject_table import SUBJECT_RECORD
from jetspark.engine.verify import interval_crcs
from jetspark.errors import CorruptStoreError


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a stream's files."""

    path: str
    what: str
    seqs: tuple[int, ...] = ()  # the messages it concerns, when it concerns messages
    repaired: bool = False


@dataclass(frozen=True)
class CheckReport:
    """What ``check_stream`` found (and, with ``repair=True``, did)."""

    stream: str
    messages: int  # messages the stream holds after the check
    problems: tuple[Problem, ...] = ()
    lost: tuple[int, ...] = field(default=())  # sequences the repair dropped as damaged

    @property
    def ok(self) -> bool:
        """True when nothing wrong is left (nothing found, or everything found was repaired)."""
        return all(p.repaired for p in self.problems)

    def as_dict(self) -> dict:
        return {
            "stream": self.stream,
            "ok": self.ok,
            "messages": self.messages,
            "problems": [dataclasses.asdict(p) for p in self.problems],
            "lost": list(self.lost),
        }


def header_is_unusable(exc: Exception) -> bool:
    """Does this open failure leave the stream without a header or journal a rebuild restores?"""
    name = Path(getattr(exc, "path", "") or "").name.split(".")[0]
    return name in ("state", "ops", "subjects", "dedup", "dedup_ranges")


def rebuild_header(data_dir: Path, repair: bool) -> list[Problem]:
    """Write a new ``state`` from the block files and the journals' intact records.

    What the header alone knew is gone with it and comes back as follows:
    ``first_seq`` is the first record of the oldest block, so messages removed
    from the head (by limits, a purge or acks) reappear until the stream's
    limits and its consumers' ack floors are applied again, which opening the
    stream does; the last message's Nats-Msg-Id (for Nats-Expected-Last-Msg-Id)
    is forgotten.  The journals keep their intact prefix.
    """
    problems: list[Problem] = []
    h = StreamHeader(commit=0)
    # Each journal's current file is its newest generation (see journals.Journals.path).
    gens = {kind: _newest_generation(data_dir, kind) for kind in ("ops", "dedup", "dedup_ranges")}
    h.jgen = max(gens.values())

    def journal(kind: str) -> Path:
        return data_dir / (kind if gens[kind] == 0 else f"{kind}.{gens[kind]}")

    h.subj_len, nsubj, bad = _valid_subjects(data_dir / "subjects")
    if bad:
        problems.append(
            Problem(
                str(data_dir / "subjects"),
                f"record at byte {h.subj_len} fails its checksum; "
                "messages on the subjects stored after it cannot be read",
                repaired=False,
            )
        )
    h.ops_len, bad = _valid_ops(journal("ops"))
    if bad:
        problems.append(
            Problem(
                str(journal("ops")),
                f"record at byte {h.ops_len} fails its checksum; "
                "the removals recorded from there on are unknown and those messages are back",
                repaired=False,
            )
        )
    for name, rec in (("dedup", DEDUP.size), ("dedup_ranges", RANGE.size)):
        size = _size(journal(name))
        setattr(h, "dedup_len" if name == "dedup" else "ranges_len", size - size % rec)
    firsts = sorted(int(p.name[:-4], 16) for p in (data_dir / "blk").glob("*.idx"))
    if firsts:
        h.first_seq = firsts[0]
        last_blk = data_dir / "blk" / f"{firsts[-1]:016x}.idx"
        n, last_ts = _entries_in(last_blk)
        h.last_seq = firsts[-1] + n - 1
        h.last_ts = last_ts
        h.held = 1
    h.num_subjects = 0  # recounted when the stream opens (recovery.recount)
    # Consumers are loaded once the header says there have been some (see _StreamLock).
    h.cons_gen = 1 if (data_dir / "cons").is_dir() and any((data_dir / "cons").iterdir()) else 0
    problems.append(
        Problem(
            str(data_dir / "state"),
            "rebuilt from the block files: first_seq "
            f"{h.first_seq}, last_seq {h.last_seq}; removals at the head are applied again "
            "from the stream's limits and its consumers' acks",
            repaired=repair,
        )
    )
    if repair:
        _write_state(data_dir / "state", h)
    return problems


def _newest_generation(data_dir: Path, kind: str) -> int:
    gens = [0]
    for p in data_dir.glob(f"{kind}.*"):
        suffix = p.name[len(kind) + 1 :]
        if suffix.isdigit():
            gens.append(int(suffix))
    return max(gens)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _valid_subjects(path: Path) -> tuple[int, int, bool]:
    raw = path.read_bytes() if path.exists() else b""
    pos = n = 0
    while pos + SUBJECT_RECORD.size <= len(raw):
        ln, crc = SUBJECT_RECORD.unpack_from(raw, pos)
        body = raw[pos + SUBJECT_RECORD.size : pos + SUBJECT_RECORD.size + ln]
        if len(body) != ln or zlib.crc32(body) != crc:
            return pos, n, True
        pos += SUBJECT_RECORD.size + ln
        n += 1
    return pos, n, pos != len(raw)


def _valid_ops(path: Path) -> tuple[int, bool]:
    raw = path.read_bytes() if path.exists() else b""
    pos = 0
    while pos + OPS_RECORD.size <= len(raw):
        n, crc = OPS_RECORD.unpack_from(raw, pos)
        body = raw[pos + OPS_RECORD.size : pos + OPS_RECORD.size + 16 * n]
        if len(body) != 16 * n or zlib.crc32(body) != crc:
            return pos, True
        pos += OPS_RECORD.size + 16 * n
    return pos, pos != len(raw)


def _entries_in(idx: Path) -> tuple[int, int]:
    """(entries written, last entry's time) of a block's index: up to its last non-zero entry
    (the file is preallocated; unwritten entries are zeros)."""
    raw = idx.read_bytes()
    e = np.frombuffer(raw[: len(raw) - len(raw) % ENTRY_SIZE], dtype=IDX_DTYPE)
    written = np.flatnonzero((e["ts"] != 0) | (e["sid"] == SID_NONE) | (e["crc"] != 0))
    if not len(written):
        return 0, 0
    n = int(written[-1]) + 1
    return n, int(e["ts"][n - 1])


def _write_state(path: Path, h: StreamHeader) -> None:
    buf = bytearray(4096)
    slot = pack_slot(h)
    for off in SLOT_OFF:
        buf[off : off + len(slot)] = slot
    buf[ACTIVE_OFF : ACTIVE_OFF + 8] = ACTIVE[0]
    buf[0:8] = MAGIC
    tmp = path.with_name("state.rebuilt")
    with open(tmp, "wb") as f:
        f.write(buf)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def check_records(storage, repair: bool) -> tuple[list[Problem], list[int]]:
    """Every live record's checksum, the header slots and leftover block files (under the lock).
    Returns the problems and the sequences a repair dropped."""
    s = storage
    problems: list[Problem] = []
    dropped: list[int] = []
    state = str(s.dir / "state")
    active = s.header_file.active()
    for i, role in ((active, "active"), (1 - active, "mirror")):
        if s.header_file.read_slot(i) is None:
            problems.append(Problem(state, f"the {role} header slot fails its checksum", repaired=repair))
            if repair:
                s.header_file.write_slot(i, s.header)
    h = s.header
    bad_parts = []
    step = 1 << 20
    for a in range(h.first_seq, h.last_seq + 1, step):
        bad_parts.append(s.bad_records(a, min(a + step - 1, h.last_seq)))
    bad = np.concatenate(bad_parts) if bad_parts else np.zeros(0, dtype=np.int64)
    by_file: dict[str, list[int]] = {}
    for q in bad.tolist():
        i = max(0, np.searchsorted(s.block_firsts, q, side="right") - 1)
        path = f"{s.blocks[i].path}.dat" if s.blocks else str(s.dir / "blk")
        by_file.setdefault(path, []).append(q)
    for path, seqs in by_file.items():
        problems.append(
            Problem(path, f"{len(seqs)} record(s) missing or failing their checksums", tuple(seqs), repaired=repair)
        )
    if repair and len(bad):
        dropped = bad.tolist()
        s.drop_damaged(bad)
    problems += _check_interval_sums(s, set(bad.tolist()), repair)
    for kind in ("dedup", "dedup_ranges"):
        path = s.journal_path(kind)
        committed = h.dedup_len if kind == "dedup" else h.ranges_len
        size = path.stat().st_size if path.exists() else 0
        n = s.damaged_id_records(kind, repair)
        if n:
            why = (
                f"missing or failing their checksum (the file holds {size} of the "
                f"{committed} bytes the stream header commits: truncated or removed)"
                if size < committed
                else "failing their checksum"
            )
            problems.append(
                Problem(
                    str(path),
                    f"{n} message-id record(s) {why}; a repair forgets those ids "
                    "(a message re-sent with one inside the window is stored again)",
                    repaired=repair,
                )
            )
    for orphan in s.index.orphans():
        if orphan.exists():
            problems.append(
                Problem(str(orphan), "a block file no committed sequence refers to (left by a crash)", repaired=repair)
            )
            if repair:
                orphan.unlink(missing_ok=True)
    return problems, dropped


def consumer_problems(consumers) -> list[Problem]:
    """The stream's consumers whose files are damaged (their config, or a log cut short or
    with a damaged record): not repaired, as their state cannot be rebuilt; deleting the
    consumer and creating it again starts it over."""
    return [
        Problem(
            exc.path or str(consumers.dir / name),
            f"{exc.args[0]}; delete the consumer and create it again to start it over",
        )
        for name, exc in sorted(consumers.broken.items())
    ]


def _check_interval_sums(s, bad: set, repair: bool) -> list[Problem]:
    """Each block's interval checksums (.sum, and the header's open interval) against its records.
    Intervals with a damaged or removed record, or below the first sequence, are left to the
    per-record checks."""
    problems: list[Problem] = []
    h = s.header
    for blk in list(s.blocks):
        count = s.index.block_count(blk)
        is_tail = blk is s.blocks[-1]
        for k in range((count + CHECK_EVERY - 1) // CHECK_EVERY):
            lo = blk.first + k * CHECK_EVERY
            hi = min(lo + CHECK_EVERY, blk.first + count) - 1
            if lo < h.first_seq or any(lo <= q <= hi for q in bad) or s.dead_mask(lo, hi).any():
                continue  # removed records' bytes may differ (a repair leaves them): records decide
            try:
                got = interval_crcs(blk, lo, hi)
            except CorruptStoreError:
                continue  # the record checks report it
            open_interval = is_tail and (hi - lo + 1) < CHECK_EVERY
            want = (h.tail_dcrc, h.tail_hcrc, h.tail_icrc) if open_interval else blk.interval_sums(k)
            if want == got or (want is None and blk.sfd < 0):
                continue
            where = str(s.dir / "state") if open_interval else f"{blk.path}.sum"
            problems.append(
                Problem(
                    where,
                    f"the checksums of records {lo}..{hi} do not match them (the records are intact)",
                    repaired=repair,
                )
            )
            if repair:
                if open_interval:
                    h.tail_dcrc, h.tail_hcrc, h.tail_icrc = got
                else:
                    blk.checkpoint(k, got)
    return problems
