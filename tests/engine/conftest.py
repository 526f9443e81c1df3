"""Fixtures the engine's process and file tests share.

``store``: a store path under the test's tmp dir; memory streams live in
/dev/shm, outside it, so whatever a failed test leaves there (and the
per-store directory ``delete_stream`` leaves behind) is removed afterwards.
``children`` and ``procs``: ``subprocess.Popen`` and ``multiprocessing``
children to SIGKILL if a test leaves them running.
``tmpfs(size)``: a tmpfs of that size (``"8m"``) mounted under the test's tmp
dir, to fill (``fill(keep=0)``) and free (``free()``); unmounted afterwards.
Mounting needs root, as CI runs; elsewhere the test is skipped, saying why.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from jetspark.engine import handle as engine_handle


def shm_dir(store: Path) -> Path | None:
    """Where the store's memory streams live, or None before the store exists."""
    try:
        store_id = json.loads((store / "store.json").read_text())["id"]
    except FileNotFoundError:
        return None
    return engine_handle._SHM / f"jetspark-{store_id}"


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


class Disk:
    """A small mounted filesystem (``tmpfs``): ``disk / "store"`` is a path on it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / "filler"

    def __truediv__(self, name: str) -> Path:
        return self.root / name

    def __str__(self) -> str:
        return str(self.root)

    def fill(self, keep: int = 0) -> None:
        """Take every free byte but ``keep``, in a file ``free()`` deletes."""
        with open(self.filler, "ab", buffering=0) as f:
            for size in (1 << 16, 4096, 1):
                try:
                    while True:
                        f.write(b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
        if keep:
            os.truncate(self.filler, max(0, os.path.getsize(self.filler) - keep))

    def free(self) -> None:
        self.filler.unlink()


@pytest.fixture
def tmpfs(tmp_path):
    mounted: list[Path] = []

    def mount(size: str) -> Disk:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs to fill needs root (CI runs as root)")
        root = tmp_path / f"disk{len(mounted)}"
        root.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(root)], capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(root)
        return Disk(root)

    yield mount
    for root in mounted:
        subprocess.run(["umount", "-l", str(root)], check=False)
