"""Messages in: ``jetspark pub`` (one message, a templated series, or lines from stdin)."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Iterator, Optional

import click

from jetspark.api import PubAck
from jetspark.cli.output import emit_json_line, fmt_count, output_options, plural, progress, progress_options
from jetspark.cli.parse import format_size, parse_header
from jetspark.cli.state import needs_store
from jetspark.cli.templates import Template, TemplateError
from jetspark.errors import JetSparkError

__all__ = ["pub"]


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
            f"  {plural(stats.duplicates, 'duplicate')} (same Nats-Msg-Id within the duplicate window)"
            f" {were} not stored again"
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
