"""Where a handle connects (jetspark/connection.py): a store path that looks like a URL is
refused by connect(), the CLI's --store/$JETSPARK_STORE and the Spark store option, showing the
server URL meant, and creates nothing; a malformed server URL is named as it was given."""

from __future__ import annotations

import os
import pickle
import string

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import jetspark
from jetspark.cli import cli as jetspark_cli
from jetspark.connect_options import ConnectOptions
from jetspark.connection import check_store_path, is_server_url, server_form
from jetspark.connector.options import reader_options, writer_options
from jetspark.errors import BadRequestError, LocationError, OptionError, StreamNotFoundError, api_error

SCHEMES = ["nats", "tls", "ws", "wss", "NATS", "Nats"]
hosts = st.from_regex(r"[a-z][a-z0-9-]{0,12}(\.[a-z0-9-]{1,8}){0,2}", fullmatch=True) | st.from_regex(
    r"(\d{1,3}\.){3}\d{1,3}", fullmatch=True
)
ports = st.integers(1, 65535)


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    """An empty working directory: a refused call must leave it empty."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ---------------------------------------------------------------- connect()


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("nats:/127.0.0.1:4222", "nats://127.0.0.1:4222"),
        ("nats:127.0.0.1", "nats://127.0.0.1"),
        ("tls:/h:1", "tls://h:1"),
        ("WSS:/h.example.com:443", "wss://h.example.com:443"),
        ("localhost:4222", "nats://localhost:4222"),
    ],
)
def test_connect_refuses_a_path_that_looks_like_a_server_url(cwd, typed, meant):
    with pytest.raises(LocationError) as err:
        jetspark.connect(typed)
    assert isinstance(err.value, ValueError)  # what connect raised for bad locations before
    assert f"connect({meant!r})" in str(err.value)
    assert repr(typed) in str(err.value)  # named as typed
    assert err.value.argument == "url"
    assert os.listdir(cwd) == []


@pytest.mark.parametrize("typed", ["http://example.com", "s3://bucket/key", "data:2024-11/x", "jdbc:postgresql://h/db"])
def test_connect_refuses_other_urls_and_says_what_it_takes(cwd, typed):
    with pytest.raises(
        LocationError,
        match="looks like a URL, not a store directory: jetspark connects to nats://, tls://, ws://, wss://",
    ):
        jetspark.connect(typed)
    assert os.listdir(cwd) == []


@settings(max_examples=60, deadline=None)
@given(scheme=st.sampled_from(SCHEMES), slashes=st.sampled_from(["", "/"]), host=hosts, port=ports)
def test_any_mistyped_server_url_is_refused_with_the_url_meant(scheme, slashes, host, port):
    typed = f"{scheme}:{slashes}{host}:{port}"
    with pytest.raises(LocationError) as err:
        check_store_path(typed)
    assert f"'{scheme.lower()}://{host}:{port}'" in str(err.value)
    assert server_form(typed) == f"{scheme.lower()}://{host}:{port}"


@settings(max_examples=60, deadline=None)
@given(
    scheme=st.from_regex(r"[A-Za-z][A-Za-z0-9+.-]{1,10}", fullmatch=True),
    rest=st.text(string.ascii_letters + string.digits + "/:.-_", max_size=20),
)
def test_every_scheme_at_the_start_is_refused_but_file_urls(scheme, rest):
    typed = f"{scheme}:{rest}"
    if scheme.lower() == "file" and rest.startswith("//"):
        assert check_store_path(typed) == typed
        return
    with pytest.raises(LocationError):
        check_store_path(typed)


@settings(max_examples=60, deadline=None)
@given(st.text(string.ascii_letters + string.digits + "/._- ", min_size=1, max_size=30).filter(lambda t: t.strip()))
def test_a_path_without_a_colon_is_a_path(text):
    assert check_store_path(text) == text
    assert not is_server_url(text)


@pytest.mark.parametrize(
    "path", ["C:\\data\\store", "c:/data/store", "D:store", "./nats:/h:4222", "store/nats:x", "/tmp/x:1"]
)
def test_drive_letters_and_paths_with_a_colon_later_are_paths(path):
    assert check_store_path(path) == path


def test_a_directory_with_a_colon_in_its_name_is_reached_as_dot_slash(cwd):
    with jetspark.connect("./nats:x") as js:
        js.add_stream(name="S", subjects=["s"])
    assert (cwd / "nats:x" / "store.json").is_file()


def test_file_urls(cwd):
    with jetspark.connect(f"file://{cwd / 'a'}") as js:
        js.add_stream(name="S", subjects=["s"])
    assert (cwd / "a" / "store.json").is_file()
    for typed, path in (("file:b", "'b'"), (f"file:{cwd}/c", repr(f"{cwd}/c"))):
        with pytest.raises(LocationError, match=f"write the path itself, {path}"):
            jetspark.connect(typed)
    assert sorted(os.listdir(cwd)) == ["a"]


def test_a_path_object_is_taken_as_a_path(cwd):
    # A pathlib.Path was built as a path on purpose (and it folds "//" into "/", so the
    # check could not tell nats://h from nats:/h).
    with jetspark.connect(cwd / "nats:h") as js:
        js.add_stream(name="S", subjects=["s"])
    assert (cwd / "nats:h" / "store.json").is_file()


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("nats://", "no host"),
        ("nats:///h:4222", "no host"),
        ("nats://h:99999", "the port must be a number from 0 to 65535"),
        ("nats://h:port", "the port must be a number from 0 to 65535"),
        ("nats://h:", "the port must be a number from 0 to 65535"),
        (
            "nats://h:4222/127.0.0.1:4333",
            "a server URL is scheme://[user[:password]@]host[:port], with nothing after the port",
        ),
        ("nats://a:4222,nats:/b:4222", "did you mean nats://b:4222?"),
        ("nats://a:4222,http://b:4222", "a NATS server URL starts with nats://, tls://, ws://, wss://"),
    ],
)
def test_a_malformed_server_url_is_named_as_given(cwd, url, why):
    with pytest.raises(LocationError) as err:
        jetspark.connect(url)
    part = url.split(",")[-1]
    assert str(err.value) == f"not a server URL: {part!r} ({why})"
    assert os.listdir(cwd) == []


def test_a_malformed_url_hides_its_password():
    with pytest.raises(LocationError) as err:
        ConnectOptions.build("nats://me:s3cret@h:4222/x")
    assert "s3cret" not in str(err.value) and "me:***@h" in str(err.value)


def test_connect_options_name_the_mistyped_url_not_a_rebuilt_one():
    # It used to read "nats:/127.0.0.1:4333" as the host "nats" and fail on nats://nats::4222/127.0.0.1:4333.
    with pytest.raises(
        LocationError, match=r"^not a server URL: 'nats:/127.0.0.1:4333' \(did you mean nats://127.0.0.1:4333\?\)$"
    ):
        ConnectOptions.build("nats:/127.0.0.1:4333")
    assert ConnectOptions.build("127.0.0.1:4333").servers == ("nats://127.0.0.1:4333",)
    assert ConnectOptions.build("tls://h").servers == ("tls://h:4222",)


def test_location_error_pickles():
    err = pickle.loads(pickle.dumps(LocationError("msg", "--store")))
    assert (str(err), err.argument) == ("msg", "--store")


# ---------------------------------------------------------------- the CLI


def _cli(args, env=None):
    return CliRunner(env={"JETSPARK_CONFIG_DIR": "config", "JETSPARK_STORE": None, **(env or {})}).invoke(
        jetspark_cli, args, catch_exceptions=False
    )


@pytest.mark.parametrize(
    ("store", "meant"),
    [
        ("nats://127.0.0.1:4333", "nats://127.0.0.1:4333"),
        ("nats:/127.0.0.1:4333", "nats://127.0.0.1:4333"),
        ("localhost:4222", "nats://localhost:4222"),
    ],
)
def test_cli_store_that_looks_like_a_url_is_a_usage_error(cwd, store, meant):
    r = _cli(["--store", store, "stream", "add", "Q", "--subjects", "q.>"])
    assert r.exit_code == 2, r.stdout
    assert (
        f"{store!r} looks like a URL, not a store directory: for the NATS server, write -s/--server {meant}" in r.stderr
    )
    assert "Stream Q added" not in r.stdout
    assert os.listdir(cwd) == []


def test_cli_jetspark_store_env_is_checked_too(cwd):
    r = _cli(["stream", "add", "Q", "--subjects", "q.>"], env={"JETSPARK_STORE": "nats:/127.0.0.1:4333"})
    assert r.exit_code == 2
    assert "JETSPARK_STORE" in r.stderr and "-s/--server nats://127.0.0.1:4333" in r.stderr
    assert os.listdir(cwd) == []


def test_cli_server_url_is_named_as_typed(cwd):
    r = _cli(["-s", "nats:/127.0.0.1:4333", "stream", "ls"])
    assert r.exit_code == 2
    assert "not a server URL: 'nats:/127.0.0.1:4333' (did you mean nats://127.0.0.1:4333?)" in r.stderr
    assert "nats::4222" not in r.stderr


def test_cli_store_with_a_colon_later_still_works(cwd):
    r = _cli(["--store", "./a:b", "stream", "add", "Q", "--subjects", "q.>"])
    assert r.exit_code == 0, r.stderr
    assert (cwd / "a:b" / "store.json").is_file()


# ---------------------------------------------------------------- the Spark options (parsed in the driver)


@pytest.mark.parametrize(("key", "shown"), [("store", "option store"), ("path", "option path (load/save)")])
def test_spark_store_option_that_looks_like_a_url_is_an_option_error(key, shown):
    opts = {"stream": "S", key: "nats:/127.0.0.1:4222"}
    for parse in (
        lambda: reader_options(opts, streaming=False),
        lambda: reader_options(opts, streaming=True),
        lambda: writer_options(opts),
    ):
        with pytest.raises(OptionError) as err:
            parse()
        assert str(err.value).startswith(f"{shown} 'nats:/127.0.0.1:4222' looks like a URL")
        assert '.option("store", "nats://127.0.0.1:4222")' in str(err.value)


def test_spark_store_env_is_checked_too(monkeypatch):
    monkeypatch.setenv("JETSPARK_STORE", "tls:h:4443")
    with pytest.raises(OptionError, match=r"option \$JETSPARK_STORE 'tls:h:4443' looks like a URL.*\"tls://h:4443\""):
        reader_options({"stream": "S"}, streaming=False)


def test_spark_store_option_takes_server_urls_and_paths():
    assert reader_options({"stream": "S", "store": "nats://h:4222"}, streaming=False).store == "nats://h:4222"
    assert reader_options({"stream": "S", "store": "./x:y"}, streaming=False).store == "./x:y"
    assert writer_options({"path": "file:///tmp/x"}).store == "file:///tmp/x"


# ---------------------------------------------------------------- errors print their class once


def test_api_errors_say_what_is_wrong_without_their_class():
    err = api_error(10059)
    assert str(err) == "stream not found (code=404 err_code=10059)"
    assert repr(err) == "StreamNotFoundError(code=404, err_code=10059, description='stream not found')"
    assert isinstance(err, StreamNotFoundError)
    assert "BadRequestError" not in str(BadRequestError(400, 10003, "bad request"))


def test_a_traceback_names_the_class_once(tmp_path):
    import subprocess
    import sys

    code = f"import jetspark; jetspark.connect({str(tmp_path / 's')!r}).stream_info('NOPE')"
    out = (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        .stderr.strip()
        .splitlines()[-1]
    )
    assert out == "jetspark.errors.StreamNotFoundError: stream not found (code=404 err_code=10059)"
