"""Time-driven removals: max_age, per-message TTLs and the subject delete markers they leave.

The engine has no background thread: whatever came due is applied at the next operation on
the stream (``pending`` tells a reader whether to take the lock; ``expire`` runs under it),
as though the server's expiry timer had run at each deadline (docs/semantics.md §3.2, §3.8):

- max_age removes the messages older than it, except those whose ``Nats-TTL`` is "never";
- a message with a TTL is removed at its deadline (msg_ttl.deadline), or by max_age first
  when that comes sooner;
- with ``subject_delete_marker_ttl``, an expiry that would remove the last message of its
  subject stores a marker instead (msg_ttl.marker_header): a new message on that subject,
  at the time of the expiry, whose subject rollup removes the expired one, and which
  expires itself after the marker TTL (or max_age) without leaving another marker.  These
  are applied one at a time in deadline order, so a marker that would already have
  expired by now is stored and removed again, as on a server nobody looked at meanwhile.

Functions of the stream (stream.py), which calls them; this module imports no stream.
Tests: tests/contract/test_msg_ttl.py.
"""

from __future__ import annotations

import heapq
import logging
from typing import Any, Optional

import numpy as np

from jetspark.engine import msg_ttl
from jetspark.engine.ttl_index import TTLIndex
from jetspark.errors import APIError, CorruptStoreError

log = logging.getLogger("jetspark")

_NS = 1_000_000_000

Stream = Any  # stream.Stream (not imported: stream.py imports this module)


def ttl_index(st: Stream) -> TTLIndex:
    """The stream's TTL index, caught up with what is stored (storage.py keeps it)."""
    s = st.storage
    idx = s.ttl_index
    if idx is None:
        idx = s.ttl_index = TTLIndex()
    idx.catch_up(s.index)
    return idx


def pending(st: Stream) -> bool:
    """Is anything due for removal now? (a cheap look, without the lock)"""
    c = st.config
    if not c.allow_msg_ttl:
        return bool(c.max_age) and _first_too_old(st)
    now = st.clock()
    with st.storage.thread_lock:  # (the index is this process's, shared by its threads)
        idx = ttl_index(st)
        due = idx.next_deadline()
        if due is not None and due <= now:
            return True
        return _age_deadline(st, idx) <= now


def next_marker_due(st: Stream) -> Optional[int]:
    """When (ns) the next expiry comes due on a stream whose expiries store delete markers: a
    consumer waiting for messages wakes then, as the marker is one (deliveries.py).  None on
    other streams, or when nothing is due later than now."""
    if not st.config.subject_delete_marker_ttl:
        return None
    with st.storage.thread_lock:
        idx = ttl_index(st)
        due = min(idx.next_deadline() or _NEVER_DUE, _age_deadline(st, idx))
    return due if st.clock() < due < _NEVER_DUE else None


def expire(st: Stream) -> None:
    """Remove what came due (under the stream's lock)."""
    c = st.config
    if not c.allow_msg_ttl:
        if c.max_age and _first_too_old(st):
            _expire_by_age(st)
        return
    if c.subject_delete_marker_ttl:
        _expire_with_markers(st)
        return
    idx = ttl_index(st)
    now = st.clock()
    s = st.storage
    seqs = [q for _, q in idx.pop_due(now)]
    if c.max_age and _age_deadline(st, idx) <= now:
        first = max(idx.age_cursor, s.header.first_seq)
        end = st.seq_at_time(now - int(c.max_age * _NS) + 1) - 1
        if end >= first:
            old = np.arange(first, end + 1, dtype=np.int64)[~s.dead_mask(first, end)]
            if idx.never:
                old = old[~np.isin(old, np.fromiter(idx.never, dtype=np.int64))]
            seqs.extend(old.tolist())
    if seqs:
        live = np.unique(np.asarray(seqs, dtype=np.int64))
        live = live[np.array([s.is_live(int(q)) for q in live], dtype=bool)]
        n = st.remove(live)
        log.debug("stream %s: %d messages expired (TTL or max_age)", st.name, n)


# ---------------------------------------------------------------------- max_age alone (no TTL on the stream)


def _first_too_old(st: Stream) -> bool:
    s = st.storage
    if not s.header.msgs:
        return False
    cutoff = st.clock() - int(st.config.max_age * _NS)
    return int(s.entries(s.header.first_seq, s.header.first_seq)[0]["ts"]) <= cutoff


def _expire_by_age(st: Stream) -> None:
    s = st.storage
    cutoff = st.clock() - int(st.config.max_age * _NS)
    end = st.seq_at_time(cutoff + 1) - 1  # last seq with ts <= cutoff
    first = s.header.first_seq
    n = st.remove_range(first, end)
    log.debug("stream %s: max_age removed %d messages (seq %d..%d)", st.name, n, first, end)


# ---------------------------------------------------------------------- with TTLs


_NEVER_DUE = 1 << 63


def _age_candidate(st: Stream, idx: TTLIndex, refused: frozenset[int] | set[int] = frozenset()) -> int:
    """The first live message max_age may remove (one whose TTL is not "never", and not one
    whose marker was ``refused`` in this pass), or 0."""
    s = st.storage
    last = s.header.last_seq
    seq = s.next_live(max(idx.age_cursor, s.header.first_seq))
    while seq <= last and seq in idx.never:
        seq = s.next_live(seq + 1)
    idx.age_cursor = seq  # (not past a refused one: a later operation tries it again)
    while seq <= last and (seq in refused or seq in idx.never):
        seq = s.next_live(seq + 1)
    return seq if seq <= last else 0


def _age_deadline(st: Stream, idx: TTLIndex, seq: Optional[int] = None) -> int:
    """When max_age removes the first message it may remove (``_NEVER_DUE``: none)."""
    if not st.config.max_age:
        return _NEVER_DUE
    seq = seq if seq is not None else _age_candidate(st, idx)
    if not seq:
        return _NEVER_DUE
    return int(st.storage.entries(seq, seq)[0]["ts"]) + int(st.config.max_age * _NS)


def _expire_with_markers(st: Stream) -> None:
    """One expiry at a time, earliest first: each may store a marker that itself comes due."""
    idx = ttl_index(st)
    s = st.storage
    now = st.clock()
    refused: set[int] = set()  # messages whose marker the stream refused: they stay, as on the server
    retry: list[tuple[int, int]] = []  # their TTL entries, for the next operation to try again
    while True:
        age_seq = _age_candidate(st, idx, refused) if st.config.max_age else 0
        age_due = _age_deadline(st, idx, age_seq)
        ttl_due = idx.next_deadline()
        from_ttl = ttl_due is not None and ttl_due <= now and ttl_due <= age_due
        if from_ttl:
            at, seq = heapq.heappop(idx.heap)
            if not s.is_live(seq):
                continue
            if seq in refused:
                retry.append((at, seq))
                continue
        elif age_due <= now:
            at, seq = age_due, age_seq
        else:
            break
        if not _remove_or_mark(st, seq, at):
            refused.add(seq)
            if from_ttl:
                retry.append((at, seq))
    for entry in retry:
        heapq.heappush(idx.heap, entry)


def _remove_or_mark(st: Stream, seq: int, at: int) -> bool:
    """Expire ``seq`` at time ``at``: a marker in its place when it is the last message of its
    subject and no marker itself, else a plain removal.  False if the marker was refused."""
    s = st.storage
    try:
        subject, hdr, _, _ = s.read_message(seq)
    except CorruptStoreError as exc:
        # Damaged: whether it was a marker cannot be told; it goes as max_age would take it.
        log.warning("stream %s: message %d expired damaged, removed without a marker: %s", st.name, seq, exc)
        st.remove(np.array([seq], dtype=np.int64))
        return True
    sid = s.subject_ids[subject]
    if s.subject_count(sid) == 1 and not msg_ttl.is_marker(hdr):
        try:
            st.store_marker(subject, at)
        except APIError as exc:
            idx = s.ttl_index
            if idx is not None and seq not in idx.refused:
                idx.refused.add(seq)  # said once; later operations try again, as the server does
                log.warning(
                    "stream %s: its delete marker for %r was refused (%s); message %d stays", st.name, subject, exc, seq
                )
            return False
        return True
    st.remove(np.array([seq], dtype=np.int64))
    return True
