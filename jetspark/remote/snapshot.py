"""Stream backups on a NATS server: its snapshot and restore API, over nats-py's public calls.

Backup (``NatsJetStream.backup_stream``): subscribe to an inbox, then ask
``$JS.API.STREAM.SNAPSHOT.<stream>`` to deliver there.  The answer is the stream's config
and state; then the server sends its snapshot (a tar of the stream's files compressed with
S2, the server's own format, consumers' state included unless ``no_consumers``) to the
inbox in chunks, each with a reply subject to acknowledge it (the server sends ahead within
a window, then waits for those acks), and ends with an empty message: no status, or 204,
when the snapshot is whole, an error status when the server gave up on it.  The chunks go
to the backup's one part, ``stream.tar.s2``; the config and state as the server sent them
go to the manifest, for the restore.

Restore (``restore_stream``): ``$JS.API.STREAM.RESTORE.<stream>`` with that config and
state answers a subject to send the snapshot to; each chunk is a request the server
answers once it has it, and an empty request ends the upload, answered by the restored
stream's info or the error (the server checks the snapshot's own checksums: a damaged one
is 10062).  A restore the server gives up on leaves no stream there.
"""

from __future__ import annotations

import json
from typing import Optional

from nats import errors as nerr

from jetspark.backend.archive import Archive, Meter, Writer
from jetspark.errors import BackupError, ServerError, error_from_response
from jetspark.remote.session import Session

__all__ = ["PART", "RESTORE_WAIT", "restore", "snapshot"]

PART = "stream.tar.s2"
CHUNK = 128 << 10
# The server answers the end of an upload once it has restored the stream from it (and a
# cluster's restored consumers have leaders within it: NatsJetStream._restore_stream).
RESTORE_WAIT = 60.0


async def snapshot(session: Session, subject: str, name: str, writer: Writer, consumers: bool, meter: Meter) -> dict:
    """Receive the server's snapshot of ``name`` into the backup's part; returns the answer
    to the snapshot request (the stream's config and state)."""
    nc = await session.ready()
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    what = f"backup_stream {name!r}"
    try:
        chunk = min(CHUNK, session.max_payload or CHUNK)
        resp = await session.api(
            subject, {"deliver_subject": inbox, "no_consumers": not consumers, "chunk_size": chunk}, what=what
        )
        with writer.part(PART) as part:
            while True:
                try:
                    msg = await sub.next_msg(timeout=session.timeout)
                except nerr.TimeoutError:
                    raise session.silence(
                        f"the next chunk of the snapshot of stream {name!r}", session.timeout
                    ) from None
                if not msg.data:
                    status = (msg.headers or {}).get("Status")
                    if status not in (None, "", "204"):
                        why = (msg.headers or {}).get("Description", "")
                        raise BackupError(
                            f"{session.url} ended the snapshot of stream {name!r} early: "
                            f"status {status} {why}".rstrip(),
                            part.path,
                        )
                    break
                part.write(msg.data)
                meter.add(len(msg.data))
                if msg.reply:
                    await nc.publish(msg.reply, b"")  # flow control: the server waits for these
        return resp
    finally:
        try:
            await sub.unsubscribe()
        except nerr.Error:
            pass  # the connection is gone: so is the subscription


async def restore(session: Session, subject: str, archive: Archive, meter: Meter) -> dict:
    """Upload the backup's snapshot to the server; returns the restored stream's info (wire JSON)."""
    name = archive.stream
    what = f"restore_stream {name!r}"
    extra = archive.extra
    if (
        not isinstance(extra.get("config"), dict)
        or not isinstance(extra.get("state"), dict)
        or [f["path"] for f in archive.files] != [PART]
    ):
        manifest = archive.path / "backup.json"
        raise BackupError(
            f"{manifest} is not the manifest of a server backup (no server config and state, or not one part {PART})",
            manifest,
        )
    resp = await session.api(subject, {"config": extra["config"], "state": extra["state"]}, what=what)
    deliver = resp["deliver_subject"]
    size = min(CHUNK, session.max_payload or CHUNK)
    buffered = b""
    # read_part checks the SHA-256 again at the end; the last chunk is held back until then,
    # so a part that changed since it was checked never reaches the server whole.
    for data in archive.read_part(PART):
        buffered += data
        sent = 0
        while len(buffered) - sent > size:
            await _send_chunk(session, deliver, buffered[sent : sent + size], what)
            meter.add(size)
            sent += size
        buffered = buffered[sent:]
    if buffered:
        await _send_chunk(session, deliver, buffered, what)
        meter.add(len(buffered))
    msg = await session.request(deliver, b"", what=what, timeout=max(session.timeout, RESTORE_WAIT))
    done = json.loads(msg.data)
    if "error" in done:
        raise error_from_response(done["error"])
    return done


async def _send_chunk(session: Session, deliver: str, data: bytes, what: str) -> None:
    msg = await session.request(deliver, data, what=what)
    if msg.data:  # an empty answer acknowledges the chunk; anything else says why not
        raise _chunk_error(msg.data)


def _chunk_error(data: bytes) -> Exception:
    try:
        doc: Optional[dict] = json.loads(data)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        return error_from_response(doc["error"])
    return ServerError(500, 0, f"the server refused a chunk of the restore: {data.decode(errors='replace')}")
