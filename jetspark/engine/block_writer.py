"""Appends and removals on a stream's blocks, with the counts they move kept inline.

The layer between the block index (block_index.py) and the storage façade
(storage.py): it writes records at the tail block (rolling to a new block
when the tail is full, or early when most of it is already removed),
removes sequences (moving ``first_seq``, or recording ranges in the removed
set), and keeps the header's counts and the per-subject stats
(subject_stats.py) in step, inline on the hot paths: one publish, or one
discard-old removal, touches the header, the tail block, the subject table,
the removed set and the stats without a call per part.

It runs under the stream's lock, which its owner takes and commits; it
never takes the lock, commits, nor reads other processes' changes.  The
per-subject stats are the owner's, passed in built.
"""

from __future__ import annotations

import os
import struct
import zlib

import numpy as np

from jetspark.engine import diskio, subject_stats
from jetspark.engine.block_index import BlockIndex
from jetspark.engine.blocks import CHECK_EVERY, Block
from jetspark.engine.records import ENTRY, ENTRY_SIZE, IDX_DTYPE, SID_NONE, record_crcs, rotl1, runs_of, seq_mix
from jetspark.engine.subject_stats import Stats
from jetspark.engine.subject_table import SubjectTable
from jetspark.errors import CorruptStoreError

BLOCK_MAX_MSGS = 1 << 20
BLOCK_MAX_BYTES = 64 << 20
# A tail block that is at least half removed is closed at this size (index + payloads + headers).
ROLL_MIN_BYTES = 4 << 20

_ENTRY_SIZES = struct.Struct("<III")  # dlen, hlen, sid of an index entry (records.ENTRY)
_ENTRY_SIZES_OFF = 24


class BlockWriter:
    """Writes records into, and removes sequences from, one stream's block index."""

    def __init__(self, index: BlockIndex, subject_table: SubjectTable, *, memory: bool) -> None:
        self.index = index
        self.subject_table = subject_table
        self.memory = memory
        self.roll_at = 0  # the sequence at which tail_block looks again whether to close the tail early
        self._stats_views: tuple | None = None  # (stats, memoryviews of its arrays), see remove_first

    def reset(self) -> None:
        """Forget what was derived from the stats and the tail (the owner reloaded)."""
        self.roll_at = 0
        self._stats_views = None

    def tail_block(self, seq: int, dlen: int, hlen: int) -> Block:
        """The block ``seq`` is appended to: the tail block, or a new one (the tail full, or closed early)."""
        ix = self.index
        if ix.blocks:
            b = ix.blocks[-1]
            if (
                b.first + b.count == seq
                and b.count < BLOCK_MAX_MSGS
                and (b.dlen + dlen <= BLOCK_MAX_BYTES or b.count == 0)
            ):
                # Closed early when at least half of it is already removed (the stream keeps
                # less than half a block): the block is then dropped as soon as the few
                # messages it still holds go, instead of after a whole block more.  Looked
                # at once per 1,024 sequences, so the common case costs one comparison.
                if seq < self.roll_at:
                    return b
                if (
                    2 * (self.index.header.first_seq - b.first) < b.count
                    or b.count * ENTRY_SIZE + b.dlen + b.hlen < ROLL_MIN_BYTES
                ):
                    self.roll_at = seq + 1024
                    return b
            if b.count % CHECK_EVERY and b.sfd >= 0:
                ix.checkpoint(b, (b.count - 1) // CHECK_EVERY)  # seal its last, partial interval
        h = ix.header
        h.tail_dcrc = h.tail_hcrc = h.tail_icrc = 0
        path = self.index.dir / "blk" / f"{seq:016x}"
        with diskio.io_errors(f"{path}.idx", "creating a block"):
            b = Block(path, seq, create=True)
            os.ftruncate(b.ifd, 0)
            os.ftruncate(b.dfd, 0)
            os.ftruncate(b.hfd, 0)
        ix.blocks.append(b)
        ix.block_firsts.append(seq)
        return b

    def append(self, sid: int, hdr: bytes, data: bytes, ts: int, stats: Stats) -> int:
        """Store one message at last_seq + 1; returns its sequence."""
        h = self.index.header
        seq = h.last_seq + 1
        blk = self.tail_block(seq, len(data), len(hdr))
        if blk.imm is None:
            blk.map_for_writing(BLOCK_MAX_MSGS * ENTRY_SIZE, BLOCK_MAX_BYTES)
        imm, dmm = blk.imm, blk.dmm
        assert imm is not None and dmm is not None  # mapped just above
        doff, hoff = blk.dlen, blk.hlen
        n = len(data)
        ioff = (seq - blk.first) * ENTRY_SIZE
        if ioff + ENTRY_SIZE > blk.ialloc:
            blk.reserve_index(ioff + ENTRY_SIZE)
        if n:
            if doff + n <= blk.dcap:
                if doff + n > blk.dalloc:
                    blk.reserve_data(doff + n)
                dmm[doff : doff + n] = data
            else:
                diskio.pwrite(blk.dfd, data, doff, f"{blk.path}.dat")  # a message larger than the block's capacity
        if hdr:
            diskio.pwrite(blk.hfd, hdr, hoff, f"{blk.path}.hdr")
        crc = zlib.crc32(data) ^ (rotl1(zlib.crc32(hdr)) if hdr else 0) ^ seq_mix(seq, ts, sid)
        entry = ENTRY.pack(ts, doff, hoff, n, len(hdr), sid, crc)
        imm[ioff : ioff + ENTRY_SIZE] = entry
        h.tail_dcrc = zlib.crc32(data, h.tail_dcrc)
        if hdr:
            h.tail_hcrc = zlib.crc32(hdr, h.tail_hcrc)
        h.tail_icrc = zlib.crc32(entry, h.tail_icrc)
        blk.count += 1
        if not blk.count % CHECK_EVERY and blk.sfd >= 0:
            self.index.checkpoint(blk, blk.count // CHECK_EVERY - 1)
        blk.dlen += len(data)
        blk.hlen += len(hdr)
        if h.msgs == 0:
            h.first_seq = seq
            self.index.removed.rebase(seq)
        h.last_seq = seq
        h.last_ts = ts
        h.msgs += 1
        slen = self.subject_table.len_list[sid]
        if self.memory:
            h.bytes += slen + len(hdr) + len(data) + 16
        else:
            h.bytes += 30 + slen + len(data) + (len(hdr) + 4 if hdr else 0)
        h.held = 1
        count, first, last = stats
        if count[sid] == 0:
            h.num_subjects += 1
            first[sid] = seq
        count[sid] += 1
        last[sid] = seq
        return seq

    def append_many(
        self,
        sids: np.ndarray,
        data: bytes,
        data_offsets: np.ndarray,
        hdr: bytes,
        hdr_offsets: np.ndarray,
        ts: int,
        hdr_crcs,
        stats: Stats,
    ) -> int:
        """Store a run of messages (already validated) in one write per file; returns the first sequence."""
        h = self.index.header
        n = len(sids)
        first = h.last_seq + 1
        dlens = np.diff(data_offsets).astype(np.int64)
        hlens = np.diff(hdr_offsets).astype(np.int64)
        pos = 0
        seq = first
        while pos < n:
            blk = self.tail_block(seq, int(dlens[pos]), int(hlens[pos]))
            room = BLOCK_MAX_MSGS - blk.count
            # How many fit in this block's byte budget.
            cum = np.cumsum(dlens[pos : pos + room])
            fit = int(np.searchsorted(cum, BLOCK_MAX_BYTES - blk.dlen, side="right")) or 1
            k = min(room, fit, n - pos)
            d0, d1 = int(data_offsets[pos]), int(data_offsets[pos + k])
            h0, h1 = int(hdr_offsets[pos]), int(hdr_offsets[pos + k])
            e = np.zeros(k, dtype=IDX_DTYPE)
            e["ts"] = ts
            e["doff"] = blk.dlen + (data_offsets[pos : pos + k] - d0)
            e["hoff"] = blk.hlen + (hdr_offsets[pos : pos + k] - h0)
            e["dlen"] = dlens[pos : pos + k]
            e["hlen"] = hlens[pos : pos + k]
            e["sid"] = sids[pos : pos + k]
            mv = memoryview(data)
            hv = memoryview(hdr)
            e["crc"] = record_crcs(
                np.arange(seq, seq + k, dtype=np.uint64),
                e["ts"],
                e["sid"],
                hdr,
                hdr_offsets[pos : pos + k + 1],
                data,
                data_offsets[pos : pos + k + 1],
                None if hdr_crcs is None else hdr_crcs[pos : pos + k],
            )
            if d1 > d0:
                diskio.pwrite(blk.dfd, mv[d0:d1], blk.dlen, f"{blk.path}.dat")
            if h1 > h0:
                diskio.pwrite(blk.hfd, hv[h0:h1], blk.hlen, f"{blk.path}.hdr")
            eb = e.tobytes()
            diskio.pwrite(blk.ifd, eb, (seq - blk.first) * ENTRY_SIZE, f"{blk.path}.idx")
            self.index.chain(blk, k, mv, data_offsets[pos : pos + k + 1], hv, hdr_offsets[pos : pos + k + 1], eb)
            blk.dlen += d1 - d0
            blk.hlen += h1 - h0
            pos += k
            seq += k
        if h.msgs == 0:
            h.first_seq = first
            self.index.removed.rebase(first)
        h.last_seq = first + n - 1
        h.last_ts = ts
        h.msgs += n
        slen = self.subject_table.lens[sids.astype(np.int64)]
        if self.memory:
            h.bytes += int((slen + hlens + dlens + 16).sum())
        else:
            h.bytes += int((30 + slen + dlens + np.where(hlens > 0, hlens + 4, 0)).sum())
        h.held = 1
        before = int((stats[0] > 0).sum())
        subject_stats.add(stats, sids.astype(np.uint32), np.arange(first, first + n, dtype=np.int64))
        h.num_subjects += int((stats[0] > 0).sum()) - before
        return first

    def append_skip(self, ts: int) -> int:
        """Consume a sequence without storing anything (interest retention, no interest)."""
        h = self.index.header
        seq = h.last_seq + 1
        blk = self.tail_block(seq, 0, 0)
        entry = ENTRY.pack(ts, blk.dlen, blk.hlen, 0, 0, SID_NONE, 0)
        diskio.pwrite(blk.ifd, entry, (seq - blk.first) * ENTRY_SIZE, f"{blk.path}.idx")
        self.index.chain(blk, 1, b"", np.zeros(2, np.int64), b"", np.zeros(2, np.int64), entry)
        h.last_seq = seq
        h.last_ts = ts
        h.held = 1
        if h.msgs == 0:
            h.first_seq = seq + 1
            self.index.removed.rebase(seq + 1)
        else:
            self.index.removed.write([(seq, seq)], self.index.header)
            self.index.removed.apply([(seq, seq)])
            self.index.removed.compact(self.index.header)
        return seq

    def remove(self, seqs: np.ndarray, stats: Stats) -> int:
        """Remove live sequences (sorted, unique); returns how many were removed."""
        h = self.index.header
        if not len(seqs):
            return 0
        seqs = seqs[(seqs >= h.first_seq) & (seqs <= h.last_seq)]
        if not len(seqs):
            return 0
        seqs = seqs[~self.index.removed.mask(int(seqs[0]), int(seqs[-1]))[seqs - seqs[0]]]
        if not len(seqs):
            return 0
        ix = self.index
        e = np.concatenate([ix.entries(int(a), int(b)) for a, b in runs_of(seqs)])
        stored = e["sid"] != SID_NONE
        removed_bytes = int(ix.sizes(e[stored]).sum())
        count_before = int((stats[0] > 0).sum())
        subject_stats.remove_seqs(ix, stats, seqs)
        h.num_subjects += int((stats[0] > 0).sum()) - count_before
        n = int(stored.sum())
        h.msgs -= n
        h.bytes -= removed_bytes
        first = int(seqs[0])
        head = first == h.first_seq and int(seqs[-1]) - first + 1 - len(seqs) == int(
            self.index.removed.mask(first, int(seqs[-1])).sum()
        )
        if not head:
            runs = runs_of(seqs)
            self.index.removed.write(runs, self.index.header)
            self.index.removed.apply(runs)
        self._advance_first(int(seqs[-1]) + 1 if head else h.first_seq)
        if not head:
            self.index.removed.compact(self.index.header)
        return n

    def remove_first(self, stats: Stats) -> int:
        """Remove the first live message: remove() for the discard-old steady state (one
        message in, the oldest out) without building arrays.  Returns 1, or 0 if empty."""
        ix = self.index
        h = ix.header
        if h.msgs <= 0:
            return 0
        views = self._stats_views
        if views is None or views[0] is not stats:
            # Memoryviews of the stats arrays: a scalar read or store through them costs a
            # fraction of NumPy's, which is most of this function's time otherwise.
            views = self._stats_views = (stats, *map(memoryview, stats))  # type: ignore[arg-type]  # (arrays are buffers)
        _, count, first, last = views
        seq = h.first_seq
        bf = ix.block_firsts
        blk = ix.blocks[0] if len(bf) == 1 or bf[1] > seq else ix.blocks[ix.block_index(seq)]
        off = (seq - blk.first) * ENTRY_SIZE + _ENTRY_SIZES_OFF
        if blk.imm is not None:
            dlen, hlen, sid = _ENTRY_SIZES.unpack_from(blk.imm, off)  # the tail block this process writes: mapped
        else:
            raw = os.pread(blk.ifd, _ENTRY_SIZES.size, off)
            if len(raw) != _ENTRY_SIZES.size:
                raise CorruptStoreError(
                    f"{blk.path}.idx: the index entry of sequence {seq} is missing (truncated)", f"{blk.path}.idx"
                )
            dlen, hlen, sid = _ENTRY_SIZES.unpack(raw)
        if sid == SID_NONE:  # not a stored message (first_seq always is one; keep remove()'s rules)
            return self.remove(np.array([seq], dtype=np.int64), stats)
        n = count[sid] - 1
        count[sid] = n
        if n == 0:
            h.num_subjects -= 1
        # As subject_stats.remove_seqs: a removed first or last is looked up again when asked for.
        if first[sid] == seq:
            first[sid] = 0
        if last[sid] == seq:
            last[sid] = 0
        h.msgs -= 1
        slen = self.subject_table.len_list[sid]
        h.bytes -= (
            (slen + hlen + dlen + 16) if self.memory else (30 + slen + dlen + (hlen + 4 if hlen else 0))
        )  # msg_size
        # _advance_first(seq + 1), with no removed sequences ahead (no bitmap) inline.
        if ix.removed.bitmap.size or not h.msgs:
            self._advance_first(seq + 1)
        else:
            h.first_seq = ix.removed.base = seq + 1
            if len(bf) > 1 and bf[1] <= seq + 1:
                ix.drop_old_blocks()
        return 1

    def _advance_first(self, start: int) -> None:
        h = self.index.header
        old = h.first_seq
        f = h.first_seq = self.index.next_live(start) if h.msgs > 0 else h.last_seq + 1
        if f > old:
            self.index.removed.rebase(f)
            bf = self.index.block_firsts
            if (len(bf) > 1 and bf[1] <= f) or h.msgs == 0:  # else no block is wholly below f
                self.index.drop_old_blocks()

    def set_floor(self, seq: int) -> None:
        """Purge up to seq - 1 when seq is past the end: the next publish gets seq (docs/semantics.md §4)."""
        h = self.index.header
        h.first_seq = seq
        h.last_seq = seq - 1
        h.held = 1
        self.index.removed.rebase(seq)
        self.index.drop_old_blocks()
