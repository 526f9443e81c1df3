"""A stream name no stream can have, passed to every public verb that takes a stream.

``HandleBase`` checks the stream argument once for both backends, before the backend
does anything (jetspark/backend/hooks.py ``stream_arg``, ``stream_config_name``): a name
an API subject cannot carry ("a.b", "", "a b", ...) is "stream not found" (10059) for a
verb that looks a stream up, as the server answers for a name it can read, and the
server's invalid-config answer (10052) for add_stream and update_stream, as it answers
"a*".  Every backend gives the same typed error, and nothing is created or changed.
"""

from __future__ import annotations

import datetime as dt
import inspect

import pyarrow as pa
import pytest

from jetspark.backend import JetStreamAPI
from jetspark.errors import APIError, BadRequestError, StreamNotFoundError

STREAM = "S"
# Names no API subject can carry, and names it can ("a\x00b") that no stream has here.
BAD_NAMES = ["a.b", "", "a b", "a\x00b", "*", ">", "a\tb", "a\r\nb", ".a", "a."]
WHEN = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)

# Each verb with a stream argument, called with ``name`` there and valid arguments elsewhere.
CALLS = {
    "stream_info": lambda js, n, tmp: js.stream_info(n),
    "purge_stream": lambda js, n, tmp: js.purge_stream(n),
    "delete_stream": lambda js, n, tmp: js.delete_stream(n),
    "backup_stream": lambda js, n, tmp: js.backup_stream(n, tmp / "backup"),
    "get_msg": lambda js, n, tmp: js.get_msg(n, 1),
    "get_last_msg": lambda js, n, tmp: js.get_last_msg(n, "s.a"),
    "delete_msg": lambda js, n, tmp: js.delete_msg(n, 1),
    "publish_batch": lambda js, n, tmp: js.publish_batch(pa.table({"subject": ["s.a"], "data": [b"x"]}), stream=n),
    "read_batches": lambda js, n, tmp: list(js.read_batches(n)),
    "ordered_consumer": lambda js, n, tmp: list(js.ordered_consumer(n)),
    "seq_for_bytes": lambda js, n, tmp: js.seq_for_bytes(n, 1, 1, 1000),
    "seq_for_time": lambda js, n, tmp: js.seq_for_time(n, WHEN),
    "advance_ack_floor": lambda js, n, tmp: js.advance_ack_floor(n, "D", 1),
    "ack_floor": lambda js, n, tmp: js.ack_floor(n, "D"),
    "consumers_info": lambda js, n, tmp: js.consumers_info(n),
    "consumer_info": lambda js, n, tmp: js.consumer_info(n, "D"),
    "delete_consumer": lambda js, n, tmp: js.delete_consumer(n, "D"),
    "pause_consumer": lambda js, n, tmp: js.pause_consumer(n, "D", WHEN + dt.timedelta(days=36500)),
    "resume_consumer": lambda js, n, tmp: js.resume_consumer(n, "D"),
    "add_consumer": lambda js, n, tmp: js.add_consumer(n, durable_name="NEW", ack_policy="explicit"),
    "create_consumer": lambda js, n, tmp: js.create_consumer(n, durable_name="NEW", ack_policy="explicit"),
    "update_consumer": lambda js, n, tmp: js.update_consumer(n, durable_name="D", ack_policy="explicit"),
    "pull_subscribe": lambda js, n, tmp: js.pull_subscribe("s.a", durable="NEW", stream=n),
    "pull_subscribe_bind": lambda js, n, tmp: js.pull_subscribe_bind("D", n),
    "subscribe": lambda js, n, tmp: js.subscribe("s.a", stream=n),
    "subscribe_bind": lambda js, n, tmp: js.subscribe_bind(n, "D"),
    "add_stream": lambda js, n, tmp: js.add_stream(name=n, subjects=["new.>"]),
    "update_stream": lambda js, n, tmp: js.update_stream(name=n, subjects=["s.>"]),
}
# publish and publish_async take stream= too, but as the Nats-Expected-Stream header: any
# name is a stream the message did not reach (tests/contract/test_bad_input.py).
HEADER_ONLY = {"publish", "publish_async"}
INVALID_NAME = "stream name is required and can not contain '.', '*', '>', '\\', '/'"


def expected(verb: str, name: str) -> tuple[type, int]:
    if verb in ("add_stream", "update_stream"):
        if name == "a\x00b":
            # A name the server reads: a memory store takes it (tests/contract/test_names.py),
            # and there is no such stream to update.
            return StreamNotFoundError, 10059
        return APIError, 10052
    if verb in ("pull_subscribe", "pull_subscribe_bind", "subscribe_bind") and name == "":
        return BadRequestError, 10003  # no stream given, as nats-py's "stream name is required"
    return StreamNotFoundError, 10059


def snapshot(js) -> dict:
    out = {}
    for name in js.stream_names():
        info = js.stream_info(name)
        consumers = {
            c.name: (c.config, c.delivered.stream_seq, c.ack_floor.stream_seq, c.num_pending, c.num_ack_pending)
            for c in js.consumers_info(name)
        }
        out[name] = (info.config, info.state.messages, info.state.last_seq, consumers)
    return out


def test_every_verb_with_a_stream_argument_is_walked():
    verbs = set()
    for verb, fn in inspect.getmembers(JetStreamAPI, inspect.isfunction):
        params = set(inspect.signature(fn).parameters)
        if not verb.startswith("_") and (params & {"stream", "name"} or verb in ("add_stream", "update_stream")):
            verbs.add(verb)
    assert verbs - HEADER_ONLY == set(CALLS)


@pytest.mark.parametrize("verb", sorted(CALLS))
def test_a_bad_stream_name_is_refused_alike_and_changes_nothing(jetspark_backend, verb, tmp_path):
    js = jetspark_backend
    js.add_stream(name=STREAM, subjects=["s.>"])
    js.publish("s.a", b"one")
    js.add_consumer(STREAM, durable_name="D", ack_policy="explicit")
    before = snapshot(js)
    for name in BAD_NAMES:
        if verb == "add_stream" and name == "a\x00b":
            continue  # taken by a server's memory store, refused by a file store: tests/contract/test_names.py
        cls, err_code = expected(verb, name)
        with pytest.raises(cls) as err:
            CALLS[verb](js, name, tmp_path)
        assert err.value.err_code == err_code, f"{verb}({name!r}): {err.value}"
        if err_code == 10052:
            assert err.value.description == INVALID_NAME
        assert snapshot(js) == before, f"{verb}({name!r}) changed the store"
        assert not (tmp_path / "backup").exists()


# Names an API subject carries but no stream may have (a path separator).  The server's
# create request refuses them before it reads the config (10128, whatever else is wrong);
# its update request reads the config first, which refuses them as any bad name (10052).
SEPARATED = ["a/b", "a\\b", "/", "S/"]
PATH_SEPARATORS = "Stream name can not contain path separators"


@pytest.mark.parametrize(
    "verb, err_code, description",
    [("add_stream", 10128, PATH_SEPARATORS), ("update_stream", 10052, INVALID_NAME)],
)
def test_a_path_separator_in_a_stream_config_name(backend, verb, err_code, description):
    js = backend
    js.add_stream(name=STREAM, subjects=["s.>"])
    before = js.stream_info(STREAM).config
    for name in SEPARATED:
        for extra in ({}, {"max_age": -1}, {"num_replicas": -1}):  # the name is checked before these
            with pytest.raises(APIError) as err:
                getattr(js, verb)(name=name, subjects=["new.>"], **extra)
            assert (err.value.err_code, err.value.description) == (err_code, description), f"{name!r} {extra}"
    assert js.stream_names() == [STREAM]
    assert js.stream_info(STREAM).config == before
