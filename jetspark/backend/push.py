"""What both backends' push subscriptions share: the public verbs around a backend's delivery.

A push subscription hands the messages of a push consumer to the caller in
one of two ways, as in nats-py:

- with a callback (``subscribe(..., cb=f)``): one thread of the subscription's
  own calls ``f(msg)`` for each message, in delivery order, one at a time.
  An exception from ``f`` is logged (logger ``jetspark.push``) and delivery
  goes on; the message is then not acknowledged (redelivered after
  ``ack_wait``).  Without ``manual_ack``, each message ``f`` returned from
  normally and did not acknowledge itself (ack, nak or term) is acknowledged
  (nats-py's auto-ack; none on an ack-none consumer).
- without: ``next_msg(timeout)`` and the iterator ``messages`` (a property, as in nats-py).

A backend subclasses ``PushBase`` and provides ``_next(timeout)`` (the next
message; ``NextMsgTimeoutError`` after ``timeout``; ``Ended`` once the
subscription has ended and holds nothing more), ``_pending()`` (how many
delivered messages it holds, not yet handed out), ``_end(drain)`` (stop taking
messages: at once, or after handing out what it holds) and ``_shutdown()``
(the handle closes: stop without asking the server anything).  Backends:
``jetspark.engine.push`` and ``jetspark.remote.push``.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable, Optional

from jetspark import validate as V
from jetspark.errors import ClosedError, JetSparkError, SubscriptionError

if TYPE_CHECKING:
    from jetspark.api import ConsumerInfo
    from jetspark.backend import MsgAPI

__all__ = ["Ended", "Messages", "PushBase", "deliver", "log"]

log = logging.getLogger("jetspark.push")


class Ended(JetSparkError):
    """The subscription has ended (unsubscribe, or a drain that handed out everything)."""


def deliver(cb: Callable, msg: "MsgAPI", auto_ack: bool, where: str) -> None:
    """``cb(msg)`` as a subscription's callback thread calls it (see the module docstring)."""
    try:
        cb(msg)
    except Exception:  # noqa: BLE001 - the callback's own error: logged, and delivery goes on
        log.exception("the callback of %s raised on the message %r; delivery goes on", where, msg)
        return
    if auto_ack and not getattr(msg, "_ackd", False):
        try:
            msg.ack()
        except JetSparkError as exc:  # the handle closed under the callback: nothing to ack with
            log.debug("auto-ack after the callback of %s: %s", where, exc)


class Messages:
    """``sub.messages``: every message of a push subscription, as ``next_msg(None)`` returns
    them, until it ends (nats-py's ``messages`` property, a synchronous iterator here).
    Calling it returns itself, so ``for msg in sub.messages()`` (jetspark 0.1) still works."""

    def __init__(self, sub: "PushBase") -> None:
        self._sub = sub

    def __iter__(self) -> "Messages":
        return self

    def __next__(self) -> "MsgAPI":
        try:
            return self._sub._next(None)
        except Ended:
            raise StopIteration from None

    def __call__(self) -> "Messages":
        return self


class PushBase:
    """A push subscription (``jetspark.backend.PushSubscriptionAPI``), as both backends share it."""

    stream: str

    def __init__(self, js, stream: str, consumer: str, cb: Optional[Callable], auto_ack: bool, owned: bool) -> None:
        self._js = js
        self.stream = stream
        self._consumer = consumer
        self._cb = cb
        self._auto_ack = auto_ack
        self._owned = owned  # an ephemeral this subscription created: deleted when it ends
        self._ended = False  # unsubscribe() or drain() was called
        self._thread: Optional[threading.Thread] = None

    @property
    def consumer(self) -> str:
        """The consumer's name (an ordered consumer's changes when it is recreated)."""
        return self._consumer

    def __repr__(self) -> str:
        mode = "callback" if self._cb is not None else "next_msg"
        state = "ended" if self._ended else "active"
        return f"<{type(self).__name__} consumer={self.consumer!r} stream={self.stream!r} {mode} {state}>"

    @property
    def _where(self) -> str:
        return f"the subscription on consumer {self.consumer!r} of stream {self.stream!r}"

    def _start_thread(self, target: Callable[[], None]) -> None:
        self._thread = threading.Thread(target=target, name=f"jetspark-push-{self.stream}-{self.consumer}", daemon=True)
        self._thread.start()

    def _join_thread(self) -> None:
        """Wait for the callback thread to finish (not from within a callback: it would wait for itself)."""
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()

    # ------------------------------------------------------------------ the verbs

    def next_msg(self, timeout: Optional[float] = 1.0) -> "MsgAPI":
        if self._cb is not None:
            raise SubscriptionError(
                f"next_msg cannot be used on {self._where}: it has a callback (cb=), which receives the messages"
            )
        timeout = V.next_msg_timeout(timeout)
        try:
            return self._next(timeout)
        except Ended:
            raise ClosedError(
                f"{self._where} has ended (unsubscribe() or drain()) and holds no more messages"
            ) from None

    @property
    def messages(self) -> "Messages":
        if self._cb is not None:
            raise SubscriptionError(
                f"messages cannot be used on {self._where}: it has a callback (cb=), which receives the messages"
            )
        return Messages(self)

    @property
    def pending_msgs(self) -> int:
        return self._pending()

    def consumer_info(self) -> "ConsumerInfo":
        return self._js.consumer_info(self.stream, self.consumer)

    def unsubscribe(self) -> None:
        self._ended = True
        self._end(drain=False)

    def drain(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._end(drain=True)

    def _delete_owned(self) -> None:
        """Delete the ephemeral consumer this subscription created (nats.go does so on
        unsubscribe; a server would also remove it after its inactive_threshold)."""
        if not self._owned:
            return
        self._owned = False
        try:
            self._js.delete_consumer(self.stream, self.consumer)
        except JetSparkError as exc:  # gone already (deleted, or its stream), or the handle is closed
            log.debug("deleting the ephemeral consumer of %s: %s", self._where, exc)

    # ------------------------------------------------------------------ the backend's

    def _next(self, timeout: Optional[float]) -> "MsgAPI":
        raise NotImplementedError

    def _pending(self) -> int:
        raise NotImplementedError

    def _end(self, drain: bool) -> None:
        raise NotImplementedError

    def _shutdown(self) -> None:
        raise NotImplementedError
