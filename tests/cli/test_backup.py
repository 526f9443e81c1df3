"""``jetspark stream backup`` / ``stream restore``: a round trip through the command line, its
--json, and its errors as one line, on the embedded store and on a real server."""

from __future__ import annotations

import json

from tests.cli.conftest import Cli


def test_backup_and_restore_into_another_store(orders, tmp_path):
    orders("consumer", "add", "ORDERS", "NEW", "--filter", "orders.new", "--ack", "explicit", "--deliver", "all")
    orders("consumer", "next", "ORDERS", "NEW", "--count", "2")
    before = orders.json("stream", "info", "ORDERS")
    out = orders("stream", "backup", "ORDERS", tmp_path / "bk").stdout
    assert out.startswith(f"Backed up stream ORDERS to {tmp_path / 'bk'}: 5 messages (sequences 1..5), 1 consumer, ")
    assert (tmp_path / "bk" / "backup.json").is_file()

    other = Cli(tmp_path / "other", tmp_path / "config")  # a store that does not exist yet: restore creates it
    restored = other.json("stream", "restore", tmp_path / "bk")
    assert restored["state"] == before["state"]
    assert other.json("consumer", "info", "ORDERS", "NEW")["ack_floor"]["stream_seq"] == 2
    text = other("stream", "restore", tmp_path / "bk", code=1).stderr
    assert text.strip() == "Error: stream name already in use, cannot restore (err_code 10130)"

    doc = orders.json("stream", "backup", "ORDERS", tmp_path / "bk2", "--no-consumers")
    assert (doc["stream"], doc["backend"], doc["consumers"], doc["state"]["messages"]) == ("ORDERS", "engine", 0, 5)
    assert doc["bytes"] == sum(f["size"] for f in json.loads((tmp_path / "bk2" / "backup.json").read_text())["files"])


def test_errors_are_one_line(orders, tmp_path):
    err = orders("stream", "backup", "ORDRES", tmp_path / "bk", code=1).stderr
    assert err.strip() == "Error: stream 'ORDRES' not found (err_code 10059); streams: ORDERS"
    assert not (tmp_path / "bk").exists()
    orders("stream", "backup", "ORDERS", tmp_path / "bk")
    err = orders("stream", "backup", "ORDERS", tmp_path / "bk", code=1).stderr
    assert err.strip() == f"Error: {tmp_path / 'bk'} is not empty: a backup goes into a new or empty directory"
    state = tmp_path / "bk" / "data" / "state"
    state.write_bytes(state.read_bytes()[:100])
    orders("stream", "rm", "ORDERS", "-f")
    err = orders("stream", "restore", tmp_path / "bk", code=1).stderr
    assert err.strip() == f"Error: {state}: 100 bytes, the manifest records 4096: the backup is truncated"
    assert orders("stream", "ls", "--names").stdout == ""


def test_on_a_server(cli, nats_server, tmp_path):
    url = nats_server.url
    cli("--server", url, "stream", "add", "CLI_BK", "--subjects", "clibk.>")
    try:
        cli("--server", url, "pub", "clibk.x", "hello {{Count}}", "--count", "3")
        doc = cli.json("--server", url, "stream", "backup", "CLI_BK", tmp_path / "bk")
        assert (doc["backend"], doc["files"], doc["state"]["messages"]) == ("nats", 1, 3)
        err = cli("stream", "restore", tmp_path / "bk", code=1).stderr  # onto the embedded store
        assert "taken on a NATS server" in err and "not on an embedded store" in err
        cli("--server", url, "stream", "rm", "CLI_BK", "-f")
        assert cli.json("--server", url, "stream", "restore", tmp_path / "bk")["state"]["messages"] == 3
        assert cli("--server", url, "stream", "get", "CLI_BK", "3", "--raw").stdout == "hello 3"
    finally:
        cli("--server", url, "stream", "rm", "CLI_BK", "-f")
