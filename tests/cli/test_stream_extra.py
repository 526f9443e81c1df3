"""jetspark stream subjects|find|seal|copy."""

from __future__ import annotations

import pytest

import jetspark


def test_subjects(orders):
    orders("pub", "orders.new", "x")
    assert orders.json("stream", "subjects", "ORDERS") == {"orders.new": 4, "orders.eu.new": 1, "orders.shipped": 1}
    assert list(orders.json("stream", "subjects", "ORDERS", "--sort", "name")) == [
        "orders.eu.new",
        "orders.new",
        "orders.shipped",
    ]
    assert list(orders.json("stream", "subjects", "ORDERS", "--sort", "name", "-R")) == [
        "orders.shipped",
        "orders.new",
        "orders.eu.new",
    ]
    assert orders.json("stream", "subjects", "ORDERS", "orders.*.new") == {"orders.eu.new": 1}
    assert orders("stream", "subjects", "ORDERS", "--names").stdout.splitlines() == [
        "orders.new",
        "orders.eu.new",
        "orders.shipped",
    ]
    text = orders("stream", "subjects", "ORDERS").stdout.splitlines()
    assert text[0] == "3 subjects in stream ORDERS"
    assert [line.split() for line in text[2:3] + text[4:]] == [
        ["Subject", "Messages"],
        ["orders.new", "4"],
        ["orders.eu.new", "1"],
        ["orders.shipped", "1"],
    ]


def test_subjects_off_the_happy_path(orders):
    assert (
        orders("stream", "subjects", "ORDERS", "nothing.>").stdout == "No subjects in stream ORDERS match nothing.>\n"
    )
    assert orders.json("stream", "subjects", "ORDERS", "nothing.>") == {}
    r = orders("stream", "subjects", "ORDERS", "a..b", code=2)
    assert "'a..b' is not a subject" in r.stderr
    r = orders("stream", "subjects", "NOPE", code=1)
    assert r.stderr.startswith("Error: stream 'NOPE' not found (err_code 10059)")


@pytest.fixture
def three(orders):
    """ORDERS (5 messages, 1 consumer), EMPTY (no messages), LOGS (logs.>, 1 message)."""
    orders("consumer", "add", "ORDERS", "C")
    orders("stream", "add", "EMPTY", "--subjects", "empty.*")
    orders("stream", "add", "LOGS", "--subjects", "logs.>")
    orders("pub", "logs.app", "started")
    return orders


@pytest.mark.parametrize(
    "flags, names",
    [
        ([], ["EMPTY", "LOGS", "ORDERS"]),
        (["--subject", "orders.eu.new"], ["ORDERS"]),
        (["--subject", "*.x"], ["EMPTY", "LOGS", "ORDERS"]),  # empty.x, logs.x, orders.x
        (["--subject", "logs"], []),  # logs.> needs one token more
        (["--subject", ">"], ["EMPTY", "LOGS", "ORDERS"]),
        (["--empty"], ["EMPTY"]),
        (["--empty", "--invert"], ["LOGS", "ORDERS"]),
        (["--consumers", "1"], ["EMPTY", "LOGS"]),
        (["--replicas", "1"], ["EMPTY", "LOGS", "ORDERS"]),
        (["--created", "1h"], []),
        (["--created", "1h", "--invert"], ["EMPTY", "LOGS", "ORDERS"]),
        (["--idle", "1h"], ["EMPTY"]),  # never a message: idle
        (["--subject", "logs.*", "--empty"], []),  # every criterion must hold
    ],
)
def test_find(three, flags, names):
    assert three.json("stream", "find", *flags, "--names") == names
    assert three("stream", "find", *flags, "-n").stdout.split() == names
    assert [i["config"]["name"] for i in three.json("stream", "find", *flags)] == names


def test_find_text_and_errors(three):
    text = three("stream", "find", "--subject", "logs.app").stdout.splitlines()
    assert text[0] == "1 stream found"
    assert text[4].split()[:2] == ["LOGS", "logs.>"]
    assert three("stream", "find", "--subject", "none").stdout == "No streams match\n"
    assert "'a..b' is not a subject" in three("stream", "find", "--subject", "a..b", code=2).stderr
    assert "invalid duration 'soon'" in three("stream", "find", "--idle", "soon", code=2).stderr


def test_seal(orders):
    r = orders("stream", "seal", "ORDERS", input="n\n", code=1)
    assert "Really seal stream ORDERS?" in r.stdout
    assert orders.json("stream", "info", "ORDERS")["config"]["sealed"] is False
    r = orders("stream", "seal", "ORDERS", "-f")
    assert r.stdout.startswith("Stream ORDERS sealed\n") and "Sealed: true" in r.stdout
    # Sealed: no publish, delete, purge or unseal; reading still works.
    assert (
        orders("pub", "orders.new", "late", code=1).stderr
        == "Error: invalid operation on sealed stream (err_code 10109)\n"
    )
    assert "sealed" in orders("stream", "purge", "ORDERS", "-f", code=1).stderr
    assert orders("stream", "rmm", "ORDERS", "1", "-f", code=1).stderr.startswith(
        "Error: cannot delete message 1 from stream ORDERS"
    )
    assert (
        "unseal"
        in orders(
            "stream", "edit", "ORDERS", "--config", _write(orders, {"name": "ORDERS", "subjects": ["orders.>"]}), code=1
        ).stderr
    )
    assert orders.json("stream", "info", "ORDERS")["state"]["messages"] == 5
    assert orders("stream", "get", "ORDERS", "1", "--raw").stdout == '{"id": 1}'
    assert orders.json("stream", "seal", "ORDERS", "-f")["config"]["sealed"] is True  # again: nothing changes


def _write(cli, config: dict) -> str:
    import json

    path = cli.store.parent / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_copy(orders):
    orders("stream", "edit", "ORDERS", "--max-age", "7d", "--description", "all orders", "--max-msgs-per-subject", "3")
    info = orders.json("stream", "copy", "ORDERS", "ARCHIVE", "--subjects", "archive.>", "--max-age", "30d")
    c = info["config"]
    assert (c["name"], c["subjects"], c["max_age"], c["description"], c["max_msgs_per_subject"]) == (
        "ARCHIVE",
        ["archive.>"],
        30 * 86400.0,
        "all orders",
        3,
    )
    assert info["state"]["messages"] == 0  # the configuration, not the messages
    r = orders("stream", "copy", "ORDERS", "COPY2", "--subjects", "copy2.>")
    assert (
        r.stdout.startswith("Stream COPY2 added, a copy of ORDERS's configuration\n") and "Maximum Age: 7d" in r.stdout
    )


def test_copy_off_the_happy_path(orders):
    r = orders("stream", "copy", "ORDERS", "OTHER", code=2)
    assert "the copy would capture SOURCE's subjects (orders.>); give it its own with --subjects" in r.stderr
    assert (
        "SOURCE and DESTINATION are the same stream"
        in orders("stream", "copy", "ORDERS", "ORDERS", "--subjects", "x", code=2).stderr
    )
    r = orders("stream", "copy", "ORDERS", "OTHER", "--subjects", "orders.new", code=1)
    assert "(err_code 10065)" in r.stderr  # overlapping subjects, the server's refusal
    assert orders("stream", "copy", "NOPE", "OTHER", "--subjects", "x", code=1).stderr.startswith(
        "Error: stream 'NOPE' not found"
    )
    assert (
        "--config: stream copy takes SOURCE's configuration"
        in orders("stream", "copy", "ORDERS", "O", "--config", _write(orders, {}), code=2).stderr
    )
    assert orders.json("stream", "ls", "--names") == ["ORDERS"]  # nothing was added


def test_a_sealed_stream_s_copy_is_open(orders):
    orders("stream", "seal", "ORDERS", "-f")
    info = orders.json("stream", "copy", "ORDERS", "OPEN", "--subjects", "open.>")
    assert info["config"]["sealed"] is False
    orders("pub", "open.x", "y")


def test_the_commands_on_a_nats_server(cli, server):
    url = server.url
    try:
        cli("-s", url, "stream", "add", "SRV", "--subjects", "srv.>")
        cli("-s", url, "pub", "srv.a", "x", "--count", "2")
        cli("-s", url, "pub", "srv.b", "y")
        assert cli.json("-s", url, "stream", "subjects", "SRV") == {"srv.a": 2, "srv.b": 1}
        assert cli.json("-s", url, "stream", "find", "--subject", "srv.a", "--names") == ["SRV"]
        info = cli.json("-s", url, "stream", "copy", "SRV", "SRV2", "--subjects", "srv2.>", "--max-msgs", "10")
        assert (info["config"]["subjects"], info["config"]["max_msgs"]) == (["srv2.>"], 10)
        assert cli.json("-s", url, "stream", "seal", "SRV", "-f")["config"]["sealed"] is True
        assert "(err_code" in cli("-s", url, "pub", "srv.a", "late", code=1).stderr
        cli("-s", url, "consumer", "add", "SRV", "P", "--target", "deliver.p", "--heartbeat", "1s", "--flow-control")
        r = cli("-s", url, "consumer", "next", "SRV", "P", "--wait", "10s", code=1)
        assert r.stderr.startswith("Error: consumer 'P' on stream 'SRV' is a push consumer (it delivers to deliver.p)")
        cli("-s", url, "consumer", "add", "SRV", "--ephemeral", "--inactive-threshold", "1h")
        rows = cli.json("-s", url, "consumer", "report", "SRV")
        assert sorted((r["mode"], r["durable"]) for r in rows) == [("pull", False), ("push", True)]
        assert all(r["replicas"] == 1 for r in cli.json("-s", url, "stream", "report"))
    finally:
        with jetspark.connect(url) as js:
            for name in set(js.stream_names()) & {"SRV", "SRV2"}:
                js.delete_stream(name)
