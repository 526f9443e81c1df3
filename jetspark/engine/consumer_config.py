"""ConsumerConfig defaulting and validation, in the server's order (JETSTREAM.md §5.1, §3.4).

Pure functions: the config a user passed -> the config the server echoes, or
the server's error.  ``check_update`` holds what an update may not change,
``check_workqueue`` the uniqueness rules of work-queue streams.
"""

from __future__ import annotations

import secrets
from typing import Iterable, Optional

from jetspark.api import AckPolicy, ConsumerConfig, DeliverPolicy, ReplayPolicy, RetentionPolicy, StreamConfig
from jetspark.engine import subjects as subj
from jetspark.engine.config import MAX_DESCRIPTION_LEN, MAX_NAME_LEN, _enum, invalid
from jetspark.errors import api_error

DEFAULT_ACK_WAIT = 30.0
DEFAULT_MAX_WAITING = 512
DEFAULT_MAX_ACK_PENDING = 1000
EPHEMERAL_INACTIVE = 5.0
_NAME_FORBIDDEN = frozenset(".*> \t\r\n\f\v")


def new_ephemeral_name() -> str:
    return secrets.token_urlsafe(16).replace("-", "x").replace("_", "y")[:22]


def filters_of(config: ConsumerConfig) -> list[str]:
    if config.filter_subjects:
        return list(config.filter_subjects)
    if config.filter_subject:
        return [config.filter_subject]
    return []


def check_consumer_name(name: Optional[str], what: str = "consumer name") -> None:
    if name is None:
        return
    if "/" in name or "\\" in name:
        raise api_error(10127)
    if not name or _NAME_FORBIDDEN.intersection(name):
        raise api_error(10052, err=f"{what} can not contain '.', '*', '>'" if what == "consumer name" else f"{what} can not contain '.', '*', '>'")
    if len(name.encode()) > MAX_NAME_LEN:
        raise invalid(f"consumer name is too long, maximum allowed is {MAX_NAME_LEN}")


def normalize_consumer_config(config: ConsumerConfig, stream: StreamConfig) -> ConsumerConfig:
    """Apply the server's defaults and validation; return what it would echo."""
    if config.durable_name is not None:
        check_consumer_name(config.durable_name, "durable name")
    check_consumer_name(config.name)
    if config.name and config.durable_name and config.name != config.durable_name:
        raise invalid("consumer name in subject does not match durable name in request")
    if config.description and len(config.description.encode()) > MAX_DESCRIPTION_LEN:
        raise invalid(f"consumer description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")

    deliver = _enum(DeliverPolicy, config.deliver_policy, "deliver policy") or DeliverPolicy.ALL
    ack = _enum(AckPolicy, config.ack_policy, "ack policy") or AckPolicy.NONE
    replay = _enum(ReplayPolicy, config.replay_policy, "replay policy") or ReplayPolicy.INSTANT

    # Filters (JETSTREAM.md §2).
    if config.filter_subject and config.filter_subjects:
        raise api_error(10136)
    filters = filters_of(config)
    for f in filters:
        if f == "" or f is None:
            raise api_error(10139)
    for f in filters:
        if not subj.is_valid(f):
            raise invalid("consumer filter subject is not a valid subject")
    for i, a in enumerate(filters):
        for b in filters[i + 1:]:
            if subj.subset(a, b) or subj.subset(b, a):
                raise api_error(10138)

    # Start position must match the deliver policy.
    if deliver == DeliverPolicy.BY_START_SEQUENCE:
        if not config.opt_start_seq:
            raise api_error(10094, err="consumer delivery policy is deliver by start sequence, but optional start sequence is not set")
        if config.opt_start_time is not None:
            raise api_error(10094, err="consumer delivery policy is deliver by start sequence, but optional start time is also set")
    elif deliver == DeliverPolicy.BY_START_TIME:
        if config.opt_start_time is None:
            raise api_error(10094, err="consumer delivery policy is deliver by start time, but optional start time is not set")
        if config.opt_start_seq:
            raise api_error(10094, err="consumer delivery policy is deliver by start time, but optional start sequence is also set")
    else:
        if config.opt_start_seq:
            raise api_error(10094, err=f"consumer delivery policy is deliver {_policy_text(deliver)}, but optional start sequence is also set")
        if config.opt_start_time is not None:
            raise api_error(10094, err=f"consumer delivery policy is deliver {_policy_text(deliver)}, but optional start time is also set")

    backoff = [float(b) for b in config.backoff] if config.backoff else None
    max_deliver = int(config.max_deliver) if config.max_deliver else -1
    if max_deliver < -1 or max_deliver == 0:
        max_deliver = -1
    if backoff:
        if ack == AckPolicy.NONE:
            raise invalid("backoff requires an ack policy")
        if max_deliver != -1 and len(backoff) > max_deliver:
            raise api_error(10116)
    ack_wait = float(config.ack_wait) if config.ack_wait else (backoff[0] if backoff else DEFAULT_ACK_WAIT)
    if backoff:
        ack_wait = backoff[0]  # the server forces the first backoff step
    max_ack_pending = config.max_ack_pending
    if ack == AckPolicy.NONE:
        max_ack_pending = -1 if not max_ack_pending else int(max_ack_pending)
    elif not max_ack_pending:
        max_ack_pending = DEFAULT_MAX_ACK_PENDING
    max_waiting = int(config.max_waiting) if config.max_waiting else DEFAULT_MAX_WAITING

    durable = config.durable_name or None
    name = config.name or durable
    inactive = float(config.inactive_threshold) if config.inactive_threshold else None
    if inactive is not None and inactive < 0:
        raise invalid("consumer inactive threshold can not be negative")
    if not durable and inactive is None:
        inactive = EPHEMERAL_INACTIVE

    if deliver == DeliverPolicy.LAST_PER_SUBJECT and not filters and not stream.subjects:
        raise invalid("consumer delivery policy is deliver last per subject, but FilterSubject is not set")

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
        filter_subject=filters[0] if len(filters) == 1 and config.filter_subject else None,
        filter_subjects=list(config.filter_subjects) if config.filter_subjects else None,
        replay_policy=replay,
        max_waiting=max_waiting,
        max_ack_pending=int(max_ack_pending),
        headers_only=bool(config.headers_only) or None,
        inactive_threshold=inactive,
        num_replicas=int(config.num_replicas or 0),
        mem_storage=config.mem_storage or None,
        metadata=dict(config.metadata) if config.metadata else None,
    )


def _policy_text(p: DeliverPolicy) -> str:
    return {
        DeliverPolicy.ALL: "all",
        DeliverPolicy.LAST: "last",
        DeliverPolicy.NEW: "new",
        DeliverPolicy.LAST_PER_SUBJECT: "last per subject",
    }.get(p, p.value)


def check_update(old: ConsumerConfig, new: ConsumerConfig) -> None:
    """What a consumer update may not change (JETSTREAM.md §5.1)."""
    for field, text in (
        ("deliver_policy", "deliver policy"),
        ("opt_start_seq", "start sequence"),
        ("opt_start_time", "start time"),
        ("ack_policy", "acknowledgement policy"),
        ("replay_policy", "replay policy"),
        ("max_waiting", "max waiting"),
    ):
        if getattr(old, field) != getattr(new, field):
            raise api_error(10012, err=f"consumer configuration update can not change {text}")
    if (old.durable_name or None) != (new.durable_name or None):
        raise api_error(10012, err="consumer configuration update can not change durable name")


def check_workqueue(stream: StreamConfig, new: ConsumerConfig, others: Iterable[ConsumerConfig]) -> None:
    """Work-queue streams: one consumer per message (JETSTREAM.md §3.4)."""
    if stream.retention != RetentionPolicy.WORK_QUEUE:
        return
    if new.ack_policy == AckPolicy.NONE:
        raise api_error(10084)
    if new.ack_policy == AckPolicy.ALL:
        raise api_error(10098)
    if new.deliver_policy != DeliverPolicy.ALL:
        raise api_error(10101)
    mine = filters_of(new)
    for other in others:
        if other.name == new.name:
            continue
        theirs = filters_of(other)
        if not mine and not theirs:
            raise api_error(10099)
        if not mine or not theirs or any(subj.collide(a, b) for a in mine for b in theirs):
            raise api_error(10100)
