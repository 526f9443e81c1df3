"""jetspark stream add|edit|info|ls|rm|purge|get|view|rmm|report (subjects, find, seal, copy: test_stream_extra.py)."""

from __future__ import annotations

import base64
import json

import pytest

import jetspark


def test_add_creates_the_store_and_prints_the_stream(cli):
    r = cli(
        "stream",
        "add",
        "ORDERS",
        "--subjects",
        "orders.>",
        "--max-age",
        "1h30m",
        "--max-bytes",
        "10MB",
        "--dupe-window",
        "5m",
        "--max-msgs-per-subject",
        "10",
        "--max-msg-size",
        "1KiB",
        "--metadata",
        "team=shop",
        "--description",
        "all orders",
    )
    assert "Stream ORDERS added" in r.stdout
    assert "Maximum Age: 1h30m" in r.stdout
    assert "Maximum Bytes: 10.0 MiB" in r.stdout
    assert "Duplicate Window: 5m" in r.stdout
    assert (cli.store / "store.json").exists()
    c = jetspark.connect(cli.store).stream_info("ORDERS").config
    assert (c.subjects, c.max_age, c.max_bytes, c.duplicate_window) == (["orders.>"], 5400.0, 10 * 2**20, 300.0)
    assert (c.max_msgs_per_subject, c.max_msg_size, c.metadata, c.description) == (
        10,
        1024,
        {"team": "shop"},
        "all orders",
    )


def test_add_flags_map_to_the_config(cli):
    info = cli.json(
        "stream",
        "add",
        "Q",
        "--subjects",
        "q.a,q.b",
        "--subjects",
        "q.c",
        "--storage",
        "memory",
        "--retention",
        "work",
        "--discard",
        "new",
        "--max-msgs",
        "100",
        "--max-consumers",
        "3",
        "--deny-delete",
        "--deny-purge",
        "--allow-direct",
        "--first-sequence",
        "50",
    )
    c = info["config"]
    assert c["subjects"] == ["q.a", "q.b", "q.c"]
    assert (c["storage"], c["retention"], c["discard"]) == ("memory", "workqueue", "new")
    assert (c["max_msgs"], c["max_consumers"], c["deny_delete"], c["deny_purge"], c["allow_direct"]) == (
        100,
        3,
        True,
        True,
        True,
    )
    assert info["state"]["first_seq"] == 50
    cli("stream", "rm", "Q", "-f")


def test_add_is_idempotent_and_refuses_a_different_config(cli):
    cli("stream", "add", "S", "--subjects", "s.>")
    cli("stream", "add", "S", "--subjects", "s.>")
    r = cli("stream", "add", "S", "--subjects", "s.>", "--max-msgs", "5", code=1)
    assert r.stderr.strip() == "Error: stream name already in use with a different configuration (err_code 10058)"
    assert "Traceback" not in r.output


def test_add_from_a_config_file(cli, tmp_path):
    cli("stream", "add", "A", "--subjects", "a.>", "--max-age", "1d", "--max-msgs", "9")
    doc = tmp_path / "a.json"
    doc.write_text(cli("stream", "info", "A", "--json").stdout)  # the whole info document works too
    info = cli.json("stream", "add", "B", "--config", doc, "--subjects", "b.>")
    assert (
        info["config"]["name"],
        info["config"]["subjects"],
        info["config"]["max_age"],
        info["config"]["max_msgs"],
    ) == ("B", ["b.>"], 86400.0, 9)
    r = cli("stream", "add", "--subjects", "c.>", code=2)
    assert "NAME" in r.stderr


def test_info_and_json(orders):
    r = orders("stream", "info", "ORDERS", "--subjects", ">")
    assert "Information for Stream ORDERS" in r.stdout
    assert "Messages: 5" in r.stdout
    assert ["orders.new", "3"] in [line.split() for line in r.stdout.splitlines()]
    info = orders.json("stream", "info", "ORDERS", "--subjects", ">")
    assert info["config"]["name"] == "ORDERS"
    assert info["state"]["messages"] == 5
    assert (info["state"]["first_seq"], info["state"]["last_seq"]) == (1, 5)
    assert info["state"]["subjects"] == {"orders.new": 3, "orders.eu.new": 1, "orders.shipped": 1}
    assert info["created"].endswith("Z") and info["config"]["duplicate_window"] == 120.0


def test_ls(orders):
    orders("stream", "add", "OTHER", "--subjects", "other.>", "--description", "x")
    r = orders("stream", "ls")
    lines = r.stdout.splitlines()
    assert lines[2].split() == ["Name", "Description", "Created", "Messages", "Size", "Last", "Message"]
    assert any(line.startswith("ORDERS") and " 5 " in line for line in lines)
    assert orders("stream", "ls", "--names").stdout.split() == ["ORDERS", "OTHER"]
    assert orders.json("stream", "ls", "--names") == ["ORDERS", "OTHER"]
    infos = orders.json("stream", "ls")
    assert [i["config"]["name"] for i in infos] == ["ORDERS", "OTHER"]
    assert [i["state"]["messages"] for i in infos] == [5, 0]


def test_ls_empty(cli):
    cli("stream", "add", "S")
    cli("stream", "rm", "S", "-f")
    assert cli("stream", "ls").stdout.strip() == "No streams defined"
    assert cli.json("stream", "ls") == []


def test_report(orders):
    orders("stream", "add", "BIG", "--subjects", "big.>")
    orders("pub", "big.x", "y" * 100, "--count", "20")
    orders("consumer", "add", "ORDERS", "C1")
    rows = orders.json("stream", "report")
    assert [r["stream"] for r in rows] == ["BIG", "ORDERS"]
    big, o = rows
    assert (big["messages"], big["first_seq"], big["last_seq"], big["consumers"]) == (20, 1, 20, 0)
    assert (o["messages"], o["first_seq"], o["last_seq"], o["consumers"], o["subjects"]) == (5, 1, 5, 1, 3)
    assert big["bytes"] > o["bytes"] > 0
    # The configured replicas as a number (the engine keeps one); no cluster to name.
    assert (o["replicas"], o["cluster"]) == (1, None)
    assert [r["stream"] for r in orders.json("stream", "report", "--sort", "messages")] == ["BIG", "ORDERS"]
    assert [r["stream"] for r in orders.json("stream", "report", "--sort", "consumers")] == ["ORDERS", "BIG"]
    text = orders("stream", "report").stdout
    header = next(line for line in text.splitlines() if line.startswith("Stream") and "Storage" in line)
    assert header.split() == [
        "Stream",
        "Storage",
        "Retention",
        "Consumers",
        "Messages",
        "Bytes",
        "First",
        "Seq",
        "Last",
        "Seq",
        "Deleted",
        "Subjects",
    ]
    assert any(line.split()[:5] == ["ORDERS", "file", "limits", "1", "5"] for line in text.splitlines())


def test_edit_changes_only_the_given_flags(orders):
    r = orders("stream", "edit", "ORDERS", "--max-msgs", "4", "--description", "edited")
    assert "Stream ORDERS updated:" in r.stdout
    # The changes in stream info's words and units.
    assert r.stdout.startswith(
        "Stream ORDERS updated:\n  Description: - -> edited\n  Maximum Messages: unlimited -> 4\n\n"
    )
    assert "Messages: 4" in r.stdout  # the lower limit removed the oldest message
    assert "Duplicate Window: 2m" in r.stdout  # untouched fields keep their values


def test_edit_shows_durations_and_sizes_as_info_does(orders):
    orders("stream", "edit", "ORDERS", "--max-age", "7d")
    r = orders("stream", "edit", "ORDERS", "--max-age", "1d", "--max-bytes", "1GiB", "--deny-purge")
    assert r.stdout.split("\n\n")[0].splitlines() == [
        "Stream ORDERS updated:",
        "  Allows Purge: true -> false",
        "  Maximum Bytes: unlimited -> 1.0 GiB",
        "  Maximum Age: 7d -> 1d",
    ]
    assert "Maximum Age: 1d" in orders("stream", "info", "ORDERS").stdout
    assert orders("stream", "edit", "ORDERS", "--max-age", "1d").stdout.startswith(
        "Stream ORDERS updated (no changes)\n"
    )


def test_edit_json(orders):
    info = orders.json("stream", "edit", "ORDERS", "--max-age", "1d")
    assert info["config"]["max_age"] == 86400.0 and info["config"]["subjects"] == ["orders.>"]


def test_edit_errors(orders):
    r = orders("stream", "edit", "ORDERS", "--retention", "workqueue", code=1)
    assert "err_code 10052" in r.stderr and "workqueue" in r.stderr


def test_an_edited_stream_opens_again(orders):
    orders("stream", "edit", "ORDERS", "--description", "edited")
    assert orders.json("stream", "info", "ORDERS")["config"]["description"] == "edited"


def test_get(orders):
    r = orders("stream", "get", "ORDERS", "4")
    assert r.stdout.startswith("Item: ORDERS#4 received ")
    assert "on subject orders.eu.new" in r.stdout
    assert "Region: eu" in r.stdout and "\neu\n" in r.stdout
    msg = orders.json("stream", "get", "ORDERS", "2")
    assert (msg["seq"], msg["subject"], msg["data"], msg["headers"]) == (
        2,
        "orders.new",
        '{"id": 2}',
        {"Nats-Msg-Id": "order-2"},
    )
    assert msg["time"].endswith("Z")
    assert orders("stream", "get", "ORDERS", "--last-for", "orders.new", "--raw").stdout_bytes == b'{"id": 3}'
    assert orders.json("stream", "get", "ORDERS", "-S", "orders.*.new")["seq"] == 4


def test_view(orders):
    # Not on a terminal: one page of SIZE, and a note on stderr that there is more.
    r = orders("stream", "view", "ORDERS", "2", "--raw")
    assert r.stdout.splitlines() == ['{"id": 1}', '{"id": 2}']
    assert r.stderr == "(more messages after sequence 2: add --count N to print more, or --id to start later)\n"
    # --count: that many messages, across pages; none is left, so no note.
    r = orders("stream", "view", "ORDERS", "2", "--raw", "--count", "5")
    assert r.stdout.splitlines() == ['{"id": 1}', '{"id": 2}', '{"id": 3}', "eu", "shipped"] and r.stderr == ""
    assert orders("stream", "view", "ORDERS", "--raw", "--count", "1", "--id", "5").stdout == "shipped\n"
    r = orders("stream", "view", "ORDERS", "5", "--raw")  # exactly one page: nothing more to say
    assert len(r.stdout.splitlines()) == 5 and r.stderr == ""
    assert [m["seq"] for m in orders.json_lines("stream", "view", "ORDERS", "--id", "4")] == [4, 5]
    assert [m["seq"] for m in orders.json_lines("stream", "view", "ORDERS", "--subject", "orders.*.new")] == [4]
    assert [m["seq"] for m in orders.json_lines("stream", "view", "ORDERS", "--since", "1h")] == [1, 2, 3, 4, 5]
    assert [m["seq"] for m in orders.json_lines("stream", "view", "ORDERS", "1", "--count", "3")] == [1, 2, 3]
    text = orders("stream", "view", "ORDERS", "1", "--id", "4").stdout
    assert "[ORDERS #4] orders.eu.new @ " in text and "Region: eu" in text
    r = orders("stream", "view", "ORDERS", "--subject", "orders.none")
    assert r.stdout == "" and r.stderr == "No messages in ORDERS on orders.none\n"
    assert "cannot be combined" in orders("stream", "view", "ORDERS", "--id", "1", "--since", "1h", code=2).stderr
    assert "0 is not in the range x>=1" in orders("stream", "view", "ORDERS", "--count", "0", code=2).stderr
    r = orders("stream", "view", "NOPE", code=1)
    assert "stream 'NOPE' not found" in r.stderr


def test_view_on_a_terminal_asks_before_each_next_page(orders):
    """In a pseudo-terminal: a page, "Next page?", the next page on yes, the end on no."""
    out = run_in_terminal(orders.store, ["stream", "view", "ORDERS", "2", "--raw"], answers=["y", "n"])
    assert out.count("Next page?") == 2
    assert out.index('{"id": 2}') < out.index("Next page?") < out.index('{"id": 3}')
    assert "shipped" not in out  # the second answer was no
    # --count stops the paging: 3 messages in pages of 2, one question.
    out = run_in_terminal(orders.store, ["stream", "view", "ORDERS", "2", "--raw", "--count", "3"], answers=["y"])
    assert out.count("Next page?") == 1 and '{"id": 3}' in out and "eu" not in out


def run_in_terminal(store, args, answers) -> str:
    """Run the CLI with stdin and stdout on a pseudo-terminal, answering each "Next page?"."""
    import os
    import pty
    import select
    import subprocess
    import sys

    main, tty = pty.openpty()
    env = {**os.environ, "JETSPARK_STORE": str(store), "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jetspark.cli", *args], stdin=tty, stdout=tty, stderr=tty, env=env, close_fds=True
    )
    os.close(tty)
    seen, pending = b"", list(answers)
    while True:
        # A safety net against a hang (a question never asked, or asked twice), not a timing:
        # the child normally answers at once.
        if not select.select([main], [], [], 120)[0]:
            proc.kill()
            raise AssertionError(f"no output for 120 s; so far: {seen.decode(errors='replace')!r}")
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
        if pending and seen.count(b"Next page?") > len(answers) - len(pending):
            os.write(main, pending.pop(0).encode() + b"\n")
    os.close(main)
    assert proc.wait(timeout=120) == 0, seen.decode(errors="replace")
    return seen.decode(errors="replace").replace("\r\n", "\n")


def test_get_binary_body_in_json(orders):
    orders("pub", "orders.bin", "--force-stdin", input=b"\xff\x00\xfe")
    msg = orders.json("stream", "get", "ORDERS", "--last-for", "orders.bin")
    assert msg["data_encoding"] == "base64" and base64.b64decode(msg["data"]) == b"\xff\x00\xfe"


def test_get_errors(orders):
    r = orders("stream", "get", "ORDERS", "99", code=1)
    assert (
        r.stderr.strip() == "Error: no message 99 in stream ORDERS (sequences 1..5): no message found (err_code 10037)"
    )
    r = orders("stream", "get", "ORDERS", "--last-for", "nothing.here", code=1)
    assert (
        r.stderr.strip()
        == "Error: no message on nothing.here in stream ORDERS (sequences 1..5): no message found (err_code 10037)"
    )
    assert "one of the two" in orders("stream", "get", "ORDERS", code=2).stderr
    assert "one of the two" in orders("stream", "get", "ORDERS", "1", "--last-for", "x", code=2).stderr
    assert (
        orders("stream", "get", "NOPE", "1", code=1).stderr.strip()
        == "Error: stream 'NOPE' not found (err_code 10059); streams: ORDERS"
    )


@pytest.mark.parametrize(
    "flags, purged, left_first_last",
    [
        ([], 5, (0, 6, 5)),
        (["--subject", "orders.new"], 3, (2, 4, 5)),
        (["--seq", "3"], 2, (3, 3, 5)),
        (["--keep", "2"], 3, (2, 4, 5)),
        (["--subject", "orders.new", "--keep", "1"], 2, (3, 3, 5)),
    ],
)
def test_purge(orders, flags, purged, left_first_last):
    out = orders.json("stream", "purge", "ORDERS", "-f", *flags)
    assert out["purged"] == purged
    s = out["state"]
    assert (s["messages"], s["first_seq"], s["last_seq"]) == left_first_last


def test_purge_text_confirmation_and_errors(orders):
    r = orders("stream", "purge", "ORDERS", "--subject", "orders.shipped", input="n\n", code=1)
    assert "Really purge messages on orders.shipped from stream ORDERS (5 messages stored)?" in r.stdout
    assert "Aborted" in r.stderr
    r = orders("stream", "purge", "ORDERS", "--subject", "orders.shipped", input="y\n")
    assert "Purged 1 message from ORDERS: 4 left" in r.stdout
    assert (
        orders("stream", "purge", "ORDERS", "--seq", "2", "--keep", "1", "-f", code=2).stderr.count(
            "cannot be combined"
        )
        == 1
    )
    orders("stream", "add", "LOCKED", "--subjects", "locked.>", "--deny-purge")
    r = orders("stream", "purge", "LOCKED", "-f", code=1)
    assert r.stderr.strip() == "Error: stream purge not permitted (err_code 10110)"


def test_purge_is_quiet_when_piped_and_shows_progress_when_asked(orders):
    quiet = orders("stream", "purge", "ORDERS", "-f")
    assert quiet.stderr == ""
    orders("pub", "orders.x", "x", "--count", "50")
    loud = orders("stream", "purge", "ORDERS", "-f", "--progress")
    assert "purge ORDERS" in loud.stderr and "msg" in loud.stderr


def test_rmm(orders):
    assert orders("stream", "rmm", "ORDERS", "2", "-f").stdout.strip() == "Deleted message 2 from stream ORDERS"
    info = orders.json("stream", "info", "ORDERS")
    assert (info["state"]["messages"], info["state"]["num_deleted"]) == (4, 1)
    r = orders("stream", "rmm", "ORDERS", "2", "-f", code=1)
    assert (
        r.stderr.startswith("Error: cannot delete message 2 from stream ORDERS (sequences 1..5): ")
        and "(err_code " in r.stderr
    )
    r = orders("stream", "rmm", "ORDERS", "99999", "-f", code=1)
    assert (
        r.stderr.strip()
        == "Error: cannot delete message 99999 from stream ORDERS (sequences 1..5): stream store EOF (err_code 10057)"
    )
    orders("stream", "rmm", "ORDERS", "3", input="n\n", code=1)
    orders("stream", "rmm", "ORDERS", "3", input="y\n")
    orders("stream", "add", "NODEL", "--subjects", "nodel", "--deny-delete")
    orders("pub", "nodel", "x")
    r = orders("stream", "rmm", "NODEL", "1", "-f", code=1)
    assert r.stderr.strip() == (
        "Error: cannot delete message 1 from stream NODEL (sequences 1..1): "
        "message delete not permitted (err_code 10057)"
    )
    assert orders.json("stream", "info", "NODEL")["state"]["messages"] == 1


def test_rm(orders):
    r = orders("stream", "rm", "ORDERS", input="n\n", code=1)
    assert "Really delete stream ORDERS with 5 messages and 0 consumers?" in r.stdout
    assert orders.json("stream", "ls", "--names") == ["ORDERS"]
    orders("stream", "rm", "ORDERS", input="y\n")
    assert orders.json("stream", "ls", "--names") == []
    assert (
        orders("stream", "rm", "ORDERS", "-f", code=1).stderr.strip()
        == "Error: stream 'ORDERS' not found (err_code 10059); streams: none"
    )


def test_invalid_values_are_usage_errors(cli):
    r = cli("stream", "add", "S", "--max-age", "1x", code=2)
    assert "invalid duration '1x'" in r.stderr
    r = cli("stream", "add", "S", "--max-bytes", "10XB", code=2)
    assert "invalid size '10XB'" in r.stderr
    r = cli("stream", "add", "S", "--retention", "forever", code=2)
    assert "forever" in r.stderr
    assert not (cli.store / "store.json").exists()  # nothing was created


def test_config_errors_name_the_server_error(cli):
    r = cli("stream", "add", "bad.name", code=1)
    assert r.stderr.startswith("Error: stream name is required and can not contain")
    assert r.stderr.strip().endswith("(err_code 10052)")
    r = cli("stream", "add", "S", "--max-age", "1h", "--dupe-window", "2h", code=1)
    assert "duplicates window can not be larger then max age (err_code 10052)" in r.stderr


def test_json_outputs_are_json(orders):
    for args in (
        ["stream", "info", "ORDERS"],
        ["stream", "ls"],
        ["stream", "report"],
        ["stream", "get", "ORDERS", "1"],
    ):
        json.loads(orders(*args, "--json").stdout)


def test_check_reports_damage_and_repair_keeps_the_intact_messages(cli):
    cli("stream", "add", "S", "--subjects", "s.>")
    for i in range(5):
        cli("pub", "s.x", f"m{i}")
    assert "Stream S: OK, 5 messages checked" in cli("stream", "check", "S").stdout
    (dat,) = (cli.store / "streams" / "S" / "data" / "blk").glob("*.dat")
    raw = bytearray(dat.read_bytes())
    raw[2 * 2] ^= 0xFF  # inside message 3's payload ("m2"); 4 and 5 are intact
    dat.write_bytes(bytes(raw))
    out = cli("stream", "check", "S", code=1).stdout
    assert "PROBLEM: " in out and "(sequences 3)" in out and "problems remain" in out
    report = cli.json("stream", "check", "S", "--repair")
    assert report["ok"] and report["lost"] == [3] and report["messages"] == 4
    assert report["problems"][0]["seqs"] == [3] and report["problems"][0]["repaired"]
    assert "OK, 4 messages checked" in cli("stream", "check", "S").stdout


def test_no_cluster_block_or_replicas_column_on_the_engine(orders):
    # (On a cluster: tests/cluster/test_cluster_info.py.)
    assert "Cluster Information" not in orders("stream", "info", "ORDERS").stdout
    assert "Replicas" not in orders("stream", "report").stdout


def test_view_pub_edit_and_rmm_on_a_nats_server(cli, server):
    url = server.url
    try:
        cli("-s", url, "stream", "add", "SRV_V", "--subjects", "srvv.>", "--max-age", "7d")
        acks = cli.json_lines("-s", url, "pub", "srvv.a", "x{{Count}}", "--count", "3")
        # as nats-py's PubAck
        assert acks[0] == {"stream": "SRV_V", "seq": 1, "domain": None, "duplicate": None, "val": None}
        r = cli("-s", url, "stream", "view", "SRV_V", "2", "--raw")
        assert r.stdout == "x1\nx2\n" and "more messages after sequence 2" in r.stderr
        assert cli("-s", url, "stream", "view", "SRV_V", "2", "--raw", "--count", "3").stdout == "x1\nx2\nx3\n"
        r = cli("-s", url, "stream", "edit", "SRV_V", "--max-age", "1d")
        assert r.stdout.startswith("Stream SRV_V updated:\n  Maximum Age: 7d -> 1d\n\n")
        r = cli("-s", url, "stream", "rmm", "SRV_V", "99", "-f", code=1)
        assert (
            r.stderr.startswith("Error: cannot delete message 99 from stream SRV_V (sequences 1..3): ")
            and "(err_code " in r.stderr
        )
        assert cli.json("-s", url, "stream", "info", "SRV_V")["state"]["messages"] == 3
    finally:
        with jetspark.connect(url) as js:
            if "SRV_V" in js.stream_names():
                js.delete_stream("SRV_V")
