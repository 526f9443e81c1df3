"""The package's public face: exports, the error tree, and the engine's independence from Spark."""

from __future__ import annotations

import inspect
import json
import os
import pickle
import re
import subprocess
import sys
import sysconfig
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
        assert (back.stream, back.consumer, back.seq, back.floor, back.reason) == (
            "S",
            "spark",
            10,
            5,
            "the consumer is paused",
        )
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


ROOT = Path(__file__).resolve().parents[1]
# What the spark extra brings (pyproject.toml), and what PySpark brings with it.
SPARK_PACKAGES = ("pyspark", "pandas", "py4j")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from the checkout with the venv's own build backend (no download)."""
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(ROOT)],
        check=True, capture_output=True, cwd=dist,
    )  # fmt: skip
    (built,) = dist.glob("jetspark-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel installed with ``--target`` into a directory of its own (its dependencies are the venv's)."""
    site = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
    )
    return site


def test_the_wheel_carries_its_metadata(wheel):
    """py.typed (PEP 561: type checkers read the package's annotations), the one version,
    the extras, and a long description."""
    import email
    import zipfile

    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    assert "jetspark/py.typed" in names and "jetspark/_version.py" in names
    (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    meta = email.message_from_bytes(archive.read(meta_name))
    assert meta["Version"] == jetspark.__version__ and meta["Name"] == "jetspark"
    assert wheel.name.startswith(f"jetspark-{jetspark.__version__}-")
    extras = set(meta.get_all("Provides-Extra"))
    assert {"spark", "test", "lint", "docs", "notebooks", "dev"} <= extras
    requires = meta.get_all("Requires-Dist")
    # The core install: no Spark, no pandas; those come only with the spark extra.
    core = [re.match(r"[A-Za-z0-9_.-]+", r).group().lower() for r in requires if "extra ==" not in r]
    assert "pyarrow" in core and "nats-py" in core and not set(core) & set(SPARK_PACKAGES), core
    assert any(r.startswith("pyspark") and 'extra == "spark"' in r for r in requires)
    assert meta["Description-Content-Type"] == "text/markdown" and len(meta.get_payload()) > 200
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert {"Homepage", "Documentation", "Source", "Changelog", "Issues"} <= set(urls)
    assert any(c.startswith("Typing :: Typed") for c in meta.get_all("Classifier"))


def test_a_type_checker_reads_the_installed_package(wheel, tmp_path):
    """PEP 561 end to end: mypy, checking a user's file against the wheel installed in a venv,
    reads jetspark's annotations (a wrong type is an error naming jetspark's types); without
    py.typed it would skip the package as untyped."""
    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    purelib = Path(site.stdout.strip())
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(purelib), str(wheel)],
        check=True,
        capture_output=True,
    )
    user = tmp_path / "user.py"
    user.write_text(
        "import jetspark\n"
        "version: int = jetspark.__version__\n"
        'err: jetspark.StreamNotFoundError = jetspark.ConsumerNotFoundError(404, 10014, "consumer not found")\n'
    )

    def mypy() -> str:
        args = [
            sys.executable,
            "-m",
            "mypy",
            "--python-executable",
            str(python),
            "--no-incremental",
            "--config-file",
            "/dev/null",
            str(user),
        ]
        return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300).stdout

    out = mypy()
    assert (
        'user.py:2: error: Incompatible types in assignment (expression has type "str", variable has type "int")' in out
    ), out
    assert '(expression has type "ConsumerNotFoundError", variable has type "StreamNotFoundError")' in out, out
    assert "Found 2 errors in 1 file" in out, out
    (purelib / "jetspark" / "py.typed").unlink()
    assert "missing library stubs or py.typed marker" in mypy()


def test_python_m_jetspark_runs_the_cli(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "jetspark", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )

    assert run("--version").stdout.strip() == f"jetspark, version {jetspark.__version__}"
    assert "stream" in run("--help").stdout
    assert run("--store", "s", "stream", "add", "S", "--subjects", "s.>").returncode == 0
    assert "S" in run("--store", "s", "stream", "ls").stdout
    # Not a silent success: a wrong command is the CLI's usage error (exit 2).
    wrong = run("--store", "s", "no-such-command")
    assert wrong.returncode == 2 and "no-such-command" in wrong.stderr


# Run in a fresh interpreter: the engine, the nats:// backend's modules and the CLI, used for real.
CORE_USE = r"""
import importlib, json, os, pkgutil, sys
import jetspark
for pkg in ("jetspark.engine", "jetspark.remote", "jetspark.cli", "jetspark.backend", "jetspark.protocol"):
    mod = importlib.import_module(pkg)
    for info in pkgutil.walk_packages(mod.__path__, pkg + "."):
        if info.name != "jetspark.cli.__main__":
            importlib.import_module(info.name)
spark = {"pyspark", "pandas", "py4j"}
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & spark)))
from click.testing import CliRunner
from jetspark.cli import cli
for args in (
    ["stream", "add", "S", "--subjects", "s.>"], ["pub", "s.a", "one"], ["stream", "ls"],
    ["stream", "info", "S", "--json"], ["sub", "s.>", "--no-follow", "--raw"],
):
    result = CliRunner().invoke(cli, ["--store", "store", *args])
    assert result.exit_code == 0, (args, result.output, result.exception)
import pyarrow as pa
with jetspark.connect("store") as js:
    js.publish_batch(pa.table({"subject": ["s.b"], "data": [b"two"]}), stream="S")
    sub = js.pull_subscribe("s.>", durable="c", stream="S")
    msgs = sub.fetch(2, timeout=10)
    for m in msgs:
        m.ack_sync()
    assert [m.data for m in msgs] == [b"one", b"two"], msgs
    assert sum(b.num_rows for b in js.read_batches("S")) == 2
    assert js.consumer_info("S", "c").ack_floor.stream_seq == 2
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & spark)))
"""


def test_the_core_never_loads_spark_or_pandas(tmp_path):
    """In this venv, where the spark extra is installed: importing the core's modules loads
    neither PySpark nor pandas, and using the CLI and the engine loads no PySpark.  (pyarrow
    itself loads pandas, when it is installed, for conversions such as ``to_pylist`` or
    ``pa.table`` from lists; without pandas they work all the same, as the next test shows.)"""
    out = subprocess.run([sys.executable, "-c", CORE_USE], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    after_imports, after_use = (json.loads(line) for line in out.stdout.splitlines()[-2:])
    assert after_imports == [] and set(after_use) <= {"pandas"}


def _without_spark(tmp_path: Path) -> Path:
    """A directory with every package of this venv except the spark extra's (and the
    checkout's editable jetspark): on ``PYTHONPATH`` for an interpreter started with ``-S``
    (no site-packages), it is an install where ``pip install jetspark`` put the core only."""
    venv_site = Path(sysconfig.get_paths()["purelib"])
    deps = tmp_path / "deps"
    deps.mkdir()
    for entry in venv_site.iterdir():
        top = entry.name.split("-")[0].split(".")[0].lower()
        if (
            top in SPARK_PACKAGES
            or top == "jetspark"
            or entry.name.startswith("__editable__")
            or entry.suffix == ".pth"
        ):
            continue
        (deps / entry.name).symlink_to(entry)
    return deps


def test_the_core_install_works_without_spark(installed, tmp_path):
    """The wheel where PySpark and pandas are not installed at all: the engine, the nats://
    backend's modules and the CLI work; the connector, ``jetspark.register``,
    ``jetspark.local_session`` and ``jetspark demo`` say which extra to install."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SPARK", "PYSPARK"))}
    env["PYTHONPATH"] = f"{installed}{os.pathsep}{_without_spark(tmp_path)}"
    away = tmp_path / "elsewhere"
    away.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-S", *args], cwd=away, env=env, capture_output=True, text=True, timeout=180
        )

    # The isolation is real: neither is importable, and jetspark is the wheel's.
    probe = run(
        "-c",
        "import importlib.util as u, jetspark; print([u.find_spec(n) for n in ('pyspark', 'pandas')], "
        "jetspark.__file__)",
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.startswith("[None, None] ") and probe.stdout.split()[-1].startswith(str(installed))

    used = run("-c", CORE_USE)
    assert used.returncode == 0, used.stderr
    assert [json.loads(line) for line in used.stdout.splitlines()[-2:]] == [[], []]

    for code in (
        "import jetspark.connector",
        "import jetspark; jetspark.register(None)",
        "import jetspark; jetspark.local_session()",
    ):
        failed = run("-c", code)
        assert failed.returncode == 1, (code, failed.stdout, failed.stderr)
        last = failed.stderr.strip().splitlines()[-1]
        assert last.startswith("ModuleNotFoundError: jetspark.connector") and 'pip install "jetspark[spark]"' in last, (
            code,
            failed.stderr,
        )

    cli = ("-m", "jetspark", "--store", str(tmp_path / "store"))
    assert run(*cli, "stream", "add", "Q", "--subjects", "q.>").returncode == 0
    assert run(*cli, "pub", "q.a", "hello").returncode == 0
    assert run(*cli, "sub", "q.>", "--no-follow", "--raw").stdout.splitlines() == ["hello"]
    demo = run(*cli, "demo", "--seconds", "1")
    assert demo.returncode == 1 and 'pip install "jetspark[spark]"' in demo.stderr and "Traceback" not in demo.stderr
    assert "--seconds" in run(*cli, "demo", "--help").stdout  # the demo's own help needs no Spark


def test_bench_without_a_nats_server_says_what_to_install(tmp_path):
    """jetspark bench (a checkout's command) compares the engine with a nats-server: where none
    is on PATH or beside the interpreter, it says which extra brings one instead of failing
    inside the benchmark script."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = "/usr/bin:/bin"
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{_without_spark(tmp_path)}"
    # The base interpreter: no venv, so no nats-server beside it.
    done = subprocess.run(
        [sys._base_executable, "-S", "-m", "jetspark", "bench", "--quick"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "found none on PATH" in done.stderr and "'.[test]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_wheel_works_like_a_checkout(installed, wheel, tmp_path):
    """The wheel carries what the package needs (Spark's settings and log4j config as package
    data, the LICENSE) and works outside the source tree: the CLI (without ``bench``, whose
    script lives in the checkout), the demo's help, and a store made, written and read.
    Installed with ``--target`` beside the venv's dependencies (no download)."""
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert {"jetspark/connector/conf/spark-defaults.conf", "jetspark/connector/conf/log4j2.properties"} <= set(names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
    assert not any(n.startswith(("benchmarks/", "tests/", "examples/", "natsdev/")) for n in names)

    site = installed
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}

    def run(*args: str) -> str:
        return subprocess.run(
            [sys.executable, *args], cwd=away, env=env, capture_output=True, text=True, check=True
        ).stdout

    where = run(
        "-c",
        "import jetspark, jetspark.connector.session as s; print(jetspark.__file__); "
        "print(s.spark_conf()['spark.driver.extraJavaOptions'])",
    )
    package, log4j = where.splitlines()
    assert package.startswith(str(site)) and log4j.endswith(f"file:{site}/jetspark/connector/conf/log4j2.properties")
    helptext = run("-m", "jetspark.cli", "--help")
    assert "stream" in helptext and "bench" not in helptext
    assert "--seconds" in run("-m", "jetspark.demo", "--help")
    store = str(tmp_path / "store")
    run("-m", "jetspark.cli", "--store", store, "stream", "add", "S", "--subjects", "s.>")
    run("-m", "jetspark.cli", "--store", store, "pub", "s.a", "hello {{Count}}", "--count", "2")
    assert run("-m", "jetspark.cli", "--store", store, "sub", "s.>", "--no-follow", "--raw").split("\n")[:2] == [
        "hello 1",
        "hello 2",
    ]
