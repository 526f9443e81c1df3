"""jetspark context: saved stores and servers with their credentials, as `nats context`.

Every test keeps its contexts in its own directory (the ``cli`` fixture sets
JETSPARK_CONFIG_DIR), never in the user's.  Contexts are used for real: a
store context by the engine on a tmp dir, a server context against a
nats-server that requires a password, so the context's credentials are what
lets the command in.
"""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from tests.servers import NatsServer

NO_ENV = {"JETSPARK_STORE": None, "JETSPARK_CONTEXT": None}
SECRET = "s3cret-Pa55word-7781"
TOKEN = "tok-91c2-never-shown"


def run(cli, *args, code=0, input=None, env=None):
    """``jetspark ARGS`` with neither JETSPARK_STORE nor JETSPARK_CONTEXT set (unless ``env`` sets them)."""
    return cli(*args, code=code, input=input, env={**NO_ENV, **(env or {})})


def context_file(cli, name):
    return cli.config / "context" / f"{name}.json"


# ---------------------------------------------------------------------- a store context


def test_a_selected_store_context_is_where_commands_go(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run(cli, "context", "add", "local", "--store", "data", "--description", "laptop", "--select")
    assert f"Store: {tmp_path / 'data'}" in r.stdout  # made absolute: it means the same from anywhere
    monkeypatch.chdir(tmp_path.parent)
    run(cli, "stream", "add", "ORDERS", "--subjects", "orders.>")
    run(cli, "pub", "orders.new", "hello")
    assert (tmp_path / "data" / "store.json").exists()
    assert json.loads(run(cli, "stream", "ls", "--names", "--json").stdout) == ["ORDERS"]
    assert not (tmp_path.parent / "jetspark-data").exists()
    # -v says which context is in use.
    assert "using context 'local'" in run(cli, "-v", "stream", "ls", "--names").stderr


def test_which_store_a_command_uses(cli, tmp_path, monkeypatch):
    """--store/--server > --context > JETSPARK_STORE > JETSPARK_CONTEXT > the selected context > ./jetspark-data."""
    for name in ("flag", "env", "ctx", "envctx", "sel"):
        cli("--store", tmp_path / name, "stream", "add", name.upper())
    for name in ("ctx", "envctx", "sel"):
        run(cli, "context", "add", name, "--store", tmp_path / name)
    run(cli, "context", "select", "sel")

    def names(*args, env=None):
        return json.loads(run(cli, *args, "stream", "ls", "--names", "--json", env=env).stdout)

    assert names() == ["SEL"]
    assert names("--store", tmp_path / "flag") == ["FLAG"]
    assert names("--context", "ctx") == ["CTX"]
    assert names("--context", "ctx", env={"JETSPARK_STORE": str(tmp_path / "env")}) == ["CTX"]
    assert names(env={"JETSPARK_STORE": str(tmp_path / "env")}) == ["ENV"]
    assert names(env={"JETSPARK_CONTEXT": "envctx"}) == ["ENVCTX"]
    assert names("--store", tmp_path / "flag", env={"JETSPARK_CONTEXT": "envctx"}) == ["FLAG"]
    # Two ways of saying where at the same level: an error, not a silent choice.
    r = run(cli, "--context", "ctx", "--store", tmp_path / "flag", "stream", "ls", code=2)
    assert "--context and --store/--server both say where to connect" in r.stderr
    r = run(cli, "stream", "ls", code=2, env={"JETSPARK_STORE": str(tmp_path / "env"), "JETSPARK_CONTEXT": "ctx"})
    assert "JETSPARK_STORE and JETSPARK_CONTEXT are both set" in r.stderr
    run(cli, "context", "unselect")
    monkeypatch.chdir(tmp_path)
    assert "no jetspark store at ./jetspark-data" in run(cli, "stream", "ls", code=1).stderr
    # A store context that holds no store yet: named, and stream add creates it.
    run(cli, "context", "add", "fresh", "--store", tmp_path / "fresh")
    r = run(cli, "--context", "fresh", "stream", "ls", code=1)
    assert (
        r.stderr.strip()
        == f"Error: no jetspark store at {tmp_path / 'fresh'} (context 'fresh'; `jetspark stream add` creates it)"
    )
    run(cli, "--context", "fresh", "stream", "add", "F")
    assert (tmp_path / "fresh" / "store.json").exists()


def test_ls_info_select_unselect(cli, tmp_path):
    assert "No contexts defined" in run(cli, "context", "ls").stdout
    assert run(cli, "context", "ls", "--json").stdout.strip() == "[]"
    assert run(cli, "context", "select").stdout.strip() == "No context selected"
    assert "no context is selected" in run(cli, "context", "info", code=1).stderr
    run(cli, "context", "add", "b", "--store", tmp_path / "b", "--description", "second")
    run(cli, "context", "add", "a", "--server", "localhost", "--js-domain", "hub")
    r = run(cli, "context", "select", "a")
    assert (
        r.stdout.strip() == "Selected context a (nats://localhost:4222)"
    )  # scheme and port filled in, as connect reads them
    assert run(cli, "context", "select").stdout.strip() == "a"
    lines = run(cli, "context", "list").stdout.splitlines()  # list is ls, as with nats
    assert [ln.split()[0] for ln in lines[-2:]] == ["a*", "b"]
    listed = json.loads(run(cli, "context", "ls", "--json").stdout)
    assert listed == [
        {"name": "a", "description": "", "server": "nats://localhost:4222", "domain": "hub", "selected": True},
        {"name": "b", "description": "second", "store": str(tmp_path / "b"), "selected": False},
    ]
    info = json.loads(run(cli, "context", "show", "--json").stdout)  # show is info; no NAME: the selected one
    assert info == {**listed[0], "file": str(context_file(cli, "a"))}
    assert "JetStream Domain: hub" in run(cli, "context", "info", "a").stdout
    run(cli, "context", "unselect")
    assert run(cli, "context", "select").stdout.strip() == "No context selected"
    assert not json.loads(run(cli, "context", "info", "a", "--json").stdout)["selected"]


def test_add_refuses_an_existing_name_unless_forced_and_needs_one_place(cli, tmp_path):
    run(cli, "context", "add", "x", "--store", tmp_path / "one")
    r = run(cli, "context", "add", "x", "--store", tmp_path / "two", code=1)
    assert "context 'x' exists" in r.stderr and "--force" in r.stderr
    assert json.loads(context_file(cli, "x").read_text())["store"] == str(tmp_path / "one")
    run(cli, "context", "add", "x", "--server", "nats://h:4222", "--force")
    assert json.loads(context_file(cli, "x").read_text()) == {"server": "nats://h:4222"}
    for args, why in [
        ((), "either --store PATH or --server URL: give exactly one"),
        (("--store", tmp_path, "--server", "nats://h"), "either --store PATH or --server URL: give exactly one"),
        (("--store", tmp_path, "--user", "u"), "connection options (user) apply to --server, not to --store"),
        (("--server", "nats://h", "--password", "p"), "--password needs --user"),
        (("--server", "http://h"), "not a server URL: 'http://h' (a NATS server URL starts with nats://"),
        (("--server", "nats://h", "--js-domain", "a.b"), "domain must be one subject token"),
        (("--server", "nats://h", "--creds", tmp_path / "missing.creds"), "does not exist"),
    ]:
        r = run(cli, "context", "add", "y", *args, code=2)
        assert why in r.stderr, r.stderr
    assert not context_file(cli, "y").exists()


# ---------------------------------------------------------------------- names


@pytest.mark.parametrize("name", ["a/b", "..", ".hidden", "a b", "", "x:y", "a\\b", "x" * 65, "ünï"])
def test_invalid_names_are_refused_with_the_accepted_form(cli, tmp_path, name):
    rule = "use letters, digits, '_', '-' and '.' (not first), up to 64 characters"
    for args in (
        ("context", "add", name, "--store", tmp_path),
        ("context", "select", name),
        ("context", "info", name),
        ("context", "rm", name, "-f"),
    ):
        r = run(cli, *args, code=2)
        assert f"invalid context name {name!r}: {rule}" in r.stderr
    assert (
        f"Invalid value for --context: invalid context name {name!r}: {rule}"
        in run(cli, "--context", name, "stream", "ls", code=2).stderr
    )
    if name:  # (an empty variable is no variable)
        assert (
            f"Invalid value for JETSPARK_CONTEXT: invalid context name {name!r}"
            in run(cli, "stream", "ls", code=2, env={"JETSPARK_CONTEXT": name}).stderr
        )
    assert not cli.config.exists()  # nothing written


def test_an_unknown_name_is_named_with_the_known_ones(cli, tmp_path):
    r = run(cli, "--context", "prod", "stream", "ls", code=1)
    assert r.stderr.strip() == "Error: unknown context 'prod'; contexts: none (`jetspark context add` makes one)"
    run(cli, "context", "add", "dev", "--store", tmp_path / "dev")
    run(cli, "context", "add", "test", "--store", tmp_path / "test")
    for args in (
        ("--context", "prod", "stream", "ls"),
        ("context", "info", "prod"),
        ("context", "select", "prod"),
        ("context", "rm", "prod", "-f"),
    ):
        assert run(cli, *args, code=1).stderr.strip() == "Error: unknown context 'prod'; contexts: dev, test"
    assert run(cli, "context", "select").stdout.strip() == "No context selected"


# ---------------------------------------------------------------------- rm


def test_rm_asks_first_and_unselects(cli, tmp_path):
    run(cli, "context", "add", "x", "--store", tmp_path / "x", "--select")
    r = run(cli, "context", "rm", "x", input="n\n", code=1)
    assert "Really delete context x?" in r.stdout and "Aborted" in r.stderr
    assert context_file(cli, "x").exists()
    r = run(cli, "context", "rm", "x", input="y\n")
    assert "Deleted context x (it was selected: no context is selected now)" in r.stdout
    assert not context_file(cli, "x").exists()
    assert run(cli, "context", "select").stdout.strip() == "No context selected"


# ---------------------------------------------------------------------- damage


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"server": "nats://h", "pass', "not JSON (line 1, column 24)"),
        ("[1, 2]", "it holds a JSON list, not an object"),
        ('{"store": "/a", "server": "nats://h"}', "it needs exactly one of store and server"),
        ("{}", "it needs exactly one of store and server"),
        ('{"server": "nats://h", "passwd": "x"}', "unknown key(s) ['passwd']"),
        ('{"server": "nats://h", "user": "u", "password": 98765432}', "password must be a string"),
        ('{"store": "/a", "token": "t"}', "['token'] apply to a server, not to a store"),
        ('{"server": "nats://h", "password": "p"}', "password needs user"),
        ('{"server": ""}', "no server URL given"),
        (b'{"server": "nats://\xff"}', "not UTF-8 text"),
    ],
)
def test_a_damaged_context_file_is_an_error_naming_it(cli, tmp_path, text, why):
    run(cli, "context", "add", "bad", "--store", tmp_path / "s", "--select")
    path = context_file(cli, "bad")
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    for args, code in (
        (("stream", "ls"), 1),
        (("--context", "bad", "stream", "ls"), 1),
        (("context", "info", "bad"), 1),
        (("context", "ls"), 1),
        (("context", "select", "bad"), 1),
    ):
        r = run(cli, *args, code=code)
        assert f"Error: context file {path} is damaged: {why}" in r.stderr, r.stderr
        assert "Traceback" not in r.output and "98765432" not in r.output
        assert "jetspark context rm bad" in r.stderr
    run(cli, "context", "rm", "bad", "-f")  # a damaged context can still be removed
    assert run(cli, "context", "ls", "--json").stdout.strip() == "[]"


def test_a_missing_or_damaged_selection_is_an_error(cli, tmp_path):
    run(cli, "context", "add", "x", "--store", tmp_path / "x", "--select")
    run(cli, "context", "add", "y", "--store", tmp_path / "y")
    context_file(cli, "x").unlink()  # removed by hand
    r = run(cli, "stream", "ls", code=1)
    assert "the selected context 'x' does not exist; contexts: y" in r.stderr
    assert "the selected context 'x' does not exist" in run(cli, "context", "select", code=1).stderr
    assert "the selected context 'x' does not exist" in run(cli, "context", "ls").stderr  # a warning; ls still lists
    (cli.config / "context.txt").write_text("../../etc/passwd\n")
    r = run(cli, "stream", "ls", code=1)
    assert f"Error: {cli.config / 'context.txt'} is damaged: it should hold one context name" in r.stderr
    run(cli, "context", "select", "y")
    assert (cli.config / "context.txt").read_text() == "y\n"


def test_an_interrupted_write_leaves_the_old_context(cli, tmp_path, monkeypatch):
    """The new file is written aside and renamed over the old one: a failure before the rename
    (here: the disk refusing the flush) leaves the old context whole and no stray file."""
    run(cli, "context", "add", "x", "--store", tmp_path / "old")
    before = context_file(cli, "x").read_text()

    def refuse(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", refuse)
    r = run(cli, "context", "add", "x", "--store", tmp_path / "new", "--force", code=1)
    assert "No space left on device" in r.stderr
    assert context_file(cli, "x").read_text() == before
    assert sorted(p.name for p in (cli.config / "context").iterdir()) == ["x.json"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="platformdirs honours XDG_CONFIG_HOME on Linux")
def test_the_default_config_dir_is_the_platform_s(cli, tmp_path):
    env = {"JETSPARK_CONFIG_DIR": None, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    run(cli, "context", "add", "x", "--store", tmp_path / "x", "--select", env=env)
    assert (tmp_path / "xdg" / "jetspark" / "context" / "x.json").is_file()
    assert (tmp_path / "xdg" / "jetspark" / "context.txt").read_text() == "x\n"


# ---------------------------------------------------------------------- a server context


@pytest.fixture(scope="module")
def auth_server():
    """A nats-server that lets in user app with password SECRET only."""
    s = NatsServer("--user", "app", "--pass", SECRET).start()
    yield s
    s.stop()


@pytest.mark.server
def test_a_server_context_s_credentials_reach_the_server_and_are_never_printed(cli, auth_server, tmp_path):
    url = auth_server.url
    outputs = []

    def go(*args, **kw):
        r = run(cli, *args, **kw)
        outputs.append(r.output)
        return r

    # The password asked for, not echoed (nor on the command line).
    r = go(
        "context",
        "add",
        "prod",
        "--server",
        url,
        "--user",
        "app",
        "--password",
        "-",
        "--description",
        "the cluster",
        input=SECRET + "\n",
    )
    assert "Password: ********" in r.stdout
    go("--context", "prod", "stream", "add", "CTX_S", "--subjects", "ctx.>")
    go("--context", "prod", "pub", "ctx.a", "hello")
    go("context", "select", "prod")
    assert json.loads(go("stream", "ls", "--names", "--json").stdout) == ["CTX_S"]
    go("--trace", "-vv", "stream", "info", "CTX_S")
    # Without the context's password the server refuses: the context is what let the commands in.
    r = go("--server", url, "stream", "ls", code=1)
    assert "authentication failed" in r.stderr and "refused the credentials (" in r.stderr
    go("context", "add", "wrong", "--server", url, "--user", "app", "--password", "not-" + SECRET)
    r = go("--context", "wrong", "stream", "ls", code=1)
    assert "authentication failed" in r.stderr and "refused the credentials as user 'app'" in r.stderr
    # Every way of showing a context masks the secrets; a password in the URL too.
    go("context", "add", "tok", "--server", url, "--token", TOKEN)
    go("context", "add", "inurl", "--server", url.replace("://", f"://app:{SECRET}@"))
    for name in ("prod", "tok", "inurl"):
        go("context", "info", name)
        go("context", "info", name, "--json")
    go("context", "ls")
    listed = json.loads(go("context", "ls", "--json").stdout)
    assert {c["name"]: c.get("password", c.get("token")) for c in listed if c["name"] != "inurl"} == {
        "prod": "********",
        "tok": "********",
        "wrong": "********",
    }
    assert [c["server"] for c in listed if c["name"] == "inurl"] == [url.replace("://", "://app:***@")]
    # The server context works through the selection and the URL's own credentials too.
    assert json.loads(go("--context", "inurl", "stream", "ls", "--names", "--json").stdout) == ["CTX_S"]
    r = go("demo", code=1)
    assert "context 'prod' is a NATS server: this command runs on the embedded engine" in r.stderr
    go("--context", "prod", "stream", "rm", "CTX_S", "-f")
    for text in outputs:
        assert SECRET not in text and TOKEN not in text
    # On disk: the secrets are there, for the owner's eyes only.
    for name in ("prod", "tok", "inurl"):
        path = context_file(cli, name)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(context_file(cli, "prod").read_text()) == {
        "description": "the cluster",
        "server": url,
        "user": "app",
        "password": SECRET,
    }
    assert stat.S_IMODE((cli.config / "context").stat().st_mode) == 0o700
