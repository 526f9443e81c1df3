"""``jetspark consumer pause|resume``: hold a consumer's deliveries until a time, or end that now
(``nats consumer pause`` / ``resume``), and ``--pause``'s reading of a time or duration."""

from __future__ import annotations

import datetime as _dt

import click

from jetspark.api import ConsumerPause, parse_rfc3339
from jetspark.cli.output import emit_json, fmt_date, output_options
from jetspark.cli.parse import format_duration, parse_duration
from jetspark.cli.state import needs_store

__all__ = ["pause", "pause_until", "resume"]


def pause_until(text: str, param_hint: str = "--pause") -> _dt.datetime:
    """An RFC 3339 time, or a duration from now (as ``nats consumer add --pause``)."""
    try:
        return _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=parse_duration(text))
    except ValueError:
        pass
    try:
        return parse_rfc3339(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither a duration (1h) nor an RFC 3339 time", param_hint=param_hint
        ) from None


def _said(p: ConsumerPause) -> str:
    if p.paused and p.pause_until is not None and p.pause_remaining is not None:
        return f"until {fmt_date(p.pause_until)} UTC ({format_duration(round(p.pause_remaining / 1e9))} remaining)"
    return "not paused" if p.pause_until is None else f"not paused ({fmt_date(p.pause_until)} UTC has passed)"


@click.command("pause")
@click.argument("stream_name", metavar="STREAM")
@click.argument("name", metavar="CONSUMER")
@click.argument("until", metavar="UNTIL")
@click.option("--force", "-f", is_flag=True, help="Do not ask for confirmation.")
@output_options
@needs_store()
def pause(js, stream_name: str, name: str, until: str, force: bool, as_json: bool):
    """Pause a consumer until UNTIL: an RFC 3339 time or a duration from now (1h, 30m).

    It delivers nothing until then (pulls wait or time out) and takes acks meanwhile;
    `consumer resume` ends the pause early.

    \b
    Example:
      jetspark consumer pause ORDERS NEW 1h -f
      jetspark consumer pause ORDERS NEW 2030-01-02T03:04:05Z -f
    """
    when = pause_until(until, "UNTIL")
    js.consumer_info(stream_name, name)  # not found -> the API error, before asking
    if not force:
        click.confirm(f"Pause consumer {stream_name} > {name} until {fmt_date(when)} UTC?", abort=True)
    answer = js.pause_consumer(stream_name, name, when)
    if as_json:
        emit_json(answer)
    else:
        click.echo(f"Consumer {stream_name} > {name}: {'paused ' if answer.paused else ''}{_said(answer)}")


@click.command("resume")
@click.argument("stream_name", metavar="STREAM")
@click.argument("name", metavar="CONSUMER")
@click.option("--force", "-f", is_flag=True, help="Do not ask for confirmation.")
@output_options
@needs_store()
def resume(js, stream_name: str, name: str, force: bool, as_json: bool):
    """Resume a paused consumer now: it delivers again at once.

    \b
    Example:
      jetspark consumer resume ORDERS NEW -f
    """
    js.consumer_info(stream_name, name)  # not found -> the API error, before asking
    if not force:
        click.confirm(f"Resume consumer {stream_name} > {name}?", abort=True)
    answer = js.resume_consumer(stream_name, name)
    if as_json:
        emit_json(answer)
    else:
        click.echo(f"Consumer {stream_name} > {name} resumed")
