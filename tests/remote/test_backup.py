"""Stream backups on a real nats-server: its snapshot and restore API through ``backup_stream`` /
``restore_stream``; backed up, deleted, restored, compared.  A backup restores only on the
kind of backend that took it."""

from __future__ import annotations

import json

import pytest

from jetspark.errors import BackupError

pytestmark = pytest.mark.server


def test_a_backup_restores_on_its_own_kind_of_backend_only(js, engine, name, tmp_path):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    js.publish(f"{s}.1", b"x")
    js.backup_stream(s, tmp_path / "bk")
    with pytest.raises(BackupError, match="taken on a NATS server.*not on an embedded store") as err:
        engine.restore_stream(tmp_path / "bk")
    assert err.value.path == str(tmp_path / "bk") and engine.stream_names() == []
    engine.add_stream(name="E", subjects=["e.>"])
    engine.publish("e.1", b"x")
    engine.backup_stream("E", tmp_path / "ebk")
    with pytest.raises(BackupError, match="taken on an embedded store.*not on a NATS server"):
        js.restore_stream(tmp_path / "ebk")
    assert "E" not in js.stream_names()
    assert json.loads((tmp_path / "ebk" / "backup.json").read_text())["backend"] == "engine"
