"""jetspark completion and jetspark man."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from jetspark.cli import cli as jetspark_cli

BIN = Path(sys.executable).parent  # the venv's bin, where the jetspark console script is


def walk(command: click.Command, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from walk(sub, path + (name,))


@pytest.mark.parametrize(
    "shell, marker",
    [
        ("bash", "complete -o nosort -F _jetspark_completion jetspark"),
        ("zsh", "compdef _jetspark_completion jetspark"),
        ("fish", "complete --no-files --command jetspark"),
    ],
)
def test_completion_prints_the_script(cli, shell, marker):
    r = cli("completion", shell)
    assert marker in r.stdout and "_JETSPARK_COMPLETE" in r.stdout
    # The same script click's own mechanism prints: _JETSPARK_COMPLETE=<shell>_source jetspark.
    env = {**os.environ, "_JETSPARK_COMPLETE": f"{shell}_source"}
    assert (
        r.stdout
        == subprocess.run([BIN / "jetspark"], capture_output=True, text=True, env=env, timeout=120, check=True).stdout
    )


def test_completion_refuses_an_unknown_shell(cli):
    r = cli("completion", "tcsh", code=2)
    assert "'tcsh' is not one of 'bash', 'zsh', 'fish'" in r.stderr


def _bash_complete(script: str, words: str) -> list[str]:
    """Source the script in a real bash, complete the command line ``words`` (the cursor at
    its end) with the function it registered, and return COMPREPLY."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    program = f"""
{script}
COMP_WORDS=({words}{"''" if words.endswith(" ") else ""})
COMP_CWORD={cword}
_jetspark_completion jetspark
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return [line for line in out.stdout.splitlines() if line]


def test_bash_completion_completes(cli):
    script = cli("completion", "bash").stdout
    assert "stream" in _bash_complete(script, "jetspark ")
    assert _bash_complete(script, "jetspark str") == ["stream"]
    subs = _bash_complete(script, "jetspark stream ")
    assert {"add", "subjects", "find", "seal", "copy", "view"} <= set(subs)
    assert _bash_complete(script, "jetspark consumer add ORDERS --deliver-g") == ["--deliver-group"]
    assert _bash_complete(script, "jetspark completion ") == ["bash", "zsh", "fish"]
    assert _bash_complete(script, "jetspark stream add S --retention w") == ["workqueue", "work", "workq"]
    assert _bash_complete(script, "jetspark --log-level x") == []  # no such choice: nothing offered


def test_man_page_has_every_command_and_option(cli):
    page = cli("man").stdout
    assert page.startswith('.TH JETSPARK 1 "')
    for path, command in walk(jetspark_cli):
        if path and path != ("bench",):  # bench: only in a source checkout (listed when there)
            assert f".SS {' '.join(('jetspark',) + path)}".replace("-", "\\-") in page, path
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.opts[-1].replace("-", "\\-") in page, (path, param.opts)
    for var in ("JETSPARK_STORE", "JETSPARK_CONTEXT", "JETSPARK_CONFIG_DIR"):
        assert f"\\fB{var}\\fR" in page


def test_man_page_date_is_reproducible(cli):
    r = cli("man", env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert r.stdout.startswith('.TH JETSPARK 1 "2023-11-14"')


def test_man_renders_without_roff_warnings(cli, tmp_path):
    if shutil.which("groff") is None:
        pytest.skip("groff is not installed")
    page = tmp_path / "jetspark.1"
    page.write_text(cli("man").stdout)
    r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(page)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    if shutil.which("man") is not None:
        text = subprocess.run(
            ["man", "-l", str(page)], capture_output=True, text=True, timeout=120, env={**os.environ, "MANWIDTH": "100"}
        ).stdout
        # Help text that starts with a quote or a dot stays text, and examples keep their lines.
        assert "jetspark stream add ORDERS --subjects 'orders.>' --max-age 1d" in text
        assert "   jetspark stream subjects\n" in text.replace("\x08", "")
