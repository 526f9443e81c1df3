"""StreamConfig defaulting and validation, in the server's order (docs/semantics.md §1).

``normalize_stream_config`` turns what a user passed into the config the
server would echo back, or raises the server's error.  ``check_update``
adds the rules for replacing an existing stream's config.  Both are pure:
nothing here touches the store.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any, Optional

from jetspark import err_codes as E
from jetspark import validate as V
from jetspark.api import (
    DiscardPolicy,
    PersistMode,
    Placement,
    RePublish,
    RetentionPolicy,
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamConsumerLimits,
    StreamSource,
    SubjectTransform,
)
from jetspark.errors import APIError, BadRequestError, ServerError, api_error
from jetspark.protocol import subjects as subj

MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4096
MAX_METADATA_LEN = 128 * 1024
MAX_REPLICAS = 5
DEFAULT_DUPLICATE_WINDOW = 120.0
MIN_DURATION = 0.1  # max_age and duplicate_window: "needs to be >= 100ms"
_NAME_FORBIDDEN = frozenset(".*> \t\r\n\f\v/\\")
_SERVER_METADATA_LEN = len("_nats.level") + 1 + len("_nats.req.level") + 1 + len("_nats.ver") + len("2.15.1")
# Subjects that only a no_ack stream may capture, and the exempt parts inside them.
_JS_API = (("$JS.>", "$JSC.>", "$NRG.>"), "$JS.EVENT.>", "jetstream api")
_SYS_API = (("$SYS.>",), "$SYS.ACCOUNT.>", "system api")


def invalid(message: str) -> APIError:
    """10052: the server's "invalid stream config" with its own message."""
    return api_error(E.STREAM_INVALID_CONFIG, err=message)


def check_name(name: Optional[str], kind: str = "stream") -> str:
    """``name`` if the server accepts it in a ``kind`` config, else its error (10052, a path
    separator too: add_stream answers that one earlier, ``check_create_name``)."""
    if not name or _NAME_FORBIDDEN.intersection(name):
        raise invalid(f"{kind} name is required and can not contain '.', '*', '>', '\\', '/'")
    if len(name.encode()) > MAX_NAME_LEN:
        raise invalid(f"{kind} name is too long, maximum allowed is {MAX_NAME_LEN}")
    return name


def check_storable_name(name: str, kind: str) -> None:
    """A name the server accepts but cannot make a file of (a NUL): its store-creation error,
    after every config check, as on the server (10049 for a stream, 10012 for a consumer).
    The engine keeps memory streams in files too, so it answers this for them as well."""
    if "\x00" in name:
        if kind == "stream":
            raise ServerError(500, E.STREAM_CREATE, "error creating store for stream")
        raise api_error(E.CONSUMER_CREATE, err="error creating store for consumer")


# Stream features the engine does not implement (a server does: through nats:// they pass to it).
# Set to a value that leaves the feature off they are accepted and echoed as the server echoes
# them; any other value is refused, naming the field (tests/contract/test_config_fields.py).
UNIMPLEMENTED = (
    "placement",
    "mirror",
    "sources",
    "republish",
    "subject_transform",
    "mirror_direct",
    "compression",
    "allow_msg_schedules",
    "allow_atomic",
    "allow_batched",
    "allow_msg_counter",
    "persist_mode",
    "consumer_limits",
)


def is_off(value: Any) -> bool:
    """Does ``value`` leave a feature off, as leaving its field unset does?  (None, False, 0,
    empty, "none" or "default", or a part whose fields all are.)"""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(is_off(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return all(is_off(v) for v in value.values())
    value = getattr(value, "value", value)  # an enum member
    return not value or (isinstance(value, str) and value.lower() in ("none", "default"))


_FEATURE_BOOLS = ("mirror_direct", "allow_msg_schedules", "allow_atomic", "allow_batched", "allow_msg_counter")
_FEATURE_PARTS: dict[str, type] = {
    "placement": Placement,
    "mirror": StreamSource,
    "republish": RePublish,
    "subject_transform": SubjectTransform,
    "consumer_limits": StreamConsumerLimits,
}


def check_feature_types(config: StreamConfig) -> None:
    """A server feature's field of the wrong type is the server's 10025 naming it, before the
    engine says it does not implement the feature (as for every other field)."""
    for name in _FEATURE_BOOLS:
        V.boolean(getattr(config, name), name, api=True, optional=True)
    if config.compression is not None and config.compression not in tuple(StoreCompression):
        raise api_error(E.INVALID_JSON, err="unknown compression algorithm")
    enum_value(PersistMode, config.persist_mode, "persist_mode")
    parts: list[tuple[str, Any, type]] = [(n, getattr(config, n), cls) for n, cls in _FEATURE_PARTS.items()]
    if config.sources is not None and not isinstance(config.sources, list):
        raise api_error(E.INVALID_JSON, err=f"sources must be a list of StreamSource, not {config.sources!r}")
    parts += [(f"sources[{i}]", s, StreamSource) for i, s in enumerate(config.sources or [])]
    for name, value, cls in parts:
        if value is not None and not isinstance(value, cls):
            raise api_error(
                E.INVALID_JSON, err=f"{name} must be a {cls.__name__} (or a dict of its fields), not {value!r}"
            )
    limits = config.consumer_limits
    if limits is not None:
        V.duration(limits.inactive_threshold, "consumer_limits.inactive_threshold")
        V.integer(limits.max_ack_pending, "consumer_limits.max_ack_pending", -1, V.INT64_MAX, api=True, optional=True)


def refuse_unimplemented(kind: str, given: dict[str, Any], fields: tuple[str, ...]) -> None:
    """10003 naming each of ``fields`` set in ``given`` to a value that is not "off"."""
    on = sorted(f for f in fields if not is_off(given.get(f)))
    if on:
        shown = ", ".join(f"{f}={given[f]!r}" for f in on)
        raise BadRequestError(
            400,
            E.BAD_REQUEST,
            f"{kind} config field(s) {on} not supported by the embedded engine ({shown}); leave them unset "
            "or use a NATS server (nats://), which implements them",
        )


def enum_value(enum: type[Enum], value, field: str):
    if value is None or isinstance(value, enum):
        return value
    try:
        return enum(value)
    except ValueError:
        raise api_error(E.INVALID_JSON, err=f"can not unmarshal {value!r} into {field}") from None


def _limit(value: Optional[int]) -> int:
    # 0 and anything below -1 mean "unlimited", shown as -1 (docs/semantics.md §1.1).
    if value is None or value == 0 or value < -1:
        return -1
    return int(value)


def normalize_stream_config(config: StreamConfig) -> StreamConfig:
    """Apply the server's defaults and validation; return the config it would echo."""
    name = check_name(config.name)
    if config.template_owner is not None:
        # nats-server 2.15 does not know the field at all, whatever its value.
        raise api_error(E.INVALID_JSON, err='json: unknown field "template_owner"')
    check_feature_types(config)
    refuse_unimplemented("stream", {f: getattr(config, f) for f in UNIMPLEMENTED}, UNIMPLEMENTED)
    if config.description is not None and len(config.description.encode()) > MAX_DESCRIPTION_LEN:
        raise invalid(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
    if config.metadata:
        # The server counts the version keys it adds itself ("_nats.level": "5",
        # "_nats.req.level": "0", "_nats.ver": "2.15.1") against the limit too.
        size = _SERVER_METADATA_LEN + sum(len(k) + len(v) for k, v in config.metadata.items())
        if size > MAX_METADATA_LEN:
            raise invalid(f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes")

    retention = enum_value(RetentionPolicy, config.retention, "retention policy") or RetentionPolicy.LIMITS
    storage = enum_value(StorageType, config.storage, "storage type") or StorageType.FILE
    discard = enum_value(DiscardPolicy, config.discard, "discard policy") or DiscardPolicy.OLD

    replicas = 1 if not config.num_replicas else int(config.num_replicas)
    if replicas > MAX_REPLICAS:
        raise invalid(f"maximum replicas is {MAX_REPLICAS}")
    if replicas < 0:
        raise api_error(E.REPLICAS_COUNT_CANNOT_BE_NEGATIVE)

    max_age = float(config.max_age or 0.0)
    if max_age < 0:
        raise invalid("max age can not be negative")
    window = float(config.duplicate_window or 0.0)
    if window == 0:
        window = max_age if 0 < max_age < DEFAULT_DUPLICATE_WINDOW else DEFAULT_DUPLICATE_WINDOW
    if 0 < max_age < MIN_DURATION:
        raise invalid("max age needs to be >= 100ms")
    if window < 0:
        raise invalid("duplicates window can not be negative")
    if max_age != 0 and window > max_age:
        raise invalid("duplicates window can not be larger then max age")
    if 0 < window < MIN_DURATION:
        raise invalid("duplicates window needs to be >= 100ms")

    if config.deny_purge and config.allow_rollup_hdrs:
        raise invalid("roll-ups require the purge permission")
    max_msgs_per_subject = _limit(config.max_msgs_per_subject)
    if config.discard_new_per_subject:
        if discard != DiscardPolicy.NEW:
            raise invalid("discard new per subject requires discard new policy to be set")
        if max_msgs_per_subject <= 0:
            raise invalid("discard new per subject requires max msgs per subject > 0")
    allow_msg_ttl, marker_ttl, allow_rollup, deny_purge = msg_ttl_fields(config)

    subjects = list(config.subjects) if config.subjects else [name]
    # The server checks each subject in order: valid, capture-all, API space,
    # then against every later subject.
    for i, s in enumerate(subjects):
        if not subj.is_valid(s):
            raise invalid("invalid subject")
        if not config.no_ack:
            if s == ">":
                raise invalid("capturing all subjects requires no-ack to be true")
            for spaces, exempt, what in (_JS_API, _SYS_API):
                if any(subj.collide(s, space) for space in spaces) and not subj.subset(s, exempt):
                    raise invalid(f"subjects that overlap with {what} require no-ack to be true")
        for later in subjects[i + 1 :]:
            if subj.collide(s, later):
                raise invalid(f'subject "{s}" overlaps with "{later}"')

    if replicas > 1:
        raise api_error(E.STREAM_REPLICAS_NOT_SUPPORTED)

    if config.first_seq is not None and config.first_seq < 0:
        raise api_error(E.INVALID_JSON, err="first_seq can not be negative")
    first_seq = int(config.first_seq) if config.first_seq else None
    return StreamConfig(
        name=name,
        description=config.description or None,
        subjects=subjects,
        retention=retention,
        max_consumers=_limit(config.max_consumers),
        max_msgs=_limit(config.max_msgs),
        max_bytes=_limit(config.max_bytes),
        discard=discard,
        discard_new_per_subject=bool(config.discard_new_per_subject),
        max_age=max_age,
        max_msgs_per_subject=max_msgs_per_subject,
        max_msg_size=_limit(config.max_msg_size),
        storage=storage,
        num_replicas=replicas,
        no_ack=bool(config.no_ack),
        duplicate_window=window,
        sealed=bool(config.sealed),
        deny_delete=bool(config.deny_delete),
        deny_purge=deny_purge,
        allow_rollup_hdrs=allow_rollup,
        allow_direct=bool(config.allow_direct),
        first_seq=first_seq,
        metadata=dict(config.metadata) if config.metadata else None,
        # What the server echoes for these features left off.
        mirror_direct=False,
        compression=StoreCompression.NONE,
        consumer_limits=StreamConsumerLimits(),
        allow_msg_ttl=allow_msg_ttl,
        subject_delete_marker_ttl=marker_ttl,
    )


def msg_ttl_fields(config: StreamConfig) -> tuple[bool, Optional[float], bool, bool]:
    """(allow_msg_ttl, subject_delete_marker_ttl, allow_rollup_hdrs, deny_purge) as the server
    stores them: delete markers need a TTL of at least 1 s and turn on message TTLs and
    roll-ups, which their markers use, and so allow purges (tests/contract/test_msg_ttl.py)."""
    # A number of seconds as max_age is (10025 otherwise: a bool, NaN, infinity, past int64 ns).
    marker_ttl = V.duration(config.subject_delete_marker_ttl, "subject_delete_marker_ttl")
    allow_ttl, allow_rollup, deny_purge = (
        bool(config.allow_msg_ttl),
        bool(config.allow_rollup_hdrs),
        bool(config.deny_purge),
    )
    if marker_ttl is not None and marker_ttl < 0:
        raise invalid("subject delete marker TTL must not be negative")
    if marker_ttl:
        if marker_ttl < 1:
            raise invalid("subject delete marker TTL must be at least 1 second")
        return True, float(marker_ttl), True, False
    return allow_ttl, None, allow_rollup, deny_purge


def name_of(config: StreamConfig) -> str:
    """The name of a config ``normalize_stream_config`` returned (which checked it has one)."""
    if config.name is None:
        raise TypeError("a stream config without a name has not been normalized")
    return config.name


@dataclasses.dataclass(frozen=True)
class Limits:
    """A normalized config's name and numbers as the publish path reads them, never None:
    -1 is unlimited, 0.0 no max_age or no subject delete markers.  Made once per config
    (``Stream`` makes it when it reads or writes one), not per message."""

    name: str
    max_consumers: int
    max_msgs: int
    max_bytes: int
    max_msg_size: int
    max_msgs_per_subject: int
    max_age: float
    duplicate_window: float
    marker_ttl: float

    @classmethod
    def of(cls, config: StreamConfig) -> Limits:
        return cls(
            name=name_of(config),
            max_consumers=_limit(config.max_consumers),
            max_msgs=_limit(config.max_msgs),
            max_bytes=_limit(config.max_bytes),
            max_msg_size=_limit(config.max_msg_size),
            max_msgs_per_subject=_limit(config.max_msgs_per_subject),
            max_age=float(config.max_age or 0.0),
            duplicate_window=float(config.duplicate_window or 0.0),
            marker_ttl=float(config.subject_delete_marker_ttl or 0.0),
        )


def check_create_name(name: Optional[str]) -> None:
    """add_stream's own check of the name, before the config's: a path separator is 10128
    there, and 10052 for update_stream, as the server answers (tests/contract/test_stream_names.py)."""
    if name and ("/" in name or "\\" in name):
        raise api_error(E.STREAM_NAME_CONTAINS_PATH_SEPARATORS)


def check_create(config: StreamConfig) -> None:
    if config.sealed:
        raise invalid("stream configuration for create can not be sealed")


def check_update(old: StreamConfig, new: StreamConfig) -> StreamConfig:
    """The rules for replacing ``old`` by the normalized ``new``; returns what is stored."""
    if new.name != old.name:
        raise invalid("stream configuration name must match original")
    if new.storage != old.storage:
        raise invalid("stream configuration update can not change storage type")
    if new.retention != old.retention and RetentionPolicy.WORK_QUEUE in (old.retention, new.retention):
        raise invalid("stream configuration update can not change retention policy to/from workqueue")
    if old.sealed and not new.sealed:
        raise invalid("stream configuration update can not unseal a sealed stream")
    if old.deny_delete and not new.deny_delete:
        raise invalid("stream configuration update can not cancel deny message deletes")
    if old.deny_purge and not new.deny_purge:
        raise invalid("stream configuration update can not cancel deny purge")
    if old.allow_msg_ttl and not new.allow_msg_ttl:
        raise invalid("message TTL status can not be disabled")
    if new.sealed:
        # Sealing forces these (docs/semantics.md §1.3).
        new = new.evolve(
            max_age=0.0, discard=DiscardPolicy.NEW, deny_delete=True, deny_purge=True, allow_rollup_hdrs=False
        )
    return new
