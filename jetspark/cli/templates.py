"""``jetspark pub`` body templates: the ``nats pub`` functions, ``{{Count}}`` and friends.

::

    {{Count}}            the message number, 1 to --count
    {{ID}}               a unique id
    {{Time}}             the current time, HH:MM:SS
    {{TimeStamp}}        the current time, RFC 3339
    {{Unix}}             seconds since 1970
    {{UnixNano}}         nanoseconds since 1970
    {{Random 10 100}}    a random alphanumeric string of 10 to 100 characters

Names are case-insensitive and spaces inside the braces are optional, so
``{{ Count }}`` works too.  A text without ``{{`` is used as is, at no cost
per message.
"""

from __future__ import annotations

import datetime as _dt
import random
import re
import string
import time
import uuid
from typing import Callable, Union

__all__ = ["FUNCTIONS", "Template", "TemplateError"]

_TAG = re.compile(r"\{\{\s*([A-Za-z]+)((?:\s+[^\s}]+)*)\s*\}\}")
_ALNUM = string.ascii_letters + string.digits


class TemplateError(ValueError):
    pass


def _random(args: list[str]) -> Callable[[int], str]:
    try:
        lo, hi = (int(a) for a in args)
    except ValueError:
        raise TemplateError("{{Random MIN MAX}} takes two whole numbers, e.g. {{Random 10 100}}") from None
    if lo < 0 or hi < lo:
        raise TemplateError(f"{{{{Random {lo} {hi}}}}}: need 0 <= MIN <= MAX")
    rng = random.Random()
    return lambda n: "".join(rng.choices(_ALNUM, k=rng.randint(lo, hi)))


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


# name -> (number of arguments, factory of a function count -> text)
FUNCTIONS: dict[str, tuple[int, Callable[[list[str]], Callable[[int], str]]]] = {
    "count": (0, lambda a: str),
    "id": (0, lambda a: lambda n: uuid.uuid4().hex),
    "time": (0, lambda a: lambda n: f"{_now():%H:%M:%S}"),
    "timestamp": (0, lambda a: lambda n: _now().isoformat(timespec="seconds").replace("+00:00", "Z")),
    "unix": (0, lambda a: lambda n: str(int(time.time()))),
    "unixnano": (0, lambda a: lambda n: str(time.time_ns())),
    "random": (2, _random),
}


class Template:
    """A text with ``{{...}}`` tags, compiled once, rendered per message number."""

    def __init__(self, text: Union[str, bytes]) -> None:
        self.source = text
        raw = text.decode("utf-8", "surrogateescape") if isinstance(text, bytes) else text
        self._binary = isinstance(text, bytes)
        self._parts: list[Union[str, Callable[[int], str]]] = []
        pos = 0
        for m in _TAG.finditer(raw):
            name, args = m.group(1).lower(), m.group(2).split()
            if name not in FUNCTIONS:
                known = ", ".join(
                    "{{" + n + "}}" for n in ("Count", "ID", "Time", "TimeStamp", "Unix", "UnixNano", "Random MIN MAX")
                )
                raise TemplateError(f"unknown template function {m.group(0)!r}; available: {known}")
            nargs, factory = FUNCTIONS[name]
            if len(args) != nargs:
                raise TemplateError(f"{m.group(0)!r} takes {nargs} argument(s)")
            if m.start() > pos:
                self._parts.append(raw[pos : m.start()])
            self._parts.append(factory(args))
            pos = m.end()
        if pos < len(raw):
            self._parts.append(raw[pos:])
        self.is_static = all(isinstance(p, str) for p in self._parts)

    def render(self, count: int) -> str:
        if self.is_static:
            return (
                self.source if isinstance(self.source, str) else "".join(p for p in self._parts if isinstance(p, str))
            )
        return "".join(p if isinstance(p, str) else p(count) for p in self._parts)

    def render_bytes(self, count: int) -> bytes:
        if self.is_static and isinstance(self.source, bytes):
            return self.source
        return self.render(count).encode("utf-8", "surrogateescape")
