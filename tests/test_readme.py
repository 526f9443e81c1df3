"""Every Python block of the README runs as pasted: each into a fresh script, run by a fresh
interpreter, in one directory where the blocks before it have already run (a reader copies
one block at a time).

Blocks that name a NATS server or cluster on the default ports run against the suite's
server and cluster (the URLs swapped, nothing else); the rest run as written.  Skipped, with
the reason shown: the TLS block (certificates and hosts n1..n3 this machine does not have),
the cluster pipeline (a shared checkpoint directory; tests/connector/test_cluster_streaming.py
runs that query) and the Spark Connect block (tests/connector/test_spark_connect.py runs the
same ``local_session()`` under ``SPARK_REMOTE``; a Connect server costs a JVM of its own)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import jetspark
from tests.conftest import drop_streams

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
SERVER_URL = "nats://127.0.0.1:4222"
CLUSTER_URL = "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224"

SKIPPED = {
    "tls://n1": "needs TLS certificates and the hosts n1..n3",
    "/shared/ckpt": "a Spark query on a cluster with a shared checkpoint directory: tests/connector/test_cluster_streaming.py runs it",
    "SPARK_REMOTE": "Spark Connect: tests/connector/test_spark_connect.py runs local_session() under SPARK_REMOTE (a Connect server per run)",
}


def test_the_readme_has_its_blocks():
    assert len(BLOCKS) >= 8


@pytest.fixture(scope="module")
def reader_dir(tmp_path_factory):
    """The reader's directory: every block runs here, after the ones before it."""
    return tmp_path_factory.mktemp("readme")


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=lambda i: f"block{i}")
def test_readme_block_runs_as_pasted(index, reader_dir, request):
    code = BLOCKS[index]
    for marker, why in SKIPPED.items():
        if marker in code:
            pytest.skip(f"README block {index}: {why}")
    cleanup = None
    if CLUSTER_URL in code:
        cluster = request.getfixturevalue("cluster")
        code, cleanup = code.replace(CLUSTER_URL, cluster.url), cluster.url
    elif SERVER_URL in code:
        server = request.getfixturevalue("server")
        code, cleanup = code.replace(SERVER_URL, server.url), server.url
    script = reader_dir / f"block{index}.py"
    script.write_text(code)
    try:
        proc = subprocess.run([sys.executable, script.name], cwd=reader_dir, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"README block {index} failed:\n{code}\n--- stderr:\n{proc.stderr[-3000:]}"
    finally:
        if cleanup is not None:  # the shared server and cluster: leave them as found
            with jetspark.connect(cleanup, timeout=15) as js:
                drop_streams(js)
