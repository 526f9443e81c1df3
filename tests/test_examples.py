"""Every script in examples/ runs as a reader would run it, in an empty directory, printing what
the script says it shows: each in a fresh interpreter, but for the two Spark scripts, which run
one after the other in one interpreter (one JVM launch instead of two, as a reader running both
with ``%run``): each builds and stops its own session and starts its store and checkpoint afresh,
so the second runs where the first left its files."""

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
    tested = re.findall(r'run(?:_spark)?\("(\w+\.py)"', Path(__file__).read_text())
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


# Runs the scripts named on its command line in turn, each as __main__ in this one interpreter,
# a line "== <script>" before each one's output.
BOTH = """
import runpy, sys
for script in sys.argv[1:]:
    print("==", script.rsplit("/", 1)[-1], flush=True)
    runpy.run_path(script, run_name="__main__")
"""


@pytest.fixture(scope="module")
def spark_runs(tmp_path_factory) -> dict[str, list[str]]:
    """What each Spark script printed, both run in one interpreter in one empty directory."""
    cwd = tmp_path_factory.mktemp("spark-examples")
    scripts = ["spark_source.py", "spark_sink.py"]
    done = subprocess.run(
        [sys.executable, "-c", BOTH, *(str(EXAMPLES / s) for s in scripts)],
        cwd=cwd, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    out: dict[str, list[str]] = {}
    for line in lines(done):
        if line.startswith("== "):
            out[line[3:]] = []
        else:
            out[list(out)[-1]].append(line)
    assert list(out) == scripts, done.stdout
    return out


def run_spark(script: str, runs: dict[str, list[str]]) -> list[str]:
    return runs[script]


@pytest.mark.spark
def test_spark_source(spark_runs):
    assert run_spark("spark_source.py", spark_runs) == [
        "batch: orders.new: 4 messages",
        "batch: orders.paid: 2 messages",
        "batch: total amount 210",
        "streaming: 6 rows in 2 micro-batches",
        "consumer 'spark-orders': ack floor at stream seq 6, 0 to deliver",
    ]


@pytest.mark.spark
def test_spark_sink(spark_runs):
    assert run_spark("spark_sink.py", spark_runs) == [
        "after the first run: AUDIT holds 4 messages",
        "after the second run: AUDIT holds 6 messages: {'audit.events.login': 5, 'audit.note': 1}",
    ]
