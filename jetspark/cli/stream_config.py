"""A stream's configuration on the command line: the StreamConfig flags of ``stream add``,
``edit`` and ``copy``, ``--config`` files, and ``stream info``'s rendering of a stream."""

from __future__ import annotations

import json
from typing import Any, Optional

import click

from jetspark.api import (
    PersistMode,
    Placement,
    RePublish,
    StoreCompression,
    StreamConfig,
    StreamConsumerLimits,
    StreamInfo,
    StreamSource,
    StreamSourceInfo,
    SubjectTransform,
)
from jetspark.cli.output import cluster_pairs, fmt_age, fmt_count, fmt_limit, fmt_time, kv_block, pair_diff
from jetspark.cli.parse import DURATION, SIZE, format_duration, format_size, parse_metadata, split_list

__all__ = ["config_changes", "config_diff", "config_from_file", "config_options", "render_stream_info"]

_RETENTION = {
    "limits": "limits",
    "interest": "interest",
    "workqueue": "workqueue",
    "work": "workqueue",
    "workq": "workqueue",
}
_STORAGE = {"file": "file", "memory": "memory"}

# ---------------------------------------------------------------------- config flags


def config_options(edit: bool):
    """The StreamConfig flags of ``stream add`` (and, without the fixed ones, ``stream edit``)."""

    def deco(fn):
        opts = [
            click.option(
                "--subjects",
                multiple=True,
                metavar="SUBJECT",
                help="Subjects the stream captures (repeat, or comma-separate). Default: the stream's name.",
            ),
            click.option("--description", help="A description of the stream."),
        ]
        if not edit:
            opts.append(
                click.option(
                    "--storage",
                    type=click.Choice(list(_STORAGE), case_sensitive=False),
                    help="Storage backend: file (default) or memory.",
                )
            )
        opts += [
            click.option(
                "--replicas",
                type=int,
                help="Number of replicas: more than 1 needs a NATS cluster "
                "(the embedded engine and a lone server refuse it, err_code 10074).",
            ),
            click.option(
                "--retention",
                type=click.Choice(list(_RETENTION), case_sensitive=False),
                help="Retention policy: limits (default), interest, or workqueue (work, workq).",
            ),
            click.option(
                "--discard",
                type=click.Choice(["old", "new"], case_sensitive=False),
                help="What to do when a limit is reached: discard old messages (default) or refuse new ones.",
            ),
            click.option(
                "--discard-per-subject/--no-discard-per-subject",
                default=None,
                help="Apply discard new per subject (needs --discard new and --max-msgs-per-subject).",
            ),
        ]
        if not edit:
            opts.append(click.option("--first-sequence", type=int, help="The stream's first sequence number."))
        opts += [
            click.option("--max-age", type=DURATION, help="Maximum age of messages, e.g. 1h30m, 7d (0: unlimited)."),
            click.option(
                "--max-bytes", type=SIZE, help="Maximum bytes kept, e.g. 10MB, 1GiB (1024-based; -1: unlimited)."
            ),
            click.option("--max-consumers", type=int, help="Maximum number of consumers (-1: unlimited)."),
            click.option("--max-msg-size", type=SIZE, help="Maximum size of one message, e.g. 1MB (-1: unlimited)."),
            click.option("--max-msgs", type=int, help="Maximum number of messages kept (-1: unlimited)."),
            click.option("--max-msgs-per-subject", type=int, help="Maximum messages kept per subject (-1: unlimited)."),
            click.option(
                "--dupe-window",
                type=DURATION,
                help="Duplicate-detection window for Nats-Msg-Id, e.g. 2m (default 2m, or max-age if smaller).",
            ),
            click.option(
                "--allow-rollup/--no-allow-rollup",
                default=None,
                help="Allow Nats-Rollup headers to purge subjects or the stream.",
            ),
            click.option("--deny-delete/--allow-delete", default=None, help="Refuse deleting single messages (rmm)."),
            click.option("--deny-purge/--allow-purge", default=None, help="Refuse purges."),
            click.option("--allow-direct/--no-allow-direct", default=None, help="Allow direct get."),
            click.option("--ack/--no-ack", default=None, help="Acknowledge publishes (default yes)."),
            click.option("--metadata", multiple=True, metavar="KEY=VALUE", help="Metadata to attach (repeat)."),
        ]
        opts += _server_feature_options(edit)
        opts += [
            click.option(
                "--config",
                "config_file",
                type=click.File("r"),
                help="Read the config from a JSON file: a StreamConfig as `stream info --json` prints it "
                "(durations in seconds); flags override it.",
            ),
        ]
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return deco


def _server_feature_options(edit: bool) -> list:
    """The flags of the features a NATS server implements and the embedded engine refuses
    (except per-message TTL and delete markers), under ``nats stream add``'s names."""
    server = " (a NATS server's; the embedded engine refuses it)"
    opts = [
        click.option("--mirror", metavar="STREAM", help="Mirror another stream (a mirror has no subjects)" + server),
        click.option(
            "--source",
            "sources",
            multiple=True,
            metavar="STREAM",
            help="Source messages from another stream, merging them into this one (repeat)" + server,
        ),
        click.option(
            "--compression",
            type=click.Choice([c.value for c in StoreCompression], case_sensitive=False),
            help="Compression of a file stream on disk: none or s2" + server,
        ),
        click.option(
            "--persist-mode",
            type=click.Choice([m.value for m in PersistMode], case_sensitive=False),
            help="When an R1 file stream acknowledges a write: default (after its sync) or async" + server,
        ),
        click.option("--cluster", "placement_cluster", help="Place the stream in this cluster" + server),
        click.option(
            "--tag", "placement_tags", multiple=True, help="Place the stream on servers with this tag (repeat)" + server
        ),
        click.option(
            "--transform-source", metavar="SOURCE", help="Stream subject transform source (default >)" + server
        ),
        click.option(
            "--transform-destination", metavar="DEST", help="Store messages under this subject transform" + server
        ),
        click.option("--republish-source", metavar="SOURCE", help="Republish stored messages matching SOURCE" + server),
        click.option(
            "--republish-destination", metavar="DEST", help="Republish destination of --republish-source" + server
        ),
        click.option(
            "--republish-headers",
            is_flag=True,
            default=None,
            help="Republish only the messages' headers, no bodies" + server,
        ),
        click.option(
            "--allow-msg-ttl", is_flag=True, default=None, help="Allow per-message TTL (the Nats-TTL header)."
        ),
        click.option(
            "--subject-del-markers-ttl",
            "--subject-delete-marker-ttl",
            "marker_ttl",
            type=DURATION,
            metavar="DURATION",
            help="Leave a delete marker, kept this long, when max age removes a subject's last message.",
        ),
        click.option(
            "--allow-counter",
            "--allow-msg-counter",
            "allow_counter",
            is_flag=True,
            default=None,
            help="Make the stream a counter (Nats-Incr)" + server,
        ),
        click.option("--allow-batch/--no-allow-batch", default=None, help="Allow atomic batch publishing" + server),
        click.option("--allow-fast/--no-allow-fast", default=None, help="Allow fast batch publishing" + server),
        click.option("--allow-schedules/--no-allow-schedules", default=None, help="Allow message schedules" + server),
        click.option(
            "--allow-mirror-direct/--no-allow-mirror-direct",
            default=None,
            help="Allow direct gets on this stream's mirrors" + server,
        ),
        click.option(
            "--limit-consumer-inactive",
            type=DURATION,
            metavar="DURATION",
            help="The most inactive threshold a consumer may have" + server,
        ),
        click.option(
            "--limit-consumer-max-pending",
            type=int,
            metavar="PENDING",
            help="The most ack pending a consumer may have" + server,
        ),
    ]
    if edit:
        opts += [
            click.option("--no-transform", is_flag=True, help="Remove the subject transform."),
            click.option("--no-republish", is_flag=True, help="Remove the republish configuration."),
        ]
    return opts


def _server_feature_changes(params: dict[str, Any], out: dict[str, Any], base: Optional[StreamConfig]) -> None:
    if params.get("mirror"):
        out["mirror"] = StreamSource(name=params["mirror"])
    if params.get("sources"):
        out["sources"] = [StreamSource(name=n) for n in split_list(params["sources"])]
    if params.get("compression"):
        out["compression"] = StoreCompression(params["compression"].lower())
    if params.get("persist_mode"):
        out["persist_mode"] = PersistMode(params["persist_mode"].lower())
    if params.get("placement_cluster") or params.get("placement_tags"):
        tags = split_list(params["placement_tags"]) if params.get("placement_tags") else None
        # A flag given alone changes its half: the other keeps the stream's (edit, copy).
        kept = base.placement if base and isinstance(base.placement, Placement) else Placement()
        out["placement"] = Placement(
            cluster=params.get("placement_cluster") or kept.cluster, tags=tags if tags is not None else kept.tags
        )
    if params.get("transform_destination"):
        src = params.get("transform_source") or ">"
        out["subject_transform"] = SubjectTransform(src=src, dest=params["transform_destination"])
    elif params.get("transform_source"):
        raise click.UsageError("--transform-source needs --transform-destination")
    if params.get("republish_source") or params.get("republish_destination"):
        if not (params.get("republish_source") and params.get("republish_destination")):
            raise click.UsageError("--republish-source and --republish-destination go together")
        out["republish"] = RePublish(
            src=params["republish_source"],
            dest=params["republish_destination"],
            headers_only=True if params.get("republish_headers") else None,
        )
    elif params.get("republish_headers"):
        raise click.UsageError("--republish-headers needs --republish-source and --republish-destination")
    if params.get("no_transform"):
        out["subject_transform"] = None
    if params.get("no_republish"):
        out["republish"] = None
    for flag, field in (
        ("allow_msg_ttl", "allow_msg_ttl"),
        ("allow_counter", "allow_msg_counter"),
        ("allow_batch", "allow_atomic"),
        ("allow_fast", "allow_batched"),
        ("allow_schedules", "allow_msg_schedules"),
        ("allow_mirror_direct", "mirror_direct"),
    ):
        if params.get(flag) is not None:
            out[field] = params[flag]
    if params.get("marker_ttl") is not None:
        out["subject_delete_marker_ttl"] = params["marker_ttl"]
    inactive, pending = params.get("limit_consumer_inactive"), params.get("limit_consumer_max_pending")
    if inactive is not None or pending is not None:
        limits = base.consumer_limits if base and isinstance(base.consumer_limits, StreamConsumerLimits) else None
        limits = limits or StreamConsumerLimits()
        out["consumer_limits"] = StreamConsumerLimits(
            inactive_threshold=limits.inactive_threshold if inactive is None else inactive,
            max_ack_pending=limits.max_ack_pending if pending is None else pending,
        )


def config_changes(params: dict[str, Any], base: Optional[StreamConfig] = None) -> dict[str, Any]:
    """The StreamConfig fields the flags set (None: not given) on ``base``, the config they change."""
    out: dict[str, Any] = {}

    def put(field: str, value: Any) -> None:
        if value is not None:
            out[field] = value

    if params.get("subjects"):
        out["subjects"] = split_list(params["subjects"])
    put("description", params.get("description"))
    if params.get("storage"):
        out["storage"] = _STORAGE[params["storage"].lower()]
    put("num_replicas", params.get("replicas"))
    if params.get("retention"):
        out["retention"] = _RETENTION[params["retention"].lower()]
    if params.get("discard"):
        out["discard"] = params["discard"].lower()
    put("discard_new_per_subject", params.get("discard_per_subject"))
    put("first_seq", params.get("first_sequence"))
    put("max_age", params.get("max_age"))
    put("max_bytes", params.get("max_bytes"))
    put("max_consumers", params.get("max_consumers"))
    put("max_msg_size", params.get("max_msg_size"))
    put("max_msgs", params.get("max_msgs"))
    put("max_msgs_per_subject", params.get("max_msgs_per_subject"))
    put("duplicate_window", params.get("dupe_window"))
    put("allow_rollup_hdrs", params.get("allow_rollup"))
    put("deny_delete", params.get("deny_delete"))
    put("deny_purge", params.get("deny_purge"))
    put("allow_direct", params.get("allow_direct"))
    if params.get("ack") is not None:
        out["no_ack"] = not params["ack"]
    if params.get("metadata"):
        out["metadata"] = parse_metadata(params["metadata"])
    _server_feature_changes(params, out, base)
    return out


def config_from_file(fh) -> StreamConfig:
    try:
        doc = json.load(fh)
    except ValueError as exc:
        raise click.BadParameter(f"{fh.name}: not JSON: {exc}", param_hint="--config") from None
    if isinstance(doc, dict) and isinstance(doc.get("config"), dict):
        doc = doc["config"]  # the whole `stream info --json` document
    if not isinstance(doc, dict):
        raise click.BadParameter(f"{fh.name}: expected a JSON object", param_hint="--config")
    return StreamConfig.from_response(doc)


# ---------------------------------------------------------------------- rendering


def _title(value: Any) -> str:
    text = str(getattr(value, "value", value))
    return {"workqueue": "WorkQueue"}.get(text, text.replace("_", " ").title())


def _config_pairs(c: StreamConfig, every: bool = False) -> list[tuple[str, Any]]:
    """The "Configuration" lines of ``stream info``; ``every`` keeps the lines info leaves
    out when unset (for ``stream edit``'s diff, where a change from unset shows too)."""
    discard = _title(c.discard) + (" (new per subject)" if c.discard_new_per_subject else "")
    config = [
        ("Subjects", ", ".join(c.subjects or [])),
        ("Description", c.description),
        ("Storage", _title(c.storage)),
        ("Retention", _title(c.retention)),
        ("Replicas", c.num_replicas),
        ("Acknowledgments", "false" if c.no_ack else "true"),
        ("Discard Policy", discard),
        ("Duplicate Window", format_duration(c.duplicate_window)),
        ("Direct Get", str(bool(c.allow_direct)).lower()),
        ("Allows Msg Delete", str(not c.deny_delete).lower()),
        ("Allows Purge", str(not c.deny_purge).lower()),
        ("Allows Rollups", str(bool(c.allow_rollup_hdrs)).lower()),
        ("Sealed", "true" if c.sealed else None),
        ("Maximum Messages", fmt_limit(c.max_msgs)),
        ("Maximum Per Subject", fmt_limit(c.max_msgs_per_subject)),
        ("Maximum Bytes", fmt_limit(c.max_bytes, "bytes")),
        ("Maximum Age", fmt_age(c.max_age)),
        ("Maximum Message Size", fmt_limit(c.max_msg_size, "bytes")),
        ("Maximum Consumers", fmt_limit(c.max_consumers)),
        ("First Sequence", fmt_count(c.first_seq) if c.first_seq else None),
    ]
    config += _feature_pairs(c)
    for k, v in sorted((c.metadata or {}).items()):
        config.append((f"Metadata {k}", v))
    if every:
        unset = {"Description": "-", "Sealed": "false", "First Sequence": "-"}
        config = [(k, unset.get(k, "-") if v is None else v) for k, v in config]
    return config


def _on(flag: Any) -> Optional[str]:
    return "true" if flag else None


def _render_source(s: StreamSource) -> str:
    """A mirror's or source's origin on one line, as ``nats stream info`` prints it."""
    parts = [s.name]
    if s.opt_start_seq:
        parts.append(f"Start Seq: {fmt_count(s.opt_start_seq)}")
    if s.opt_start_time:
        parts.append(f"Start Time: {fmt_time(s.opt_start_time)}")
    if s.filter_subject:
        parts.append(f"Subject Filter: {s.filter_subject}")
    for t in s.subject_transforms or []:
        parts.append(f"Subject Transform: {t.src} to {t.dest}")
    if s.external is not None:
        parts.append(f"API Prefix: {s.external.api}")
        if s.external.deliver:
            parts.append(f"Delivery Prefix: {s.external.deliver}")
    if s.consumer is not None:
        parts.append(f"Consumer Name: {s.consumer.name} ({s.consumer.deliver_subject})")
    return ", ".join(parts)


def _feature_pairs(c: StreamConfig) -> list[tuple[str, Any]]:
    """The lines of the server features a stream has on (none for one that has none)."""
    compression = getattr(c.compression, "value", c.compression)
    persist = getattr(c.persist_mode, "value", c.persist_mode)
    transform, republish = c.subject_transform, c.republish
    place = c.placement
    limits = c.consumer_limits
    pairs: list[tuple[str, Any]] = [
        ("Compression", compression if compression not in (None, "none") else None),
        ("Persistence Mode", persist if persist not in (None, "default") else None),
        ("Placement Cluster", place.cluster if place is not None and place.cluster else None),
        ("Placement Tags", ", ".join(place.tags) if place is not None and place.tags else None),
        ("Subject Transform", f"{transform.src or '>'} to {transform.dest}" if transform is not None else None),
        (
            "Republishing Headers" if republish is not None and republish.headers_only else "Republishing",
            f"{republish.src} to {republish.dest}" if republish is not None else None,
        ),
        ("Mirror Direct Get", _on(c.mirror_direct)),
        ("Allows Atomic Batch Publish", _on(c.allow_atomic)),
        ("Allows Fast Batch Publish", _on(c.allow_batched)),
        ("Allows Counters", _on(c.allow_msg_counter)),
        ("Allows Per-Message TTL", _on(c.allow_msg_ttl)),
        ("Allows Schedules", _on(c.allow_msg_schedules)),
        (
            "Subject Delete Markers TTL",
            format_duration(c.subject_delete_marker_ttl) if c.subject_delete_marker_ttl else None,
        ),
        (
            "Consumer Inactive Threshold",
            format_duration(limits.inactive_threshold) if limits is not None and limits.inactive_threshold else None,
        ),
        (
            "Consumer Max Ack Pending",
            fmt_count(limits.max_ack_pending) if limits is not None and limits.max_ack_pending else None,
        ),
        ("Mirror", _render_source(c.mirror) if c.mirror is not None else None),
    ]
    for i, s in enumerate(sorted(c.sources or [], key=lambda s: s.name)):
        pairs.append(("Sources" if i == 0 else f"Source {i + 1}", _render_source(s)))
    return pairs


def _source_info_pairs(s: StreamSourceInfo) -> list[tuple[str, Any]]:
    """A mirror's or source's progress, as ``nats stream info``'s Mirror/Source Information."""
    pairs: list[tuple[str, Any]] = [("Stream Name", s.name)]
    if s.filter_subject:
        pairs.append(("Subject Filter", s.filter_subject))
    for i, t in enumerate(s.subject_transforms or []):
        pairs.append(("Subject Filter and Transform" if i == 0 else f"Transform {i + 1}", f"{t.src} to {t.dest}"))
    pairs.append(("Lag", fmt_count(s.lag)))
    # (active: nanoseconds since the origin was last heard from; the server's -1: never)
    pairs.append(("Last Seen", format_duration(s.active / 1e9) if s.active is not None and s.active >= 0 else "never"))
    if s.external is not None:
        pairs.append(("Ext. API Prefix", s.external.api))
        pairs.append(("Ext. Delivery Prefix", s.external.deliver or None))
    if s.error:
        pairs.append(("Error", s.error.get("description", s.error)))
    return pairs


def render_stream_info(info: StreamInfo) -> str:
    c, s = info.config, info.state
    config = _config_pairs(c)
    state = [
        ("Messages", fmt_count(s.messages)),
        ("Bytes", format_size(s.bytes)),
        ("First Sequence", fmt_count(s.first_seq) + (f" @ {fmt_time(s.first_ts)}" if s.first_ts else "")),
        ("Last Sequence", fmt_count(s.last_seq) + (f" @ {fmt_time(s.last_ts)}" if s.last_ts else "")),
        ("Deleted Messages", fmt_count(s.num_deleted)),
        ("Active Consumers", fmt_count(s.consumer_count)),
        ("Number of Subjects", fmt_count(s.num_subjects)),
    ]
    if s.lost:
        state.append(("Lost", json.dumps(s.lost, default=str)))
    out = [f"Information for Stream {c.name}" + (f" created {fmt_time(info.created)}" if info.created else ""), ""]
    out += ["Configuration:", "", kv_block(config), ""]
    if cluster_pairs(info.cluster):
        out += ["Cluster Information:", "", kv_block(cluster_pairs(info.cluster)), ""]
    if info.mirror is not None:
        out += ["Mirror Information:", "", kv_block(_source_info_pairs(info.mirror)), ""]
    if info.sources:
        out += ["Source Information:", ""]
        for src in info.sources:
            out += [kv_block(_source_info_pairs(src)), ""]
    out += ["State:", "", kv_block(state)]
    if s.subjects:
        width = max(len(k) for k in s.subjects)
        out += ["", "Subjects:", ""]
        out += [f"  {k.ljust(width)}  {fmt_count(v)}" for k, v in sorted(s.subjects.items())]
    return "\n".join(out)


def config_diff(old: StreamConfig, new: StreamConfig) -> list[str]:
    """What changed, in ``stream info``'s words and units: ``Maximum Age: 7d -> 1d``."""
    return pair_diff(_config_pairs(old, every=True), _config_pairs(new, every=True))
