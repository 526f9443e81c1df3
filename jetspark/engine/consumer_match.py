"""Which stored messages a consumer's subject filters match, and what a delivery costs.

The consumer's delivery state machine (consumer.py) asks these questions of the
stream without keeping any state of its own here: the filters, the matching
subject ids (grown as the subject table grows), the live matching sequences in
a range, and how many live messages from a sequence on match (num_pending).
``ByteBudget`` counts a pull's ``max_bytes`` as nats-server does.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from jetspark.engine.records import SID_NONE
from jetspark.protocol import subjects as subj


class SubjectFilter:
    """A consumer's filter subjects over one stream (none: everything matches)."""

    def __init__(self, stream, filters: list[str]) -> None:
        self.stream = stream
        self.filters = filters
        self._sid_mask: Optional[np.ndarray] = None

    def sid_mask(self) -> Optional[np.ndarray]:
        """Which subject ids this consumer's filters match (None: all)."""
        if not self.filters:
            return None
        names = self.stream.storage.subjects
        m = self._sid_mask
        if m is None or len(m) != len(names) + 1:
            old = 0 if m is None else len(m) - 1
            grown = np.zeros(len(names) + 1, dtype=bool)
            if m is not None:
                grown[:old] = m[:old]
            for i in range(old, len(names)):
                grown[i] = subj.matches_any(self.filters, names[i])
            self._sid_mask = m = grown
        return m

    def matches(self, subject: str) -> bool:
        return not self.filters or subj.matches_any(self.filters, subject)

    def match_sids(self, sids: np.ndarray) -> np.ndarray:
        stored = sids != SID_NONE
        m = self.sid_mask()
        if m is None:
            return stored
        safe = np.where(stored, sids, len(m) - 1).astype(np.int64)
        return stored & m[np.minimum(safe, len(m) - 1)]

    def matching_live(self, a: int, b: int) -> np.ndarray:
        """Live sequences in a..b this consumer's filters match."""
        s = self.stream.storage
        a = max(a, s.header.first_seq)
        b = min(b, s.header.last_seq)
        if a > b:
            return np.zeros(0, dtype=np.int64)
        out = []
        step = 1 << 16
        for lo in range(a, b + 1, step):
            hi = min(lo + step - 1, b)
            e = s.entries(lo, hi)
            ok = self.match_sids(e["sid"]) & ~s.dead_mask(lo, hi)
            out.append(np.flatnonzero(ok) + lo)
        return np.concatenate(out)

    def matches_nothing_stored(self) -> bool:
        """Does no stored message match (per the per-subject counts)?"""
        m = self.sid_mask()
        if m is None:
            return False
        count = self.stream.storage.ensure_stats()[0]
        return not count[: len(m) - 1][m[:-1]].any()

    def count_matching(self, a: int) -> int:
        """How many live messages at or after ``a`` match (num_pending's basis)."""
        s = self.stream.storage
        h = s.header
        a = max(a, h.first_seq)
        if a > h.last_seq or not h.msgs:
            return 0
        if not self.filters:
            below = 0
            if a > h.first_seq:
                below = (a - h.first_seq) - int(s.dead_mask(h.first_seq, a - 1).sum())
            return h.msgs - below
        tail = h.last_seq - a + 1
        head = a - h.first_seq
        if tail <= head:
            return len(self.matching_live(a, h.last_seq))
        m = self.sid_mask()
        assert m is not None  # (filters given: checked above)
        count = s.ensure_stats()[0]
        total = int(count[: len(m) - 1][m[:-1]].sum()) if len(m) > 1 else 0
        return total - len(self.matching_live(h.first_seq, a - 1))


class ByteBudget:
    """A pull's max_bytes, counted as nats-server counts it: subject, header block,
    payload and the ack reply subject of each delivery; what does not fit is not
    delivered."""

    def __init__(self, stream, consumer_name: str, max_bytes: int, num_pending: int) -> None:
        self.stream = stream
        self.left = max_bytes
        self.pending_count = num_pending
        self.prefix = len(f"$JS.ACK.{stream.name}.{consumer_name}.")

    def _size(self, stream_seq: int, consumer_seq: int, delivered: int, pending: int) -> int:
        e = self.stream.storage.entries(stream_seq, stream_seq)[0]
        subject = self.stream.storage.subjects[int(e["sid"])]
        reply = self.prefix + len(f"{delivered}.{stream_seq}.{consumer_seq}.{int(e['ts'])}.{pending}")
        return len(subject.encode()) + int(e["hlen"]) + int(e["dlen"]) + reply

    def take(self, stream_seq: int, consumer_seq: int, delivered: int) -> bool:
        size = self._size(stream_seq, consumer_seq, delivered, self.pending_count)
        if size > self.left:
            self.left = 0
            return False
        self.left -= size
        return True

    def count_new(self, seqs: list[int], consumer_seq: int) -> int:
        """How many of these new messages fit, in order."""
        for i, q in enumerate(seqs):
            size = self._size(q, consumer_seq + i, 1, self.pending_count - i - 1)
            if size > self.left:
                self.left = 0
                return i
            self.left -= size
        return len(seqs)
