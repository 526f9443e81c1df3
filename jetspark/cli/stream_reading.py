"""Reading a stream without a consumer: ``jetspark sub`` and ``jetspark stream view``.

Nothing they do is recorded in the store (no consumer, no acks); fetch.py reads through a consumer.
"""

from __future__ import annotations

import datetime as _dt
import sys
import time
from typing import Optional

import click

from jetspark.cli.message_print import show_message
from jetspark.cli.output import output_options
from jetspark.cli.parse import DURATION
from jetspark.cli.state import needs_store
from jetspark.errors import JetSparkError, StreamNotFoundError

__all__ = ["sub", "view"]


@click.command()
@click.argument("subject", required=False)
@click.option(
    "--stream", "stream_name", metavar="STREAM", help="Read this stream (default: the stream that captures SUBJECT)."
)
@click.option(
    "--all", "start", flag_value="all", default=True, help="Start with the first stored message (the default)."
)
@click.option("--new", "start", flag_value="new", help="Only messages published from now on.")
@click.option("--last", "start", flag_value="last", help="Start with the last stored message.")
@click.option(
    "--last-per-subject", "start", flag_value="last_per_subject", help="Start with the last message of every subject."
)
@click.option("--start-sequence", type=click.IntRange(min=1), help="Start at this stream sequence.")
@click.option("--since", type=DURATION, help="Start with messages stored this long ago, e.g. 1h.")
@click.option("--count", type=click.IntRange(min=1), help="Stop after this many messages.")
@click.option(
    "--follow/--no-follow",
    default=True,
    show_default=True,
    help="Keep waiting for new messages (stop with Ctrl-C), or stop at the end of the stream.",
)
@click.option("--raw", is_flag=True, help="Print only message bodies, one per line.")
@output_options
@needs_store()
def sub(
    js,
    subject: Optional[str],
    stream_name: Optional[str],
    start: str,
    start_sequence: Optional[int],
    since: Optional[float],
    count: Optional[int],
    follow: bool,
    raw: bool,
    as_json: bool,
):
    """Read a stream's messages in order.

    All of them, or only those on SUBJECT (wildcards allowed).

    Nothing is recorded in the store (no consumer is created, nothing is
    acknowledged); use `consumer next` or `fetch` for that.  With --json,
    prints one message per line.

    \b
    Example:
      jetspark sub 'orders.>' --no-follow
      jetspark sub orders.new --last --count 1 --raw
      jetspark sub --stream ORDERS --since 10m --json
    """
    if subject is None and stream_name is None:
        raise click.UsageError("give a SUBJECT, --stream STREAM, or both")
    if (start_sequence is not None or since is not None) and start != "all":
        raise click.UsageError(
            "--start-sequence and --since cannot be combined with --new, --last or --last-per-subject"
        )
    if start_sequence is not None and since is not None:
        raise click.UsageError("--start-sequence and --since cannot be combined")
    if stream_name is None:
        try:
            stream_name = js.find_stream_name_by_subject(subject)
        except StreamNotFoundError:
            raise click.ClickException(f"no stream captures {subject!r}; name the stream with --stream") from None
    filters = [subject] if subject else None

    info = js.stream_info(stream_name)
    seen = 0
    first: list[dict] = []
    if start_sequence is not None:
        next_seq = start_sequence
    elif since is not None:
        next_seq = js.seq_for_time(stream_name, _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=since))
    elif start == "new":
        next_seq = info.state.last_seq + 1
    elif start == "last":
        last = info.state.last_seq if subject is None else _last_seq(js, stream_name, subject)
        next_seq = last if last else info.state.last_seq + 1
    elif start == "last_per_subject":
        per = js.stream_info(stream_name, subjects_filter=subject or ">").state.subjects or {}
        msgs = sorted((js.get_last_msg(stream_name, s) for s in per), key=lambda m: m.seq)
        first = [_from_raw(m) for m in msgs]
        next_seq = info.state.last_seq + 1
    else:
        next_seq = 1

    def show(m: dict) -> None:
        show_message(m, raw=raw, as_json=as_json)

    try:
        for m in first:
            show(m)
            seen += 1
            if count is not None and seen >= count:
                return
        pause = 0.01
        while True:
            got = False
            # Read before the range: a message stored after this read is past ``last`` and is
            # read next time (taken after the read, it could skip one published meanwhile).
            last = js.stream_info(stream_name).state.last_seq
            for batch in js.read_batches(
                stream_name, next_seq, None, subjects=filters, batch_size=min(count or 4096, 4096), headers=True
            ):
                got = True
                for row in batch.to_pylist():
                    show(_from_row(row))
                    seen += 1
                    next_seq = row["seq"] + 1
                    if count is not None and seen >= count:
                        return
            if not got:
                # A filtered read may skip ahead without returning a row: resume after what
                # was stored when it began.
                next_seq = max(next_seq, last + 1)
                if not follow:
                    return
                # Only a consumer can wait for a publish (fetch, messages()), and sub reads without
                # one (a consumer would change an interest or work-queue stream): a follower polls,
                # backing off to 0.25 s.
                time.sleep(pause)
                pause = min(pause * 2, 0.25)
            else:
                pause = 0.01
    except KeyboardInterrupt:
        return


@click.command("view")
@click.argument("name")
@click.argument("size", type=click.IntRange(min=1), default=10, required=False)
@click.option(
    "--count",
    type=click.IntRange(min=1),
    help="Stop after this many messages (in a pipe: print this many, across pages).",
)
@click.option("--id", "start_seq", type=click.IntRange(min=1), help="Start at this stream sequence.")
@click.option("--since", type=DURATION, help="Start with messages stored this long ago, e.g. 1h.")
@click.option("--subject", help="Only messages on this subject (wildcards allowed).")
@click.option("--raw", is_flag=True, help="Print only message bodies, one per line.")
@output_options
@needs_store()
def view(
    js,
    name: str,
    size: int,
    count: Optional[int],
    start_seq: Optional[int],
    since: Optional[float],
    subject: Optional[str],
    raw: bool,
    as_json: bool,
):
    """View a stream's messages, a page of SIZE (default 10) at a time.

    On a terminal it asks "Next page?" after each page, up to --count
    messages if given.  Anywhere else (a pipe, a file, --json) there is no
    one to ask: it prints one page, or --count messages when given, and
    says on stderr when more are left (`nats stream view` refuses to run
    outside a terminal; `jetspark sub --no-follow` reads a whole stream).
    Nothing is recorded in the store.

    \b
    Example:
      jetspark stream view ORDERS
      jetspark stream view ORDERS 50 --since 1h --subject 'orders.new'
      jetspark stream view ORDERS --id 1000 --count 3 --raw
    """
    if start_seq is not None and since is not None:
        raise click.UsageError("--id and --since cannot be combined")
    info = js.stream_info(name)
    if start_seq is not None:
        next_seq = start_seq
    elif since is not None:
        next_seq = js.seq_for_time(name, _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=since))
    else:
        next_seq = info.state.first_seq or 1
    ask = sys.stdin.isatty() and sys.stdout.isatty() and not as_json
    # Without a terminal, one "page" is everything to print: --count messages, or SIZE.
    page_size = size if ask or count is None else count
    filters = [subject] if subject else None
    shown = 0
    while True:
        want = page_size if count is None else min(page_size, count - shown)
        page = _read_page(js, name, next_seq, filters, want + 1)  # one more: are there more?
        more = len(page) > want
        for row in page[:want]:
            show_message(_from_row(row), raw=raw, as_json=as_json)
        shown += min(len(page), want)
        if not shown and not as_json:
            click.echo(f"No messages in {name}" + (f" on {subject}" if subject else ""), err=True)
        if not more or (count is not None and shown >= count):
            return
        if not ask:
            click.echo(
                f"(more messages after sequence {page[want - 1]['seq']}: add --count N to print more,"
                " or --id to start later)",
                err=True,
            )
            return
        next_seq = page[want - 1]["seq"] + 1
        if not click.confirm("Next page?", default=True):
            return


def _read_page(js, name: str, start: int, filters, n: int) -> list[dict]:
    page: list[dict] = []
    for batch in js.read_batches(name, start, None, subjects=filters, batch_size=n, headers=True):
        page.extend(batch.to_pylist())
        if len(page) >= n:
            break
    return page[:n]


def _last_seq(js, stream_name: str, subject: str) -> int:
    try:
        return js.get_last_msg(stream_name, subject).seq or 0
    except JetSparkError:
        return 0


def _from_raw(m) -> dict:
    return {
        "stream": m.stream,
        "seq": m.seq,
        "subject": m.subject,
        "time": m.time,
        "headers": m.headers,
        "data": m.data,
    }


def _from_row(row: dict) -> dict:
    hdrs = row.get("headers")
    return {
        "stream": row["stream"],
        "seq": row["seq"],
        "subject": row["subject"],
        "time": row["timestamp"],
        "headers": {k: v[-1] for k, v in hdrs} if hdrs else None,
        "data": row["data"],
    }
