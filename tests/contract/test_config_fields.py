"""Every field of nats-py's StreamConfig and ConsumerConfig is one of jetspark's, and each has
its place: implemented on both backends (a contract test the server decides, named below), or
passed to the server by the nats:// backend and refused by the embedded engine, naming it
(``UNIMPLEMENTED`` in jetspark/engine/config.py and consumer_config.py).

The walk is over ``dataclasses.fields`` of nats-py's own classes, so a field a new nats-py
adds fails here until jetspark has it.  On a server, nats-py (tests/oracle.py) is the oracle:
jetspark's nats:// backend must answer every field as nats-py does on the same server.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.js import api as napi

import jetspark
from jetspark.api import ConsumerConfig, StreamConfig
from jetspark.engine import config as engine_config
from jetspark.engine import consumer_config as engine_consumer_config
from jetspark.errors import APIError, BadRequestError
from tests.oracle import OracleJS

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
        "allow_msg_ttl": "test_msg_ttl.py",
        "subject_delete_marker_ttl": "test_msg_ttl.py",
        "template_owner": "test_config_fields.py",  # gone from the server: 10025 on both backends
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
        "pause_until": "test_consumer_pause.py",
    },
}
ENGINE_REFUSES = {"stream": engine_config.UNIMPLEMENTED, "consumer": engine_consumer_config.UNIMPLEMENTED}

# A value that turns each server-only field's feature on ("{o}": the origin stream on a
# server, "{s}": the stream's own subject prefix) ...
ON = {
    "placement": {"cluster": "east"},
    "mirror": {"name": "{o}"},
    "sources": [{"name": "{o}", "filter_subject": "{o}.1"}],
    "republish": {"src": "{s}.>", "dest": "again.{s}.>"},
    "subject_transform": {"src": "{s}.>", "dest": "{s}.moved.>"},
    "mirror_direct": True,
    "compression": "s2",
    "allow_msg_schedules": True,
    "allow_atomic": True,
    "allow_batched": True,
    "allow_msg_counter": True,
    "persist_mode": "async",
    "consumer_limits": {"max_ack_pending": 10, "inactive_threshold": 30.0},
    "rate_limit_bps": 1000,
    "sample_freq": "50%",
    "pause_until": "2030-01-01T00:00:00Z",
}
# ... what else a stream with it needs on a server (a mirror has no subjects of its own) ...
CONTEXT = {
    "mirror": {"subjects": None},
    "mirror_direct": {"subjects": None, "mirror": {"name": "{o}"}},
    "rate_limit_bps": {"deliver_subject": "push.here"},  # a pull consumer has no rate limit (10086)
}
# ... and values that leave it off, as leaving it unset does.
OFF = {
    "placement": [None, {}, {"cluster": None}],
    "mirror": [None],
    "sources": [None, []],
    "republish": [None, {}],
    "subject_transform": [None],
    "mirror_direct": [None, False],
    "compression": [None, "none"],
    "allow_msg_schedules": [None, False],
    "allow_atomic": [None, False],
    "allow_batched": [None, False],
    "allow_msg_counter": [None, False],
    "persist_mode": [None, "default"],
    "consumer_limits": [None, {}, {"max_ack_pending": 0}],
    "rate_limit_bps": [None, 0],
    "sample_freq": [None, ""],
    "pause_until": [None],
}

NATS_PY = {"stream": napi.StreamConfig, "consumer": napi.ConsumerConfig}
JETSPARK = {"stream": StreamConfig, "consumer": ConsumerConfig}


@pytest.mark.parametrize("kind", ["stream", "consumer"])
def test_every_nats_py_field_is_jetspark_s_and_implemented_or_server_only(kind):
    ours = {f.name for f in dataclasses.fields(JETSPARK[kind])}
    theirs = {f.name for f in dataclasses.fields(NATS_PY[kind])}
    assert theirs <= ours, f"nats-py's {kind} fields jetspark lacks: {sorted(theirs - ours)}"
    assert ours == theirs  # nothing of jetspark's own that nats-py lacks
    refused = set(ENGINE_REFUSES[kind])
    assert set(IMPLEMENTED[kind]) | refused == ours and not set(IMPLEMENTED[kind]) & refused
    for name, module in IMPLEMENTED[kind].items():
        text = (CONTRACT / module).read_text()
        assert re.search(rf"\b{name}\b", text), f"{module} does not exercise {kind} field {name}"
    assert refused <= set(ON) and refused <= set(OFF)


# ------------------------------------------------------------------ the engine refuses, naming the field


@pytest.fixture
def engine(tmp_path):
    js = jetspark.connect(tmp_path / "store")
    yield js
    js.close()


def _refused(call, fields: list[str]) -> None:
    with pytest.raises(BadRequestError) as exc:
        call()
    assert exc.value.err_code == 10003 and exc.value.code == 400
    assert f"field(s) {sorted(fields)} not supported by the embedded engine" in exc.value.description


@pytest.mark.parametrize("storage", ["file", "memory"])
@pytest.mark.parametrize("field", engine_config.UNIMPLEMENTED)
def test_the_engine_refuses_a_stream_feature_it_does_not_implement(engine, field, storage):
    base = {"name": "F", "subjects": ["f.>"], "storage": storage}
    _refused(lambda: engine.add_stream(**base, **{field: ON[field]}), [field])
    _refused(lambda: engine.add_stream(dict(base, **{field: ON[field]})), [field])
    assert engine.stream_names() == []
    created = engine.add_stream(**base)
    _refused(lambda: engine.update_stream(**base, **{field: ON[field]}), [field])
    assert engine.stream_info("F").config == created.config
    # Off, it is the same as unset (and echoed as the server echoes it left off).
    for off in OFF[field]:
        assert engine.add_stream(**base, **{field: off}).config == engine.stream_info("F").config


@pytest.mark.parametrize("field", engine_consumer_config.UNIMPLEMENTED)
def test_the_engine_refuses_a_consumer_feature_it_does_not_implement(engine, field):
    engine.add_stream(name="F", subjects=["f.>"])
    extra = {k: v for k, v in CONTEXT.get(field, {}).items()}
    _refused(lambda: engine.add_consumer("F", durable_name="C", **extra, **{field: ON[field]}), [field])
    _refused(lambda: engine.add_consumer("F", dict(durable_name="C", **extra, **{field: ON[field]})), [field])
    assert engine.stream_info("F").state.consumer_count == 0
    for off in OFF[field]:
        assert engine.add_consumer("F", durable_name="C", **extra, **{field: off}).config.name == "C"


def test_template_owner_is_the_server_s_unknown_field_on_the_engine(engine):
    for value in ("T", ""):
        with pytest.raises(BadRequestError, match='invalid JSON: json: unknown field "template_owner"') as exc:
            engine.add_stream(name="F", template_owner=value)
        assert exc.value.err_code == 10025
    assert engine.stream_names() == []


def test_a_part_given_as_a_dict_is_checked_like_a_config_dict(engine):
    with pytest.raises(BadRequestError, match=r"unknown StreamSource field\(s\) \['nme'\] \(in mirror\)"):
        engine.add_stream(name="F", mirror={"nme": "ORIGIN"})
    with pytest.raises(BadRequestError, match=r"sources\[1\]: StreamSource needs \['name'\]"):
        engine.add_stream({"name": "F", "sources": [{"name": "A"}, {"filter_subject": "x"}]})
    assert engine.stream_names() == []


STREAM_OFF = st.fixed_dictionaries({}, optional={f: st.sampled_from(OFF[f]) for f in engine_config.UNIMPLEMENTED})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(off=STREAM_OFF, on=st.sets(st.sampled_from(engine_config.UNIMPLEMENTED), max_size=4))
def test_any_mix_of_off_values_is_accepted_and_any_on_value_refused_naming_exactly_those(off, on):
    home = tempfile.mkdtemp(prefix="jetspark-fields-")
    try:
        with jetspark.connect(home) as js:
            given_ = dict(off, **{f: ON[f] for f in on})
            if on:
                _refused(lambda: js.add_stream(name="F", subjects=["f.>"], **given_), sorted(on))
                assert js.stream_names() == []
            else:
                plain = js.add_stream(name="P", subjects=["p.>"]).config
                info = js.add_stream(name="F", subjects=["f.>"], **given_)
                assert info.config == plain.evolve(name="F", subjects=["f.>"])
    finally:
        shutil.rmtree(home, ignore_errors=True)


# ------------------------------------------------------------------ a server takes every field, as nats-py


def _answer(fn, *args, **kwargs):
    """What ``fn`` answered: its result, or the server's (err_code, description)."""
    try:
        return fn(*args, **kwargs)
    except APIError as exc:
        return (exc.err_code, exc.description)


@pytest.fixture
def both(nats_server):
    """jetspark's nats:// backend and nats-py (the oracle) on one server, with an ORIGIN stream."""
    js = jetspark.connect(nats_server.url, timeout=10)
    oracle = OracleJS(nats_server.url, timeout=10)
    origin = f"ORIGIN{uuid.uuid4().hex[:8].upper()}"
    # (allow_direct: the server keeps a mirror's mirror_direct only when its origin allows direct gets)
    js.add_stream(name=origin, subjects=[f"{origin.lower()}.>"], storage="memory", allow_direct=True)
    made: list[str] = [origin]
    yield js, oracle, origin, made
    for name in made:
        try:
            js.delete_stream(name)
        except APIError:
            pass
    oracle.close()
    js.close()


def _placed(value, origin: str, own: str):
    """``value`` with "{o}" the origin stream and "{s}" the stream's subject prefix."""
    if isinstance(value, dict):
        return {k: _placed(v, origin, own) for k, v in value.items()}
    if isinstance(value, list):
        return [_placed(v, origin, own) for v in value]
    if isinstance(value, str):
        return value.replace("{o}.", f"{origin.lower()}.").replace("{o}", origin).replace("{s}", own)
    return value


@pytest.mark.server
@pytest.mark.parametrize("field", sorted(set(ENGINE_REFUSES["stream"]) | {"template_owner"}))
def test_a_server_takes_every_stream_field_as_nats_py_does(both, field):
    js, oracle, origin, made = both
    answers = []
    for who, handle in (("jetspark", js), ("nats-py", oracle)):
        name = f"F{who.replace('-', '')}{uuid.uuid4().hex[:6]}".upper()
        made.append(name)
        own = name.lower()
        params = dict({"name": name, "subjects": [f"{own}.>"], "storage": "file"}, **CONTEXT.get(field, {}))
        params[field] = "T" if field == "template_owner" else ON[field]
        params = _placed(params, origin, own)
        got = _answer(handle.add_stream, **{k: v for k, v in params.items() if v is not None})
        if isinstance(got, tuple):
            answers.append(got)
            continue
        assert got.config == handle.stream_info(name).config
        answers.append(repr(getattr(got.config, field)).replace(own, "{s}"))  # (each stream has its own name)
    assert answers[0] == answers[1]
    if field == "template_owner":
        assert answers[0] == (10025, 'invalid JSON: json: unknown field "template_owner"')
    else:
        assert not isinstance(answers[0], tuple), answers[0]  # every feature is on on the server
        assert not engine_config.is_off(getattr(handle.stream_info(name).config, field))


@pytest.mark.server
@pytest.mark.parametrize("field", engine_consumer_config.UNIMPLEMENTED)
def test_a_server_takes_every_consumer_field_as_nats_py_does(both, field):
    js, oracle, origin, _ = both
    answers = []
    for handle, durable in ((js, "J"), (oracle, "O")):  # (a consumer's fields name no stream: no placeholders)
        params = dict(CONTEXT.get(field, {}), durable_name=durable, **{field: ON[field]})
        got = handle.add_consumer(origin, **params)
        assert got.config == handle.consumer_info(origin, durable).config
        answers.append((getattr(got.config, field), got.paused))
    assert answers[0] == answers[1]
    assert not engine_config.is_off(answers[0][0])
    # A pull consumer with a rate limit is the server's 10086, through either.
    pull = [_answer(h.add_consumer, origin, durable_name="R", rate_limit_bps=5) for h in (js, oracle)]
    assert pull[0] == pull[1] == (10086, "consumer in pull mode can not have rate limit set")


# A value of the wrong type: the server's 10025 (invalid JSON) on both backends, naming the field
# on the engine, before the engine would say it does not implement the feature.
BAD_TYPE = {
    "mirror_direct": "yes",
    "allow_msg_counter": 1,
    "allow_atomic": "true",
    "compression": "zstd",
    "persist_mode": "sometimes",
    "placement": "east",
    "mirror": "ORIGIN",
    "sources": {"name": "ORIGIN"},
    "consumer_limits": {"max_ack_pending": "ten"},
    "rate_limit_bps": "fast",
    "sample_freq": 50,
    "pause_until": "tomorrow",
}
CONSUMER_FIELDS = set(ConsumerConfig.__dataclass_fields__)


@pytest.mark.parametrize("field", sorted(BAD_TYPE))
def test_a_feature_field_of_the_wrong_type_is_10025_on_the_engine(engine, field):
    engine.add_stream(name="F", subjects=["f.>"])
    if field in CONSUMER_FIELDS:
        call = lambda: engine.add_consumer("F", durable_name="C", **{field: BAD_TYPE[field]})  # noqa: E731
    else:
        call = lambda: engine.add_stream(name="G", subjects=["g.>"], **{field: BAD_TYPE[field]})  # noqa: E731
    with pytest.raises(BadRequestError) as exc:
        call()
    assert exc.value.err_code == 10025 and exc.value.description.startswith("invalid JSON: ")
    if field != "compression":  # (the server's own text names no field)
        assert field in exc.value.description
    assert engine.stream_names() == ["F"] and engine.stream_info("F").state.consumer_count == 0


@pytest.mark.server
@pytest.mark.parametrize("field", sorted(BAD_TYPE))
def test_a_feature_field_of_the_wrong_type_is_10025_on_a_server(both, field):
    js, oracle, origin, made = both
    if field in CONSUMER_FIELDS:
        got = _answer(js.add_consumer, origin, durable_name="C", **{field: BAD_TYPE[field]})
        assert js.stream_info(origin).state.consumer_count == 0
    else:
        made.append("G")
        got = _answer(js.add_stream, name="G", subjects=["g.>"], **{field: BAD_TYPE[field]})
        assert "G" not in js.stream_names()
    assert isinstance(got, tuple) and got[0] == 10025, got


def test_an_unknown_key_in_a_config_dict_is_refused_not_dropped(jetspark_backend):
    js = jetspark_backend
    with pytest.raises(BadRequestError, match=r"unknown stream config field\(s\) \['max_msg'\]"):
        js._js.add_stream({"name": "F", "subjects": ["f.>"], "storage": js.storage, "max_msg": 5})
    with pytest.raises(BadRequestError, match=r"unknown consumer config field\(s\) \['ack'\] \(given as keywords\)"):
        js.add_consumer("NONE", durable_name="C", ack="explicit")
    assert "F" not in js.stream_names()


ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**65), 2**65),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["name", "src", "dest", "cluster", "x"]), st.text(max_size=4), max_size=2),
)
SERVER_ONLY = sorted(set(engine_config.UNIMPLEMENTED) | {"template_owner"})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(SERVER_ONLY + list(engine_consumer_config.UNIMPLEMENTED)), value=ANY_VALUE)
def test_any_value_of_a_feature_field_gets_a_typed_answer_and_leaves_nothing_on_the_engine(field, value):
    home = tempfile.mkdtemp(prefix="jetspark-fields-")
    try:
        with jetspark.connect(home) as js:
            js.add_stream(name="F", subjects=["f.>"])
            if field in engine_consumer_config.UNIMPLEMENTED:
                got = _answer(js.add_consumer, "F", durable_name="C", **{field: value})
            else:
                got = _answer(js.add_stream, name="G", subjects=["g.>"], **{field: value})
            if isinstance(got, tuple):  # a typed refusal: nothing made
                assert got[0] in (10003, 10025), got
                assert js.stream_names() == ["F"] and js.stream_info("F").state.consumer_count == 0
            else:  # accepted: only what leaves the feature off
                assert engine_config.is_off(value), (field, value)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_the_differences_page_lists_exactly_the_fields_the_engine_refuses():
    """docs/reference/differences-nats-server.md names the refused fields in prose: they are
    read back from it and must be ``UNIMPLEMENTED``, neither more nor fewer."""
    page = (Path(__file__).parents[2] / "docs/reference/differences-nats-server.md").read_text()
    text = " ".join(page.split())
    m = re.search(r"on streams (.*?); on consumers (.*?)\. ", text)
    assert m, "the refused-fields sentence moved: update this test with it"
    listed = [re.findall(r"`(\w+)`", part) for part in m.groups()]
    assert sorted(listed[0]) == sorted(engine_config.UNIMPLEMENTED)
    assert sorted(listed[1]) == sorted(engine_consumer_config.UNIMPLEMENTED)


def test_the_result_classes_differ_from_nats_py_s_only_as_the_differences_page_says():
    """docs/reference/differences-nats-py.md: the server features' parts are frozen dataclasses
    importable from ``jetspark``; ``PubAck`` lacks nats-py's ``batch_id``/``batch_size`` (and has
    ``val``); ``StreamSourceInfo`` has nats-py's fields plus the server's three."""

    def names(cls) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)}

    for part in ("StreamSource", "SubjectTransform", "RePublish", "Placement", "StreamConsumerLimits"):
        cls = getattr(jetspark, part)
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, part
    ours, theirs = names(jetspark.PubAck), names(napi.PubAck)
    assert (theirs - ours, ours - theirs) == ({"batch_id", "batch_size"}, set()) and "val" in ours
    ours, theirs = names(jetspark.StreamSourceInfo), names(napi.StreamSourceInfo)
    assert (theirs - ours, ours - theirs) == (set(), {"filter_subject", "subject_transforms", "external"})


@pytest.mark.parametrize(
    "text, want",
    [
        ("2030-01-02T03:04:05Z", "2030-01-02T03:04:05+00:00"),
        ("2030-01-02T03:04:05.123456789+02:00", "2030-01-02T01:04:05.123456+00:00"),
        ("2030-01-02T03:04:05", "2030-01-02T03:04:05+00:00"),  # no offset: UTC, not the machine's zone
    ],
)
def test_a_source_s_start_time_as_text_reads_back_in_utc_whatever_the_local_zone(monkeypatch, text, want):
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        got = jetspark.StreamSource.from_response({"name": "A", "opt_start_time": text}).opt_start_time
    finally:
        monkeypatch.undo()
        time.tzset()
    assert got.isoformat() == want
    assert jetspark.StreamSource.from_response({"name": "A", "opt_start_time": "not a time"}).opt_start_time == (
        "not a time"  # other text goes as it is, for the server to judge
    )
