"""The block index: which block holds a sequence, its index entry, its size, and whether it is live.

The lowest layer of a stream's storage that knows sequences.  It holds this
process's view of the committed stream: the header (first and last sequence,
counts, the open interval's checksums), the open blocks in sequence order,
the removed set (which sequences between first and last are gone) and the
subject table (what a subject id's name and length are).  On top of it, and
depending on it alone:

- verify.py checks records against their checksums before they are served,
  and reads them;
- subject_stats.py counts live messages per subject;
- recovery.py cuts torn tails, drops damage and counts again;
- storage.py (``StreamStorage``) composes these with the cross-process lock,
  the commit, catching up with other processes and the journals.

This layer reads and writes block files only; it never takes the stream's
lock nor commits: its owner does both around it.
"""

from __future__ import annotations

import os
import zlib
from bisect import bisect_right
from pathlib import Path
from typing import Iterator

import numpy as np

from jetspark.engine.blocks import CHECK_EVERY, Block
from jetspark.engine.records import ENTRY, ENTRY_SIZE, IDX_DTYPE
from jetspark.engine.removed import RemovedSet
from jetspark.engine.state_header import StreamHeader
from jetspark.engine.subject_table import SubjectTable
from jetspark.errors import CorruptStoreError


class BlockIndex:
    """The blocks of one stream as this process last read them, and lookups by sequence.

    ``header`` is the committed header (plus the change under way while the
    owner holds the lock); ``blocks`` the open blocks, ascending, with their
    first sequences in ``block_firsts``; ``pending_unlink`` the blocks the
    change under way dropped, unlinked by the owner after its commit.
    """

    def __init__(self, directory: Path, subject_table: SubjectTable, removed: RemovedSet, *, memory: bool) -> None:
        self.dir = directory
        self.subject_table = subject_table
        self.removed = removed
        self.memory = memory
        self.header = StreamHeader(commit=-1)
        self.blocks: list[Block] = []
        self.block_firsts: list[int] = []
        self.pending_unlink: list[Block] = []

    def reset(self, removed: RemovedSet) -> None:
        """Forget everything read (the owner reloads from the committed header)."""
        self.header = StreamHeader(commit=-1)
        self.removed = removed
        for b in self.blocks:
            b.close()
        self.blocks = []
        self.block_firsts = []

    # ------------------------------------------------------------------ liveness

    def dead_mask(self, a: int, b: int) -> np.ndarray:
        """True where a sequence in a..b (all >= first_seq) was removed."""
        return self.removed.mask(a, b)

    def is_live(self, seq: int) -> bool:
        if seq < self.header.first_seq or seq > self.header.last_seq:
            return False
        removed = self.removed  # removed.is_removed, inline: this runs per delivery
        i = seq - removed.base
        return not (0 <= i < len(removed.bitmap) and removed.bitmap[i])

    def next_live(self, seq: int) -> int:
        """The first live sequence >= seq, or last_seq + 1."""
        return self.removed.first_kept(max(seq, self.header.first_seq), self.header.last_seq)

    # ------------------------------------------------------------------ entries and sizes

    def block_index(self, seq: int) -> int:
        """The position in ``blocks`` of the block holding ``seq``."""
        i = bisect_right(self.block_firsts, seq) - 1
        if i < 0:
            raise CorruptStoreError(
                f"{self.dir / 'blk'}: no block file holds sequence {seq} (removed?)", self.dir / "blk"
            )
        return i

    def entries(self, a: int, b: int) -> np.ndarray:
        """The index entries of sequences a..b (committed, >= first_seq) as one array."""
        if b < a:
            return np.zeros(0, dtype=IDX_DTYPE)
        parts = []
        for blk, seq, end in self.block_spans(a, b):
            n = end - seq + 1
            raw = os.pread(blk.ifd, n * ENTRY_SIZE, (seq - blk.first) * ENTRY_SIZE)
            if len(raw) != n * ENTRY_SIZE:
                raise CorruptStoreError(
                    f"{blk.path}.idx: the index entries of sequences {seq}..{end} are missing (truncated)",
                    f"{blk.path}.idx",
                )
            parts.append(np.frombuffer(raw, dtype=IDX_DTYPE))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def block_spans(self, a: int, b: int) -> Iterator[tuple[Block, int, int]]:
        """(block, first, last) pieces of a..b, one per block."""
        seq = a
        while seq <= b:
            i = self.block_index(seq)
            blk = self.blocks[i]
            end = b if i + 1 >= len(self.blocks) else min(b, self.blocks[i + 1].first - 1)
            yield blk, seq, end
            seq = end + 1

    def block_count(self, blk: Block) -> int:
        """Committed records of a block in this process's view."""
        i = bisect_right(self.block_firsts, blk.first) - 1
        nxt = self.blocks[i + 1].first if i + 1 < len(self.blocks) else self.header.last_seq + 1
        return nxt - blk.first

    def sizes(self, e: np.ndarray) -> np.ndarray:
        """Per-message byte accounting as the server counts it (docs/semantics.md §3.1)."""
        slen = self.subject_table.lens[e["sid"].astype(np.int64)]
        dlen = e["dlen"].astype(np.int64)
        hlen = e["hlen"].astype(np.int64)
        if self.memory:
            return slen + hlen + dlen + 16
        return 30 + slen + dlen + np.where(hlen > 0, hlen + 4, 0)

    def msg_size(self, subject_len: int, hlen: int, dlen: int) -> int:
        if self.memory:
            return subject_len + hlen + dlen + 16
        return 30 + subject_len + dlen + (hlen + 4 if hlen else 0)

    # ------------------------------------------------------------------ the block list

    def block_files(self) -> list[int]:
        """The first sequences of the block files on disk, ascending."""
        return sorted(int(p.name[:-4], 16) for p in (self.dir / "blk").glob("*.idx"))

    def orphans(self) -> list[Path]:
        """Block files a crash left behind: wholly below first_seq, or past last_seq + 1."""
        firsts = self.block_files()
        h = self.header
        dead = []
        for i, first in enumerate(firsts):
            end = firsts[i + 1] if i + 1 < len(firsts) else h.last_seq + 1
            if end <= h.first_seq or first > h.last_seq + 1:
                dead.append(first)
        return [self.dir / "blk" / f"{f:016x}{ext}" for f in dead for ext in (".idx", ".dat", ".hdr", ".sum")]

    def rescan(self) -> None:
        """Open blocks other processes created; blocks they removed stay open until pruned."""
        known = {b.first: b for b in self.blocks}
        for first in self.block_files():
            # A block past last_seq + 1 belongs to a writer that died before committing it.
            if first <= self.header.last_seq + 1 and first not in known:
                try:
                    known[first] = Block(self.dir / "blk" / f"{first:016x}", first)
                except FileNotFoundError:
                    continue  # unlinked while we listed
        self.blocks = [known[f] for f in sorted(known)]
        self.block_firsts = [b.first for b in self.blocks]

    def prune(self) -> None:
        """Close blocks wholly below first_seq (another process has unlinked them).

        That includes the last block once the stream is empty: appending to it
        would write into a file nobody else can see any more.
        """
        f = self.header.first_seq
        while self.blocks:
            end = self.blocks[1].first if len(self.blocks) > 1 else self.header.last_seq + 1
            if end > f:
                break
            self.blocks.pop(0).close()
            self.block_firsts.pop(0)

    def drop_old_blocks(self) -> None:
        """Blocks wholly below first_seq go to ``pending_unlink`` (unlinked after the commit)."""
        f = self.header.first_seq
        while self.blocks:
            b = self.blocks[0]
            end = self.blocks[1].first if len(self.blocks) > 1 else b.first + b.count
            if end > f:
                break
            self.pending_unlink.append(self.blocks.pop(0))
            self.block_firsts.pop(0)

    def cut_blocks_after(self, last: int) -> None:
        """Drop the blocks that start past ``last`` + 1 (a cut tail); the new tail's count is read again."""
        for b in self.blocks:
            if b.first > last + 1:
                self.pending_unlink.append(b)
        self.blocks = [b for b in self.blocks if b.first <= last + 1]
        self.block_firsts = [b.first for b in self.blocks]
        if self.blocks:
            self.blocks[-1].count = -1  # unknown: sync_tail reads it from the index
        self.sync_tail()

    def sync_tail(self) -> None:
        """Learn the tail block's committed count and lengths (another process may have appended)."""
        if not self.blocks:
            return
        b = self.blocks[-1]
        last = self.header.last_seq
        n = last - b.first + 1
        if b.verified and b.verified[-1][1] > last:
            # The tail was cut (recovery.truncate_after, here or in another process): what
            # is written there next has not been checked.
            b.verified = [(lo, min(hi, last)) for lo, hi in b.verified if lo <= last]
        if n <= 0:
            b.count, b.dlen, b.hlen = 0, 0, 0
            return
        if n == b.count:
            return
        have = os.fstat(b.ifd).st_size // ENTRY_SIZE
        if have < n:
            # The index lost its tail (a torn file): describe what is there, so the open-time
            # tail check finds the gap and cuts it off; reads past it raise CorruptStoreError.
            n = have
            if n <= 0:
                b.count, b.dlen, b.hlen = 0, 0, 0
                return
        t = ENTRY.unpack(os.pread(b.ifd, ENTRY_SIZE, (n - 1) * ENTRY_SIZE))
        b.count = n
        b.dlen = t[1] + t[3]
        b.hlen = t[2] + t[4]

    # ------------------------------------- the tail block's checksums (writers, under the owner's lock)

    def checkpoint(self, blk: Block, k: int) -> None:
        """Write interval k's checksums (the header's open-interval ones) and start the next interval."""
        h = self.header
        blk.checkpoint(k, (h.tail_dcrc, h.tail_hcrc, h.tail_icrc))
        h.tail_dcrc = h.tail_hcrc = h.tail_icrc = 0

    def chain(
        self, blk: Block, k: int, data, data_offsets: np.ndarray, hdr, hdr_offsets: np.ndarray, entries: bytes
    ) -> None:
        """Account k records just written at the block's end (blk.count not yet counting them)
        in the open interval's checksums, writing a checkpoint at each interval's end; bumps
        blk.count.  ``data_offsets``/``hdr_offsets``: k + 1 offsets into ``data``/``hdr``."""
        h = self.header
        d, hd = data_offsets.tolist(), hdr_offsets.tolist()
        i = 0
        while i < k:
            j = min(k, i + CHECK_EVERY - blk.count % CHECK_EVERY)
            h.tail_dcrc = zlib.crc32(data[d[i] : d[j]], h.tail_dcrc)
            if hd[j] > hd[i]:
                h.tail_hcrc = zlib.crc32(hdr[hd[i] : hd[j]], h.tail_hcrc)
            h.tail_icrc = zlib.crc32(entries[i * ENTRY_SIZE : j * ENTRY_SIZE], h.tail_icrc)
            blk.count += j - i
            if not blk.count % CHECK_EVERY and blk.sfd >= 0:
                self.checkpoint(blk, blk.count // CHECK_EVERY - 1)
            i = j
