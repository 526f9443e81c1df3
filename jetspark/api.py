"""The public data model: nats-py's JetStream dataclasses and enums, field for field.

A user who knows nats-py knows these.  Durations are float seconds, times are
timezone-aware UTC ``datetime`` objects; on the wire (the nats-py backend) they
become nanoseconds and RFC 3339 strings.  ``-1`` means *unlimited* for every
limit, as in NATS.

Configs are frozen, keyword-only dataclasses (results are plain ones, as in
nats-py): ``evolve(**changes)`` returns a changed copy, ``as_dict()`` drops unset (``None``) fields and
``from_response(dict)`` ignores keys it does not know, so JSON from a real
server reads into the same classes.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, Dict, List, Optional, TypeVar, cast

from jetspark.err_codes import BAD_REQUEST

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "AckPolicy",
    "BackupInfo",
    "BatchAck",
    "ClusterInfo",
    "ConsumerConfig",
    "ConsumerInfo",
    "DeliverPolicy",
    "DiscardPolicy",
    "ExternalStream",
    "MsgMetadata",
    "PeerInfo",
    "PersistMode",
    "Placement",
    "PubAck",
    "RawStreamMsg",
    "RePublish",
    "ReplayPolicy",
    "RetentionPolicy",
    "SequenceInfo",
    "SequencePair",
    "StorageType",
    "StoreCompression",
    "StreamConfig",
    "StreamConsumerLimits",
    "StreamConsumerSource",
    "StreamInfo",
    "StreamSource",
    "StreamSourceInfo",
    "StreamState",
    "SubjectTransform",
]

_B = TypeVar("_B", bound="Base")
EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


class RetentionPolicy(str, Enum):
    LIMITS = "limits"
    INTEREST = "interest"
    WORK_QUEUE = "workqueue"


class StorageType(str, Enum):
    FILE = "file"
    MEMORY = "memory"


class DiscardPolicy(str, Enum):
    OLD = "old"
    NEW = "new"


class AckPolicy(str, Enum):
    NONE = "none"
    ALL = "all"
    EXPLICIT = "explicit"


class DeliverPolicy(str, Enum):
    ALL = "all"
    LAST = "last"
    NEW = "new"
    BY_START_SEQUENCE = "by_start_sequence"
    BY_START_TIME = "by_start_time"
    LAST_PER_SUBJECT = "last_per_subject"


class ReplayPolicy(str, Enum):
    INSTANT = "instant"
    ORIGINAL = "original"


class StoreCompression(str, Enum):
    """How a file stream's blocks are compressed on the server's disk."""

    NONE = "none"
    S2 = "s2"


class PersistMode(str, Enum):
    """When the server acknowledges a write of an R1 file stream: after its fsync, or before."""

    DEFAULT = "default"
    ASYNC = "async"


def ns_to_datetime(ns: int) -> _dt.datetime:
    """Nanoseconds since the epoch -> aware UTC datetime (microsecond precision)."""
    return EPOCH + _dt.timedelta(microseconds=ns // 1000)


def datetime_to_ns(value: _dt.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def rfc3339(value: _dt.datetime) -> str:
    """A datetime (naive means UTC) as the server's RFC 3339 text, to the microsecond."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    return value.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> _dt.datetime:
    """An RFC 3339 time (nanoseconds allowed, kept to microseconds) as an aware UTC datetime
    (one without an offset is UTC, as ``rfc3339`` writes a naive one); ValueError if ``text``
    is not one."""
    head, dot, rest = text.replace("Z", "+00:00").partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        head += "." + rest[:digits][:6].ljust(6, "0") + rest[digits:]
    when = _dt.datetime.fromisoformat(head)
    # (astimezone would read a naive time as the machine's local time)
    return when.replace(tzinfo=_dt.timezone.utc) if when.tzinfo is None else when.astimezone(_dt.timezone.utc)


class Base:
    # field -> the class (a Base or an Enum) its dict, list of dicts or value is read into
    # by from_response; the other fields are taken as they are.
    _nested: Dict[str, Any] = {}

    @classmethod
    def from_response(cls: type[_B], resp: Dict[str, Any]) -> _B:
        """Build from a dict, ignoring unknown keys (open-world, as nats-py)."""
        # (Base is no dataclass itself; every subclass is: cast for the type checker.)
        names = {f.name for f in fields(cast(Any, cls))}
        nested = cast(Any, cls)._nested
        return cls(**{k: _read(nested.get(k), v) for k, v in resp.items() if k in names})

    def evolve(self: _B, **changes: Any) -> _B:
        """A copy with ``changes`` applied."""
        changed: _B = dataclasses.replace(cast(Any, self), **changes)
        return changed

    def as_dict(self) -> Dict[str, Any]:
        """The fields that are set, recursively, with enums as their values."""
        out: Dict[str, Any] = {}
        for f in fields(cast(Any, self)):
            value = getattr(self, f.name)
            if value is None:
                continue
            out[f.name] = _plain(value)
        return out


def _read(kind: Any, value: Any) -> Any:
    """``value`` read into ``kind`` (see ``Base._nested``); a value that is not one (a
    wrong type, an enum's unknown value) is kept as it is, for the server to judge."""
    if kind is None or value is None:
        return value
    if isinstance(value, list):
        return [_read(kind, v) for v in value]
    if issubclass(kind, Enum):
        try:
            return kind(value)
        except (ValueError, TypeError):  # (TypeError: an unhashable value)
            return value
    return kind.from_response(value) if isinstance(value, dict) else value


def _plain(value: Any) -> Any:
    if isinstance(value, Base):
        return value.as_dict()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------- server features' parts (nats-py's, field for field)


@dataclass(frozen=True, kw_only=True)
class Placement(Base):
    """Where the server places a stream's replicas: a ``cluster`` by name, servers by ``tags``."""

    cluster: Optional[str] = None
    tags: Optional[List[str]] = None


@dataclass(frozen=True, kw_only=True)
class ExternalStream(Base):
    """A mirror's or source's stream in another JetStream domain or account: its API prefix."""

    api: str
    deliver: Optional[str] = None


@dataclass(frozen=True, kw_only=True)
class SubjectTransform(Base):
    """Subjects matching ``src`` are rewritten to ``dest`` (``*``/``>`` and ``{{wildcard(1)}}`` mappings)."""

    src: str
    dest: str


@dataclass(frozen=True, kw_only=True)
class StreamConsumerSource(Base):
    """A durable push consumer that feeds a mirror or source of a work-queue or interest stream."""

    name: str
    deliver_subject: str


@dataclass(frozen=True, kw_only=True)
class StreamSource(Base):
    """A mirror's or a source's origin stream (nats-py ``StreamSource``): where to start
    (``opt_start_seq``/``opt_start_time``), which subjects (``filter_subject``,
    ``subject_transforms``), an ``external`` stream."""

    name: str
    opt_start_seq: Optional[int] = None
    opt_start_time: Optional[_dt.datetime] = None
    filter_subject: Optional[str] = None
    external: Optional[ExternalStream] = None
    subject_transforms: Optional[List[SubjectTransform]] = None
    consumer: Optional[StreamConsumerSource] = None
    _nested = {"external": ExternalStream, "subject_transforms": SubjectTransform, "consumer": StreamConsumerSource}

    # The start time is RFC 3339 text in the dict, as nats-py writes it, so that a config with a
    # source is plain JSON (a backup's manifest, `stream info --json`) and reads back the same.
    def as_dict(self) -> Dict[str, Any]:
        out = super().as_dict()
        if isinstance(self.opt_start_time, _dt.datetime):
            out["opt_start_time"] = rfc3339(self.opt_start_time)
        return out

    @classmethod
    def from_response(cls, resp: Dict[str, Any]) -> "StreamSource":
        start = resp.get("opt_start_time")
        if isinstance(start, str):
            try:
                resp = dict(resp, opt_start_time=parse_rfc3339(start))
            except ValueError:
                pass  # other text goes as it is, for the server to judge
        return super().from_response(resp)


@dataclass(kw_only=True)
class StreamSourceInfo(Base):
    """How far a mirror or source has come (nats-py ``StreamSourceInfo``, plus the server's
    ``filter_subject``, ``subject_transforms`` and ``external``): ``lag`` messages behind,
    ``active`` nanoseconds since it was last heard from (-1: never), ``error`` the server's."""

    name: str
    lag: Optional[int] = None
    active: Optional[int] = None
    error: Optional[Dict[str, Any]] = None
    filter_subject: Optional[str] = None
    subject_transforms: Optional[List[SubjectTransform]] = None
    external: Optional[ExternalStream] = None
    _nested = {"external": ExternalStream, "subject_transforms": SubjectTransform}


@dataclass(frozen=True, kw_only=True)
class RePublish(Base):
    """Each stored message matching ``src`` is published again on ``dest`` (only its headers
    with ``headers_only``)."""

    src: Optional[str] = None
    dest: Optional[str] = None
    headers_only: Optional[bool] = None


@dataclass(frozen=True, kw_only=True)
class StreamConsumerLimits(Base):
    """Defaults and ceilings for the stream's consumers: ``inactive_threshold`` (seconds), ``max_ack_pending``."""

    inactive_threshold: Optional[float] = None
    max_ack_pending: Optional[int] = None


@dataclass(frozen=True, kw_only=True)
class StreamConfig(Base):
    """A stream's configuration (nats-py ``StreamConfig``).

    Unset fields take the server's defaults when the stream is added; the
    config in a returned ``StreamInfo`` shows them filled in.  Through ``nats://`` every
    field goes to the server, which decides; the embedded engine refuses the features it
    does not implement (docs/reference/differences-nats-server.md).
    """

    name: Optional[str] = None
    description: Optional[str] = None
    subjects: Optional[List[str]] = None
    retention: Optional[RetentionPolicy] = None
    max_consumers: Optional[int] = None
    max_msgs: Optional[int] = None
    max_bytes: Optional[int] = None
    discard: Optional[DiscardPolicy] = None
    discard_new_per_subject: bool = False
    max_age: Optional[float] = None
    max_msgs_per_subject: Optional[int] = None
    max_msg_size: Optional[int] = None
    storage: Optional[StorageType] = None
    num_replicas: Optional[int] = None
    no_ack: bool = False
    duplicate_window: Optional[float] = None
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    allow_direct: bool = False
    first_seq: Optional[int] = None
    metadata: Optional[Dict[str, str]] = None
    template_owner: Optional[str] = None
    placement: Optional[Placement] = None
    mirror: Optional[StreamSource] = None
    sources: Optional[List[StreamSource]] = None
    republish: Optional[RePublish] = None
    subject_transform: Optional[SubjectTransform] = None
    mirror_direct: Optional[bool] = None
    compression: Optional[StoreCompression] = None
    allow_msg_ttl: Optional[bool] = None
    allow_msg_schedules: Optional[bool] = None
    allow_atomic: Optional[bool] = None
    allow_batched: Optional[bool] = None
    allow_msg_counter: Optional[bool] = None
    persist_mode: Optional[PersistMode] = None
    consumer_limits: Optional[StreamConsumerLimits] = None
    subject_delete_marker_ttl: Optional[float] = None  # seconds
    _nested = {
        "retention": RetentionPolicy,
        "storage": StorageType,
        "discard": DiscardPolicy,
        "placement": Placement,
        "mirror": StreamSource,
        "sources": StreamSource,
        "republish": RePublish,
        "subject_transform": SubjectTransform,
        "compression": StoreCompression,
        "persist_mode": PersistMode,
        "consumer_limits": StreamConsumerLimits,
    }


@dataclass(kw_only=True)
class StreamState(Base):
    """A stream's state (nats-py ``StreamState`` plus the server's timestamps and num_subjects)."""

    messages: int = 0
    bytes: int = 0
    first_seq: int = 0
    last_seq: int = 0
    consumer_count: int = 0
    first_ts: Optional[_dt.datetime] = None
    last_ts: Optional[_dt.datetime] = None
    num_subjects: int = 0
    num_deleted: int = 0
    deleted: Optional[List[int]] = None
    subjects: Optional[Dict[str, int]] = None
    lost: Optional[Dict[str, Any]] = None


@dataclass(kw_only=True)
class PeerInfo(Base):
    """One replica of a stream or consumer, as its leader sees it (nats-py ``PeerInfo``):
    ``current`` (caught up), ``offline``, ``active`` (ns since it was last heard from),
    ``lag`` (operations behind)."""

    name: Optional[str] = None
    current: Optional[bool] = None
    offline: Optional[bool] = None
    active: Optional[int] = None
    lag: Optional[int] = None


@dataclass(kw_only=True)
class ClusterInfo(Base):
    """Where a stream or consumer lives (nats-py ``ClusterInfo``): the cluster's ``name``,
    the ``leader`` server, the other ``replicas``.  A single nats-server reports only the
    leader (itself) for a stream and nothing for a consumer; so does the engine, whose
    leader is ``ENGINE_NAME``."""

    leader: Optional[str] = None
    name: Optional[str] = None
    replicas: Optional[List[PeerInfo]] = None
    leader_since: Optional[_dt.datetime] = None


# The leader the embedded engine names in StreamInfo.cluster, as a single server names itself.
ENGINE_NAME = "jetspark-engine"


@dataclass(kw_only=True)
class StreamInfo(Base):
    """A stream's config and state; a mirror's or a sourcing stream's progress in ``mirror``/``sources``."""

    config: StreamConfig
    state: StreamState
    created: Optional[_dt.datetime] = None
    did_create: Optional[bool] = None
    cluster: Optional["ClusterInfo"] = None
    mirror: Optional[StreamSourceInfo] = None
    sources: Optional[List[StreamSourceInfo]] = None


@dataclass(kw_only=True)
class PubAck(Base):
    stream: str
    seq: int
    domain: Optional[str] = None
    duplicate: Optional[bool] = None
    val: Optional[str] = None  # a counter stream's total after this increment, as the server writes it


@dataclass(kw_only=True)
class RawStreamMsg(Base):
    """A stored message as ``get_msg`` returns it (nats-py ``RawStreamMsg``)."""

    subject: Optional[str] = None
    seq: Optional[int] = None
    data: Optional[bytes] = None
    hdrs: Optional[bytes] = None
    headers: Optional[Dict[str, str]] = None
    stream: Optional[str] = None
    time: Optional[_dt.datetime] = None

    @property
    def sequence(self) -> Optional[int]:
        return self.seq

    @property
    def header(self) -> Optional[Dict[str, str]]:
        return self.headers


@dataclass(frozen=True, kw_only=True)
class ConsumerConfig(Base):
    """A consumer's configuration (nats-py ``ConsumerConfig``); ack_policy defaults to explicit as in nats-py.

    A consumer with a ``deliver_subject`` is a push consumer (``subscribe``), one without
    a pull consumer (``pull_subscribe``); ``deliver_group`` is its queue group,
    ``flow_control`` and ``idle_heartbeat`` (seconds) its server-side flow control."""

    name: Optional[str] = None
    durable_name: Optional[str] = None
    description: Optional[str] = None
    deliver_policy: Optional[DeliverPolicy] = DeliverPolicy.ALL
    opt_start_seq: Optional[int] = None
    opt_start_time: Optional[_dt.datetime] = None
    ack_policy: Optional[AckPolicy] = AckPolicy.EXPLICIT
    ack_wait: Optional[float] = None
    max_deliver: Optional[int] = None
    backoff: Optional[List[float]] = None
    filter_subject: Optional[str] = None
    filter_subjects: Optional[List[str]] = None
    replay_policy: Optional[ReplayPolicy] = ReplayPolicy.INSTANT
    max_waiting: Optional[int] = None
    max_ack_pending: Optional[int] = None
    flow_control: Optional[bool] = None
    idle_heartbeat: Optional[float] = None
    headers_only: Optional[bool] = None
    deliver_subject: Optional[str] = None
    deliver_group: Optional[str] = None
    inactive_threshold: Optional[float] = None
    num_replicas: Optional[int] = None
    mem_storage: Optional[bool] = None
    metadata: Optional[Dict[str, str]] = None
    rate_limit_bps: Optional[int] = None
    sample_freq: Optional[str] = None
    # Deliveries wait until then (an RFC 3339 string is taken too, as nats-py's str field).
    pause_until: Optional[_dt.datetime] = None
    _nested = {"deliver_policy": DeliverPolicy, "ack_policy": AckPolicy, "replay_policy": ReplayPolicy}


@dataclass(kw_only=True)
class SequenceInfo(Base):
    consumer_seq: int = 0
    stream_seq: int = 0
    last_active: Optional[_dt.datetime] = None


@dataclass(kw_only=True)
class ConsumerInfo(Base):
    name: str
    stream_name: str
    config: ConsumerConfig
    created: Optional[_dt.datetime] = None
    delivered: SequenceInfo = field(default_factory=SequenceInfo)
    ack_floor: SequenceInfo = field(default_factory=SequenceInfo)
    num_ack_pending: int = 0
    num_redelivered: int = 0
    num_waiting: int = 0
    num_pending: int = 0
    cluster: Optional["ClusterInfo"] = None
    push_bound: Optional[bool] = (
        None  # a push consumer with a subscription bound to it (else None, as the server omits it)
    )
    paused: Optional[bool] = None  # paused by its pause_until (else None, as the server omits it)
    pause_remaining: Optional[int] = None  # nanoseconds until then, as the server and nats-py give it


@dataclass(kw_only=True)
class ConsumerPause(Base):
    """What ``pause_consumer``/``resume_consumer`` answer (nats-py's ``ConsumerPause``): ``pause_until``
    an aware UTC datetime (None once resumed), ``pause_remaining`` nanoseconds (None unless paused)."""

    paused: bool
    pause_until: Optional[_dt.datetime] = None
    pause_remaining: Optional[int] = None


@dataclass(kw_only=True)
class BackupInfo(Base):
    """What ``backup_stream`` wrote (jetspark's own: nats-py has no snapshot verb).

    ``backend`` is ``"engine"`` (an embedded store's files) or ``"nats"`` (a server's
    snapshot); ``config`` and ``state`` are the stream's when the backup was taken;
    ``consumers`` how many consumers it holds; ``files`` and ``bytes`` the archive's parts
    (besides its manifest, ``backup.json``); ``created`` when it was taken."""

    stream: str
    path: str
    backend: str
    config: StreamConfig
    state: StreamState
    consumers: int
    files: int
    bytes: int
    created: _dt.datetime


def with_params(cls: type[_B], config: Any, params: Dict[str, Any]) -> _B:
    """``config`` (a ``cls``, a dict or None) with keyword overrides, as nats-py's
    ``add_stream(config=None, **params)`` takes them; unknown names are refused, in a dict
    config too.  A server feature's part given as a dict (``mirror={"name": "A"}``) or a
    list of them is read into its dataclass, its unknown names refused alike."""
    what = "stream" if cls is StreamConfig else "consumer"
    known = cast(Any, cls).__dataclass_fields__

    def kept(given: Dict[str, Any], where: str) -> Dict[str, Any]:
        _refuse_unknown(set(given), set(known), f"{what} config field(s)", where)
        nested = cast(Any, cls)._nested
        return {k: _part(nested.get(k), v, k) for k, v in given.items()}

    if config is None:
        config = cls()
    elif isinstance(config, dict):
        config = cls(**kept(config, "in the config dict"))
    params = kept(params, "given as keywords")
    result: _B = config.evolve(**params) if params else config
    return result


def _refuse_unknown(given: set[str], known: set[str], what: str, where: str) -> None:
    from jetspark.errors import BadRequestError

    unknown = sorted(given - known)
    if unknown:
        raise BadRequestError(400, BAD_REQUEST, f"unknown {what} {unknown} ({where}); accepted: {sorted(known)}")


def _part(kind: Any, value: Any, where: str) -> Any:
    """A config part given as a dict (or a list of dicts) read into its dataclass ``kind``."""
    from jetspark.errors import BadRequestError

    if kind is None or not issubclass(kind, Base):
        return _read(kind, value)  # an enum's value as its member
    if isinstance(value, list):
        return [_part(kind, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value  # a wrong type goes as it is: the server judges it, the engine refuses it
    names = {f.name for f in fields(cast(Any, kind))}
    _refuse_unknown(set(value), names, f"{kind.__name__} field(s)", f"in {where}")
    required = sorted(f.name for f in fields(cast(Any, kind)) if f.default is dataclasses.MISSING)
    missing = [n for n in required if n not in value]
    if missing:
        raise BadRequestError(400, BAD_REQUEST, f"{where}: {kind.__name__} needs {missing}; given {sorted(value)}")
    nested = cast(Any, kind)._nested
    return kind(**{k: _part(nested.get(k), v, f"{where}.{k}") for k, v in value.items()})


# ------------------------------------------------------------ delivery and bulk results


@dataclass(frozen=True)
class SequencePair:
    """nats-py's ``SequencePair``: a delivery's consumer and stream sequence."""

    consumer: int
    stream: int


@dataclass(frozen=True)
class MsgMetadata:
    """nats-py's ``Msg.Metadata``: where a delivered message sits."""

    sequence: SequencePair
    num_pending: int
    num_delivered: int
    timestamp: _dt.datetime
    stream: str
    consumer: str
    domain: Optional[str] = None


@dataclass(frozen=True)
class BatchAck:
    """What ``publish_batch`` stored: one sequence per input row (a duplicate's is the original's)."""

    stream: str
    seqs: "pa.Int64Array"
    duplicate: "pa.BooleanArray"

    @property
    def count(self) -> int:
        return len(self.seqs)
