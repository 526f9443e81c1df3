"""Authentication by nkey seed and by .creds file (decentralised JWT auth), and permissions.

Each test starts its own nats-server with a config file (``-c``); keys and
JWTs are made fresh in the test (``tests/remote/jwt_auth.py``), so nothing
secret is checked in and nothing is mocked.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import jetspark
from jetspark.errors import (
    AuthenticationError,
    PermissionDeniedError,
    RequestTimeoutError,
)
from tests.remote.jwt_auth import creds_file, new_chain, new_keypair, public

pytestmark = pytest.mark.server


def config(tmp_path, text: str) -> str:
    path = tmp_path / "server.conf"
    path.write_text(text)
    return str(path)


def store_one_message(js, stream: str) -> None:
    """A real JetStream round trip: create a stream, publish to it, read its state back."""
    js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
    assert js.publish(f"{stream.lower()}.x", b"hello").seq == 1
    assert js.stream_info(stream).state.messages == 1


# ---------------------------------------------------------------------- nkey seed


def test_nkey_seed_from_a_file_and_from_a_string(start_server, tmp_path):
    user = new_keypair()
    seed = user.seed.decode()
    s = start_server("-c", config(tmp_path, f'authorization {{ users = [ {{ nkey: "{public(user)}" }} ] }}\n'))
    seed_file = tmp_path / "user.nk"
    seed_file.write_text(seed + "\n")
    with jetspark.connect(s.url, nkeys_seed=str(seed_file), timeout=3) as js:
        store_one_message(js, "NKFILE")
    with jetspark.connect(s.url, nkeys_seed_str=seed, timeout=3) as js:
        store_one_message(js, "NKSTR")
        assert seed not in repr(js) and seed not in repr(js.options)
    # A well-formed seed of a user the server does not know.
    other = new_keypair().seed.decode()
    with pytest.raises(AuthenticationError, match="authentication failed") as err:
        jetspark.connect(s.url, nkeys_seed_str=other, timeout=2)
    assert other not in str(err.value)


# ---------------------------------------------------------------------- .creds (operator mode)


def test_creds_file_against_an_operator_mode_server(start_server, tmp_path):
    chain = new_chain()
    s = start_server("-c", config(tmp_path, chain.server_config()))
    creds = tmp_path / "spark.creds"
    creds.write_text(creds_file(chain.user_jwt, chain.user_seed))
    with jetspark.connect(s.url, user_credentials=str(creds), timeout=3) as js:
        store_one_message(js, "CREDS")
    # The right JWT with another key's seed: the server checks the nonce's signature
    # against the public key the JWT names.
    forged = tmp_path / "forged.creds"
    forged.write_text(creds_file(chain.user_jwt, new_keypair().seed.decode()))
    with pytest.raises(AuthenticationError, match="authentication failed"):
        jetspark.connect(s.url, user_credentials=str(forged), timeout=2)


# ---------------------------------------------------------------------- permissions

PERMISSIONS = """
authorization {
  users = [
    { user: admin, password: admin }
    # The JetStream API, but not creating streams; no publishing to orders.>.
    { user: clerk, password: clerk, permissions: { publish: { deny: ["$JS.API.STREAM.CREATE.>", "orders.>"] } } }
    # An allow-list without $JS.API.>: publishing to orders.> only.
    { user: writer, password: writer, permissions: { publish: ["orders.>"] } }
    # Subscribing to orders.> only, so not to the _INBOX where replies arrive.
    { user: deaf, password: deaf, permissions: { subscribe: ["orders.>"] } }
  ]
}
"""


# The handles' timeout is 30 s: a PermissionDeniedError, not a RequestTimeoutError,
# shows that the server's refusal ended the call, not the timeout; pytest-timeout
# stops the test if a call waits instead.
@pytest.mark.timeout(60)
def test_permission_denied_is_prompt_and_names_the_subject(start_server, tmp_path):
    s = start_server("-c", config(tmp_path, PERMISSIONS))
    with jetspark.connect(s.url, user="admin", password="admin", timeout=3) as admin:
        admin.add_stream(name="Orders", subjects=["orders.>"])

    with jetspark.connect(s.url, user="clerk", password="clerk", timeout=30) as js:
        with pytest.raises(
            PermissionDeniedError, match=r"does not allow user 'clerk' to publish to '\$JS\.API\.STREAM\.CREATE\.Audit'"
        ) as err:
            js.add_stream(name="Audit", subjects=["audit.>"])
        # nats-py lowercases the server's error text; the subject keeps its case.
        assert err.value.subject == "$JS.API.STREAM.CREATE.Audit"
        assert isinstance(err.value, PermissionError)
        with pytest.raises(PermissionDeniedError, match="to publish to 'orders.new'"):
            js.publish("orders.new", b"1")
        # The connection stays up: what the user may do still works.
        assert js.stream_info("Orders").state.messages == 0

    with jetspark.connect(s.url, user="writer", password="writer", timeout=30) as js:
        with pytest.raises(PermissionDeniedError, match=r"to publish to '\$JS\.API\.STREAM\.INFO\.Orders'"):
            js.stream_info("Orders")
        assert js.publish("orders.new", b"1").seq == 1

    with jetspark.connect(s.url, user="deaf", password="deaf", timeout=30) as js:
        with pytest.raises(
            PermissionDeniedError, match=r"to subscribe to '_INBOX\.>', where the replies to its requests arrive"
        ):
            js.stream_names()
        with pytest.raises(PermissionDeniedError, match="_INBOX"):  # and every request after it, at once
            js.publish("orders.new", b"2")


def test_a_denied_bulk_publish_times_out_saying_why(start_server, tmp_path):
    # publish_batch pipelines plain publishes rather than requests, so it still waits out
    # its timeout; the timeout error then says what the server refused meanwhile.
    s = start_server("-c", config(tmp_path, PERMISSIONS))
    with jetspark.connect(s.url, user="admin", password="admin", timeout=3) as admin:
        admin.add_stream(name="Orders", subjects=["orders.>"])
    with jetspark.connect(s.url, user="clerk", password="clerk", timeout=1) as js:
        rows = pa.table({"subject": ["orders.a"], "data": [b"1"]})
        with pytest.raises(RequestTimeoutError, match="permissions violation for publish to 'orders.a'"):
            js.publish_batch(rows)
