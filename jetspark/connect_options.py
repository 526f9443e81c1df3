"""Connection options of the nats:// backend, from one place.

``jetspark.connect(url, **options)`` takes them as keyword arguments; the
Spark connector (or anything configured with strings) builds them with
``ConnectOptions.from_strings(url, mapping)``.  Secrets (password, token,
nkey seed, a password in the URL) never appear in ``repr`` or in error
messages.
"""

from __future__ import annotations

import dataclasses
import re
import ssl
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Optional
from urllib.parse import urlsplit, urlunsplit

from jetspark import validate as V
from jetspark.errors import LocationError

__all__ = ["ConnectOptions", "redact_url"]

_SECRET_FIELDS = ("password", "token", "nkeys_seed_str")
_FLOAT_FIELDS = ("timeout", "connect_timeout", "reconnect_time_wait", "retry_budget", "ping_interval")
_INT_FIELDS = ("max_reconnect_attempts", "publish_window", "publish_async_max_pending", "max_outstanding_pings")
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:@/,]*)(?::(?P<pw>[^@/,]*))?@")


def redact_url(url: str) -> str:
    """``nats://user:secret@host`` -> ``nats://user:***@host`` (a lone token ``nats://tok@host`` -> ``nats://***@host``)."""

    def sub(m: re.Match[str]) -> str:
        if m.group("pw") is not None:
            return f"{m.group('scheme')}{m.group('user')}:***@"
        return f"{m.group('scheme')}***@"

    return _URL_USERINFO.sub(sub, url)


_NATS_SCHEMES = ("nats", "tls", "ws", "wss")
_ONE_SLASH = re.compile(r"^(?P<scheme>nats|tls|wss?):/*(?P<rest>[^/].*)$", re.IGNORECASE)


def split_servers(url: str) -> list[str]:
    """``nats://a:4222,nats://b:4222`` (or ``nats://a:4222,b:4222``) -> a list of server URLs.

    A part that is not a server URL is ``LocationError`` naming it as given (``nats:/h:4222``
    with the ``nats://h:4222`` it probably meant), never a URL rebuilt around it."""
    parts = [p.strip() for p in url.split(",") if p.strip()]
    if not parts:
        raise LocationError(f"no server URL given: {url!r}", "url")
    scheme = parts[0].split("://", 1)[0] + "://" if "://" in parts[0] else "nats://"
    out = []
    for p in parts:
        u = p if "://" in p else scheme + p
        split = urlsplit(u)
        try:
            port = split.port
        except ValueError:
            port = -1
        why = None
        typo = _ONE_SLASH.match(p) if "://" not in p else None
        if typo is not None:
            why = f"did you mean {typo.group('scheme').lower()}://{redact_url(typo.group('rest'))}?"
        elif split.scheme.lower() not in _NATS_SCHEMES:
            why = f"a NATS server URL starts with {', '.join(s + '://' for s in _NATS_SCHEMES)}"
        elif not split.hostname:
            why = "no host"
        elif port == -1 or split.netloc.endswith(":"):
            why = "the port must be a number from 0 to 65535"
        elif split.path not in ("", "/") or split.query or split.fragment:
            why = "a server URL is scheme://[user[:password]@]host[:port], with nothing after the port"
        if why is not None:
            raise LocationError(f"not a server URL: {redact_url(p)!r} ({why})", "url")
        if port is None:
            u = urlunsplit((split.scheme, split.netloc + ":4222", split.path, split.query, split.fragment))
        out.append(u)
    return out


@dataclass(frozen=True)
class ConnectOptions:
    """How to reach and authenticate to a NATS server (every field optional but ``servers``).

    - ``timeout``: seconds every call may take before it fails with a clear
      error (``ServerConnectionError`` when the server is gone,
      ``RequestTimeoutError`` when it is there but silent); default 5.
    - ``connect_timeout``: seconds for one connect attempt to one server, up to its INFO
      (default: ``timeout``).  With several servers each gets an attempt of its own, so a
      first server that accepts the connection and then says nothing (a hung process) is
      followed by the others.
    - ``user``/``password``, ``token``: plain credentials (also accepted in the URL).
    - ``user_credentials``: path of a ``.creds`` file (JWT + nkey seed, decentralised auth).
    - ``nkeys_seed``: path of a file holding an nkey seed; ``nkeys_seed_str``: the seed itself.
    - ``tls_ca``/``tls_cert``/``tls_key``: PEM files for TLS (server verification,
      client certificate); ``tls_hostname`` overrides the name checked;
      ``tls`` a ready ``ssl.SSLContext`` instead.  ``tls://`` URLs require TLS.
    - ``name``: the connection's name in the server's monitoring (default "jetspark").
    - ``domain``: a JetStream domain (API prefix ``$JS.<domain>.API``).
    - ``max_reconnect_attempts``/``reconnect_time_wait``: after a lost connection,
      nats-py reconnects in the background; calls made meanwhile wait up to
      ``timeout`` for it.
    - ``ping_interval``/``max_outstanding_pings``: the client pings the server every
      ``ping_interval`` seconds (default 2) and takes it for gone when more than
      ``max_outstanding_pings`` (default 2) pings are unanswered: a server that stops
      answering without closing the connection (a hung or frozen process, a network
      partition) is noticed within about 4 to 6 s, and the client reconnects to another
      server of the list (nats-py's own defaults, 120 s and 2, notice it after minutes).
    - ``publish_window``: how many publishes ``publish_batch`` keeps in flight.
    - ``publish_async_max_pending``: how many ``publish_async`` futures may be pending
      at once (default 4000, nats-py's); a call beyond waits for room.
    - ``retry_budget``: seconds a call keeps retrying while the server cannot
      answer for a while (a cluster electing a leader after a node is lost, a
      freshly started cluster, a reconnect); default 30, longer than an
      election; 0 turns retries off.  Only calls that are safe to repeat are
      retried (docs/semantics.md, "Retries").
    """

    servers: tuple[str, ...]
    timeout: float = 5.0
    connect_timeout: Optional[float] = None
    name: Optional[str] = "jetspark"
    user: Optional[str] = None
    password: Optional[str] = field(default=None, repr=False)
    token: Optional[str] = field(default=None, repr=False)
    user_credentials: Optional[str] = None
    nkeys_seed: Optional[str] = None
    nkeys_seed_str: Optional[str] = field(default=None, repr=False)
    tls_ca: Optional[str] = None
    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    tls_hostname: Optional[str] = None
    tls: Optional[ssl.SSLContext] = field(default=None, repr=False)
    domain: Optional[str] = None
    max_reconnect_attempts: int = 60
    reconnect_time_wait: float = 1.0
    publish_window: int = 16384
    publish_async_max_pending: int = 4000
    retry_budget: float = 30.0
    ping_interval: float = 2.0
    max_outstanding_pings: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.servers, str):
            object.__setattr__(self, "servers", tuple(split_servers(self.servers)))
        elif isinstance(self.servers, (list, tuple)) and all(isinstance(u, str) for u in self.servers):
            object.__setattr__(self, "servers", tuple(self.servers))
        else:
            raise TypeError(f"servers must be a URL or a list of URLs, not {V.show(self.servers)}")
        if not self.servers:
            raise ValueError("no server URL given")
        self._check_types()
        if not self.timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {self.timeout!r}")
        if self.connect_timeout is not None and not self.connect_timeout > 0:
            raise ValueError(f"connect_timeout must be positive, not {self.connect_timeout!r}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together (a client certificate and its key)")
        if self.password is not None and self.user is None:
            raise ValueError("password needs user")
        if self.publish_window < 1:
            raise ValueError("publish_window must be at least 1")
        if not self.ping_interval > 0:
            raise ValueError(f"ping_interval must be a positive number of seconds, not {self.ping_interval!r}")

    def _check_types(self) -> None:
        """Every option of the type nats-py needs, named when it is not (a wrong one would
        otherwise fail later, inside nats-py, without saying which)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("servers", "tls"):
                continue
            if f.name in _FLOAT_FIELDS:
                if value is None and f.name == "connect_timeout":
                    continue
                V.timeout(value, f.name)
            elif f.name == "max_reconnect_attempts":
                V.integer(value, f.name, -1, V.INT32[1])  # -1: forever, as in nats-py
            elif f.name in ("publish_window", "publish_async_max_pending", "max_outstanding_pings"):
                V.integer(value, f.name, 1, V.INT32[1])
            else:
                V.text(value, f.name)
        if self.tls is not None and not isinstance(self.tls, ssl.SSLContext):
            raise TypeError(f"tls must be an ssl.SSLContext, not {V.show(self.tls)}")
        if self.domain is not None and (not self.domain or any(c in self.domain for c in ". \t\r\n*>")):
            raise ValueError(
                f"domain must be one subject token (no dots, wildcards or whitespace), not {self.domain!r}"
            )

    # ------------------------------------------------------------------ building

    @classmethod
    def build(cls, url: str, **options: Any) -> "ConnectOptions":
        """From a URL and keyword options; unknown options are a TypeError naming the known ones."""
        known = {f.name for f in fields(cls)} - {"servers"}
        unknown = set(options) - known
        if unknown:
            raise TypeError(f"unknown connection option(s) {sorted(unknown)}; accepted: {sorted(known)}")
        return cls(servers=tuple(split_servers(url)), **options)

    @classmethod
    def from_strings(cls, url: str, options: Mapping[str, str]) -> "ConnectOptions":
        """From string values, as Spark options carry them (``{"timeout": "10", "user": "a", ...}``).

        Keys are the field names; ``creds`` and ``nkey`` are accepted for
        ``user_credentials`` and ``nkeys_seed``, and dots or dashes for
        underscores (``tls.ca``, ``tls-ca``).
        """
        aliases = {
            "creds": "user_credentials",
            "credentials": "user_credentials",
            "nkey": "nkeys_seed",
            "seed": "nkeys_seed",
        }
        kwargs: dict[str, Any] = {}
        for key, value in options.items():
            name = key.replace(".", "_").replace("-", "_").lower()
            name = aliases.get(name, name)
            try:
                if name in _FLOAT_FIELDS:
                    kwargs[name] = float(value)
                elif name in _INT_FIELDS:
                    kwargs[name] = int(value)
                else:
                    kwargs[name] = value
            except (TypeError, ValueError):
                kind = "a number" if name in _FLOAT_FIELDS else "an integer"
                raise ValueError(f"option {key!r} must be {kind}, not {V.show(value)}") from None
        return cls.build(url, **kwargs)

    def evolve(self, **changes: Any) -> "ConnectOptions":
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ using

    @property
    def display_url(self) -> str:
        """The server list with secrets masked, for messages and repr."""
        return ",".join(redact_url(u) for u in self.servers)

    @property
    def has_credentials(self) -> bool:
        return any(
            v is not None
            for v in (self.user, self.token, self.user_credentials, self.nkeys_seed, self.nkeys_seed_str, self.tls_cert)
        ) or any("@" in u for u in self.servers)

    @property
    def api_prefix(self) -> str:
        return f"$JS.{self.domain}.API" if self.domain else "$JS.API"

    def ssl_context(self) -> Optional[ssl.SSLContext]:
        if self.tls is not None:
            return self.tls
        wants_tls = any(u.lower().startswith(("tls://", "wss://")) for u in self.servers)
        if not (self.tls_ca or self.tls_cert or wants_tls):
            return None
        try:
            ctx = ssl.create_default_context(purpose=ssl.Purpose.SERVER_AUTH, cafile=self.tls_ca)
            if self.tls_cert:
                ctx.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"cannot use the TLS files (tls_ca={self.tls_ca!r}, tls_cert={self.tls_cert!r}, "
                f"tls_key={self.tls_key!r}): {exc}"
            ) from None
        return ctx

    def nats_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``nats.connect`` (secrets included: never log this)."""
        kw: dict[str, Any] = {
            "servers": list(self.servers),
            "name": self.name,
            "connect_timeout": self.connect_timeout or self.timeout,
            "max_reconnect_attempts": self.max_reconnect_attempts,
            "reconnect_time_wait": self.reconnect_time_wait,
            "ping_interval": self.ping_interval,
            "max_outstanding_pings": self.max_outstanding_pings,
        }
        if self.user is not None:
            kw["user"] = self.user
        if self.password is not None:
            kw["password"] = self.password
        if self.token is not None:
            kw["token"] = self.token
        if self.user_credentials is not None:
            kw["user_credentials"] = self.user_credentials
        if self.nkeys_seed is not None:
            kw["nkeys_seed"] = self.nkeys_seed
        if self.nkeys_seed_str is not None:
            kw["nkeys_seed_str"] = self.nkeys_seed_str
        ctx = self.ssl_context()
        if ctx is not None:
            kw["tls"] = ctx
        if self.tls_hostname:
            kw["tls_hostname"] = self.tls_hostname
        return kw

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "servers":
                shown.append(f"servers={self.display_url!r}")
            elif f.name in _SECRET_FIELDS or f.name == "tls":
                if value is not None:
                    shown.append(f"{f.name}='***'" if f.name != "tls" else "tls=<SSLContext>")
            elif value is not None and value != f.default:
                shown.append(f"{f.name}={value!r}")
        return f"ConnectOptions({', '.join(shown)})"

    __str__ = __repr__
