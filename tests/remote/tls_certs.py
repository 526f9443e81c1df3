"""Test certificates made with openssl: a CA and certificates it signs, for TLS tests on a
nats-server started by the tests (tests/remote/test_connect.py, test_fastpath.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def make_certs(directory: Path, *who: str) -> None:
    """``ca.pem``/``ca.key`` and, for each name in ``who``, ``<name>.pem``/``<name>.key`` signed by
    that CA for 127.0.0.1 and localhost, written into ``directory``."""

    def ossl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
         "-subj", "/CN=jetspark test CA")  # fmt: skip
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in who:
        ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={name}")  # fmt: skip
        ossl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "2", "-extfile", "san.cnf")  # fmt: skip
