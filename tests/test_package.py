"""The package's public face: exports, the error tree, and the engine's independence from Spark."""

from __future__ import annotations

import inspect
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import jetspark
import jetspark.errors as errors


def test_all_is_sorted_and_complete():
    assert jetspark.__all__ == sorted(jetspark.__all__)
    public = {n for n, v in vars(jetspark).items() if not n.startswith("_") and not inspect.ismodule(v)}
    assert public - {"annotations"} == set(jetspark.__all__)


ERROR_CLASSES = [cls for cls in vars(errors).values() if inspect.isclass(cls) and issubclass(cls, errors.JetSparkError)]


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_pickles(cls):
    # Spark ships executor errors to the driver by pickling them.
    if issubclass(cls, errors.APIError):
        err = cls(404, 10059, "stream not found")
        back = pickle.loads(pickle.dumps(err))
        assert (back.code, back.err_code, back.description) == (404, 10059, "stream not found")
    elif issubclass(cls, errors.StoreIOError):
        back = pickle.loads(pickle.dumps(cls(28, "No space left on device", "/s/blk/1.dat", "publishing")))
        assert (back.errno, back.filename, back.path, back.action) == (28, "/s/blk/1.dat", "/s/blk/1.dat", "publishing")
        assert isinstance(back, OSError) and "nothing was stored" in str(back)
    elif issubclass(cls, errors.StoreError):
        back = pickle.loads(pickle.dumps(cls("state: both header slots fail their checksum", "/s/state")))
        assert back.path == "/s/state" and str(back) == "state: both header slots fail their checksum"
    elif cls is errors.AckFloorError:
        back = pickle.loads(pickle.dumps(cls("S", "spark", 10, 5, "the consumer is paused")))
        assert (back.stream, back.consumer, back.seq, back.floor, back.reason) == ("S", "spark", 10, 5, "the consumer is paused")
        assert "'spark'" in str(back) and "seq 10" in str(back) and "stream seq 5" in str(back)
    elif cls is errors.NoStreamResponseError:
        back = pickle.loads(pickle.dumps(cls("orders.x")))
        assert back.subject == "orders.x"
    else:
        back = pickle.loads(pickle.dumps(cls("what went wrong")))
        assert str(back) == "what went wrong"
    assert type(back) is cls


@pytest.mark.parametrize(
    "err_code, cls, builtin",
    [
        (10059, errors.StreamNotFoundError, LookupError),
        (10014, errors.ConsumerNotFoundError, LookupError),
        (10037, errors.MsgNotFoundError, LookupError),
        (10071, errors.BadRequestError, ValueError),
        (10077, errors.ServiceUnavailableError, errors.APIError),
        (10052, errors.ServerError, errors.APIError),
    ],
)
def test_api_errors_map_to_typed_classes(err_code, cls, builtin):
    err = errors.api_error(err_code, err="x", seq=1, id="")
    assert type(err) is cls and isinstance(err, builtin) and err.err_code == err_code


def test_fetch_timeout_is_a_timeout_error():
    assert issubclass(errors.FetchTimeoutError, TimeoutError)


def test_engine_never_imports_spark():
    code = "import jetspark, jetspark.engine.handle, jetspark.engine.bulk, sys; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_wheel_works_like_a_checkout(tmp_path):
    """The wheel carries what the package needs (Spark's settings and log4j config as package
    data, the LICENSE) and works outside the source tree: the CLI (without ``bench``, whose
    script lives in the checkout), the demo's help, and a store made, written and read.
    Installed with ``--target`` beside the venv's dependencies (no download)."""
    import zipfile

    root = Path(__file__).resolve().parents[1]
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(root)],
        check=True, capture_output=True, cwd=tmp_path,
    )  # fmt: skip
    (wheel,) = dist.glob("jetspark-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"jetspark/connector/conf/spark-defaults.conf", "jetspark/connector/conf/log4j2.properties"} <= set(names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
    assert not any(n.startswith(("benchmarks/", "tests/")) for n in names)

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)], check=True, capture_output=True)
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}

    def run(*args: str) -> str:
        return subprocess.run([sys.executable, *args], cwd=away, env=env, capture_output=True, text=True, check=True).stdout

    where = run("-c", "import jetspark, jetspark.connector.session as s; print(jetspark.__file__); print(s.spark_conf()['spark.driver.extraJavaOptions'])")
    package, log4j = where.splitlines()
    assert package.startswith(str(site)) and log4j.endswith(f"file:{site}/jetspark/connector/conf/log4j2.properties")
    helptext = run("-m", "jetspark.cli", "--help")
    assert "stream" in helptext and "bench" not in helptext
    assert "--seconds" in run("-m", "jetspark.demo", "--help")
    store = str(tmp_path / "store")
    run("-m", "jetspark.cli", "--store", store, "stream", "add", "S", "--subjects", "s.>")
    run("-m", "jetspark.cli", "--store", store, "pub", "s.a", "hello {{Count}}", "--count", "2")
    assert run("-m", "jetspark.cli", "--store", store, "sub", "s.>", "--no-follow", "--raw").split("\n")[:2] == ["hello 1", "hello 2"]
