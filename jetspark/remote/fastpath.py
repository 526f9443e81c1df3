"""nats-py's private hooks, all here: raw deliveries and raw publishes for the bulk paths.

nats-py turns every incoming message into a ``Msg`` (decoding subject and
reply, parsing headers into a dict) and hands it to a subscription's task
through an asyncio queue; every publish builds its own protocol line.  For
the bulk paths (a range read delivers millions of messages, a batch append
gets one PubAck per row) that costs more than the work itself
(benchmarks/bench_remote.py, rows 1 and 2).  Two hooks avoid it:

- ``subscribe_raw``: deliveries as plain ``(subject, reply, data, headers)``
  bytes tuples, straight from nats-py's protocol parser (``Client`` overrides
  nats-py's private ``Client._process_msg``).
- ``raw_writer``: many ready-made protocol lines written with one call
  (nats-py's private ``_send_command`` and ``_flush_pending``).
- ``FrameFeed``: the bytes nats-py's read loop receives, framed in bulk
  (``jetspark.protocol.frames``) instead of by nats-py's parser, which
  handles one frame per step; ``Client`` puts it in place of nats-py's
  private parser ``Client._ps``, whose ``parse(data)`` the read loop calls
  with every read (``FRAME_FEED``).  Frames of a subscription made with
  ``subscribe_frames`` (a range read's deliveries) reach its handler as
  runs of ``Frames`` of one buffer, without a Python object per message;
  every other frame goes where nats-py's parser sends it.
- ``BulkTcpTransport``: the connection's reads of up to 1 MiB a call (nats-py's
  read loop asks for 32 KiB) from a StreamReader that lets as much gather
  without pausing the socket; ``Client`` connects through it (an override of
  the private ``Client._connect_to_server``, ``BULK_READS``); nats-py's own
  clients in the same process keep nats-py's transport.

Each checks, once at import, that nats-py's internals are what it expects
(``RAW_DELIVERY``, ``RAW_WRITES``, ``FRAME_FEED``, ``BULK_READS``); if not, or
with ``public=True``, it falls back to nats-py's public API (a subscription
callback; one ``publish`` per row; nats-py's transport) with the same results.
tests/remote/test_fastpath.py fails loudly when a nats-py release changes
those internals.

``Client`` also keeps each header block as received next to nats-py's parsed
dict (``RawHeaders``, an override of the private ``_process_headers``), so
repeated keys and exact sizes survive on the public path too
(``raw_header_block``).

``subscription_consumer`` reads which consumer a nats-py push subscription is on
(private ``_consumer``: nats-py makes an ordered consumer again after a gap and
records its new name only there); tests/remote/test_fastpath.py checks it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from typing import Any, Awaitable, Callable, Optional

import nats.aio.client as _nats_client
import numpy as np
from nats.aio.client import Client as _NATS
from nats.aio.transport import TcpTransport as _TcpTransport
from nats.errors import ProtocolError
from nats.protocol.parser import Parser as _Parser

from jetspark.protocol import frames as F
from jetspark.protocol import headers as H

__all__ = [
    "BULK_READS",
    "BulkTcpTransport",
    "FRAME_FEED",
    "FrameFeed",
    "FrameInbox",
    "RAW_DELIVERY",
    "RAW_WRITES",
    "Client",
    "RawHeaders",
    "RawInbox",
    "frame_feed",
    "raw_header_block",
    "raw_writer",
    "status_of",
    "subscribe_frames",
    "subscribe_raw",
    "subscription_consumer",
]

RawHandler = Callable[[bytes, bytes, bytes, Optional[bytes]], None]


def _has_method(cls: type, name: str, params: list[str]) -> bool:
    fn = getattr(cls, name, None)
    return inspect.iscoroutinefunction(fn) and list(inspect.signature(fn).parameters)[: len(params)] == params


# nats-py's Client._process_msg(sid, subject, reply, data, headers), called by its parser for
# every MSG/HMSG; subscriptions are keyed by their Subscription._id (checked per subscription).
RAW_DELIVERY = _has_method(_NATS, "_process_msg", ["self", "sid", "subject", "reply", "data", "headers"])
# nats-py's Client._send_command(cmd) (queue protocol bytes) and _flush_pending() (write them).
RAW_WRITES = _has_method(_NATS, "_send_command", ["self", "cmd"]) and _has_method(_NATS, "_flush_pending", ["self"])
_RAW_HEADERS = _has_method(_NATS, "_process_headers", ["self", "headers"])


def _read_loop_feeds_parser() -> bool:
    try:
        return "self._ps.parse(" in inspect.getsource(_NATS._read_loop)
    except (OSError, TypeError, AttributeError):
        return False


# nats-py's read loop hands each read to Client._ps.parse(data) (a Parser; reset() on reconnect),
# and its parser calls back _process_msg/_process_ping/_process_pong/_process_info/_process_err.
FRAME_FEED = (
    RAW_DELIVERY
    and _has_method(_Parser, "parse", ["self", "data"])
    and callable(getattr(_Parser, "reset", None))
    and _read_loop_feeds_parser()
    and all(
        _has_method(_NATS, m, ["self"]) for m in ("_process_ping", "_process_pong", "_process_info", "_process_err")
    )
    and isinstance(getattr(_nats_client, "DEFAULT_BUFFER_SIZE", None), int)
)


def _connects_with_tcp_transport() -> bool:
    try:
        src = inspect.getsource(_NATS._connect_to_server)
    except (OSError, TypeError, AttributeError):
        return False
    steps = (
        "s.last_attempt = time.monotonic()",
        "if not self._transport:",
        '"ws", "wss"',
        "TcpTransport()",
        "await self._transport.connect(",
        'connect_timeout=self.options["connect_timeout"]',
    )
    return all(step in src for step in steps)


def _tcp_transport_keeps_streams() -> bool:
    try:
        return {"_io_reader", "_io_writer", "_bare_io_reader", "_bare_io_writer"} <= set(vars(_TcpTransport()))
    except Exception:
        return False


# nats-py's Client._connect_to_server(s) notes the attempt's time, makes a TcpTransport (but for
# websockets) while self._transport is not connected, and connects it; TcpTransport keeps its asyncio
# streams in _io_reader/_io_writer (connect_tls replaces them): our Client can take the same steps
# with its own transport (BulkTcpTransport).
BULK_READS = (
    FRAME_FEED
    and _has_method(_NATS, "_connect_to_server", ["self", "s"])
    and _connects_with_tcp_transport()
    and _tcp_transport_keeps_streams()
    and _has_method(_TcpTransport, "connect_tls", ["self", "uri", "ssl_context", "buffer_size", "connect_timeout"])
    and _has_method(_TcpTransport, "connect", ["self", "uri", "buffer_size", "connect_timeout"])
    and _has_method(_TcpTransport, "read", ["self", "buffer_size"])
)
# What a read of our Client's connections takes at most, and how much its StreamReader gathers
# before asyncio pauses the socket (at twice its limit).  nats-py reads 32 KiB a call from a
# StreamReader limited to 32 KiB, so asyncio pauses and resumes the socket (two epoll calls)
# for about every socket read of a fast stream, and the read loop turns eight times per read.
READ_BYTES = 1 << 20
# What asyncio's socket transport receives at most per recv: a read this long (or longer, when
# several recvs gathered) likely left more waiting (the FrameFeed keeps it, as below).
RECV_BYTES = 256 * 1024


class BulkTcpTransport(_TcpTransport):
    """nats-py's TCP transport (plain and TLS alike) with reads of up to ``READ_BYTES`` and a
    StreamReader that gathers as much without pausing the socket; only our ``Client`` uses it,
    nats-py's own clients and their read size stay as they are."""

    async def connect(self, uri, buffer_size, connect_timeout):
        await super().connect(uri, max(buffer_size, READ_BYTES), connect_timeout)

    async def connect_tls(self, uri, ssl_context, buffer_size, connect_timeout) -> None:
        # (nats-py's own connect_tls, but for the new StreamReader's limit)
        assert self._io_writer, "BulkTcpTransport.connect must be called first"
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=max(buffer_size, READ_BYTES))
        protocol = asyncio.StreamReaderProtocol(reader)
        tls = loop.start_tls(
            self._io_writer.transport,
            protocol,
            ssl_context,
            server_hostname=uri if isinstance(uri, str) else uri.hostname,
        )
        transport = await asyncio.wait_for(tls, connect_timeout)
        assert transport is not None  # (start_tls returns None only on a closed loop)
        self._io_reader, self._io_writer = reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    async def read(self, buffer_size: int) -> bytes:
        return await super().read(max(buffer_size, READ_BYTES))


# A read this long (nats-py's read size) likely left more waiting: it is kept and framed with
# what follows, up to this much, so each framing pass covers many frames (a pass costs a fixed
# ~0.3 ms of array calls: over 256 KiB, one socket read's worth, that is a third of the framing).
STASH_BYTES = 1 << 20
# Loop turns without a new read after which what is kept is framed: nats-py's read loop takes a
# socket read (up to 256 KiB) in steps of its read size, then waits for the next one, which
# comes a loop turn later when the server is sending faster than the reader takes it, a few
# turns later when it is not quite (4 read 500k messages with ~4% less CPU than 2, 8 with more).
IDLE_TURNS = 4
FrameHandler = Callable[[bytes, F.Frames], None]


class FrameFeed:
    """Stands in for nats-py's protocol parser (``Client._ps``): the one hook through which
    this module takes the bytes nats-py receives.

    ``parse(data)`` is what nats-py's read loop calls with each read.  A full-size read is
    kept (more is likely waiting, and the next read returns at once) until the reads come
    short, ``STASH_BYTES`` have gathered, or ``IDLE_TURNS`` turns of the event loop bring no
    new read (a callback frames what is kept then); then everything gathered is framed at
    once (``frames.scan``).  Runs of
    frames of a ``bulk`` subscription go to its handler; every other frame goes, in order,
    where nats-py's own parser sends it."""

    def __init__(self, nc) -> None:
        self.nc = nc
        self.bulk: dict[int, FrameHandler] = {}
        self.reader = F.FrameReader()
        self._stash: list[bytes] = []
        self._stashed = 0
        self._kicked = False
        self._idle = 0  # loop turns without a new read, while something is kept
        self._seen = 0  # the bytes kept at the last of those turns
        self._lock: Optional[asyncio.Lock] = None
        self._failed: Optional[BaseException] = None
        # A read this long is "full" (more likely waiting): nats-py's read size, or with our
        # transport, one socket read's worth (Client sets it when it connects).
        self.full = _nats_client.DEFAULT_BUFFER_SIZE

    def reset(self) -> None:
        self.reader.reset()
        self._stash, self._stashed, self._failed = [], 0, None

    async def parse(self, data: bytes = b"") -> None:
        if self._failed is not None:  # (from a drain the idle callback ran: the read loop handles it now)
            exc, self._failed = self._failed, None
            raise exc
        self._stash.append(data)
        self._stashed += len(data)
        if len(data) >= self.full and self._stashed < STASH_BYTES:
            if not self._kicked:
                self._kicked = True
                self._idle, self._seen = 0, 0
                asyncio.get_running_loop().call_soon(self._kick)
            return
        await self._drain()

    def _kick(self) -> None:
        if not self._stash:
            self._kicked = False
            return
        if self._stashed != self._seen:  # a read came since the last turn: more may be on its way
            self._idle, self._seen = 0, self._stashed
        else:
            self._idle += 1
        if self._idle < IDLE_TURNS:
            asyncio.get_running_loop().call_soon(self._kick)
            return
        self._kicked = False
        asyncio.ensure_future(self._drain_later())

    async def _drain_later(self) -> None:
        try:
            await self._drain()
        except Exception as exc:  # the read loop raises it with its next read, as if it had parsed the bytes itself
            self._failed = exc

    async def _drain(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # (a drain from the idle callback and one from the read loop keep their order)
            if not self._stash:
                return
            reads = self._stash
            self._stash, self._stashed = [], 0
            try:
                buf, frames = self.reader.feed(reads)
            except F.FrameError as exc:
                raise ProtocolError() from exc
            if len(frames):
                await self._dispatch(buf, frames)

    async def _dispatch(self, buf: bytes, f: F.Frames) -> None:
        n = len(f)
        bulk = self.bulk
        is_bulk = None
        if bulk:
            if len(bulk) == 1:  # (one bulk subscription, the usual case: isin would sort)
                is_bulk = (f.kind <= F.HMSG) & (f.sid == next(iter(bulk)))
            else:
                is_bulk = (f.kind <= F.HMSG) & np.isin(f.sid, np.fromiter(bulk, dtype=np.int64, count=len(bulk)))
            if is_bulk.all() and (f.sid == f.sid[0]).all():
                handler = bulk.get(int(f.sid[0]))
                if handler is not None:
                    handler(buf, f)
                return
            if not is_bulk.any():
                is_bulk = None
        if is_bulk is None:
            await self._each(buf, f)
            return
        # Alternating stretches: bulk runs of one sid, and frames for nats-py's callbacks.
        key = np.where(is_bulk, f.sid, -1)
        edges = [0, *(np.flatnonzero(key[1:] != key[:-1]) + 1).tolist(), n]
        for i, j in zip(edges, edges[1:]):
            if is_bulk[i]:
                handler = bulk.get(int(f.sid[i]))
                if handler is not None:  # (gone: dropped, as nats-py drops a message of a sid it no longer has)
                    handler(buf, f[i:j])
            else:
                await self._each(buf, f[i:j])

    async def _each(self, buf: bytes, f: F.Frames) -> None:
        """Each frame where nats-py's parser would send it, in order."""
        nc = self.nc
        process_msg = nc._process_msg
        for kind, sid, sl, sh, rl, rh, hl, dl, dh in zip(*(getattr(f, c).tolist() for c in F.COLUMNS)):
            if kind <= F.HMSG:
                await process_msg(sid, buf[sl:sh], buf[rl:rh], buf[dl:dh], buf[hl:dl] if dl > hl else None)
            elif kind == F.PING:
                await nc._process_ping()
            elif kind == F.PONG:
                await nc._process_pong()
            elif kind == F.INFO:
                await nc._process_info(json.loads(buf[sl:sh].decode()))
            elif kind == F.ERR:
                await nc._process_err(buf[sl:sh].decode().lower())


class RawHeaders(dict):
    """nats-py's parsed headers plus ``raw``, the block as received."""

    __slots__ = ("raw",)


class Client(_NATS):
    """nats-py's client, with the raw-delivery hook (subscriptions registered by ``subscribe_raw``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._raw_handlers: dict[int, RawHandler] = {}
        if FRAME_FEED:
            self._ps = FrameFeed(self)  # type: ignore[assignment]  # (it stands in for nats-py's Parser)

    if BULK_READS:

        async def _connect_to_server(self, s):
            if s.uri.scheme in ("nats", "tls") and (
                not self._transport or isinstance(self._transport, BulkTcpTransport)
            ):
                # nats-py's own steps for these schemes, with our transport: nats-py makes a new
                # TcpTransport whenever the one it has is not connected (a fresh one is not), so it
                # cannot be handed ours beforehand.  TLS comes later, on the same transport.
                s.last_attempt = time.monotonic()
                if not self._transport:
                    self._transport = BulkTcpTransport()
                await self._transport.connect(s.uri, READ_BYTES, self.options["connect_timeout"])
            else:
                await super()._connect_to_server(s)
            if isinstance(self._ps, FrameFeed):
                bulk = isinstance(self._transport, BulkTcpTransport)
                self._ps.full = RECV_BYTES if bulk else _nats_client.DEFAULT_BUFFER_SIZE

    if RAW_DELIVERY:

        async def _process_msg(self, sid, subject, reply, data, headers):
            handler = self._raw_handlers.get(sid)
            if handler is not None:
                handler(subject, reply, data, headers)
                return
            await super()._process_msg(sid, subject, reply, data, headers)

    if _RAW_HEADERS:

        async def _process_headers(self, headers):
            hdr = await super()._process_headers(headers)
            if hdr and headers:
                hdr = RawHeaders(hdr)
                hdr.raw = bytes(headers)
            return hdr


class RawSubscription:
    """A subscription made by ``subscribe_raw``; ``fast`` says whether it took the private hook."""

    __slots__ = ("sub", "fast", "_nc")

    def __init__(self, nc, sub, fast: bool) -> None:
        self._nc = nc
        self.sub = sub
        self.fast = fast

    async def unsubscribe(self) -> None:
        if self.fast:
            self._nc._raw_handlers.pop(self.sub._id, None)
            feed = self._nc._ps
            if isinstance(feed, FrameFeed):
                feed.bulk.pop(self.sub._id, None)
        try:
            await self.sub.unsubscribe()
        except Exception:  # the connection is gone: so is the subscription
            pass


async def subscribe_raw(nc, subject: str, handler: RawHandler, *, public: bool = False) -> RawSubscription:
    """Subscribe ``subject`` with ``handler(subject, reply, data, headers)`` called (on the loop)
    for every delivery, all four bytes (headers: the block as received, or None).

    The one entry to the raw-delivery hook: taken when nats-py's internals are as expected
    and ``nc`` is our ``Client``; otherwise (or with ``public=True``) nats-py's public
    subscription callback, converting each ``Msg`` back to the same tuple."""
    if RAW_DELIVERY and not public and isinstance(nc, Client):
        sub = await nc.subscribe(subject, pending_msgs_limit=0, pending_bytes_limit=0)
        sid = vars(sub).get("_id")
        if isinstance(sid, int) and nc._subs.get(sid) is sub:
            nc._raw_handlers[sid] = handler
            return RawSubscription(nc, sub, True)
        await sub.unsubscribe()  # not keyed as expected: the public path

    async def deliver(msg) -> None:
        handler(msg.subject.encode(), (msg.reply or "").encode(), msg.data, raw_header_block(msg.headers))

    sub = await nc.subscribe(subject, cb=deliver, pending_msgs_limit=0, pending_bytes_limit=0)
    return RawSubscription(nc, sub, False)


async def subscribe_frames(nc, subject: str, handler: FrameHandler) -> Optional[RawSubscription]:
    """Subscribe ``subject`` with ``handler(buf, frames)`` called (on the loop) with runs of its
    deliveries as ``jetspark.protocol.frames.Frames`` of the buffer they came in; None when
    nats-py's internals differ (``FRAME_FEED``) or ``nc`` is not our ``Client``: then
    ``subscribe_raw`` (a tuple per message) is the way."""
    feed = getattr(nc, "_ps", None)
    if not (FRAME_FEED and isinstance(nc, Client) and isinstance(feed, FrameFeed)):
        return None
    sub = await nc.subscribe(subject, pending_msgs_limit=0, pending_bytes_limit=0)
    sid = vars(sub).get("_id")
    if isinstance(sid, int) and nc._subs.get(sid) is sub:
        feed.bulk[sid] = handler
        return RawSubscription(nc, sub, True)
    await sub.unsubscribe()
    return None


def raw_writer(nc, *, public: bool = False) -> Optional[Callable[[bytes], Awaitable[None]]]:
    """An async ``write(protocol_bytes)`` that queues ready PUB/HPUB lines and flushes them in one
    write, or None when nats-py's internals differ (or ``public``): then publish row by row."""
    if not RAW_WRITES or public:
        return None

    async def write(data: bytes) -> None:
        await nc._send_command(data)
        await nc._flush_pending()

    return write


def status_of(headers: Optional[bytes]) -> Optional[tuple[bytes, bytes]]:
    """``(code, description)`` of a status message's header block (``NATS/1.0 404 No Messages``), else None."""
    if not headers or not headers.startswith(b"NATS/1.0 "):
        return None
    line = headers[9 : headers.find(b"\r\n")]
    code, _, desc = line.partition(b" ")
    return code, desc


def raw_header_block(hdrs) -> Optional[bytes]:
    """The header block of a nats-py ``Msg``: as received (``RawHeaders``), else rebuilt from the dict."""
    if not hdrs:
        return None
    raw = getattr(hdrs, "raw", None)
    if raw is not None:
        return raw
    status = hdrs.get("Status")
    rest = {k: v for k, v in hdrs.items() if k not in ("Status", "Description")}
    if status:
        head = f"NATS/1.0 {status} {hdrs.get('Description') or ''}".rstrip().encode() + b"\r\n"
        return head + (H.encode(rest)[10:] if rest else b"\r\n")
    return H.encode(rest)


def frame_feed(nc) -> Optional[FrameFeed]:
    """The ``FrameFeed`` our ``Client`` puts in place of nats-py's parser (its private ``_ps``),
    or None on a connection without one (nats-py's own client, or ``FRAME_FEED`` off):
    tests/remote/test_fastpath.py checks both."""
    feed = getattr(nc, "_ps", None)
    return feed if isinstance(feed, FrameFeed) else None


def subscription_consumer(psub) -> Optional[str]:
    """The consumer a nats-py push subscription is on now (None if nats-py stops keeping it
    where this looks: tests/remote/test_fastpath.py fails then)."""
    return getattr(psub, "_consumer", None)


class RawInbox:
    """A subscription whose deliveries are collected and taken in bulk as bytes tuples."""

    def __init__(self, public: bool = False) -> None:
        self.items: list = []
        self._event = asyncio.Event()  # (made again by open, on the loop that reads)
        self._sub: Optional[RawSubscription] = None
        self._public = public

    @property
    def fast(self) -> bool:
        return self._sub is not None and self._sub.fast

    async def open(self, nc, subject: str) -> "RawInbox":
        self._event = asyncio.Event()
        self._sub = await subscribe_raw(nc, subject, self._push, public=self._public)
        return self

    def _push(self, subject, reply, data, headers) -> None:
        self.items.append((subject, reply, data, headers))
        self._event.set()

    async def take(self, timeout: float) -> list:
        """Everything received so far, waiting up to ``timeout`` for at least one (asyncio.TimeoutError)."""
        if not self.items:
            self._event.clear()
            await asyncio.wait_for(self._event.wait(), timeout)
        items, self.items = self.items, []
        return items

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.unsubscribe()


class FrameInbox:
    """A subscription whose deliveries are taken in bulk as ``(buf, Frames)`` runs: through
    ``subscribe_frames``, or (``public``, or nats-py's internals differ) from tuples made into
    the same runs.

    With ``prepare``, each run is taken as ``prepare(buf, frames)`` instead, called as the run
    arrives, right after its buffer was framed and while it is still in the CPU's caches (a
    range read copies its messages out and reads their metadata then).  ``prepare`` must not
    raise: it runs inside nats-py's read loop."""

    def __init__(self, public: bool = False, prepare: Optional[Callable[[bytes, F.Frames], Any]] = None) -> None:
        self.runs: list = []
        self._event = asyncio.Event()  # (made again by open, on the loop that reads)
        self._sub: Optional[RawSubscription] = None
        self._raw: Optional[RawInbox] = None
        self._public = public
        self._prepare = prepare

    @property
    def fast(self) -> bool:
        return self._sub is not None

    async def open(self, nc, subject: str) -> "FrameInbox":
        self._event = asyncio.Event()
        if not self._public:
            self._sub = await subscribe_frames(nc, subject, self._push)
        if self._sub is None:
            self._raw = await RawInbox(public=self._public).open(nc, subject)
        return self

    def _push(self, buf: bytes, frames: F.Frames) -> None:
        self.runs.append((buf, frames) if self._prepare is None else self._prepare(buf, frames))
        self._event.set()

    async def take(self, timeout: float) -> list:
        """Every run received so far, waiting up to ``timeout`` for one (asyncio.TimeoutError)."""
        if self._raw is not None:
            run = frames_of(await self._raw.take(timeout))
            return [run if self._prepare is None else self._prepare(*run)]
        if not self.runs:
            self._event.clear()
            await asyncio.wait_for(self._event.wait(), timeout)
        runs, self.runs = self.runs, []
        return runs

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.unsubscribe()
        raw, self._raw = self._raw, None
        if raw is not None:
            await raw.close()


def frames_of(items: list) -> tuple[bytes, F.Frames]:
    """``(subject, reply, data, headers)`` tuples as one run of MSG frames over one buffer."""
    pieces: list[bytes] = []
    cols: list[list[int]] = [[] for _ in F.COLUMNS]
    at = 0
    for subject, reply, data, hdr in items:
        hdr = hdr or b""
        row: tuple[int, ...] = (F.HMSG if hdr else F.MSG, 0, at, at + len(subject))
        at += len(subject)
        row += (at, at + len(reply))
        at += len(reply)
        row += (at, at + len(hdr), at + len(hdr) + len(data))
        at += len(hdr) + len(data)
        pieces += (subject, reply, hdr, data)
        for col, v in zip(cols, row):
            col.append(v)
    return b"".join(pieces), F.Frames(*(np.array(c, dtype=np.int64) for c in cols))
