"""``backup_stream`` / ``restore_stream``, one contract for every jetspark backend.

Backed up, deleted, restored, compared through the plain verbs: the same state, the same
message at every sequence, the same consumers at the same ack floors.  nats-py has no
backup verb, so the oracle cannot run them; on a server the backup is the server's own
snapshot ($JS.API.STREAM.SNAPSHOT / RESTORE).  Runs on engine-file, engine-memory,
nats-file and nats-memory (the ``jetspark_backend`` fixture).  The engine's own cases
(the files, damage of each kind, another process appending) are in
tests/engine/test_backup.py; a backup taken on one kind of backend refused on the other in
tests/remote/test_backup.py.
"""

from __future__ import annotations

import pytest

from jetspark.errors import BadRequestError, CorruptBackupError, MsgNotFoundError, ServerError, StreamNotFoundError

S = "BK"


@pytest.fixture
def js(jetspark_backend):
    return jetspark_backend


def view(js, name: str = S) -> dict:
    info = js.stream_info(name)
    msgs = {}
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        try:
            m = js.get_msg(name, seq)
            msgs[seq] = (m.subject, m.data, m.headers, m.time)
        except MsgNotFoundError:
            msgs[seq] = None
    # (a server does not restore a consumer's last_active times)
    consumers = [
        (
            c.name,
            c.config,
            c.delivered.stream_seq,
            c.ack_floor.stream_seq,
            c.ack_floor.consumer_seq,
            c.num_pending,
            c.num_ack_pending,
            c.num_redelivered,
        )
        for c in js.consumers_info(name)
    ]
    return {"config": info.config, "state": info.state, "msgs": msgs, "consumers": consumers}


def fill(js) -> None:
    # Never the server's last stream: nats-server removes an account's store directory,
    # asynchronously, once its last stream is deleted, and a stream created meanwhile
    # fails (10049; tests/conftest.py KEEPER).
    js.add_stream(name="KEEP", subjects=["keep.>"])
    js.add_stream(name=S, subjects=["bk.>"])
    for i in range(200):
        js.publish(f"bk.{i % 3}", b"payload-%04d" % i, headers={"Nats-Msg-Id": f"id-{i}", "k": "v"} if i % 2 else None)
    js.delete_msg(S, 7)
    js.purge_stream(S, seq=3)
    js.add_consumer(S, durable_name="C", ack_policy="explicit", ack_wait=600.0)
    js.add_consumer(S, durable_name="F", filter_subject="bk.1", ack_policy="explicit", ack_wait=600.0)
    msgs = js.pull_subscribe_bind("C", S).fetch(10)
    for m in msgs[:6]:
        m.ack_sync()
    js.pull_subscribe_bind("F", S).fetch(3)[0].ack_sync()


def test_backup_delete_restore(js, tmp_path):
    fill(js)
    before = view(js)
    info = js.backup_stream(S, tmp_path / "bk")
    assert (info.stream, info.consumers, info.state, info.config) == (S, 2, before["state"], before["config"])
    assert info.backend == ("nats" if js.is_server else "engine")
    js.delete_stream(S)
    restored = js.restore_stream(tmp_path / "bk")
    assert (restored.config, restored.state) == (before["config"], before["state"])
    assert view(js) == before
    # It goes on where it was: the next sequence, the next deliveries.
    assert js.publish("bk.0", b"new").seq == 201
    assert [m.metadata.sequence.stream for m in js.pull_subscribe_bind("C", S).fetch(3)] == [14, 15, 16]
    # The duplicate window: the engine's restored stream keeps it; a server's starts empty
    # (nats-server rebuilds it from the messages only when it restarts; docs/semantics.md §4).
    dup = js.publish("bk.1", b"again", headers={"Nats-Msg-Id": "id-199"})
    assert (dup.seq, dup.duplicate) == ((202, None) if js.is_server else (200, True))


def test_refusals(js, tmp_path):
    with pytest.raises(StreamNotFoundError):
        js.backup_stream(S, tmp_path / "none")
    assert not (tmp_path / "none").exists()
    fill(js)
    js.backup_stream(S, tmp_path / "bk")
    before = view(js)
    with pytest.raises(BadRequestError) as err:
        js.restore_stream(tmp_path / "bk")
    assert (err.value.err_code, err.value.description) == (10130, "stream name already in use, cannot restore")
    assert view(js) == before
    js.delete_stream(S)
    js.add_stream(name="OTHER", subjects=["bk.1"])
    with pytest.raises(ServerError) as err:
        js.restore_stream(tmp_path / "bk")
    assert (err.value.err_code, err.value.description) == (
        10062,
        "restore failed: error adding stream: subjects overlap with an existing stream (10065)",
    )
    assert S not in js.stream_names()
    js.delete_stream("OTHER")
    # A flipped byte in the backup's largest part: refused, naming it, before anything is created.
    part = max(
        (p for p in (tmp_path / "bk").rglob("*") if p.is_file() and p.name != "backup.json"),
        key=lambda p: p.stat().st_size,
    )
    raw = bytearray(part.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    part.write_bytes(bytes(raw))
    with pytest.raises(CorruptBackupError) as err:
        js.restore_stream(tmp_path / "bk")
    assert err.value.path == str(part) and str(part) in str(err.value)
    assert S not in js.stream_names()
