"""How the CLI prints a message: its headers and body as ``nats`` does, its raw bytes, a JSON line.

Shared by ``jetspark sub`` and ``stream view`` (stream_reading.py), ``fetch`` and ``consumer next``
(fetch.py) and ``stream get`` (streams.py).
"""

from __future__ import annotations

import datetime as _dt
import sys
from typing import Optional

import click

from jetspark.cli.output import body_fields, emit_json_line, rfc3339

__all__ = ["print_body", "show_message", "stamp", "write_bytes", "write_raw"]


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


def write_raw(data: Optional[bytes]) -> None:
    write_bytes((data or b"") + b"\n")


def stamp(when: Optional[_dt.datetime]) -> str:
    if when is None:
        return "-"
    return when.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


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
        write_raw(m["data"])
    else:
        click.echo(f"[{m['stream']} #{m['seq']}] {m['subject']} @ {stamp(m['time'])}", nl=False)
        print_body(m["data"], m["headers"])
