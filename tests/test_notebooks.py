"""Every notebook in notebooks/ runs top to bottom without a cell error.

They run in an ipykernel on this very interpreter (the venv's): the
``python3`` kernelspec that ipykernel installs into the venv starts ``python``
from PATH, which need not be the venv's, so the test writes its own
kernelspec into a temporary directory and registers nothing globally.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
KERNEL = "jetspark-test"

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS] == ["01_quickstart.ipynb", "02_streaming.ipynb", "03_retention.ipynb"]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """One kernel for the notebooks, one after another: each starts with ``%reset -f``, so
    a name one notebook defines is not there for the next; what stays is the process, and
    with it Spark's JVM, which would otherwise start again for each (seconds apiece)."""
    import ipykernel  # noqa: F401  (the kernel the notebooks run in; a dev dependency)
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    root = tmp_path_factory.mktemp("notebooks")
    spec_dir = root / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "jetspark test kernel",
                "language": "python",
            }
        )
    )
    specs = KernelSpecManager(kernel_dirs=[str(root / "kernels")], ensure_native_kernel=False)
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)
    work = root / "cwd"
    work.mkdir()
    yield km, work
    if km.has_kernel:
        km.shutdown_kernel(now=True)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path, kernel):
    import nbclient
    import nbformat

    km, work = kernel
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") and not c.get("execution_count") for c in nb.cells if c.cell_type == "code"), (
        f"{path.name} is stored with outputs; clear them"
    )
    nb.cells.insert(0, nbformat.v4.new_code_cell("%reset -f"))
    client = nbclient.NotebookClient(
        nb,
        km=km,  # started by the first notebook's client, kept for the next (see ``kernel``)
        timeout=180,  # per cell
        startup_timeout=60,
        allow_errors=False,
        resources={"metadata": {"path": str(work)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on the first error

    # The kernel really was this interpreter, and the last cell ran.
    assert km.kernel_spec.argv[0] == sys.executable
    assert nb.cells[-1].cell_type != "code" or nb.cells[-1].get("execution_count")
