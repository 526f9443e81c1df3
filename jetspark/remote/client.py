"""``NatsJetStream``: the embedded engine's synchronous API, served by a real NATS JetStream server.

Every verb of ``jetspark.backend.JetStreamAPI`` is here, as on the engine,
returning the same dataclasses and raising the same jetspark
errors, which carry the server's own ``code``, ``err_code`` and
``description``.  Each call blocks its caller for at most the handle's
``timeout`` (default 5 s, a ``connect`` option), so a dead server is a clear
``ServerConnectionError`` within it, never a hang.

The JetStream JSON API is spoken directly (``$JS.API.*`` requests), as
nats-py's manager does, so configs and infos map one to one.  The connection,
the event loop, the requests and the translation of nats-py's errors are the
``Session``'s (``jetspark.remote.session``); the bulk paths (``reads``,
``appends``, ``ack_floor``) bypass nats-py's per-message objects where
throughput matters.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

from jetspark.api import (
    BackupInfo,
    BatchAck,
    ConsumerConfig,
    ConsumerInfo,
    ConsumerPause,
    PubAck,
    RawStreamMsg,
    SequenceInfo,
    StreamConfig,
    StreamInfo,
    rfc3339,
)
from jetspark.backend.archive import Archive, Meter, Writer
from jetspark.backend.base import HandleBase
from jetspark.connect_options import ConnectOptions
from jetspark.err_codes import STREAM_NOT_FOUND
from jetspark.errors import (
    NoStreamResponseError,
    RequestTimeoutError,
    ServerConnectionError,
    api_error,
    error_from_response,
)
from jetspark.protocol import headers as H
from jetspark.protocol import subjects as subj
from jetspark.remote import jsapi, wire
from jetspark.remote.session import PROGRESS, Session

# The bulk paths, the subscriptions, publish_async and backups are imported where a verb
# first needs them: Spark starts a Python process per streaming query for the source's
# offsets, which needs only a connection and stream infos.
if TYPE_CHECKING:
    import datetime as _dt

    import pyarrow as pa

    from jetspark.backend import MsgAPI
    from jetspark.remote.async_publish import AsyncPublisher
    from jetspark.remote.pull import Msg, PullSubscription
    from jetspark.remote.push import PushSubscription

__all__ = ["NatsJetStream"]


class NatsJetStream(HandleBase):
    """A synchronous JetStream handle on a NATS server (see ``jetspark.connect``).

    Its verbs and their contracts: ``jetspark.backend.JetStreamAPI``; what both
    backends share is in ``jetspark.backend.base.HandleBase``."""

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__()
        self.options = options.pop("_options", None) or ConnectOptions.build(url, **options)
        self.url = self.options.display_url
        self.timeout = float(self.options.timeout)
        self._session = Session(self.options)
        self._api = self._session.api_prefix

    @classmethod
    def from_options(cls, options: ConnectOptions) -> "NatsJetStream":
        return cls(",".join(options.servers), _options=options)

    # ------------------------------------------------------------------ the session's, for the verbs

    @property
    def _closed(self) -> bool:
        return self._session.closed

    @property
    def closed(self) -> bool:
        return self._session.closed or self._session.gone

    def _run(self, make, *, what: str) -> Any:
        """``make()``'s coroutine run on the session, repeated through a leader election
        (jetspark.remote.retry): for calls that only read."""
        return self._session.run_retrying(make, what=what)

    def _request(
        self, subject: str, payload: Any = None, *, what: str, idempotent: bool = True, timeout: Optional[float] = None
    ) -> dict:
        if timeout is None:
            return self._session.call(subject, payload, what=what, idempotent=idempotent)
        # nats-py's per-call timeout= bounds each request, as there (retries still follow retry_budget).
        s = self._session
        return s.run_retrying(
            lambda: s.api(subject, payload, what=what, timeout=timeout),
            what=what,
            idempotent=idempotent,
            timeout=timeout,
        )

    def _stream_subject(self, verb: str, name: Any) -> str:
        return self._session.stream_subject(verb, name)

    def _consumer_subject(self, verb: str, stream: Any, consumer: Any) -> str:
        return self._session.consumer_subject(verb, stream, consumer)

    # ------------------------------------------------------------------ lifecycle

    @property
    def _location(self) -> str:
        return self.url

    def _close(self) -> None:
        self._session.close()

    def _check_open(self) -> None:
        self._session.check()

    def _new_async_publisher(self) -> AsyncPublisher:
        from jetspark.remote.async_publish import AsyncPublisher

        return AsyncPublisher(self._session, self.options.publish_async_max_pending)

    def __repr__(self) -> str:
        s = self._session
        state = "closed" if s.closed else "connected" if s.connected else "disconnected"
        who = f" user={self.options.user!r}" if self.options.user else ""
        return f"<NatsJetStream {self.url}{who} timeout={self.timeout:g}s {state}>"

    # ------------------------------------------------------------------ streams

    def _add_stream(self, config: StreamConfig) -> StreamInfo:
        """Create a stream; creating an existing one with the same config is a no-op."""
        resp = self._request(
            f"{self._api}.STREAM.CREATE.{config.name}",
            wire.stream_config_to_wire(config),
            what=f"add_stream {config.name!r}",
        )
        return wire.stream_info_from_wire(resp)

    def _update_stream(self, config: StreamConfig) -> StreamInfo:
        """Replace a stream's config as a whole (omitted fields return to their defaults)."""
        resp = self._request(
            f"{self._api}.STREAM.UPDATE.{config.name}",
            wire.stream_config_to_wire(config),
            what=f"update_stream {config.name!r}",
        )
        return wire.stream_info_from_wire(resp)

    def _delete_stream(self, name: str) -> bool:
        return self._request(self._stream_subject("DELETE", name), what=f"delete_stream {name!r}", idempotent=False)[
            "success"
        ]

    def _stream_info(self, name: str, subjects_filter: Optional[str], deleted_details: bool) -> StreamInfo:
        return self._run(
            lambda: jsapi.stream_info(self._session, name, subjects_filter, deleted_details),
            what=f"stream_info {name!r}",
        )

    def _streams_info(self) -> list[StreamInfo]:
        items = self._run(
            lambda: self._session.paged(f"{self._api}.STREAM.LIST", "streams", None, what="streams_info"),
            what="streams_info",
        )
        # (a server names every stream it lists: the "" is for the type checker)
        return sorted((wire.stream_info_from_wire(s) for s in items), key=lambda i: i.config.name or "")

    def _stream_names(self) -> list[str]:
        return sorted(
            self._run(
                lambda: self._session.paged(f"{self._api}.STREAM.NAMES", "streams", None, what="stream_names"),
                what="stream_names",
            )
        )

    def _find_stream_name_by_subject(self, subject: str) -> str:
        streams = (
            self._request(
                f"{self._api}.STREAM.NAMES", {"subject": subject}, what=f"find_stream_name_by_subject {subject!r}"
            ).get("streams")
            or []
        )
        if not streams:
            raise api_error(STREAM_NOT_FOUND)
        return streams[0]

    def _purge_stream(self, name: str, subject: Optional[str], seq: Optional[int], keep: Optional[int]) -> bool:
        req: dict = {}
        if subject:
            req["filter"] = subject
        if seq is not None:
            req["seq"] = seq
        if keep is not None:
            req["keep"] = keep
        return self._request(
            self._stream_subject("PURGE", name), req or None, what=f"purge_stream {name!r}", idempotent=False
        )["success"]

    # ------------------------------------------------------------------ backup and restore (remote/snapshot.py)

    _BACKUP_KIND = "nats"

    def _backup_stream(self, name: str, writer: Writer, consumers: bool, meter: Meter) -> BackupInfo:
        from jetspark.remote import snapshot

        subject = self._stream_subject("SNAPSHOT", name)
        resp = self._session.run(
            snapshot.snapshot(self._session, subject, name, writer, consumers, meter),
            what=f"backup_stream {name!r}",
            timeout=PROGRESS,
        )
        info = wire.stream_info_from_wire(resp)
        count = info.state.consumer_count if consumers else 0
        info.state.consumer_count = count
        return writer.finish(info.config, info.state, count, {"config": resp["config"], "state": resp["state"]})

    def _restore_stream(self, archive: Archive, meter: Meter) -> StreamInfo:
        from jetspark.remote import snapshot

        subject = self._stream_subject("RESTORE", archive.stream)
        resp = self._session.run(
            snapshot.restore(self._session, subject, archive, meter),
            what=f"restore_stream {archive.stream!r}",
            timeout=PROGRESS,
        )
        info = wire.stream_info_from_wire(resp)
        placed = self.stream_info(archive.stream).cluster  # (the restore's answer has no cluster part)
        if placed is not None and placed.name:  # a stream on a cluster
            self._await_consumer_leaders(archive.stream, int(archive.doc.get("consumers") or 0))
        return info

    def _await_consumer_leaders(self, stream: str, want: int) -> None:
        """A cluster answers a restore before the stream's consumers are back: each is placed
        and elects a leader afterwards, and until then it is missing or shows a fresh state
        (delivered and ack floor 0; tests/cluster/test_push_and_backup.py).  Return once
        ``want`` of them have a leader, so that the consumers are there as they were when
        ``restore_stream`` returns; RequestTimeoutError if they do not within the restore's
        wait (the stream itself is restored)."""
        from jetspark.remote import snapshot

        wait = max(self._session.timeout, snapshot.RESTORE_WAIT)
        deadline = time.monotonic() + wait
        while True:
            ready = sum(1 for c in self.consumers_info(stream) if c.cluster is not None and c.cluster.leader)
            if ready >= want:
                return
            if time.monotonic() > deadline:
                raise RequestTimeoutError(
                    f"restore_stream {stream!r}: the stream is restored, but only {ready} of its {want} consumers "
                    f"have a leader after {wait:g}s"
                )
            time.sleep(0.02)

    # ------------------------------------------------------------------ messages

    def _publish(self, subject: str, payload: bytes, headers: Optional[dict], timeout: Optional[float]) -> PubAck:
        if not subj.is_valid(subject):
            raise NoStreamResponseError(subject)  # empty tokens: no stream can capture it
        # Repeated through a leader election: always when no stream leader took it (no
        # responders, while a stream captures the subject), and when it went unanswered only
        # with a Nats-Msg-Id (the stream stores it once).
        return self._session.run_retrying(
            lambda: self._apublish(subject, payload, headers, timeout),
            what=f"publish to {subject!r}",
            timeout=timeout,
            idempotent=headers is not None and H.MSG_ID in headers,
            also=lambda err: isinstance(err, NoStreamResponseError) and self._captured(subject),
        )

    def _captured(self, subject: str) -> bool:
        """Whether a stream captures ``subject`` (so a publish nobody answered met a stream
        without a leader); True when that cannot be learnt either.  A subject with '*' or '>'
        tokens is published as literal tokens, but STREAM.NAMES would read it as a wildcard
        filter: such a publish is not repeated."""
        if any(t in ("*", ">") for t in subject.split(".")):
            return False
        try:
            got = self._session.run(
                self._session.api(
                    f"{self._api}.STREAM.NAMES", {"subject": subject}, what="finding the stream of a subject"
                ),
                what="finding the stream of a subject",
            )
        except (RequestTimeoutError, ServerConnectionError):
            return True
        return bool(got.get("streams"))

    async def _apublish(
        self, subject: str, payload: bytes, headers: Optional[dict], timeout: Optional[float] = None
    ) -> PubAck:
        session = self._session
        pub = self._async_pub
        if pub is not None and pub.pid == os.getpid():
            await pub.sent()  # earlier publish_async calls first
        if headers and any(isinstance(v, (list, tuple)) for v in headers.values()):
            # Repeated header keys: nats-py's dict cannot say them; send the block ourselves.
            from jetspark.remote import appends

            return await appends.publish_one_raw(session, subject, payload, wire.encode_headers(headers))
        msg = await session.request(
            subject,
            payload,
            what=f"the PubAck of a publish to {subject!r}",
            timeout=timeout,
            headers={k: wire.header_str(v) for k, v in headers.items()} if headers else None,
            no_responders=lambda: NoStreamResponseError(subject),
        )
        resp = json.loads(msg.data)
        if "error" in resp:
            raise error_from_response(resp["error"])
        return PubAck.from_response(resp)

    def _get_msg(
        self, stream: str, seq: Optional[int], last_by_subj: Optional[str], next_by_subj: Optional[str]
    ) -> RawStreamMsg:
        req: dict = {}
        if seq is not None:
            req["seq"] = seq
        if last_by_subj is not None:
            req["last_by_subj"] = last_by_subj
        if next_by_subj is not None:
            req["next_by_subj"] = next_by_subj
        m = self._request(self._stream_subject("MSG.GET", stream), req, what=f"get_msg from {stream!r}")["message"]
        return wire.raw_msg_from_wire(stream, m)

    def _delete_msg(self, stream: str, seq: int) -> bool:
        return self._request(
            self._stream_subject("MSG.DELETE", stream),
            {"seq": seq, "no_erase": True},
            what=f"delete_msg {seq} from {stream!r}",
            idempotent=False,
        )["success"]

    # ------------------------------------------------------------------ bulk paths for Spark

    def _read_batches(
        self,
        stream: str,
        start_seq: int,
        end_seq: Optional[int],
        subjects: Optional[Sequence[str]],
        batch_size: int,
        headers: bool,
    ) -> Iterator["pa.RecordBatch"]:
        # The server streams the range to an ephemeral, ack-less pull consumer (deleted at
        # the end) in large pipelined pull requests; a work-queue stream is read with gets.
        from jetspark.remote import reads

        return reads.read_batches(
            self._session, stream, start_seq, end_seq, subjects=subjects, batch_size=batch_size, headers=headers
        )

    def _publish_batch(
        self, table: "pa.Table", stream: str, msg_id_prefix: Optional[str], msg_id_start: int
    ) -> BatchAck:
        """Pipelined publishes, awaiting every PubAck.  Unlike the engine it is not all
        or nothing: a refused row raises its error (with a note naming the row) and rows
        the server accepted stay stored.  A server deduplicates the ids of
        ``msg_id_prefix`` one by one."""
        pub = self._async_pub
        if pub is not None and pub.pid == os.getpid():
            self._session.run(pub.sent(), what="sending the publish_async messages before a publish_batch")
        from jetspark.remote import appends

        return appends.publish_batch(
            self._session, table, stream, None if msg_id_prefix is None else (msg_id_prefix, msg_id_start)
        )

    def _seq_for_bytes(self, stream: str, lo: int, hi: int, max_bytes: int) -> int:
        from jetspark.remote import reads

        return reads.seq_for_bytes(self._session, stream, lo, hi, max_bytes)

    def _seq_for_time(self, stream: str, when: int) -> int:
        from jetspark.remote import reads

        return reads.seq_for_time(self._session, stream, when)

    # ------------------------------------------------------------------ consumers

    def _put_consumer(self, stream: str, config: ConsumerConfig, action: str, timeout: Optional[float]) -> ConsumerInfo:
        req: dict = {"stream_name": stream, "config": wire.consumer_config_to_wire(config)}
        if action:
            req["action"] = action
        name = config.name or config.durable_name
        if name and not wire.token_ok(name):
            # A name the API subject cannot carry ("a.b", "a b") is invalid anyway; the
            # server judges it from the request body, where it checks name and
            # durable_name by the same rule.
            req["config"].pop("durable_name", None)
            req["config"]["name"] = name
            subject = f"{self._api}.CONSUMER.CREATE.{stream}"
        elif config.name:
            subject = f"{self._api}.CONSUMER.CREATE.{stream}.{config.name}"
        elif config.durable_name:
            subject = f"{self._api}.CONSUMER.DURABLE.CREATE.{stream}.{config.durable_name}"
        else:
            subject = f"{self._api}.CONSUMER.CREATE.{stream}"
        # Creating a named consumer of a given config twice is creating it once; an unnamed
        # (ephemeral) one would be a second consumer.
        what = f"{action or 'add'}_consumer on {stream!r}"
        return wire.consumer_info_from_wire(
            self._request(subject, req, what=what, idempotent=bool(name), timeout=timeout)
        )

    def _delete_consumer(self, stream: str, consumer: str) -> bool:
        return self._request(
            self._consumer_subject("DELETE", stream, consumer), what=f"delete_consumer {consumer!r}", idempotent=False
        )["success"]

    def _pause_consumer(
        self, stream: str, consumer: str, pause_until: Optional[_dt.datetime], timeout: Optional[float]
    ) -> ConsumerPause:
        # An empty request resumes, as nats-py's time in the past does, and also clears the config's pause_until.
        body = {} if pause_until is None else {"pause_until": rfc3339(pause_until)}
        what = f"{'resume' if pause_until is None else 'pause'}_consumer {consumer!r}"
        resp = self._request(self._consumer_subject("PAUSE", stream, consumer), body, what=what, timeout=timeout)
        return ConsumerPause(
            paused=bool(resp.get("paused")),
            pause_until=wire.parse_time(resp.get("pause_until")),
            pause_remaining=resp.get("pause_remaining"),
        )

    def _consumer_info(self, stream: str, consumer: str, timeout: Optional[float]) -> ConsumerInfo:
        subject = self._consumer_subject("INFO", stream, consumer)
        return wire.consumer_info_from_wire(self._request(subject, what=f"consumer_info {consumer!r}", timeout=timeout))

    def _consumers_info(self, stream: str) -> list[ConsumerInfo]:
        subject = f"{self._api}.CONSUMER.LIST.{stream}"
        items = self._run(
            lambda: self._session.paged(subject, "consumers", None, what=f"consumers_info of {stream!r}"),
            what=f"consumers_info of {stream!r}",
        )
        return sorted((wire.consumer_info_from_wire(c) for c in items), key=lambda i: i.name)

    def _subscription(self, stream: str, consumer: str) -> PullSubscription:
        from jetspark.remote.pull import PullSubscription

        return PullSubscription(self._session, stream, consumer)

    def _push_subscription(
        self,
        stream: str,
        info: ConsumerInfo,
        cb: Optional[Callable[[MsgAPI], Any]],
        auto_ack: bool,
        ordered: Optional[ConsumerConfig],
        owned: bool,
    ) -> PushSubscription:
        # How: jetspark/remote/push.py (nats-py's own push subscription on the session's loop).
        from jetspark.remote.push import PushSubscription

        return PushSubscription(self, self._session, stream, info, cb, auto_ack, ordered, owned)

    def _new_inbox(self) -> str:
        return self._session.new_inbox()

    # ------------------------------------------------------------------ for the Spark connector

    def _advance_ack_floor(self, stream: str, durable: str, seq: int) -> SequenceInfo:
        # How: jetspark/remote/ack_floor.py.
        from jetspark.remote import ack_floor

        return ack_floor.advance_ack_floor(self._session, stream, durable, seq)

    def _ordered_consumer(
        self,
        stream: str,
        subjects: Optional[Sequence[str]],
        start_seq: Optional[int],
        end_seq: Optional[int],
        batch_size: int,
    ) -> Iterator[Msg]:
        from jetspark.remote import reads

        return reads.ordered_consumer(self._session, stream, subjects, start_seq, end_seq, batch_size)
