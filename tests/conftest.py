"""Shared fixtures.

``js`` is the contract suite's backend (tests/contract/): the same synchronous
JetStream verbs answered by the embedded engine, by jetspark's nats:// backend
and by the oracle (a real nats-server through nats-py's own API,
tests/oracle.py), each with file and memory storage, so every scenario is
checked against the server.  ``clock.advance(s)`` moves the engine's injected
clock, and really waits on the server.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest

import jetspark
from tests.oracle import OracleJS
from tests.servers import NatsCluster, NatsServer


class FakeClock:
    """An injectable wall clock in nanoseconds; tests move it instead of sleeping."""

    def __init__(self) -> None:
        self.now_ns = time.time_ns()

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, seconds: float) -> None:
        self.now_ns += int(seconds * 1_000_000_000)


class RealClock:
    """The server's time passes for real; ``advance`` waits for it."""

    def advance(self, seconds: float) -> None:
        time.sleep(seconds)


class Backend:
    """Forwards to a JetStream API, defaulting ``storage`` to the backend's kind."""

    def __init__(self, js, kind: str, storage: str, clock, url: str | None = None, replicas: int = 1) -> None:
        self._js = js
        self.kind = kind
        self.storage = storage
        self.clock = clock
        self.url = url  # the nats-server's, for a second client (the oracle) on the same streams
        self.replicas = replicas  # streams made through add_stream: R3 on the cluster backends

    @property
    def is_server(self) -> bool:
        """A real nats-server answers: through jetspark's nats:// backend or the oracle."""
        return self.kind in ("nats", "oracle")

    def _defaults(self, config, params: dict) -> dict:
        if (config is None or config.storage is None) and "storage" not in params:
            params["storage"] = self.storage
        if self.replicas > 1 and (config is None or config.num_replicas in (None, 1)) and "num_replicas" not in params:
            params["num_replicas"] = self.replicas
        return params

    def add_stream(self, config=None, **params):
        return self._js.add_stream(config, **self._defaults(config, params))

    def update_stream(self, config=None, **params):
        return self._js.update_stream(config, **self._defaults(config, params))

    def msg_bytes(self, subject: str, payload: bytes, hdr: bytes = b"") -> int:
        """The server's per-message byte accounting (docs/semantics.md §3.1)."""
        if self.storage == "memory":
            return len(subject) + len(hdr) + len(payload) + 16
        if hdr:
            return 22 + len(subject) + 4 + len(hdr) + len(payload) + 8
        return 22 + len(subject) + len(payload) + 8

    def __getattr__(self, name):
        return getattr(self._js, name)


@pytest.fixture(scope="session")
def nats_server():
    server = NatsServer().start()
    yield server
    server.stop()


# The stream the session's ``server`` always keeps: nats-server removes an account's
# store directory, asynchronously, once its last stream is deleted, and a stream
# created meanwhile fails (10049).  One stream that is never deleted keeps the directory.
KEEPER = "KEEPER"


@pytest.fixture(scope="session")
def server():
    """A nats-server for the jetspark-side tests (nats:// backend, Spark connector), which
    empty it after each test with ``drop_streams``."""
    s = NatsServer().start()
    with jetspark.connect(s.url) as js:
        js.add_stream(name=KEEPER, subjects=["keeper.>"])
    yield s
    s.stop()


@pytest.fixture(scope="session")
def cluster():
    """A 3-node JetStream cluster (natsdev/servers.py), ready (meta leader elected, every node
    current) before the first test.  Tests delete what they create; a node they kill they
    restart.  Unlike a single server, a cluster was not seen to lose a stream created right
    after the account's last one was deleted, so it needs no KEEPER."""
    c = NatsCluster().start()
    yield c
    c.stop()


def drop_streams(js) -> None:
    """Delete every stream of the ``server`` fixture's but KEEPER."""
    for name in js.stream_names():
        if name != KEEPER:
            js.delete_stream(name)


@pytest.fixture
def store_path(tmp_path):
    return tmp_path / "store"


BACKENDS = ["engine-file", "engine-memory", "nats-file", "nats-memory", "oracle-file", "oracle-memory"]
# The backends that implement jetspark's own verbs (read_batches, publish_batch, ...).
JETSPARK_BACKENDS = ["engine-file", "engine-memory", "nats-file", "nats-memory"]
# The session's 3-node cluster with R3 file streams: modules that touch replication
# (retention, consumers, bulk verbs) add them with ``with_cluster`` (issue: the cluster).
CLUSTER_BACKENDS = ["nats-cluster", "oracle-cluster"]
# Requests on a replicated stream wait for raft (a new stream's or consumer's leader
# election, a quorum's write): slower than on one server when the machine is loaded.
CLUSTER_TIMEOUT = 15.0


def _open(kind: str, url: str, timeout: float = 5.0):
    return OracleJS(url, timeout=timeout) if kind == "oracle" else jetspark.connect(url, timeout=timeout)


def _backend(request, tmp_path):
    """engine-*: the embedded engine on a tmp store; nats-*: a real nats-server through
    jetspark's own nats:// backend (jetspark.connect("nats://...")); oracle-*: the same
    server through nats-py's public API (tests/oracle.py), which decides what is right."""
    kind, storage = request.param.split("-")
    if storage == "cluster":
        url = request.getfixturevalue("cluster").url
        js = _open(kind, url, CLUSTER_TIMEOUT)
        try:
            yield Backend(js, kind, "file", RealClock(), url, replicas=3)
        finally:
            for name in js.stream_names():
                js.delete_stream(name)
            js.close()
    elif kind == "engine":
        clock = FakeClock()
        js = jetspark.connect(tmp_path / "store", clock=clock)
        yield Backend(js, kind, storage, clock)
        for name in js.stream_names():  # memory streams live in /dev/shm: leave nothing behind
            js.delete_stream(name)
        js.close()
    elif storage == "file":
        # nats-server answers a stream delete before its files are gone, so a file
        # stream created right after the previous test's cleanup can come back
        # with old messages (or fail with 10049): each file test gets its own
        # server (starting one takes ~25 ms).
        server = NatsServer().start()
        js = _open(kind, server.url)
        try:
            yield Backend(js, kind, storage, RealClock(), server.url)
        finally:
            js.close()
            server.stop()
    else:
        server = request.getfixturevalue("nats_server")
        js = _open(kind, server.url)
        try:
            yield Backend(js, kind, storage, RealClock(), server.url)
        finally:
            for name in js.stream_names():
                js.delete_stream(name)
            js.close()


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    yield from _backend(request, tmp_path)


@pytest.fixture(params=JETSPARK_BACKENDS)
def jetspark_backend(request, tmp_path):
    """The backends with jetspark's own verbs; check them against ``oracle`` on the same server."""
    yield from _backend(request, tmp_path)


@pytest.fixture
def js(backend):
    return backend


def with_cluster(backends: list[str], *, reference: bool = True):
    """A module's ``backend``/``jetspark_backend`` fixture over ``backends`` and the cluster's:
    ``backend = with_cluster(BACKENDS)`` in the module.  ``reference=False`` leaves out the
    oracle on the cluster (for a module whose cluster answers are pinned in its tests)."""
    params = backends + [
        b for b in CLUSTER_BACKENDS if b != "oracle-cluster" or ("oracle-file" in backends and reference)
    ]

    @pytest.fixture(params=params)
    def fixture(request, tmp_path):
        yield from _backend(request, tmp_path)

    return fixture


# ---------------------------------------------------------------- a full disk


class Disk:
    """A small mounted filesystem (``tmpfs``): ``disk / "store"`` is a path on it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / "filler"

    def __truediv__(self, name: str) -> Path:
        return self.root / name

    def __str__(self) -> str:
        return str(self.root)

    def fill(self, keep: int = 0) -> None:
        """Take every free byte but ``keep``, in a file ``free()`` deletes."""
        with open(self.filler, "ab", buffering=0) as f:
            for size in (1 << 16, 4096, 1):
                try:
                    while True:
                        f.write(b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
        if keep:
            os.truncate(self.filler, max(0, os.path.getsize(self.filler) - keep))

    def free(self) -> None:
        self.filler.unlink()


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size)``: a tmpfs of that size (``"8m"``) under the test's tmp dir, to fill
    (``fill(keep=0)``) and free (``free()``); unmounted afterwards.  Mounting needs root, as
    CI runs; elsewhere the test is skipped, saying why."""
    mounted: list[Path] = []

    def mount(size: str) -> Disk:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs to fill needs root (CI runs as root)")
        root = tmp_path / f"disk{len(mounted)}"
        root.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(root)], capture_output=True, text=True
        )
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(root)
        return Disk(root)

    yield mount
    for root in mounted:
        subprocess.run(["umount", "-l", str(root)], check=False)
