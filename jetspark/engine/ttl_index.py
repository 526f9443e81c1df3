"""Which stored messages carry a per-message TTL, read back from the stream itself.

A message's TTL is in its own header (``Nats-TTL``) and its time in its index entry, so
nothing else is written: each process reads the headers of the messages appended since it
last looked (``catch_up``), and rebuilds the whole index from the stream on open or after
its caches were dropped.  A publish in this process notes its own message (``note``), so
its header is not read back.  What a crash leaves is therefore what the stream holds: an
acknowledged message and its deadline survive it (tests/engine/test_msg_ttl_durability.py).

Only records that pass their checksums are read (verify.py): a damaged record is never
scheduled, and stays for reads to report.

Depends on the block index (block_index.py), verify.py and msg_ttl.py, not on the storage
façade, which keeps one ``TTLIndex`` among its caches (storage.py).
"""

from __future__ import annotations

import heapq
import logging
from typing import Optional

import numpy as np

from jetspark.engine import msg_ttl
from jetspark.engine.block_index import BlockIndex
from jetspark.engine.verify import bad_records, verify
from jetspark.errors import CorruptStoreError

log = logging.getLogger("jetspark")

_NEEDLE = ("\r\n" + msg_ttl.TTL + ":").encode()
_CHUNK = 1 << 16  # sequences read at a time when catching up
_PRUNE_MIN = 1024  # entries before the first pruning


class TTLIndex:
    """The deadlines of the messages with a TTL (a heap of (deadline ns, seq)), the messages
    that never expire (``never``, which max_age leaves), and ``scanned``: every sequence up to
    it has been read.  Entries of messages removed since are dropped when they come up."""

    def __init__(self) -> None:
        self.heap: list[tuple[int, int]] = []
        self.never: set[int] = set()
        self.scanned = 0
        # The first sequence max_age may still remove: below it, every message is removed or
        # never expires (expiry.py moves it; appends only come after it).
        self.age_cursor = 0
        self.refused: set[int] = set()  # messages whose delete marker the stream refused (logged once)
        self._prune_at = _PRUNE_MIN

    def note(self, seq: int, ts: int, ttl: int) -> None:
        """A message stored at ``seq`` with ``ttl`` (msg_ttl.parse_ttl's value; 0: none)."""
        if ttl > 0:
            heapq.heappush(self.heap, (msg_ttl.deadline(ts, ttl), seq))
        elif ttl == msg_ttl.NEVER:
            self.never.add(seq)

    def noted(self, seq: int, ts: int, ttl: int) -> None:
        """This process stored ``seq`` (the next after everything read): noted without reading
        it back.  Otherwise catch_up reads it with the rest."""
        if seq == self.scanned + 1:
            self.note(seq, ts, ttl)
            self.scanned = seq

    def next_deadline(self) -> Optional[int]:
        return self.heap[0][0] if self.heap else None

    def pop_due(self, now: int) -> list[tuple[int, int]]:
        """The (deadline, seq) entries due at ``now``, earliest first, taken off the heap."""
        out = []
        while self.heap and self.heap[0][0] <= now:
            out.append(heapq.heappop(self.heap))
        return out

    def catch_up(self, ix: BlockIndex) -> None:
        """Read the TTLs of the messages stored since the last look."""
        h = ix.header
        if len(self.heap) + len(self.never) > self._prune_at:
            self._prune(ix)
        if self.scanned >= h.last_seq:
            return  # (every operation asks: nothing new is the common answer)
        lo, hi = max(self.scanned + 1, h.first_seq), h.last_seq
        for a in range(lo, hi + 1, _CHUNK):
            b = min(a + _CHUNK - 1, hi)
            for blk, x, y in ix.block_spans(a, b):
                self._read(ix, blk, x, y)
        self.scanned = hi

    def _prune(self, ix: BlockIndex) -> None:
        """Drop the entries of messages removed before their time (limits, purges, deletes), so
        the index follows what the stream holds, not its history."""
        self.heap = [(d, q) for d, q in self.heap if ix.is_live(q)]
        heapq.heapify(self.heap)
        self.never = {q for q in self.never if ix.is_live(q)}
        self._prune_at = max(_PRUNE_MIN, 2 * (len(self.heap) + len(self.never)))

    def _read(self, ix: BlockIndex, blk, a: int, b: int) -> None:
        e = ix.entries(a, b)
        hlen = e["hlen"]
        if not hlen.any():
            return
        h0 = int(e["hoff"][0])
        raw = blk.read_hdrs(h0, int(e["hoff"][-1]) + int(e["hlen"][-1]) - h0)
        if _NEEDLE not in raw:
            return
        live = ~ix.removed.mask(a, b)
        bad: np.ndarray = np.zeros(0, dtype=np.int64)
        try:
            verify(ix, blk, a, b)
        except CorruptStoreError:
            bad = bad_records(ix, a, b)
            log.warning("%s: %d damaged records are not read for their TTL (seq %d..%d)", blk.path, len(bad), a, b)
        offs = (e["hoff"] - h0).tolist()
        for j in np.flatnonzero(hlen.astype(bool) & live).tolist():
            block = raw[offs[j] : offs[j] + int(hlen[j])]
            if _NEEDLE not in block or (len(bad) and a + j in bad):
                continue
            ttl = msg_ttl.header_ttl(block)
            if ttl:
                self.note(a + j, int(e["ts"][j]), ttl)
