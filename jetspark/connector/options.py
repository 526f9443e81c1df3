"""The connector's options, parsed once into frozen objects with errors that name the option.

Names follow Spark's Kafka source where the idea is the same.  Option keys
are case-insensitive (Spark passes them that way).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional

from jetspark.connection import check_store_path, is_server_url
from jetspark.errors import LocationError, OptionError
from jetspark.protocol.subjects import is_valid as is_valid_subject

DEFAULT_STORE = "./jetspark-data"


@dataclass(frozen=True)
class Start:
    """Where a read starts: 'earliest', 'latest', a first sequence, or a time (ms since the epoch)."""

    kind: str  # "earliest" | "latest" | "seq" | "timestamp"
    value: int = 0


@dataclass(frozen=True)
class ReaderOptions:
    store: str
    connection: tuple[tuple[str, str], ...]  # "nats.*" options for a nats:// store
    stream: str
    subjects: tuple[str, ...]
    consumer: Optional[str]
    starting: Start
    ending: Optional[int]  # last sequence to read (batch), None = latest
    max_offsets_per_trigger: Optional[int]
    max_bytes_per_trigger: Optional[int]
    min_offsets_per_trigger: Optional[int]
    max_trigger_delay_s: float
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int
    rows_per_partition: int
    push_filters: bool = False  # batch: take filters into the read (source.FilteringBatchReader)


@dataclass(frozen=True)
class WriterOptions:
    store: str
    connection: tuple[tuple[str, str], ...]
    stream: Optional[str]
    subject: Optional[str]
    registry_replicas: Optional[int] = (
        None  # the sink registry's replicas (None: as many as the cluster allows, up to 3)
    )


@dataclass(frozen=True)
class Option:
    """One option of ``format("jetstream")``: the one place an option is declared.

    The parsers below accept exactly the declared names (``_READER_KEYS``, ``_WRITER_KEYS``),
    and the connector's class docstring and the docs' options table are built from
    ``OPTIONS`` (``options_table``), so neither can list an option the parsers do not take.
    """

    name: str
    applies_to: tuple[str, ...]  # "read" (spark.read / readStream), "write" (write / writeStream)
    default: str
    accepted: str
    description: str


OPTIONS: tuple[Option, ...] = (
    Option(
        "store",
        ("read", "write"),
        "`$JETSPARK_STORE`, else `./jetspark-data`",
        "a store directory, `file://...`, `nats://host:port[,...]`, `tls://...`",
        "where the streams live. A directory must already hold a store: reads and writes never create one "
        "(`StoreError` naming the path)",
    ),
    Option(
        "path", ("read", "write"), "none", "as `store`", "what `load(path)` / `save(path)` set: the same as `store`"
    ),
    Option(
        "stream",
        ("read", "write"),
        "read: required; write: none",
        "a stream name",
        "read: the stream to read. Write: the stream every row goes to; without it each row goes to the stream its "
        "subject routes to",
    ),
    Option(
        "subjects",
        ("read",),
        "all of the stream's",
        "comma-separated subject filters, wildcards allowed",
        "read only messages on these subjects",
    ),
    Option(
        "subject",
        ("read", "write"),
        "none",
        "read: as `subjects`; write: a subject",
        "read: the same as `subjects`. Write: the subject of rows without a `subject` column, or whose `subject` is "
        "null",
    ),
    Option(
        "consumer",
        ("read",),
        "none",
        "a durable consumer name",
        "created (or bound) with the reader's subjects; each Spark commit advances its ack floor, and a query "
        "without a checkpoint resumes from it. "
        "Required on interest and work-queue streams",
    ),
    Option(
        "startingOffsets",
        ("read",),
        "streaming: `latest`; batch: `earliest`",
        '`earliest`, `latest`, `{"seq": N}`',
        "the first sequence read (inclusive)",
    ),
    Option(
        "startingTimestamp",
        ("read",),
        "none",
        "milliseconds since the epoch",
        "start at the first message stored at that time or later (excludes `startingOffsets`)",
    ),
    Option(
        "endingOffsets",
        ("read",),
        "`latest`",
        '`latest`, `{"seq": N}` (inclusive)',
        "batch reads only: the last sequence read",
    ),
    Option(
        "maxOffsetsPerTrigger",
        ("read",),
        "none",
        "a positive integer",
        "streaming: at most this many sequences per micro-batch",
    ),
    Option(
        "maxBytesPerTrigger",
        ("read",),
        "none",
        "a positive integer",
        "streaming: at most this many bytes (as `state.bytes` counts them) per micro-batch, at least one message",
    ),
    Option(
        "minOffsetsPerTrigger",
        ("read",),
        "none",
        "a positive integer",
        "streaming: wait for this many new sequences before a micro-batch...",
    ),
    Option(
        "maxTriggerDelay",
        ("read",),
        "`15m`",
        "a duration: `500ms`, `30s`, `15m`, `1h`",
        "...but not longer than this (only with `minOffsetsPerTrigger`)",
    ),
    Option(
        "failOnDataLoss",
        ("read",),
        "`true`",
        "`true`, `false`",
        "when retention removed messages before the query read them: fail the query (`DataLossError`), or log and "
        "skip them",
    ),
    Option("includeHeaders", ("read",), "`false`", "`true`, `false`", "add the `headers` column"),
    Option("minPartitions", ("read",), "`1`", "a positive integer", "at least this many partitions per read"),
    Option(
        "rowsPerPartition", ("read",), "`1000000`", "a positive integer", "at most this many sequences per partition"
    ),
    Option(
        "pushFilters",
        ("read",),
        "`false`",
        "`true`, `false`",
        "batch reads only: read only what filters on `subject`, `seq` and `timestamp` select; `load()` one "
        "DataFrame per query",
    ),
    Option(
        "registryReplicas",
        ("write",),
        "3 on a cluster (at most its size), else 1",
        "1 to 5",
        "replicas of the sink's record of committed micro-batches (the stream `JETSPARK_SINKS`)",
    ),
    Option(
        "checkpointLocation",
        ("read", "write"),
        "none",
        "a directory",
        "Spark's own query option, passed to the source and sink and accepted",
    ),
    Option("queryName", ("write",), "none", "a name", "Spark's own query option, passed to the sink and accepted"),
    Option(
        "nats.<option>",
        ("read", "write"),
        "none",
        "`nats.user`, `nats.password`, `nats.token`, `nats.creds`, `nats.nkey`, `nats.tls.ca`, `nats.tls.cert`, "
        "`nats.tls.key`, `nats.name`, `nats.timeout`, `nats.retry_budget`, ...",
        "connection options for a `nats://` store (the keyword arguments of `jetspark.connect`); refused for a "
        "directory store",
    ),
)

# nats.<option> is a family of keys, matched by prefix in _connection and _check_known.
_READER_KEYS = {o.name.lower() for o in OPTIONS if "read" in o.applies_to and not o.name.startswith("nats.")}
_WRITER_KEYS = {o.name.lower() for o in OPTIONS if "write" in o.applies_to and not o.name.startswith("nats.")}
_CANONICAL = {o.name.lower(): o.name for o in OPTIONS}


def options_table() -> str:
    """The declared options as a Markdown table (the connector's docstring, docs/reference/options.md)."""
    rows = ["| option | applies to | default | accepted | meaning |", "|---|---|---|---|---|"]
    for o in OPTIONS:
        cells = (f"`{o.name}`", ", ".join(o.applies_to), o.default, o.accepted, o.description)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def _get(options: Mapping[str, str], key: str) -> Optional[str]:
    for k, v in options.items():
        if k.lower() == key.lower():
            return v
    return None


def _store(options: Mapping[str, str]) -> str:
    store = _get(options, "store") or _get(options, "path") or os.environ.get("JETSPARK_STORE") or DEFAULT_STORE
    if not is_server_url(store):
        # Checked here, in the driver: a mistyped server URL ("nats:/host:4222") never reaches
        # an executor as a directory name.
        key = "store" if _get(options, "store") else "path (load/save)" if _get(options, "path") else "$JETSPARK_STORE"
        try:
            check_store_path(store, argument=f"option {key}", how='.option("store", "{url}")')
        except LocationError as err:
            raise OptionError(str(err)) from None
    return store


def _connection(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Options for a nats:// store, prefixed ``nats.`` (``nats.user``, ``nats.creds``,
    ``nats.tls.ca``, ``nats.timeout``, ...): docs/guides/nats-server.md."""
    conn = tuple(sorted((k[5:], v) for k, v in options.items() if k.lower().startswith("nats.")))
    if conn and not is_server_url(_store(options)):
        raise OptionError(
            f"options {', '.join('nats.' + k for k, _ in conn)} are for a nats:// store, not {_store(options)!r}"
        )
    return conn


def _check_known(options: Mapping[str, str], known: set, what: str) -> None:
    for k in options:
        if k.lower().startswith("nats."):
            continue
        if k.lower() not in known:
            raise OptionError(
                f"unknown {what} option {k!r}; accepted: {', '.join(sorted(_CANONICAL[x] for x in known))}"
            )


def _positive_int(options, key: str) -> Optional[int]:
    raw = _get(options, key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {key} must be a positive integer, not {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {key} must be a positive integer, not {raw!r}")
    return value


def _bool(options, key: str, default: bool) -> bool:
    raw = _get(options, key)
    if raw is None:
        return default
    low = str(raw).strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise OptionError(f"option {key} must be true or false, not {raw!r}")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1, None: 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(raw: str, key: str) -> float:
    m = _DURATION.match(str(raw))
    if not m:
        raise OptionError(f"option {key} must be a duration like 500ms, 30s, 15m or 1h, not {raw!r}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def _sequence_json(raw: str, key: str, stream: str, words: str = '"earliest", "latest"') -> int:
    """``{"seq": 42}`` or ``{"<stream>": 42}``: a sequence number (``words``: the other accepted values)."""
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        value = doc.get("seq", doc.get(stream))
        if isinstance(value, int) and value >= 0:
            return value
    raise OptionError(f'option {key} must be {words} or JSON like {{"seq": 42}} (or {{"{stream}": 42}}), not {raw!r}')


def reader_options(options: Mapping[str, str], *, streaming: bool) -> ReaderOptions:
    _check_known(options, _READER_KEYS, "read")
    stream = _get(options, "stream")
    if not stream:
        raise OptionError('option stream is required: .option("stream", "ORDERS")')
    subjects_raw = _get(options, "subjects") or _get(options, "subject") or ""
    subjects = tuple(s.strip() for s in subjects_raw.split(",") if s.strip())
    for s in subjects:
        if not is_valid_subject(s):
            raise OptionError(
                "option subjects must be comma-separated subject filters like orders.new, orders.* or orders.>, "
                f"and {s!r} is not one"
            )

    start_raw = _get(options, "startingOffsets")
    ts_raw = _get(options, "startingTimestamp")
    if start_raw is not None and ts_raw is not None:
        raise OptionError("options startingOffsets and startingTimestamp exclude each other; set one")
    if ts_raw is not None:
        try:
            starting = Start("timestamp", int(ts_raw))
        except ValueError:
            raise OptionError(
                f"option startingTimestamp must be milliseconds since the epoch, not {ts_raw!r}"
            ) from None
    elif start_raw is None:
        starting = Start("latest" if streaming else "earliest")
    elif start_raw.strip().lower() in ("earliest", "latest"):
        starting = Start(start_raw.strip().lower())
    else:
        starting = Start("seq", _sequence_json(start_raw, "startingOffsets", stream))

    end_raw = _get(options, "endingOffsets")
    ending = None
    if end_raw is not None:
        if streaming:
            raise OptionError("option endingOffsets is for batch reads (spark.read); a stream has no end")
        if end_raw.strip().lower() != "latest":
            if end_raw.strip().lower() == "earliest":
                raise OptionError('option endingOffsets must be "latest" or JSON like {"seq": 42}, not "earliest"')
            ending = _sequence_json(end_raw, "endingOffsets", stream, '"latest"')

    limits = {
        k: _positive_int(options, k) for k in ("maxOffsetsPerTrigger", "maxBytesPerTrigger", "minOffsetsPerTrigger")
    }
    if not streaming:
        for k, v in limits.items():
            if v is not None:
                raise OptionError(f"option {k} is for streaming reads (spark.readStream)")
    delay_raw = _get(options, "maxTriggerDelay")
    if delay_raw is not None and limits["minOffsetsPerTrigger"] is None:
        raise OptionError("option maxTriggerDelay only applies together with minOffsetsPerTrigger")
    delay = parse_duration(delay_raw, "maxTriggerDelay") if delay_raw is not None else 15 * 60.0
    push_filters = _bool(options, "pushFilters", False)
    if streaming and _get(options, "pushFilters") is not None:
        raise OptionError(
            "option pushFilters is for batch reads (spark.read); a streaming read takes every message of its range"
        )

    return ReaderOptions(
        store=_store(options),
        connection=_connection(options),
        stream=stream,
        subjects=subjects,
        consumer=_get(options, "consumer") or None,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=limits["maxOffsetsPerTrigger"],
        max_bytes_per_trigger=limits["maxBytesPerTrigger"],
        min_offsets_per_trigger=limits["minOffsetsPerTrigger"],
        max_trigger_delay_s=delay,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        min_partitions=_positive_int(options, "minPartitions") or 1,
        rows_per_partition=_positive_int(options, "rowsPerPartition") or 1_000_000,
        push_filters=push_filters,
    )


def writer_options(options: Mapping[str, str]) -> WriterOptions:
    _check_known(options, _WRITER_KEYS, "write")
    return WriterOptions(
        store=_store(options),
        connection=_connection(options),
        stream=_get(options, "stream") or None,
        subject=_get(options, "subject") or None,
        registry_replicas=_registry_replicas(options),
    )


def _registry_replicas(options: Mapping[str, str]) -> Optional[int]:
    raw = _get(options, "registryReplicas")
    if raw is None or raw == "":
        return None
    if not raw.strip().isdigit() or not 1 <= int(raw) <= 5:
        raise OptionError(
            f"option registryReplicas must be a number of replicas from 1 to 5 (a NATS stream's limit), not {raw!r}"
        )
    return int(raw)
