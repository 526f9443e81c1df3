"""jetspark's one error tree.

::

    JetSparkError                         every error jetspark raises
    ├── APIError                          a JetStream API error: code, err_code, description
    │   ├── BadRequestError (ValueError)      HTTP 400: invalid name, config, subject, argument
    │   ├── NotFoundError (LookupError)       HTTP 404
    │   │   ├── StreamNotFoundError           10059 stream not found
    │   │   ├── ConsumerNotFoundError         10014 consumer not found
    │   │   └── MsgNotFoundError              10037 no message found
    │   ├── ServerError                       HTTP 500: invalid config (10052), purge/delete refused
    │   └── ServiceUnavailableError           HTTP 503: store refused (10077 limits with discard new)
    ├── NoStreamResponseError (LookupError)   no stream captures the subject (nats: no responders)
    ├── FetchTimeoutError (TimeoutError)      fetch found nothing before its timeout
    ├── NextMsgTimeoutError (TimeoutError)    a push subscription's next_msg found nothing before its timeout
    ├── NoHeartbeatError (TimeoutError)       nats:// backend: a pull's idle heartbeats stopped coming
    ├── SubscriptionError (ValueError)        subscribe cannot bind as asked (nats-py's client-side refusals)
    ├── StoreError                            the store on disk cannot be used; ``path`` names the file
    │   ├── CorruptStoreError                 a damaged file: detected, reported, never served
    │   └── StoreIOError (OSError)            the disk refused a write or read (``errno``, ``filename``)
    │       └── StoreFullError                no space left (ENOSPC, EDQUOT): nothing was stored
    ├── BackupError                           a stream backup cannot be written or restored; ``path`` names the file
    │   └── CorruptBackupError                a part of the backup is damaged, truncated or missing (checksum)
    ├── ClosedError                           the handle was used after close(), or a push
    │                                         subscription after unsubscribe()/drain()
    ├── ServerConnectionError (ConnectionError)  nats:// backend: cannot reach the server, or lost it
    │   └── AuthenticationError               the server refused the credentials
    ├── PermissionDeniedError (PermissionError)  nats:// backend: the user may not publish (or subscribe) there
    ├── RequestTimeoutError (TimeoutError)    nats:// backend: the server did not answer in time
    ├── TooManyStalledMsgsError               publish_async's window stayed full for ``wait_stall``
    ├── PublishAsyncTimeoutError (TimeoutError)  publish_async_completed's timeout passed first
    ├── LocationError (ValueError)            connect(), the CLI's --store/--server, the Spark store
    │                                         option: a store path that looks like a URL, a malformed
    │                                         server URL (``argument`` names what was given)
    ├── OptionError (ValueError)              Spark connector: an option is missing or not accepted
    ├── DataLossError                         Spark connector: retention removed messages before
    │                                         the query read them (failOnDataLoss=true)
    ├── SinkRegistryError                     Spark connector: the sink's registry of committed
    │                                         micro-batches cannot answer or record a commit
    └── AckFloorError                         advance_ack_floor could not bring the consumer's ack
                                              floor to the requested sequence (``reason`` says why)

API errors carry the server's ``code`` (HTTP-like status), ``err_code``
(JetStream's stable error number) and ``description`` exactly as nats-server
reports them, so code written against nats-py's ``APIError`` fields works
unchanged.  Every error pickles, because Spark ships executor errors to the
driver.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from jetspark import err_codes as E

__all__ = [
    "PUSH_BASED",
    "APIError",
    "AckFloorError",
    "AuthenticationError",
    "BackupError",
    "BadRequestError",
    "ClosedError",
    "ConsumerNotFoundError",
    "CorruptBackupError",
    "CorruptStoreError",
    "DataLossError",
    "FetchTimeoutError",
    "JetSparkError",
    "LocationError",
    "MsgNotFoundError",
    "NextMsgTimeoutError",
    "NoHeartbeatError",
    "NoStreamResponseError",
    "NotFoundError",
    "OptionError",
    "PermissionDeniedError",
    "PublishAsyncTimeoutError",
    "RequestTimeoutError",
    "ServerConnectionError",
    "ServerError",
    "ServiceUnavailableError",
    "SinkRegistryError",
    "StoreError",
    "StoreFullError",
    "StoreIOError",
    "StreamNotFoundError",
    "TooManyStalledMsgsError",
    "SubscriptionError",
    "add_note",
    "api_error",
    "error_from_response",
    "push_based_error",
]


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``: the note is shown under the error's traceback.  Python 3.10
    has no ``add_note``; there the note goes into ``__notes__`` all the same, where 3.11
    keeps it (and tools that show notes read it)."""
    if sys.version_info >= (3, 11):
        exc.add_note(note)
    else:
        exc.__notes__ = [*getattr(exc, "__notes__", ()), note]  # type: ignore[attr-defined]


class JetSparkError(Exception):
    """Root of every error jetspark raises."""


class APIError(JetSparkError):
    """A JetStream API error with the server's code, err_code and description."""

    def __init__(self, code: int = 0, err_code: int = 0, description: str = "") -> None:
        self.code = code
        self.err_code = err_code
        self.description = description
        super().__init__(code, err_code, description)

    def __str__(self) -> str:
        # The class name is left to the traceback and repr, which print it already.
        return f"{self.description or 'error'} (code={self.code} err_code={self.err_code})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, err_code={self.err_code}, description={self.description!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.err_code, self.description))


class BadRequestError(APIError, ValueError):
    """HTTP 400: the request named something invalid."""


class NotFoundError(APIError, LookupError):
    """HTTP 404: the stream, consumer or message does not exist."""


class StreamNotFoundError(NotFoundError):
    """10059: stream not found."""


class ConsumerNotFoundError(NotFoundError):
    """10014: consumer not found."""


class MsgNotFoundError(NotFoundError):
    """10037: no message found."""


class ServerError(APIError):
    """HTTP 500: the server refused the operation (bad config, purge or delete not permitted)."""


class ServiceUnavailableError(APIError):
    """HTTP 503: the store refused the message (limits with discard new)."""


class NoStreamResponseError(JetSparkError, LookupError):
    """No stream captures the published subject (nats-py raises NoRespondersError)."""

    def __init__(self, subject: str = "") -> None:
        self.subject = subject
        super().__init__(subject)

    def __str__(self) -> str:
        return f"no stream captures subject {self.subject!r}; add a stream whose subjects match it"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.subject,))


class FetchTimeoutError(JetSparkError, TimeoutError):
    """fetch() found no message before its timeout."""


class NextMsgTimeoutError(JetSparkError, TimeoutError):
    """A push subscription's next_msg() found no message before its timeout (nats-py's
    ``nats.errors.TimeoutError``)."""


class SubscriptionError(JetSparkError, ValueError):
    """``subscribe``/``subscribe_bind`` cannot bind the consumer as asked, where nats-py refuses
    on the client side (``nats.js.errors.Error``): a durable already bound, a queue that is not
    the consumer's deliver group, a pull consumer, ``next_msg`` on a subscription with a
    callback.  Nothing was created."""


class NoHeartbeatError(JetSparkError, TimeoutError):
    """No message and no idle heartbeat came for two heartbeat intervals while a pull was
    waiting on the server (nats.go's ErrNoHeartbeat): the connection, the server or the
    consumer's leader stalled.  ``messages()`` raises it from ``next`` and then pulls
    afresh; ``consume`` passes it to its ``error_cb`` and goes on."""


class StoreError(JetSparkError):
    """The store directory cannot be used as it is; ``path`` names the file concerned."""

    def __init__(self, message: str = "", path: str | os.PathLike[str] = "") -> None:
        self.path = str(path)
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.path))


class CorruptStoreError(StoreError):
    """A file of the store is damaged (a checksum, a length or a structure does not hold).

    The message names the file and what is wrong; the damaged data is never
    served.  ``JetStream.check_stream(name, repair=True)`` keeps every intact
    message and drops the rest.
    """


class StoreIOError(StoreError, OSError):
    """The operating system refused a read or write of the store (``errno``, ``filename``).

    Raised before anything is acknowledged: the call that fails stored
    nothing, and the store works again once the cause is gone.
    """

    def __init__(
        self, errno: int = 0, strerror: str = "", filename: str | os.PathLike[str] = "", action: str = ""
    ) -> None:
        OSError.__init__(self, errno, strerror, filename)
        self.path = str(filename)
        self.action = action

    def __str__(self) -> str:
        what = f" while {self.action}" if self.action else ""
        return f"[Errno {self.errno}] {self.strerror}: {self.filename!r}{what}; nothing was stored by this call"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.errno, self.strerror, self.filename, self.action))


class StoreFullError(StoreIOError):
    """The disk (or the quota) is full: ENOSPC or EDQUOT.  Free space and retry."""


class BackupError(JetSparkError):
    """A stream backup (``backup_stream``/``restore_stream``) cannot be written or used: the
    target directory is not empty, the directory holds no backup, or the backup was taken
    on the other kind of backend.  ``path`` names the file or directory concerned."""

    def __init__(self, message: str = "", path: str | os.PathLike[str] = "") -> None:
        self.path = str(path)
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.path))


class CorruptBackupError(BackupError):
    """A part of a backup is damaged, truncated or missing: its size or SHA-256 is not the
    one its manifest (``backup.json``, itself checksummed) records.  Nothing was restored."""


class ClosedError(JetSparkError):
    """The handle was used after close(), or a push subscription after unsubscribe() (or after
    drain() once it has handed out what it held)."""


class ServerConnectionError(JetSparkError, ConnectionError):
    """The nats:// backend cannot reach the server, or lost the connection and it did not
    come back within the handle's timeout."""


class AuthenticationError(ServerConnectionError):
    """The server refused the connection's credentials (user/password, token, nkey, creds)."""


class PermissionDeniedError(JetSparkError, PermissionError):
    """The nats:// backend's server refused a subject by the user's permissions (its
    ``-ERR 'Permissions Violation ...'``); ``subject`` is the one denied."""

    def __init__(self, message: str = "", subject: str = "") -> None:
        self.subject = subject
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.subject))


class RequestTimeoutError(JetSparkError, TimeoutError):
    """The nats:// backend's server is connected but did not answer within the timeout."""


class TooManyStalledMsgsError(JetSparkError):
    """``publish_async`` waited ``wait_stall`` seconds for room among the handle's
    ``publish_async_max_pending`` unacknowledged publishes (nats-py's name); nothing was sent."""


class PublishAsyncTimeoutError(JetSparkError, TimeoutError):
    """``publish_async_completed(timeout)``: publishes were still unacknowledged when the timeout passed."""


# err_code -> (HTTP code, description template, class). Descriptions are the
# server's own text (docs/semantics.md §7); templates take keyword fields.
_API_ERRORS: dict[int, tuple[int, str, type[APIError]]] = {
    E.BAD_REQUEST: (400, "bad request", BadRequestError),
    E.CONSUMER_CREATE: (500, "{err}", ServerError),
    E.CONSUMER_NAME_EXIST: (400, "consumer name already in use", BadRequestError),
    E.CONSUMER_NOT_FOUND: (404, "consumer not found", ConsumerNotFoundError),
    E.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT: (
        400,
        "consumer name in subject does not match durable name in request",
        BadRequestError,
    ),
    E.INVALID_JSON: (400, "invalid JSON: {err}", BadRequestError),
    E.MAXIMUM_CONSUMERS_LIMIT: (400, "maximum consumers limit reached", BadRequestError),
    E.NO_MESSAGE_FOUND: (404, "no message found", MsgNotFoundError),
    E.SEQUENCE_NOT_FOUND: (400, "sequence {seq} not found", BadRequestError),
    E.STREAM_INVALID_CONFIG: (500, "{err}", ServerError),
    E.STREAM_MESSAGE_EXCEEDS_MAXIMUM: (400, "message size exceeds maximum allowed", BadRequestError),
    E.STREAM_MSG_DELETE_FAILED: (500, "{err}", ServerError),
    E.STREAM_NAME_EXIST: (400, "stream name already in use with a different configuration", BadRequestError),
    E.STREAM_NOT_FOUND: (404, "stream not found", StreamNotFoundError),
    E.STREAM_NOT_MATCH: (400, "expected stream does not match", BadRequestError),
    E.STREAM_RESTORE: (500, "restore failed: {err}", ServerError),
    E.STREAM_SUBJECT_OVERLAP: (400, "subjects overlap with an existing stream", BadRequestError),
    E.STREAM_WRONG_LAST_MSG_ID: (400, "wrong last msg ID: {id}", BadRequestError),
    E.STREAM_WRONG_LAST_SEQUENCE: (400, "wrong last sequence: {seq}", BadRequestError),
    E.STREAM_REPLICAS_NOT_SUPPORTED: (500, "replicas > 1 not supported in non-clustered mode", ServerError),
    E.STREAM_STORE_FAILED: (503, "{err}", ServiceUnavailableError),
    E.CONSUMER_DELIVER_TO_WILDCARDS: (400, "consumer deliver subject has wildcards", BadRequestError),
    E.CONSUMER_PUSH_MAX_WAITING: (400, "consumer in push mode can not set max waiting", BadRequestError),
    E.CONSUMER_DELIVER_CYCLE: (400, "consumer deliver subject forms a cycle", BadRequestError),
    E.CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED: (
        400,
        "consumer requires ack policy for max ack pending",
        BadRequestError,
    ),
    E.CONSUMER_SMALL_HEARTBEAT: (400, "consumer idle heartbeat needs to be >= 100ms", BadRequestError),
    E.CONSUMER_PULL_REQUIRES_ACK: (
        400,
        "consumer in pull mode requires explicit ack policy on workqueue stream",
        BadRequestError,
    ),
    E.CONSUMER_HB_REQUIRES_PUSH: (400, "consumer idle heartbeat requires a push based consumer", BadRequestError),
    E.CONSUMER_FC_REQUIRES_PUSH: (400, "consumer flow control requires a push based consumer", BadRequestError),
    E.CONSUMER_INVALID_POLICY: (400, "{err}", BadRequestError),
    E.CONSUMER_WQ_REQUIRES_EXPLICIT_ACK: (400, "workqueue stream requires explicit ack", BadRequestError),
    E.CONSUMER_WQ_MULTIPLE_UNFILTERED: (
        400,
        "multiple non-filtered consumers not allowed on workqueue stream",
        BadRequestError,
    ),
    E.CONSUMER_WQ_CONSUMER_NOT_UNIQUE: (400, "filtered consumer not unique on workqueue stream", BadRequestError),
    E.CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL: (400, "consumer must be deliver all on workqueue stream", BadRequestError),
    E.CONSUMER_NAME_TOO_LONG: (400, "consumer name is too long, maximum allowed is {max}", BadRequestError),
    E.CONSUMER_DESCRIPTION_TOO_LONG: (
        400,
        "consumer description is too long, maximum allowed is {max}",
        BadRequestError,
    ),
    E.CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS: (
        400,
        "consumer with flow control also needs heartbeats",
        BadRequestError,
    ),
    E.STREAM_SEALED: (400, "invalid operation on sealed stream", BadRequestError),
    E.STREAM_PURGE_FAILED: (500, "{err}", ServerError),
    E.STREAM_ROLLUP_FAILED: (500, "{err}", ServerError),
    E.CONSUMER_INVALID_DELIVER_SUBJECT: (400, "invalid push consumer deliver subject", BadRequestError),
    E.CONSUMER_MAX_DELIVER_BACKOFF: (400, "max deliver is required to be > length of backoff values", BadRequestError),
    E.CONSUMER_NAME_CONTAINS_PATH_SEPARATORS: (400, "Consumer name can not contain path separators", BadRequestError),
    E.STREAM_NAME_CONTAINS_PATH_SEPARATORS: (400, "Stream name can not contain path separators", BadRequestError),
    E.STREAM_NAME_EXIST_RESTORE_FAILED: (400, "stream name already in use, cannot restore", BadRequestError),
    E.REPLICAS_COUNT_CANNOT_BE_NEGATIVE: (400, "replicas count cannot be negative", BadRequestError),
    E.CONSUMER_DUPLICATE_FILTER_SUBJECTS: (
        400,
        "consumer cannot have both FilterSubject and FilterSubjects specified",
        BadRequestError,
    ),
    E.CONSUMER_OVERLAPPING_SUBJECT_FILTERS: (400, "consumer subject filters cannot overlap", BadRequestError),
    E.CONSUMER_EMPTY_FILTER: (400, "consumer filter in FilterSubjects cannot be empty", BadRequestError),
    E.CONSUMER_ALREADY_EXISTS: (400, "consumer already exists", BadRequestError),
    E.CONSUMER_DOES_NOT_EXIST: (400, "consumer does not exist", BadRequestError),
    E.CONSUMER_ACK_WAIT_NEGATIVE: (400, "consumer ack wait needs to be positive", BadRequestError),
    E.CONSUMER_BACK_OFF_NEGATIVE: (400, "consumer backoff needs to be positive", BadRequestError),
    E.STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID: (
        400,
        "missing sequence for expected last sequence per subject",
        BadRequestError,
    ),
}


# A pull request (fetch) to a push consumer: the server's status 409, which carries no err_code.
PUSH_BASED = "Consumer is push based"


def push_based_error() -> APIError:
    """What ``fetch`` on a push consumer raises: the server's answer to the pull request."""
    return APIError(409, 0, PUSH_BASED)


def api_error(err_code: int, **fields: object) -> APIError:
    """Build the typed error the server reports for ``err_code``.

    ``fields`` fill the server's description template, e.g.
    ``api_error(10071, seq=5)`` -> ``wrong last sequence: 5``.
    """
    code, template, cls = _API_ERRORS[err_code]
    return cls(code, err_code, template.format(**fields))


_BY_HTTP_CODE: dict[int, type[APIError]] = {
    400: BadRequestError,
    404: NotFoundError,
    500: ServerError,
    503: ServiceUnavailableError,
}


def error_from_response(error: dict[str, Any]) -> APIError:
    """Translate a JetStream ``{"code", "err_code", "description"}`` error object."""
    err_code = int(error.get("err_code", 0))
    code = int(error.get("code", 0))
    cls = _API_ERRORS[err_code][2] if err_code in _API_ERRORS else _BY_HTTP_CODE.get(code, APIError)
    return cls(code, err_code, str(error.get("description", "")))


class LocationError(JetSparkError, ValueError):
    """Where to connect cannot be used as given: a store path that looks like a URL
    (``nats:/host:4222``, which would otherwise create a local directory of that name), or a
    server URL that cannot be parsed.  The message shows the form probably meant; ``argument``
    names what carried it (``url``, ``--store``, the ``store`` option).  Nothing was created."""

    def __init__(self, message: str = "", argument: str = "") -> None:
        self.argument = argument
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.argument))


class OptionError(JetSparkError, ValueError):
    """A Spark connector option is missing or has a value the connector does not accept."""


class DataLossError(JetSparkError):
    """Retention removed messages before the query read them (the connector's ``failOnDataLoss=true``)."""


class AckFloorError(JetSparkError):
    """``advance_ack_floor`` could not acknowledge everything the consumer matches up to ``seq``:
    the ack floor it reached is ``floor`` (below ``seq``); ``reason`` says what stopped it."""

    def __init__(self, stream: str = "", consumer: str = "", seq: int = 0, floor: int = 0, reason: str = "") -> None:
        self.stream = stream
        self.consumer = consumer
        self.seq = seq
        self.floor = floor
        self.reason = reason
        super().__init__(stream, consumer, seq, floor, reason)

    def __str__(self) -> str:
        return (f"cannot advance the ack floor of consumer {self.consumer!r} on stream {self.stream!r} "
                f"to seq {self.seq}: {self.reason} (its ack floor is at stream seq {self.floor})")  # fmt: skip

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.stream, self.consumer, self.seq, self.floor, self.reason))


class SinkRegistryError(JetSparkError):
    """The streaming sink's registry of committed micro-batches (the connector's
    ``JETSPARK_SINKS`` stream) cannot answer or record a commit."""
