"""jetspark.err_codes: JetStream's error codes by name, and code that raises them by name.

A number in code (not in a docstring or comment) that is a JetStream err_code
(10000-10299) is read with ``tokenize``: no module but err_codes.py holds one.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

import jetspark.err_codes as E
import jetspark.errors as errors

PACKAGE = Path(__file__).resolve().parent.parent / "jetspark"
NAMES = {name: value for name, value in vars(E).items() if name.isupper()}


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _bare_codes(source: str) -> list[tuple[int, str]]:
    """(line, number) of every err_code-like number token: docstrings and comments are not numbers."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [
        (t.start[0], t.string) for t in tokens if t.type == tokenize.NUMBER and re.fullmatch(r"10[0-2]\d\d", t.string)
    ]


BARE = {_module(p): _bare_codes(p.read_text()) for p in sorted(PACKAGE.rglob("*.py")) if p.name != "err_codes.py"}


def test_the_reader_sees_numbers_and_skips_text():
    source = '"""err 10059 in a docstring"""\nx = 10059  # 10014 in a comment\ny = "10037"\nz = 100590\n'
    assert _bare_codes(source) == [(2, "10059")]


@pytest.mark.parametrize("module", sorted(BARE))
def test_err_codes_are_raised_by_name(module):
    found = BARE[module]
    hints = [
        f"line {line}: {n} is err_codes.{next((k for k, v in NAMES.items() if v == int(n)), '?')}" for line, n in found
    ]
    assert not found, f"{module} uses err_codes as bare numbers: {hints}"


def test_every_code_in_the_error_table_has_a_name():
    unnamed = sorted(set(errors._API_ERRORS) - set(NAMES.values()))
    assert not unnamed, f"err_codes names none of {unnamed}"


def test_names_and_codes_are_one_to_one():
    assert len(set(NAMES.values())) == len(NAMES)
    assert all(10000 <= v < 10300 and isinstance(v, int) for v in NAMES.values())
    # The module holds the constants and nothing else a caller could mistake for one.
    assert not [n for n in vars(E) if not n.startswith("_") and not n.isupper() and n not in ("annotations", "Final")]


@pytest.mark.parametrize(
    "name, err_code, cls",
    [
        ("STREAM_NOT_FOUND", 10059, errors.StreamNotFoundError),
        ("CONSUMER_NOT_FOUND", 10014, errors.ConsumerNotFoundError),
        ("NO_MESSAGE_FOUND", 10037, errors.MsgNotFoundError),
        ("STREAM_WRONG_LAST_SEQUENCE", 10071, errors.BadRequestError),
        ("STREAM_STORE_FAILED", 10077, errors.ServiceUnavailableError),
    ],
)
def test_a_name_is_the_servers_number(name, err_code, cls):
    # The numbers themselves are what the server sends: a few written out here, as a user compares them.
    assert NAMES[name] == err_code
    err = errors.api_error(NAMES[name], err="x", seq=1)
    assert type(err) is cls and err.err_code == err_code
