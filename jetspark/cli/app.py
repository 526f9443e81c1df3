"""The ``jetspark`` click group: global options and the command tree."""

from __future__ import annotations

import logging
import sys
from typing import Optional, Sequence

import click

import jetspark
from jetspark.cli import tools
from jetspark.cli.consumers import consumer
from jetspark.cli.contexts import choose, context
from jetspark.cli.fetch import fetch
from jetspark.cli.publish import pub
from jetspark.cli.shell import completion, man
from jetspark.cli.state import DEFAULT_STORE, Group, State
from jetspark.cli.stream_reading import sub, view
from jetspark.cli.streams import stream
from jetspark.cli.tools import bench, demo
from jetspark.connect_options import split_servers
from jetspark.connection import check_store_path
from jetspark.errors import LocationError

__all__ = ["cli", "main"]

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Root(Group):
    """The top group: ``bench`` is offered only where its script is (a source checkout; an
    installed wheel has no benchmarks/)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [n for n in super().list_commands(ctx) if n != "bench" or tools.BENCH_SCRIPT.is_file()]


@click.group(cls=Root, context_settings=CONTEXT_SETTINGS)
@click.option(
    "--store",
    envvar="JETSPARK_STORE",
    default=DEFAULT_STORE,
    show_default=True,
    show_envvar=True,
    metavar="PATH",
    help="Directory of the embedded store.",
    callback=lambda ctx, param, value: _location(ctx, param, value, store=True),
)
@click.option(
    "-s",
    "--server",
    metavar="URL",
    callback=lambda ctx, param, value: _location(ctx, param, value, store=False),
    help="A NATS server (nats://host:port[,nats://host2:port]) instead of the embedded store.",
)
@click.option(
    "--context",
    "context_name",
    envvar="JETSPARK_CONTEXT",
    show_envvar=True,
    metavar="NAME",
    help="A saved context's store or server and credentials (jetspark context ls); default: the selected one.",
)
@click.option("--debug", is_flag=True, help="Show the full traceback of an error.")
@click.option("--trace", is_flag=True, help="Print each API call the command makes and its answer (to stderr).")
@click.option("-v", "--verbose", count=True, help="Log what jetspark does to stderr: -v at INFO, -vv at DEBUG.")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    help="The jetspark loggers' level (overrides -v; default: warnings and errors only).",
)
@click.version_option(jetspark.__version__, "--version", prog_name="jetspark")
@click.pass_context
def cli(
    ctx: click.Context,
    store: str,
    server: Optional[str],
    context_name: Optional[str],
    debug: bool,
    trace: bool,
    verbose: int,
    log_level: Optional[str],
):
    """jetspark: streams with NATS JetStream semantics in a directory, from the command line.

    Commands and flags follow the `nats` CLI.  Durations read like 500ms,
    1h30m or 7d; sizes like 10MB or 1GiB (1024-based).  Read commands take
    --json for machine-readable output.  The store is --store (or --server),
    else --context, else $JETSPARK_STORE (or $JETSPARK_CONTEXT), else the
    selected context (jetspark context select), else ./jetspark-data.

    \b
    Example:
      jetspark stream add ORDERS --subjects 'orders.>'
      jetspark pub orders.new '{"id": {{Count}}}' --count 10
      jetspark sub 'orders.>' --no-follow
    """
    level = log_level.upper() if log_level else ("DEBUG" if verbose >= 2 else "INFO" if verbose else None)
    configure_logging(level)
    name, use_selected = choose(ctx, server, context_name)
    ctx.obj = State(store=store, server=server, debug=debug, trace=trace, context=name, use_selected=use_selected)


def _location(ctx: click.Context, param: click.Parameter, value: Optional[str], *, store: bool) -> Optional[str]:
    """--store (or $JETSPARK_STORE) that looks like a URL, or a --server URL that is not one, is
    a usage error before anything is opened or created (jetspark.connection)."""
    if value is None:
        return value
    try:
        if store:
            check_store_path(value, argument="", how="-s/--server {url}")
        else:
            split_servers(value)
    except LocationError as err:
        raise click.BadParameter(str(err), ctx=ctx, param=param) from None
    return value


def configure_logging(level: Optional[str]) -> None:
    """Send the ``jetspark`` loggers (``jetspark`` the engine, ``jetspark.remote`` the nats://
    backend, ``jetspark.connector`` Spark's side) to stderr at ``level``; None leaves them
    to Python's default (warnings and errors).  One handler, replaced by each invocation."""
    root = logging.getLogger("jetspark")
    for h in [h for h in root.handlers if getattr(h, "jetspark_cli", False)]:
        root.removeHandler(h)
    if level is None:
        root.setLevel(logging.NOTSET)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.jetspark_cli = True  # type: ignore[attr-defined]  # marks the handler this function owns
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)


for command in (stream, consumer, pub, sub, fetch, context, demo, bench, completion, man):
    cli.add_command(command)
stream.add_command(view)  # (it prints messages as sub does: its code is with sub's)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """The console script's entry point."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="jetspark")
