"""Authentication by nkey seed and by .creds file (decentralised JWT auth).

Each test starts its own nats-server with a config file (``-c``); keys and
JWTs are made fresh in the test (``tests/remote/jwt_auth.py``), so nothing
secret is checked in and nothing is mocked.
"""

from __future__ import annotations

import pytest

import jetspark
from jetspark.errors import AuthenticationError
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
