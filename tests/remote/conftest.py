"""Fixtures for the nats:// backend: real nats-servers started on free loopback ports.

``server`` (tests/conftest.py) is one JetStream server for the session; tests that stop a server
or need authentication or TLS start their own with ``start_server(*args)``.
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid

import pytest

import jetspark
from tests.conftest import drop_streams
from tests.reference import NatsServer

pytestmark = pytest.mark.server


class ArgsServer(NatsServer):
    """tests.reference.NatsServer with extra command-line arguments (auth, TLS)."""

    def __init__(self, *args: str) -> None:
        super().__init__()
        self.args = list(args)
        self.scheme = "tls" if "--tls" in args or "--tlsverify" in args else "nats"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self) -> "ArgsServer":
        self.proc = subprocess.Popen(
            [self.binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", self.store_dir, *self.args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"nats-server exited with {self.proc.returncode}")
                time.sleep(0.02)
        raise RuntimeError("nats-server did not start listening within 10 s")

    def kill(self) -> None:
        """Stop the process but keep its store, so start() brings the same server back."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def start_server():
    started = []

    def start(*args: str) -> ArgsServer:
        s = ArgsServer(*args).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def js(server):
    handle = jetspark.connect(server.url, timeout=3)
    yield handle
    if not handle._closed:
        drop_streams(handle)
        handle.close()


@pytest.fixture
def name():
    """A fresh stream name per call (nats-server answers a delete before its files are gone)."""
    return lambda prefix="S": f"{prefix}{uuid.uuid4().hex[:10].upper()}"


@pytest.fixture
def engine(tmp_path):
    handle = jetspark.connect(tmp_path / "store")
    yield handle
    for n in handle.stream_names():
        handle.delete_stream(n)
    handle.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
