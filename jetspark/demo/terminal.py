"""The demo's terminal: Ctrl-C handled once, in order, and the JVM's startup chatter kept off stderr."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from typing import Optional

__all__ = ["CtrlC", "quiet_jvm_startup"]


class CtrlC:
    """The first Ctrl-C sets ``flag`` (the demo then winds down in order); a second one
    raises KeyboardInterrupt, and so does the first while ``immediate`` is set (Spark
    starting, nothing to wind down).  ``restore()`` puts back the handler main() started
    with.  Only the main thread handles signals; elsewhere this does nothing."""

    def __init__(self, flag: threading.Event) -> None:
        self.flag = flag
        self.immediate = False
        self.log_level: Optional[int] = None
        _MUTED.clear()
        self.active = threading.current_thread() is threading.main_thread()
        self.original = signal.getsignal(signal.SIGINT) if self.active else None

    def install(self) -> None:
        if self.active:
            signal.signal(signal.SIGINT, self._handle)

    def restore(self) -> None:
        if self.active and self.original is not None:
            signal.signal(signal.SIGINT, self.original)
        if self.log_level is not None:
            logging.getLogger().setLevel(self.log_level)

    def _handle(self, signum, frame) -> None:
        again = self.flag.is_set()
        self.announce()
        if again or self.immediate:
            raise KeyboardInterrupt

    def announce(self) -> None:
        """Say it once; from then on the demo is stopping, and what Spark's JVM and its
        Python processes (in the terminal's process group, so they got the Ctrl-C too) or
        py4j write about being interrupted is noise: it is dropped."""
        self.flag.set()
        if not _MUTED.is_set():
            _MUTED.set()
            self.log_level = logging.getLogger().level
            logging.getLogger().setLevel(logging.CRITICAL)  # py4j logs interrupted calls
            _quiet_accumulator_server()
            print("-- interrupted: stopping", flush=True)


def _quiet_accumulator_server() -> None:
    """PySpark's accumulator server, a thread of this process, prints a traceback (EOFError)
    when the JVM drops its connection, as it does when a job is cut short (a Ctrl-C during
    the warm-up job, say): say nothing, the demo is stopping."""
    spark_context = getattr(sys.modules.get("pyspark"), "SparkContext", None)
    server = getattr(getattr(spark_context, "_active_spark_context", None), "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, client_address: None


# What the JVM prints on stderr while it starts, whatever log4j says: a JDK notice about
# Spark's --add-modules, and Spark's note on the shell log level.
_JVM_CHATTER = (
    b"WARNING: Using incubator modules",
    b"Setting default log level to",
    b"To adjust logging level use sc.setLogLevel",
)


# Set once the demo is interrupted: the JVM's stderr (and its children's) is dropped.
_MUTED = threading.Event()


@contextlib.contextmanager
def quiet_jvm_startup():
    """Launch the JVM with its stderr piped through a filter that drops the startup chatter.

    The JVM inherits the pipe for its whole life; a thread forwards every other
    line (errors, Python worker tracebacks) to this process's stderr.  Does
    nothing if the JVM already runs (a session created earlier in this process).
    """
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        yield
        return
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    terminal = os.dup(2)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    threading.Thread(target=_forward_stderr, args=(read_fd, terminal), name="jetspark-demo-stderr", daemon=True).start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)  # this process writes to the terminal again; the JVM keeps the pipe


def _forward_stderr(read_fd: int, out_fd: int) -> None:
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        pending = b""
        while chunk := pipe.read(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not line.startswith(_JVM_CHATTER) and not _MUTED.is_set():
                    os.write(out_fd, line + b"\n")
        if pending and not pending.startswith(_JVM_CHATTER) and not _MUTED.is_set():
            os.write(out_fd, pending)
