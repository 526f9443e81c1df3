"""``python -m jetspark.demo``: a Ctrl-C at any moment prints one line and exits cleanly.

The demo runs as a child in a session of its own, and the Ctrl-C is what a
terminal sends: SIGINT to the whole process group, so Spark's JVM and its
Python workers get it too.  It is sent when the demo's output reaches the
line that marks a phase: Spark starting, and a micro-batch done (the query
running, the publisher publishing).  Spark starting is pressed at its
riskiest: once the JVM's process exists and before it answers (PySpark cut
short there can leave a JVM that never exits), which no output marks, so
that one test watches the process group for the JVM.  Then the demo must
exit with 130 (128 + SIGINT, the shell's convention), having printed the
interruption once and no traceback (its own or py4j's, the JVM's or a
worker's), and leave no process of its group behind.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
# A hang guard for each wait on the demo; the demo stops in a few seconds.
PROMPTLY = 60
BATCH_LINE = re.compile(r"^\s+\d+\s+[\d,]+\s+[\d,]+\s+\d+\.\.\d+")  # "  1    80    43   0..80 ..."
NOISE = re.compile(r"Traceback|py4j|Error|Exception|KeyboardInterrupt|failed|WARN", re.IGNORECASE)


def _group(pgid: int) -> list[psutil.Process]:
    """The processes of process group ``pgid`` still there (the demo's children keep its
    group after it exits)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                found.append(proc)
        except (ProcessLookupError, psutil.Error):
            pass
    return found


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return ""  # gone meanwhile (spark-submit's launcher, say)


def _jvm_launched(pgid: int) -> None:
    """Wait until Spark's JVM runs in the group (no output says so: this looks every 10 ms)."""
    deadline = time.monotonic() + PROMPTLY
    while "java" not in {_name(p) for p in _group(pgid)}:
        assert time.monotonic() < deadline, "no JVM was launched"
        time.sleep(0.01)


def _interrupt_at(tmp_path, marks_phase, then=None) -> tuple[int, list[str], list[str]]:
    """Run the demo, press Ctrl-C when an output line ``marks_phase`` (and ``then(pgid)``
    returned); returns its exit status, the output before the Ctrl-C and the output after it."""
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    demo = subprocess.Popen(
        [
            sys.executable,
            "-u",
            "-m",
            "jetspark.demo",
            "--store",
            str(tmp_path / "store"),
            "--seconds",
            "120",
            "--rate",
            "500",
            "--trigger",
            "0.5",
        ],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    members: list[psutil.Process] = []
    try:
        before = []
        for line in demo.stdout:
            before.append(line.rstrip("\n"))
            if marks_phase(line):
                break
        else:
            pytest.fail("the demo ended before the phase to interrupt:\n" + "\n".join(before))
        if then is not None:
            then(demo.pid)
        members = _group(demo.pid)
        os.killpg(demo.pid, signal.SIGINT)
        status = demo.wait(timeout=PROMPTLY)
        # The rest of the output: until every process holding the pipe (the JVM too) closed it.
        try:
            after, _ = demo.communicate(timeout=PROMPTLY)
        except subprocess.TimeoutExpired:
            after = None
        members += _group(demo.pid)
        _, alive = psutil.wait_procs(members, timeout=0 if after is None else PROMPTLY)
        assert not alive, f"left behind: {[(p.pid, p.name()) for p in alive]}"
        assert after is not None, "the demo's output pipe stayed open"
        return status, before, after.splitlines()
    finally:
        for proc in [demo, *members]:
            try:
                proc.kill()
            except (ProcessLookupError, psutil.Error):
                pass
        demo.wait()


def _check_clean_stop(status: int, after: list[str]) -> None:
    text = "\n".join(after)
    assert status == 130, text
    assert [line for line in after if "interrupt" in line.lower()] == ["-- interrupted: stopping"], text
    assert not [line for line in after if NOISE.search(line)], text
    assert "summary" in after, text  # it wound down in order and said what it did


def test_ctrl_c_while_spark_starts(tmp_path):
    status, before, after = _interrupt_at(tmp_path, lambda line: line.startswith("starting Spark"), then=_jvm_launched)
    _check_clean_stop(status, after)
    assert "  rows processed     0 in 0 micro-batches (offsets up to seq 0)" in after


def test_ctrl_c_while_micro_batches_run(tmp_path):
    status, before, after = _interrupt_at(tmp_path, BATCH_LINE.match)
    _check_clean_stop(status, after)
    assert any(line.startswith("query reads EVENTS") for line in before)
    (done,) = [line for line in after if line.startswith("  rows processed")]
    assert int(re.search(r"in (\d+) micro-batches", done).group(1)) >= 1


def test_the_pyspark_internals_the_demo_stops_early_with_are_there():
    """jetspark/connector/session.py starts Spark's JVM alone first
    (``SparkContext._ensure_initialized``, then checks ``SparkContext._gateway``) so that a
    Ctrl-C during start-up need not wait for the whole session: private PySpark names, so
    a PySpark that renames them fails here, by name, rather than in the demo."""
    from pyspark import SparkContext

    assert callable(getattr(SparkContext, "_ensure_initialized", None)), (
        "pyspark.SparkContext._ensure_initialized is gone"
    )
    assert "_gateway" in vars(SparkContext), "pyspark.SparkContext._gateway is gone"
