"""NATS subjects: validation, wildcard matching, collision and subset (docs/semantics.md §2).

A subject is ``.``-separated tokens with no empty token and no whitespace.
``*`` matches exactly one token, ``>`` one or more trailing tokens, and both
are wildcards only as whole tokens (``ba*`` is a literal).
"""

from __future__ import annotations

from functools import lru_cache

_WHITESPACE = frozenset(" \t\r\n\f\v")


def is_valid(subject: str, *, wildcards: bool = True) -> bool:
    """A well-formed subject; with ``wildcards=False`` it must also be literal."""
    if not isinstance(subject, str) or not subject:
        return False
    if _WHITESPACE.intersection(subject):
        return False
    tokens = subject.split(".")
    for i, tok in enumerate(tokens):
        if not tok:
            return False
        if tok == ">":
            if not wildcards or i != len(tokens) - 1:
                return False
        elif tok == "*" and not wildcards:
            return False
    return True


def has_whitespace(subject: str) -> bool:
    return bool(_WHITESPACE.intersection(subject))


def is_literal(subject: str) -> bool:
    return not any(tok in ("*", ">") for tok in subject.split("."))


@lru_cache(maxsize=65536)
def _tokens(subject: str) -> tuple[str, ...]:
    return tuple(subject.split("."))


def matches(pattern: str, subject: str) -> bool:
    """Does the (possibly wildcard) ``pattern`` match the literal ``subject``?"""
    if pattern == subject:
        return True
    p, s = _tokens(pattern), _tokens(subject)
    for i, tok in enumerate(p):
        if tok == ">":
            return len(s) > i
        if i >= len(s):
            return False
        if tok != "*" and tok != s[i]:
            return False
    return len(p) == len(s)


def collide(a: str, b: str) -> bool:
    """Is there a literal subject that both ``a`` and ``b`` match?"""
    ta, tb = _tokens(a), _tokens(b)
    for i in range(max(len(ta), len(tb))):
        x = ta[i] if i < len(ta) else None
        y = tb[i] if i < len(tb) else None
        if x == ">" or y == ">":
            # ">" needs at least one token at its position.
            return x is not None and y is not None
        if x is None or y is None:
            return False
        if x != y and x != "*" and y != "*":
            return False
    return True


def subset(a: str, b: str) -> bool:
    """Is everything ``a`` matches also matched by ``b``?"""
    ta, tb = _tokens(a), _tokens(b)
    for i, y in enumerate(tb):
        if y == ">":
            return len(ta) > i
        if i >= len(ta):
            return False
        x = ta[i]
        if x == ">":
            return False
        if y != "*" and (x == "*" or x != y):
            return False
    return len(ta) == len(tb)


def matches_any(patterns, subject: str) -> bool:
    return any(matches(p, subject) for p in patterns)
