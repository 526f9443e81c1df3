"""Per-subject counts: how many live messages each subject id has, and its first and last.

``max_msgs_per_subject``, ``num_subjects``, last-per-subject lookups and
filtered consumers' pending counts all need them, so each process builds
them once from the index (``build``) and then keeps them up to date: the
appends and removals of this process (storage.py, which updates them inline
on its hot paths), and other processes' changes when it catches up
(``catch_up``).  A first or last sequence that was removed is set to 0
(unknown) and looked up again in the index only when someone asks
(``first_of``/``last_of``).

The stats are three arrays indexed by subject id, ``(count, first, last)``,
held by the storage as ``stats_by_subject`` (None until first needed) and
passed in.  They read the block index (block_index.py) and its removed set,
and nothing of the storage façade above it.
"""

from __future__ import annotations

import numpy as np

from jetspark.engine.block_index import BlockIndex
from jetspark.engine.records import SID_NONE, merge_ranges, runs_of
from jetspark.engine.state_header import StreamHeader

Stats = tuple[np.ndarray, ...]  # count, first, last by subject id


def build(s: BlockIndex) -> Stats:
    """The stats of the live messages, from the index (0 = not known yet for first/last)."""
    n = len(s.subject_table.names)
    stats = (np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64))
    first, lastseq = s.header.first_seq, s.header.last_seq
    step = 1 << 20
    for a in range(first, lastseq + 1, step):
        b = min(a + step - 1, lastseq)
        e = s.entries(a, b)
        live = ~s.removed.mask(a, b)
        add(stats, e["sid"][live], np.arange(a, b + 1, dtype=np.int64)[live])
    return stats


def add(stats: Stats, sids: np.ndarray, seqs: np.ndarray) -> None:
    """Count live messages (ascending ``seqs`` with their subject ids)."""
    keep = sids != SID_NONE
    sids, seqs = sids[keep].astype(np.int64), seqs[keep]
    if not len(sids):
        return
    count, first, last = stats
    fresh = count[sids] == 0
    count += np.bincount(sids, minlength=len(count))[: len(count)]
    np.maximum.at(last, sids, seqs)
    if fresh.any():
        # Sequences arrive ascending, so the first occurrence is the subject's first.
        u, i = np.unique(sids[fresh], return_index=True)
        first[u] = seqs[fresh][i]


def remove_seqs(s: BlockIndex, stats: Stats, seqs: np.ndarray) -> None:
    """Live sequences that are being removed: take them out of the stats."""
    count, first, last = stats
    sids = np.concatenate([s.entries(int(a), int(b))["sid"] for a, b in runs_of(seqs)]).astype(np.int64)
    keep = sids != SID_NONE
    sids, seqs = sids[keep], seqs[keep]
    if not len(sids):
        return
    count -= np.bincount(sids, minlength=len(count))[: len(count)]
    # A removed first or last is looked up again when someone asks (0 = unknown).
    last[sids[last[sids] == seqs]] = 0
    first[sids[first[sids] == seqs]] = 0


def catch_up(s: BlockIndex, stats: Stats, old: StreamHeader, h: StreamHeader, ranges: list[tuple[int, int]]) -> None:
    """Apply the removal ``ranges`` and move the stats from the ``old`` commit to ``h``.

    Counted before: live sequences in old.first..old.last.  Counted after:
    live sequences in h.first..h.last.  Only the touched regions (new
    removal ranges, the head that fell below first_seq, the appended tail)
    are read.  Raises CorruptStoreError (storage turns it into FilesMoved) when
    the appended tail is not all in the blocks listed.
    """
    touched = merge_ranges(
        [(max(a, old.first_seq), min(b, old.last_seq)) for a, b in ranges]
        + [(old.first_seq, min(h.first_seq - 1, old.last_seq))]
    )
    before = [(a, b, s.removed.mask(a, b)) for a, b in touched]
    s.removed.apply(ranges)
    for a, b, dead_before in before:
        seqs = np.arange(a, b + 1, dtype=np.int64)
        gone = ~dead_before & ((seqs < h.first_seq) | s.removed.mask(a, b))
        if gone.any():
            remove_seqs(s, stats, seqs[gone])


def last_of(s: BlockIndex, stats: Stats, sid: int) -> int:
    """The last live sequence of a subject, or 0."""
    count, first, last = stats
    if count[sid] <= 0:
        return 0
    if last[sid] == 0:
        last[sid] = _scan(s, sid, forward=False)
    return int(last[sid])


def first_of(s: BlockIndex, stats: Stats, sid: int) -> int:
    """The first live sequence of a subject, or 0."""
    count, first, last = stats
    if count[sid] <= 0:
        return 0
    if count[sid] == 1:
        return last_of(s, stats, sid)
    if first[sid] == 0:
        first[sid] = _scan(s, sid, forward=True)
    return int(first[sid])


def _scan(s: BlockIndex, sid: int, *, forward: bool) -> int:
    step = 1 << 16
    lo, hi = s.header.first_seq, s.header.last_seq
    if forward:
        for a in range(lo, hi + 1, step):
            b = min(a + step - 1, hi)
            hit = np.flatnonzero((s.entries(a, b)["sid"] == sid) & ~s.removed.mask(a, b))
            if len(hit):
                return a + int(hit[0])
        return 0
    b = hi
    while b >= lo:
        a = max(lo, b - step + 1)
        hit = np.flatnonzero((s.entries(a, b)["sid"] == sid) & ~s.removed.mask(a, b))
        if len(hit):
            return a + int(hit[-1])
        b = a - 1
    return 0


def seqs_of_subjects(s: BlockIndex, sid_mask: np.ndarray, a: int, b: int) -> np.ndarray:
    """Live sequences in a..b whose subject id is set in ``sid_mask``."""
    out = []
    step = 1 << 20
    for lo in range(a, b + 1, step):
        hi = min(lo + step - 1, b)
        e = s.entries(lo, hi)
        sids = e["sid"].astype(np.int64)
        ok = (sids < len(sid_mask)) & ~s.removed.mask(lo, hi)
        ok[ok] = sid_mask[sids[ok]]
        out.append(np.flatnonzero(ok) + lo)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
