"""``make notebooks``: run the notebooks in notebooks/ top to bottom and store them with their outputs.

    .venv/bin/python scripts/run_notebooks.py [NOTEBOOK ...]

The notebooks are stored executed, so that a code host shows their tables and
charts.  They run one after another in one ipykernel on this interpreter (the
venv's), from a kernelspec written into a temporary directory: the ``python3``
kernelspec Jupyter finds first may be a user's own, for another interpreter, and
nothing is registered globally.  Each
notebook starts with ``%reset -f`` (not stored), so a name one defines is not
there for the next; what stays is the process, and with it Spark's JVM, which
would otherwise start again for each (seconds apiece).

What is stored is what a reader needs and no more: the outputs, execution counts
from 1 in each notebook, the notebook's metadata as it was (no kernel version,
no timings).  The kernel's working directory is a temporary one, and the
notebooks keep their data under ``tempfile``; their outputs print no paths.

tests/test_notebooks.py runs the stored notebooks through ``kernel()`` and
``execute()`` below, on copies, and compares what they print with what is stored.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
KERNEL = "jetspark-notebooks"
CELL_TIMEOUT = 180  # seconds, per cell
JVM_BANNER = "WARNING: Using incubator modules: jdk.incubator.vector"


def notebooks() -> list[Path]:
    return sorted(NOTEBOOK_DIR.glob("*.ipynb"))


@contextlib.contextmanager
def kernel(root: Path) -> Iterator[tuple]:
    """A kernel manager for an ipykernel on this interpreter, its kernelspec under root, and the
    kernel's working directory (also under root).  The first ``execute()`` starts the kernel;
    it is shut down on leaving."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = root / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "jetspark notebooks (this interpreter)",
                "language": "python",
            }
        )
    )
    specs = KernelSpecManager(kernel_dirs=[str(root / "kernels")], ensure_native_kernel=False)
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)
    cwd = root / "cwd"
    cwd.mkdir()
    try:
        yield km, cwd
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)


def execute(nb: nbformat.NotebookNode, km, cwd: Path) -> nbformat.NotebookNode:
    """Run nb's code cells in km's kernel, in place, and leave nb as it is stored: its outputs,
    execution counts from 1, its metadata as before.  Raises nbclient's CellExecutionError
    (the cell and its traceback) on the first cell that fails."""
    metadata = json.loads(json.dumps(nb.metadata))
    nb.cells.insert(0, nbformat.v4.new_code_cell("%reset -f"))
    try:
        NotebookClient(
            nb,
            km=km,
            timeout=CELL_TIMEOUT,
            startup_timeout=60,
            allow_errors=False,
            record_timing=False,
            coalesce_streams=True,  # one stdout output per cell, however the prints were flushed
            resources={"metadata": {"path": str(cwd)}},
        ).execute()
    finally:
        del nb.cells[0]
        nb.metadata = nbformat.from_dict(metadata)
    # The kernel counts on across notebooks; each notebook reads from 1.  A cell that did not
    # run (an empty one) keeps no count, and tests/test_notebooks.py finds it.
    for count, cell in enumerate((c for c in nb.cells if c.cell_type == "code" and c.execution_count), start=1):
        cell.execution_count = count
        cell.outputs = [o for o in map(_without_jvm_banner, cell.outputs) if o is not None]
        for output in cell.outputs:
            if output.output_type == "execute_result":
                output.execution_count = count
    return nb


def _without_jvm_banner(output):
    """The output without the line the JVM writes to stderr as Spark starts it (Spark's launcher
    always adds that module; the line says nothing about the notebook); None if nothing is left.
    The kernel passes what its child processes write on to the running cell, so anything else
    Spark's JVM writes, a warning or a log line, stays and shows."""
    if output.output_type != "stream" or output.name != "stderr":
        return output
    output.text = "".join(line for line in output.text.splitlines(keepends=True) if line.rstrip("\n") != JVM_BANNER)
    return output if output.text else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip("`"))
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks to run (default: every notebook in notebooks/)")
    args = parser.parse_args(argv)
    paths = args.paths or notebooks()
    with tempfile.TemporaryDirectory(prefix="jetspark-notebooks-") as root, kernel(Path(root)) as (km, cwd):
        for path in paths:
            print(f"running {path} ...", flush=True)
            nb = nbformat.read(path, as_version=4)
            execute(nb, km, cwd)
            nbformat.write(nb, path)
            print(f"  stored with its outputs: {path.stat().st_size:,} bytes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
