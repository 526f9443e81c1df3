"""``jetspark consumer ...``: add, edit, info, ls, report, rm, next (pull and push, durable and ephemeral
consumers); pause and resume are in consumer_pause.py."""

from __future__ import annotations

from typing import Any, Optional

import click

from jetspark.api import AckPolicy, ConsumerConfig, ConsumerInfo, ReplayPolicy
from jetspark.cli.consumer_pause import pause, pause_until, resume
from jetspark.cli.fetch import ack_options, deliver
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
    pair_diff,
    plural,
    replicas_text,
    table,
)
from jetspark.cli.parse import (
    DURATION,
    DeliverType,
    format_duration,
    parse_duration,
    parse_metadata,
    split_list,
)
from jetspark.cli.state import Commands, needs_store

__all__ = ["consumer"]


@click.group(cls=Commands)
def consumer():
    """Manage consumers and read from them.

    add, edit, info, ls, report, rm, next, pause, resume: pull or push consumers,
    durable or ephemeral (`consumer next` and `fetch` read pull consumers).

    \b
    Example:
      jetspark consumer add ORDERS NEW --filter orders.new --ack explicit
      jetspark consumer next ORDERS NEW --count 10
    """


def _options(edit: bool):
    def deco(fn):
        opts = [
            click.option(
                "--filter",
                "filters",
                multiple=True,
                metavar="SUBJECT",
                help="Only deliver messages on these subjects (repeat, or comma-separate).",
            ),
            click.option("--description", help="A description of the consumer."),
        ]
        if not edit:
            opts += [
                click.option(
                    "--ack",
                    "ack_policy",
                    type=click.Choice(["explicit", "all", "none"]),
                    default="explicit",
                    show_default=True,
                    help="Acknowledgement policy.",
                ),
                click.option(
                    "--deliver",
                    type=DeliverType(),
                    default="all",
                    show_default=True,
                    metavar="POLICY",
                    help="Where to start: all, last, new, subject (last per subject), a stream sequence (100), "
                    "a duration back from now (1h) or an RFC 3339 time.",
                ),
                click.option(
                    "--replay",
                    type=click.Choice(["instant", "original"]),
                    default="instant",
                    show_default=True,
                    help="Replay policy.",
                ),
                click.option("--max-waiting", type=int, help="Maximum number of waiting pull requests."),
            ]
        opts += [
            click.option(
                "--wait",
                "ack_wait",
                type=DURATION,
                help="Ack wait: how long a delivered message may stay unacknowledged before redelivery, e.g. 30s.",
            ),
            click.option("--max-deliver", type=int, help="Maximum deliveries of one message (-1: unlimited)."),
            click.option("--backoff", metavar="DURATIONS", help="Redelivery delays, comma-separated, e.g. 1s,5s,30s."),
            click.option(
                "--max-pending",
                "max_ack_pending",
                type=int,
                help="Maximum messages delivered and not yet acknowledged.",
            ),
            click.option(
                "--inactive-threshold", type=DURATION, help="Remove the consumer after this long without activity."
            ),
            click.option(
                "--headers-only/--no-headers-only",
                default=None,
                help="Deliver only headers (with Nats-Msg-Size), not bodies.",
            ),
            click.option("--metadata", multiple=True, metavar="KEY=VALUE", help="Metadata to attach (repeat)."),
            click.option(
                "--pause",
                "pause_until",
                metavar="TIME|DURATION",
                help="Pause deliveries until an RFC 3339 time or for a duration from now, e.g. 1h.",
            ),
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
    for field in (
        "description",
        "ack_wait",
        "max_deliver",
        "max_ack_pending",
        "inactive_threshold",
        "headers_only",
        "max_waiting",
    ):
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
                f"Warning: --backoff sets the ack wait to its first delay ({format_duration(out['backoff'][0])}); "
                f"--wait {format_duration(wait)} is not used",
                err=True,
            )
    if params.get("metadata"):
        out["metadata"] = parse_metadata(params["metadata"])
    if params.get("pause_until"):
        out["pause_until"] = pause_until(params["pause_until"])
    return out


# ---------------------------------------------------------------------- rendering


def _deliver_text(c: ConsumerConfig) -> str:
    policy = str(getattr(c.deliver_policy, "value", c.deliver_policy))
    if policy == "by_start_sequence":
        return f"From Sequence {c.opt_start_seq}"
    if policy == "by_start_time":
        return f"Since {fmt_time(c.opt_start_time)}"
    return policy.replace("_", " ").title()


def _mode(c: ConsumerConfig) -> str:
    return "Push" if c.deliver_subject else "Pull"


def _config_pairs(name: str, c: ConsumerConfig, every: bool = False) -> list[tuple[str, Any]]:
    """The "Configuration" lines of ``consumer info``; ``every`` keeps those info leaves out
    when unset (for ``consumer edit``'s diff)."""
    filters = c.filter_subjects or ([c.filter_subject] if c.filter_subject else [])
    push = bool(c.deliver_subject)
    config = [
        ("Name", name),
        ("Durable Name", c.durable_name if c.durable_name or not every else "-"),
        ("Ephemeral", None if c.durable_name else "true"),
        ("Description", c.description),
        ("Pull Mode", None if push else "true"),
        ("Delivery Subject", c.deliver_subject),
        ("Deliver Queue Group", c.deliver_group),
        ("Idle Heartbeat", format_duration(c.idle_heartbeat) if c.idle_heartbeat else None),
        ("Flow Control", "true" if c.flow_control else None),
        ("Filter Subjects" if len(filters) > 1 else "Filter Subject", ", ".join(filters) if filters else None),
        ("Deliver Policy", _deliver_text(c)),
        ("Ack Policy", str(getattr(c.ack_policy, "value", c.ack_policy)).title()),
        ("Ack Wait", format_duration(c.ack_wait) if c.ack_wait is not None else None),
        ("Replay Policy", str(getattr(c.replay_policy, "value", c.replay_policy)).title()),
        ("Maximum Deliveries", fmt_limit(c.max_deliver)),
        ("Backoff", ", ".join(format_duration(b) for b in c.backoff) if c.backoff else None),
        ("Max Ack Pending", fmt_limit(c.max_ack_pending)),
        ("Max Waiting Pulls", None if c.deliver_subject else fmt_limit(c.max_waiting)),
        ("Inactive Threshold", format_duration(c.inactive_threshold) if c.inactive_threshold else None),
        ("Headers Only", "true" if c.headers_only else None),
    ]
    if c.rate_limit_bps:
        config.append(("Rate Limit", f"{fmt_count(c.rate_limit_bps)} bps"))
    if c.sample_freq:
        config.append(("Sampling Rate", c.sample_freq))
    if c.pause_until is not None:
        config.append(("Paused Until Deadline", fmt_time(c.pause_until)))
    for k, v in sorted((c.metadata or {}).items()):
        config.append((f"Metadata {k}", v))
    if every:
        config = [(k, "-" if v is None else v) for k, v in config]
    return config


def render_consumer_info(info: ConsumerInfo) -> str:
    c = info.config
    config = _config_pairs(info.name, c)
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
            f"{fmt_count(info.num_ack_pending)}"
            + (
                f" out of maximum {fmt_count(c.max_ack_pending)}" if c.max_ack_pending and c.max_ack_pending > 0 else ""
            ),
        ),
        ("Redelivered Messages", fmt_count(info.num_redelivered)),
        ("Unprocessed Messages", fmt_count(info.num_pending)),
        ("Waiting Pulls", None if c.deliver_subject else fmt_count(info.num_waiting)),
        ("Active Interest", ("true" if info.push_bound else "false") if c.deliver_subject else None),
        (
            "Paused Until",
            f"{fmt_date(c.pause_until)} UTC ({format_duration(round(info.pause_remaining / 1e9))} remaining)"
            if info.paused and info.pause_remaining is not None
            else None,
        ),
    ]
    head = f"Information for Consumer {info.stream_name} > {info.name}" + (
        f" created {fmt_time(info.created)}" if info.created else ""
    )
    cluster = cluster_pairs(info.cluster)
    middle = ["Cluster Information:", "", kv_block(cluster), ""] if cluster else []
    return "\n".join([head, "", "Configuration:", "", kv_block(config), "", *middle, "State:", "", kv_block(state)])


# ---------------------------------------------------------------------- commands


def _push_options(fn):
    for opt in reversed(
        [
            click.option(
                "--ephemeral",
                is_flag=True,
                help="An ephemeral consumer: removed after --inactive-threshold (default 5s) without activity; "
                "NAME is optional.",
            ),
            click.option(
                "--pull",
                is_flag=True,
                help="A pull consumer, read with `consumer next` or `fetch` (the default without --target).",
            ),
            click.option(
                "--target",
                "deliver_subject",
                metavar="SUBJECT",
                help="A push consumer delivering to SUBJECT (not one the stream captures).",
            ),
            click.option(
                "--deliver-group", metavar="GROUP", help="Push: deliver only to subscriptions in this queue group."
            ),
            click.option(
                "--heartbeat",
                "idle_heartbeat",
                type=DURATION,
                help="Push: send an idle heartbeat this often while nothing is delivered, e.g. 5s (100ms or more).",
            ),
            click.option(
                "--flow-control",
                is_flag=True,
                default=None,
                help="Push: flow control, pausing deliveries a subscriber cannot keep up with (needs --heartbeat).",
            ),
        ]
    ):
        fn = opt(fn)
    return fn


@consumer.command("add")
@click.argument("stream_name", metavar="STREAM")
@click.argument("name", required=False)
@_push_options
@_options(edit=False)
@output_options
@needs_store()
def add(
    js,
    stream_name: str,
    name: Optional[str],
    ack_policy: str,
    deliver,
    replay: str,
    ephemeral: bool,
    pull: bool,
    as_json: bool,
    **params,
):
    """Add a consumer NAME on STREAM: durable and pull by default.

    --ephemeral makes an ephemeral one (its name is chosen for it when NAME
    is not given); --target SUBJECT a push one, with --deliver-group,
    --heartbeat and --flow-control as in `nats consumer add`.  Adding one
    that exists with the same configuration does nothing; with a different
    one it fails (err_code 10148): use `consumer edit`.

    \b
    Example:
      jetspark consumer add ORDERS NEW --filter orders.new --deliver all --wait 30s --max-deliver 5
      jetspark consumer add ORDERS --ephemeral --inactive-threshold 1h
      jetspark consumer add ORDERS MONITOR --target monitor.orders --deliver-group workers --heartbeat 5s --flow-control
    """
    if name is None and not ephemeral:
        raise click.UsageError("give the consumer's NAME (or --ephemeral, for one named for you)")
    push = {k: params.pop(k) for k in ("deliver_subject", "deliver_group", "idle_heartbeat", "flow_control")}
    if pull and push["deliver_subject"]:
        raise click.UsageError(
            "--pull and --target: a consumer is pull (no --target) or push (delivering to --target), not both"
        )
    if not push["deliver_subject"]:
        given = [
            flag
            for flag, key in (
                ("--deliver-group", "deliver_group"),
                ("--heartbeat", "idle_heartbeat"),
                ("--flow-control", "flow_control"),
            )
            if push[key]
        ]
        if given:
            raise click.UsageError(f"{', '.join(given)}: for a push consumer only; add --target SUBJECT")
    config = ConsumerConfig(
        name=name if ephemeral else None,
        durable_name=None if ephemeral else name,
        ack_policy=AckPolicy(ack_policy),
        deliver_policy=deliver.policy,
        opt_start_seq=deliver.seq,
        opt_start_time=deliver.time,
        replay_policy=ReplayPolicy(replay),
        **push,
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
    diff = pair_diff(_config_pairs(name, old, every=True), _config_pairs(name, info.config, every=True))
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
        table(
            ["Name", "Description", "Created", "Ack Pending", "Unprocessed", "Last Delivery"],
            rows,
            right=(3, 4),
            title=f"Consumers of {stream_name}",
        )
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
@click.option(
    "--count", type=click.IntRange(min=1), default=1, show_default=True, help="Fetch this many messages, one at a time."
)
@click.option("--wait", type=DURATION, default="5s", show_default=True, help="How long to wait for each message.")
@ack_options
@click.option("--raw", is_flag=True, help="Print only message bodies, one per line.")
@output_options
@needs_store()
def next_(
    js, stream_name: str, name: str, count: int, wait: float, ack: bool, nak: bool, term: bool, raw: bool, as_json: bool
):
    """Fetch and acknowledge the next messages of a consumer.

    Like `nats consumer next`: one message at a time, up to --count.  With --json, prints one message per line.

    \b
    Example:
      jetspark consumer next ORDERS NEW
      jetspark consumer next ORDERS NEW --count 10 --no-ack --raw
    """
    deliver(
        js,
        stream_name,
        name,
        count=count,
        per_fetch=1,
        wait=wait,
        ack=ack,
        nak=nak,
        term=term,
        raw=raw,
        as_json=as_json,
    )


@consumer.command("report")
@click.argument("stream_name", metavar="STREAM")
@click.option(
    "--sort",
    type=click.Choice(["name", "pending", "ack-pending", "redelivered"]),
    default="name",
    show_default=True,
    help="Sort the rows by this column (numbers largest first).",
)
@output_options
@needs_store()
def report(js, stream_name: str, sort: str, as_json: bool):
    """Report on every consumer of STREAM in a table.

    Mode (pull or push), ack policy and wait, messages awaiting an ack,
    redelivered, unprocessed, and the ack floor's stream sequence, as
    `nats consumer report` lists them.

    \b
    Example:
      jetspark consumer report ORDERS
      jetspark consumer report ORDERS --sort pending --json
    """
    rows = []
    for i in js.consumers_info(stream_name):
        c = i.config
        rows.append(
            {
                "consumer": i.name,
                "mode": _mode(c).lower(),
                "durable": bool(c.durable_name),
                "ack_policy": str(getattr(c.ack_policy, "value", c.ack_policy)),
                "ack_wait": c.ack_wait,
                "ack_pending": i.num_ack_pending,
                "redelivered": i.num_redelivered,
                "unprocessed": i.num_pending,
                "ack_floor": i.ack_floor.stream_seq,
                "cluster": replicas_text(i.cluster) or None,
            }
        )
    key = {"pending": "unprocessed", "ack-pending": "ack_pending", "redelivered": "redelivered"}.get(sort)
    rows.sort(key=(lambda r: r["consumer"]) if key is None else (lambda r: (-r[key], r["consumer"])))
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo(f"No consumers defined on {stream_name}")
        return
    clustered = any(r["cluster"] for r in rows)
    body = [
        (
            r["consumer"],
            r["mode"].title() + ("" if r["durable"] else " (ephemeral)"),
            r["ack_policy"].title(),
            format_duration(r["ack_wait"]) if r["ack_wait"] is not None else "-",
            fmt_count(r["ack_pending"]),
            fmt_count(r["redelivered"]),
            fmt_count(r["unprocessed"]),
            fmt_count(r["ack_floor"]),
        )
        + ((r["cluster"] or "",) if clustered else ())
        for r in rows
    ]
    headers = [
        "Consumer",
        "Mode",
        "Ack Policy",
        "Ack Wait",
        "Ack Pending",
        "Redelivered",
        "Unprocessed",
        "Ack Floor",
    ] + (["Cluster"] if clustered else [])
    title = f"Consumer report for {stream_name} with {plural(len(rows), 'consumer')}"
    click.echo(table(headers, body, right=(3, 4, 5, 6, 7), title=title))


consumer.add_command(pause)
consumer.add_command(resume)
