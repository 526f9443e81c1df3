"""The command line's shared state and its one error boundary.

``State`` (``ctx.obj``) holds the global options and opens the store on first
use, through ``jetspark.connect`` only.  ``Group.invoke`` is the single place
where library errors become ``click.ClickException``: one line on stderr, the
JetStream description and err_code for API errors, exit status 1, and the
traceback only with ``--debug``.
"""

from __future__ import annotations

import functools
import io
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import click

import jetspark
from jetspark.cli import context_store
from jetspark.connect_options import redact_url
from jetspark.errors import APIError, ConsumerNotFoundError, JetSparkError, StreamNotFoundError

__all__ = ["DEFAULT_STORE", "Group", "State", "describe_error", "pass_state"]

# conf/jetspark.toml [store] path; a test keeps the two equal.
DEFAULT_STORE = "./jetspark-data"

log = logging.getLogger("jetspark.cli")


class State:
    """Global options plus the lazily opened JetStream handle.

    ``context`` names a saved context to connect with (``--context``), and
    ``use_selected`` says to use the selected one, if any, when nothing else
    said where (contexts.choose decides).  Either is read only when a
    command connects, so ``jetspark context ...`` works whatever state the
    saved contexts are in.
    """

    def __init__(
        self,
        store: str,
        server: Optional[str],
        debug: bool,
        trace: bool = False,
        context: Optional[str] = None,
        use_selected: bool = False,
    ) -> None:
        self.store = store
        self.server = server
        self.debug = debug
        self.trace = trace
        self.context = context
        self.use_selected = use_selected
        self.options: dict[str, str] = {}  # a server context's connection options
        self.origin: Optional[str] = None  # "context 'prod'" once a context said where
        self._js: Any = None  # a JetStream handle, or Traced around one

    def locate(self) -> None:
        """Take the store or server (and credentials) from the context that applies, once."""
        name, self.context = self.context, None
        if name is None and self.use_selected:
            name = context_store.selected()
            if name is not None and not context_store.exists(name):
                raise click.ClickException(
                    f"the selected context {name!r} does not exist; {context_store.known_list()} "
                    "(`jetspark context select NAME` chooses another, `jetspark context unselect` none)"
                )
        self.use_selected = False
        if name is None:
            return
        saved = context_store.load(name)
        self.origin = f"context {name!r}"
        if saved.store is not None:
            self.store, self.server = saved.store, None
        else:
            self.server, self.options = saved.connect_args()
        log.info("using %s: %s", self.origin, saved.location)

    def js(self, create: bool = False):
        """The JetStream handle on the store.

        Only commands that create something (``stream add``) may create the
        store: the others fail on a path that holds none, so a mistyped
        ``--store`` reports itself instead of leaving an empty store behind.
        """
        self.locate()
        if self._js is None and self.server is not None:
            # A NATS server: the same API through nats-py (jetspark.remote).  Through
            # ConnectOptions, so `-s localhost:4222` means nats://localhost:4222 as with
            # nats, never a directory of that name.
            self._js = jetspark.connect(jetspark.ConnectOptions.build(self.server, **self.options))
        if self._js is None:
            path = Path(str(self.store).removeprefix("file://"))
            if not create and not (path / "store.json").exists():
                how = self.origin or "choose one with --store or JETSPARK_STORE"
                raise click.ClickException(
                    f"no jetspark store at {self.store} ({how}; `jetspark stream add` creates it)"
                )
            self._js = jetspark.connect(str(path))
        if self.trace and not isinstance(self._js, Traced):
            self._js = Traced(self._js)
        return self._js

    def check_backend(self) -> None:
        """For commands that only run on the embedded engine (demo, bench)."""
        self.locate()
        if self.server is not None:
            if self.origin:
                raise click.ClickException(
                    f"{self.origin} is a NATS server: this command runs on the embedded engine; "
                    "choose a directory with --store PATH (or a store's context)"
                )
            raise click.ClickException(
                f"--server {redact_url(self.server)}: this command runs on the embedded engine; "
                "drop --server (and choose a directory with --store PATH or JETSPARK_STORE)"
            )

    def close(self) -> None:
        js, self._js = self._js, None
        if js is not None:
            js.close()


class Traced:
    """A JetStream handle that prints each call and its answer to stderr (``--trace``): the
    API requests a command makes, on the engine as on a server (secrets never appear: the
    results' reprs hide them)."""

    LIMIT = 400  # characters of an answer shown

    def __init__(self, js) -> None:
        self._js = js

    def __getattr__(self, name: str):
        attr = getattr(self._js, name)
        if not callable(attr) or name.startswith("_") or name == "close":
            return attr

        def call(*args, **kwargs):
            shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items() if v is not None])
            click.echo(f">>> {name}({shown})", err=True)
            try:
                out = attr(*args, **kwargs)
            except Exception as exc:
                click.echo(f"<<< {type(exc).__name__}: {describe_error(exc)}", err=True)
                raise
            text = repr(out)
            click.echo(f"<<< {text[: self.LIMIT]}{' ...' if len(text) > self.LIMIT else ''}", err=True)
            return out

        return call


pass_state = click.make_pass_decorator(State)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def describe_error(exc: BaseException) -> str:
    """One line for a library error: API errors as ``description (err_code N)``."""
    if isinstance(exc, APIError):
        # A server status without an err_code (a 409 to a pull request, say) shows its status.
        return (
            f"{exc.description} (err_code {exc.err_code})" if exc.err_code else f"{exc.description} (status {exc.code})"
        )
    if isinstance(exc, JetSparkError):
        return str(exc) or type(exc).__name__
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}"
    return f"{type(exc).__name__}: {exc} (an unexpected error; rerun with --debug for the traceback)"


class Group(click.Group):
    """A click group that turns library errors into ClickException, and closes the store."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, KeyboardInterrupt, SystemExit):
            raise
        except BrokenPipeError:
            # `jetspark sub ... | head`: the reader left; stop quietly, as cat does.
            _silence_stdout()
            raise click.exceptions.Exit(141) from None
        except Exception as exc:
            state = ctx.find_object(State)
            if state is not None and state.debug:
                raise
            raise click.ClickException(describe_error(exc)) from exc
        finally:
            if ctx.parent is None:
                state = ctx.find_object(State)
                if state is not None:
                    self._close(state)

    @staticmethod
    def _close(state: State) -> None:
        try:
            state.close()  # applies buffered acks
        except Exception as exc:
            if state.debug:
                raise
            raise click.ClickException(describe_error(exc)) from exc


class Commands(click.Group):
    """A command group that takes ``list`` for ``ls``, as the ``nats`` CLI does."""

    ALIASES = {"list": "ls"}

    def get_command(self, ctx: click.Context, name: str):
        return super().get_command(ctx, self.ALIASES.get(name, name))

    def resolve_command(self, ctx: click.Context, args):
        # The alias runs under its command's own name (help and errors say ``ls``).
        _, cmd, rest = super().resolve_command(ctx, args)
        return (cmd.name if cmd is not None else None), cmd, rest


def needs_store(create: bool = False) -> Callable:
    """Pass the JetStream handle as the command's first argument."""

    def deco(fn: Callable) -> Callable:
        @pass_state
        @functools.wraps(fn)
        def wrapper(state: State, *args, **kwargs):
            js = state.js(create=create)
            try:
                return fn(js, *args, **kwargs)
            except (StreamNotFoundError, ConsumerNotFoundError) as exc:
                if state.debug:
                    raise
                raise click.ClickException(_not_found(js, exc, kwargs)) from exc

        return wrapper

    return deco


def _not_found(js, exc: APIError, params: dict) -> str:
    """A stream or consumer not found, named (the server's description names neither), with
    what there is instead: ``stream 'ORDRES' not found (err_code 10059); streams: ORDERS``."""
    stream = params.get("stream_name") or params.get("name") or params.get("source")
    if isinstance(exc, ConsumerNotFoundError):
        consumer = params.get("consumer") or params.get("name")
        text = f"consumer {consumer!r} not found on stream {stream!r} (err_code {exc.err_code})"
        try:
            names = [c.name for c in js.consumers_info(stream)]
        except Exception:  # noqa: BLE001 - the listing only helps; the error stands without it
            return text
        return f"{text}; consumers: {', '.join(sorted(names)) or 'none'}"
    text = f"stream {stream!r} not found (err_code {exc.err_code})" if stream else describe_error(exc)
    try:
        names = js.stream_names()
    except Exception:  # noqa: BLE001
        return text
    return f"{text}; streams: {', '.join(sorted(names)) or 'none'}"
