"""What both backends' continuous pulls share: the options and the callback runner.

``PullSubscription.messages(...)`` (nats.go's ``Consumer.Messages``) is each
backend's own: the engine tops its buffer up with fetches that wait on the
stream's wake-up (jetspark.engine.wakeup), the nats:// backend keeps pull
requests outstanding on the server (jetspark.remote.pull_messages).  Here, written once:

- ``pull_options``: the arguments checked and the defaults filled in as
  nats.go does (``PullMaxMessages``, ``PullMaxBytes``, ``PullExpiry``,
  ``PullThresholdMessages``, ``PullThresholdBytes``, ``PullHeartbeat``);
- ``ConsumeContext``: ``consume(cb)``, one background thread taking messages
  from a ``messages()`` iterator and calling ``cb`` on each, in order;
- ``LivePulls``: ``messages``, ``consume`` and ``unsubscribe`` of both
  ``PullSubscription`` classes, over their ``_messages(opts)`` and ``_settle_acks()``;
- ``MessagesBase``: the iterator and context-manager protocol of both ``Messages``.

This module imports neither backend (tests/test_imports.py).
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Optional

from jetspark import validate as V
from jetspark.errors import JetSparkError

__all__ = ["ConsumeContext", "LivePulls", "MessagesBase", "PullOptions", "msg_size", "pull_options"]

log = logging.getLogger("jetspark")

DEFAULT_MAX_MESSAGES = 500
DEFAULT_EXPIRES = 30.0
# With max_bytes alone, a pull asks for this many messages and the bytes bound it (nats.go).
BYTES_ONLY_BATCH = 1_000_000
MAX_DEFAULT_HEARTBEAT = 30.0
_INT32 = 2**31 - 1


@dataclass(frozen=True)
class PullOptions:
    """A continuous pull's settings, defaults filled in (see ``pull_options``)."""

    max_messages: int
    max_bytes: int  # 0: no byte limit
    expires: float
    threshold_messages: int
    threshold_bytes: int
    heartbeat: float  # 0: none

    def below_threshold(self, msgs: int, nbytes: int) -> bool:
        """Should a buffer (with what is asked and not yet delivered) holding ``msgs``
        messages of ``nbytes`` bytes be refilled?"""
        return msgs < self.threshold_messages or (self.max_bytes > 0 and nbytes < self.threshold_bytes)

    def refill(self, msgs: int, nbytes: int) -> tuple[int, int]:
        """The batch and max_bytes (0: none) of the pull that fills the buffer up again."""
        if self.max_bytes:
            return self.max_messages, self.max_bytes - nbytes  # bytes alone bound it
        return self.max_messages - msgs, 0


def pull_options(
    max_messages: Any = None,
    max_bytes: Any = None,
    expires: Any = None,
    threshold_messages: Any = None,
    threshold_bytes: Any = None,
    heartbeat: Any = None,
) -> PullOptions:
    """Check a continuous pull's arguments (``TypeError``/``ValueError`` naming the argument)
    and fill in nats.go's defaults: 500 messages, or 1,000,000 bounded by ``max_bytes`` when
    only that is given (the two exclude each other); pull requests expire after 30 s (at least
    1 s); refill below half of the buffer (``threshold_*``, at most the maximum); heartbeat
    half the expiry, at most 30 s (at most half the expiry when given; 0: none)."""
    if max_messages is not None and max_bytes is not None:
        raise ValueError("give max_messages or max_bytes, not both (the buffer is bounded by one of them)")
    max_messages = V.integer(max_messages, "max_messages", 1, _INT32, optional=True)
    max_bytes = V.integer(max_bytes, "max_bytes", 1, V.INT64_MAX, optional=True) or 0
    if max_messages is None:
        max_messages = BYTES_ONLY_BATCH if max_bytes else DEFAULT_MAX_MESSAGES
    expires = V.timeout(expires, "expires", default=DEFAULT_EXPIRES)
    if expires < 1:
        raise ValueError(f"expires must be at least 1 second, not {expires!r}")
    threshold_messages = V.integer(threshold_messages, "threshold_messages", 1, max_messages, optional=True)
    if threshold_messages is None:
        threshold_messages = math.ceil(max_messages / 2)
    if threshold_bytes is not None and not max_bytes:
        raise ValueError("threshold_bytes needs max_bytes")
    threshold_bytes = V.integer(threshold_bytes, "threshold_bytes", 1, max(max_bytes, 1), optional=True)
    if threshold_bytes is None:
        threshold_bytes = math.ceil(max_bytes / 2)
    if heartbeat is None:
        heartbeat = min(expires / 2, MAX_DEFAULT_HEARTBEAT)
    heartbeat = V.timeout(heartbeat, "heartbeat")
    if heartbeat > expires / 2:
        raise ValueError(f"heartbeat must be at most half of expires ({expires / 2:g} s), not {heartbeat!r}")
    return PullOptions(max_messages, max_bytes, expires, threshold_messages, threshold_bytes, heartbeat)


def fetch_heartbeat(heartbeat: Any, timeout: float) -> float:
    """``fetch``'s heartbeat: None (0) or seconds, at most half the timeout (nats.go's rule)."""
    if heartbeat is None:
        return 0.0
    heartbeat = V.timeout(heartbeat, "heartbeat")
    if heartbeat and heartbeat > timeout / 2:
        raise ValueError(f"heartbeat must be at most half of the timeout ({timeout / 2:g} s), not {heartbeat!r}")
    return heartbeat


def msg_size(subject: str, reply: str, data: bytes, header_bytes: int) -> int:
    """A message's size as a pull's max_bytes counts it: subject, reply, headers and payload."""
    return len(subject) + len(reply) + header_bytes + len(data)


class ConsumeContext:
    """``consume(cb)``: a thread that takes each message of a ``messages()`` iterator and
    calls ``cb(msg)``, one at a time, in delivery order (nats.go's ``ConsumeContext``).

    An exception raised by ``cb`` is logged and delivery goes on.  An error of the pull
    (``NoHeartbeatError``; the consumer or stream deleted; the handle closed) goes to
    ``error_cb(err)`` (default: logged); the ones that end the pull end the thread too.
    """

    def __init__(
        self, messages, cb: Callable[[Any], Any], error_cb: Optional[Callable[[BaseException], Any]], name: str
    ) -> None:
        if not callable(cb):
            raise TypeError(f"cb must be a callable taking a message, not {V.show(cb)}")
        if error_cb is not None and not callable(error_cb):
            raise TypeError(f"error_cb must be None or a callable taking an exception, not {V.show(error_cb)}")
        self._messages = messages
        self._cb = cb
        self._error_cb = error_cb
        self._name = name
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"jetspark-consume-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        it = self._messages
        try:
            while True:
                try:
                    msg = it.next()
                except StopIteration:
                    return
                except Exception as exc:  # the pull's error: reported; a final one ends the iterator
                    self._report(exc)
                    continue
                try:
                    self._cb(msg)
                except Exception:
                    log.exception("consume of %s: the callback raised on %r; delivery goes on", self._name, msg)
        finally:
            it.stop()
            self._done.set()

    def _report(self, exc: BaseException) -> None:
        if self._error_cb is None:
            level = logging.WARNING if isinstance(exc, JetSparkError) else logging.ERROR
            log.log(level, "consume of %s: %s: %s", self._name, type(exc).__name__, exc)
            return
        try:
            self._error_cb(exc)
        except Exception:
            log.exception("consume of %s: the error callback raised on %r", self._name, exc)

    @property
    def closed(self) -> bool:
        """Has consuming ended (stopped, drained, or ended by an error) and the last callback returned?"""
        return self._done.is_set()

    def stop(self) -> None:
        """Stop: the callback under way finishes, buffered messages are not delivered (they
        are redelivered after the consumer's ack_wait).  Returns at once; ``wait`` waits."""
        self._messages.stop()

    def drain(self) -> None:
        """Stop pulling, deliver what is buffered to the callback, then end."""
        self._messages.drain()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until consuming has ended (at most ``timeout`` seconds); whether it has.
        Called from the callback itself it does not wait."""
        if timeout is not None:
            timeout = V.timeout(timeout)
        if threading.current_thread() is self._thread:
            return self._done.is_set()
        return self._done.wait(timeout)

    def __enter__(self) -> "ConsumeContext":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        self.wait()

    def __repr__(self) -> str:
        return f"<ConsumeContext {self._name} {'closed' if self.closed else 'running'}>"


class MessagesBase:
    """What both backends' ``Messages`` do alike: iterate with ``next()``, and ``stop()`` on
    leaving a ``with`` block.  A subclass has ``next(timeout)`` and ``stop()``."""

    stop: Callable[[], None]  # (the subclass's; declared for the type checker)

    def __iter__(self):
        return self

    def __next__(self):
        return self.next()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class LivePulls:
    """``messages``, ``consume`` and ``unsubscribe`` of a pull subscription, written once
    (their contracts: ``jetspark.backend.PullSubscriptionAPI``).  A backend's subscription
    has ``stream`` and ``consumer`` and supplies ``_messages(opts)``, its ``Messages``
    iterator for checked options, and ``_settle_acks()``, which applies the acks given so far."""

    stream: str
    consumer: str

    def messages(
        self,
        max_messages: Optional[int] = None,
        max_bytes: Optional[int] = None,
        expires: Optional[float] = None,
        threshold_messages: Optional[int] = None,
        threshold_bytes: Optional[int] = None,
        heartbeat: Optional[float] = None,
    ):
        it = self._messages(
            pull_options(max_messages, max_bytes, expires, threshold_messages, threshold_bytes, heartbeat)
        )
        self.__dict__.setdefault("_live", weakref.WeakSet()).add(it)  # for unsubscribe
        return it

    def consume(
        self,
        cb: Callable[[Any], Any],
        max_messages: Optional[int] = None,
        max_bytes: Optional[int] = None,
        expires: Optional[float] = None,
        threshold_messages: Optional[int] = None,
        threshold_bytes: Optional[int] = None,
        heartbeat: Optional[float] = None,
        error_cb: Optional[Callable[[BaseException], Any]] = None,
    ) -> ConsumeContext:
        it = self.messages(max_messages, max_bytes, expires, threshold_messages, threshold_bytes, heartbeat)
        try:
            return ConsumeContext(it, cb, error_cb, f"{self.stream} > {self.consumer}")
        except BaseException:
            it.stop()
            raise

    def unsubscribe(self) -> None:
        for it in list(self.__dict__.get("_live", ())):
            it.stop()
        self._settle_acks()

    def _messages(self, opts: PullOptions):
        raise NotImplementedError

    def _settle_acks(self) -> None:
        raise NotImplementedError


def _contract_docs() -> None:
    """``help(sub.messages)`` shows the contract (jetspark.backend), as the handles' verbs do."""
    from jetspark.backend import PullSubscriptionAPI

    for name in ("messages", "consume", "unsubscribe"):
        getattr(LivePulls, name).__doc__ = getattr(PullSubscriptionAPI, name).__doc__


_contract_docs()
