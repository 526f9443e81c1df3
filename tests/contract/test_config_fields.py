"""Every field of nats-py's StreamConfig and ConsumerConfig: jetspark implements it, with a
contract test that the server decides, or refuses it on both backends, naming it.

The walk is over ``dataclasses.fields`` of nats-py's own classes, so a field a new nats-py
adds fails here until it is implemented (and a contract test named below) or refused
(``jetspark.api.NOT_SUPPORTED``).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from nats.js import api as napi

from jetspark.api import NOT_SUPPORTED, ConsumerConfig, StreamConfig
from jetspark.errors import BadRequestError

CONTRACT = Path(__file__).parent

# Implemented fields -> the contract test module that runs them on every backend, the server too.
IMPLEMENTED = {
    "stream": {
        "name": "test_stream_config.py",
        "description": "test_stream_config.py",
        "subjects": "test_subjects.py",
        "retention": "test_interest_workqueue.py",
        "max_consumers": "test_stream_config.py",
        "max_msgs": "test_limits.py",
        "max_bytes": "test_limits.py",
        "discard": "test_limits.py",
        "discard_new_per_subject": "test_limits.py",
        "max_age": "test_state.py",
        "max_msgs_per_subject": "test_limits.py",
        "max_msg_size": "test_publish_rules.py",
        "storage": "test_stream_config.py",
        "num_replicas": "test_stream_config.py",
        "no_ack": "test_stream_config.py",
        "duplicate_window": "test_publish_rules.py",
        "sealed": "test_publish_rules.py",
        "deny_delete": "test_stream_config.py",
        "deny_purge": "test_purge.py",
        "allow_rollup_hdrs": "test_publish_rules.py",
        "allow_direct": "test_stream_config.py",
        "first_seq": "test_purge.py",
        "metadata": "test_stream_config.py",
    },
    "consumer": {
        "name": "test_consumer_config.py",
        "durable_name": "test_consumer_config.py",
        "description": "test_consumer_config.py",
        "deliver_policy": "test_consumer_delivery.py",
        "opt_start_seq": "test_consumer_delivery.py",
        "opt_start_time": "test_consumer_delivery.py",
        "ack_policy": "test_consumer_config.py",
        "ack_wait": "test_consumer_config.py",
        "max_deliver": "test_consumer_delivery.py",
        "backoff": "test_consumer_delivery.py",
        "filter_subject": "test_consumer_config.py",
        "filter_subjects": "test_consumer_config.py",
        "replay_policy": "test_push.py",
        "max_waiting": "test_consumer_config.py",
        "max_ack_pending": "test_consumer_delivery.py",
        "flow_control": "test_push.py",
        "idle_heartbeat": "test_push.py",
        "headers_only": "test_consumer_delivery.py",
        "deliver_subject": "test_push.py",
        "deliver_group": "test_push.py",
        "inactive_threshold": "test_consumer_delivery.py",
        "num_replicas": "test_consumer_config.py",
        "mem_storage": "test_consumer_config.py",
        "metadata": "test_consumer_config.py",
    },
}

# A value that turns each refused field's feature on.
ON = {
    "template_owner": "T",
    "placement": {"cluster": "east"},
    "mirror": {"name": "ORIGIN"},
    "sources": [{"name": "ORIGIN"}],
    "republish": {"src": ">", "dest": "again.>"},
    "subject_transform": {"src": "f.>", "dest": "g.>"},
    "mirror_direct": True,
    "compression": "s2",
    "allow_msg_ttl": True,
    "allow_msg_schedules": True,
    "allow_atomic": True,
    "allow_batched": True,
    "allow_msg_counter": True,
    "persist_mode": "async",
    "consumer_limits": {"max_ack_pending": 10},
    "subject_delete_marker_ttl": 60.0,
    "rate_limit_bps": 1000,
    "sample_freq": "50%",
    "pause_until": "2030-01-01T00:00:00Z",
}
# ... and values that leave it off, as leaving it unset does.
OFF = {
    "compression": "none",
    "persist_mode": "default",
    "consumer_limits": {"max_ack_pending": 0},
    "allow_msg_ttl": False,
    "subject_delete_marker_ttl": 0,
}

NATS_PY = {"stream": napi.StreamConfig, "consumer": napi.ConsumerConfig}
JETSPARK = {"stream": StreamConfig, "consumer": ConsumerConfig}


@pytest.mark.parametrize("kind", ["stream", "consumer"])
def test_every_nats_py_field_is_implemented_or_refused(kind):
    ours = {f.name for f in dataclasses.fields(JETSPARK[kind])}
    for f in dataclasses.fields(NATS_PY[kind]):
        if f.name in ours:
            module = CONTRACT / IMPLEMENTED[kind][f.name]
            assert re.search(rf"\b{f.name}\b", module.read_text()), (
                f"{module.name} does not exercise {kind} field {f.name}"
            )
        else:
            assert f.name in NOT_SUPPORTED[kind], f"nats-py's {kind} field {f.name} is neither implemented nor refused"
            assert f.name in ON
    assert set(IMPLEMENTED[kind]) == ours  # and nothing of jetspark's own goes untested
    assert set(NOT_SUPPORTED[kind]) == {f.name for f in dataclasses.fields(NATS_PY[kind])} - ours


@pytest.mark.parametrize("field", NOT_SUPPORTED["stream"])
def test_refused_stream_field(jetspark_backend, field):
    js = jetspark_backend  # (a dict config goes to the backend itself: tests/conftest.py's Backend fills in keywords)
    for call in (
        lambda: js.add_stream(name="F", subjects=["f.>"], **{field: ON[field]}),
        lambda: js._js.add_stream({"name": "F", "subjects": ["f.>"], "storage": js.storage, field: ON[field]}),
    ):
        with pytest.raises(BadRequestError, match=rf"\['{field}'\].*not supported by jetspark") as exc:
            call()
        assert exc.value.err_code == 10003
        assert "F" not in js.stream_names()
    # Unset, or set to what unset means, it is accepted.
    js.add_stream(name="F", subjects=["f.>"], **{field: OFF.get(field)})
    assert js.stream_info("F").config.subjects == ["f.>"]


@pytest.mark.parametrize("field", NOT_SUPPORTED["consumer"])
def test_refused_consumer_field(jetspark_backend, field):
    js = jetspark_backend
    js.add_stream(name="F", subjects=["f.>"])
    with pytest.raises(BadRequestError, match=rf"\['{field}'\].*not supported by jetspark"):
        js.add_consumer("F", durable_name="C", **{field: ON[field]})
    with pytest.raises(BadRequestError, match=rf"\['{field}'\].*not supported by jetspark"):
        js.add_consumer("F", {"durable_name": "C", field: ON[field]})
    assert js.stream_info("F").state.consumer_count == 0
    js.add_consumer("F", durable_name="C", **{field: None})
    assert js.consumer_info("F", "C").name == "C"


def test_an_unknown_key_in_a_config_dict_is_refused_not_dropped(jetspark_backend):
    js = jetspark_backend
    with pytest.raises(BadRequestError, match=r"unknown stream config field\(s\) \['max_msg'\]"):
        js._js.add_stream({"name": "F", "subjects": ["f.>"], "storage": js.storage, "max_msg": 5})
    assert "F" not in js.stream_names()
