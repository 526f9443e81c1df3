"""The declared API of what a handle hands out: its delivered messages and subscriptions.

A pull consumer's subscription satisfies ``PullSubscriptionAPI``, its continuous pulls
``MessagesAPI`` (``messages()``) and ``ConsumeContextAPI`` (``consume(cb)``); a push
consumer's subscription satisfies ``PushSubscriptionAPI``; every message they deliver
(and ``ordered_consumer``'s) ``MsgAPI``.  ``jetspark.backend`` re-exports them beside
``JetStreamAPI``, whose module docstring says what every verb shares (argument checks,
errors).  Each verb's docstring below is its contract; section numbers (§N) refer to
``docs/semantics.md``.  This module imports nothing of jetspark but ``jetspark.api``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Protocol, runtime_checkable

from jetspark.api import ConsumerInfo, MsgMetadata

__all__ = ["ConsumeContextAPI", "MessagesAPI", "MsgAPI", "PullSubscriptionAPI", "PushSubscriptionAPI"]


@runtime_checkable
class MsgAPI(Protocol):
    """A message delivered by a pull consumer (or ``ordered_consumer``)."""

    subject: str
    data: bytes
    headers: Optional[dict[str, Any]]

    @property
    def reply(self) -> str:
        """The ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`` subject."""
        ...

    @property
    def metadata(self) -> MsgMetadata:
        """Stream and consumer sequences, delivery count, pending count, timestamp,
        stream and consumer names, as the server reports them (§6)."""
        ...

    def ack(self) -> None:
        """Acknowledge, fire-and-forget as in nats-py.  The handle applies it before
        its next call, so a ``consumer_info`` after a loop of ``ack()`` already counts
        them.  Acks lost with the process are redelivered after ``ack_wait`` (§5.3).
        A message from ``ordered_consumer`` ignores every ack verb."""
        ...

    def ack_sync(self, timeout: float = 1.0) -> "MsgAPI":
        """Acknowledge and wait (at most ``timeout`` seconds, a finite number >= 0)
        until the ack is applied; returns the message."""
        ...

    def nak(self, delay: Optional[float] = None) -> None:
        """Ask for redelivery, not before ``delay`` seconds (None: at once) (§5.3)."""
        ...

    def in_progress(self) -> None:
        """Restart the ack_wait clock without counting a new delivery (§5.3)."""
        ...

    def term(self) -> None:
        """Never redeliver; on interest and work-queue streams the message is
        released as if acknowledged (§3.3, §3.4)."""
        ...


@runtime_checkable
class MessagesAPI(Protocol):
    """A continuous pull, ``PullSubscription.messages()`` (nats.go's ``MessagesContext``):
    an iterator of messages kept ahead of the caller in a buffer.

    The buffer is refilled whenever what it holds (with, on a server, what is asked and not
    yet arrived) falls below the threshold, checked at each ``next``, so the consumer
    delivers at most ``max_messages`` (or ``max_bytes``) ahead of the caller; buffered
    messages are delivered ones, and those never handed out are redelivered after the
    consumer's ``ack_wait``.  On the engine a waiting ``next`` wakes when another process
    publishes or acknowledges (without polling where inotify is available) and when a
    pending delivery falls due; on a server, pull requests stay outstanding with
    ``expires`` and ``idle_heartbeat``.

    Iteration ends (``StopIteration``) after ``stop`` or once ``drain`` has handed out the
    buffer.  Errors are raised by ``next`` after the messages buffered before them:
    ``ConsumerNotFoundError``/``StreamNotFoundError`` when the consumer or its stream is
    deleted, ``ClosedError`` when the handle closes (these end the iteration), and on a
    server ``NoHeartbeatError`` when heartbeats stop coming (the next call pulls afresh)."""

    def __iter__(self) -> Iterator[MsgAPI]: ...

    def __next__(self) -> MsgAPI: ...

    def next(self, timeout: Optional[float] = None) -> MsgAPI:
        """The next message, waiting at most ``timeout`` seconds (None: until one comes or
        the iteration ends); ``FetchTimeoutError`` when none came in time, ``StopIteration``
        when the iteration has ended, or the pull's error (see the class docstring)."""
        ...

    def stop(self) -> None:
        """End the iteration now; buffered messages are dropped (and redelivered after
        ``ack_wait``).  A ``next`` waiting in another thread returns (``StopIteration``)."""
        ...

    def drain(self) -> None:
        """Stop pulling; ``next`` hands out what is buffered, then ends the iteration."""
        ...

    def __enter__(self) -> "MessagesAPI":
        """The iterator; ``stop()`` on leaving the ``with`` block."""
        ...

    def __exit__(self, *exc: Any) -> None: ...


@runtime_checkable
class ConsumeContextAPI(Protocol):
    """``PullSubscription.consume(cb)`` under way (nats.go's ``ConsumeContext``):
    one background thread calling ``cb`` on each message in delivery order."""

    @property
    def closed(self) -> bool:
        """Has it ended (stopped, drained or ended by an error) and its last callback returned?"""
        ...

    def stop(self) -> None:
        """Stop: the callback under way finishes, buffered messages are not delivered."""
        ...

    def drain(self) -> None:
        """Stop pulling, deliver the buffered messages to the callback, then end."""
        ...

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait at most ``timeout`` seconds (None: no limit) for the end; whether it ended."""
        ...

    def __enter__(self) -> "ConsumeContextAPI":
        """The context; ``stop()`` and ``wait()`` on leaving the ``with`` block."""
        ...

    def __exit__(self, *exc: Any) -> None: ...


@runtime_checkable
class PullSubscriptionAPI(Protocol):
    """A pull consumer bound to a stream (nats-py's ``PullSubscription``, synchronously)."""

    stream: str
    consumer: str

    def fetch(
        self,
        batch: int = 1,
        timeout: Optional[float] = 5.0,
        heartbeat: Optional[float] = None,
        no_wait: bool = False,
        max_bytes: Optional[int] = None,
    ) -> list[MsgAPI]:
        """Up to ``batch`` (1..2**31-1) messages, at most ``max_bytes`` bytes of them
        (None or 0: no limit), in delivery order; waits up to ``timeout`` seconds
        (None: 5) for the first one, not at all with ``no_wait``.  ``heartbeat``
        (seconds, at most half the timeout; nats-py's) asks the server for idle
        heartbeats while it waits, and ``NoHeartbeatError`` when two are missed; the
        engine checks it and has nothing to watch.

        Returns at least one message.  ``FetchTimeoutError`` (a ``TimeoutError``)
        when none came in time, as nats-py raises.  Delivery follows the consumer's
        policies: ``max_ack_pending``, redelivery after ``ack_wait``/``backoff``
        up to ``max_deliver``, ``headers_only`` (§5.2-§5.5).  A push consumer answers
        with the server's ``APIError`` 409 "Consumer is push based" (§5.6).  On the engine
        a waiting fetch wakes when another process publishes or acknowledges, and when a
        pending delivery falls due (§5.7)."""
        ...

    def messages(
        self,
        max_messages: Optional[int] = None,
        max_bytes: Optional[int] = None,
        expires: Optional[float] = None,
        threshold_messages: Optional[int] = None,
        threshold_bytes: Optional[int] = None,
        heartbeat: Optional[float] = None,
    ) -> MessagesAPI:
        """A continuous pull (nats.go's ``Consumer.Messages``, see ``MessagesAPI``),
        nats.go's options and defaults: a buffer of ``max_messages`` (default 500) or
        of ``max_bytes`` (then up to 1,000,000 messages; the two exclude each other),
        refilled below ``threshold_messages``/``threshold_bytes`` (default: half);
        pull requests that ``expires`` after 30 s (at least 1) with an idle
        ``heartbeat`` of half that, at most 30 s (given: at most half of ``expires``;
        0: none).  ``expires`` and ``heartbeat`` only matter on a server.
        ``TypeError``/``ValueError`` naming a bad argument."""
        ...

    def consume(
        self,
        cb: Callable[[MsgAPI], Any],
        max_messages: Optional[int] = None,
        max_bytes: Optional[int] = None,
        expires: Optional[float] = None,
        threshold_messages: Optional[int] = None,
        threshold_bytes: Optional[int] = None,
        heartbeat: Optional[float] = None,
        error_cb: Optional[Callable[[BaseException], Any]] = None,
    ) -> ConsumeContextAPI:
        """``cb(msg)`` for each message of a ``messages(...)`` pull with these options, on
        one background thread, in delivery order (nats.go's ``Consumer.Consume``).  An
        exception raised by ``cb`` is logged and delivery goes on.  The pull's errors go
        to ``error_cb(err)`` (default: logged): ``NoHeartbeatError`` and consuming goes
        on; the consumer or stream deleted, or the handle closed, and consuming ends."""
        ...

    def consumer_info(self) -> ConsumerInfo:
        """``consumer_info(stream, consumer)`` of the bound consumer."""
        ...

    def unsubscribe(self) -> None:
        """Stop using the subscription: its ``messages``/``consume`` pulls stop; acks given
        so far are applied first.  The consumer itself stays (delete it with
        ``delete_consumer``)."""
        ...


@runtime_checkable
class PushSubscriptionAPI(Protocol):
    """A subscription on a push consumer (nats-py's ``PushSubscription``, synchronously), as
    ``subscribe`` and ``subscribe_bind`` return it (§5.6).

    With a callback, one thread of its own calls it for each message, in delivery
    order, one at a time; an exception from the callback is logged (logger
    ``jetspark.push``) and delivery goes on, the message unacknowledged.
    Without a callback, ``next_msg`` and ``messages`` hand the messages out.
    Messages are delivered as the consumer's policies say (``max_ack_pending``,
    redelivery after ``ack_wait`` or a nak, ``max_deliver``); a queue group's
    members share the consumer, each message going to one of them.  When the
    consumer is deleted under a subscription, delivery stops (an ordered
    consumer's subscription makes a new one); the engine's ``next_msg`` then
    raises ``ConsumerNotFoundError``, a server's delivers nothing more."""

    stream: str
    consumer: str  # an ordered consumer's changes when it is made again

    def next_msg(self, timeout: Optional[float] = 1.0) -> MsgAPI:
        """The next message, waiting up to ``timeout`` seconds (None: no limit).
        ``NextMsgTimeoutError`` (a ``TimeoutError``) when none came in time;
        ``ClosedError`` once the subscription ended (``unsubscribe``, or ``drain`` and
        everything it held handed out); ``SubscriptionError`` on a subscription with a
        callback."""
        ...

    @property
    def messages(self) -> Iterator[MsgAPI]:
        """Every message, as ``next_msg(None)`` returns them, until the subscription ends
        (``unsubscribe``/``drain``, from this thread or another): ``for msg in sub.messages``,
        a property as in nats-py (a synchronous iterator; calling it, ``sub.messages()``, returns
        the same iterator).  ``SubscriptionError`` on a subscription with a callback."""
        ...

    @property
    def pending_msgs(self) -> int:
        """How many messages were delivered to the subscription and not yet handed out
        (to ``next_msg``/``messages`` or to the callback), as nats-py counts its pending queue."""
        ...

    def consumer_info(self) -> ConsumerInfo:
        """``consumer_info(stream, consumer)`` of the bound consumer."""
        ...

    def unsubscribe(self) -> None:
        """Stop delivery at once: messages delivered to the subscription and not yet handed
        out are dropped (redelivered after ``ack_wait``, as when a client drops what a
        server pushed).  Waits for a callback in progress to return; applies the acks given.
        An ephemeral consumer the subscription created is deleted (a server would remove it
        after its ``inactive_threshold``); a durable stays.  Idempotent."""
        ...

    def drain(self) -> None:
        """Stop taking new messages and hand out what the subscription holds, then end as
        ``unsubscribe``.  With a callback, returns once the callback has handled them all;
        without, returns at once and ``next_msg``/``messages`` hand out the rest."""
        ...
