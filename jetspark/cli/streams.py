"""``jetspark stream ...``: add, edit, info, ls, rm, purge, get, rmm, report, check, backup, restore.

Flags are named as in the ``nats`` CLI where the idea is the same
(``--subjects``, ``--retention``, ``--max-age 1h``, ``--dupe-window``...).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import click

from jetspark.api import RawStreamMsg, StreamConfig, StreamInfo
from jetspark.cli.context import Commands, needs_store
from jetspark.cli.messages import print_body, write_bytes
from jetspark.cli.output import (
    body_fields,
    cluster_pairs,
    emit_json,
    fmt_age,
    fmt_ago,
    fmt_count,
    fmt_date,
    fmt_limit,
    fmt_time,
    kv_block,
    output_options,
    plural,
    progress,
    progress_options,
    replicas_text,
    rfc3339,
    table,
)
from jetspark.cli.parse import (
    DURATION,
    SIZE,
    format_duration,
    format_size,
    parse_header,
    split_list,
)

__all__ = ["stream"]

_RETENTION = {"limits": "limits", "interest": "interest", "workqueue": "workqueue", "work": "workqueue", "workq": "workqueue"}
_STORAGE = {"file": "file", "memory": "memory"}


@click.group(cls=Commands)
def stream():
    """Manage streams.

    add, edit, info, ls, rm, purge, get, view, rmm, report, check, backup, restore.

    \b
    Example:
      jetspark stream add ORDERS --subjects 'orders.>' --max-age 1d
      jetspark stream report
    """


# ---------------------------------------------------------------------- config flags


def _config_options(edit: bool):
    """The StreamConfig flags of ``stream add`` (and, without the fixed ones, ``stream edit``)."""

    def deco(fn):
        opts = [
            click.option(
                "--subjects", multiple=True, metavar="SUBJECT", help="Subjects the stream captures (repeat, or comma-separate). Default: the stream's name."
            ),
            click.option("--description", help="A description of the stream."),
        ]
        if not edit:
            opts.append(click.option("--storage", type=click.Choice(list(_STORAGE), case_sensitive=False), help="Storage backend: file (default) or memory."))
        opts += [
            click.option("--replicas", type=int, help="Number of replicas (the embedded engine keeps 1)."),
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
            click.option("--max-bytes", type=SIZE, help="Maximum bytes kept, e.g. 10MB, 1GiB (1024-based; -1: unlimited)."),
            click.option("--max-consumers", type=int, help="Maximum number of consumers (-1: unlimited)."),
            click.option("--max-msg-size", type=SIZE, help="Maximum size of one message, e.g. 1MB (-1: unlimited)."),
            click.option("--max-msgs", type=int, help="Maximum number of messages kept (-1: unlimited)."),
            click.option("--max-msgs-per-subject", type=int, help="Maximum messages kept per subject (-1: unlimited)."),
            click.option("--dupe-window", type=DURATION, help="Duplicate-detection window for Nats-Msg-Id, e.g. 2m (default 2m, or max-age if smaller)."),
            click.option("--allow-rollup/--no-allow-rollup", default=None, help="Allow Nats-Rollup headers to purge subjects or the stream."),
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


def _changes(params: dict[str, Any]) -> dict[str, Any]:
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
        meta = {}
        for item in params["metadata"]:
            key, sep, value = item.partition("=")
            if not sep:
                try:
                    key, value = parse_header(item)
                except ValueError:
                    raise click.BadParameter(f"{item!r}: use KEY=VALUE", param_hint="--metadata") from None
            meta[key.strip()] = value.strip()
        out["metadata"] = meta
    return out


def _config_from_file(fh) -> StreamConfig:
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


def render_stream_info(info: StreamInfo) -> str:
    c, s = info.config, info.state
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


def _config_diff(old: StreamConfig, new: StreamConfig) -> list[str]:
    a, b = old.as_dict(), new.as_dict()
    lines = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            lines.append(f"  {key}: {a.get(key, '-')!s} -> {b.get(key, '-')!s}")
    return lines


# ---------------------------------------------------------------------- commands


@stream.command("add")
@click.argument("name", required=False)
@_config_options(edit=False)
@output_options
@needs_store(create=True)
def add(js, name: Optional[str], config_file, as_json: bool, **params):
    """Add a stream (creating the store if it does not exist).

    Adding a stream that exists with the same configuration does nothing;
    with a different one it fails (err_code 10058): use `stream edit`.

    \b
    Example:
      jetspark stream add ORDERS --subjects 'orders.>' --max-age 1h --max-bytes 1GiB --dupe-window 5m
    """
    config = _config_from_file(config_file) if config_file else StreamConfig()
    if name:
        config = config.evolve(name=name)
    if not config.name:
        raise click.UsageError("give the stream's NAME (or a --config file with a name)")
    info = js.add_stream(config.evolve(**_changes(params)))
    if as_json:
        emit_json(info)
        return
    click.echo(f"Stream {info.config.name} added\n")
    click.echo(render_stream_info(info))


@stream.command("edit")
@click.argument("name")
@_config_options(edit=True)
@output_options
@needs_store()
def edit(js, name: str, config_file, as_json: bool, **params):
    """Change a stream's configuration.

    Flags not given keep their values.  Lowering a limit removes the messages that no longer fit.

    \b
    Example:
      jetspark stream edit ORDERS --max-age 7d --description 'all orders'
    """
    old = js.stream_info(name).config
    base = _config_from_file(config_file).evolve(name=name) if config_file else old
    changes = _changes(params)
    new = base.evolve(**changes)
    info = js.update_stream(new)
    if as_json:
        emit_json(info)
        return
    diff = _config_diff(old, info.config)
    click.echo(f"Stream {name} updated" + (":" if diff else " (no changes)"))
    for line in diff:
        click.echo(line)
    click.echo()
    click.echo(render_stream_info(info))


@stream.command("info")
@click.argument("name")
@click.option("--subjects", "subjects_filter", metavar="FILTER", help="Also count messages per subject matching FILTER (e.g. '>').")
@output_options
@needs_store()
def info(js, name: str, subjects_filter: Optional[str], as_json: bool):
    """Show a stream's configuration and state.

    \b
    Example:
      jetspark stream info ORDERS --subjects '>'
    """
    result = js.stream_info(name, subjects_filter=subjects_filter)
    if as_json:
        emit_json(result)
    else:
        click.echo(render_stream_info(result))


@stream.command("check")
@click.argument("name")
@click.option("--repair", is_flag=True, help="Fix what can be fixed, keeping every intact message; damaged ones are dropped and listed.")
@output_options
@needs_store()
def check(js, name: str, repair: bool, as_json: bool):
    """Check a stream's files: header, journals and every message's checksum.

    Exits with status 1 when a problem is left unrepaired.  Run --repair while
    no other process uses the stream.

    \b
    Example:
      jetspark stream check ORDERS
      jetspark stream check ORDERS --repair
    """
    if not hasattr(js, "check_stream"):
        raise click.UsageError("stream check reads an embedded store's files (--store); a NATS server checks its own")
    report = js.check_stream(name, repair=repair)
    if as_json:
        emit_json(report)
    else:
        if not report.problems:
            click.echo(f"Stream {name}: OK, {plural(report.messages, 'message')} checked")
        for p in report.problems:
            mark = "repaired" if p.repaired else "PROBLEM"
            seqs = f" (sequences {_seq_list(p.seqs)})" if p.seqs else ""
            click.echo(f"{mark}: {p.path}: {p.what}{seqs}")
        if report.lost:
            click.echo(f"Dropped {plural(len(report.lost), 'damaged message')}: {_seq_list(report.lost)}")
        if report.problems:
            click.echo(f"Stream {name}: {'OK after repair' if report.ok else 'problems remain'}, {plural(report.messages, 'message')}")
    if not report.ok:
        raise SystemExit(1)


def _seq_list(seqs, show: int = 10) -> str:
    head = ", ".join(str(q) for q in seqs[:show])
    return head + (f" and {len(seqs) - show} more" if len(seqs) > show else "")


@stream.command("ls")
@click.option("--names", "-n", "names_only", is_flag=True, help="Print just the stream names.")
@output_options
@needs_store()
def ls(js, names_only: bool, as_json: bool):
    """List the streams (`stream list` works too).

    \b
    Example:
      jetspark stream ls
      jetspark stream ls --names
    """
    infos = js.streams_info()
    if as_json:
        emit_json([i.config.name for i in infos] if names_only else infos)
        return
    if names_only:
        for i in infos:
            click.echo(i.config.name)
        return
    if not infos:
        click.echo("No streams defined")
        return
    rows = [
        (
            i.config.name,
            i.config.description or "",
            fmt_date(i.created),
            fmt_count(i.state.messages),
            format_size(i.state.bytes),
            fmt_ago(i.state.last_ts) if i.state.last_ts else "never",
        )
        for i in infos
    ]
    click.echo(table(["Name", "Description", "Created", "Messages", "Size", "Last Message"], rows, right=(3, 4), title=plural(len(infos), "stream")))


@stream.command("report")
@click.option(
    "--sort",
    type=click.Choice(["name", "messages", "bytes", "consumers"]),
    default="name",
    show_default=True,
    help="Sort the rows by this column (numbers largest first).",
)
@output_options
@needs_store()
def report(js, sort: str, as_json: bool):
    """Report on every stream in a table.

    Messages, bytes, first and last sequence, consumers.

    \b
    Example:
      jetspark stream report --sort bytes
    """
    rows = []
    for i in js.streams_info():
        s = i.state
        rows.append(
            {
                "stream": i.config.name,
                "storage": str(getattr(i.config.storage, "value", i.config.storage)),
                "retention": str(getattr(i.config.retention, "value", i.config.retention)),
                "messages": s.messages,
                "bytes": s.bytes,
                "first_seq": s.first_seq,
                "last_seq": s.last_seq,
                "deleted": s.num_deleted,
                "subjects": s.num_subjects,
                "consumers": s.consumer_count,
                "replicas": replicas_text(i.cluster),
            }
        )
    if sort == "name":
        rows.sort(key=lambda r: r["stream"])
    else:
        rows.sort(key=lambda r: (-r[sort], r["stream"]))
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("No streams defined")
        return
    clustered = any(r["replicas"] for r in rows)  # a Replicas column, as nats stream report, on a cluster
    body = [
        (
            r["stream"],
            r["storage"],
            r["retention"],
            fmt_count(r["consumers"]),
            fmt_count(r["messages"]),
            format_size(r["bytes"]),
            fmt_count(r["first_seq"]),
            fmt_count(r["last_seq"]),
            fmt_count(r["deleted"]),
            fmt_count(r["subjects"]),
        )
        + ((r["replicas"],) if clustered else ())
        for r in rows
    ]
    click.echo(
        table(
            ["Stream", "Storage", "Retention", "Consumers", "Messages", "Bytes", "First Seq", "Last Seq", "Deleted", "Subjects"]
            + (["Replicas"] if clustered else []),
            body,
            right=(3, 4, 5, 6, 7, 8, 9),
            title=f"Stream report ({plural(len(rows), 'stream')})",
        )
    )


@stream.command("rm")
@click.argument("name")
@click.option("--force", "-f", is_flag=True, help="Do not ask for confirmation.")
@needs_store()
def rm(js, name: str, force: bool):
    """Delete a stream with its messages and consumers.

    \b
    Example:
      jetspark stream rm ORDERS -f
    """
    state = js.stream_info(name).state
    if not force:
        click.confirm(f"Really delete stream {name} with {plural(state.messages, 'message')} and {plural(state.consumer_count, 'consumer')}?", abort=True)
    js.delete_stream(name)
    click.echo(f"Deleted stream {name}")


@stream.command("purge")
@click.argument("name")
@click.option("--subject", metavar="SUBJECT", help="Purge only messages on this subject (wildcards allowed).")
@click.option("--seq", type=click.IntRange(min=1), help="Purge up to, but not including, this sequence.")
@click.option("--keep", type=click.IntRange(min=1), help="Keep this many of the newest messages.")
@click.option("--force", "-f", is_flag=True, help="Do not ask for confirmation.")
@output_options
@progress_options
@needs_store()
def purge(js, name: str, subject: Optional[str], seq: Optional[int], keep: Optional[int], force: bool, as_json: bool, show_progress: Optional[bool]):
    """Remove messages from a stream.

    All of them, one subject's, those below --seq, or all but the --keep newest.

    \b
    Example:
      jetspark stream purge ORDERS --subject orders.cancelled -f
      jetspark stream purge ORDERS --keep 1000 -f
    """
    if seq is not None and keep is not None:
        raise click.UsageError("--seq and --keep cannot be combined")
    before = js.stream_info(name).state
    what = "all messages"
    if subject:
        what = f"messages on {subject}"
    if seq is not None:
        what += f" below sequence {seq}"
    elif keep is not None:
        what += f" except the newest {fmt_count(keep)}"
    if not force:
        click.confirm(f"Really purge {what} from stream {name} ({plural(before.messages, 'message')} stored)?", abort=True)
    # The purge is one call with no progress of its own: the bar shows the time
    # it runs, and the count once it returns.
    with progress(None, f"purge {name} ({plural(before.messages, 'message')} stored)", show=show_progress) as bar:
        with bar.ticking():
            js.purge_stream(name, subject=subject, seq=seq, keep=keep)
        after = js.stream_info(name).state
        purged = max(before.messages - after.messages, 0)
        bar.update(purged)
    if as_json:
        emit_json({"stream": name, "purged": purged, "state": after})
        return
    click.echo(
        f"Purged {plural(purged, 'message')} from {name}: {fmt_count(after.messages)} left, "
        f"{format_size(after.bytes)}, first sequence {fmt_count(after.first_seq)}, last sequence {fmt_count(after.last_seq)}"
    )


@stream.command("get")
@click.argument("name")
@click.argument("seq", type=click.IntRange(min=1), required=False)
@click.option("--last-for", "-S", metavar="SUBJECT", help="Get the last message on SUBJECT (wildcards allowed) instead of a sequence.")
@click.option("--raw", is_flag=True, help="Print only the message body, byte for byte.")
@output_options
@needs_store()
def get(js, name: str, seq: Optional[int], last_for: Optional[str], raw: bool, as_json: bool):
    """Show one stored message.

    By sequence, or the last one on a subject.

    \b
    Example:
      jetspark stream get ORDERS 12
      jetspark stream get ORDERS --last-for orders.new --raw
    """
    if (seq is None) == (last_for is None):
        raise click.UsageError("give a sequence number or --last-for SUBJECT (one of the two)")
    msg = js.get_msg(name, seq=seq) if seq is not None else js.get_last_msg(name, last_for)
    if as_json:
        emit_json(message_json(msg))
        return
    if raw:
        write_bytes(msg.data or b"")
        return
    click.echo(f"Item: {msg.stream}#{msg.seq} received {fmt_time(msg.time)} on subject {msg.subject}")
    print_body(msg.data, msg.headers)


def message_json(msg: RawStreamMsg) -> dict:
    return {
        "stream": msg.stream,
        "seq": msg.seq,
        "subject": msg.subject,
        "time": rfc3339(msg.time) if msg.time else None,
        "headers": msg.headers or {},
        **body_fields(msg.data),
    }


@stream.command("rmm")
@click.argument("name")
@click.argument("seq", type=click.IntRange(min=1))
@click.option("--force", "-f", is_flag=True, help="Do not ask for confirmation.")
@needs_store()
def rmm(js, name: str, seq: int, force: bool):
    """Delete one message from a stream by sequence.

    \b
    Example:
      jetspark stream rmm ORDERS 12 -f
    """
    if not force:
        click.confirm(f"Really delete message {seq} from stream {name}?", abort=True)
    js.delete_msg(name, seq)
    click.echo(f"Deleted message {seq} from stream {name}")


@stream.command("backup")
@click.argument("name")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--consumers/--no-consumers", default=True, show_default=True, help="Include the stream's consumers (config and state: deliveries, acks, ack floor)."
)
@output_options
@progress_options
@needs_store()
def backup(js, name: str, directory: Path, consumers: bool, as_json: bool, show_progress: Optional[bool]):
    """Back up a stream, with its consumers, into DIRECTORY (new, or empty).

    The backup holds one point in time: the stream's config, its messages with their
    sequences, times and headers, deleted sequences, dedup window, and its consumers'
    state.  Every file is checksummed (SHA-256) in DIRECTORY/backup.json.  On an embedded
    store, writers to the stream wait while its files are copied; on a server (--server)
    the server sends its own snapshot.  A backup restores on the kind of backend that
    took it (`stream restore`).

    \b
    Example:
      jetspark stream backup ORDERS /backups/orders
      jetspark stream restore /backups/orders
    """
    with progress(None, f"backup {name}", unit="B", show=show_progress) as bar:
        result = js.backup_stream(name, directory, consumers=consumers, progress=bar.move_to)
    if as_json:
        emit_json(result)
        return
    s = result.state
    click.echo(
        f"Backed up stream {name} to {result.path}: {plural(s.messages, 'message')} (sequences {fmt_count(s.first_seq)}..{fmt_count(s.last_seq)}), "
        f"{plural(result.consumers, 'consumer')}, {format_size(result.bytes)} in {plural(result.files, 'file')}"
    )


@stream.command("restore")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@output_options
@progress_options
@needs_store(create=True)
def restore(js, directory: Path, as_json: bool, show_progress: Optional[bool]):
    """Restore the stream a `stream backup` wrote into DIRECTORY, with its consumers.

    Every file's checksum is checked before anything is created: a damaged, truncated or
    missing file is named and nothing is restored.  A stream of the same name must not
    exist (err_code 10130: delete it first, or restore into another store).  A backup
    restores on the kind of backend that took it: an embedded store's into an embedded
    store (created if need be), a server's on a server.

    \b
    Example:
      jetspark stream restore /backups/orders
      jetspark --store /data/other stream restore /backups/orders
    """
    with progress(None, f"restore {directory.name}", unit="B", show=show_progress) as bar:
        info = js.restore_stream(directory, progress=bar.move_to)
    if as_json:
        emit_json(info)
        return
    click.echo(
        f"Restored stream {info.config.name} from {directory}: {plural(info.state.messages, 'message')}, {plural(info.state.consumer_count, 'consumer')}\n"
    )
    click.echo(render_stream_info(info))
