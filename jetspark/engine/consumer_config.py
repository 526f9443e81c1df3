"""ConsumerConfig defaulting and validation, in the server's order (docs/semantics.md §5.1, §3.4).

Pure functions: the config a user passed -> the config the server echoes, or
the server's error.  ``check_update`` holds what an update may not change,
``check_workqueue`` the uniqueness rules of work-queue streams.
"""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Iterable, Optional

from jetspark import err_codes as E
from jetspark import validate as V
from jetspark.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    ReplayPolicy,
    RetentionPolicy,
    StreamConfig,
    datetime_to_ns,
)
from jetspark.engine.config import MAX_DESCRIPTION_LEN, MAX_NAME_LEN, enum_value, invalid, refuse_unimplemented
from jetspark.errors import api_error
from jetspark.protocol import subjects as subj

DEFAULT_ACK_WAIT = 30.0
DEFAULT_MAX_WAITING = 512
DEFAULT_MAX_ACK_PENDING = 1000
EPHEMERAL_INACTIVE = 5.0
MIN_HEARTBEAT = 0.1  # a push consumer's idle_heartbeat, when set (100 ms)
_NAME_FORBIDDEN = frozenset(".*> \t\r\n\f\v")
# Consumer features the engine does not implement (see engine/config.py's UNIMPLEMENTED).
UNIMPLEMENTED = ("rate_limit_bps", "sample_freq")


def new_ephemeral_name() -> str:
    return secrets.token_urlsafe(16).replace("-", "x").replace("_", "y")[:22]


def filters_of(config: ConsumerConfig) -> list[str]:
    if config.filter_subjects:
        return list(config.filter_subjects)
    if config.filter_subject:
        return [config.filter_subject]
    return []


def check_consumer_name(name: Optional[str]) -> None:
    """name and durable_name answer by one rule."""
    if not name:
        return
    if "/" in name or "\\" in name:
        raise api_error(E.CONSUMER_NAME_CONTAINS_PATH_SEPARATORS)
    if _NAME_FORBIDDEN.intersection(name):
        raise invalid("consumer name can not contain '.', '*', '>', '\\', '/'")
    if len(name) > MAX_NAME_LEN:
        raise api_error(E.CONSUMER_NAME_TOO_LONG, max=MAX_NAME_LEN)


def normalize_consumer_config(config: ConsumerConfig, stream: StreamConfig) -> ConsumerConfig:
    """Apply the server's defaults and validation; return what it would echo."""
    V.integer(config.rate_limit_bps, "rate_limit_bps", 0, V.UINT64_MAX, api=True, optional=True)
    V.text(config.sample_freq, "sample_freq", api=True)
    pause_until = V.start_time(config.pause_until, "pause_until")
    refuse_unimplemented("consumer", {f: getattr(config, f) for f in UNIMPLEMENTED}, UNIMPLEMENTED)
    heartbeat = float(config.idle_heartbeat) if config.idle_heartbeat and config.idle_heartbeat > 0 else None
    check_consumer_name(config.durable_name)
    check_consumer_name(config.name)
    if config.name and config.durable_name and config.name != config.durable_name:
        raise api_error(E.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT)

    deliver = enum_value(DeliverPolicy, config.deliver_policy, "deliver policy") or DeliverPolicy.ALL
    ack = enum_value(AckPolicy, config.ack_policy, "ack policy") or AckPolicy.NONE
    replay = enum_value(ReplayPolicy, config.replay_policy, "replay policy") or ReplayPolicy.INSTANT

    replicas = int(config.num_replicas or 0)
    if replicas < 0:
        raise api_error(E.REPLICAS_COUNT_CANNOT_BE_NEGATIVE)
    if replicas > 1:
        raise api_error(E.STREAM_REPLICAS_NOT_SUPPORTED)
    backoff = [float(b) for b in config.backoff] if config.backoff else None
    if backoff and any(b < 0 for b in backoff):
        raise api_error(E.CONSUMER_BACK_OFF_NEGATIVE)  # before the description and the filters, as the server checks
    if config.description and len(config.description) > MAX_DESCRIPTION_LEN:
        raise api_error(E.CONSUMER_DESCRIPTION_TOO_LONG, max=MAX_DESCRIPTION_LEN)
    deliver_subject = config.deliver_subject or None
    _check_push(config, deliver_subject, heartbeat, ack, stream)

    # Filters (docs/semantics.md §2); an empty filter means none.
    filter_subject = config.filter_subject or None
    filter_subjects = list(config.filter_subjects) if config.filter_subjects else None
    if filter_subject and filter_subjects:
        raise api_error(E.CONSUMER_DUPLICATE_FILTER_SUBJECTS)
    filters = filter_subjects or ([filter_subject] if filter_subject else [])
    if any(not f for f in filters):
        raise api_error(E.CONSUMER_EMPTY_FILTER)
    if any(not subj.is_valid(f) for f in filters):
        raise invalid("invalid subject")
    for i, a in enumerate(filters):
        for b in filters[i + 1 :]:
            if subj.subset(a, b) or subj.subset(b, a):
                raise api_error(E.CONSUMER_OVERLAPPING_SUBJECT_FILTERS)

    _check_start(deliver, config, bool(filters))
    if config.flow_control and heartbeat is None:
        raise api_error(E.CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS)

    max_deliver = int(config.max_deliver) if config.max_deliver and config.max_deliver > 0 else -1
    if backoff and max_deliver != -1 and len(backoff) > max_deliver:
        raise api_error(E.CONSUMER_MAX_DELIVER_BACKOFF)
    if config.ack_wait is not None and config.ack_wait < 0:
        raise api_error(E.CONSUMER_ACK_WAIT_NEGATIVE)
    if backoff:
        ack_wait: Optional[float] = backoff[0]  # the server forces the first backoff step
    elif ack == AckPolicy.NONE:
        ack_wait = float(config.ack_wait) if config.ack_wait else None  # kept as given, unused
    else:
        ack_wait = float(config.ack_wait) if config.ack_wait else DEFAULT_ACK_WAIT

    map_ = config.max_ack_pending
    if ack == AckPolicy.NONE:
        max_ack_pending = None if not map_ else (-1 if map_ < 0 else int(map_))
    else:
        max_ack_pending = DEFAULT_MAX_ACK_PENDING if not map_ else (-1 if map_ < 0 else int(map_))
    if deliver_subject:
        max_waiting = None  # a push consumer has no waiting pull requests (the server omits it)
    else:
        max_waiting = int(config.max_waiting) if config.max_waiting and config.max_waiting > 0 else DEFAULT_MAX_WAITING

    durable = config.durable_name or None
    name = config.name or durable
    inactive = float(config.inactive_threshold) if config.inactive_threshold and config.inactive_threshold > 0 else None
    if not durable and inactive is None:
        inactive = EPHEMERAL_INACTIVE

    return ConsumerConfig(
        name=name,
        durable_name=durable,
        description=config.description or None,
        deliver_policy=deliver,
        opt_start_seq=int(config.opt_start_seq) if config.opt_start_seq else None,
        opt_start_time=config.opt_start_time,
        ack_policy=ack,
        ack_wait=ack_wait,
        max_deliver=max_deliver,
        backoff=backoff,
        filter_subject=filter_subject,
        filter_subjects=filter_subjects,
        replay_policy=replay,
        max_waiting=max_waiting,
        max_ack_pending=max_ack_pending,
        flow_control=True if config.flow_control else None,
        idle_heartbeat=heartbeat,
        headers_only=True if config.headers_only else None,
        deliver_subject=deliver_subject,
        deliver_group=config.deliver_group or None,
        inactive_threshold=inactive,
        num_replicas=replicas,
        mem_storage=True if config.mem_storage else None,
        metadata=dict(config.metadata) if config.metadata else None,
        pause_until=pause_until,
    )


def keep_pause(old: ConsumerConfig, new: ConsumerConfig) -> ConsumerConfig:
    """An existing consumer's ``pause_until`` is changed by pause_consumer/resume_consumer
    alone: a create or update keeps it whatever the request says, as the server does
    (tests/contract/test_consumer_pause.py)."""
    return new if new.pause_until == old.pause_until else new.evolve(pause_until=old.pause_until)


def paused_for(config: ConsumerConfig, now: int) -> int:
    """Nanoseconds the consumer stays paused after ``now`` (0: it is not paused)."""
    if config.pause_until is None:
        return 0
    return max(datetime_to_ns(config.pause_until) - now, 0)


def _check_push(
    config: ConsumerConfig,
    deliver_subject: Optional[str],
    heartbeat: Optional[float],
    ack: AckPolicy,
    stream: StreamConfig,
) -> None:
    """What a push consumer (one with a deliver subject) may set, and what only a push
    consumer may set (consumer.go checkConsumerCfg, in its order)."""
    if deliver_subject:
        if not subj.is_literal(deliver_subject):
            raise api_error(E.CONSUMER_DELIVER_TO_WILDCARDS)
        if not subj.is_valid(deliver_subject):
            raise api_error(E.CONSUMER_INVALID_DELIVER_SUBJECT)
        if any(subj.subset(deliver_subject, s) for s in stream.subjects or ()):
            raise api_error(E.CONSUMER_DELIVER_CYCLE)  # the stream would capture its own deliveries
        if config.max_waiting:
            raise api_error(E.CONSUMER_PUSH_MAX_WAITING)
        if config.max_ack_pending and config.max_ack_pending > 0 and ack == AckPolicy.NONE:
            raise api_error(E.CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED)
        if heartbeat is not None and heartbeat < MIN_HEARTBEAT:
            raise api_error(E.CONSUMER_SMALL_HEARTBEAT)
    else:
        if heartbeat is not None:
            raise api_error(E.CONSUMER_HB_REQUIRES_PUSH)
        if config.flow_control:
            raise api_error(E.CONSUMER_FC_REQUIRES_PUSH)


def _check_start(deliver: DeliverPolicy, config: ConsumerConfig, filtered: bool) -> None:
    """The start options must match the deliver policy (10094, the server's texts)."""
    what = f"consumer delivery policy is deliver {_policy_text(deliver)}, but "
    seq, start_time = config.opt_start_seq, config.opt_start_time
    if deliver == DeliverPolicy.BY_START_SEQUENCE:
        if not seq:
            raise api_error(E.CONSUMER_INVALID_POLICY, err=what + "optional start sequence is not set")
        if start_time is not None:
            raise api_error(E.CONSUMER_INVALID_POLICY, err=what + "optional start time is also set")
    elif deliver == DeliverPolicy.BY_START_TIME:
        if start_time is None:
            raise api_error(E.CONSUMER_INVALID_POLICY, err=what + "optional start time is not set")
        if seq:
            raise api_error(E.CONSUMER_INVALID_POLICY, err=what + "optional start start sequence is also set")  # sic
    else:
        if deliver == DeliverPolicy.LAST_PER_SUBJECT and not filtered:
            raise api_error(E.CONSUMER_INVALID_POLICY, err=what + "optional filter subject is not set")
        if seq:
            raise api_error(E.CONSUMER_INVALID_POLICY, err=what + "optional start sequence is also set")
        if start_time is not None:
            raise api_error(E.CONSUMER_INVALID_POLICY, err=what + "optional start time is also set")


def _policy_text(p: DeliverPolicy) -> str:
    return {
        DeliverPolicy.ALL: "all",
        DeliverPolicy.LAST: "last",
        DeliverPolicy.NEW: "new",
        DeliverPolicy.BY_START_SEQUENCE: "by start sequence",
        DeliverPolicy.BY_START_TIME: "by start time",
        DeliverPolicy.LAST_PER_SUBJECT: "last per subject",
    }[p]


def check_update(old: ConsumerConfig, new: ConsumerConfig, bound: bool = False) -> None:
    """What a consumer update may not change (10012, the server's texts); ``bound``: a
    subscription is bound to the (push) consumer, so its deliver subject is in use (10013)."""
    for fields, text in (
        (("deliver_policy", "opt_start_seq", "opt_start_time"), "deliver policy"),
        (("ack_policy",), "ack policy"),
        (("replay_policy",), "replay policy"),
        (("idle_heartbeat",), "heart beats"),
        (("flow_control",), "flow control"),
    ):
        if any(getattr(old, f) != getattr(new, f) for f in fields):
            raise api_error(E.CONSUMER_CREATE, err=f"{text} can not be updated")
    if old.deliver_subject != new.deliver_subject:
        if not old.deliver_subject:
            raise api_error(E.CONSUMER_CREATE, err="can not update pull consumer to push based")
        if not new.deliver_subject:
            raise api_error(E.CONSUMER_CREATE, err="can not update push consumer to pull based")
        if bound:
            raise api_error(E.CONSUMER_NAME_EXIST)
    for fields, text in (
        (("max_waiting",), "max waiting"),
        (("mem_storage",), "storage type"),
    ):
        if any(getattr(old, f) != getattr(new, f) for f in fields):
            raise api_error(E.CONSUMER_CREATE, err=f"{text} can not be updated")


def check_workqueue(stream: StreamConfig, new: ConsumerConfig, others: Iterable[ConsumerConfig]) -> None:
    """Work-queue streams: one consumer per message (docs/semantics.md §3.4)."""
    if stream.retention != RetentionPolicy.WORK_QUEUE:
        return
    if new.ack_policy == AckPolicy.NONE and not new.deliver_subject:
        raise api_error(E.CONSUMER_PULL_REQUIRES_ACK)  # a pull consumer's rule; a push consumer gets the next one
    if new.ack_policy != AckPolicy.EXPLICIT:
        raise api_error(E.CONSUMER_WQ_REQUIRES_EXPLICIT_ACK)
    if new.deliver_policy != DeliverPolicy.ALL:
        raise api_error(E.CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL)
    mine = filters_of(new)
    others = [o for o in others if o.name is None or o.name != new.name]
    if not mine and others:
        raise api_error(E.CONSUMER_WQ_MULTIPLE_UNFILTERED)
    for other in others:
        theirs = filters_of(other)
        if not theirs or any(subj.collide(a, b) for a in mine for b in theirs):
            raise api_error(E.CONSUMER_WQ_CONSUMER_NOT_UNIQUE)


def config_to_json(config: ConsumerConfig) -> dict:
    d = config.as_dict()
    for k in ("opt_start_time", "pause_until"):
        when = getattr(config, k)
        if when is not None:
            d[k] = when.isoformat()
    return d


def config_from_json(d: dict) -> ConsumerConfig:
    d = dict(d)
    d["deliver_policy"] = DeliverPolicy(d["deliver_policy"])
    d["ack_policy"] = AckPolicy(d["ack_policy"])
    d["replay_policy"] = ReplayPolicy(d["replay_policy"])
    for k in ("opt_start_time", "pause_until"):
        if d.get(k):
            d[k] = dt.datetime.fromisoformat(d[k])
    return ConsumerConfig.from_response(d)
