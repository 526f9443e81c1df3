"""A stream's configuration on the command line: the StreamConfig flags of ``stream add``,
``edit`` and ``copy``, ``--config`` files, and ``stream info``'s rendering of a stream."""

from __future__ import annotations

import json
from typing import Any

import click

from jetspark.api import StreamConfig, StreamInfo
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
                help="Number of replicas: more than 1 needs a NATS cluster (the embedded engine and a lone server refuse it, err_code 10074).",
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
            click.option(
                "--config",
                "config_file",
                type=click.File("r"),
                help="Read the config from a JSON file: a StreamConfig as `stream info --json` prints it (durations in seconds); flags override it.",
            ),
        ]
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return deco


def config_changes(params: dict[str, Any]) -> dict[str, Any]:
    """The StreamConfig fields the flags set (None: not given)."""
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
    for k, v in sorted((c.metadata or {}).items()):
        config.append((f"Metadata {k}", v))
    if every:
        unset = {"Description": "-", "Sealed": "false", "First Sequence": "-"}
        config = [(k, unset.get(k, "-") if v is None else v) for k, v in config]
    return config


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
    out += ["State:", "", kv_block(state)]
    if s.subjects:
        width = max(len(k) for k in s.subjects)
        out += ["", "Subjects:", ""]
        out += [f"  {k.ljust(width)}  {fmt_count(v)}" for k, v in sorted(s.subjects.items())]
    return "\n".join(out)


def config_diff(old: StreamConfig, new: StreamConfig) -> list[str]:
    """What changed, in ``stream info``'s words and units: ``Maximum Age: 7d -> 1d``."""
    return pair_diff(_config_pairs(old, every=True), _config_pairs(new, every=True))
