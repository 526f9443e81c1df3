"""Retrying calls through a time the server cannot answer: a leader election, a cold cluster.

On a JetStream cluster, losing a node costs its streams' and consumers' leaders
a few seconds of election, and a freshly started cluster needs a moment before
it places anything.  Meanwhile requests go unanswered (a timeout), a publish
finds no stream leader listening (no responders), or the server answers "try
again" (``TRANSIENT_ERR_CODES``).  A call that is safe to repeat is repeated
with back-off until it succeeds or the session's ``retry_budget`` (a
connection option, default 30 s) runs out; then its last error is raised with
what was tried.

What is safe to repeat (docs/semantics.md, "Retries"):

- everything the server certainly did not apply: no responders (nobody took
  the request), a "temporarily unavailable" answer, a connection that was
  not up when the request was to be sent;
- an unanswered request (timeout, connection lost) only when applying it
  twice is the same as once: reads, infos, creating a stream or consumer of
  a fixed config, a publish with a ``Nats-Msg-Id`` (the stream deduplicates
  it), acknowledging.  Other calls (a purge, a delete, a publish without an
  id) raise at once, saying the request may or may not have taken effect.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Callable, Optional, TypeVar

from jetspark.err_codes import (
    CLUSTER_NO_PEERS,
    CLUSTER_NOT_AVAIL,
    CONSUMER_OFFLINE,
    STREAM_DUPLICATE_MESSAGE_CONFLICT,
    STREAM_OFFLINE,
)
from jetspark.errors import APIError, AuthenticationError, JetSparkError, RequestTimeoutError, ServerConnectionError

__all__ = [
    "Backoff",
    "ConnectionGoneError",
    "NotSentError",
    "Retrier",
    "TRANSIENT_ERR_CODES",
    "retrying",
    "transient",
    "unknown_outcome",
]

log = logging.getLogger("jetspark.remote")

T = TypeVar("T")

# Answers that say the request was not applied and may succeed later:
# 10008 "JetStream system temporarily unavailable" (no meta leader yet),
# 10005 "no suitable peers for placement" (a cold cluster's meta leader has not
# heard from its peers yet), 10118 / 10119 stream / consumer "is offline"
# (no leader elected yet), 10158 "duplicate message id is in process" (a cluster's
# answer to a publish whose Nats-Msg-Id an earlier publish is still storing: repeated,
# it is answered as the duplicate it is).
TRANSIENT_ERR_CODES = frozenset(
    {CLUSTER_NO_PEERS, CLUSTER_NOT_AVAIL, STREAM_OFFLINE, CONSUMER_OFFLINE, STREAM_DUPLICATE_MESSAGE_CONFLICT}
)


class ConnectionGoneError(ServerConnectionError):
    """The connection is closed for good (its client gave up reconnecting): repeating a call
    cannot help, so it is raised at once instead of after the retry budget."""


class NotSentError(ServerConnectionError):
    """The connection was down when a request was to be sent: the server never saw it, so
    any call may be repeated.  (Raised as what it is, a ``ServerConnectionError``.)"""


FIRST_WAIT = 0.1
MAX_WAIT = 2.0


class Backoff:
    """Waits that double from ``FIRST_WAIT`` to ``MAX_WAIT`` (with jitter, so clients
    that lost the same node do not retry in step), within a budget of seconds."""

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.started = time.monotonic()
        self.deadline = self.started + budget
        self.attempts = 0
        self._wait = FIRST_WAIT

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def next_wait(self) -> Optional[float]:
        """The wait before the next attempt, or None when the budget does not allow one."""
        wait = self._wait * random.uniform(0.8, 1.2)
        if time.monotonic() + wait >= self.deadline:
            return None
        self._wait = min(self._wait * 2, MAX_WAIT)
        self.attempts += 1
        return wait


def transient(err: BaseException, idempotent: bool) -> bool:
    """Whether ``err`` may pass if the call is repeated (and repeating it is safe)."""
    if isinstance(err, APIError):
        return err.err_code in TRANSIENT_ERR_CODES
    if isinstance(err, AuthenticationError):
        return False
    if isinstance(err, ConnectionGoneError):
        return False
    if isinstance(err, NotSentError):
        return True  # the connection was down: the server never saw the request
    if isinstance(err, (RequestTimeoutError, ServerConnectionError)):
        return idempotent
    return False


def unknown_outcome(err: JetSparkError, what: str) -> JetSparkError:
    """The error of a call that is not repeated after no answer: say that it may have been applied."""
    if isinstance(err, (RequestTimeoutError, ServerConnectionError)) and not isinstance(err, AuthenticationError):
        return type(err)(
            f"{err}; {what} is not repeated automatically because it may have taken effect (on a cluster, a "
            "leader election may be in progress): check the state before repeating it"
        )
    return err


def exhausted(err: JetSparkError, backoff: Backoff) -> JetSparkError:
    """The last error of a call retried until the budget ran out, saying so."""
    if backoff.attempts == 0 or not isinstance(err, (RequestTimeoutError, ServerConnectionError)):
        return err  # (an APIError keeps the server's own fields, others their own; the log said it was retried)
    # What was tried, not a guess at the cause: the server this client was talking to may
    # have been unreachable (a frozen node) while the cluster's quorum was intact.
    return type(err)(f"{err} (tried {backoff.attempts + 1} times over {backoff.elapsed:.1f} s, the retry_budget)")


class Retrier:
    """The retry loop's state for a call that runs in steps (a read of many chunks): each
    step that fails transiently is waited on (``failed``), and a step that succeeds gives
    the next failure a budget of its own (``succeeded``)."""

    def __init__(self, budget: float, what: str, idempotent: bool = True) -> None:
        self.budget = budget
        self.what = what
        self.idempotent = idempotent
        self.backoff: Optional[Backoff] = None

    def failed(self, err: JetSparkError, also: Optional[Callable[[JetSparkError], bool]] = None) -> None:
        """Wait before the next attempt; raise (inside ``except``) when ``err`` is not
        transient or the budget is spent."""
        if not (transient(err, self.idempotent) or (also is not None and also(err))):
            told = err if self.idempotent else unknown_outcome(err, self.what)
            if told is err:
                raise
            raise told from err
        if self.backoff is None:
            self.backoff = Backoff(self.budget)
        wait = self.backoff.next_wait()
        if wait is None:
            told = exhausted(err, self.backoff)
            if told is err:
                raise
            raise told from err
        log.info("%s: %s; retrying in %.1f s", self.what, err, wait)
        time.sleep(wait)

    def succeeded(self) -> None:
        self.backoff = None


def retrying(call: Callable[[], T], *, budget: float, what: str, idempotent: bool = True,
             also: Optional[Callable[[JetSparkError], bool]] = None) -> T:  # fmt: skip
    """``call()``, repeated with back-off while it fails with a transient error (``also(err)``
    names more) and the budget lasts."""
    retrier = Retrier(budget, what, idempotent)
    while True:
        try:
            return call()
        except JetSparkError as err:
            retrier.failed(err, also)
