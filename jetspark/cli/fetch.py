"""Messages out through a consumer: ``jetspark fetch``, and the delivery loop ``consumer next`` shares
(deliver, ack_options)."""

from __future__ import annotations

from typing import Optional

import click

from jetspark.cli.message_print import print_body, stamp, write_raw
from jetspark.cli.output import body_fields, emit_json_line, fmt_count, output_options, plural, rfc3339
from jetspark.cli.parse import DURATION
from jetspark.cli.state import needs_store
from jetspark.errors import PUSH_BASED, APIError, FetchTimeoutError

__all__ = ["ack_options", "deliver", "fetch"]


def ack_options(fn):
    """--ack/--no-ack, --nak, --term: what to do with each delivered message."""
    for opt in reversed(
        [
            click.option(
                "--ack/--no-ack",
                default=True,
                show_default=True,
                help="Acknowledge each message (with --no-ack it is redelivered after the consumer's ack wait).",
            ),
            click.option("--nak", is_flag=True, help="Negatively acknowledge each message: redeliver it now."),
            click.option("--term", is_flag=True, help="Terminate each message: never redeliver it."),
        ]
    ):
        fn = opt(fn)
    return fn


def deliver(
    js,
    stream_name: str,
    consumer: str,
    *,
    count: int,
    per_fetch: int,
    wait: float,
    ack: bool,
    nak: bool,
    term: bool,
    raw: bool,
    as_json: bool,
) -> int:
    """Fetch up to ``count`` messages from a pull consumer, print them, then ack/nak/term each;
    returns how many came."""
    if nak and term:
        raise click.UsageError("--nak and --term cannot be combined")
    action = "term" if term else "nak" if nak else "ack" if ack else None
    sub_ = js.pull_subscribe_bind(durable=consumer, stream=stream_name)
    got = 0
    try:
        while got < count:
            try:
                msgs = sub_.fetch(batch=min(per_fetch, count - got), timeout=wait)
            except APIError as exc:
                if exc.description != PUSH_BASED:
                    raise
                target = js.consumer_info(stream_name, consumer).config.deliver_subject
                raise click.ClickException(
                    f"consumer {consumer!r} on stream {stream_name!r} is a push consumer (it delivers to {target}): "
                    "consumer next and fetch read pull consumers; a push subscription (js.subscribe) reads this one"
                ) from exc
            except FetchTimeoutError:
                if got == 0:
                    raise
                click.echo(f"{fmt_count(got)} of {plural(count, 'message')}: no more within {wait:g}s", err=True)
                break
            for msg in msgs:
                _show_delivered(msg, action, raw, as_json)
                if action == "ack":
                    msg.ack()
                elif action == "nak":
                    msg.nak()
                elif action == "term":
                    msg.term()
            got += len(msgs)
            if per_fetch >= count:
                break
    finally:
        sub_.unsubscribe()  # applies the buffered acks now
    return got


_DONE = {
    "ack": "Acknowledged message",
    "nak": "Negatively acknowledged message (redelivered next)",
    "term": "Terminated message (never redelivered)",
    None: "Not acknowledged",
}


def _show_delivered(msg, action: Optional[str], raw: bool, as_json: bool) -> None:
    md = msg.metadata
    if as_json:
        emit_json_line(
            {
                "stream": md.stream,
                "consumer": md.consumer,
                "seq": md.sequence.stream,
                "consumer_seq": md.sequence.consumer,
                "subject": msg.subject,
                "time": rfc3339(md.timestamp),
                "delivered": md.num_delivered,
                "pending": md.num_pending,
                "headers": msg.headers or {},
                **body_fields(msg.data),
                "action": action or "none",
            }
        )
        return
    if raw:
        write_raw(msg.data)
        return
    click.echo(
        f"[{md.stream} > {md.consumer}] {msg.subject} @ {stamp(md.timestamp)}  stream seq {md.sequence.stream}, "
        f"consumer seq {md.sequence.consumer}, delivered {md.num_delivered}x, {fmt_count(md.num_pending)} pending",
        nl=False,
    )
    print_body(msg.data, msg.headers)
    click.echo(_DONE[action])
    click.echo()


@click.command()
@click.argument("stream_name", metavar="STREAM")
@click.argument("consumer")
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Fetch up to this many messages in one pull.",
)
@click.option(
    "--timeout", "wait", type=DURATION, default="5s", show_default=True, help="How long to wait for the first message."
)
@ack_options
@click.option("--raw", is_flag=True, help="Print only message bodies, one per line.")
@output_options
@needs_store()
def fetch(
    js,
    stream_name: str,
    consumer: str,
    batch: int,
    wait: float,
    ack: bool,
    nak: bool,
    term: bool,
    raw: bool,
    as_json: bool,
):
    """Pull a batch of messages from a consumer.

    As nats-py's fetch(batch, timeout), then acknowledges each message.

    Returns what is available up to --batch; fails if nothing arrives
    within --timeout.  With --json, prints one message per line.

    \b
    Example:
      jetspark fetch ORDERS NEW --batch 100 --timeout 1s
      jetspark fetch ORDERS NEW --no-ack --json
    """
    deliver(
        js,
        stream_name,
        consumer,
        count=batch,
        per_fetch=batch,
        wait=wait,
        ack=ack,
        nak=nak,
        term=term,
        raw=raw,
        as_json=as_json,
    )
