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

Each checks, once at import, that nats-py's internals are what it expects
(``RAW_DELIVERY``, ``RAW_WRITES``); if not, or with ``public=True``, it falls
back to nats-py's public API (a subscription callback; one ``publish`` per
row) with the same results.  tests/remote/test_fastpath.py fails loudly when
a nats-py release changes those internals.

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
from typing import Awaitable, Callable, Optional

from nats.aio.client import Client as _NATS

from jetspark.protocol import headers as H

__all__ = [
    "RAW_DELIVERY",
    "RAW_WRITES",
    "Client",
    "RawHeaders",
    "RawInbox",
    "raw_header_block",
    "raw_writer",
    "status_of",
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


class RawHeaders(dict):
    """nats-py's parsed headers plus ``raw``, the block as received."""

    __slots__ = ("raw",)


class Client(_NATS):
    """nats-py's client, with the raw-delivery hook (subscriptions registered by ``subscribe_raw``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._raw_handlers: dict[int, RawHandler] = {}

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


def subscription_consumer(psub) -> Optional[str]:
    """The consumer a nats-py push subscription is on now (None if nats-py stops keeping it
    where this looks: tests/remote/test_fastpath.py fails then)."""
    return getattr(psub, "_consumer", None)


class RawInbox:
    """A subscription whose deliveries are collected and taken in bulk as bytes tuples."""

    def __init__(self, public: bool = False) -> None:
        self.items: list = []
        self._event: Optional[asyncio.Event] = None
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
