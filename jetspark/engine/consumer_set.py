"""A stream's consumers, and the retention they drive (docs/semantics.md §3.3, §3.4).

Interest retention: a message is stored only if some consumer's filter
matches it, and removed once no matching consumer needs it any more.
Work-queue retention: stored regardless, removed once its consumer acked or
termed it.  Limits retention ignores consumers.

A consumer whose files are damaged (see consumer.py and metafile.py) is kept
aside in ``broken``: asking for it raises its CorruptStoreError, the others
keep working, and it still counts as a consumer of the stream.  Since nobody
can tell which messages it still needs, an interest or work-queue stream
removes nothing by retention while it has one (and an interest stream stores
every message); ``delete_consumer`` of the damaged consumer ends that.
Creating a consumer of its name is refused: its files are never replaced.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Iterable, Optional

import numpy as np

from jetspark.api import ConsumerConfig, DeliverPolicy, RetentionPolicy, datetime_to_ns
from jetspark.engine import diskio, metafile
from jetspark.engine.config import check_storable_name
from jetspark.engine.consumer import Consumer
from jetspark.engine.consumer_config import config_to_json
from jetspark.engine.records import SID_NONE, runs_of
from jetspark.err_codes import CONSUMER_NOT_FOUND, MAXIMUM_CONSUMERS_LIMIT
from jetspark.errors import CorruptStoreError, StoreError, StoreIOError, api_error

log = logging.getLogger("jetspark")


def dir_name(name: str) -> str:
    """A consumer's directory: its name, unless too long for one (255 bytes).  A name UTF-8
    cannot encode (a lone surrogate) names no consumer: add_consumer refuses it."""
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        raise api_error(CONSUMER_NOT_FOUND) from None
    return name if size <= 255 else uuid.uuid5(uuid.NAMESPACE_URL, name).hex


class ConsumerSet:
    """This process's view of one stream's consumers; every method runs under the stream lock."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.by_name: dict[str, Consumer] = {}
        self.broken: dict[str, CorruptStoreError] = {}  # directory name -> why it cannot be used
        self._gen = -1

    @property
    def dir(self) -> Path:
        return self.stream.storage.dir / "cons"

    @property
    def count(self) -> int:
        """Every consumer of the stream, the damaged ones included."""
        return len(self.by_name) + len(self.broken)

    def broken_error(self, name: str) -> Optional[CorruptStoreError]:
        """Why the consumer ``name`` cannot be used, if it is damaged."""
        return self.broken.get(dir_name(name)) if isinstance(name, str) and name else None

    def check_not_broken(self, name: Optional[str]) -> None:
        err = self.broken_error(name) if name else None
        if err is not None:
            raise err

    def close(self) -> None:
        for c in self.by_name.values():
            c.close()
        self.by_name.clear()
        self.broken.clear()
        self._gen = -1

    def sync(self) -> None:
        """Reload the consumer list when another process changed it; catch up every log."""
        gen = self.stream.storage.header.cons_gen
        if gen != self._gen:
            self._reload(gen)
        for c in list(self.by_name.values()):
            try:
                fresh = c.sync()
            except CorruptStoreError as exc:
                self._set_broken(c, exc)
                continue
            if not fresh:
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

    def _set_broken(self, c: Consumer, exc: CorruptStoreError) -> None:
        log.warning("consumer %r of stream %r is damaged and set aside: %s", c.name, self.stream.name, exc)
        c.close()
        self.by_name.pop(c.name, None)
        self.broken[c.home.name] = exc

    def _reload(self, gen: int) -> None:
        self.close()
        if self.dir.is_dir():
            for home in sorted(self.dir.iterdir()):
                if home.name.startswith("."):
                    continue  # a consumer being created or deleted (names have no '.')
                try:
                    c = Consumer(self.stream, home)
                except CorruptStoreError as exc:
                    if home.is_dir():
                        self.broken[home.name] = exc
                    continue
                except (FileNotFoundError, NotADirectoryError):
                    continue  # not a consumer directory
                self.by_name[c.name] = c
        self._gen = gen
        for c in self.by_name.values():
            c.replayed = []
        self._sweep()

    def _sweep(self, everything: bool = False) -> None:
        """Fresh from disk: remove what every consumer has released (a process may have died
        between a consumer's ack record and the stream's removal).  ``everything``: look past
        what the consumers were delivered too (after a consumer of unknown interest left)."""
        if not self.by_name or self.broken or self.stream.config.retention == RetentionPolicy.LIMITS:
            return
        s = self.stream.storage
        top = (
            s.header.last_seq
            if everything
            else min(max(c.next_stream_seq for c in self.by_name.values()) - 1, s.header.last_seq)
        )
        first = s.header.first_seq
        if s.header.msgs and top >= first:
            seqs = np.arange(first, top + 1, dtype=np.int64)[~s.dead_mask(first, top)]
            if self.stream.config.retention == RetentionPolicy.WORK_QUEUE:
                # A work-queue message leaves when a consumer matching it acks it: one that no
                # consumer matches was never acked, and stays.
                sids = s.entries(first, top)["sid"][seqs - first]
                matched = np.zeros(len(seqs), dtype=bool)
                for c in self.by_name.values():
                    matched |= c.filter.match_sids(sids)
                seqs = seqs[matched]
            # everything: a damaged consumer left, and what only it may have matched goes too.
            self.release(seqs, unmatched=everything)

    def _bump(self) -> None:
        self.stream.storage.header.cons_gen += 1
        self._gen = self.stream.storage.header.cons_gen

    # ------------------------------------------------------------------ lifecycle

    def create(self, config: ConsumerConfig, now: int, name: str) -> Consumer:
        """Create a consumer with the initial state its deliver policy gives (docs/semantics.md §5.2).

        Its directory is built aside (config, and a log holding its first record) and renamed
        into place whole, so a failure (StoreFullError, StoreIOError) leaves no consumer behind.
        """
        self.check_not_broken(name)
        if self.broken and self.stream.config.retention == RetentionPolicy.WORK_QUEUE:
            # Whether the new filter overlaps the damaged consumer's cannot be checked.
            raise next(iter(self.broken.values()))
        limit = self.stream.config.max_consumers
        if limit > 0 and self.count >= limit:
            raise api_error(MAXIMUM_CONSUMERS_LIMIT)
        check_storable_name(name, "consumer")
        home = self.dir / dir_name(name)
        if home.exists():
            # Not among the consumers, yet there: nothing may replace its files.
            raise CorruptStoreError(f"{home} exists but is not a usable consumer; it is left as it is", path=str(home))
        self._remove_leftovers()
        tmp = self.dir / f".new-{uuid.uuid4().hex[:8]}"
        c = None
        try:
            with diskio.io_errors(tmp, "creating the consumer"):
                self.dir.mkdir(exist_ok=True)
                tmp.mkdir()
                meta = {"config": config_to_json(config), "created": now, "name": name}
                metafile.save(tmp / "config.json", meta, fsync=self.stream.storage.fsync)
                c = Consumer(self.stream, tmp, fresh=True)
                start, lps = self._start(c, config)
                c.commit(c.plan_start(start, lps, now))
                os.replace(tmp, home)
        except BaseException as exc:
            if c is not None:
                c.close()
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, StoreError) and exc.path.startswith(str(tmp)):
                raise _renamed(exc, tmp, home) from exc
            raise
        c.home = home
        if self.stream.storage.fsync:
            metafile.fsync_dir(self.dir)
        self.by_name[name] = c
        self._bump()
        return c

    def _remove_leftovers(self) -> None:
        """Directories a crash left in cons/ mid-create or mid-delete (only ever made and
        removed under the stream lock, which the caller holds)."""
        for p in self.dir.iterdir() if self.dir.is_dir() else ():
            if p.name.startswith((".new-", ".deleted-")):
                shutil.rmtree(p, ignore_errors=True)

    def _start(self, c: Consumer, config: ConsumerConfig) -> tuple[int, list[int]]:
        s = self.stream.storage
        h = s.header
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
        # The start options a policy needs were checked before (consumer_config._check_start: 10094).
        if policy == DeliverPolicy.BY_START_SEQUENCE:
            assert config.opt_start_seq is not None
            return max(int(config.opt_start_seq), first), []
        if policy == DeliverPolicy.BY_START_TIME:
            assert config.opt_start_time is not None
            return max(self.stream.seq_at_time(datetime_to_ns(config.opt_start_time)), first), []
        if policy == DeliverPolicy.LAST_PER_SUBJECT:
            if self.stream.config.max_msgs_per_subject == 1:
                return first, []  # every message is its subject's last: the server starts as deliver all
            count = s.ensure_stats()[0]
            sids = np.flatnonzero(count > 0)
            m = c.filter.sid_mask()
            lasts = sorted(s.subject_last(int(i)) for i in sids if m is None or m[i])
            if not lasts:
                # The server starts at the last message (which the filter does not match), not after it.
                return (h.last_seq if h.msgs else h.last_seq + 1), []
            return lasts[0], lasts
        return first, []

    def update(self, c: Consumer, config: ConsumerConfig) -> Consumer:
        path = c.home / "config.json"
        meta = metafile.load(path, fsync=self.stream.storage.fsync)
        meta["config"] = config_to_json(config)
        metafile.save(path, meta, fsync=self.stream.storage.fsync)
        self._bump()
        self._gen = -1  # reload every consumer, this one with its new config
        self.sync()
        return self.by_name[c.name]

    def delete(self, name: str) -> None:
        """Delete a consumer, a damaged one too (removing its directory is the commit point)."""
        c = self.by_name.get(name)
        if c is None:
            key = dir_name(name)
            remove_consumer_dir(self.dir / key)
            del self.broken[key]
            self._bump()
            self._after_delete(None)
            return
        remove_consumer_dir(c.home)
        c.close()
        del self.by_name[name]
        self._bump()
        self._after_delete(c)

    def _after_delete(self, c: Optional[Consumer]) -> None:
        """The stream's retention after a delete: the consumer is gone whatever happens here,
        so a disk error leaves the removal to the next sweep instead of failing the call."""
        st = self.stream
        retention = st.config.retention
        if retention == RetentionPolicy.LIMITS or self.broken:
            return
        s = st.storage
        try:
            if retention == RetentionPolicy.INTEREST and not self.by_name:
                # Deleting the last consumer purges an interest stream (docs/semantics.md §3.3);
                # removing from the head writes nothing but the stream header.
                st.remove_range(s.header.first_seq, s.header.last_seq)
            elif c is None:
                # The last damaged consumer is gone: what the others released meanwhile goes
                # now, and on an interest stream whatever only the damaged one may have wanted.
                self._sweep(everything=retention == RetentionPolicy.INTEREST)
            elif retention == RetentionPolicy.INTEREST:
                # As nats-server: what follows its ack floor and no remaining consumer needs
                # goes, matched by it or by nobody (test_retention_update.py, test_deleting_*).
                self.release_range(c.ack_floor_stream_seq + 1, s.header.last_seq, unmatched=True)
        except OSError as exc:
            log.warning(
                "stream %r: removing the messages only the deleted consumer held failed (%s);"
                " the next reload of the consumer list removes them",
                st.name,
                exc,
            )
            self._gen = -1

    def expire_inactive(self, now: int) -> None:
        """Consumers with inactive_threshold go away once idle that long (checked lazily); a push
        consumer with a subscription bound to it is never idle (the server's interest)."""
        for c in list(self.by_name.values()):
            thr = c.config.inactive_threshold
            if thr and now - c.idle_since() > thr * 1_000_000_000 and not c.is_bound():
                self.delete(c.name)

    def became_interest(self) -> None:
        """The stream's retention was just updated to interest (from limits).

        As nats-server: with no consumer nothing holds interest and the stream is
        emptied; otherwise every consumer's acks count now, so a message some
        consumer acked and no matching consumer still needs goes, and a message no
        consumer matches stays (tests/contract/test_retention_update.py).
        """
        s = self.stream.storage
        if not s.header.msgs or self.broken:
            return  # with a damaged consumer, nobody can tell what it still needs
        if not self.by_name:
            self.stream.remove_range(s.header.first_seq, s.header.last_seq)
        else:
            self.release_range(s.header.first_seq, s.header.last_seq)

    def release_range(self, a: int, b: int, unmatched: bool = False) -> None:
        """``release`` every live sequence in a..b, a slice at a time (streams may be long)."""
        s = self.stream.storage
        step = 1 << 16
        for lo in range(max(a, s.header.first_seq), min(b, s.header.last_seq) + 1, step):
            hi = min(lo + step - 1, b, s.header.last_seq)
            seqs = np.arange(lo, hi + 1, dtype=np.int64)
            self.release(seqs[~s.dead_mask(lo, hi)], unmatched=unmatched)

    # ------------------------------------------------------------------ retention

    def interest(self, subject: str) -> bool:
        # A damaged consumer's filter is unknown: it may want the message.
        return bool(self.broken) or any(c.filter.matches(subject) for c in self.by_name.values())

    def release(self, seqs: Iterable[int] | np.ndarray, unmatched: bool = False) -> None:
        """Remove the given sequences from an interest or work-queue stream if nobody needs them.

        As on nats-server, a message goes when a consumer that matches it acks it: one no
        consumer matches stays (a work-queue stream holds such messages, and so does an
        interest stream that was limits before; an ack floor's range may span them),
        unless ``unmatched``: a consumer was deleted and took its interest along.
        """
        st = self.stream
        if st.config.retention == RetentionPolicy.LIMITS or self.broken:
            return  # with a damaged consumer, nobody can tell what it still needs
        s = st.storage
        seqs = np.asarray(seqs if isinstance(seqs, np.ndarray) else list(seqs), dtype=np.int64)
        if not len(seqs):
            return
        if len(seqs) > 1 and not (seqs[1:] > seqs[:-1]).all():
            seqs = np.unique(seqs)
        # (numpy's stubs type an indexed array as Any, so the checker loses that seqs is one)
        seqs = seqs[(seqs >= s.header.first_seq) & (seqs <= s.header.last_seq)]
        if not len(seqs):  # type: ignore[arg-type]
            return
        seqs = seqs[~s.dead_mask(int(seqs[0]), int(seqs[-1]))[seqs - seqs[0]]]  # type: ignore[index]
        if not len(seqs):
            return
        sids = np.concatenate([s.entries(a, b)["sid"] for a, b in runs_of(seqs)])
        keep = sids == SID_NONE
        matched = np.zeros(len(seqs), dtype=bool)
        for c in self.by_name.values():
            m = c.filter.match_sids(sids)
            matched |= m
            keep |= m & c.needs(seqs)
        if not unmatched:
            keep |= ~matched
        st.remove(seqs[~keep])

    def dropped(self, seqs: np.ndarray) -> None:
        """The stream removed these: pending deliveries leave as if termed, and what such a
        term acknowledged along (ack policy all) is released like any ack's."""
        released = [q for c in list(self.by_name.values()) if c.pending for q in c.drop(seqs)]
        if released:
            self.release(released)


def _renamed(exc: StoreError, tmp: Path, home: Path) -> StoreError:
    """The error of a failed create, naming the file where it would have been."""
    path = str(home) + exc.path[len(str(tmp)) :]
    if isinstance(exc, StoreIOError):
        return type(exc)(exc.errno or 0, exc.strerror or "", path, exc.action)  # (set by its __init__)
    return type(exc)(str(exc).replace(str(tmp), str(home)), path)


def remove_consumer_dir(home: Path) -> None:
    """Remove a consumer's directory: renamed away first (one atomic step, so no crash
    leaves half a consumer under its name), then emptied."""
    trash = home.with_name(f".deleted-{uuid.uuid4().hex[:8]}")
    with diskio.io_errors(home, "removing the consumer"):
        os.replace(home, trash)
    shutil.rmtree(trash, ignore_errors=True)
