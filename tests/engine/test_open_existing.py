"""``jetspark.connect(path, create=False)``: open an existing store, never make one.

The Spark connector opens every store this way (jetspark/connector/store.py),
so a mistyped ``store`` option fails instead of leaving an empty store behind.
"""

from __future__ import annotations

import os
import pickle

import pytest

import jetspark
from jetspark.engine.handle import JetStream
from jetspark.errors import StoreError


def _tree(root) -> list[str]:
    """Every file and directory under root."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda p: None, "the directory does not exist"),
        (lambda p: p.mkdir(), "the directory holds no store.json and no streams/"),
        (lambda p: p.write_text("not a store"), "it is not a directory"),
        (lambda p: (p / "streams").mkdir(parents=True), "the directory holds no store.json"),
    ],
    ids=["missing", "empty-dir", "a-file", "no-store-json"],
)
@pytest.mark.parametrize("spelling", ["path", "file-url"])
def test_no_store_is_an_error_naming_the_path_and_creates_nothing(tmp_path, make, reason, spelling):
    path = tmp_path / "store"
    make(path)
    before = _tree(tmp_path)
    with pytest.raises(StoreError) as e:
        jetspark.connect(path if spelling == "path" else f"file://{path}", create=False)
    assert str(e.value) == (
        f"no jetspark store at {path}: {reason}; jetspark.connect(path) (create=True, "
        "the default) or `jetspark stream add` creates one"
    )
    assert e.value.path == str(path)
    assert _tree(tmp_path) == before  # nothing created, not even a lock file
    again = pickle.loads(pickle.dumps(e.value))  # Spark ships it from an executor
    assert (type(again), str(again), again.path) == (StoreError, str(e.value), str(path))


def test_a_missing_parent_is_not_created(tmp_path):
    with pytest.raises(StoreError):
        jetspark.connect(tmp_path / "x" / "y" / "store", create=False)
    assert os.listdir(tmp_path) == []


def test_an_existing_store_opens(tmp_path):
    with jetspark.connect(tmp_path / "store") as js:
        js.add_stream(name="S", subjects=["s.>"])
        js.publish("s.a", b"x")
    with jetspark.connect(tmp_path / "store", create=False) as js:
        assert js.stream_info("S").state.messages == 1
        js.publish("s.a", b"y")  # an existing store is fully usable
        assert js.stream_info("S").state.messages == 2


def test_create_is_for_the_embedded_engine():
    with pytest.raises(TypeError, match="create= apply to the embedded engine"):
        jetspark.connect("nats://127.0.0.1:4222", create=False)
    with pytest.raises(TypeError, match="create must be True or False, not 'no'"):
        JetStream("/nonexistent", create="no")
