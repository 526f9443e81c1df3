"""The command tree as a whole: help (and docs/guides/cli.md) for every command, global options, errors, demo, bench."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import click
import pytest

import jetspark
from jetspark.cli import cli as jetspark_cli
from jetspark.cli import tools
from jetspark.cli.state import DEFAULT_STORE

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "guides" / "cli.md").read_text()


def walk(command: click.Command, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from walk(sub, path + (name,))


COMMANDS = list(walk(jetspark_cli))
LEAVES = [path for path, c in COMMANDS if not isinstance(c, click.Group)]
# Every command that prints data takes --json.
READ_COMMANDS = [
    ("stream", "add"),
    ("stream", "edit"),
    ("stream", "info"),
    ("stream", "ls"),
    ("stream", "report"),
    ("stream", "subjects"),
    ("stream", "find"),
    ("stream", "seal"),
    ("stream", "copy"),
    ("stream", "get"),
    ("stream", "view"),
    ("stream", "purge"),
    ("stream", "backup"),
    ("stream", "restore"),
    ("consumer", "add"),
    ("consumer", "edit"),
    ("consumer", "info"),
    ("consumer", "ls"),
    ("consumer", "report"),
    ("consumer", "next"),
    ("pub",),
    ("sub",),
    ("fetch",),
    ("context", "add"),
    ("context", "info"),
    ("context", "ls"),
]


def test_the_issue_s_commands_exist():
    assert set(LEAVES) == {
        *(
            ("stream", c)
            for c in (
                "add",
                "edit",
                "info",
                "ls",
                "rm",
                "purge",
                "get",
                "view",
                "rmm",
                "report",
                "check",
                "backup",
                "restore",
                "subjects",
                "find",
                "seal",
                "copy",
            )
        ),
        *(("consumer", c) for c in ("add", "edit", "info", "ls", "report", "rm", "next", "pause", "resume")),
        *(("context", c) for c in ("add", "info", "ls", "select", "unselect", "rm")),
        ("pub",),
        ("sub",),
        ("fetch",),
        ("demo",),
        ("bench",),
        ("completion",),
        ("man",),
    }


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "jetspark")
def test_every_command_has_help_with_an_example_and_is_in_the_cli_guide(cli, path):
    command = dict(COMMANDS)[path]
    assert (command.help or "").strip(), f"jetspark {' '.join(path)} has no help text"
    r = cli(*path, "--help")
    assert "Example:" in r.stdout
    assert re.search(r"^\s+jetspark .*" + " ".join(path), r.stdout, re.M), "the example should use the command itself"
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"jetspark {' '.join(path)} {param.opts[0]} has no help"
    assert f"jetspark {' '.join(path)}".strip() in GUIDE, (
        f"docs/guides/cli.md does not mention jetspark {' '.join(path)}"
    )


@pytest.mark.parametrize("path", READ_COMMANDS, ids=" ".join)
def test_read_commands_take_json(path):
    command = dict(COMMANDS)[path]
    assert any("--json" in p.opts for p in command.params if isinstance(p, click.Option))


def test_cli_uses_only_the_public_api():
    for source in (ROOT / "jetspark" / "cli").glob("*.py"):
        text = source.read_text()
        assert "jetspark.engine" not in text, f"{source.name} imports engine internals"
        assert not re.search(r"\bjs\._|\bmsg\._|\bsub_?\._", text), f"{source.name} uses a private attribute of the API"


def test_importing_the_cli_is_light():
    code = (
        "import sys, jetspark.cli; "
        "print(sorted(m for m in ('numpy', 'pyarrow', 'pyspark', 'tqdm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_console_script_and_module():
    (ep,) = [e for e in metadata.entry_points(group="console_scripts") if e.name == "jetspark"]
    assert ep.value == "jetspark.cli:main"
    out = subprocess.run(
        [sys.executable, "-m", "jetspark.cli", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"jetspark, version {jetspark.__version__}"


def test_default_store_is_conf_s():
    tomllib = pytest.importorskip("tomllib")
    conf = tomllib.loads((ROOT / "conf" / "jetspark.toml").read_text())
    assert DEFAULT_STORE == conf["store"]["path"]
    assert jetspark_cli.params[0].default == DEFAULT_STORE


def test_store_comes_from_flag_then_env_then_default(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    flag, env = tmp_path / "flag", tmp_path / "env"
    cli("--store", flag, "stream", "add", "F")
    cli("stream", "add", "E", env={"JETSPARK_STORE": str(env)})
    cli("stream", "add", "D", env={"JETSPARK_STORE": None})
    assert cli.json("--store", flag, "stream", "ls", "--names", env={"JETSPARK_STORE": str(env)}) == ["F"]
    assert cli.json("stream", "ls", "--names", env={"JETSPARK_STORE": str(env)}) == ["E"]
    assert cli.json("stream", "ls", "--names", env={"JETSPARK_STORE": None}) == ["D"]
    assert (tmp_path / "jetspark-data" / "store.json").exists()
    assert cli.json("--store", f"file://{flag}", "stream", "ls", "--names") == ["F"]


def test_a_missing_store_is_not_created(cli):
    r = cli("stream", "ls", code=1)
    assert r.stderr.strip() == (
        f"Error: no jetspark store at {cli.store} (choose one with --store or JETSPARK_STORE; "
        "`jetspark stream add` creates it)"
    )
    cli("pub", "x", "y", code=1)
    assert not cli.store.exists()


def test_server_runs_the_commands_on_a_real_nats_server(cli, nats_server):
    url = nats_server.url
    cli("--server", url, "stream", "add", "CLI_S", "--subjects", "cli.>")
    cli("--server", url, "pub", "cli.x", "hello", "--count", "3")
    info = cli.json("--server", url, "stream", "info", "CLI_S")
    assert info["state"]["messages"] == 3
    assert cli("-s", url, "stream", "ls", "--names").stdout.split() == ["CLI_S"]  # -s, as with nats
    # A server without a scheme is a NATS server, as with nats, not a directory of that name.
    assert cli("-s", url.removeprefix("nats://"), "stream", "ls", "--names").stdout.split() == ["CLI_S"]
    r = cli("-s", url, "stream", "info", "NOPE", code=1)
    assert r.stderr.strip() == "Error: stream 'NOPE' not found (err_code 10059); streams: CLI_S"
    cli("--server", url, "stream", "rm", "CLI_S", "-f")
    # The demo and the benchmarks run on the embedded engine only.
    r = cli("--server", url, "demo", code=1)
    assert "this command runs on the embedded engine" in r.stderr
    # A password in the URL is not printed back.
    r = cli("--server", url.replace("nats://", "nats://app:s3cret@"), "demo", code=1)
    assert "this command runs on the embedded engine" in r.stderr and "s3cret" not in r.stderr


def test_an_unreachable_server_is_one_clear_line(cli):
    r = cli("--server", "nats://127.0.0.1:1", "stream", "ls", code=1)
    assert r.stderr.startswith("Error: ") and len(r.stderr.strip().splitlines()) == 1


def test_list_is_ls_as_with_nats(cli):
    cli("stream", "add", "S", "--subjects", "s.>")
    cli("consumer", "add", "S", "C")
    assert cli("stream", "list", "--names").stdout == cli("stream", "ls", "--names").stdout == "S\n"
    assert cli("consumer", "list", "S", "--names").stdout == "C\n"
    assert cli.json("stream", "list") == cli.json("stream", "ls")
    r = cli("stream", "list", "--bogus", code=2)
    assert "stream ls [OPTIONS]" in r.stderr  # the alias runs as ls


def test_verbose_and_log_level_show_the_jetspark_loggers(cli):
    cli("stream", "add", "S", "--subjects", "s.>", "--max-msgs", "2")
    assert cli("stream", "ls", "--names").stderr == ""  # default: warnings and errors only
    r = cli("-vv", "pub", "s.a", "x", "--count", "5")
    assert "DEBUG jetspark: opened store " in r.stderr and "DEBUG jetspark: opened stream S: 0 messages" in r.stderr
    r = cli("--log-level", "DEBUG", "stream", "info", "S")
    assert "DEBUG jetspark: opened stream S: 2 messages, seq 4..5" in r.stderr
    r = cli("-v", "stream", "info", "S")
    assert "DEBUG" not in r.stderr  # -v is INFO
    assert cli("stream", "info", "S").stderr == ""  # the next invocation is quiet again


def test_an_ordinary_close_of_a_server_connection_logs_nothing_at_info(cli, nats_server):
    r = cli("-v", "--server", nats_server.url, "stream", "ls", "--names")
    assert "disconnected" not in r.stderr and "INFO" not in r.stderr
    r = cli("-vv", "--server", nats_server.url, "stream", "ls", "--names")
    assert "DEBUG jetspark.remote: disconnected from" in r.stderr and "(closed)" in r.stderr


def test_trace_prints_each_call_and_its_answer(cli, nats_server):
    cli("stream", "add", "S", "--subjects", "s.>")
    r = cli("--trace", "pub", "s.a", "hi")
    assert r.stderr.splitlines() == [
        ">>> publish('s.a', b'hi')",
        "<<< PubAck(stream='S', seq=1, domain=None, duplicate=None, val=None)",
    ]
    assert "Published 2 bytes to s.a" in r.stdout  # the output itself is unchanged
    r = cli("--trace", "stream", "info", "NOPE", code=1)
    assert ">>> stream_info('NOPE')\n<<< StreamNotFoundError: stream not found (err_code 10059)" in r.stderr
    r = cli("--trace", "--server", nats_server.url, "stream", "ls", "--names")
    assert r.stderr.startswith(">>> streams_info()\n<<< [")


def test_errors_are_one_line_and_debug_shows_the_traceback(cli):
    cli("stream", "add", "S")
    r = cli("stream", "info", "NOPE", code=1)
    assert r.stderr == "Error: stream 'NOPE' not found (err_code 10059); streams: S\n"
    assert r.stdout == ""
    from click.testing import CliRunner

    r = CliRunner(env={"JETSPARK_STORE": str(cli.store)}).invoke(jetspark_cli, ["--debug", "stream", "info", "NOPE"])
    assert r.exit_code == 1
    assert isinstance(r.exception, jetspark.StreamNotFoundError)


def test_unexpected_errors_are_one_line_too(cli, monkeypatch):
    cli("stream", "add", "S")

    def boom(self, *a, **kw):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr("jetspark.engine.handle.JetStream.streams_info", boom)
    r = cli("stream", "ls", code=1)
    assert r.stderr == "Error: RuntimeError: disk on fire (an unexpected error; rerun with --debug for the traceback)\n"


def test_version(cli):
    assert cli("--version").stdout.strip() == f"jetspark, version {jetspark.__version__}"


# ---------------------------------------------------------------------- demo and bench


def test_demo_runs_jetspark_demo_on_the_store(cli, monkeypatch):
    calls = []

    def fake_main(argv):
        calls.append(list(argv))
        print("demo ran")
        return 0

    monkeypatch.setattr("jetspark.demo.main", fake_main)
    assert cli("demo").stdout == "demo ran\n"
    cli("--store", "/elsewhere", "demo", "--seconds", "5", "--rate", "100")
    assert calls == [["--store", str(cli.store)], ["--store", "/elsewhere", "--seconds", "5", "--rate", "100"]]
    monkeypatch.setattr("jetspark.demo.main", lambda argv: 3)
    cli("demo", code=3)


FAKE_BENCH = textwrap.dedent(
    """
    import sys, time
    def log(m):
        print(time.strftime("[%H:%M:%S] ") + m, file=sys.stderr, flush=True)
    log("row 1: single publish")
    log("1 single publish 1/3: 100,000 msg/s")
    log("row 3: range read")
    print("| # | what | result |")
    print("| 1 | publish | ok |", "args=" + " ".join(sys.argv[1:]))
    sys.exit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0)
    """
)


@pytest.fixture
def fake_bench(tmp_path, monkeypatch):
    script = tmp_path / "benchmarks" / "bench_engine.py"
    script.parent.mkdir()
    script.write_text(FAKE_BENCH)
    monkeypatch.setattr(tools, "BENCH_SCRIPT", script)
    return script


def test_bench_runs_the_script_and_prints_its_table(cli, fake_bench):
    r = cli("bench", "--quick")
    assert "| 1 | publish | ok | args=--quick" in r.stdout
    assert "row 1: single publish" in r.stderr  # piped: the script's own log, no bar
    r = cli("bench", "--only", "1,3", "--dir", fake_bench.parent, "--progress")
    assert f"args=--only 1,3 --dir {fake_bench.parent}" in r.stdout
    assert "bench" in r.stderr and "row" in r.stderr and "[" not in r.stderr.replace("[00:", "")
    r = cli("bench", "--dir", "7", code=1)
    assert "the benchmark script exited with status 7" in r.stderr


def test_bench_without_the_script(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(tools, "BENCH_SCRIPT", tmp_path / "nowhere" / "bench_engine.py")
    r = cli("bench", code=1)
    assert "benchmark script not found" in r.stderr and "source checkout" in r.stderr
    # Where the script is not (an installed wheel), --help does not offer bench.
    assert "bench" not in cli("--help").stdout
    monkeypatch.undo()
    assert "bench" in cli("--help").stdout


def test_bench_script_location():
    assert tools.BENCH_SCRIPT == ROOT / "benchmarks" / "bench_engine.py"


def test_an_api_error_without_an_err_code_shows_its_status():
    from jetspark.cli.state import describe_error

    assert (
        describe_error(jetspark.errors.APIError(409, 0, "Consumer is push based"))
        == "Consumer is push based (status 409)"
    )
    assert (
        describe_error(jetspark.errors.APIError(404, 10059, "stream not found")) == "stream not found (err_code 10059)"
    )
