"""The notebooks in notebooks/ are stored executed, and run as stored.

``make notebooks`` (scripts/run_notebooks.py) runs them and stores their outputs.
Here copies of the stored notebooks run through that same code, one after another
in one kernel on this interpreter (see ``kernel()`` there): every code cell must
run without an error and without a word on stderr (Spark runs quietly), and print
and draw what is stored, output for output (the kinds of output, not their text:
timestamps and chart pixels change from run to run).  A cell that prints or draws
something new, or no longer, means the stored outputs are stale: run
``make notebooks``.
"""

from __future__ import annotations

import copy
import sys

import nbformat
import pytest

from scripts import run_notebooks

NOTEBOOKS = run_notebooks.notebooks()
STALE = "run `make notebooks` to store it with fresh outputs"


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS] == ["01_quickstart.ipynb", "02_streaming.ipynb", "03_retention.ipynb"]


def kinds(nb) -> list[list[tuple]]:
    """Per code cell, its outputs' kinds: a stream's name, a display's MIME types, an error's name."""
    return [
        [(o.output_type, o.get("name") or o.get("ename") or tuple(sorted(o.get("data", {})))) for o in c.outputs]
        for c in nb.cells
        if c.cell_type == "code"
    ]


def stderr(nb) -> str:
    return "".join(
        o.text
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "stream" and o.name == "stderr"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_with_its_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), (
        f"{path.name}: not every code cell ran, in order; {STALE}"
    )
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"], f"{path.name} is stored with an error; {STALE}"
    err = stderr(nb)
    assert not err, f"{path.name} is stored with output on stderr: {err!r}"
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} has no chart"
    # What is stored is what a reader needs: no timings, the generic kernel (a reader's own python3).
    assert not [c.id for c in code if "execution" in c.metadata], f"{path.name} is stored with execution timings"
    assert nb.metadata.kernelspec.name == "python3"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with run_notebooks.kernel(tmp_path_factory.mktemp("notebooks")) as km_cwd:
        yield km_cwd


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_as_stored(path, kernel):
    km, cwd = kernel
    stored = nbformat.read(path, as_version=4)
    nb = run_notebooks.execute(
        copy.deepcopy(stored), km, cwd
    )  # raises CellExecutionError, with the cell and its traceback

    assert km.kernel_spec.argv[0] == sys.executable
    err = stderr(nb)
    assert not err, f"{path.name} wrote to stderr:\n{err}"
    assert kinds(nb) == kinds(stored), f"{path.name} prints or draws other things than it is stored with; {STALE}"
    assert [c.execution_count for c in nb.cells if c.cell_type == "code"] == [
        c.execution_count for c in stored.cells if c.cell_type == "code"
    ]
