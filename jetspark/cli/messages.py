"""Messages in and out: ``jetspark pub``, ``jetspark sub`` (read a stream) and ``jetspark fetch`` (read a consumer).

``consumer next`` shares the delivery loop here with ``fetch``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import sys
import time
from typing import Iterator, Optional

import click

from jetspark.api import PubAck
from jetspark.cli.output import (
    body_fields,
    emit_json_line,
    fmt_count,
    output_options,
    plural,
    progress,
    progress_options,
    rfc3339,
)
from jetspark.cli.parse import DURATION, format_size, parse_header
from jetspark.cli.state import needs_store
from jetspark.cli.templates import Template, TemplateError
from jetspark.errors import PUSH_BASED, APIError, FetchTimeoutError, JetSparkError, StreamNotFoundError

__all__ = ["deliver", "fetch", "print_body", "pub", "sub", "write_bytes"]


# ---------------------------------------------------------------------- printing


def print_body(data: Optional[bytes], headers: Optional[dict]) -> None:
    """Headers (if any), then the body, as ``nats`` prints a message."""
    if headers:
        click.echo("\nHeaders:\n")
        width = max(len(k) for k in headers)
        for k, v in headers.items():
            click.echo(f"  {k.rjust(width)}: {v}")
    click.echo()
    data = data or b""
    click.echo(data.decode("utf-8", "replace") if data else "(empty body)")
    click.echo()


def write_bytes(data: bytes) -> None:
    """Bytes to stdout as they are (message bodies need not be text)."""
    out = sys.stdout
    out.flush()
    out.buffer.write(data)
    out.buffer.flush()


def _write_raw(data: Optional[bytes]) -> None:
    write_bytes((data or b"") + b"\n")


def _stamp(when: Optional[_dt.datetime]) -> str:
    if when is None:
        return "-"
    return when.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


# ---------------------------------------------------------------------- pub


@click.command()
@click.argument("subject")
@click.argument("body", required=False)
@click.option(
    "--count",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Publish this many messages; {{Count}} in the body, subject, headers and --id numbers them.",
)
@click.option("--header", "-H", "headers", multiple=True, metavar="KEY:VALUE", help="Add a header (repeat for more).")
@click.option(
    "--id",
    "msg_id",
    metavar="ID",
    help="Set Nats-Msg-Id for de-duplication (templates allowed, e.g. 'order-{{Count}}').",
)
@click.option("--force-stdin", is_flag=True, help="Read the body from standard input.")
@click.option(
    "--send-on",
    type=click.Choice(["eof", "newline"]),
    default="eof",
    show_default=True,
    help="With --force-stdin: one message of all the input (eof), or one per line (newline).",
)
@click.option("--templates/--no-templates", default=True, show_default=True, help="Expand {{...}} template functions.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on success.")
@output_options
@progress_options
@needs_store()
def pub(
    js,
    subject: str,
    body: Optional[str],
    count: int,
    headers,
    msg_id: Optional[str],
    force_stdin: bool,
    send_on: str,
    templates: bool,
    quiet: bool,
    as_json: bool,
    show_progress: Optional[bool],
):
    """Publish messages to the stream that captures SUBJECT.

    BODY, the subject, header values and --id may use template functions,
    as in `nats pub`: {{Count}} (the message number), {{ID}} (a unique id),
    {{Time}}, {{TimeStamp}} (RFC 3339), {{Unix}}, {{UnixNano}} and
    {{Random MIN MAX}} (a random string of MIN to MAX characters).

    With --json, prints one PubAck per line.

    \b
    Example:
      jetspark pub orders.new '{"id": {{Count}}}' --count 1000 --id 'order-{{Count}}'
      jetspark pub orders.new -H Source:cli '{"id": 1}'
      cat orders.jsonl | jetspark pub orders.new --force-stdin --send-on newline
    """
    if body is not None and force_stdin:
        raise click.UsageError("give BODY or --force-stdin, not both")
    try:
        subject_t = Template(subject) if templates else None
        header_ts = [(k, Template(v) if templates else None, v) for k, v in (_header(h) for h in headers)]
        id_t = Template(msg_id) if templates and msg_id is not None else None
    except TemplateError as exc:
        raise click.UsageError(str(exc)) from None

    def bodies() -> Iterator[bytes]:
        if not force_stdin:
            yield (body or "").encode()
            return
        stdin = sys.stdin.buffer
        if send_on == "eof":
            yield stdin.read()
            return
        for line in stdin:
            yield line.rstrip(b"\r\n")

    total = count if send_on == "eof" or not force_stdin else None
    stats = _PubStats()
    started = time.perf_counter()
    n = 0
    with progress(total, f"pub {subject}", show=show_progress) as bar:
        pending = 0
        for raw_body in bodies():
            try:
                body_t = Template(raw_body) if templates else None
            except TemplateError as exc:
                raise click.UsageError(str(exc)) from None
            for _ in range(count):
                n += 1
                subj = subject_t.render(n) if subject_t is not None else subject
                data = body_t.render_bytes(n) if body_t is not None else raw_body
                hdrs = {k: (t.render(n) if t is not None else v) for k, t, v in header_ts}
                if msg_id is not None:
                    hdrs["Nats-Msg-Id"] = id_t.render(n) if id_t is not None else msg_id
                try:
                    ack = js.publish(subj, data, headers=hdrs or None)
                except (JetSparkError, KeyboardInterrupt) as exc:
                    if stats.count:
                        why = "the interrupt" if isinstance(exc, KeyboardInterrupt) else "the error"
                        bar.write(f"published {plural(stats.count, 'message')} before {why}")
                    raise
                stats.add(ack, len(data))
                if as_json:
                    # The PubAck as the API gives it: duplicate is None (not False) when the
                    # server left it out, as nats-py has it.
                    emit_json_line({f.name: getattr(ack, f.name) for f in dataclasses.fields(ack)})
                pending += 1
                if pending >= 256:
                    bar.update(pending)
                    pending = 0
        bar.update(pending)
    if as_json or quiet:
        return
    elapsed = time.perf_counter() - started
    if stats.count == 1:
        ack = stats.last
        assert ack is not None
        dup = " (duplicate: already stored, not stored again)" if ack.duplicate else ""
        click.echo(f"Published {plural(stats.nbytes, 'byte')} to {subj}: stream {ack.stream} seq {ack.seq}{dup}")
        return
    rate = f" ({fmt_count(int(stats.count / elapsed))} msg/s)" if elapsed > 0 else ""
    click.echo(f"Published {plural(stats.count, 'message')} ({format_size(stats.nbytes)}) in {elapsed:.2f}s{rate}")
    for name, (k, lo, hi) in sorted(stats.streams.items()):
        click.echo(f"  stream {name}: {plural(k, 'ack')}, seq {fmt_count(lo)}..{fmt_count(hi)}")
    if stats.duplicates:
        were = "was" if stats.duplicates == 1 else "were"
        click.echo(
            f"  {plural(stats.duplicates, 'duplicate')} (same Nats-Msg-Id within the duplicate window) {were} not stored again"
        )


def _header(text: str) -> tuple[str, str]:
    try:
        return parse_header(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--header") from None


class _PubStats:
    def __init__(self) -> None:
        self.count = 0
        self.nbytes = 0
        self.duplicates = 0
        self.streams: dict[str, list[int]] = {}
        self.last: Optional[PubAck] = None

    def add(self, ack, size: int) -> None:
        self.count += 1
        self.nbytes += size
        self.last = ack
        if ack.duplicate:
            self.duplicates += 1
        s = self.streams.get(ack.stream)
        if s is None:
            self.streams[ack.stream] = [1, ack.seq, ack.seq]
        else:
            s[0] += 1
            s[1] = min(s[1], ack.seq)
            s[2] = max(s[2], ack.seq)


# ---------------------------------------------------------------------- sub


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


def show_message(m: dict, *, raw: bool, as_json: bool) -> None:
    """One message as ``sub`` and ``stream view`` print it: a JSON line, the raw body, or a
    header line and the body."""
    if as_json:
        emit_json_line(
            {
                "stream": m["stream"],
                "seq": m["seq"],
                "subject": m["subject"],
                "time": rfc3339(m["time"]) if m["time"] else None,
                "headers": m["headers"] or {},
                **body_fields(m["data"]),
            }
        )
    elif raw:
        _write_raw(m["data"])
    else:
        click.echo(f"[{m['stream']} #{m['seq']}] {m['subject']} @ {_stamp(m['time'])}", nl=False)
        print_body(m["data"], m["headers"])


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
                f"(more messages after sequence {page[want - 1]['seq']}: add --count N to print more, or --id to start later)",
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


# ---------------------------------------------------------------------- consumers: fetch / consumer next


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
    """Fetch up to ``count`` messages from a pull consumer, print them, then ack/nak/term each; returns how many came."""
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
        _write_raw(msg.data)
        return
    click.echo(
        f"[{md.stream} > {md.consumer}] {msg.subject} @ {_stamp(md.timestamp)}  stream seq {md.sequence.stream}, "
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
