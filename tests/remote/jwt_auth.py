"""NATS nkeys, JWTs and .creds files, made in the test for nats-server's decentralised auth.

Why this exists: jetspark's ``user_credentials`` option hands a ``.creds``
file to nats-py, and the only honest test of it is a real nats-server in
operator mode accepting a real JWT chain.  Those are usually made with the
``nsc`` tool (Go), which is not a Python dependency, and the ``nkeys``
package signs but has no JWT support; so this module mints the chain
itself, as nats-io/jwt v2 does: the operator signs itself and the account,
the account signs the user.

A JWT is ``base64url(header).base64url(claims).base64url(signature)``
(no padding), the signature being the issuer's ed25519 nkey over the first
two parts.  Field names follow nats-io/jwt v2 (``claims.go``, ``header.go``,
``account_claims.go``, ``user_claims.go``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass

import nkeys

__all__ = ["Chain", "creds_file", "new_chain", "new_keypair", "public"]

UNLIMITED = -1


def new_keypair(prefix: int = nkeys.PREFIX_BYTE_USER) -> nkeys.KeyPair:
    """A fresh nkey (the nkeys package has no generator: its seed is 32 random bytes, encoded)."""
    return nkeys.from_seed(nkeys.encode_seed(os.urandom(32), prefix))


def public(kp: nkeys.KeyPair) -> str:
    return kp.public_key.decode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _compact(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def mint(issuer: nkeys.KeyPair, subject: str, name: str, nats: dict) -> str:
    """A v2 JWT about ``subject``, signed by ``issuer``; ``nats`` is the type-specific part."""
    claims = {"iat": int(time.time()), "iss": public(issuer), "name": name, "sub": subject}
    # jti as nats-io/jwt makes it: base32 (unpadded) of the SHA-512/256 of the standard claims
    # without jti, in Go's field order (here alphabetical).  nats-server does not check it.
    claims["jti"] = base64.b32encode(hashlib.new("sha512_256", _compact(claims)).digest()).rstrip(b"=").decode()
    claims["nats"] = {**nats, "version": 2}
    signed = f"{_b64(_compact({'typ': 'JWT', 'alg': 'ed25519-nkey'}))}.{_b64(_compact(claims))}"
    return f"{signed}.{_b64(issuer.sign(signed.encode()))}"


@dataclass(frozen=True)
class Chain:
    """An operator, its system account, one account with JetStream, and one user of it."""

    operator_jwt: str
    accounts: dict[str, str]  # public key -> JWT
    system_account: str
    user_jwt: str
    user_seed: str

    def server_config(self) -> str:
        """nats-server config for operator mode with the accounts preloaded (no resolver service).

        JetStream and its store directory come from the command line (``-js -sd``); JetStream
        does not start without a system account."""
        preload = "".join(f"  {key}: {jwt}\n" for key, jwt in self.accounts.items())
        return (
            f"operator: {self.operator_jwt}\nsystem_account: {self.system_account}\n"
            f"resolver: MEMORY\nresolver_preload: {{\n{preload}}}\n"
        )


def new_chain() -> Chain:
    operator, system, account, user = (
        new_keypair(p)
        for p in (
            nkeys.PREFIX_BYTE_OPERATOR,
            nkeys.PREFIX_BYTE_ACCOUNT,
            nkeys.PREFIX_BYTE_ACCOUNT,
            nkeys.PREFIX_BYTE_USER,
        )
    )
    operator_jwt = mint(operator, public(operator), "jetspark-test-operator", {"type": "operator"})
    limits = {
        # nats-io/jwt's NewAccountClaims defaults: no limit on anything...
        "subs": UNLIMITED, "data": UNLIMITED, "payload": UNLIMITED,
        "imports": UNLIMITED, "exports": UNLIMITED, "wildcards": True, "conn": UNLIMITED, "leaf": UNLIMITED,
        # ...but JetStream, which an account only has when it is given storage.
        "mem_storage": UNLIMITED, "disk_storage": UNLIMITED, "streams": UNLIMITED, "consumer": UNLIMITED,
    }  # fmt: skip
    accounts = {
        public(system): mint(operator, public(system), "SYS", {"type": "account"}),
        public(account): mint(operator, public(account), "JETSPARK", {"type": "account", "limits": limits}),
    }
    # A user's limits must be given: without them (0) the server refuses the connection's first
    # subscription ("maximum subscriptions exceeded").
    user_nats = {"type": "user", "subs": UNLIMITED, "data": UNLIMITED, "payload": UNLIMITED}
    user_jwt = mint(account, public(user), "spark", user_nats)
    return Chain(operator_jwt, accounts, public(system), user_jwt, user.seed.decode())


def creds_file(user_jwt: str, user_seed: str) -> str:
    """The text of a ``.creds`` file, as ``nsc`` writes it (nats-io/jwt ``FormatUserConfig``)."""
    return (
        f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{user_seed}\n------END USER NKEY SEED------\n\n"
        "*************************************************************\n"
    )
