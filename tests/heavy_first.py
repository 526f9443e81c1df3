"""A pytest plugin for ``make test`` (``-p tests.heavy_first``): the longest test files start first.

Under ``--dist loadfile`` each pytest-xdist worker takes whole files, by default those with the
most tests first, which puts the documentation, notebook and example runs (few tests, each a JVM
of its own per Spark page, notebook or script) last.  When the longest of them starts last, one
worker runs it alone while the other idles.  Handing out the longest files first (longest
processing time first) lets the short ones fill in at the end; the rest keep xdist's order (most
tests first).  ``make test`` passes ``--no-loadscope-reorder`` so that xdist keeps this order.
Only the order changes: every test runs, each file's tests in their own order, in one process.
"""

from __future__ import annotations

import pytest

# The longest files of a full run, longest first (per-file durations summed over a run; a file
# missing here, or renamed, just keeps its place among the rest).
LONGEST = (
    "tests/test_docs.py",
    "tests/connector/test_streaming.py",
    "tests/connector/test_input_errors.py",
    "tests/connector/test_batch_read.py",
    "tests/connector/test_exactly_once.py",
    "tests/test_notebooks.py",
    "tests/connector/test_sink.py",
    "tests/connector/test_consumers.py",
    "tests/connector/test_options.py",
    "tests/connector/test_cluster_streaming.py",
    "tests/test_examples.py",
    "tests/cluster/test_consumer_pause.py",
    "tests/connector/test_sink_blank_ids.py",
)


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def rank(nodeid: str) -> int:
    path = _file(nodeid)
    return LONGEST.index(path) if path in LONGEST else len(LONGEST)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    count: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        path = _file(item.nodeid)
        count[path] = count.get(path, 0) + 1
        first.setdefault(path, i)

    def key(item: pytest.Item) -> tuple[int, int, int]:
        path = _file(item.nodeid)
        return rank(item.nodeid), -count[path], first[path]

    items.sort(key=key)  # stable: a file's tests stay together, in their order
