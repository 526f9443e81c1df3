"""Every script in examples/ runs as a reader would run it: a fresh interpreter in an empty
directory, printing what the script says it shows.  The Spark scripts start a JVM each."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import drop_streams

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(script: str, cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def lines(done: subprocess.CompletedProcess) -> list[str]:
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_every_example_is_listed_and_tested():
    scripts = sorted(p.name for p in EXAMPLES.glob("*.py"))
    listed = re.findall(r"\[`(\w+\.py)`\]", (EXAMPLES / "README.md").read_text())
    tested = re.findall(r'run\("(\w+\.py)"', Path(__file__).read_text())
    assert scripts and sorted(listed) == scripts and set(tested) == set(scripts)


def test_engine_basics(tmp_path):
    expected = [
        "published 5 messages, the last at ORDERS seq 5",
        "a message id published twice: seq 6 then seq 6, duplicate=True",
        "fetched and acked 4: seqs [1, 2, 3, 4]",
        "consumer 'worker': ack floor at stream seq 4, 2 messages still to deliver",
        "seq 5 was nak'd and delivered again (delivery 2)",
        "consumer 'worker': ack floor at stream seq 6, 0 to deliver, 0 unacknowledged",
    ]
    assert lines(run("engine_basics.py", tmp_path)) == expected
    assert (tmp_path / "jetspark-example-data").is_dir()
    # Run again in the same place: it starts afresh, and says the same.
    assert lines(run("engine_basics.py", tmp_path)) == expected


@pytest.mark.server
def test_nats_server(server, tmp_path):
    import jetspark

    # The URL as the argument, and from $NATS_URL.
    for args, env in (((server.url,), None), ((), {"NATS_URL": server.url})):
        assert lines(run("nats_server.py", tmp_path, *args, env=env)) == [
            "published 5 messages, the last at EXAMPLE_ORDERS seq 5",
            """fetched and acked 5: ['{"id": 1}', '{"id": 2}', '{"id": 3}', '{"id": 4}', '{"id": 5}']""",
            "consumer 'worker': ack floor at stream seq 5, 0 to deliver",
            "read_batches: 5 rows",
        ]
        with jetspark.connect(server.url) as js:
            assert "EXAMPLE_ORDERS" not in js.stream_names()  # the example cleans up after itself
            drop_streams(js)
    assert not list(tmp_path.iterdir())  # and writes nothing locally


def test_nats_server_without_a_server(tmp_path):
    from tests.servers import free_port

    done = run("nats_server.py", tmp_path, f"nats://127.0.0.1:{free_port()}")
    assert done.returncode == 1 and "ServerConnectionError" in done.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.spark
def test_spark_source(tmp_path):
    assert lines(run("spark_source.py", tmp_path)) == [
        "batch: orders.new: 4 messages",
        "batch: orders.paid: 2 messages",
        "batch: total amount 210",
        "streaming: 6 rows in 2 micro-batches",
        "consumer 'spark-orders': ack floor at stream seq 6, 0 to deliver",
    ]


@pytest.mark.spark
def test_spark_sink(tmp_path):
    assert lines(run("spark_sink.py", tmp_path)) == [
        "after the first run: AUDIT holds 4 messages",
        "after the second run: AUDIT holds 6 messages: {'audit.events.login': 5, 'audit.note': 1}",
    ]
