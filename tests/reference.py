"""The reference side of the conformance suite: a real nats-server behind jetspark's API.

``ServerJS`` speaks to a nats-server through nats-py (its JSON API requests,
on an event loop in a private thread) and answers with jetspark's own
dataclasses and error classes, so one behavioural test runs unchanged
against the embedded engine and against the server, and the server decides
what is right.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from email.parser import BytesParser
from typing import Any, Optional

import nats
from nats.errors import NoRespondersError

from jetspark import api
from jetspark.errors import NoStreamResponseError, error_from_response

_NS = 1_000_000_000
_DURATIONS_STREAM = ("max_age", "duplicate_window")
_ZERO_TIME = "0001-01-01T00:00:00Z"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NatsServer:
    """A nats-server with JetStream on 127.0.0.1, a free port and its own store dir."""

    def __init__(self) -> None:
        self.binary = shutil.which("nats-server") or os.path.join(os.path.dirname(os.sys.executable), "nats-server")
        self.port = _free_port()
        self.store_dir = tempfile.mkdtemp(prefix="jetspark-nats-")
        self.proc: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> "NatsServer":
        self.proc = subprocess.Popen(
            [self.binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", self.store_dir],
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

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.store_dir, ignore_errors=True)


class _Loop:
    """An asyncio loop on a daemon thread; ``run(coro)`` blocks for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


# ---------------------------------------------------------------- wire <-> dataclasses


def _ns_to_s(v):
    return None if v is None else v / _NS


def _time(v: Optional[str]):
    if not v or v == _ZERO_TIME:
        return None
    return _parse_iso(v)


def _parse_iso(v: str):
    import datetime as dt

    s = v.replace("Z", "+00:00")
    if "." in s:
        date_part, frac_tz = s.split(".", 1)
        frac, tz = frac_tz.split("+")
        s = f"{date_part}.{frac[:6].ljust(6, '0')}+{tz}"
    return dt.datetime.fromisoformat(s).astimezone(dt.timezone.utc)


def stream_config_to_wire(config: api.StreamConfig) -> dict:
    d = config.as_dict()
    for k in _DURATIONS_STREAM:
        if k in d:
            d[k] = int(round(d[k] * _NS))
    return d


def stream_config_from_wire(d: dict) -> api.StreamConfig:
    d = dict(d)
    for k in _DURATIONS_STREAM:
        if k in d:
            d[k] = _ns_to_s(d[k])
    for k, enum in (("retention", api.RetentionPolicy), ("storage", api.StorageType), ("discard", api.DiscardPolicy)):
        if k in d:
            d[k] = enum(d[k])
    # The server stamps its own version into metadata; it is not part of the user's config.
    meta = {k: v for k, v in (d.get("metadata") or {}).items() if not k.startswith("_nats.")}
    d["metadata"] = meta or None
    return api.StreamConfig.from_response(d)


def stream_info_from_wire(d: dict) -> api.StreamInfo:
    state = dict(d["state"])
    state["first_ts"] = _time(state.get("first_ts"))
    state["last_ts"] = _time(state.get("last_ts"))
    state.setdefault("num_deleted", 0)
    state.setdefault("num_subjects", 0)
    return api.StreamInfo(
        config=stream_config_from_wire(d["config"]),
        state=api.StreamState.from_response(state),
        created=_time(d.get("created")),
        did_create=d.get("did_create"),
    )


def _parse_headers(hdrs: bytes) -> Optional[dict]:
    # "NATS/1.0\r\nKey: value\r\n...\r\n\r\n"
    _, _, rest = hdrs.partition(b"\r\n")
    parsed = BytesParser().parsebytes(rest)
    return dict(parsed.items()) or None


class ServerJS:
    """jetspark's synchronous JetStream API over nats-py and a real server."""

    def __init__(self, url: str) -> None:
        self._loop = _Loop()
        self._nc = self._loop.run(nats.connect(url))
        self._js = self._nc.jetstream()

    # -- plumbing
    def close(self) -> None:
        self._loop.run(self._nc.close())
        self._loop.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _request(self, subject: str, payload: Any = None) -> dict:
        data = b"" if payload is None else json.dumps(payload).encode()
        msg = self._loop.run(self._nc.request(subject, data, timeout=5))
        resp = json.loads(msg.data)
        if "error" in resp:
            raise error_from_response(resp["error"])
        return resp

    # -- streams
    def add_stream(self, config: Optional[api.StreamConfig] = None, **params) -> api.StreamInfo:
        config = (config or api.StreamConfig()).evolve(**params)
        resp = self._request(f"$JS.API.STREAM.CREATE.{config.name}", stream_config_to_wire(config))
        return stream_info_from_wire(resp)

    def update_stream(self, config: Optional[api.StreamConfig] = None, **params) -> api.StreamInfo:
        config = (config or api.StreamConfig()).evolve(**params)
        resp = self._request(f"$JS.API.STREAM.UPDATE.{config.name}", stream_config_to_wire(config))
        return stream_info_from_wire(resp)

    def delete_stream(self, name: str) -> bool:
        return self._request(f"$JS.API.STREAM.DELETE.{name}")["success"]

    def stream_info(self, name: str, subjects_filter: Optional[str] = None, deleted_details: bool = False) -> api.StreamInfo:
        req = {}
        if subjects_filter:
            req["subjects_filter"] = subjects_filter
        if deleted_details:
            req["deleted_details"] = True
        return stream_info_from_wire(self._request(f"$JS.API.STREAM.INFO.{name}", req or None))

    def streams_info(self) -> list[api.StreamInfo]:
        return [stream_info_from_wire(s) for s in self._request("$JS.API.STREAM.LIST", {"offset": 0})["streams"] or []]

    def stream_names(self) -> list[str]:
        return sorted(self._request("$JS.API.STREAM.NAMES", {"offset": 0})["streams"] or [])

    def purge_stream(self, name: str, subject: Optional[str] = None, seq: Optional[int] = None, keep: Optional[int] = None) -> bool:
        req = {}
        if subject:
            req["filter"] = subject
        if seq is not None:
            req["seq"] = seq
        if keep is not None:
            req["keep"] = keep
        return self._request(f"$JS.API.STREAM.PURGE.{name}", req or None)["success"]

    def publish(self, subject: str, payload: bytes = b"", headers: Optional[dict] = None, stream: Optional[str] = None) -> api.PubAck:
        headers = dict(headers or {})
        if stream is not None:
            headers["Nats-Expected-Stream"] = stream
        try:
            msg = self._loop.run(self._nc.request(subject, payload, timeout=5, headers=headers or None))
        except NoRespondersError:
            raise NoStreamResponseError(subject) from None
        resp = json.loads(msg.data)
        if "error" in resp:
            raise error_from_response(resp["error"])
        return api.PubAck.from_response(resp)

    def get_msg(self, stream: str, seq: Optional[int] = None, last_by_subj: Optional[str] = None, next_by_subj: Optional[str] = None) -> api.RawStreamMsg:
        req: dict = {}
        if seq is not None:
            req["seq"] = seq
        if last_by_subj is not None:
            req["last_by_subj"] = last_by_subj
        if next_by_subj is not None:
            req["next_by_subj"] = next_by_subj
        m = self._request(f"$JS.API.STREAM.MSG.GET.{stream}", req)["message"]
        hdrs = base64.b64decode(m["hdrs"]) if m.get("hdrs") else None
        return api.RawStreamMsg(
            subject=m["subject"],
            seq=m["seq"],
            data=base64.b64decode(m["data"]) if m.get("data") else b"",
            hdrs=hdrs,
            headers=_parse_headers(hdrs) if hdrs else None,
            stream=stream,
            time=_time(m.get("time")),
        )

    def get_last_msg(self, stream: str, subject: str) -> api.RawStreamMsg:
        return self.get_msg(stream, last_by_subj=subject)

    def delete_msg(self, stream: str, seq: int) -> bool:
        return self._request(f"$JS.API.STREAM.MSG.DELETE.{stream}", {"seq": seq})["success"]
