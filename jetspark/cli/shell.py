"""``jetspark completion`` and ``jetspark man``: the shell's side of the command line.

``completion`` prints click's own completion script (the ``_JETSPARK_COMPLETE``
mechanism of ``click.shell_completion``).  ``man`` prints one manual page,
jetspark(1), in roff, generated from the click tree: every command with its usage,
help text and options.  It is written here rather than with click-man, which makes a
page per command and leaves roff's control characters and click's ``\\b`` markers in
the text unescaped.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import os
import re
from typing import Iterator

import click
from click.shell_completion import get_completion_class

import jetspark
from jetspark.cli.context_store import CONFIG_DIR_VAR

__all__ = ["COMPLETE_VAR", "completion", "man", "man_page"]

PROG = "jetspark"
COMPLETE_VAR = "_JETSPARK_COMPLETE"  # what click derives from the program's name
SHELLS = ("bash", "zsh", "fish")


@click.command(short_help="Print the shell completion script (bash, zsh, fish).")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str):
    """Print the shell completion script for SHELL (bash, zsh or fish).

    Commands, options, choices and paths complete on Tab.  Load it in the
    shell's startup file (bash needs version 4.4 or later).

    \b
    Example:
      jetspark completion bash > ~/.local/share/bash-completion/completions/jetspark
      echo 'eval "$(jetspark completion zsh)"' >> ~/.zshrc
      jetspark completion fish > ~/.config/fish/completions/jetspark.fish
    """
    cls = get_completion_class(shell)
    assert cls is not None  # click ships all three
    click.echo(cls(ctx.find_root().command, {}, PROG, COMPLETE_VAR).source(), nl=False)  # as click prints it


@click.command()
@click.pass_context
def man(ctx: click.Context):
    """Print the manual page, jetspark(1), in roff.

    Every command with its usage, help and options, from the same text as
    --help.

    \b
    Example:
      jetspark man | man -l -
      jetspark man > ~/.local/share/man/man1/jetspark.1
    """
    click.echo(man_page(ctx.find_root().command), nl=False)


# ---------------------------------------------------------------------- roff


def _escape(text: str) -> str:
    """Text for roff: backslashes doubled, dashes and quotes that roff would misread escaped."""
    return text.replace("\\", "\\e").replace("-", "\\-").replace("'", "\\(aq").replace("`", "\\(ga")


def _line(text: str) -> str:
    """One line of running text: a line starting with '.' or ''' would be a request."""
    text = _escape(text)
    return "\\&" + text if text.startswith((".", "\\(aq")) else text


def _paragraphs(help_text: str) -> Iterator[str]:
    """click's help text as roff: paragraphs filled, ``\\b`` blocks (examples) kept as they are."""
    for block in re.split(r"\n\s*\n", inspect.cleandoc(help_text)):
        lines = block.splitlines()
        if lines and lines[0].strip() == "\b":
            yield ".PP"
            yield ".nf"
            yield from (_line(x) for x in lines[1:])
            yield ".fi"
        else:
            yield ".PP"
            yield _line(" ".join(x.strip() for x in lines))


def _options(ctx: click.Context, command: click.Command) -> Iterator[str]:
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        opts, help_text = record
        yield ".TP"
        yield f"\\fB{_escape(opts)}\\fR"
        yield _line(help_text or "")


def _commands(ctx: click.Context) -> Iterator[tuple[click.Context, click.Command]]:
    command = ctx.command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            sub_ctx = click.Context(sub, info_name=name, parent=ctx)
            yield sub_ctx, sub
            yield from _commands(sub_ctx)


def man_page(root: click.Command) -> str:
    """jetspark(1) for the command tree under ``root``.  Its date is $SOURCE_DATE_EPOCH's
    (for reproducible builds), else today."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc) if epoch else _dt.datetime.now(_dt.timezone.utc)
    ctx = click.Context(root, info_name=PROG)
    summary = (root.help or "").strip().splitlines()[0].split(": ", 1)[-1]
    out = [
        f'.TH JETSPARK 1 "{when:%Y-%m-%d}" "jetspark {jetspark.__version__}" "jetspark manual"',
        ".SH NAME",
        f"{PROG} \\- {_escape(summary)}",
        ".SH SYNOPSIS",
        f"\\fB{PROG}\\fR [\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        *_paragraphs(root.help or ""),
        ".SH OPTIONS",
        *_options(ctx, root),
        ".SH COMMANDS",
    ]
    for sub_ctx, sub in _commands(ctx):
        out.append(f".SS {_escape(sub_ctx.command_path)}")
        usage = " ".join(sub.collect_usage_pieces(sub_ctx))
        out += [".PP", f"\\fB{_escape(sub_ctx.command_path)}\\fR {_escape(usage)}"]
        out += _paragraphs(sub.help or "")
        if not isinstance(sub, click.Group):
            out += [".PP", "Options:", ".RS", *_options(sub_ctx, sub), ".RE"]
    out.append(".SH ENVIRONMENT")
    for param in root.params:
        if isinstance(param, click.Option) and isinstance(param.envvar, str):
            out += [".TP", f"\\fB{param.envvar}\\fR", _line(f"{param.opts[-1]} when it is not given: {param.help}")]
    out += [
        ".TP",
        f"\\fB{CONFIG_DIR_VAR}\\fR",
        _line("Where saved contexts are kept (jetspark context), instead of the user's configuration directory."),
    ]
    out += [
        ".SH SEE ALSO",
        "\\fBnats\\fR(1), the nats command line jetspark's commands follow.",
    ]
    return "\n".join(out) + "\n"
