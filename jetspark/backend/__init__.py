"""The JetStream API both backends implement: the contract, declared once.

``jetspark.connect`` returns one of two handles: ``jetspark.engine.handle.JetStream``
(the embedded engine on a directory) or ``jetspark.remote.client.NatsJetStream``
(a real NATS server through nats-py).  Both satisfy ``JetStreamAPI``, declared
here; their subscriptions satisfy ``PullSubscriptionAPI`` (pull consumers) and
``PushSubscriptionAPI`` (push consumers), the continuous pulls of the former
``MessagesAPI`` and ``ConsumeContextAPI``, and their delivered messages
``MsgAPI``, declared in ``subscriptions`` and importable from here too.  Code that
must work on either (the Spark connector, the CLI) types against these Protocols.
What the two handles share is implemented once, in
``jetspark.backend.base.HandleBase``, which both inherit (and what their
continuous pulls share in ``jetspark.backend.live``).

The package's modules: ``subscriptions`` (the Protocols of what a handle hands out:
messages and subscriptions), ``base`` (``HandleBase``: every verb, written once),
``hooks`` (``Hooks``: what each backend implements under it, declared whole),
``live`` (continuous pulls' options and callback runner), ``push`` (push subscriptions' public verbs),
``window`` (``publish_async``'s bounded window), ``archive`` (stream backups on
disk), each importing neither backend.

``tests/test_backend.py`` checks that both handles (and their subscriptions and
messages) declare every verb of these Protocols with the same signature and
nothing public beyond it; ``tests/contract/`` checks the behaviour on both,
against nats-server through nats-py's own client (``tests/oracle.py``).

Each verb's docstring below (and in ``subscriptions``) is its contract.  Section
numbers (§N) refer to ``docs/semantics.md``.  What the verbs share is said once here:

- Names, configs and results are nats-py's (``jetspark.api`` dataclasses);
  API errors carry the server's ``code``, ``err_code`` and ``description``
  (``jetspark.errors``, §7).
- Arguments are checked before anything is done (``jetspark.validate``): a
  refused call writes nothing.  An argument that travels in a JetStream
  request and has the wrong type is ``BadRequestError`` 10025 naming the
  field; jetspark's own arguments (payloads, tables, batch sizes) are
  ``TypeError``/``ValueError`` naming the argument.
- A stream argument that names no stream is ``StreamNotFoundError`` (10059);
  a consumer argument that names no consumer is ``ConsumerNotFoundError``
  (10014).
- Any verb may raise, besides what it lists: ``ClosedError`` after
  ``close()``; on the engine ``StoreError`` (``CorruptStoreError`` for a
  damaged file, ``StoreIOError``/``StoreFullError`` when the disk refuses);
  on a server ``ServerConnectionError``, ``RequestTimeoutError`` (no answer
  within the handle's timeout) and ``PermissionDeniedError``.

Backend-only extras are outside the contract: the engine's ``check_stream``
(file checks and repair), the nats backend's ``from_options``, and public
attributes such as ``path`` or ``url``.  ``tests/test_backend.py`` lists them.
"""

from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Iterator,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    runtime_checkable,
)

from jetspark.api import (
    BackupInfo,
    BatchAck,
    ConsumerConfig,
    ConsumerInfo,
    ConsumerPause,
    DeliverPolicy,
    PubAck,
    RawStreamMsg,
    SequenceInfo,
    StreamConfig,
    StreamInfo,
)
from jetspark.backend.subscriptions import (
    ConsumeContextAPI,
    MessagesAPI,
    MsgAPI,
    PullSubscriptionAPI,
    PushSubscriptionAPI,
)

if TYPE_CHECKING:
    from concurrent.futures import Future
    from datetime import datetime

    import pyarrow as pa

__all__ = ["ConsumeContextAPI", "JetStreamAPI", "MessagesAPI", "MsgAPI", "PullSubscriptionAPI", "PushSubscriptionAPI"]


@runtime_checkable
class JetStreamAPI(Protocol):
    """A synchronous JetStream handle: nats-py's JetStream verbs plus the bulk verbs
    the Spark connector reads and writes with.  See the module docstring for what
    every verb shares (argument checks, errors)."""

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Apply pending acks and release the handle (files, locks, the connection).
        Idempotent.  Every later call raises ``ClosedError``."""
        ...

    @property
    def closed(self) -> bool:
        """Whether no call on this handle can succeed any more: it was closed, or (a
        nats:// handle) its connection is closed for good, its client having given up
        reconnecting (calls then raise ``ServerConnectionError``).  A connection that is
        down but reconnecting is not closed."""
        ...

    def __enter__(self) -> "JetStreamAPI":
        """The handle itself; ``close()`` on leaving the ``with`` block."""
        ...

    def __exit__(self, *exc: Any) -> None: ...

    # ------------------------------------------------------------------ streams

    def add_stream(self, config: Optional[StreamConfig] = None, **params: Any) -> StreamInfo:
        """Create a stream from ``config`` (a ``StreamConfig`` or a dict) with
        ``params`` overriding its fields (nats-py's ``add_stream(config, **params)``).

        Returns its info, the config as the server echoes it, defaults filled in
        (§1.1).  Adding an existing stream with an identical
        config changes nothing and returns its info.  Errors (§1.2): 10058 the
        name is in use with another config; 10065 its subjects overlap another
        stream's; 10052 an invalid config; 10128 a name with a path separator;
        10074 replicas > 1; 10025 a field of the wrong type.  A refused create
        leaves nothing behind."""
        ...

    def update_stream(self, config: Optional[StreamConfig] = None, **params: Any) -> StreamInfo:
        """Replace the config of the stream ``config.name`` as a whole (omitted fields
        return to their defaults) and return its new info.  Fields the server
        fixes (storage, name, work-queue retention either way) are refused with its
        err_code (10052); lower limits remove messages at once and a change from
        limits to interest retention applies the consumers' acks (§1.3).
        10052 also for a name no stream can have (a path separator too);
        10059 when there is no such stream; 10065 for overlapping subjects."""
        ...

    def delete_stream(self, name: str) -> bool:
        """Delete the stream, its messages and its consumers; True.  10059 when there
        is none.  On the engine a damaged stream can be deleted too."""
        ...

    def stream_info(
        self, name: str, subjects_filter: Optional[str] = None, deleted_details: bool = False
    ) -> StreamInfo:
        """The stream's config and state (§4).  With ``subjects_filter`` (a subject
        filter, wildcards allowed), ``state.subjects`` counts the live messages of
        each matching subject (every page of them); with ``deleted_details``,
        ``state.deleted`` lists the deleted sequences.  10059 when there is none."""
        ...

    def streams_info(self) -> list[StreamInfo]:
        """Every stream's info, sorted by name (all pages).  The engine leaves out a
        damaged stream, with a warning."""
        ...

    def stream_names(self) -> list[str]:
        """Every stream's name, sorted (the engine lists damaged streams too: their
        names are taken)."""
        ...

    def find_stream_name_by_subject(self, subject: str) -> str:
        """The name of the stream whose subjects capture ``subject`` (a subject or a
        filter).  10059 when none does, or when ``subject`` is not a valid subject."""
        ...

    def purge_stream(
        self, name: str, subject: Optional[str] = None, seq: Optional[int] = None, keep: Optional[int] = None
    ) -> bool:
        """Remove messages; True.  All of them, or those matching ``subject`` (a
        filter), and of those only the ones below ``seq`` or all but the newest
        ``keep`` (0 means unset for both; both set is 10003).  Purging below a
        ``seq`` past the end moves the floor so the next publish gets ``seq``.
        Consumers move past what was purged (§4).  10109 on a sealed stream,
        10110 with ``deny_purge``, 10003 for a malformed filter (rather than
        purging nothing), 10059 when there is no such stream."""
        ...

    def backup_stream(
        self,
        name: str,
        path: Any,
        consumers: bool = True,
        progress: Optional[Callable[[int, Optional[int]], None]] = None,
    ) -> BackupInfo:
        """Write a backup of stream ``name`` into the directory ``path`` (new, or empty)
        and return what it holds (``BackupInfo``): the stream's config and, as of one
        point in time, its messages with their sequences, times and headers, its deleted
        sequences and dedup window, and with ``consumers`` every consumer's config and
        state (deliveries, acks, ack floor).  The engine copies the stream's files
        holding its lock (writers to it wait meanwhile, from any process); a server
        sends its own snapshot (``$JS.API.STREAM.SNAPSHOT``; kept as ``stream.tar.s2``,
        the server's format, as ``nats stream backup`` keeps it).  Every part is
        checksummed (SHA-256) in a manifest, ``backup.json``, written last; a backup that
        fails leaves nothing at ``path``.  ``progress(done, total)`` is called with the
        bytes written so far (``total`` None while unknown).
        10059 no stream; ``BackupError`` when ``path`` is not a new or empty directory
        or cannot be written (nothing is left there)."""
        ...

    def restore_stream(self, path: Any, progress: Optional[Callable[[int, Optional[int]], None]] = None) -> StreamInfo:
        """Create the stream a ``backup_stream`` backup in directory ``path`` holds, as it
        was (the same state, messages, sequences and consumers), and return its info.
        A backup restores only on the kind of backend that took it (an embedded store's
        on an embedded store, a server's on a server: ``BackupError`` otherwise).  Every
        part's size and checksum are checked before anything is created: a damaged,
        truncated or missing part (or manifest) is ``CorruptBackupError`` naming the
        file.  10130 when a stream of that name exists; 10062 ("restore failed: ...")
        when the stream cannot be created, e.g. its subjects overlap another stream's.
        A restore that fails leaves no stream behind.  ``progress`` as for
        ``backup_stream``, over both reads of the backup (checked, then restored).
        On a cluster it returns once every restored consumer has a leader; a replicated
        consumer comes back at its ack floor, so what was delivered but not acknowledged
        when the backup was taken is delivered again (docs/semantics.md §4)."""
        ...

    # ------------------------------------------------------------------ messages

    def publish(
        self,
        subject: str,
        payload: bytes = b"",
        headers: Optional[Mapping[str, object]] = None,
        stream: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
    ) -> PubAck:
        """Store one message in the stream that captures ``subject`` and return its
        ``PubAck`` (stream, seq; ``duplicate=True`` with the first message's seq
        for a ``Nats-Msg-Id`` seen within ``duplicate_window``, storing nothing, §3.5).

        ``payload`` is bytes, bytearray or memoryview; ``headers`` maps names (HTTP
        tokens) to str values or lists of them (repeated headers), without CR/LF;
        ``stream`` sends ``Nats-Expected-Stream``.  Errors: ``NoStreamResponseError``
        when no stream captures the subject; 10003 for an empty subject or one with
        whitespace; 10054 above ``max_msg_size`` (or the server's max_payload);
        10060/10071/10070/10193 for an expected header that does not match; 10109
        sealed; 10077 a limit with discard new (§3.2), checked in the server's
        order (§3.6).  Returned means stored (on the engine: written to the
        operating system, or to the disk with ``sync="fsync"``).  ``timeout``
        (nats-py's, keyword only here: the third positional is ``headers``): seconds
        the server has to answer this call (None: the handle's); a number > 0 on the
        engine too, where nothing waits on a network."""
        ...

    def publish_async(
        self,
        subject: str,
        payload: bytes = b"",
        headers: Optional[Mapping[str, object]] = None,
        stream: Optional[str] = None,
        *,
        wait_stall: Optional[float] = None,
    ) -> "Future[PubAck]":
        """``publish`` without waiting for the ``PubAck``: a ``concurrent.futures.Future``
        of it (nats-py's ``publish_async``, for a synchronous caller).

        The arguments are checked at the call, as ``publish`` checks them (same errors,
        nothing sent).  What ``publish`` would raise afterwards is the future's exception,
        the same typed error: ``NoStreamResponseError``, the stream's refusals (10054,
        10060, 10071, 10070, 10077, 10109, ...); on a server also ``RequestTimeoutError``
        (or ``ServerConnectionError``) when no PubAck came within the handle's timeout, and
        then the message may or may not be stored.  A future's result means what
        ``publish`` returning means: stored (on the engine: written to the operating
        system, or to the disk with ``sync="fsync"``).  Nothing is retried through a
        leader election, which would reorder messages: the error is the future's.

        The messages are stored in the order of the calls, before anything a later
        ``publish`` or ``publish_batch`` of the handle stores.  At most
        ``publish_async_max_pending`` futures (a ``connect`` option; 4000, nats-py's
        default) are pending at once: a call that finds them all pending waits for one to
        finish, at most ``wait_stall`` seconds (a finite number >= 0; None: as long as it
        takes), then raises ``TooManyStalledMsgsError`` with nothing sent (at once in a
        future's callback, which runs in the thread that completes them).  ``cancel()``
        cannot stop a publish (it returns False).  ``close()`` first waits for the pending
        futures (the engine stores every queued message; a server has the handle's
        timeout to answer) and fails any still pending with ``ClosedError``."""
        ...

    def publish_async_pending(self) -> int:
        """How many futures of ``publish_async`` are not done yet."""
        ...

    def publish_async_completed(self, timeout: Optional[float] = None) -> None:
        """Wait until every future of ``publish_async`` is done (stored or failed: read
        their results), at most ``timeout`` seconds (a finite number >= 0; None: as long
        as it takes); ``PublishAsyncTimeoutError`` (a ``TimeoutError``) if some are
        still pending then; ``RuntimeError`` in a future's callback (it would wait for
        its own thread)."""
        ...

    def get_msg(
        self,
        stream: str,
        seq: Optional[int] = None,
        subject: Optional[str] = None,
        direct: bool = False,
        next: bool = False,
        *,
        last_by_subj: Optional[str] = None,
        next_by_subj: Optional[str] = None,
    ) -> RawStreamMsg:
        """One stored message, with nats-py's arguments: the one at ``seq``; with
        ``subject`` the last one on that subject (wildcards allowed), or with
        ``next=True`` the first at or after ``seq`` (default: the first) on it.
        ``last_by_subj``/``next_by_subj`` name the request's fields directly.
        ``direct`` is accepted and answers the same message (jetspark reads through the
        stream's API either way; docs/reference/differences-nats-py.md).

        ``MsgNotFoundError`` (10037) when there is no such message (deleted, purged,
        never stored); 10059 no stream.  ``BadRequestError`` 10003 saying what it takes
        when the call names no message (no ``seq`` and no subject), gives ``seq`` and
        ``subject`` without ``next=True`` (nats-py would drop ``seq``), ``next=True``
        without a subject, or both ``seq`` and ``last_by_subj`` (the server's)."""
        ...

    def get_last_msg(self, stream: str, subject: str, direct: bool = False) -> RawStreamMsg:
        """``get_msg(stream, subject=subject)``; ``direct`` as there."""
        ...

    def delete_msg(self, stream: str, seq: int) -> bool:
        """Remove the message at ``seq``; True.  Consumers treat it as gone (a pending
        delivery of it ends).  10109 sealed, 10057 with ``deny_delete`` or (file
        storage) a sequence outside the stored range, 10043 no message there."""
        ...

    # ------------------------------------------------------------------ consumers

    def add_consumer(
        self, stream: str, config: Optional[ConsumerConfig] = None, timeout: Optional[float] = None, **params: Any
    ) -> ConsumerInfo:
        """Create a consumer from ``config`` (a ``ConsumerConfig`` or a dict) with
        ``params`` overriding its fields, or update it if one of that name exists
        with another config (nats-py's behaviour).  ``timeout``: as ``publish``'s.  Without ``durable_name`` or
        ``name`` it is an ephemeral with a generated name (gone after
        ``inactive_threshold``, 5 s by default).  Returns its info, the config
        echoed with the server's defaults (§5.1).  Errors: the config rules with the
        server's err_codes (§5.1; 10017 name and durable_name differ), the
        work-queue rules (10084, 10098, 10099, 10100, 10101, §3.4), 10026 past
        ``max_consumers``, an update the server refuses, 10059 no stream."""
        ...

    def create_consumer(
        self, stream: str, config: Optional[ConsumerConfig] = None, timeout: Optional[float] = None, **params: Any
    ) -> ConsumerInfo:
        """``add_consumer`` that never updates: an identical consumer is returned as
        it is; one of that name with another config is 10148."""
        ...

    def update_consumer(
        self, stream: str, config: Optional[ConsumerConfig] = None, timeout: Optional[float] = None, **params: Any
    ) -> ConsumerInfo:
        """``add_consumer`` that never creates: 10149 when there is no consumer of
        that name; fields the server fixes cannot change (§5.1)."""
        ...

    def delete_consumer(self, stream: str, consumer: str) -> bool:
        """Delete the consumer; True.  On interest streams the messages only it held
        go (§3.3).  10014 when there is none."""
        ...

    def pause_consumer(
        self, stream: str, consumer: str, pause_until: "datetime | str", timeout: Optional[float] = None
    ) -> ConsumerPause:
        """Pause the consumer until ``pause_until`` (an aware or naive-means-UTC ``datetime``,
        or RFC 3339 text with an offset): until then it delivers nothing, a pull waits (or
        times out) and takes its messages once the pause ends; acks are taken meanwhile.
        ``pause_until`` is kept in its config (``ConsumerInfo.paused`` and ``pause_remaining``
        while it lasts); a time already past pauses nothing.  ``timeout``: as ``publish``'s.
        Returns ``ConsumerPause``.  10025 a ``pause_until`` that is no such time, 10059 no
        stream, 10014 no consumer (tests/contract/test_consumer_pause.py)."""
        ...

    def resume_consumer(self, stream: str, consumer: str, timeout: Optional[float] = None) -> ConsumerPause:
        """End the consumer's pause now and clear ``pause_until`` from its config: waiting pulls
        take their messages at once.  ``ConsumerPause(paused=False)``; 10059, 10014 as
        ``pause_consumer``."""
        ...

    def consumer_info(self, stream: str, consumer: str, timeout: Optional[float] = None) -> ConsumerInfo:
        """The consumer's config and state (``timeout``: as ``publish``'s): ``delivered`` and ``ack_floor`` sequence
        pairs, ``num_pending``, ``num_ack_pending``, ``num_redelivered`` (§6), with
        every ``Msg.ack()`` given before the call applied.  10014 when there is none."""
        ...

    def consumers_info(self, stream: str) -> list[ConsumerInfo]:
        """Every consumer of the stream, sorted by name.  10059 no stream."""
        ...

    def pull_subscribe(
        self,
        subject: Optional[str] = None,
        durable: Optional[str] = None,
        stream: Optional[str] = None,
        config: Optional[ConsumerConfig] = None,
    ) -> PullSubscriptionAPI:
        """nats-py's ``pull_subscribe``: a subscription on the consumer ``durable`` of
        ``stream`` (default: ``find_stream_name_by_subject(subject)``).

        An existing ``durable`` is bound as it is, whatever ``subject`` and
        ``config`` say.  Otherwise the consumer is created with ``add_consumer`` from
        ``config``: filtered on ``subject`` unless the config has filters; named
        ``durable`` (``name`` and ``durable_name`` both, as nats-py sets them);
        without ``durable`` and without names in ``config``, an ephemeral with a
        generated ``name``.  Errors: those of ``add_consumer``; 10059 when no stream
        captures ``subject``; ``TypeError`` for arguments of the wrong type."""
        ...

    def pull_subscribe_bind(
        self, durable: Optional[str] = None, stream: Optional[str] = None, consumer: Optional[str] = None
    ) -> PullSubscriptionAPI:
        """A subscription on the existing consumer ``durable`` (or ``consumer``, for an
        ephemeral) of ``stream``.  10003 without ``stream`` or without a consumer
        name; 10014 when there is no such consumer; 10059 no stream."""
        ...

    def subscribe(
        self,
        subject: str,
        queue: Optional[str] = None,
        cb: Optional[Callable[[MsgAPI], Any]] = None,
        durable: Optional[str] = None,
        stream: Optional[str] = None,
        config: Optional[ConsumerConfig] = None,
        manual_ack: bool = False,
        ordered_consumer: bool = False,
        idle_heartbeat: Optional[float] = None,
        flow_control: bool = False,
        deliver_policy: Optional[DeliverPolicy] = None,
        headers_only: Optional[bool] = None,
        inactive_threshold: Optional[float] = None,
    ) -> PushSubscriptionAPI:
        """nats-py's ``subscribe``: a push subscription on the consumer ``durable`` of
        ``stream`` (default: ``find_stream_name_by_subject(subject)``), see
        ``PushSubscriptionAPI`` (§5.6).

        ``queue`` joins a queue group: its name is the durable's name and its
        ``deliver_group``, and every member shares that consumer's messages.  An
        existing durable is bound as it is, refused as nats-py refuses it
        (``SubscriptionError``): a pull consumer, a consumer already bound (without a
        deliver group), a queue that is not its deliver group.  Otherwise the consumer
        is created with ``add_consumer`` from ``config``, with a new inbox as its
        ``deliver_subject`` unless the config has one, filtered on ``subject`` unless
        the config has filters, and these arguments set: ``queue`` (``deliver_group``),
        ``flow_control``, ``idle_heartbeat``, ``deliver_policy``, ``headers_only``,
        ``inactive_threshold``; without ``durable`` (nor a durable name in the config)
        an ephemeral, which ``unsubscribe``/``drain`` delete.

        ``cb`` receives each message on the subscription's own thread; without
        ``manual_ack`` each one it returned from without acknowledging is acknowledged.
        ``ordered_consumer``: an ephemeral, ack-none consumer with flow control and idle
        heartbeats (``idle_heartbeat``, default 5 s) whose messages come in stream order
        without gaps or repeats: when its consumer sequence skips or its consumer is lost,
        a new one starts after the last stream sequence delivered (ADR-17); no
        ``durable`` or ``queue`` with it (``ValueError``).

        Errors: those of ``add_consumer``, among them a push consumer's rules (10079,
        10080, 10081, 10082, 10083, 10088, 10089, 10108, 10112, §5.6); 10059 when no
        stream captures ``subject``; ``TypeError``/``ValueError`` for arguments of the
        wrong type."""
        ...

    def subscribe_bind(
        self, stream: str, consumer: str, cb: Optional[Callable[[MsgAPI], Any]] = None, manual_ack: bool = False
    ) -> PushSubscriptionAPI:
        """A push subscription on the existing push consumer ``consumer`` of ``stream``,
        as ``subscribe`` binds one (its ``deliver_group``, if it has one, makes this
        subscription a member of the group); ``cb`` and ``manual_ack`` as ``subscribe``.
        10003 without ``stream`` or ``consumer``; 10014 no such consumer;
        ``SubscriptionError`` for a pull consumer."""
        ...

    # ------------------------------------------------------------------ bulk verbs (the Spark connector)

    def read_batches(
        self,
        stream: str,
        start_seq: int = 1,
        end_seq: Optional[int] = None,
        subjects: Optional[Sequence[str]] = None,
        batch_size: int = 65536,
        headers: bool = False,
    ) -> Iterator["pa.RecordBatch"]:
        """The stored messages with ``start_seq <= seq <= end_seq`` (None: the last
        sequence when the call is made), optionally only those matching one of
        ``subjects`` (filters, wildcards allowed), in sequence order, as Arrow record
        batches of at most ``batch_size`` rows with ``jetspark.protocol.arrow.schema(headers)``:
        stream, subject, seq, timestamp (UTC, microseconds), data, and with
        ``headers=True`` a ``map<string, list<string>>`` headers column.

        A read leaves the stream and its consumers as they were (no acks, no
        interest).  The stream must exist when the call is made (10059, raised
        by the call, not by the first ``next``).  10003 for an invalid filter;
        ``ValueError``/``TypeError`` for a sequence outside 0..2**63-1 or a batch size
        below 1."""
        ...

    def publish_batch(
        self, data: Any, stream: Optional[str] = None, msg_id_prefix: Optional[str] = None, msg_id_start: int = 0
    ) -> BatchAck:
        """Append the rows of a pyarrow ``Table`` or ``RecordBatch`` (columns
        ``subject`` string, ``data`` binary or string, optional ``headers``
        ``map<string, string>``/``map<string, list<string>>`` and ``msg_id`` string)
        to ``stream`` (default: the stream that captures the first row's subject),
        each row with the rules of ``publish``; returns a ``BatchAck`` with one
        sequence and one duplicate flag per row, in row order.

        ``msg_id_prefix``: row i carries the ``Nats-Msg-Id``
        ``f"{msg_id_prefix}{msg_id_start + i}"`` (not with a ``msg_id`` column).
        Before anything is stored the whole table is checked: column types, every
        row's subject (10003 naming the row when it is not one ``publish`` accepts
        or the stream does not capture), headers and ids as ``publish`` checks them;
        an empty table without ``stream`` is 10003; ``NoStreamResponseError`` when
        no stream captures the first subject.

        The engine stores a batch all or nothing.  A server stores row by row:
        a row it refuses raises its error (with a note naming the row) and the rows
        before it stay stored, so give rows ids to make a retry safe.  Either way
        the error raised carries ``batch_ack``: a ``BatchAck`` of the input rows
        whose seq is that row's stream sequence when the row is known to be stored,
        0 otherwise (all 0 on the engine), and a note says how many were stored.
        Through a cluster's leader election a server's batch is retried (rows not
        stored, and with ids every row not acknowledged; docs/semantics.md §8)."""
        ...

    def seq_for_time(self, stream: str, when: Any) -> int:
        """The first sequence stored at or after ``when`` (a ``datetime``, naive
        meaning UTC, or nanoseconds since the epoch); ``last_seq + 1`` when every
        message is older.  10059 no stream."""
        ...

    def seq_for_bytes(self, stream: str, lo: int, hi: int, max_bytes: int) -> int:
        """The last sequence ``s`` in ``lo..hi`` (clamped to the stored range) such that
        the live messages ``lo..s`` hold at most ``max_bytes`` bytes, counted as the
        stream's ``bytes`` counts them (§3.1); at least ``lo`` even when that one
        message is larger, so a reader always moves.  ``ValueError``/``TypeError``
        for negative or non-integer arguments; 10059 no stream."""
        ...

    def advance_ack_floor(self, stream: str, durable: str, seq: int) -> SequenceInfo:
        """The Spark commit: the durable consumer treats every message up to stream
        sequence ``seq`` that its filter matches as delivered and acknowledged, and
        returns its new ack floor (consumer and stream sequence).

        Afterwards the ack floor's stream sequence is at least the last message
        <= ``seq`` the consumer matches (higher if it had acknowledged past it;
        unchanged when it matches nothing new up to ``seq``: the floor never moves
        back); the call delivers nothing past ``seq``.  Deliveries already pending
        at or below ``seq`` (fetched by anyone, not acknowledged) are acknowledged
        too; ones past it stay pending, and the floor stops below the first of
        them.  On interest and work-queue streams exactly what was acknowledged is
        released (§3.3, §3.4).
        10014 no such consumer; 10059 no stream; ``ValueError``/``TypeError`` for a
        ``seq`` outside 0..2**63-1; ``AckFloorError`` (saying why) when the consumer
        cannot be brought there (the nats:// backend: the server stops delivering,
        e.g. a paused consumer, or the consumer's floor does not show the call's acks
        within the timeout): the floor is never left short silently."""
        ...

    def ack_floor(self, stream: str, durable: str) -> SequenceInfo:
        """``consumer_info(stream, durable).ack_floor``: the consumer and stream
        sequences below which everything is acknowledged.  10014 no consumer."""
        ...

    def ordered_consumer(
        self,
        stream: str,
        subjects: Optional[Sequence[str]] = None,
        start_seq: Optional[int] = None,
        end_seq: Optional[int] = None,
        batch_size: int = 4096,
    ) -> Iterator[MsgAPI]:
        """The stored messages in ``start_seq..end_seq`` (defaults: the stream's
        first and last sequence when called) matching ``subjects`` (filters), in
        order, as messages whose metadata carries the stream sequence, consumer
        sequences 1, 2, ... and ``num_pending`` within the range; their ack verbs
        do nothing and the stream keeps no consumer afterwards (like nats-py's
        ordered consumer).  10059 no stream; 10003 an invalid filter."""
        ...
