"""The streaming sink's registry of committed micro-batches, one entry per query.

A micro-batch whose id is committed for its query is not written again
(``sink.StreamWriter``), however long after the duplicate window the replay
comes.  The registry is a small key-value stream written with the public
verbs every backend has (``add_stream``, ``get_last_msg``, ``publish`` with
headers), so the embedded engine and a nats-server keep it the same way:

- stream ``JETSPARK_SINKS`` (``REGISTRY_STREAM``), subjects
  ``$JETSPARK.sinks.>``, file storage, limits retention, one message per
  subject (``max_msgs_per_subject=1``): one subject per query,
  ``$JETSPARK.sinks.<token>``, holding ``{"query": <id>, "batch": <id>}``.
  A ``$`` prefix, as the server's own ``$JS``/``$KV``/``$SYS`` spaces have,
  keeps it clear of applications' subjects.  It is listed by
  ``stream_names()`` and ``jetspark stream ls`` like any stream.
- Created by the first commit (a lookup creates nothing), with one
  ``add_stream`` of a fixed config: two creators at once both succeed (a
  create with an equal config is idempotent).  It is replicated like the
  streams it guards, so that losing a node loses no commit: ``replicas``
  (the sink's ``registryReplicas`` option) or, by default, 3 on a cluster,
  fewer on a cluster that has fewer nodes (10005, no suitable peers) and
  1 on a single server or the engine (10074, replicas > 1 not supported).
  A registry found with fewer replicas than wanted by a query's first
  commit is scaled up (``update_stream``; a store that refuses is logged,
  and the registry used as it is, unless the count was asked for).  If a stream of that name
  exists with another config it is used as long as it captures the
  registry's subjects; a stream whose subjects overlap the registry's
  (e.g. a no-ack stream on ``>``) makes the commit fail naming both.
- Commits never move an entry backwards, with any number of writers: a
  commit reads the entry and its sequence, returns if the entry is already
  at or past the batch, and otherwise publishes with
  ``Nats-Expected-Last-Subject-Sequence`` set to that sequence (0: no entry
  yet).  If another writer got in between, the stream refuses it (10071
  wrong last sequence) and the commit reads again.  A commit that cannot
  take effect raises ``SinkRegistryError``; nothing fails silently.
- A query id becomes a subject token (``token``) injectively: ids of
  letters, digits and ``-`` (Spark's UUIDs) as they are, others base64url
  encoded, long ones hashed (the entry's ``query`` field is checked, so a
  collision is an error, never another query's batch).
- Legacy: jetspark kept this registry on a nats-server in a KV bucket
  ``jetspark_sinks`` (stream ``KV_jetspark_sinks``); a query with no entry
  here is looked up there, so an upgrade writes no batch twice.  The
  embedded engine's old ``sinks/<query>.json`` files are not read (there
  was no release with them): its registry starts empty.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import re
from typing import Optional

from jetspark import validate as V
from jetspark.api import RetentionPolicy, StorageType, StreamConfig
from jetspark.err_codes import (
    CLUSTER_NO_PEERS,
    STREAM_NAME_EXIST,
    STREAM_REPLICAS_NOT_SUPPORTED,
    STREAM_SUBJECT_OVERLAP,
    STREAM_WRONG_LAST_SEQUENCE,
)
from jetspark.errors import (
    APIError,
    MsgNotFoundError,
    NoStreamResponseError,
    SinkRegistryError,
    StreamNotFoundError,
)
from jetspark.protocol import subjects as subj

log = logging.getLogger("jetspark.connector")

REGISTRY_STREAM = "JETSPARK_SINKS"
SUBJECT_PREFIX = "$JETSPARK.sinks."
REGISTRY_SUBJECTS = SUBJECT_PREFIX + ">"
LEGACY_STREAM = "KV_jetspark_sinks"
LEGACY_PREFIX = "$KV.jetspark_sinks."
EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
# Rounds of read-then-conditional-publish before a commit gives up: each lost
# round means another writer committed in between, so a loop this long means
# something keeps rewriting the entry without reaching our batch.
COMMIT_ROUNDS = 64

_PLAIN = re.compile(r"[A-Za-z0-9-]{1,128}")
_MAX_ENCODED = 96  # UTF-8 bytes base64url-encoded as they are (128 characters); longer ids are hashed


def registry_config(replicas: int = 1) -> StreamConfig:
    return StreamConfig(
        name=REGISTRY_STREAM,
        description="jetspark: the last micro-batch each streaming query's sink committed",
        subjects=[REGISTRY_SUBJECTS],
        retention=RetentionPolicy.LIMITS,
        max_msgs_per_subject=1,
        storage=StorageType.FILE,
        num_replicas=replicas,
    )


def token(query_id: str) -> str:
    """The subject token of a query id: injective, valid in a subject, at most 130 characters.

    The three forms cannot meet: a plain id has no ``_``, the others start with
    ``_b`` (base64url of the UTF-8 bytes) or ``_h`` (SHA-256 of them, in hex)."""
    if _PLAIN.fullmatch(query_id):
        return query_id
    raw = query_id.encode()
    if len(raw) <= _MAX_ENCODED:
        return "_b" + base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return "_h" + hashlib.sha256(raw).hexdigest()


def subject(query_id: str) -> str:
    return SUBJECT_PREFIX + token(query_id)


def last_batch(js, query_id: str) -> int:
    """The last micro-batch id committed for ``query_id`` on the store of ``js``, or -1."""
    return _read(js, V.query_id(query_id))[0]


def commit_batch(js, query_id: str, batch_id: int, replicas: Optional[int] = None) -> None:
    """Record ``batch_id`` as committed for ``query_id``; an older or equal id changes nothing.
    ``replicas``: of the registry stream, when this commit creates it (default: up to 3)."""
    query_id = V.query_id(query_id)
    batch_id = V.integer(batch_id, "batch_id", 0, V.INT64_MAX)
    payload = json.dumps({"query": query_id, "batch": batch_id}, ensure_ascii=False).encode()
    scaled = False
    for _ in range(COMMIT_ROUNDS):
        last, seq, exists = _read(js, query_id)
        if batch_id <= last:
            return
        if not exists:
            _create(js, replicas)
            continue
        if seq == 0 and not scaled:
            # A query's first commit: the registry it finds may predate replication.
            _scale_up(js, js.stream_info(REGISTRY_STREAM).config, replicas)
            scaled = True
        try:
            # The msg id makes the publish safe to repeat (a nats:// handle repeats it through a
            # leader election): a second copy is a duplicate, or refused as 10071 and read again.
            headers = {EXPECTED_LAST_SUBJECT_SEQ: str(seq), "Nats-Msg-Id": f"{token(query_id)}:{batch_id}:{seq}"}
            js.publish(subject(query_id), payload, headers=headers, stream=REGISTRY_STREAM)
            return
        except NoStreamResponseError:
            # The registry went away since the read, or a stream of its name captures
            # other subjects: _create makes it again, or says which.
            _create(js, replicas)
            continue
        except APIError as exc:
            if (
                exc.err_code != STREAM_WRONG_LAST_SEQUENCE
            ):  # wrong last sequence: another writer got in first; read again
                raise SinkRegistryError(
                    f"committing batch {batch_id} of query {query_id!r} in stream {REGISTRY_STREAM}: {exc}"
                ) from exc
    raise SinkRegistryError(
        f"committing batch {batch_id} of query {query_id!r}: stream {REGISTRY_STREAM} changed under this commit "
        f"{COMMIT_ROUNDS} times without reaching the batch"
    )


def _read(js, query_id: str) -> tuple[int, int, bool]:
    """(last batch or -1, the entry's sequence or 0, does the registry stream exist)."""
    try:
        msg = js.get_last_msg(REGISTRY_STREAM, subject(query_id))
    except StreamNotFoundError:
        return _legacy(js, query_id), 0, False
    except MsgNotFoundError:
        return _legacy(js, query_id), 0, True
    doc = _decode(msg.data, f"{REGISTRY_STREAM} message {msg.seq}")
    if doc.get("query") != query_id:
        raise SinkRegistryError(
            f"{REGISTRY_STREAM} message {msg.seq} on {msg.subject} belongs to query {doc.get('query')!r}, not "
            f"{query_id!r}"
        )
    return doc["batch"], msg.seq, True


def _decode(data: bytes, where: str) -> dict:
    # A damaged entry is an error, not -1: guessing could write a batch twice or skip one.
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or type(doc.get("batch")) is not int:
        raise SinkRegistryError(f"{where} holds no batch id: {bytes(data)[:200]!r}")
    return doc


def _legacy(js, query_id: str) -> int:
    """The entry jetspark kept in the KV bucket ``jetspark_sinks`` before this registry, or -1."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in query_id)  # that version's key
    try:
        msg = js.get_last_msg(LEGACY_STREAM, LEGACY_PREFIX + safe)
    except (StreamNotFoundError, MsgNotFoundError):
        return -1
    if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
        return -1
    return _decode(msg.data, f"{LEGACY_STREAM} message {msg.seq}")["batch"]


def _create(js, replicas: Optional[int]) -> None:
    err = _add(js, replicas)
    if err is None:
        return
    if err.err_code == STREAM_NAME_EXIST:  # the name is taken with another config: usable if it captures our subjects
        try:
            config = js.stream_info(REGISTRY_STREAM).config
        except StreamNotFoundError:
            return  # deleted meanwhile: the next round creates it
        subjects = config.subjects or []
        if any(subj.subset(REGISTRY_SUBJECTS, s) for s in subjects):
            _scale_up(js, config, replicas)
            return
        raise SinkRegistryError(
            f"stream {REGISTRY_STREAM} exists with subjects {subjects}; the Spark sink keeps its committed batches "
            f"there on {REGISTRY_SUBJECTS}: delete or rename that stream"
        ) from err
    if err.err_code == STREAM_SUBJECT_OVERLAP:
        others = [
            i.config.name
            for i in js.streams_info()
            if any(subj.collide(s, REGISTRY_SUBJECTS) for s in i.config.subjects or [])
        ]
        raise SinkRegistryError(
            f"the Spark sink cannot create its registry of committed batches, stream {REGISTRY_STREAM} on "
            f"{REGISTRY_SUBJECTS}: the subjects of stream {', '.join(others) or '(another stream)'} overlap them "
            "(10065 subjects overlap); give that stream narrower subjects"
        ) from err
    raise SinkRegistryError(f"the Spark sink cannot create its registry stream {REGISTRY_STREAM}: {err}") from err


def _add(js, replicas: Optional[int]) -> Optional[APIError]:
    """Create the registry with ``replicas`` (default: the most of 3, 2, 1 the store allows);
    the error that stopped it, if any."""
    r = replicas or 3
    while True:
        try:
            js.add_stream(registry_config(r))
            return None
        except APIError as exc:
            # Fewer nodes than replicas: 10074 on a single server (and the engine), 10005 on
            # a smaller cluster.  An explicit count is not lowered.
            if replicas or r == 1 or exc.err_code not in (STREAM_REPLICAS_NOT_SUPPORTED, CLUSTER_NO_PEERS):
                return exc
            r = 1 if exc.err_code == STREAM_REPLICAS_NOT_SUPPORTED else r - 1


def _scale_up(js, config: StreamConfig, replicas: Optional[int]) -> None:
    """An existing registry with fewer replicas than wanted gets them (one made before the
    registry was replicated, or by hand); a store that refuses is logged, not fatal."""
    wanted = replicas or 3
    if (config.num_replicas or 1) >= wanted:
        return
    try:
        js.update_stream(dataclasses.replace(config, num_replicas=wanted))
        log.info("stream %s now has %d replicas", REGISTRY_STREAM, wanted)
    except APIError as exc:
        if replicas:
            raise SinkRegistryError(
                f"stream {REGISTRY_STREAM} has {config.num_replicas or 1} replicas and cannot have the {wanted} "
                f"asked for: {exc}"
            ) from exc
        log.debug("stream %s keeps %d replica(s): %s", REGISTRY_STREAM, config.num_replicas or 1, exc)
