"""Repairing a stream's files: what a crash or damage left, found and cut away.

A writer killed mid-append leaves a torn tail: records past the last intact
one that fail their checks.  Every process that opens a stream checks its
last ``TAIL_CHECK`` records (``tail_intact``) and, if needed, cuts the torn
ones (``repair_tail``); a bad record with intact ones after it is damage,
not a torn write, and is left for ``check_stream`` (check.py), which calls
``drop_damaged`` when asked to repair.  Dropped sequences are listed in
``lost.json`` (reported as the stream state's ``lost``).  The counts a
repair invalidates are rebuilt from the index (``recount``).

They work on the block index (block_index.py) and the subject stats
above it, never on the storage façade: its owner runs them under the
stream's lock and takes the per-subject stats they return (counts a repair
changes are built again).  They change only what a repair has to.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Optional

import numpy as np

from jetspark.engine import subject_stats
from jetspark.engine.block_index import BlockIndex
from jetspark.engine.blocks import CHECK_EVERY
from jetspark.engine.records import SID_NONE, runs_of
from jetspark.engine.subject_stats import Stats
from jetspark.engine.verify import bad_records, interval_crcs, verify
from jetspark.errors import CorruptStoreError

log = logging.getLogger("jetspark")
TAIL_CHECK = 1024  # records verified at the end of each stream when a process opens it


def tail_intact(s: BlockIndex) -> bool:
    """Do the last TAIL_CHECK records pass their checks?  The interval checksums decide
    in a few crc32 calls; record by record only when they cannot (see verify)."""
    a, b = max(s.header.first_seq, s.header.last_seq - TAIL_CHECK + 1), s.header.last_seq
    try:
        for blk, lo, hi in s.block_spans(a, b):
            verify(s, blk, lo, hi)
    except CorruptStoreError:
        return not len(bad_records(s, a, b))
    return True


def repair_tail(s: BlockIndex) -> Optional[Stats]:
    """Cut a torn tail (under the lock): the bad records after the last intact one, which
    is what a writer that died mid-append leaves.  A bad record with intact ones after it
    is damage, not a torn write: it is left in place (reads of it raise, check_stream
    reports it).  Returns the per-subject stats counted again, or None if nothing was cut."""
    h = s.header
    a = max(h.first_seq, h.last_seq - TAIL_CHECK + 1)
    bad = bad_records(s, a, h.last_seq)
    if not len(bad):
        return None
    intact = np.setdiff1d(np.flatnonzero(~s.removed.mask(a, h.last_seq)) + a, bad)
    if not len(intact) and a > h.first_seq:
        # Every record checked is bad: not the shape of a torn write; cut nothing blindly.
        log.warning(
            "stream data in %s: the last %d records all fail their checksums; left for check_stream",
            s.dir,
            h.last_seq - a + 1,
        )
        return None
    cut = int(intact[-1]) + 1 if len(intact) else a
    if (bad < cut).any():
        log.warning(
            "stream data in %s: %d damaged record(s) before sequence %d; reads of them raise CorruptStoreError",
            s.dir,
            int((bad < cut).sum()),
            cut,
        )
    if cut <= h.last_seq:
        return truncate_after(s, cut - 1)
    return None


def truncate_after(s: BlockIndex, good_last: int) -> Stats:
    """Forget sequences after good_last (under the lock); recorded in ``lost``.  Returns
    the per-subject stats counted again (``recount``)."""
    h = s.header
    lost_seqs = [q for q in range(max(good_last + 1, h.first_seq), h.last_seq + 1) if s.is_live(q)]
    log.warning(
        "stream data in %s: records %d..%d are torn or corrupt and were dropped", s.dir, good_last + 1, h.last_seq
    )
    h.last_seq = good_last
    first = h.first_seq
    h.last_ts = int(s.entries(good_last, good_last)[0]["ts"]) if good_last >= first and good_last > 0 else h.last_ts
    stats = recount(s)
    s.cut_blocks_after(good_last)
    _recompute_tail_sums(s)
    record_lost(s.dir, lost_seqs)
    return stats


def _recompute_tail_sums(s: BlockIndex) -> None:
    """The open interval's checksums from the files (after the tail moved back)."""
    h = s.header
    h.tail_dcrc = h.tail_hcrc = h.tail_icrc = 0
    if not s.blocks or s.blocks[-1].count <= 0:
        return
    b = s.blocks[-1]
    start = b.first + (b.count // CHECK_EVERY) * CHECK_EVERY
    if start > h.last_seq:
        return
    h.tail_dcrc, h.tail_hcrc, h.tail_icrc = interval_crcs(b, start, h.last_seq)


def recount(s: BlockIndex) -> Stats:
    """Count messages, bytes and subjects again from the index (under the lock, after a
    repair); returns the per-subject stats, built again."""
    h = s.header
    msgs = nbytes = 0
    step = 1 << 20
    for a in range(h.first_seq, h.last_seq + 1, step):
        b = min(a + step - 1, h.last_seq)
        e = s.entries(a, b)
        live = ~s.removed.mask(a, b) & (e["sid"] != SID_NONE)
        msgs += int(live.sum())
        nbytes += int(s.sizes(e[live]).sum())
    h.msgs, h.bytes = msgs, nbytes
    h.first_seq = s.next_live(h.first_seq) if msgs else h.last_seq + 1
    s.removed.rebase(h.first_seq)
    stats = subject_stats.build(s)
    h.num_subjects = int((stats[0] > 0).sum())
    return stats


def drop_damaged(s: BlockIndex, bad: np.ndarray) -> Stats:
    """Drop exactly the damaged records ``bad`` (under the lock): a damaged tail is cut,
    others are marked removed; all of them are listed in ``lost``.  Returns the
    per-subject stats counted again."""
    h = s.header
    badset = set(bad.tolist())
    last_intact = h.last_seq
    while last_intact >= h.first_seq and (last_intact in badset or not s.is_live(last_intact)):
        last_intact -= 1
    inner = bad[bad <= last_intact]
    if len(inner):
        runs = runs_of(inner)
        s.removed.write(runs, h)
        s.removed.apply(runs)
        record_lost(s.dir, inner.tolist())
        log.warning("stream data in %s: dropped %d damaged record(s) at the user's request", s.dir, len(inner))
    if last_intact < h.last_seq and (bad > last_intact).any():
        return truncate_after(s, last_intact if last_intact >= h.first_seq else h.first_seq - 1)
    return recount(s)


def record_lost(directory: Path, seqs: list[int]) -> None:
    path = directory / "lost.json"
    try:
        prior = json.loads(path.read_text())["msgs"]
    except (FileNotFoundError, ValueError, KeyError):
        prior = []
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"msgs": sorted(set(prior) | set(seqs))}))
    os.replace(tmp, path)


def lost(directory: Path) -> Optional[dict]:
    try:
        msgs = json.loads((directory / "lost.json").read_text())["msgs"]
    except (FileNotFoundError, ValueError, KeyError):
        return None
    return {"msgs": msgs, "bytes": 0} if msgs else None
