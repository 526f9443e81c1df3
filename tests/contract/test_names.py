"""Stream and consumer names with characters a file name cannot hold, or that look odd.

nats-server takes any name without ' ', '\\t', '\\r', '\\n', '\\f', '.', '*', '>' and the path
separators (tests/contract/test_stream_config.py, test_consumer_config.py pin those
refusals); a name with a NUL passes that check and then fails where a file store creates its
directory: 10049 for a stream, 10012 for a consumer, with nothing created.  The embedded engine
keeps memory streams in files too, so it refuses a NUL there as well, where a server's memory
store takes it: the one difference here (docs/reference/differences-nats-server.md).
"""

from __future__ import annotations

import pytest

from jetspark.errors import APIError

STREAM_STORE = (10049, 500, "error creating store for stream")
CONSUMER_STORE = (10012, 500, "error creating store for consumer")

NUL_NAMES = ["a\x00b", "\x00", "ab\x00"]
# Control and invisible characters the server does not refuse: usable names on every backend.
ODD_NAMES = [
    "a\x01b",
    "a\x1bb",
    "a\x1fb",
    "a\x7fb",
    "a\u0085b",
    "a\u2028b",
    "a\u200bb",
    "a\ufeffb",
    "a\u3000b",
    "a$b:c#d%e",
]


def refusal(fn, *args, **kwargs):
    with pytest.raises(APIError) as exc:
        fn(*args, **kwargs)
    return (exc.value.err_code, exc.value.code, exc.value.description)


def refused_on(js) -> bool:
    """Is a NUL in a name refused here (a file store: any engine stream, a server's file stream)?"""
    return js.kind == "engine" or js.storage == "file"


@pytest.mark.parametrize("name", NUL_NAMES, ids=repr)
def test_a_stream_name_with_a_nul(js, name):
    js.add_stream(name="KEEP", subjects=["keep.>"])
    if refused_on(js):
        assert refusal(js.add_stream, name=name, subjects=["n.>"]) == STREAM_STORE
        assert js.stream_names() == ["KEEP"]
        # The subjects were not taken either.
        assert js.add_stream(name="OTHER", subjects=["n.>"]).config.subjects == ["n.>"]
    else:
        assert js.add_stream(name=name, subjects=["n.>"]).config.name == name
        assert name in js.stream_names()


@pytest.mark.parametrize("field", ["durable_name", "name"])
@pytest.mark.parametrize("name", NUL_NAMES, ids=repr)
def test_a_consumer_name_with_a_nul(js, field, name):
    js.add_stream(name="S", subjects=["s.>"])
    if refused_on(js):
        assert refusal(js.add_consumer, "S", **{field: name}) == CONSUMER_STORE
        assert js.stream_info("S").state.consumer_count == 0
        assert js.consumers_info("S") == []
    else:
        assert js.add_consumer("S", **{field: name}).name == name


@pytest.mark.parametrize("name", ODD_NAMES, ids=repr)
def test_odd_but_valid_names_work_everywhere(js, name):
    info = js.add_stream(name=name, subjects=["odd.>"])
    assert info.config.name == name and name in js.stream_names()
    # (Not published to: nats-server writes a control character of the stream's name into
    # its PubAck as Go's \x01, which is not JSON, so no client can read that answer.)
    assert js.add_consumer(name, durable_name=name).name == name
    assert js.consumer_info(name, name).stream_name == name
    js.delete_consumer(name, name)
    js.delete_stream(name)
    assert name not in js.stream_names()
