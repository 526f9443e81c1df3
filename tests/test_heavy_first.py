"""tests/heavy_first.py, the order ``make test`` hands files to its workers in."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests import heavy_first

ROOT = Path(__file__).resolve().parents[1]


def test_every_listed_file_exists_once():
    assert len(set(heavy_first.LONGEST)) == len(heavy_first.LONGEST)
    missing = [p for p in heavy_first.LONGEST if not (ROOT / p).is_file()]
    assert missing == [], "renamed or removed: update tests/heavy_first.py"


def test_the_longest_files_come_first_and_each_file_keeps_its_order():
    ids = [
        "tests/cli/test_app.py::a",
        "tests/cli/test_app.py::b",
        "tests/connector/test_streaming.py::s",
        "tests/engine/test_log.py::c",
        "tests/engine/test_log.py::d",
        "tests/engine/test_log.py::e",
        "tests/test_docs.py::x[1]",
        "tests/test_docs.py::x[0]",
    ]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    heavy_first.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/test_docs.py::x[1]",
        "tests/test_docs.py::x[0]",
        "tests/connector/test_streaming.py::s",
        "tests/engine/test_log.py::c",  # the rest: xdist's own order, the most tests first
        "tests/engine/test_log.py::d",
        "tests/engine/test_log.py::e",
        "tests/cli/test_app.py::a",
        "tests/cli/test_app.py::b",
    ]
