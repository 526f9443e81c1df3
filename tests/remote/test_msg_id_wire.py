"""What nats-server (v2.15.1) itself reads as a Nats-Msg-Id from the raw header bytes of an HPUB.

No client sends these bytes: the header codec (jetspark's and nats-py's) strips a value's
blanks before writing it, so through the API an id is always the value without its blanks
(tests/contract/test_msg_id_blanks.py).  Read raw, the server skips the spaces after the
colon and keeps everything else, trailing blanks and tabs included; an empty value is no id.
Pinned here so that a server that reads ids otherwise shows up.
"""

from __future__ import annotations

import json
import socket

import pytest


@pytest.fixture
def raw(server, js, name):
    stream = name("WIRE")
    js.add_stream(name=stream, subjects=[f"{stream}.a"])
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    f = sock.makefile("rb")
    assert f.readline().startswith(b"INFO ")
    sock.sendall(b'CONNECT {"verbose":false,"headers":true,"no_responders":true,"protocol":1}\r\nSUB _r 1\r\nPING\r\n')
    assert f.readline() == b"PONG\r\n"

    def publish(value: bytes) -> dict:
        """HPUB with the header line ``Nats-Msg-Id:<value>`` exactly; the PubAck's JSON."""
        hdr = b"NATS/1.0\r\nNats-Msg-Id:" + value + b"\r\n\r\n"
        subject = f"{stream}.a".encode()
        sock.sendall(b"HPUB %b _r %d %d\r\n%b.\r\n" % (subject, len(hdr), len(hdr) + 1, hdr))
        line = f.readline()
        while line.startswith((b"INFO ", b"PING")):  # the server's own updates and pings, not the answer
            if line.startswith(b"PING"):
                sock.sendall(b"PONG\r\n")
            line = f.readline()
        assert line.startswith(b"MSG _r 1 "), line
        return json.loads(f.read(int(line.split()[-1]) + 2)[:-2])

    yield publish
    sock.close()


def _seq(ack: dict) -> tuple[int, bool]:
    return ack["seq"], bool(ack.get("duplicate"))


def test_the_server_skips_the_spaces_before_an_id(raw):
    assert _seq(raw(b"   a")) == (1, False)
    assert _seq(raw(b"a")) == (1, True)
    assert _seq(raw(b" a")) == (1, True)


def test_the_server_keeps_trailing_blanks_and_tabs(raw):
    assert _seq(raw(b"a")) == (1, False)
    assert _seq(raw(b"a ")) == (2, False)
    assert _seq(raw(b"\ta")) == (3, False)
    assert _seq(raw(b"\ta")) == (3, True)
    assert _seq(raw(b"\t")) == (4, False)
    assert _seq(raw(b" \t")) == (4, True)


def test_the_server_reads_an_empty_or_spaces_only_value_as_no_id(raw):
    assert [_seq(raw(v)) for v in (b"", b"", b" ", b"   ")] == [(1, False), (2, False), (3, False), (4, False)]
