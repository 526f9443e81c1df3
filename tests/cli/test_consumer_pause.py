"""jetspark consumer pause|resume, on the embedded engine and on a NATS server."""

from __future__ import annotations

import re
import uuid

import pytest

import jetspark


@pytest.fixture(params=["engine", "server"])
def where(request, cli):
    """(global options, stream name): the test's store, or the session's nats-server."""
    if request.param == "engine":
        yield [], "ORDERS"
        return
    server = request.getfixturevalue("server")
    name = f"CLIP{uuid.uuid4().hex[:8].upper()}"
    yield ["-s", server.url], name
    with jetspark.connect(server.url) as js:
        if name in js.stream_names():
            js.delete_stream(name)


def test_pause_then_resume(cli, where):
    opts, s = where
    cli(*opts, "stream", "add", s, "--subjects", f"{s}.>")
    cli(*opts, "consumer", "add", s, "NEW", "--ack", "explicit")
    out = cli(*opts, "consumer", "pause", s, "NEW", "1h", "-f").stdout
    assert out.startswith(f"Consumer {s} > NEW: paused until ") and out.rstrip().endswith(" remaining)")
    info = cli.json(*opts, "consumer", "info", s, "NEW")
    assert info["paused"] is True and 0 < info["pause_remaining"] <= 3600 * 10**9
    shown = cli(*opts, "consumer", "info", s, "NEW").stdout.split("Paused Until:")[1]
    assert re.match(r" \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \((1h|59m\d+s) remaining\)\n", shown), shown
    doc = cli.json(*opts, "consumer", "pause", s, "NEW", "2100-01-01T00:00:00Z", "-f")
    assert doc["paused"] is True and doc["pause_until"].startswith("2100-01-01T00:00:00")
    assert cli(*opts, "consumer", "resume", s, "NEW", "-f").stdout == f"Consumer {s} > NEW resumed\n"
    info = cli.json(*opts, "consumer", "info", s, "NEW")
    assert "paused" not in info and "pause_until" not in info["config"]
    # A time already past pauses nothing, and says so.
    out = cli(*opts, "consumer", "pause", s, "NEW", "2020-01-02T03:04:05Z", "-f").stdout
    assert out == f"Consumer {s} > NEW: not paused (2020-01-02 03:04:05 UTC has passed)\n"


def test_pause_and_resume_ask_first(cli, where):
    opts, s = where
    cli(*opts, "stream", "add", s, "--subjects", f"{s}.>")
    cli(*opts, "consumer", "add", s, "NEW", "--ack", "explicit")
    r = cli(*opts, "consumer", "pause", s, "NEW", "1h", input="n\n", code=1)
    assert f"Pause consumer {s} > NEW until " in r.stdout
    assert "paused" not in cli.json(*opts, "consumer", "info", s, "NEW")
    cli(*opts, "consumer", "pause", s, "NEW", "1h", input="y\n")
    assert cli.json(*opts, "consumer", "info", s, "NEW")["paused"] is True
    cli(*opts, "consumer", "resume", s, "NEW", input="n\n", code=1)
    assert cli.json(*opts, "consumer", "info", s, "NEW")["paused"] is True
    cli(*opts, "consumer", "resume", s, "NEW", input="y\n")
    assert "paused" not in cli.json(*opts, "consumer", "info", s, "NEW")


def test_bad_arguments_change_nothing(cli, where):
    opts, s = where
    cli(*opts, "stream", "add", s, "--subjects", f"{s}.>")
    cli(*opts, "consumer", "add", s, "NEW", "--ack", "explicit")
    r = cli(*opts, "consumer", "pause", s, "NEW", "soon", "-f", code=2)
    assert "Invalid value for UNTIL: 'soon' is neither a duration (1h) nor an RFC 3339 time" in r.stderr
    r = cli(*opts, "consumer", "pause", s, "NOPE", "1h", "-f", code=1)
    assert "err_code 10014" in r.stderr
    r = cli(*opts, "consumer", "resume", "NOSTREAM", "NEW", "-f", code=1)
    assert "err_code 10059" in r.stderr
    assert "paused" not in cli.json(*opts, "consumer", "info", s, "NEW")
