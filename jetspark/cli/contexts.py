"""``jetspark context add|info|ls|select|unselect|rm``: saved contexts, as ``nats context``.

A context names a store directory or a NATS server with its credentials, so
that ``jetspark --context prod stream ls`` (or, once selected, plain
``jetspark stream ls``) connects there.  The files are ``context_store``'s;
which context applies is ``choose``'s:

1. ``--store``/``--server`` on the command line (a context is not used);
2. ``--context NAME`` on the command line;
3. ``$JETSPARK_STORE`` (a context is not used), or else ``$JETSPARK_CONTEXT``;
4. the selected context (``jetspark context select``);
5. ``./jetspark-data``.

The command line beats the environment, which beats the saved selection.
``--context`` with ``--store``/``--server``, or both variables set, is a usage
error rather than a silent choice.
"""

from __future__ import annotations

import os
from typing import Optional

import click
from click.core import ParameterSource

from jetspark.cli import context_store as files
from jetspark.cli.output import emit_json, kv_block, output_options, table
from jetspark.cli.state import Commands

__all__ = ["choose", "context"]

LABELS = {
    "user": "User",
    "password": "Password",
    "token": "Token",
    "user_credentials": "Credentials",
    "nkeys_seed": "NKey",
    "tls_ca": "TLS CA",
    "tls_cert": "TLS Cert",
    "tls_key": "TLS Key",
    "domain": "JetStream Domain",
}


def choose(ctx: click.Context, server: Optional[str], name: Optional[str]) -> tuple[Optional[str], bool]:
    """Which context the root command's options ask for: ``(name, use_selected)``; ``(None,
    False)`` when ``--store``/``--server``/``$JETSPARK_STORE`` say where instead."""
    source = ctx.get_parameter_source
    where_by_flag = source("store") is ParameterSource.COMMANDLINE or server is not None
    context_by_flag = source("context_name") is ParameterSource.COMMANDLINE
    if name is not None:
        files.check_name(name, "--context" if context_by_flag else "JETSPARK_CONTEXT")
    if where_by_flag and context_by_flag:
        raise click.UsageError("--context and --store/--server both say where to connect: give one")
    if where_by_flag:
        return None, False
    if context_by_flag:
        return name, False
    if source("store") is ParameterSource.ENVIRONMENT:
        if name is not None:
            raise click.UsageError(
                "JETSPARK_STORE and JETSPARK_CONTEXT are both set and both say where to connect: unset one"
            )
        return None, False
    return name, name is None


class ContextCommands(Commands):
    ALIASES = {"list": "ls", "show": "info"}


@click.group(cls=ContextCommands, short_help="Save where to connect (a store or a server) under a name.")
def context():
    """Save where to connect, a store or a NATS server with its credentials, under a name.

    add, info, ls, select, unselect, rm.  As with `nats context`: `--context
    NAME` (or $JETSPARK_CONTEXT) uses one for a command, `context select`
    makes one the default.  --store, --server and $JETSPARK_STORE still win.
    Contexts are files in the user's config directory ($JETSPARK_CONFIG_DIR
    replaces it); passwords and tokens are never printed.

    \b
    Example:
      jetspark context add local --store ~/jetspark-data --select
      jetspark context add prod --server nats://n1:4222 --creds ~/prod.creds
      jetspark --context prod stream ls
    """


def _secret(value: Optional[str], what: str) -> Optional[str]:
    """``-`` asks for the value without echoing it (so it stays out of the shell history)."""
    if value == "-":
        return click.prompt(what, hide_input=True)
    return value


def _info_text(saved: files.SavedContext, is_selected: bool, path) -> str:
    shown = saved.shown()
    pairs = [("Description", saved.description or None)]
    if saved.store is not None:
        pairs.append(("Store", shown["store"]))
    else:
        pairs.append(("Server", shown["server"]))
        pairs += [(LABELS[k], shown[k]) for k in files.OPTION_KEYS if k in shown]
    pairs.append(("File", str(path)))
    return f"Context {saved.name}{' (selected)' if is_selected else ''}\n\n{kv_block(pairs)}"


def _info_json(saved: files.SavedContext, is_selected: bool, path) -> dict:
    return {**saved.shown(), "selected": is_selected, "file": str(path)}


_FILE = click.Path(exists=True, dir_okay=False, resolve_path=True)


@context.command("add")
@click.argument("name")
@click.option("--store", metavar="PATH", help="A directory of the embedded store (made absolute).")
@click.option("-s", "--server", metavar="URL", help="A NATS server (nats://host:port[,nats://host2:port]).")
@click.option("--user", metavar="USER", help="User name for the server.")
@click.option("--password", metavar="PASSWORD", help="Password for --user; '-' asks for it without echoing it.")
@click.option("--token", metavar="TOKEN", help="Authentication token; '-' asks for it without echoing it.")
@click.option(
    "--creds",
    "user_credentials",
    type=_FILE,
    metavar="FILE",
    help="A .creds file (JWT and nkey seed), referenced by its path.",
)
@click.option(
    "--nkey", "nkeys_seed", type=_FILE, metavar="FILE", help="A file holding an nkey seed, referenced by its path."
)
@click.option("--tlsca", "tls_ca", type=_FILE, metavar="FILE", help="CA certificate (PEM) to verify the server with.")
@click.option("--tlscert", "tls_cert", type=_FILE, metavar="FILE", help="Client certificate (PEM); goes with --tlskey.")
@click.option("--tlskey", "tls_key", type=_FILE, metavar="FILE", help="Client certificate's private key (PEM).")
@click.option("--js-domain", "domain", metavar="DOMAIN", help="JetStream domain.")
@click.option("--description", default="", metavar="TEXT", help="What the context is for.")
@click.option("--select", "make_selected", is_flag=True, help="Also make it the selected context.")
@click.option("--force", "-f", is_flag=True, help="Replace a context of that name.")
@output_options
def add(
    name: str,
    store: Optional[str],
    server: Optional[str],
    description: str,
    make_selected: bool,
    force: bool,
    as_json: bool,
    **options,
):
    """Save a context: a store directory, or a server with its credentials.

    Credentials files (--creds, --nkey, TLS) are kept as paths; a password or
    token is kept in the context's file, readable by you only.

    \b
    Example:
      jetspark context add local --store ./jetspark-data --description 'laptop' --select
      jetspark context add prod --server nats://n1:4222,nats://n2:4222 --user app --password -
    """
    files.check_name(name)
    if files.exists(name) and not force:
        raise click.ClickException(f"context {name!r} exists (`jetspark context info {name}`); --force replaces it")
    # Said in the flags' words before ConnectOptions checks the rest in its own.
    if options["password"] is not None and options["user"] is None:
        raise click.UsageError("--password needs --user")
    if (options["tls_cert"] is None) != (options["tls_key"] is None):
        raise click.UsageError("--tlscert and --tlskey go together (a client certificate and its key)")
    options["password"] = _secret(options["password"], "Password")
    options["token"] = _secret(options["token"], "Token")
    if store is not None:
        store = os.path.abspath(os.path.expanduser(store.removeprefix("file://")))
    saved = files.make(name, description=description, store=store, server=server, options=options)
    path = files.save(saved)
    if make_selected:
        files.select(name)
    is_selected = files.selected() == name
    if as_json:
        emit_json(_info_json(saved, is_selected, path))
    else:
        click.echo(_info_text(saved, is_selected, path))


@context.command("info")
@click.argument("name", required=False)
@output_options
def info(name: Optional[str], as_json: bool):
    """Show a context (the selected one without NAME); passwords and tokens as ********.

    `context show` works too.

    \b
    Example:
      jetspark context info prod
      jetspark context info --json
    """
    current = files.selected()
    if name is None:
        if current is None:
            raise click.ClickException("no context is selected: name one (`jetspark context ls` lists them)")
        name = current
    saved = files.load(files.check_name(name))
    path = files.path_of(name)
    if as_json:
        emit_json(_info_json(saved, current == name, path))
    else:
        click.echo(_info_text(saved, current == name, path))


@context.command("ls")
@output_options
def ls(as_json: bool):
    """List the contexts, the selected one marked with * (`context list` works too).

    \b
    Example:
      jetspark context ls
      jetspark context ls --json
    """
    current = files.selected()
    saved, damaged = [], []
    for name in files.names():
        try:
            saved.append(files.load(name))
        except click.ClickException as exc:
            damaged.append(exc.message)
    if damaged:
        raise click.ClickException("; ".join(damaged))
    if current is not None and current not in {s.name for s in saved}:
        click.echo(
            f"Warning: the selected context {current!r} does not "
            "exist (`jetspark context select NAME` chooses another)",
            err=True,
        )
    if as_json:
        emit_json([{**s.shown(), "selected": s.name == current} for s in saved])
        return
    if not saved:
        click.echo("No contexts defined (`jetspark context add NAME --store PATH` or `--server URL` makes one)")
        return
    rows = [(s.name + ("*" if s.name == current else ""), s.description, s.location) for s in saved]
    click.echo(
        table(
            ["Name", "Description", "Store or server"], rows, title=f"Known contexts ({files.config_dir() / 'context'})"
        )
    )


@context.command("select")
@click.argument("name", required=False)
def select(name: Optional[str]):
    """Make a context the one commands use by default; without NAME, print the selected one.

    --store, --server, --context and $JETSPARK_STORE/$JETSPARK_CONTEXT still
    win over it.

    \b
    Example:
      jetspark context select prod
      jetspark context select
    """
    if name is None:
        current = files.selected()
        if current is None:
            click.echo("No context selected")
        elif not files.exists(current):
            raise click.ClickException(f"the selected context {current!r} does not exist; {files.known_list()}")
        else:
            click.echo(current)
        return
    saved = files.load(files.check_name(name))  # only a context that exists and reads back
    files.select(name)
    click.echo(f"Selected context {name} ({saved.location})")


@context.command("unselect")
def unselect():
    """Select no context: commands use --store, $JETSPARK_STORE or ./jetspark-data again.

    \b
    Example:
      jetspark context unselect
    """
    files.select(None)
    click.echo("No context selected")


@context.command("rm")
@click.argument("name")
@click.option("--force", "-f", is_flag=True, help="Do not ask for confirmation.")
def rm(name: str, force: bool):
    """Delete a context (its file; a damaged one too).

    \b
    Example:
      jetspark context rm prod -f
    """
    files.check_name(name)
    if not files.exists(name):
        raise files.unknown_context(name)
    if not force:
        click.confirm(f"Really delete context {name}?", abort=True)
    was_selected = files.remove(name)
    click.echo(f"Deleted context {name}" + (" (it was selected: no context is selected now)" if was_selected else ""))
