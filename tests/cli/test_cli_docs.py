"""docs/guides/cli.md runs as written: every ``$ jetspark ...`` line of its ```console
blocks, in order, in one fresh directory (the default store, ./jetspark-data, is made
there), and what each prints matches the lines under it.

The page's placeholder convention (stated at its top): ``...`` inside a line stands for any
text (times, durations, generated names); a line that is only ``...`` stands for any number
of lines.  Nothing else is normalised.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from jetspark.cli import cli as jetspark_cli

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "cli.md"
BIN = Path(sys.executable).parent
_BLOCK = re.compile(r"^```console\n(.*?)^```$", re.S | re.M)
_SHELL = re.compile(r"[|<>;&]")


def examples(text: str) -> list[tuple[str, list[str]]]:
    """(command, expected lines) for each ``$ `` line of the page's console blocks."""
    out: list[tuple[str, list[str]]] = []
    for block in _BLOCK.findall(text):
        for line in block.splitlines():
            if line.startswith("$ "):
                out.append((line[2:], []))
            elif out:
                out[-1][1].append(line)
    return out


def matches(expected: list[str], got: list[str]) -> bool:
    """``...`` alone: any lines; ``...`` within a line: any text."""
    parts = []
    for line in expected:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(p) for p in line.rstrip().split("...")) + r"\n")
    return re.fullmatch("".join(parts), "".join(g.rstrip() + "\n" for g in got)) is not None


def _words_outside_quotes(command: str) -> str:
    return "".join(tok for tok in re.split(r"('[^']*'|\"[^\"]*\")", command) if not tok.startswith(("'", '"')))


def run(command: str, env: dict) -> list[str]:
    """What the command prints (stdout and stderr, as a terminal shows them); jetspark runs
    in-process, or in bash when the line pipes or redirects."""
    if _SHELL.search(_words_outside_quotes(command)):
        shell_env = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
        shell_env["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
        r = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=shell_env, timeout=300)
        return (r.stdout + r.stderr).splitlines()
    args = shlex.split(command)
    assert args[0] == "jetspark", command
    r = CliRunner(env=env).invoke(jetspark_cli, args[1:], catch_exceptions=False)
    return r.output.splitlines()


def test_the_page_has_examples_for_every_command():
    text = PAGE.read_text()
    commands = " ".join(c for c, _ in examples(text))
    from tests.cli.test_app import LEAVES

    for path in LEAVES:
        if path in {("bench",), ("demo",)}:  # long-running: shown, but in ```text blocks
            assert f"jetspark {' '.join(path)}" in text
            continue
        assert f"jetspark {' '.join(path)}" in commands, (
            f"docs/guides/cli.md has no example of jetspark {' '.join(path)}"
        )


def test_the_page_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {
        "JETSPARK_STORE": None,
        "JETSPARK_CONTEXT": None,
        "JETSPARK_CONFIG_DIR": str(tmp_path / "config"),
        "COLUMNS": "100",
        "SOURCE_DATE_EPOCH": "1700000000",
    }
    cases = examples(PAGE.read_text())
    assert len(cases) > 30
    for command, expected in cases:
        got = run(command, env)
        assert matches(expected, got), (
            f"$ {command}\n--- the page says:\n" + "\n".join(expected) + "\n--- it printed:\n" + "\n".join(got)
        )


@pytest.mark.parametrize(
    "expected, got, ok",
    [
        (["a ... c"], ["a b c"], True),
        (["a ... c"], ["a b d"], False),
        (["x", "...", "z"], ["x", "1", "2", "z"], True),
        (["x", "...", "z"], ["x", "z"], True),
        (["x"], ["x", "y"], False),
        (["x", "y"], ["x"], False),
    ],
)
def test_the_placeholder_convention(expected, got, ok):
    assert matches(expected, got) is ok
