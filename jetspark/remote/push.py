"""Push subscriptions over a real server: nats-py's own, driven from a synchronous API.

The subscription is nats-py's ``JetStreamContext.subscribe_bind`` on the
session's event loop, so what the server asks of a push client is nats-py's
work, done as nats-py does it: answering flow-control requests, watching idle
heartbeats, and for an ordered consumer making a new consumer after a gap in
consumer sequences or a silence of two heartbeats (ADR-17).  The messages
wait in nats-py's subscription queue until they are handed out:

- with a callback, nats-py's delivery task passes each message to the
  subscription's own thread and waits until the callback has returned, so
  callbacks run one at a time, in order, and ``drain`` (nats-py's: no new
  messages, then wait until everything received is handled) covers them;
- without, ``next_msg`` takes them with nats-py's ``next_msg``, which also
  answers a flow-control request once the messages before it are taken.

Messages are jetspark's (``jetspark.remote.pull.Msg``): their acks are the
session's, confirmed before the handle's next call.  An ack-none consumer's
messages take no acks (the server would not confirm them).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import queue
from typing import TYPE_CHECKING, Any, Callable, Optional

import nats.errors
from nats.js import api as napi

from jetspark.api import AckPolicy, ConsumerConfig, ConsumerInfo
from jetspark.backend.push import Ended, PushBase, deliver, log
from jetspark.errors import NextMsgTimeoutError
from jetspark.protocol import headers as H
from jetspark.remote.fastpath import raw_header_block, subscription_consumer
from jetspark.remote.pull import Msg
from jetspark.remote.session import Session

if TYPE_CHECKING:
    from jetspark.backend import JetStreamAPI

_STOP = object()  # tells the callback thread to finish


class PushSubscription(PushBase):
    """A subscription on a push consumer of a server (``jetspark.backend.PushSubscriptionAPI``)."""

    def __init__(
        self, js: "JetStreamAPI", session: Session, stream: str, info: ConsumerInfo, cb: Optional[Callable],
        auto_ack: bool, ordered: Optional[ConsumerConfig], owned: bool,
    ) -> None:  # fmt: skip
        super().__init__(js, stream, info.name, cb, auto_ack, owned)
        self._session = session
        # The consumer's name as last seen: from nats-py's subscription, or from the reply
        # subject of the last message (which can name an ordered consumer's new consumer
        # before nats-py has taken the answer that created it).
        self._latest = info.name
        self._psub_name: Optional[str] = info.name
        self._ordered = ordered is not None  # only an ordered consumer is ever made again
        self._acks = session if info.config.ack_policy != AckPolicy.NONE and ordered is None else None
        self._handoff: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._getter: Optional[asyncio.Future] = None  # next_msg's pending take, kept across timeouts
        self._taking: Optional[asyncio.Lock] = None
        self._stopped: Optional[asyncio.Future] = None  # done once nothing more will come
        self._stopping = False  # nats-py's subscription is being (or was) unsubscribed or drained
        self._dropping = False  # unsubscribed: the callback thread hands out nothing more
        self._draining: Optional[concurrent.futures.Future] = None  # a drain without a callback, running on
        ncfg = _nats_config(ordered or info.config)

        async def bind():
            nc = await session.ready()
            self._taking = asyncio.Lock()
            self._stopped = asyncio.get_running_loop().create_future()
            jsc = nc.jetstream(prefix=session.api_prefix, timeout=session.timeout)
            return await jsc.subscribe_bind(
                stream=stream,
                config=ncfg,
                consumer=info.name,
                cb=self._on_msg if cb is not None else None,
                manual_ack=True,
                ordered_consumer=ordered is not None,
            )

        self._psub = session.run(bind(), what=f"subscribing to consumer {info.name!r} of stream {stream!r}")
        if cb is not None:
            self._start_thread(self._run)

    @property
    def consumer(self) -> str:
        # nats-py renames an ordered consumer's subscription when it makes the consumer
        # again; whichever of that and a delivered message's reply subject changed last names
        # the consumer now (tests/contract/test_push.py, the ordered consumer).
        psub = getattr(self, "_psub", None)
        name = subscription_consumer(psub) if psub is not None else None
        if name and name != self._psub_name:
            self._psub_name = self._latest = name
        return self._latest or self._consumer

    def _msg(self, m) -> Msg:
        hdr = raw_header_block(m.headers)
        msg = Msg(self._acks, m.subject, m.data, H.decode(hdr) if hdr else None, m.reply or "")
        if self._ordered and m.reply:
            try:
                self._latest = msg.metadata.consumer
            except ValueError:
                pass  # not a JetStream delivery's reply subject
        return msg

    # ------------------------------------------------------------------ with a callback

    async def _on_msg(self, m) -> None:
        """nats-py's callback (on the loop): hand the message to the thread, wait until handled."""
        done = asyncio.get_running_loop().create_future()
        self._handoff.put((self._msg(m), done))
        await done

    def _run(self) -> None:
        cb = self._cb
        assert cb is not None  # (the callback thread runs for a subscription with a callback)
        loop = self._session.loop.loop
        while True:
            item = self._handoff.get()
            if item is _STOP:
                return
            msg, done = item
            try:
                if not self._dropping:
                    deliver(cb, msg, self._auto_ack, self._where)
            finally:
                try:
                    loop.call_soon_threadsafe(_resolve, done)
                except RuntimeError:
                    return  # the loop is closed: the handle is gone

    # ------------------------------------------------------------------ without

    def _next(self, timeout: Optional[float]) -> Msg:
        limit = math.inf if timeout is None else timeout
        try:
            m = self._session.run(self._take(timeout), what=f"next_msg from {self._where}", timeout=limit, settle=False)
        except Ended:
            self._delete_owned()  # a drain handed out its last message
            raise
        return self._msg(m)

    async def _take(self, timeout: Optional[float]):
        taking, stopped = self._taking, self._stopped
        assert taking is not None and stopped is not None  # (made by bind(), in __init__)
        async with taking:
            getter = self._getter
            if getter is None:
                if stopped.done():
                    raise Ended()
                getter = self._getter = asyncio.ensure_future(self._psub.next_msg(timeout=None))
            await asyncio.wait({getter, stopped}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if getter.done() and not getter.cancelled():  # (cancelled: _stop ended the subscription meanwhile)
                self._getter = None
                return getter.result()
            if stopped.done():
                # Nothing more comes and nothing is held: the take waiting on the empty queue goes.
                getter.cancel()
                self._getter = None
                raise Ended()
            raise NextMsgTimeoutError(f"no message from {self._where} within {timeout} s")

    def _pending(self) -> int:
        # nats-py's pending queue, plus a message a timed-out next_msg's take got since, and
        # one handed to the callback thread and not yet taken by it.
        held = (
            self._getter is not None
            and self._getter.done()
            and not self._getter.cancelled()
            and self._getter.exception() is None
        )
        return self._psub.pending_msgs + int(held) + self._handoff.qsize()

    # ------------------------------------------------------------------ ending

    def _end(self, drain: bool) -> None:
        if drain and self._cb is None:
            # nats-py's drain waits until what the subscription holds is taken, which next_msg
            # and messages do: it runs on, and ends the subscription when they have.
            self._draining = self._session.loop.spawn(self._drain_then_stop())
            return
        if not self._stopping:
            self._stopping = True
            self._dropping = not drain  # a message handed to the thread meanwhile is dropped too
            what = f"{'draining' if drain else 'unsubscribing'} {self._where}"
            try:
                # A drain waits for the callback to handle every message held, however long.
                self._session.run(self._stop(drain), what=what, timeout=math.inf if drain else None, settle=False)
            finally:
                if self._cb is not None:
                    self._handoff.put(_STOP)
                    self._join_thread()
        self._delete_owned()

    async def _stop(self, drain: bool) -> None:
        try:
            if self._draining is not None:
                self._draining.cancel()  # unsubscribe() during a drain: the rest is dropped
            await (self._psub.drain() if drain else self._psub.unsubscribe())
        except nats.errors.BadSubscriptionError:
            pass  # nats-py had closed it already (a drain that ended)
        finally:
            _resolve(self._stopped)
            if self._getter is not None:
                self._getter.cancel()  # unsubscribed: what it would take is dropped
                self._getter = None

    async def _drain_then_stop(self) -> None:
        try:
            await self._psub.drain()
        except Exception as exc:  # noqa: BLE001 - the connection went away: nothing more comes either way
            log.debug("draining %s: %s", self._where, exc)
        finally:
            _resolve(self._stopped)

    def _shutdown(self) -> None:
        self._ended = True
        self._stopping = True
        self._dropping = True
        if self._cb is not None:
            self._handoff.put(_STOP)
            self._join_thread()


def _resolve(fut: Optional[asyncio.Future]) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


def _nats_config(config: ConsumerConfig) -> napi.ConsumerConfig:
    """jetspark's ConsumerConfig as nats-py's (same fields, same units), for subscribe_bind."""
    fields = {
        f: getattr(config, f)
        for f in ConsumerConfig.__dataclass_fields__
        if f in napi.ConsumerConfig.__dataclass_fields__
    }
    for name, enum in (
        ("deliver_policy", napi.DeliverPolicy),
        ("ack_policy", napi.AckPolicy),
        ("replay_policy", napi.ReplayPolicy),
    ):
        if fields.get(name) is not None:
            fields[name] = enum(getattr(fields[name], "value", fields[name]))
    return napi.ConsumerConfig(**fields)
