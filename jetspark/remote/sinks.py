"""Committed micro-batches of streaming sinks, per query, in the KV bucket ``jetspark_sinks``
(stream ``KV_jetspark_sinks``, created on first commit), one key per query, updated with
compare-and-set.  ``js`` is the ``NatsJetStream`` handle (its verbs publish and create the bucket).
"""

from __future__ import annotations

import json

from jetspark.api import RetentionPolicy, StorageType
from jetspark.errors import (
    BadRequestError,
    JetSparkError,
    MsgNotFoundError,
    NoStreamResponseError,
    StreamNotFoundError,
)
from jetspark.remote import wire
from jetspark.remote.session import Session

SINK_BUCKET = "jetspark_sinks"


def _sink_key(query_id: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in query_id)
    return f"$KV.{SINK_BUCKET}.{safe}"


def _sink_stream_config():
    from jetspark.api import DiscardPolicy, StreamConfig

    # What nats-py's create_key_value(bucket=..., history=1) makes, so `nats kv` tools see a bucket.
    return StreamConfig(
        name=f"KV_{SINK_BUCKET}",
        subjects=[f"$KV.{SINK_BUCKET}.>"],
        max_msgs_per_subject=1,
        discard=DiscardPolicy.NEW,
        allow_rollup_hdrs=True,
        deny_delete=True,
        allow_direct=True,
        max_age=0.0,
        duplicate_window=120.0,
        storage=StorageType.FILE,
        num_replicas=1,
        retention=RetentionPolicy.LIMITS,
    )


async def _sink_get(session: Session, key: str) -> tuple[int, int]:
    """(batch id, revision) of a query's entry; (-1, 0) if none."""
    try:
        resp = await session.api(f"{session.api_prefix}.STREAM.MSG.GET.KV_{SINK_BUCKET}", {"last_by_subj": key}, what="sink_last_batch")
    except (MsgNotFoundError, StreamNotFoundError):
        return -1, 0
    m = wire.raw_msg_from_wire(f"KV_{SINK_BUCKET}", resp["message"])
    try:
        return int(json.loads(m.data)["batch"]), int(m.seq)
    except (ValueError, KeyError, TypeError):
        return -1, int(m.seq)


def sink_last_batch(session: Session, query_id: str) -> int:
    return session.run(_sink_get(session, _sink_key(query_id)), what="sink_last_batch")[0]


def sink_commit_batch(js, session: Session, query_id: str, batch_id: int) -> None:
    key = _sink_key(query_id)
    for _ in range(20):
        last, rev = session.run(_sink_get(session, key), what="sink_commit_batch")
        if batch_id <= last:
            return
        try:
            js.publish(key, json.dumps({"batch": int(batch_id)}).encode(), headers={"Nats-Expected-Last-Subject-Sequence": str(rev)})
            return
        except NoStreamResponseError:
            try:
                js.add_stream(_sink_stream_config())
            except JetSparkError as exc:
                if getattr(exc, "err_code", 0) != 10058:  # another writer made it first, differently
                    raise
        except BadRequestError as exc:
            if exc.err_code != 10071:  # wrong last sequence: another writer got in; look again
                raise
    raise JetSparkError(f"sink_commit_batch for query {query_id!r}: the registry kept changing under us")
