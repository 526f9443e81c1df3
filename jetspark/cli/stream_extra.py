"""``jetspark stream subjects|find|seal|copy``: the ``nats stream`` commands that look
across a stream's subjects or the store's streams, and those that make one stream from
another or close one for good."""

from __future__ import annotations

import datetime as _dt
from typing import Optional

import click

from jetspark.api import StreamInfo
from jetspark.cli.output import emit_json, fmt_ago, fmt_count, fmt_date, output_options, plural, table
from jetspark.cli.parse import DURATION, format_size
from jetspark.cli.state import needs_store
from jetspark.cli.stream_config import config_changes, config_options, render_stream_info
from jetspark.protocol.subjects import collide, is_valid

__all__ = ["copy", "find", "seal", "subjects"]


@click.command("subjects", short_help="List a stream's subjects and their message counts.")
@click.argument("name")
@click.argument("filter_subject", metavar="[FILTER]", default=">", required=False)
@click.option(
    "--sort",
    type=click.Choice(["messages", "name"]),
    default="messages",
    show_default=True,
    help="Order by message count (largest first) or by subject name.",
)
@click.option("--reverse", "-R", is_flag=True, help="Reverse the order.")
@click.option("--names", "-n", "names_only", is_flag=True, help="Print just the subjects, one per line.")
@output_options
@needs_store()
def subjects(js, name: str, filter_subject: str, sort: str, reverse: bool, names_only: bool, as_json: bool):
    """List the subjects stored in a stream and how many messages each holds.

    Only subjects matching FILTER (default '>', all of them; wildcards
    allowed).  With --json, prints one object of subject: count.

    \b
    Example:
      jetspark stream subjects ORDERS
      jetspark stream subjects ORDERS 'orders.*.new' --sort name --json
    """
    if not is_valid(filter_subject):
        raise click.BadParameter(
            f"{filter_subject!r} is not a subject: tokens separated by '.', with * or > as wildcards",
            param_hint="FILTER",
        )
    counts = js.stream_info(name, subjects_filter=filter_subject).state.subjects or {}
    if sort == "name":
        order = sorted(counts, reverse=reverse)
    else:
        order = sorted(counts, key=lambda s: (-counts[s], s))
        if reverse:
            order.reverse()
    if as_json:
        emit_json({s: counts[s] for s in order})
        return
    if names_only:
        for s in order:
            click.echo(s)
        return
    if not order:
        click.echo(f"No subjects in stream {name} match {filter_subject}")
        return
    rows = [(s, fmt_count(counts[s])) for s in order]
    click.echo(
        table(["Subject", "Messages"], rows, right=(1,), title=f"{plural(len(order), 'subject')} in stream {name}")
    )


@click.command("find", short_help="Find the streams matching the criteria given.")
@click.option(
    "--subject",
    metavar="SUBJECT",
    help="Streams whose subjects overlap SUBJECT (wildcards allowed): those a publish to it could reach.",
)
@click.option("--empty", is_flag=True, help="Streams without messages.")
@click.option(
    "--idle",
    type=DURATION,
    metavar="DURATION",
    help="Streams without a new message or a consumer delivery for this long, e.g. 1h.",
)
@click.option("--created", type=DURATION, metavar="DURATION", help="Streams created longer ago than this, e.g. 7d.")
@click.option(
    "--consumers", type=click.IntRange(min=0), metavar="THRESHOLD", help="Streams with fewer consumers than THRESHOLD."
)
@click.option(
    "--replicas", type=click.IntRange(min=1), metavar="REPLICAS", help="Streams with this many replicas or fewer."
)
@click.option("--invert", is_flag=True, help="The streams that do not match instead.")
@click.option("--names", "-n", "names_only", is_flag=True, help="Print just the stream names.")
@output_options
@needs_store()
def find(
    js,
    subject: Optional[str],
    empty: bool,
    idle: Optional[float],
    created: Optional[float],
    consumers: Optional[int],
    replicas: Optional[int],
    invert: bool,
    names_only: bool,
    as_json: bool,
):
    """Find the streams that match every criterion given, as `nats stream find`.

    With no criterion every stream matches.  Prints a table as `stream ls`
    does, the names with --names, the StreamInfo list with --json.

    \b
    Example:
      jetspark stream find --subject 'orders.eu.>'
      jetspark stream find --empty --names
      jetspark stream find --idle 1d --invert
    """
    if subject is not None and not is_valid(subject):
        raise click.BadParameter(
            f"{subject!r} is not a subject: tokens separated by '.', with * or > as wildcards", param_hint="--subject"
        )
    now = _dt.datetime.now(_dt.timezone.utc)

    def matches(i: StreamInfo) -> bool:
        if subject is not None and not any(collide(subject, s) for s in i.config.subjects or ()):
            return False
        if empty and i.state.messages:
            return False
        if created is not None and (i.created is None or (now - i.created).total_seconds() < created):
            return False
        if consumers is not None and i.state.consumer_count >= consumers:
            return False
        if replicas is not None and (i.config.num_replicas or 1) > replicas:
            return False
        if idle is not None:
            last = _last_activity(js, i)
            if last is not None and (now - last).total_seconds() < idle:
                return False
        return True

    found = [i for i in js.streams_info() if matches(i) != invert]
    if as_json:
        emit_json([i.config.name for i in found] if names_only else found)
        return
    if names_only:
        for i in found:
            click.echo(i.config.name)
        return
    if not found:
        click.echo("No streams match")
        return
    rows = [
        (
            i.config.name,
            ", ".join(i.config.subjects or []),
            fmt_date(i.created),
            fmt_count(i.state.messages),
            format_size(i.state.bytes),
            fmt_ago(i.state.last_ts) if i.state.last_ts else "never",
        )
        for i in found
    ]
    click.echo(
        table(
            ["Name", "Subjects", "Created", "Messages", "Size", "Last Message"],
            rows,
            right=(3, 4),
            title=f"{plural(len(found), 'stream')} found",
        )
    )


def _last_activity(js, info: StreamInfo) -> Optional[_dt.datetime]:
    """The later of the stream's last message and its consumers' last deliveries (None: never)."""
    times = [info.state.last_ts] if info.state.last_ts else []
    if info.state.consumer_count:
        times += [c.delivered.last_active for c in js.consumers_info(info.config.name) if c.delivered.last_active]
    return max(times) if times else None


@click.command("seal", short_help="Seal a stream for good: no more changes.")
@click.argument("name")
@click.option("--force", "-f", is_flag=True, help="Do not ask for confirmation.")
@output_options
@needs_store()
def seal(js, name: str, force: bool, as_json: bool):
    """Seal a stream: no message can be added, deleted or purged, and no limit changed, ever again.

    A sealed stream cannot be unsealed; its messages and consumers stay readable.

    \b
    Example:
      jetspark stream seal ORDERS -f
    """
    config = js.stream_info(name).config
    if not force:
        click.confirm(f"Really seal stream {name}? A sealed stream can never be unsealed or changed", abort=True)
    info = js.update_stream(config.evolve(sealed=True))
    if as_json:
        emit_json(info)
        return
    click.echo(f"Stream {name} sealed\n")
    click.echo(render_stream_info(info))


@click.command("copy", short_help="Add a stream with another's configuration.")
@click.argument("source")
@click.argument("destination")
@config_options(edit=False)
@output_options
@needs_store()
def copy(js, source: str, destination: str, config_file, as_json: bool, **params):
    """Add stream DESTINATION with SOURCE's configuration (not its messages).

    Flags change the copy's configuration as they do in `stream add`.  Two
    streams may not capture the same subjects, so a copy of a stream with
    subjects needs its own --subjects.

    \b
    Example:
      jetspark stream copy ORDERS ORDERS_ARCHIVE --subjects 'archive.orders.>' --max-age 30d
    """
    if source == destination:
        raise click.UsageError("SOURCE and DESTINATION are the same stream: give the copy another name")
    if config_file is not None:
        raise click.UsageError(
            "--config: stream copy takes SOURCE's configuration; `stream add NAME --config FILE` adds one from a file"
        )
    config = js.stream_info(source).config
    changes = config_changes(params, config)
    if "subjects" not in changes and config.subjects:
        raise click.UsageError(
            f"the copy would capture SOURCE's subjects ({', '.join(config.subjects)}); give it its own with --subjects"
        )
    # A sealed stream's copy starts open (a stream cannot be created sealed).
    info = js.add_stream(config.evolve(name=destination, sealed=False, **changes))
    if as_json:
        emit_json(info)
        return
    click.echo(f"Stream {destination} added, a copy of {source}'s configuration\n")
    click.echo(render_stream_info(info))
