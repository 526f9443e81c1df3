"""Saved contexts: where to connect (a store or a NATS server) and how, kept as files.

Laid out as the ``nats`` CLI keeps its own, in the user's configuration
directory (``platformdirs``: ``~/.config/jetspark`` on Linux, honouring
``XDG_CONFIG_HOME``; ``$JETSPARK_CONFIG_DIR`` replaces it)::

    <config>/context/NAME.json   one context: {"description", "store"} or
                                 {"description", "server", "user", "password", ...}
    <config>/context.txt         the selected context's name

A server context's other keys are ``jetspark.connect``'s connection options
(``ConnectOptions`` field names), so a file reads as the call it makes.
Files are written whole and renamed into place (an interrupted write leaves
the old file), readable by their owner only (they may hold a password or a
token).  A damaged file is an error naming it, never skipped.  Secrets are
shown as ``********`` (``shown``); only ``connect_args`` hands them on.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import click

from jetspark.connect_options import ConnectOptions, redact_url
from jetspark.connection import SERVER_SCHEMES

__all__ = [
    "CONFIG_DIR_VAR",
    "MASK",
    "OPTION_KEYS",
    "SECRET_KEYS",
    "ContextError",
    "SavedContext",
    "check_name",
    "exists",
    "config_dir",
    "make",
    "known_list",
    "load",
    "path_of",
    "names",
    "remove",
    "save",
    "select",
    "selected",
    "unknown_context",
]

# The connection options a context may hold, as jetspark.connect names them.
OPTION_KEYS = ("user", "password", "token", "user_credentials", "nkeys_seed", "tls_ca", "tls_cert", "tls_key", "domain")
SECRET_KEYS = ("password", "token")
MASK = "********"
CONFIG_DIR_VAR = "JETSPARK_CONFIG_DIR"  # replaces the user's configuration directory
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
NAME_RULE = "letters, digits, '_', '-' and '.' (not first), up to 64 characters"


def config_dir() -> Path:
    """jetspark's configuration directory: $JETSPARK_CONFIG_DIR, else the platform's (per user)."""
    override = os.environ.get(CONFIG_DIR_VAR)
    if override:
        return Path(override)
    import platformdirs  # only the commands that touch contexts pay for it

    return Path(platformdirs.user_config_dir("jetspark", appauthor=False))


def _dir() -> Path:
    return config_dir() / "context"


def _selection_file() -> Path:
    return config_dir() / "context.txt"


def check_name(name: str, hint: str = "NAME") -> str:
    """A name that is one plain file name on every platform, or a usage error saying what is accepted."""
    if not _NAME.fullmatch(name or ""):
        raise click.BadParameter(f"invalid context name {name!r}: use {NAME_RULE}", param_hint=hint)
    return name


class ContextError(click.ClickException):
    """A context that does not exist or whose file cannot be used."""


@dataclass(frozen=True)
class SavedContext:
    """One context: a store directory, or a server URL with connection options."""

    name: str
    description: str = ""
    store: Optional[str] = None
    server: Optional[str] = None
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, name: str, data: Any, origin: str) -> "SavedContext":
        """Checked as a whole; ``origin`` (the file) names what is wrong.  Nothing of a secret's
        value appears in an error."""

        def bad(why: str) -> ContextError:
            return ContextError(
                f"context file {origin} is damaged: {why}; fix it, "
                f"or remove it with `jetspark context rm {name}` and add it again"
            )

        if not isinstance(data, dict):
            raise bad(f"it holds a JSON {type(data).__name__}, not an object")
        known = ("description", "store", "server", *OPTION_KEYS)
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise bad(f"unknown key(s) {unknown}; accepted: {list(known)}")
        for key, value in data.items():
            if not isinstance(value, str):
                raise bad(f"{key} must be a string" + ("" if key in SECRET_KEYS else f", not {json.dumps(value)}"))
        if ("store" in data) == ("server" in data):
            raise bad("it needs exactly one of store and server")
        options = {k: data[k] for k in OPTION_KEYS if k in data}
        if "store" in data:
            if options:
                raise bad(f"{sorted(options)} apply to a server, not to a store")
            if not data["store"]:
                raise bad("store is empty")
            return cls(name, data.get("description", ""), store=data["store"])
        try:
            server = _server_url(data["server"], options)
        except ValueError as exc:
            raise bad(str(exc)) from None
        return cls(name, data.get("description", ""), server=server, options=options)

    @property
    def _server(self) -> str:
        """The server's URL, of a context without a store (from_dict makes each with one of the two)."""
        assert self.server is not None
        return self.server

    def as_dict(self) -> dict[str, str]:
        """What the file holds (secrets included)."""
        out = {"description": self.description} if self.description else {}
        out.update({"store": self.store} if self.store is not None else {"server": self._server, **self.options})
        return out

    def connect_args(self) -> tuple[str, dict[str, str]]:
        """``jetspark.connect``'s arguments: the path or URL, and the connection options."""
        return (self.store if self.store is not None else self._server), dict(self.options)

    @property
    def location(self) -> str:
        """The store or the server, secrets masked."""
        return self.store if self.store is not None else redact_url(self._server)

    def shown(self) -> dict[str, Any]:
        """For ``info``, ``ls`` and ``--json``: the file's settings with every secret masked."""
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.store is not None:
            out["store"] = self.store
        else:
            out["server"] = redact_url(self._server)
            out.update({k: (MASK if k in SECRET_KEYS else v) for k, v in self.options.items()})
        return out


def _server_url(url: str, options: dict[str, str]) -> str:
    """The server list, normalised (scheme and port on each: ``localhost`` -> ``nats://localhost:4222``),
    checked with the options as ``jetspark.connect`` will check them.  Messages mask secrets."""
    try:
        checked = ConnectOptions.build(url, **options)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    for u in checked.servers:
        if u.split("://", 1)[0].lower() not in SERVER_SCHEMES:
            raise ValueError(
                f"server {redact_url(u)!r} is not a NATS server URL ({', '.join(s + '://' for s in SERVER_SCHEMES)})"
            )
    return ",".join(checked.servers)


def make(
    name: str,
    *,
    description: str = "",
    store: Optional[str] = None,
    server: Optional[str] = None,
    options: Optional[dict] = None,
) -> SavedContext:
    """A new context from the command line's values (``ValueError`` saying what is wrong)."""
    check_name(name)
    if store is not None and not store.strip():
        raise click.UsageError("--store needs a directory")
    data: dict[str, Any] = {"description": description} if description else {}
    if store is not None:
        data["store"] = store
    if server is not None:
        data["server"] = server
    data.update({k: v for k, v in (options or {}).items() if v is not None})
    if ("store" in data) == ("server" in data):
        raise click.UsageError("a context holds either --store PATH or --server URL: give exactly one")
    extra = sorted(k for k in OPTION_KEYS if k in data)
    if store is not None and extra:
        raise click.UsageError(f"connection options ({', '.join(extra)}) apply to --server, not to --store")
    if server is not None:
        try:
            data["server"] = _server_url(server, {k: data[k] for k in extra})
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    return SavedContext.from_dict(name, data, "(new)")


# ---------------------------------------------------------------------- files


def path_of(name: str) -> Path:
    """The file of the context ``name``."""
    return _dir() / f"{check_name(name)}.json"


def names() -> list[str]:
    """The saved contexts' names, sorted."""
    d = _dir()
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.json") if not p.name.startswith("."))


def exists(name: str) -> bool:
    return path_of(name).is_file()


def known_list() -> str:
    """``contexts: a, b`` for error messages."""
    return f"contexts: {', '.join(names()) or 'none (`jetspark context add` makes one)'}"


def unknown_context(name: str) -> ContextError:
    return ContextError(f"unknown context {name!r}; {known_list()}")


def load(name: str) -> SavedContext:
    """The context ``name``: an error naming it and listing the others if there is none, naming
    its file if the file cannot be read or is not a context."""
    path = path_of(name)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise unknown_context(name) from None
    except UnicodeDecodeError:
        raise ContextError(
            f"context file {path} is damaged: not UTF-8 text; fix it, "
            f"or remove it with `jetspark context rm {name}` and add it again"
        ) from None
    except OSError as exc:
        raise ContextError(f"cannot read context file {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        # The position only: the message of a JSON error can quote the file's text.
        raise ContextError(
            f"context file {path} is damaged: not JSON (line {exc.lineno}, column {exc.colno}); fix it, "
            f"or remove it with `jetspark context rm {name}` and add it again"
        ) from None
    return SavedContext.from_dict(name, data, str(path))


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all, readable by the owner only (mode 0600)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def save(context: SavedContext) -> Path:
    path = path_of(context.name)
    _write_private(path, json.dumps(context.as_dict(), indent=2) + "\n")
    return path


def remove(name: str) -> bool:
    """Delete a context's file (readable or not: a damaged one is removed this way too), and
    the selection if it was the selected one (then True)."""
    path = path_of(name)
    try:
        path.unlink()
    except FileNotFoundError:
        raise unknown_context(name) from None
    try:
        was_selected = selected() == name
    except ContextError:
        return False  # a damaged selection file: the next command that reads it reports it
    if was_selected:
        select(None)
    return was_selected


def selected() -> Optional[str]:
    """The selected context's name (None when none is): the name is checked, not whether it exists."""
    path = _selection_file()
    try:
        name = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ContextError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if name and not _NAME.fullmatch(name):
        raise ContextError(
            f"{path} is damaged: it should hold one context name ({NAME_RULE}); "
            "select one with `jetspark context select NAME`"
        )
    return name or None


def select(name: Optional[str]) -> None:
    """Make ``name`` the selected context (None: no context selected)."""
    if name is None:
        try:
            _selection_file().unlink()
        except FileNotFoundError:
            pass
        return
    _write_private(_selection_file(), check_name(name) + "\n")
