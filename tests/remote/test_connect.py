"""Connecting: URL dispatch, options, secrets, authentication, TLS, a dead server, close, fork."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import warnings

import pyarrow as pa
import pytest

import jetspark
from jetspark.connect_options import redact_url, split_servers
from jetspark.engine.handle import JetStream
from jetspark.errors import AuthenticationError, ClosedError, ServerConnectionError
from jetspark.remote import ConnectOptions, NatsJetStream
from tests.remote.tls_certs import make_certs
from tests.servers import free_port

pytestmark = pytest.mark.server


# ---------------------------------------------------------------------- dispatch


def test_connect_dispatches_on_the_url(server, tmp_path):
    with (
        jetspark.connect(tmp_path / "a") as a,
        jetspark.connect(str(tmp_path / "b")) as b,
        jetspark.connect(f"file://{tmp_path}/c") as c,
    ):
        assert all(isinstance(h, JetStream) for h in (a, b, c))
        assert c.path == tmp_path / "c"
    with jetspark.connect(server.url) as js:
        assert isinstance(js, NatsJetStream)
        assert "KEEPER" in js.stream_names()
    with jetspark.connect(f"{server.url},nats://127.0.0.1:{free_port()}", timeout=2) as js:  # one of two is up
        assert "KEEPER" in js.stream_names()


def test_connect_takes_a_connect_options(server):
    # The Spark connector opens a nats:// store from string options this way (one place
    # chooses the backend: jetspark.connect).
    options = jetspark.ConnectOptions.from_strings(server.url, {"timeout": "2.5", "name": "from-strings"})
    with jetspark.connect(options) as js:
        assert isinstance(js, NatsJetStream) and js.timeout == 2.5
        assert "KEEPER" in js.stream_names()
    for extra in ({"timeout": 3}, {"clock": lambda: 0}, {"sync": "os"}, {"create": False}):
        with pytest.raises(TypeError, match="takes no other arguments"):
            jetspark.connect(options, **extra)


def test_connect_refuses_options_of_the_other_backend(server, tmp_path):
    with pytest.raises(TypeError, match="embedded engine"):
        jetspark.connect(server.url, sync="fsync")
    with pytest.raises(TypeError, match="nats:// server"):
        jetspark.connect(tmp_path / "s", user="a")
    with pytest.raises(TypeError, match="unknown connection option"):
        jetspark.connect(server.url, passwd="x")
    with pytest.raises(ValueError, match="http://"):
        jetspark.connect("http://localhost:4222")


def test_the_import_stays_lazy():
    code = "import sys, jetspark; print('nats' in sys.modules, 'jetspark.remote' in sys.modules)"
    out = subprocess.run([os.sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# ---------------------------------------------------------------------- options and secrets


def test_options_from_one_place_and_strings():
    o = ConnectOptions.from_strings(
        "nats://h1:4222,h2",
        {
            "timeout": "2.5",
            "user": "app",
            "password": "s3cret",
            "tls.ca": "/ca.pem",
            "creds": "/x.creds",
            "max-reconnect-attempts": "3",
        },
    )
    assert o.servers == ("nats://h1:4222", "nats://h2:4222")
    assert (o.timeout, o.user, o.password, o.tls_ca, o.user_credentials, o.max_reconnect_attempts) == (
        2.5,
        "app",
        "s3cret",
        "/ca.pem",
        "/x.creds",
        3,
    )
    with pytest.raises(ValueError, match="cannot use the TLS files"):
        o.nats_kwargs()
    kw = o.evolve(tls_ca=None).nats_kwargs()
    assert (
        kw["user"] == "app" and kw["password"] == "s3cret" and kw["user_credentials"] == "/x.creds" and "tls" not in kw
    )
    with pytest.raises(TypeError, match="unknown connection option"):
        ConnectOptions.from_strings("nats://h", {"bogus": "1"})
    with pytest.raises(ValueError, match="tls_cert and tls_key"):
        ConnectOptions.build("nats://h", tls_cert="/c.pem")
    with pytest.raises(ValueError, match="timeout"):
        ConnectOptions.build("nats://h", timeout=0)
    assert split_servers("tls://a:1,b") == ["tls://a:1", "tls://b:4222"]


def test_secrets_never_show():
    o = ConnectOptions.build(
        "nats://app:pw-in-url@h:4222", user="app", password="hunter2", token="tok-xyz", nkeys_seed_str="SUASEED"
    )
    text = repr(o) + str(o)
    for secret in ("hunter2", "tok-xyz", "SUASEED", "pw-in-url"):
        assert secret not in text
    assert "password='***'" in text and "token='***'" in text and "app:***@h" in text
    assert redact_url("nats://tok@h:1,nats://u:p@h2:2") == "nats://***@h:1,nats://u:***@h2:2"


def test_user_password_auth_and_repr(start_server):
    s = start_server("--user", "a", "--pass", "b-secret")
    with jetspark.connect(s.url, user="a", password="b-secret", timeout=2) as js:
        assert js.stream_names() == []
        assert "b-secret" not in repr(js) and "user='a'" in repr(js)
    with jetspark.connect(s.url.replace("nats://", "nats://a:b-secret@"), timeout=2) as js:
        assert "b-secret" not in repr(js)
        assert js.stream_names() == []


def test_wrong_credentials_say_authentication(start_server):
    s = start_server("--user", "a", "--pass", "b")
    t = time.monotonic()
    with pytest.raises(AuthenticationError, match="authentication failed") as err:
        jetspark.connect(s.url, user="a", password="wrong-pw", timeout=2)
    assert time.monotonic() - t < 3
    assert "wrong-pw" not in str(err.value) and "Authorization Violation" in str(err.value)
    assert isinstance(err.value, ConnectionError)
    with pytest.raises(AuthenticationError):
        jetspark.connect(s.url, timeout=2)  # none at all


def test_token_auth(start_server):
    s = start_server("--auth", "tok-123")
    with jetspark.connect(s.url, token="tok-123", timeout=2) as js:
        assert js.stream_names() == []
    with pytest.raises(AuthenticationError):
        jetspark.connect(s.url, token="nope", timeout=2)


def test_tls_with_a_ca_and_a_client_certificate(start_server, tmp_path):
    make_certs(tmp_path, "server", "client")
    p = lambda f: str(tmp_path / f)  # noqa: E731
    s = start_server(
        "--tlsverify", "--tlscert", p("server.pem"), "--tlskey", p("server.key"), "--tlscacert", p("ca.pem")
    )
    with jetspark.connect(
        s.url, tls_ca=p("ca.pem"), tls_cert=p("client.pem"), tls_key=p("client.key"), timeout=3
    ) as js:
        js.add_stream(name="TLS", subjects=["tls.>"])
        assert js.publish("tls.x", b"over tls").seq == 1
    with pytest.raises(ServerConnectionError):  # no client certificate
        jetspark.connect(s.url, tls_ca=p("ca.pem"), timeout=2)


# ---------------------------------------------------------------------- a dead server


def test_nobody_listening_is_a_clear_error_within_the_timeout():
    url = f"nats://127.0.0.1:{free_port()}"
    t = time.monotonic()
    with pytest.raises(ServerConnectionError, match="cannot connect to nats://127.0.0.1"):
        jetspark.connect(url, timeout=1)
    assert time.monotonic() - t < 2


def test_a_server_that_dies_gives_clear_errors_within_the_timeout(start_server):
    s = start_server()
    js = jetspark.connect(s.url, timeout=1, retry_budget=0)  # no retries: see the next test
    js.add_stream(name="D", subjects=["d.>"])
    js.publish("d.x", b"1")
    s.stop()
    for call in (lambda: js.stream_info("D"), lambda: js.publish("d.x", b"2"), lambda: list(js.read_batches("D"))):
        t = time.monotonic()
        with pytest.raises(ServerConnectionError, match="lost the connection to nats://127.0.0.1"):
            call()
        assert time.monotonic() - t < 2.5
    t = time.monotonic()
    js.close()
    assert time.monotonic() - t < 2.5
    with pytest.raises(ClosedError):
        js.stream_names()


def test_a_server_that_stays_away_is_retried_for_the_retry_budget(start_server):
    s = start_server()
    js = jetspark.connect(s.url, timeout=0.3, retry_budget=1)
    js.add_stream(name="D", subjects=["d.>"])
    s.stop()
    # Idempotent or not: while the connection is down nothing reaches the server.
    for call in (lambda: js.stream_info("D"), lambda: js.publish("d.x", b"2"), lambda: js.purge_stream("D")):
        with pytest.raises(
            ServerConnectionError,
            match=r"did not come back within 0.3 s \(tried [2-9] times over [0-9.]+ s, the retry_budget",
        ):
            call()
    js.close()


def test_a_call_made_while_the_server_restarts_waits_for_it(start_server):
    s = start_server()
    js = jetspark.connect(s.url, timeout=1, reconnect_time_wait=0.2)  # retry_budget: 30 s by default
    js.add_stream(name="R", subjects=["r.>"])
    js.publish("r.x", b"1")
    s.kill()
    restart = threading.Timer(1.5, s.start)  # same port, same store
    restart.start()
    try:
        assert js.stream_info("R").state.messages == 1  # made while the server is down
        assert js.publish("r.x", b"2").seq == 2
        assert [r["data"] for r in pa.Table.from_batches(list(js.read_batches("R"))).to_pylist()] == [b"1", b"2"]
    finally:
        restart.join()
        js.close()


def test_the_handle_recovers_when_the_server_comes_back(start_server):
    s = start_server()
    js = jetspark.connect(s.url, timeout=1, reconnect_time_wait=0.2, retry_budget=0)
    js.add_stream(name="R", subjects=["r.>"])
    js.publish("r.x", b"1")
    s.kill()
    with pytest.raises(ServerConnectionError, match="did not come back within 1 s"):
        js.stream_info("R")
    s.start()  # same port, same store
    assert js.stream_info("R").state.messages == 1
    assert js.publish("r.x", b"2").seq == 2
    assert sum(b.num_rows for b in js.read_batches("R")) == 2
    js.close()


def test_close_is_final_and_idempotent(server):
    js = jetspark.connect(server.url)
    js.close()
    js.close()
    assert "closed" in repr(js)
    with pytest.raises(ClosedError):
        js.publish("x", b"")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_gets_its_own_connection(server, js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    js.publish(f"{s}.parent", b"p")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() of a threaded process
        pid = os.fork()
    if pid == 0:  # the child: the loop thread is the parent's, so the handle reconnects
        code = 1
        try:
            code = 0 if js.publish(f"{s}.child", b"c").seq == 2 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert js.stream_info(s).state.messages == 2


def test_a_timeout_error_raised_by_a_call_keeps_its_own_message():
    # RequestTimeoutError is a TimeoutError, like the wait in Loop.run giving up: the
    # loop must hand the call's own error on, not report that it stopped waiting.
    from jetspark.errors import RequestTimeoutError
    from jetspark.remote.loop import Loop

    loop = Loop()

    async def call():
        raise RequestTimeoutError("nats://x did not answer stream_info within 1 s")

    try:
        with pytest.raises(RequestTimeoutError, match="did not answer stream_info within 1 s"):
            loop.run(call(), timeout=30)
    finally:
        loop.stop()
