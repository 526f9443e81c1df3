"""nats-py's client with a fast path for bulk deliveries, and the inboxes that use it.

nats-py turns every incoming message into a ``Msg`` (decoding subject and
reply, parsing headers into a dict) and passes it through an asyncio queue.
For the bulk paths (a range read delivers millions of messages, a batch
append gets one PubAck per row) that costs more than the parsing itself.
``Client`` lets a subscription register a plain function that receives the
raw ``(subject, reply, data, headers)`` bytes straight from nats-py's
protocol parser; ``RawInbox`` collects them in a list.  If the installed
nats-py's internals differ from what this expects (``FAST_PATH`` is False),
``RawInbox`` falls back to draining the subscription's queue, converting
each ``Msg`` back to the same tuple, so callers see one format.

``RawHeaders`` keeps the header block as received next to nats-py's parsed
dict, so repeated keys and exact sizes survive (fetch's ``Msg.headers``).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Callable, Optional

from nats.aio.client import Client as _NATS

__all__ = ["FAST_PATH", "Client", "RawHeaders", "RawInbox", "status_of"]

_EXPECTED = ["self", "sid", "subject", "reply", "data", "headers"]
FAST_PATH = inspect.iscoroutinefunction(getattr(_NATS, "_process_msg", None)) and list(inspect.signature(_NATS._process_msg).parameters) == _EXPECTED
_RAW_HEADERS = inspect.iscoroutinefunction(getattr(_NATS, "_process_headers", None))


class RawHeaders(dict):
    """nats-py's parsed headers plus ``raw``, the block as received."""

    __slots__ = ("raw",)


class Client(_NATS):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._fast: dict[int, Callable] = {}

    if FAST_PATH:

        async def _process_msg(self, sid, subject, reply, data, headers):
            fast = self._fast.get(sid)
            if fast is not None:
                fast(subject, reply, data, headers)
                return
            await super()._process_msg(sid, subject, reply, data, headers)

    if _RAW_HEADERS:

        async def _process_headers(self, headers):
            hdr = await super()._process_headers(headers)
            if hdr and headers:
                hdr = RawHeaders(hdr)
                hdr.raw = bytes(headers)
            return hdr


def status_of(headers: Optional[bytes]) -> Optional[tuple[bytes, bytes]]:
    """``(code, description)`` of a status message's header block (``NATS/1.0 404 No Messages``), else None."""
    if not headers or not headers.startswith(b"NATS/1.0 "):
        return None
    line = headers[9 : headers.find(b"\r\n")]
    code, _, desc = line.partition(b" ")
    return code, desc


def _raw_header_block(hdrs) -> Optional[bytes]:
    if not hdrs:
        return None
    raw = getattr(hdrs, "raw", None)
    if raw is not None:
        return raw
    from jetspark.protocol import headers as H

    status = hdrs.get("Status")
    rest = {k: v for k, v in hdrs.items() if k not in ("Status", "Description")}
    if status:
        head = f"NATS/1.0 {status} {hdrs.get('Description') or ''}".rstrip().encode() + b"\r\n"
        return head + (H.encode(rest)[10:] if rest else b"\r\n")
    return H.encode(rest)


class RawInbox:
    """A subscription whose deliveries are taken as ``(subject, reply, data, headers)`` bytes tuples."""

    def __init__(self, force_queue: bool = False) -> None:
        self.items: list = []
        self._event: Optional[asyncio.Event] = None
        self._sub = None
        self._nc = None
        self.fast = False
        self._force_queue = force_queue

    async def open(self, nc, subject: str) -> "RawInbox":
        self._nc = nc
        self._event = asyncio.Event()
        self._sub = await nc.subscribe(subject, pending_msgs_limit=0, pending_bytes_limit=0)
        fast = getattr(nc, "_fast", None)
        if FAST_PATH and fast is not None and not self._force_queue:
            fast[self._sub._id] = self._push
            self.fast = True
        return self

    def _push(self, subject, reply, data, headers) -> None:
        self.items.append((subject, reply, data, headers))
        self._event.set()

    async def take(self, timeout: float) -> list:
        """Everything received so far, waiting up to ``timeout`` for at least one (asyncio.TimeoutError)."""
        if self.fast:
            if not self.items:
                self._event.clear()
                await asyncio.wait_for(self._event.wait(), timeout)
            items, self.items = self.items, []
            return items
        queue = self._sub._pending_queue
        if queue.empty():
            msgs = [await asyncio.wait_for(queue.get(), timeout)]
        else:
            msgs = []
        while not queue.empty():
            msgs.append(queue.get_nowait())
        return [(m.subject.encode(), (m.reply or "").encode(), m.data, _raw_header_block(m.headers)) for m in msgs]

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is None:
            return
        fast = getattr(self._nc, "_fast", None)
        if fast is not None:
            fast.pop(sub._id, None)
        try:
            await sub.unsubscribe()
        except Exception:
            pass
