"""jetspark/remote/session.py is the one place where nats-py's errors become jetspark errors;
the jetspark error keeps nats-py's as its ``__cause__`` (what ``--debug`` shows)."""

from __future__ import annotations

import nats.errors as nerr
import pytest

import jetspark
from jetspark.errors import (
    BadRequestError,
    NoStreamResponseError,
    ServerConnectionError,
)
from tests.servers import free_port


def test_no_stream_keeps_the_no_responders_cause(js, name):
    with pytest.raises(NoStreamResponseError) as info:
        js.publish(f"{name()}.nobody", b"x")
    assert isinstance(info.value.__cause__, nerr.NoRespondersError)


def test_a_payload_over_max_payload_keeps_nats_pys_error(js, name):
    s = name()
    js.add_stream(name=s, subjects=[f"{s}.>"])
    with pytest.raises(BadRequestError) as info:
        js.publish(f"{s}.big", b"x" * (js._session.max_payload + 1))
    assert info.value.err_code == 10054
    assert isinstance(info.value.__cause__, nerr.MaxPayloadError)
    assert js.stream_info(s).state.messages == 0


def test_a_refused_connection_keeps_its_cause():
    with pytest.raises(ServerConnectionError) as info:
        jetspark.connect(f"nats://127.0.0.1:{free_port()}", timeout=1)
    assert info.value.__cause__ is not None
