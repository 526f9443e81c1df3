"""One stream's JetStream rules: publish checks, limits, dedup, purge, get, delete, state.

Everything here runs on top of ``StreamStorage``; mutations happen inside
``storage.locked()`` so concurrent processes see them whole.  Validation
always comes before the first write, so a rejected request writes nothing.
Time-driven behaviour (max_age, per-message TTLs and their delete markers:
expiry.py; the dedup window) is applied at the next operation: there is no
background thread.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from jetspark import err_codes as E
from jetspark.api import (
    DiscardPolicy,
    PubAck,
    RawStreamMsg,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
    ns_to_datetime,
)
from jetspark.engine import expiry, metafile, msg_ttl, refusals, stream_state
from jetspark.engine.config import Limits
from jetspark.engine.consumer_set import ConsumerSet
from jetspark.engine.records import msgid_hash
from jetspark.engine.state_header import MAX_LAST_ID
from jetspark.engine.storage import StreamStorage
from jetspark.errors import CorruptStoreError, api_error
from jetspark.protocol import headers as H
from jetspark.protocol import subjects as subj

log = logging.getLogger("jetspark")

_NS = 1_000_000_000


def config_to_json(config: StreamConfig) -> dict:
    return config.as_dict()


def config_from_json(d: dict) -> StreamConfig:
    d = dict(d)
    d["retention"] = RetentionPolicy(d["retention"])
    d["storage"] = StorageType(d["storage"])
    d["discard"] = DiscardPolicy(d["discard"])
    return StreamConfig.from_response(d)


def load_stream_meta(home: Path, fsync: bool = False) -> dict:
    """``{"config", "created", "uid"}`` of the stream in ``home``; CorruptStoreError naming
    its config.json when neither copy is intact (or both are missing)."""
    path = home / "config.json"
    try:
        meta = metafile.load(path, fsync=fsync)
        Limits.of(config_from_json(meta["config"]))
        int(meta["created"])
        str(meta["uid"])
    except FileNotFoundError:
        raise CorruptStoreError(
            f"stream {home.name!r}: {path} and its mirror {path.name}{metafile.MIRROR_SUFFIX} are missing; "
            f"the stream's other files are kept (delete_stream({home.name!r}) removes them)",
            path=str(path),
        ) from None
    except (KeyError, ValueError, TypeError) as exc:
        raise CorruptStoreError(
            f"stream {home.name!r}: {path} is not a stream config: {type(exc).__name__}: {exc}", path=str(path)
        ) from exc
    return meta


class Stream:
    """A stream of the store, shared safely by every process that opens it."""

    uid: str  # the stream directory's identity, set by the handle that opens it
    config: StreamConfig  # these three: _set_config
    limits: Limits
    _plain: bool

    def __init__(
        self, home: Path, data_dir: Path, clock: Callable[[], int], fsync: bool, meta: Optional[dict] = None
    ) -> None:
        self.home = home  # persistent: config.json (and its mirror), lock
        self.clock = clock
        self.fsync = fsync  # for the config, which stays in the store directory even for memory streams
        meta = meta if meta is not None else self.load_meta()
        self._set_config(config_from_json(meta["config"]))
        self.created_ns = int(meta["created"])
        self.storage = StreamStorage(
            data_dir, home / "lock", memory=self.config.storage == StorageType.MEMORY, fsync=fsync
        )
        self._cfg_gen = self.storage.header.cfg_gen
        self.consumers = ConsumerSet(self)

    @property
    def name(self) -> str:
        return self.limits.name

    def close(self) -> None:
        self.consumers.close()
        self.storage.close()

    # ------------------------------------------------------------------ config

    def load_meta(self) -> dict:
        """The stream's config.json document: checked, recovered from its mirror if need be
        (metafile.py); CorruptStoreError naming the file if no copy is intact."""
        return load_stream_meta(self.home, self.fsync)

    def _reload_config(self) -> None:
        if self.storage.header.cfg_gen != self._cfg_gen:
            self._set_config(config_from_json(self.load_meta()["config"]))
            self._cfg_gen = self.storage.header.cfg_gen

    def _set_config(self, config: StreamConfig) -> None:
        """The config, its numbers (``Limits``) and whether publishes may take the plain path:
        does it need no more than size and discard-old limits?"""
        self.config = config
        self.limits = lim = Limits.of(config)
        self._plain = (
            config.retention == RetentionPolicy.LIMITS
            and not config.sealed
            and config.discard == DiscardPolicy.OLD
            and not lim.max_age
            and not config.allow_msg_ttl
            and lim.max_msgs_per_subject <= 0
        )

    def write_config(self, config: StreamConfig) -> None:
        """Replace the config (caller holds the lock); other processes reload it on the generation bump."""
        meta = self.load_meta()
        meta["config"] = config_to_json(config)
        metafile.save(self.home / "config.json", meta, fsync=self.fsync)
        self._set_config(config)
        self.storage.header.cfg_gen += 1
        self._cfg_gen = self.storage.header.cfg_gen

    def refresh(self) -> None:
        self.storage.refresh()
        self._reload_config()
        if self.storage.header.deleted:
            raise api_error(E.STREAM_NOT_FOUND)
        if (self.config.max_age or self.config.allow_msg_ttl) and expiry.pending(self):
            with self.locked():
                pass  # the lock applies what came due (_StreamLock)

    def locked(self):
        return _StreamLock(self)

    def now(self) -> int:
        # Timestamps grow along a stream (by at least the 1 us a timestamp column shows),
        # so time -> sequence lookups can bisect and every message has its own time.
        last = self.storage.header.last_ts
        t = self.clock()
        return t if t > last else last + 1000

    # ------------------------------------------------------------------ limits

    def seq_at_time(self, ts_ns: int) -> int:
        """The first sequence whose timestamp is >= ts_ns (last_seq + 1 if none)."""
        s = self.storage
        lo, hi = s.header.first_seq, s.header.last_seq + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if int(s.entries(mid, mid)[0]["ts"]) < ts_ns:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def remove_range(self, a: int, b: int) -> int:
        s = self.storage
        a = max(a, s.header.first_seq)
        b = min(b, s.header.last_seq)
        if a > b:
            return 0
        seqs = np.arange(a, b + 1, dtype=np.int64)
        return self.remove(seqs[~s.dead_mask(a, b)])

    def remove(self, seqs: np.ndarray) -> int:
        """Remove live sequences; the single place stream removals go through."""
        n = self.storage.remove(seqs)
        if n and self.consumers.by_name:
            self.consumers.dropped(np.asarray(seqs, dtype=np.int64))
        return n

    def enforce_limits(self, sid: Optional[int] = None) -> None:
        """Discard-old limits after a store or a config change (docs/semantics.md §3.2)."""
        s, c = self.storage, self.limits
        h = s.header
        per = c.max_msgs_per_subject
        if per > 0:
            sids = [sid] if sid is not None else [int(i) for i in np.flatnonzero(s.ensure_stats()[0] > per)]
            for i in sids:
                excess = s.subject_count(i) - per
                while excess > 0:
                    self.remove(np.array([s.subject_first(i)], dtype=np.int64))
                    excess -= 1
        if self.config.discard == DiscardPolicy.OLD:
            if c.max_msgs > 0 and h.msgs > c.max_msgs:
                excess = h.msgs - c.max_msgs
                if excess > 1:  # (not the steady state at the limit: one in, one out)
                    log.debug("stream %s: max_msgs %d removes the %d oldest messages", self.name, c.max_msgs, excess)
                self._remove_oldest(excess)
            if c.max_bytes > 0 and h.bytes > c.max_bytes:
                log.debug("stream %s: max_bytes %d removes the oldest messages", self.name, c.max_bytes)
                self._trim_bytes(c.max_bytes)

    def _remove_oldest(self, n: int) -> None:
        s = self.storage
        if n == 1:
            # The steady state at the limit: one message in, the oldest out, without arrays.
            seq = s.header.first_seq
            if s.remove_first() and self.consumers.by_name:
                self.consumers.dropped(np.array([seq], dtype=np.int64))
            return
        out: list = []
        seq = s.header.first_seq
        while len(out) < n and seq <= s.header.last_seq:
            b = min(s.header.last_seq, seq + max(n - len(out), 64) * 2)
            live = np.flatnonzero(~s.dead_mask(seq, b)) + seq
            out.extend(live[: n - len(out)].tolist())
            seq = b + 1
        self.remove(np.array(out, dtype=np.int64))

    def _trim_bytes(self, limit: int) -> None:
        s = self.storage
        while s.header.bytes > limit and s.header.msgs:
            a = s.header.first_seq
            b = min(s.header.last_seq, a + 4095)
            e = s.entries(a, b)
            live = ~s.dead_mask(a, b)
            sizes = np.where(live, s.sizes(e), 0)
            need = s.header.bytes - limit
            k = int(np.searchsorted(np.cumsum(sizes), need, side="left"))
            seqs = np.flatnonzero(live[: k + 1]) + a
            self.remove(seqs)

    # ------------------------------------------------------------------ publish

    def publish(self, subject: str, data: bytes, hdr: bytes) -> PubAck:
        with self.locked():
            return self._publish_locked(subject, data, hdr)

    def publish_plain(self, subject: str, data: bytes) -> PubAck:
        """The hot path: no headers, on a stream whose rules need no more than size and
        discard-old limits (see _plain); anything else takes the general path."""
        s = self.storage
        with s.locked():
            h = s.header
            if h.cfg_gen != self._cfg_gen or h.deleted or h.cons_gen or not self._plain:
                with self.locked():
                    return self._publish_locked(subject, data, b"")
            c = self.limits
            if 0 < c.max_msg_size < len(data):
                raise api_error(E.STREAM_MESSAGE_EXCEEDS_MAXIMUM)
            ts = self.clock()
            seq = s.append(subject, b"", data, ts if ts > h.last_ts else h.last_ts + 1000)
            h.last_id = b""
            if 0 < c.max_msgs < h.msgs:
                if h.msgs - c.max_msgs == 1:
                    s.remove_first()  # the steady state at max_msgs (_plain: no per-subject limits, no consumers)
                else:
                    self.enforce_limits()
            if 0 < c.max_bytes < h.bytes:
                self.enforce_limits()
            return PubAck(stream=c.name, seq=seq)

    def _publish_locked(self, subject: str, data: bytes, hdr: bytes, at: Optional[int] = None) -> PubAck:
        """The server's order of checks (docs/semantics.md §3.6, as nats-server 2.15 runs it).
        ``at``: the time of a delete marker the stream stores itself (store_marker)."""
        s, c, lim = self.storage, self.config, self.limits
        h = s.header
        if c.sealed:
            raise api_error(E.STREAM_SEALED)
        if hdr:
            hdr = refusals.strip_request_info(hdr)
            refusals.check_trace(hdr)
        self.check_size(len(hdr), len(data))
        msg_id = rollup = None
        if hdr:
            # Headers of features the engine lacks are refused where the server refuses them.
            refusals.check_batch(hdr)
            refusals.check_header_size(hdr)
            refusals.check_incr(hdr)
            expected_stream = H.lookup(hdr, H.EXPECTED_STREAM)
            if expected_stream is not None and expected_stream != lim.name:
                raise api_error(E.STREAM_NOT_MATCH)
            if not c.allow_msg_ttl:
                refusals.check_ttl_enabled(hdr)
            subj_seq = H.lookup(hdr, H.EXPECTED_LAST_SUBJ_SEQ)
            subj_seq_subject = H.lookup(hdr, H.EXPECTED_LAST_SUBJ_SEQ_SUBJECT)
            if subj_seq is not None:
                actual = self.last_seq_for(subj_seq_subject or subject)
                if _int(subj_seq) != actual:
                    raise api_error(E.STREAM_WRONG_LAST_SEQUENCE, seq=actual)
            elif subj_seq_subject is not None:
                raise api_error(E.STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID)
            last_seq = H.lookup(hdr, H.EXPECTED_LAST_SEQ)
            if last_seq is not None and _int(last_seq) != h.last_seq:
                raise api_error(E.STREAM_WRONG_LAST_SEQUENCE, seq=h.last_seq)
            refusals.check_schedules(hdr, subject)
            msg_id = H.lookup(hdr, H.MSG_ID) or None
            if msg_id is not None:
                hit = self._duplicate(msg_id)
                if hit is not None:
                    return PubAck(stream=lim.name, seq=hit, duplicate=True)
            last_id = H.lookup(hdr, H.EXPECTED_LAST_MSG_ID)
            if last_id is not None and last_id_key(last_id) != h.last_id:
                raise api_error(E.STREAM_WRONG_LAST_MSG_ID, id=h.last_id.decode(errors="replace"))
            rollup = H.lookup(hdr, H.ROLLUP)
            if rollup is not None:
                if not c.allow_rollup_hdrs:
                    raise api_error(E.STREAM_ROLLUP_FAILED, err="rollup not permitted")
                rollup = rollup.lower()
                if rollup not in ("sub", "all"):
                    raise api_error(E.STREAM_ROLLUP_FAILED, err=f'rollup value invalid: "{H.lookup(hdr, H.ROLLUP)}"')
        sid = s.subject_ids.get(subject)
        interested = c.retention != RetentionPolicy.INTEREST or self._has_interest(subject)
        ttl = 0
        if hdr and interested:
            ttl = refusals.check_ttl_valid(hdr)  # (a message no consumer wants is taken before this check)
            if c.allow_msg_ttl:
                hdr, ttl = self._ttl_of(hdr, ttl)
        self.check_discard_new(sid, len(subject.encode()), len(hdr), len(data))

        ts = self.now() if at is None else max(at, h.last_ts + 1000)
        if not interested:
            # Not stored, but the sequence is consumed (docs/semantics.md §3.3) and the id
            # becomes the last one; a rollup still purges what it covers, after the skip.
            seq = s.append_skip(ts)
            h.last_id = last_id_key(msg_id or "")
            if rollup is not None:
                self._rollup(rollup, subject, seq)
        else:
            seq = s.append(subject, hdr, data, ts)
            h.last_id = last_id_key(msg_id or "")
            sid = s.subject_ids[subject]
            if rollup is not None:
                self._rollup(rollup, subject, seq - 1)
            self.enforce_limits(sid)
        if c.allow_msg_ttl and s.ttl_index is not None:
            s.ttl_index.noted(seq, ts, ttl)
        if msg_id is not None:
            s.add_dedup(msgid_hash(msg_id), seq, ts)
            s.compact_journals(self.clock(), int(lim.duplicate_window * _NS))
        return PubAck(stream=lim.name, seq=seq)

    def _ttl_of(self, hdr: bytes, ttl: int) -> tuple[bytes, int]:
        """The header to store and its TTL (``ttl``: the header's, as check_ttl_valid read it): with
        subject delete markers, a TTL shorter than the marker TTL is raised to it (the header
        rewritten, as the server does), unless a subject holds one message at most
        (docs/semantics.md §3.8)."""
        c = self.config
        floor = int(c.subject_delete_marker_ttl or 0)
        if 0 < ttl < floor and c.max_msgs_per_subject != 1:
            return msg_ttl.raise_ttl(hdr, floor), floor
        return hdr, ttl

    def next_marker_due(self) -> Optional[int]:
        """When (ns) the next expiry comes due, on a stream whose expiries store delete markers (expiry.py)."""
        return expiry.next_marker_due(self)

    def store_marker(self, subject: str, at: int) -> None:
        """Store the delete marker of ``subject``'s last message, expired at ``at`` (expiry.py):
        published as the server publishes it to its own stream, its rollup removing that message."""
        self._publish_locked(subject, b"", msg_ttl.marker_header(self.limits.marker_ttl), at=at)

    def _rollup(self, rollup: str, subject: str, upto: int) -> None:
        """A rollup is a purge (the subject's, or the stream's) of what lies at or below
        ``upto``: consumers move past it as after purge_stream (docs/semantics.md §4), so a
        pending delivery it removed does not hold their ack floor back."""
        s = self.storage
        first = s.header.first_seq
        if rollup == "sub":
            sid = s.subject_ids.get(subject)
            prior = (
                s.seqs_of_subjects(_mask_of(len(s.subjects), [sid]), first, upto)
                if sid is not None
                else np.zeros(0, dtype=np.int64)
            )
        else:
            prior = np.arange(first, upto + 1, dtype=np.int64)
            prior = prior[~s.dead_mask(first, upto)] if upto >= first else prior
        s.remove(prior)
        if self.consumers.by_name:
            self._consumers_after_purge(subject if rollup == "sub" else None, prior, rollup=True)

    def check_size(self, hlen: int, dlen: int) -> None:
        limit = self.limits.max_msg_size
        if limit > 0 and (hlen > limit or hlen + dlen > limit):
            raise api_error(E.STREAM_MESSAGE_EXCEEDS_MAXIMUM)

    def check_discard_new(self, sid: Optional[int], subject_len: int, hlen: int, dlen: int) -> None:
        """discard: new refuses what would exceed a limit (docs/semantics.md §3.2, with its quirk)."""
        s, c = self.storage, self.limits
        if self.config.discard != DiscardPolicy.NEW:
            return
        at_subject_limit = (
            c.max_msgs_per_subject > 0 and sid is not None and s.subject_count(sid) >= c.max_msgs_per_subject
        )
        if at_subject_limit and self.config.discard_new_per_subject:
            raise api_error(E.STREAM_STORE_FAILED, err="maximum messages per subject exceeded")
        # Quirk: a subject at its own limit replaces its oldest message, skips the
        # max_msgs check, and passes the max_bytes check if the stream's first
        # message is at least as large as the new one.
        if c.max_msgs > 0 and s.header.msgs >= c.max_msgs and not at_subject_limit:
            raise api_error(E.STREAM_STORE_FAILED, err="maximum messages exceeded")
        size = s.msg_size(subject_len, hlen, dlen)
        if c.max_bytes > 0 and s.header.bytes + size > c.max_bytes:
            if not at_subject_limit or self._first_size() < size:
                raise api_error(E.STREAM_STORE_FAILED, err="maximum bytes exceeded")

    def _first_size(self) -> int:
        s = self.storage
        if not s.header.msgs:
            return 0
        return int(s.sizes(s.entries(s.header.first_seq, s.header.first_seq))[0])

    def _duplicate(self, msg_id: str) -> Optional[int]:
        """The sequence an id was stored at within the duplicate window, or None."""
        window = int(self.limits.duplicate_window * _NS)
        now = self.clock()
        hit = self.storage.ensure_dedup(now, window).get(msgid_hash(msg_id))
        if hit is not None and now - hit[1] < window:
            return hit[0]
        return self.range_duplicate(msg_id, now, window)

    def range_duplicate(self, msg_id: str, now: int, window: int) -> Optional[int]:
        """Is ``msg_id`` ("<prefix><n>") inside a range a batch with generated ids recorded?"""
        ranges = self.storage.ensure_ranges(now, window)
        if not ranges:
            return None
        digits = len(msg_id) - len(msg_id.rstrip("0123456789"))
        if not digits:
            return None
        n = int(msg_id[-digits:])
        for first, last, seq, ts in ranges.get(msgid_hash(msg_id[:-digits]), ()):
            if first <= n <= last and now - ts < window and str(n) == msg_id[-digits:]:
                return seq + (n - first)
        return None

    def _has_interest(self, subject: str) -> bool:
        return self.consumers.interest(subject)

    def last_seq_for(self, subject: str) -> int:
        """Sequence of the last stored message on a subject (wildcards allowed), or 0."""
        s = self.storage
        if subj.is_literal(subject):
            sid = s.subject_ids.get(subject)
            return s.subject_last(sid) if sid is not None else 0
        best = 0
        for sid, name in enumerate(s.subjects):
            if subj.matches(subject, name):
                best = max(best, s.subject_last(sid))
        return best

    # ------------------------------------------------------------------ purge / delete / get

    def purge(self, subject: Optional[str] = None, seq: Optional[int] = None, keep: Optional[int] = None) -> int:
        c = self.config
        if c.sealed:
            raise api_error(E.STREAM_SEALED)
        if c.deny_purge:
            raise api_error(E.STREAM_PURGE_FAILED, err="stream purge not permitted")
        # 0 means "not set" for both, as on the wire.
        seq, keep = seq or None, keep or None
        if seq is not None and keep is not None:
            raise api_error(E.BAD_REQUEST)
        if subject is not None and not subj.is_valid(subject):
            raise api_error(E.BAD_REQUEST)
        with self.locked():
            s = self.storage
            before = s.header.msgs
            first, last = s.header.first_seq, s.header.last_seq
            if subject and subject != ">":
                mask = _mask_of(len(s.subjects), [i for i, n in enumerate(s.subjects) if subj.matches(subject, n)])
                seqs = s.seqs_of_subjects(mask, first, last)
            else:
                seqs = np.arange(first, last + 1, dtype=np.int64)
                seqs = seqs[~s.dead_mask(first, last)] if last >= first else seqs
            if seq is not None:
                seqs = seqs[seqs < seq]
            elif keep is not None:
                seqs = seqs[: max(len(seqs) - keep, 0)]
            s.remove(seqs)
            s.header.held = 1  # even a never-written stream reports first = last + 1 after a purge
            if not subject and seq is not None and seq > s.header.last_seq + 1:
                s.set_floor(seq)
            if self.consumers.by_name:
                self._consumers_after_purge(subject, seqs)
            return before - s.header.msgs

    def _consumers_after_purge(self, subject: Optional[str], removed: np.ndarray, rollup: bool = False) -> None:
        """How nats-server moves consumers after a purge (docs/semantics.md §4, stream.go purge).

        A consumer the purge covers skips to the first remaining message the purge
        subject matches (the new first, without a subject), never redelivering what
        was purged.  After a wildcard subject purge, a consumer seeing more than was
        purged also drops pending entries whose message is gone.  Whatever pending
        message is left among the removed ones leaves pending as if termed.  A subject
        rollup (``rollup``, its subject literal) is wider for every consumer that sees the
        subject among others, as the server answers (tests/contract/test_floors_after_removals.py).
        """
        s = self.storage
        first = s.header.first_seq if s.header.msgs else s.header.last_seq + 1
        for c in self.consumers.by_name.values():
            if not subject or subject == ">":
                c.purged(first)
            elif c.filters and all(subj.subset(f, subject) for f in c.filters):
                mask = _mask_of(len(s.subjects), [i for i, n in enumerate(s.subjects) if subj.matches(subject, n)])
                left: np.ndarray | list[int] = (
                    s.seqs_of_subjects(mask, s.header.first_seq, s.header.last_seq) if s.header.msgs else []
                )
                c.purged(int(left[0]) if len(left) else s.header.last_seq + 1)
            elif (rollup or not subj.is_literal(subject)) and (
                not c.filters or any(subj.collide(f, subject) for f in c.filters)
            ):
                c.purged(first, wider=True)
        self.consumers.dropped(np.asarray(removed, dtype=np.int64))

    def delete_msg(self, seq: int) -> None:
        c = self.config
        if c.sealed:
            raise api_error(E.STREAM_SEALED)
        if c.deny_delete:
            raise api_error(E.STREAM_MSG_DELETE_FAILED, err="message delete not permitted")
        with self.locked():
            s = self.storage
            if not s.is_live(seq):
                # The file store answers differently outside its range (docs/semantics.md §4).
                if c.storage == StorageType.FILE and seq > s.header.last_seq:
                    raise api_error(E.STREAM_MSG_DELETE_FAILED, err="stream store EOF")
                if c.storage == StorageType.FILE and seq < s.header.first_seq:
                    raise api_error(E.STREAM_MSG_DELETE_FAILED, err="no message found")
                raise api_error(E.SEQUENCE_NOT_FOUND, seq=seq)
            self.remove(np.array([seq], dtype=np.int64))

    def get_msg(
        self, seq: Optional[int] = None, last_by_subj: Optional[str] = None, next_by_subj: Optional[str] = None
    ) -> RawStreamMsg:
        self.refresh()
        s = self.storage
        if last_by_subj and seq:
            raise api_error(E.BAD_REQUEST)
        if last_by_subj:
            found = self.last_seq_for(last_by_subj)
        elif next_by_subj:
            mask = _mask_of(len(s.subjects), [i for i, n in enumerate(s.subjects) if subj.matches(next_by_subj, n)])
            start = max(seq or 0, s.header.first_seq)
            found = self._next_matching(mask, start)
        else:
            if not seq:
                raise api_error(E.BAD_REQUEST)
            found = seq if s.is_live(seq) else 0
        if not found:
            raise api_error(E.NO_MESSAGE_FOUND)
        subject, hdr, data, ts = s.read_message(found)
        return RawStreamMsg(
            subject=subject,
            seq=found,
            data=data,
            hdrs=hdr or None,
            headers=H.decode(hdr) if hdr else None,
            stream=self.name,
            time=ns_to_datetime(ts),
        )

    def _next_matching(self, mask: np.ndarray, start: int) -> int:
        s = self.storage
        step = 1 << 16
        for a in range(start, s.header.last_seq + 1, step):
            b = min(a + step - 1, s.header.last_seq)
            found = s.seqs_of_subjects(mask, a, b)
            if len(found):
                return int(found[0])
        return 0

    # ------------------------------------------------------------------ state

    def info(self, subjects_filter: Optional[str] = None, deleted_details: bool = False) -> StreamInfo:
        with self.locked():
            return stream_state.stream_info(self, subjects_filter, deleted_details)


class _StreamLock:
    """storage.locked() plus the config reload and lazy expiry every writer needs."""

    __slots__ = ("stream", "inner")

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.inner = stream.storage.locked()

    def __enter__(self) -> Stream:
        self.inner.__enter__()
        st = self.stream
        try:
            st._reload_config()
            if st.storage.header.deleted:
                raise api_error(E.STREAM_NOT_FOUND)
            if st.storage.header.cons_gen or st.consumers.by_name:
                st.consumers.sync()
                st.consumers.expire_inactive(st.clock())
            expiry.expire(st)
        except BaseException as exc:
            self.inner.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return st

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)


def _mask_of(n: int, ids) -> np.ndarray:
    m = np.zeros(max(n, 1), dtype=bool)
    for i in ids:
        m[i] = True
    return m


def last_id_key(msg_id: str) -> bytes:
    """How a Nats-Msg-Id is kept in the header slot (over-long ids by their hash)."""
    b = msg_id.encode()
    return b if len(b) <= MAX_LAST_ID else b"#" + msgid_hash(msg_id).hex().encode()


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return -1
