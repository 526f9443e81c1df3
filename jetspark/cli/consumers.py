"""``jetspark consumer ...``: add, edit, info, ls, rm, next (durable pull consumers)."""

from __future__ import annotations

from typing import Any

import click

from jetspark.api import ConsumerConfig, ConsumerInfo
from jetspark.cli.context import Commands, needs_store
from jetspark.cli.messages import ack_options, deliver
from jetspark.cli.output import (
    cluster_pairs,
    emit_json,
    fmt_ago,
    fmt_count,
    fmt_date,
    fmt_limit,
    fmt_time,
    kv_block,
    output_options,
    table,
)
from jetspark.cli.parse import (
    DURATION,
    DeliverType,
    format_duration,
    parse_duration,
    parse_header,
    split_list,
)

__all__ = ["consumer"]


@click.group(cls=Commands)
def consumer():
    """Manage consumers and read from them.

    Durable pull consumers: add, edit, info, ls, rm, next.

    \b
    Example:
      jetspark consumer add ORDERS NEW --filter orders.new --ack explicit
      jetspark consumer next ORDERS NEW --count 10
    """


def _options(edit: bool):
    def deco(fn):
        opts = [
            click.option("--filter", "filters", multiple=True, metavar="SUBJECT", help="Only deliver messages on these subjects (repeat, or comma-separate)."),
            click.option("--description", help="A description of the consumer."),
        ]
        if not edit:
            opts += [
                click.option(
                    "--ack", "ack_policy", type=click.Choice(["explicit", "all", "none"]), default="explicit", show_default=True, help="Acknowledgement policy."
                ),
                click.option(
                    "--deliver",
                    type=DeliverType(),
                    default="all",
                    show_default=True,
                    metavar="POLICY",
                    help="Where to start: all, last, new, subject (last per subject), a stream sequence (100), a duration back from now (1h) or an RFC 3339 time.",
                ),
                click.option("--replay", type=click.Choice(["instant", "original"]), default="instant", show_default=True, help="Replay policy."),
                click.option("--max-waiting", type=int, help="Maximum number of waiting pull requests."),
            ]
        opts += [
            click.option(
                "--wait", "ack_wait", type=DURATION, help="Ack wait: how long a delivered message may stay unacknowledged before redelivery, e.g. 30s."
            ),
            click.option("--max-deliver", type=int, help="Maximum deliveries of one message (-1: unlimited)."),
            click.option("--backoff", metavar="DURATIONS", help="Redelivery delays, comma-separated, e.g. 1s,5s,30s."),
            click.option("--max-pending", "max_ack_pending", type=int, help="Maximum messages delivered and not yet acknowledged."),
            click.option("--inactive-threshold", type=DURATION, help="Remove the consumer after this long without activity."),
            click.option("--headers-only/--no-headers-only", default=None, help="Deliver only headers (with Nats-Msg-Size), not bodies."),
            click.option("--metadata", multiple=True, metavar="KEY=VALUE", help="Metadata to attach (repeat)."),
        ]
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return deco


def _changes(params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    filters = split_list(params.get("filters") or ())
    if len(filters) == 1:
        out["filter_subject"], out["filter_subjects"] = filters[0], None
    elif filters:
        out["filter_subject"], out["filter_subjects"] = None, filters
    for field in ("description", "ack_wait", "max_deliver", "max_ack_pending", "inactive_threshold", "headers_only", "max_waiting"):
        if params.get(field) is not None:
            out[field] = params[field]
    if params.get("backoff"):
        try:
            out["backoff"] = [parse_duration(b) for b in split_list([params["backoff"]])]
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--backoff") from None
        wait = out.get("ack_wait")
        if wait is not None and out["backoff"] and wait != out["backoff"][0]:
            # JetStream sets the ack wait to the first backoff delay: say that --wait is not used.
            click.echo(
                f"Warning: --backoff sets the ack wait to its first delay ({format_duration(out['backoff'][0])}); --wait {format_duration(wait)} is not used",
                err=True,
            )
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


# ---------------------------------------------------------------------- rendering


def _deliver_text(c: ConsumerConfig) -> str:
    policy = str(getattr(c.deliver_policy, "value", c.deliver_policy))
    if policy == "by_start_sequence":
        return f"From Sequence {c.opt_start_seq}"
    if policy == "by_start_time":
        return f"Since {fmt_time(c.opt_start_time)}"
    return policy.replace("_", " ").title()


def render_consumer_info(info: ConsumerInfo) -> str:
    c = info.config
    filters = c.filter_subjects or ([c.filter_subject] if c.filter_subject else [])
    config = [
        ("Name", info.name),
        ("Durable Name", c.durable_name),
        ("Description", c.description),
        ("Pull Mode", "true"),
        ("Filter Subjects" if len(filters) > 1 else "Filter Subject", ", ".join(filters) if filters else None),
        ("Deliver Policy", _deliver_text(c)),
        ("Ack Policy", str(getattr(c.ack_policy, "value", c.ack_policy)).title()),
        ("Ack Wait", format_duration(c.ack_wait) if c.ack_wait is not None else None),
        ("Replay Policy", str(getattr(c.replay_policy, "value", c.replay_policy)).title()),
        ("Maximum Deliveries", fmt_limit(c.max_deliver)),
        ("Backoff", ", ".join(format_duration(b) for b in c.backoff) if c.backoff else None),
        ("Max Ack Pending", fmt_limit(c.max_ack_pending)),
        ("Max Waiting Pulls", fmt_limit(c.max_waiting)),
        ("Inactive Threshold", format_duration(c.inactive_threshold) if c.inactive_threshold else None),
        ("Headers Only", "true" if c.headers_only else None),
    ]
    for k, v in sorted((c.metadata or {}).items()):
        config.append((f"Metadata {k}", v))
    d, a = info.delivered, info.ack_floor
    state = [
        (
            "Last Delivered Message",
            f"Consumer sequence: {fmt_count(d.consumer_seq)} Stream sequence: {fmt_count(d.stream_seq)}"
            + (f" Last delivery: {fmt_ago(d.last_active)}" if d.last_active else ""),
        ),
        (
            "Acknowledgment Floor",
            f"Consumer sequence: {fmt_count(a.consumer_seq)} Stream sequence: {fmt_count(a.stream_seq)}"
            + (f" Last Ack: {fmt_ago(a.last_active)}" if a.last_active else ""),
        ),
        (
            "Outstanding Acks",
            f"{fmt_count(info.num_ack_pending)}" + (f" out of maximum {fmt_count(c.max_ack_pending)}" if c.max_ack_pending and c.max_ack_pending > 0 else ""),
        ),
        ("Redelivered Messages", fmt_count(info.num_redelivered)),
        ("Unprocessed Messages", fmt_count(info.num_pending)),
        ("Waiting Pulls", fmt_count(info.num_waiting)),
    ]
    head = f"Information for Consumer {info.stream_name} > {info.name}" + (f" created {fmt_time(info.created)}" if info.created else "")
    cluster = cluster_pairs(info.cluster)
    middle = ["Cluster Information:", "", kv_block(cluster), ""] if cluster else []
    return "\n".join([head, "", "Configuration:", "", kv_block(config), "", *middle, "State:", "", kv_block(state)])


# ---------------------------------------------------------------------- commands


@consumer.command("add")
@click.argument("stream_name", metavar="STREAM")
@click.argument("name")
@_options(edit=False)
@output_options
@needs_store()
def add(js, stream_name: str, name: str, ack_policy: str, deliver, replay: str, as_json: bool, **params):
    """Add a durable pull consumer NAME on STREAM.

    Adding one that exists with the same configuration does nothing; with a
    different one it fails (err_code 10148): use `consumer edit`.

    \b
    Example:
      jetspark consumer add ORDERS NEW --filter orders.new --deliver all --wait 30s --max-deliver 5
    """
    config = ConsumerConfig(
        durable_name=name,
        ack_policy=ack_policy,
        deliver_policy=deliver.policy,
        opt_start_seq=deliver.seq,
        opt_start_time=deliver.time,
        replay_policy=replay,
    ).evolve(**_changes(params))
    info = js.create_consumer(stream_name, config)
    if as_json:
        emit_json(info)
        return
    click.echo(f"Consumer {stream_name} > {info.name} added\n")
    click.echo(render_consumer_info(info))


@consumer.command("edit")
@click.argument("stream_name", metavar="STREAM")
@click.argument("name")
@_options(edit=True)
@output_options
@needs_store()
def edit(js, stream_name: str, name: str, as_json: bool, **params):
    """Change a consumer's configuration.

    Flags not given keep their values.  Deliver, ack and replay policies cannot change after creation.

    \b
    Example:
      jetspark consumer edit ORDERS NEW --max-deliver 10 --description 'new orders'
    """
    old = js.consumer_info(stream_name, name).config
    info = js.update_consumer(stream_name, old.evolve(**_changes(params)))
    if as_json:
        emit_json(info)
        return
    a, b = old.as_dict(), info.config.as_dict()
    diff = [f"  {k}: {a.get(k, '-')} -> {b.get(k, '-')}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    click.echo(f"Consumer {stream_name} > {name} updated" + (":" if diff else " (no changes)"))
    for line in diff:
        click.echo(line)
    click.echo()
    click.echo(render_consumer_info(info))


@consumer.command("info")
@click.argument("stream_name", metavar="STREAM")
@click.argument("name")
@output_options
@needs_store()
def info(js, stream_name: str, name: str, as_json: bool):
    """Show a consumer's configuration and state.

    \b
    Example:
      jetspark consumer info ORDERS NEW
    """
    result = js.consumer_info(stream_name, name)
    if as_json:
        emit_json(result)
    else:
        click.echo(render_consumer_info(result))


@consumer.command("ls")
@click.argument("stream_name", metavar="STREAM")
@click.option("--names", "-n", "names_only", is_flag=True, help="Print just the consumer names.")
@output_options
@needs_store()
def ls(js, stream_name: str, names_only: bool, as_json: bool):
    """List a stream's consumers (`consumer list` works too).

    \b
    Example:
      jetspark consumer ls ORDERS
    """
    infos = js.consumers_info(stream_name)
    if as_json:
        emit_json([i.name for i in infos] if names_only else infos)
        return
    if names_only:
        for i in infos:
            click.echo(i.name)
        return
    if not infos:
        click.echo(f"No consumers defined on {stream_name}")
        return
    rows = [
        (
            i.name,
            i.config.description or "",
            fmt_date(i.created),
            fmt_count(i.num_ack_pending),
            fmt_count(i.num_pending),
            fmt_ago(i.delivered.last_active) if i.delivered.last_active else "-",
        )
        for i in infos
    ]
    click.echo(
        table(["Name", "Description", "Created", "Ack Pending", "Unprocessed", "Last Delivery"], rows, right=(3, 4), title=f"Consumers of {stream_name}")
    )


@consumer.command("rm")
@click.argument("stream_name", metavar="STREAM")
@click.argument("name")
@click.option("--force", "-f", is_flag=True, help="Do not ask for confirmation.")
@needs_store()
def rm(js, stream_name: str, name: str, force: bool):
    """Delete a consumer.

    \b
    Example:
      jetspark consumer rm ORDERS NEW -f
    """
    js.consumer_info(stream_name, name)  # not found -> the API error, before asking
    if not force:
        click.confirm(f"Really delete consumer {stream_name} > {name}?", abort=True)
    js.delete_consumer(stream_name, name)
    click.echo(f"Deleted consumer {stream_name} > {name}")


@consumer.command("next")
@click.argument("stream_name", metavar="STREAM")
@click.argument("name")
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True, help="Fetch this many messages, one at a time.")
@click.option("--wait", type=DURATION, default="5s", show_default=True, help="How long to wait for each message.")
@ack_options
@click.option("--raw", is_flag=True, help="Print only message bodies, one per line.")
@output_options
@needs_store()
def next_(js, stream_name: str, name: str, count: int, wait: float, ack: bool, nak: bool, term: bool, raw: bool, as_json: bool):
    """Fetch and acknowledge the next messages of a consumer.

    Like `nats consumer next`: one message at a time, up to --count.  With --json, prints one message per line.

    \b
    Example:
      jetspark consumer next ORDERS NEW
      jetspark consumer next ORDERS NEW --count 10 --no-ack --raw
    """
    deliver(js, stream_name, name, count=count, per_fetch=1, wait=wait, ack=ack, nak=nak, term=term, raw=raw, as_json=as_json)
