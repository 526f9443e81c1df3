"""Fixtures the engine's process and file tests share.

``store``: a store path under the test's tmp dir; memory streams live in
/dev/shm, outside it, so whatever a failed test leaves there (and the
per-store directory ``delete_stream`` leaves behind) is removed afterwards.
``children`` and ``procs``: ``subprocess.Popen`` and ``multiprocessing``
children to SIGKILL if a test leaves them running.
(``tmpfs``, a small filesystem to fill, is in tests/conftest.py.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jetspark.engine import store_dir


def shm_dir(store: Path) -> Path | None:
    """Where the store's memory streams live, or None before the store exists."""
    try:
        store_id = json.loads((store / "store.json").read_text())["id"]
    except FileNotFoundError:
        return None
    return store_dir._SHM / f"jetspark-{store_id}"


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "store"
    yield path
    shm = shm_dir(path)
    if shm is not None:
        shutil.rmtree(shm, ignore_errors=True)


@pytest.fixture
def children():
    procs: list = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.fixture
def procs():
    started: list = []
    yield started
    for p in started:
        if p.is_alive():
            p.kill()
        p.join()
