"""A stream's consumers, and the retention they drive (JETSTREAM.md §3.3, §3.4).

Interest retention: a message is stored only if some consumer's filter
matches it, and removed once no matching consumer needs it any more.
Work-queue retention: stored regardless, removed once its consumer acked or
termed it.  Limits retention ignores consumers.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Iterable

import numpy as np

from jetspark.api import ConsumerConfig, DeliverPolicy, RetentionPolicy, datetime_to_ns
from jetspark.engine.consumer import (
    LAST_PER_SUBJECT,
    SNAPSHOT,
    Consumer,
    config_to_json,
    remove_consumer_dir,
)
from jetspark.engine.records import SID_NONE


class ConsumerSet:
    """This process's view of one stream's consumers; every method runs under the stream lock."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.by_name: dict[str, Consumer] = {}
        self._gen = -1

    @property
    def dir(self) -> Path:
        return self.stream.storage.dir / "cons"

    def close(self) -> None:
        for c in self.by_name.values():
            c.close()
        self.by_name.clear()
        self._gen = -1

    def sync(self) -> None:
        """Reload the consumer list when another process changed it; catch up every log."""
        gen = self.stream.storage.h.cons_gen
        if gen != self._gen:
            self._reload(gen)
        for c in self.by_name.values():
            if not c.sync():
                # A log was rewritten or removed by a process that died before committing
                # the cons_gen bump: this process's file is stale, reopen them all.
                self._reload(gen)
                break
        released = [a for c in self.by_name.values() for a in c.replayed]
        for c in self.by_name.values():
            c.replayed = []
        if released and self.stream.config.retention != RetentionPolicy.LIMITS:
            # Releasing again what another process's acks released is harmless, and
            # finishes its work if it died before committing the removal.
            self.release(np.concatenate(released))

    def _reload(self, gen: int) -> None:
        self.close()
        if self.dir.is_dir():
            for home in sorted(self.dir.iterdir()):
                if (home / "config.json").exists():
                    try:
                        c = Consumer(self.stream, home)
                    except FileNotFoundError:
                        continue
                    self.by_name[c.name] = c
        self._gen = gen
        for c in self.by_name.values():
            c.replayed = []
        if self.by_name and self.stream.config.retention != RetentionPolicy.LIMITS:
            # Fresh from disk: sweep what every consumer has released (a process may have
            # died between a consumer's ack record and the stream's removal).
            s = self.stream.storage
            top = min(max(c.next_sseq for c in self.by_name.values()) - 1, s.h.last_seq)
            if s.h.msgs and top >= s.h.first_seq:
                seqs = np.arange(s.h.first_seq, top + 1, dtype=np.int64)
                self.release(seqs[~s.dead_mask(s.h.first_seq, top)])

    def _bump(self) -> None:
        self.stream.storage.h.cons_gen += 1
        self._gen = self.stream.storage.h.cons_gen

    # ------------------------------------------------------------------ lifecycle

    def create(self, config: ConsumerConfig, now: int, name: str) -> Consumer:
        """Create a consumer with the initial state its deliver policy gives (JETSTREAM.md §5.2)."""
        self.dir.mkdir(exist_ok=True)
        # The directory is the name, unless the name is too long for one (255 bytes).
        home = self.dir / (name if len(name.encode()) <= 255 else uuid.uuid5(uuid.NAMESPACE_URL, name).hex)
        if home.exists():
            remove_consumer_dir(home)
        tmp = self.dir / f".new-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        (tmp / "config.json").write_text(json.dumps({"config": config_to_json(config), "created": now, "name": name}))
        (tmp / "log").touch()
        os.replace(tmp, home)
        c = Consumer(self.stream, home)
        start, lps = self._start(c, config)
        c.next_sseq = start
        c.asflr = start - 1
        c.last_active = now
        if lps:
            c.lps = lps
            c.write(LAST_PER_SUBJECT, [(q, 0, 0, -1) for q in lps])
        else:
            c.write(SNAPSHOT, [])
        self.by_name[name] = c
        self._bump()
        return c

    def _start(self, c: Consumer, config: ConsumerConfig) -> tuple[int, list[int]]:
        s = self.stream.storage
        h = s.h
        first = max(h.first_seq, 1)
        policy = config.deliver_policy
        if policy == DeliverPolicy.ALL:
            return first, []
        if policy == DeliverPolicy.NEW:
            return h.last_seq + 1, []
        if policy == DeliverPolicy.LAST:
            if not c.filters:
                return max(h.last_seq, first) if h.msgs else h.last_seq + 1, []
            last = max((self.stream.last_seq_for(f) for f in c.filters), default=0)
            return (last if last else first), []
        if policy == DeliverPolicy.BY_START_SEQUENCE:
            return max(int(config.opt_start_seq), first), []
        if policy == DeliverPolicy.BY_START_TIME:
            return max(self.stream.seq_at_time(datetime_to_ns(config.opt_start_time)), first), []
        if policy == DeliverPolicy.LAST_PER_SUBJECT:
            count = s.ensure_stats()[0]
            sids = np.flatnonzero(count > 0)
            m = c.sid_mask()
            lasts = sorted(s.subject_last(int(i)) for i in sids if m is None or m[i])
            if not lasts:
                return h.last_seq + 1, []
            return lasts[0], lasts
        return first, []

    def update(self, c: Consumer, config: ConsumerConfig) -> Consumer:
        meta = json.loads((c.home / "config.json").read_text())
        meta["config"] = config_to_json(config)
        tmp = c.home / "config.json.tmp"
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, c.home / "config.json")
        self._bump()
        self._gen = -1  # reload every consumer, this one with its new config
        self.sync()
        return self.by_name[c.name]

    def delete(self, name: str) -> None:
        c = self.by_name.pop(name)
        c.close()
        remove_consumer_dir(c.home)
        self._bump()
        if self.stream.config.retention == RetentionPolicy.INTEREST:
            if not self.by_name:
                # Deleting the last consumer purges an interest stream (JETSTREAM.md §3.3).
                s = self.stream.storage
                self.stream.remove_range(s.h.first_seq, s.h.last_seq)
            else:
                s = self.stream.storage
                # As nats-server: what follows its ack floor and no remaining consumer needs
                # goes, matched by it or by nobody (test_retention_update.py, test_deleting_*).
                self.release_range(c.asflr + 1, s.h.last_seq, unmatched=True)

    def expire_inactive(self, now: int) -> None:
        """Consumers with inactive_threshold go away once idle that long (checked lazily)."""
        for c in list(self.by_name.values()):
            thr = c.config.inactive_threshold
            if thr and now - max(c.last_active, c.created_ns) > thr * 1_000_000_000:
                self.delete(c.name)

    def became_interest(self) -> None:
        """The stream's retention was just updated to interest (from limits).

        As nats-server: with no consumer nothing holds interest and the stream is
        emptied; otherwise every consumer's acks count now, so a message some
        consumer acked and no matching consumer still needs goes, and a message no
        consumer matches stays (tests/conformance/test_retention_update.py).
        """
        s = self.stream.storage
        if not s.h.msgs:
            return
        if not self.by_name:
            self.stream.remove_range(s.h.first_seq, s.h.last_seq)
        else:
            self.release_range(s.h.first_seq, s.h.last_seq)

    def release_range(self, a: int, b: int, unmatched: bool = False) -> None:
        """``release`` every live sequence in a..b, a slice at a time (streams may be long)."""
        s = self.stream.storage
        step = 1 << 16
        for lo in range(max(a, s.h.first_seq), min(b, s.h.last_seq) + 1, step):
            hi = min(lo + step - 1, b, s.h.last_seq)
            seqs = np.arange(lo, hi + 1, dtype=np.int64)
            self.release(seqs[~s.dead_mask(lo, hi)], unmatched=unmatched)

    # ------------------------------------------------------------------ retention

    def interest(self, subject: str) -> bool:
        return any(c.matches(subject) for c in self.by_name.values())

    def release(self, seqs: Iterable[int] | np.ndarray, unmatched: bool = False) -> None:
        """Remove the given sequences from an interest or work-queue stream if nobody needs them.

        As on nats-server, a message goes when a consumer that matches it acks it: one no
        consumer matches stays (a work-queue stream holds such messages, and so does an
        interest stream that was limits before; an ack floor's range may span them),
        unless ``unmatched``: a consumer was deleted and took its interest along.
        """
        st = self.stream
        if st.config.retention == RetentionPolicy.LIMITS:
            return
        s = st.storage
        seqs = np.asarray(seqs if isinstance(seqs, np.ndarray) else list(seqs), dtype=np.int64)
        if not len(seqs):
            return
        if len(seqs) > 1 and not (seqs[1:] > seqs[:-1]).all():
            seqs = np.unique(seqs)
        seqs = seqs[(seqs >= s.h.first_seq) & (seqs <= s.h.last_seq)]
        if not len(seqs):
            return
        seqs = seqs[~s.dead_mask(int(seqs[0]), int(seqs[-1]))[seqs - seqs[0]]]
        if not len(seqs):
            return
        from jetspark.engine.records import _runs

        sids = np.concatenate([s.entries(a, b)["sid"] for a, b in _runs(seqs)])
        keep = sids == SID_NONE
        matched = np.zeros(len(seqs), dtype=bool)
        for c in self.by_name.values():
            m = c.match_sids(sids)
            matched |= m
            keep |= m & c.needs(seqs)
        if not unmatched:
            keep |= ~matched
        st.remove(seqs[~keep])

    def dropped(self, seqs: np.ndarray) -> None:
        """The stream removed these: pending deliveries leave as if termed."""
        for c in self.by_name.values():
            if c.pending:
                c.drop(seqs)
