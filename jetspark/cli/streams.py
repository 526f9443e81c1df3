"""``jetspark stream ...``: add, edit, info, ls, rm, purge, get, rmm, report, check, backup, restore
(and, from stream_extra, subjects, find, seal, copy; ``view`` is with ``sub`` in stream_reading).

Flags are named as in the ``nats`` CLI where the idea is the same
(``--subjects``, ``--retention``, ``--max-age 1h``, ``--dupe-window``...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from jetspark.api import RawStreamMsg, StreamConfig
from jetspark.cli.message_print import print_body, write_bytes
from jetspark.cli.output import (
    body_fields,
    emit_json,
    fmt_ago,
    fmt_count,
    fmt_date,
    fmt_time,
    output_options,
    plural,
    progress,
    progress_options,
    replicas_text,
    rfc3339,
    table,
)
from jetspark.cli.parse import (
    format_size,
)
from jetspark.cli.state import Commands, describe_error, needs_store
from jetspark.cli.stream_config import config_changes, config_diff, config_from_file, config_options, render_stream_info
from jetspark.cli.stream_extra import copy, find, seal, subjects
from jetspark.errors import APIError, MsgNotFoundError

__all__ = ["stream"]


@click.group(cls=Commands)
def stream():
    """Manage streams.

    add, copy, edit, info, ls, find, subjects, report, rm, purge, seal, get,
    view, rmm, check, backup, restore.

    \b
    Example:
      jetspark stream add ORDERS --subjects 'orders.>' --max-age 1d
      jetspark stream report
    """


# ---------------------------------------------------------------------- commands


@stream.command("add")
@click.argument("name", required=False)
@config_options(edit=False)
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
    config = config_from_file(config_file) if config_file else StreamConfig()
    if name:
        config = config.evolve(name=name)
    if not config.name:
        raise click.UsageError("give the stream's NAME (or a --config file with a name)")
    info = js.add_stream(config.evolve(**config_changes(params)))
    if as_json:
        emit_json(info)
        return
    click.echo(f"Stream {info.config.name} added\n")
    click.echo(render_stream_info(info))


@stream.command("edit")
@click.argument("name")
@config_options(edit=True)
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
    base = config_from_file(config_file).evolve(name=name) if config_file else old
    changes = config_changes(params, base)
    new = base.evolve(**changes)
    info = js.update_stream(new)
    if as_json:
        emit_json(info)
        return
    diff = config_diff(old, info.config)
    click.echo(f"Stream {name} updated" + (":" if diff else " (no changes)"))
    for line in diff:
        click.echo(line)
    click.echo()
    click.echo(render_stream_info(info))


@stream.command("info")
@click.argument("name")
@click.option(
    "--subjects",
    "subjects_filter",
    metavar="FILTER",
    help="Also count messages per subject matching FILTER (e.g. '>').",
)
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


@stream.command("check", short_help="Check (and --repair) a stream's files.")
@click.argument("name")
@click.option(
    "--repair",
    is_flag=True,
    help="Fix what can be fixed, keeping every intact message; damaged ones are dropped and listed.",
)
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
            click.echo(
                f"Stream {name}: {'OK after repair' if report.ok else 'problems remain'}, "
                f"{plural(report.messages, 'message')}"
            )
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
    click.echo(
        table(
            ["Name", "Description", "Created", "Messages", "Size", "Last Message"],
            rows,
            right=(3, 4),
            title=plural(len(infos), "stream"),
        )
    )


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
                # The configured number (None where the backend does not say), and the
                # replicas by name, leader starred, as the text's Replicas column.
                "replicas": i.config.num_replicas,
                "cluster": replicas_text(i.cluster) or None,
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
    clustered = any(r["cluster"] for r in rows)  # a Replicas column, as nats stream report, on a cluster
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
        + ((r["cluster"] or "",) if clustered else ())
        for r in rows
    ]
    click.echo(
        table(
            [
                "Stream",
                "Storage",
                "Retention",
                "Consumers",
                "Messages",
                "Bytes",
                "First Seq",
                "Last Seq",
                "Deleted",
                "Subjects",
            ]
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
        click.confirm(
            f"Really delete stream {name} with {plural(state.messages, 'message')} "
            f"and {plural(state.consumer_count, 'consumer')}?",
            abort=True,
        )
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
def purge(
    js,
    name: str,
    subject: Optional[str],
    seq: Optional[int],
    keep: Optional[int],
    force: bool,
    as_json: bool,
    show_progress: Optional[bool],
):
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
        click.confirm(
            f"Really purge {what} from stream {name} ({plural(before.messages, 'message')} stored)?", abort=True
        )
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
        f"{format_size(after.bytes)}, first sequence {fmt_count(after.first_seq)}, "
        f"last sequence {fmt_count(after.last_seq)}"
    )


@stream.command("get")
@click.argument("name")
@click.argument("seq", type=click.IntRange(min=1), required=False)
@click.option(
    "--last-for",
    "-S",
    metavar="SUBJECT",
    help="Get the last message on SUBJECT (wildcards allowed) instead of a sequence.",
)
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
    try:
        msg = js.get_msg(name, seq=seq) if seq is not None else js.get_last_msg(name, last_for)
    except MsgNotFoundError as exc:
        what = f"message {seq}" if seq is not None else f"message on {last_for}"
        raise click.ClickException(f"no {what} in stream {name}{_range(js, name)}: {describe_error(exc)}") from exc
    if as_json:
        emit_json(message_json(msg))
        return
    if raw:
        write_bytes(msg.data or b"")
        return
    click.echo(f"Item: {msg.stream}#{msg.seq} received {fmt_time(msg.time)} on subject {msg.subject}")
    print_body(msg.data, msg.headers)


def _range(js, name: str) -> str:
    """`` (sequences 1..5)``, for an error about one message (empty if the stream is gone)."""
    try:
        s = js.stream_info(name).state
    except APIError:
        return ""
    return f" (sequences {fmt_count(s.first_seq)}..{fmt_count(s.last_seq)})" if s.messages else " (no messages)"


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
    try:
        js.delete_msg(name, seq)
    except APIError as exc:
        # The server's words ("stream store EOF", "no message found") name neither.
        raise click.ClickException(
            f"cannot delete message {seq} from stream {name}{_range(js, name)}: {describe_error(exc)}"
        ) from exc
    click.echo(f"Deleted message {seq} from stream {name}")


@stream.command("backup", short_help="Back up a stream, with its consumers, into DIRECTORY.")
@click.argument("name")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--consumers/--no-consumers",
    default=True,
    show_default=True,
    help="Include the stream's consumers (config and state: deliveries, acks, ack floor).",
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
        f"Backed up stream {name} to {result.path}: {plural(s.messages, 'message')} "
        f"(sequences {fmt_count(s.first_seq)}..{fmt_count(s.last_seq)}), "
        f"{plural(result.consumers, 'consumer')}, {format_size(result.bytes)} in {plural(result.files, 'file')}"
    )


@stream.command("restore", short_help="Restore a stream from a `stream backup` DIRECTORY.")
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
        f"Restored stream {info.config.name} from {directory}: {plural(info.state.messages, 'message')}, "
        f"{plural(info.state.consumer_count, 'consumer')}\n"
    )
    click.echo(render_stream_info(info))


for _command in (subjects, find, seal, copy):
    stream.add_command(_command)
