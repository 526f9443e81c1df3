"""StreamConfig: defaults, validation, create/update semantics (docs/semantics.md §1).

Every expected value below was checked against nats-server v2.15.1 (the
``oracle-*`` parametrisations of the ``js`` fixture); the engine must give the
same answers.  Subject rules for stream configs (validity, overlap, ``>`` and
no-ack) live in ``test_subjects.py``.
"""

from __future__ import annotations

import contextlib

import pytest

import jetspark.errors
from jetspark.api import (
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StoreCompression,
    StreamConfig,
    StreamConsumerLimits,
)
from tests.contract import consumer_support as cs

# HTTP-like status the server pairs with each err_code (docs/semantics.md §7).
HTTP_CODE = {
    10025: 400,
    10037: 404,
    10052: 500,
    10058: 400,
    10059: 404,
    10074: 500,
    10077: 503,
    10109: 400,
    10128: 400,
    10133: 400,
}


@contextlib.contextmanager
def api_error(err_code: int, description: str | None = None):
    """Expect a jetspark APIError with ``err_code`` (and its HTTP code).

    ``description`` is compared exactly, except for 10025 whose text is Go's
    JSON decoder message: there only the ``invalid JSON`` prefix is fixed.
    """
    with pytest.raises(jetspark.errors.APIError) as e:
        yield e
    err = e.value
    assert err.err_code == err_code, str(err)
    assert err.code == HTTP_CODE[err_code], str(err)
    if description is not None:
        if err_code == 10025:
            assert err.description.startswith(description), str(err)
        else:
            assert err.description == description, str(err)


def other_storage(js) -> str:
    return "memory" if js.storage == "file" else "file"


def defaults(js, name: str = "S", **changes) -> StreamConfig:
    """The config the server echoes for ``add_stream(name=name)``, with ``changes``."""
    return StreamConfig(
        name=name,
        description=None,
        subjects=[name],
        retention=RetentionPolicy.LIMITS,
        max_consumers=-1,
        max_msgs=-1,
        max_bytes=-1,
        discard=DiscardPolicy.OLD,
        discard_new_per_subject=False,
        max_age=0.0,
        max_msgs_per_subject=-1,
        max_msg_size=-1,
        storage=StorageType(js.storage),
        num_replicas=1,
        no_ack=False,
        duplicate_window=120.0,
        sealed=False,
        deny_delete=False,
        deny_purge=False,
        allow_rollup_hdrs=False,
        allow_direct=False,
        first_seq=None,
        metadata=None,
        mirror_direct=False,
        compression=StoreCompression.NONE,
        allow_msg_ttl=False,
        consumer_limits=StreamConsumerLimits(),
    ).evolve(**changes)


# --------------------------------------------------------------------------- defaults


def test_defaults_are_echoed_back(js):
    info = js.add_stream(name="S")
    assert info.config == defaults(js)
    assert info.did_create is True
    st = info.state
    assert (st.messages, st.bytes, st.first_seq, st.last_seq) == (0, 0, 0, 0)
    assert (st.first_ts, st.last_ts) == (None, None)
    assert (st.consumer_count, st.num_subjects, st.num_deleted) == (0, 0, 0)
    # stream_info reports the same filled-in config.
    assert js.stream_info("S").config == defaults(js)


def test_explicit_storage_is_kept(js):
    info = js.add_stream(name="S", storage=other_storage(js))
    assert info.config.storage == StorageType(other_storage(js))


def test_config_object_and_keyword_overrides(js):
    info = js.add_stream(StreamConfig(name="S", subjects=["q"], max_msgs=3))
    assert info.config == defaults(js, subjects=["q"], max_msgs=3)
    info = js.update_stream(StreamConfig(name="S", subjects=["q"], max_msgs=3), max_msgs=4)
    assert info.config == defaults(js, subjects=["q"], max_msgs=4)


# field, value given, value echoed back
NORMALISED = [
    # 0 and anything below -1 mean "unlimited" and come back as -1.
    ("max_consumers", 0, -1),
    ("max_consumers", -2, -1),
    ("max_consumers", 4, 4),
    ("max_msgs", 0, -1),
    ("max_msgs", -1000, -1),
    ("max_msgs", -1, -1),
    ("max_msgs", 10, 10),
    ("max_bytes", 0, -1),
    ("max_bytes", -5, -1),
    ("max_bytes", 1024, 1024),
    ("max_msgs_per_subject", 0, -1),
    ("max_msgs_per_subject", -100, -1),
    ("max_msgs_per_subject", 3, 3),
    ("max_msg_size", 0, -1),
    ("max_msg_size", -7, -1),
    ("max_msg_size", 512, 512),
    # replicas 0 means the default, 1
    ("num_replicas", 0, 1),
    ("num_replicas", 1, 1),
    # first_seq 0 is "unset"
    ("first_seq", 0, None),
    # an empty subject list means [name]
    ("subjects", [], ["S"]),
    ("max_age", 0, 0.0),
    ("description", "", None),
]


@pytest.mark.parametrize("field,given,echoed", NORMALISED, ids=[f"{f}={g!r}" for f, g, _ in NORMALISED])
def test_normalisation(js, field, given, echoed):
    info = js.add_stream(name="S", **{field: given})
    assert info.config == defaults(js, **{field: echoed})


# kwargs -> duplicate_window echoed (seconds)
DUPLICATE_WINDOW = [
    ({}, 120.0),  # default two minutes
    ({"max_age": 1}, 1.0),  # max_age set and smaller than 2 min
    ({"max_age": 0.1}, 0.1),
    ({"max_age": 300}, 120.0),  # max_age larger: stays 2 min
    ({"duplicate_window": 0.1}, 0.1),  # the smallest allowed
    ({"duplicate_window": 600}, 600.0),  # without max_age any size
    ({"max_age": 60, "duplicate_window": 30}, 30.0),
    ({"max_age": 0.5, "duplicate_window": 0.5}, 0.5),  # equal is allowed
]


@pytest.mark.parametrize("kwargs,window", DUPLICATE_WINDOW, ids=[repr(k) for k, _ in DUPLICATE_WINDOW])
def test_duplicate_window_default(js, kwargs, window):
    info = js.add_stream(name="S", **kwargs)
    assert info.config.duplicate_window == window
    assert info.config.max_age == float(kwargs.get("max_age", 0))


# Values on the accepting side of each boundary.
ACCEPTED = [
    ("name 255 bytes (multi-byte)", {"name": "x" * 253 + "é"}),  # 254 characters, 255 bytes
    ("name 255 ascii", {"name": "n" * 255}),
    ("name non-ascii", {"name": "é"}),
    ("name -_", {"name": "a-b_c"}),
    ("name with NBSP (not whitespace)", {"name": "a\u00a0b"}),
    ("description 4096", {"description": "d" * 4096}),
    ("max_age 100ms", {"max_age": 0.1, "duplicate_window": 0.1}),
    ("metadata 100 KB", {"metadata": {"k": "v" * 100_000}}),
    ("metadata several keys", {"metadata": {"a": "1", "b": "2"}}),
    ("discard_new_per_subject", {"discard": "new", "discard_new_per_subject": True, "max_msgs_per_subject": 1}),
    ("rollups with purge allowed", {"allow_rollup_hdrs": True}),
    ("deny_delete and deny_purge", {"deny_purge": True, "deny_delete": True}),
]


@pytest.mark.parametrize("kwargs", [k for _, k in ACCEPTED], ids=[i for i, _ in ACCEPTED])
def test_accepted_configs_round_trip(js, kwargs):
    kwargs = dict(kwargs)
    name = kwargs.pop("name", "S")
    info = js.add_stream(name=name, **kwargs)
    expected = {k: (DiscardPolicy(v) if k == "discard" else v) for k, v in kwargs.items()}
    assert info.config == defaults(js, name=name, **expected)
    assert js.stream_names() == [name]


# --------------------------------------------------------------------------- validation

NAME_ERR = "stream name is required and can not contain '.', '*', '>', '\\', '/'"

# id, add_stream kwargs, err_code, description
# (A name with '.', whitespace other than \f, or an empty name cannot reach the
# server's validation at all: it is part of the API subject.  See the report.)
INVALID_CONFIGS = [
    # --- stream name
    ("name a*", {"name": "a*"}, 10052, NAME_ERR),
    ("name a>", {"name": "a>"}, 10052, NAME_ERR),
    ("name *", {"name": "*"}, 10052, NAME_ERR),
    ("name >", {"name": ">"}, 10052, NAME_ERR),
    ("name form feed", {"name": "a\fb"}, 10052, NAME_ERR),
    ("name /", {"name": "a/b"}, 10128, "Stream name can not contain path separators"),
    ("name \\", {"name": "a\\b"}, 10128, "Stream name can not contain path separators"),
    ("name 256 bytes", {"name": "x" * 256}, 10052, "stream name is too long, maximum allowed is 255"),
    (
        "name 256 bytes (multi-byte)",
        {"name": "x" * 254 + "é"},
        10052,
        "stream name is too long, maximum allowed is 255",
    ),
    # --- description / metadata
    ("description 4097", {"description": "d" * 4097}, 10052, "stream description is too long, maximum allowed is 4096"),
    (
        "metadata > 128 KiB",
        {"metadata": {"k": "v" * 131072}},
        10052,
        "stream metadata exceeds maximum size of 131072 bytes",
    ),
    # --- replicas
    ("replicas 6", {"num_replicas": 6}, 10052, "maximum replicas is 5"),
    ("replicas -1", {"num_replicas": -1}, 10133, "replicas count cannot be negative"),
    ("replicas 2", {"num_replicas": 2}, 10074, "replicas > 1 not supported in non-clustered mode"),
    ("replicas 5", {"num_replicas": 5}, 10074, "replicas > 1 not supported in non-clustered mode"),
    # --- max_age
    ("max_age < 0", {"max_age": -1}, 10052, "max age can not be negative"),
    ("max_age 50ms", {"max_age": 0.05}, 10052, "max age needs to be >= 100ms"),
    ("max_age 99.9ms", {"max_age": 0.0999}, 10052, "max age needs to be >= 100ms"),
    # --- duplicate_window
    ("dup window < 0", {"duplicate_window": -1}, 10052, "duplicates window can not be negative"),
    ("dup window 50ms", {"duplicate_window": 0.05}, 10052, "duplicates window needs to be >= 100ms"),
    ("dup window 1ns", {"duplicate_window": 1e-9}, 10052, "duplicates window needs to be >= 100ms"),
    (
        "dup window > max_age",
        {"max_age": 1, "duplicate_window": 2},
        10052,
        "duplicates window can not be larger then max age",
    ),
    (
        "dup window > max_age (sub-second)",
        {"max_age": 0.5, "duplicate_window": 0.6},
        10052,
        "duplicates window can not be larger then max age",
    ),
    # --- flag combinations
    (
        "rollup without purge",
        {"deny_purge": True, "allow_rollup_hdrs": True},
        10052,
        "roll-ups require the purge permission",
    ),
    (
        "dnps without discard new",
        {"discard_new_per_subject": True},
        10052,
        "discard new per subject requires discard new policy to be set",
    ),
    (
        "dnps without per-subject limit",
        {"discard_new_per_subject": True, "discard": "new"},
        10052,
        "discard new per subject requires max msgs per subject > 0",
    ),
    (
        "dnps with per-subject limit 0",
        {"discard_new_per_subject": True, "discard": "new", "max_msgs_per_subject": 0},
        10052,
        "discard new per subject requires max msgs per subject > 0",
    ),
    ("created sealed", {"sealed": True}, 10052, "stream configuration for create can not be sealed"),
    # --- unknown enum values / wrong types: the request does not decode
    ("retention foo", {"retention": "foo"}, 10025, "invalid JSON"),
    ("storage foo", {"storage": "foo"}, 10025, "invalid JSON"),
    ("discard foo", {"discard": "foo"}, 10025, "invalid JSON"),
    ("first_seq -1", {"first_seq": -1}, 10025, "invalid JSON"),
]


@pytest.mark.parametrize(
    "kwargs,err_code,description",
    [row[1:] for row in INVALID_CONFIGS],
    ids=[row[0] for row in INVALID_CONFIGS],
)
def test_invalid_config_is_rejected(js, kwargs, err_code, description):
    kwargs = dict(kwargs)
    name = kwargs.pop("name", "S")
    with api_error(err_code, description):
        js.add_stream(name=name, **kwargs)
    assert js.stream_names() == []


# id, update_stream kwargs (on stream S, subjects ["a"], max_msgs=7), err_code, description
INVALID_UPDATES = [
    ("max_age 50ms", {"max_age": 0.05}, 10052, "max age needs to be >= 100ms"),
    (
        "dup window > max_age",
        {"max_age": 1, "duplicate_window": 2},
        10052,
        "duplicates window can not be larger then max age",
    ),
    ("description 4097", {"description": "d" * 4097}, 10052, "stream description is too long, maximum allowed is 4096"),
    ("replicas 3", {"num_replicas": 3}, 10074, "replicas > 1 not supported in non-clustered mode"),
    (
        "rollup without purge",
        {"deny_purge": True, "allow_rollup_hdrs": True},
        10052,
        "roll-ups require the purge permission",
    ),
    (
        "dnps without discard new",
        {"discard_new_per_subject": True},
        10052,
        "discard new per subject requires discard new policy to be set",
    ),
    ("retention foo", {"retention": "foo"}, 10025, "invalid JSON"),
    # immutable fields
    ("storage changed", {"storage": "OTHER"}, 10052, "stream configuration update can not change storage type"),
    (
        "retention to workqueue",
        {"retention": "workqueue"},
        10052,
        "stream configuration update can not change retention policy to/from workqueue",
    ),
]


@pytest.mark.parametrize(
    "kwargs,err_code,description",
    [row[1:] for row in INVALID_UPDATES],
    ids=[row[0] for row in INVALID_UPDATES],
)
def test_invalid_update_is_rejected_and_changes_nothing(js, kwargs, err_code, description):
    kwargs = {k: (other_storage(js) if v == "OTHER" else v) for k, v in kwargs.items()}
    before = js.add_stream(name="S", subjects=["a"], max_msgs=7, description="keep")
    js.publish("a", b"1")
    with api_error(err_code, description):
        js.update_stream(name="S", subjects=["a"], **kwargs)
    info = js.stream_info("S")
    assert info.config == before.config == defaults(js, subjects=["a"], max_msgs=7, description="keep")
    assert (info.state.messages, info.state.last_seq) == (1, 1)


# --------------------------------------------------------------------------- create is idempotent


def test_create_with_same_config_is_idempotent(js):
    first = js.add_stream(name="S", subjects=["a"], max_msgs=5)
    js.publish("a", b"1")
    again = js.add_stream(name="S", subjects=["a"], max_msgs=5)
    assert again.config == first.config == defaults(js, subjects=["a"], max_msgs=5)
    assert again.created == first.created
    # The server reports did_create=True on the idempotent call too.
    assert again.did_create is True
    assert (again.state.messages, again.state.last_seq) == (1, 1)
    assert js.stream_names() == ["S"]


@pytest.mark.parametrize(
    "first,second",
    [
        ({}, {"subjects": ["S"]}),  # omitted subjects == [name]
        ({}, {"duplicate_window": 120}),  # the default window spelled out
        ({"subjects": ["a"]}, {"subjects": ["a"], "max_msgs": 0, "max_bytes": -3}),  # 0 / < -1 == -1
        ({"subjects": ["a"], "max_age": 10}, {"subjects": ["a"], "max_age": 10, "duplicate_window": 10}),
    ],
    ids=["subjects-default", "window-default", "unlimited-spellings", "window-from-max-age"],
)
def test_create_compares_normalised_configs(js, first, second):
    a = js.add_stream(name="S", **first)
    b = js.add_stream(name="S", **second)
    assert b.config == a.config
    assert js.stream_names() == ["S"]


# a config differing from ({subjects: ["a"], max_msgs: 5}) in one field
DIFFERENT = [
    ("max_msgs", {"subjects": ["a"], "max_msgs": 6}),
    ("max_msgs unlimited", {"subjects": ["a"]}),
    ("subjects added", {"subjects": ["a", "b"], "max_msgs": 5}),
    ("subjects default", {"max_msgs": 5}),
    ("description", {"subjects": ["a"], "max_msgs": 5, "description": "x"}),
    ("retention", {"subjects": ["a"], "max_msgs": 5, "retention": "interest"}),
    ("discard", {"subjects": ["a"], "max_msgs": 5, "discard": "new"}),
    ("storage", {"subjects": ["a"], "max_msgs": 5, "storage": "OTHER"}),
    ("metadata", {"subjects": ["a"], "max_msgs": 5, "metadata": {"k": "v"}}),
]


@pytest.mark.parametrize("kwargs", [k for _, k in DIFFERENT], ids=[i for i, _ in DIFFERENT])
def test_create_with_different_config_is_10058(js, kwargs):
    kwargs = {k: (other_storage(js) if v == "OTHER" else v) for k, v in kwargs.items()}
    before = js.add_stream(name="S", subjects=["a"], max_msgs=5)
    js.publish("a", b"1")
    with api_error(10058, "stream name already in use with a different configuration"):
        js.add_stream(name="S", **kwargs)
    info = js.stream_info("S")
    assert info.config == before.config
    assert info.state.messages == 1


# --------------------------------------------------------------------------- missing streams

MISSING = [
    ("stream_info", lambda js: js.stream_info("NOPE")),
    ("update_stream", lambda js: js.update_stream(name="NOPE")),
    ("delete_stream", lambda js: js.delete_stream("NOPE")),
    ("purge_stream", lambda js: js.purge_stream("NOPE")),
    ("get_msg", lambda js: js.get_msg("NOPE", seq=1)),
    ("get_last_msg", lambda js: js.get_last_msg("NOPE", "a")),
    ("delete_msg", lambda js: js.delete_msg("NOPE", 1)),
]


@pytest.mark.parametrize("call", [c for _, c in MISSING], ids=[i for i, _ in MISSING])
def test_missing_stream_is_10059(js, call):
    js.add_stream(name="OTHER")
    with api_error(10059, "stream not found") as e:
        call(js)
    assert isinstance(e.value, jetspark.errors.StreamNotFoundError)
    assert isinstance(e.value, LookupError)
    assert js.stream_names() == ["OTHER"]


def test_deleted_stream_is_gone(js):
    js.add_stream(name="S", subjects=["a"])
    js.publish("a", b"1")
    assert js.delete_stream("S") is True
    assert js.stream_names() == []
    with api_error(10059, "stream not found"):
        js.stream_info("S")
    with pytest.raises(jetspark.errors.NoStreamResponseError):
        js.publish("a", b"2")
    with api_error(10059, "stream not found"):
        js.delete_stream("S")
    # Re-creating the name starts from scratch (a server may refuse a file stream for a
    # moment after the account's last one went, 10049).
    st = cs.add_stream(js, name="S", subjects=["a"]).state
    assert (st.messages, st.first_seq, st.last_seq) == (0, 0, 0)
    assert js.publish("a", b"3").seq == 1


# --------------------------------------------------------------------------- update_stream


def test_update_replaces_the_whole_config(js):
    js.add_stream(
        name="S",
        subjects=["a"],
        description="d",
        metadata={"x": "y"},
        duplicate_window=30,
        max_msgs=10,
        max_bytes=10_000,
        max_msgs_per_subject=4,
        max_msg_size=100,
        max_consumers=3,
        discard="new",
        allow_rollup_hdrs=True,
        allow_direct=True,
    )
    info = js.update_stream(name="S", subjects=["a"], max_age=10)
    # Everything omitted is back to its default; the window follows max_age.
    assert info.config == defaults(js, subjects=["a"], max_age=10.0, duplicate_window=10.0)
    assert js.stream_info("S").config == info.config


def test_update_changes_every_mutable_field(js):
    created = js.add_stream(name="S", subjects=["a"])
    js.publish("a", b"1")
    info = js.update_stream(
        name="S",
        subjects=["a", "b.*"],
        description="hi",
        metadata={"a": "b"},
        max_msgs=10,
        max_bytes=1000,
        max_msgs_per_subject=3,
        max_msg_size=100,
        max_consumers=4,
        max_age=60,
        duplicate_window=30,
        discard="new",
        allow_rollup_hdrs=True,
        allow_direct=True,
        deny_delete=True,
    )
    assert info.config == defaults(
        js,
        subjects=["a", "b.*"],
        description="hi",
        metadata={"a": "b"},
        max_msgs=10,
        max_bytes=1000,
        max_msgs_per_subject=3,
        max_msg_size=100,
        max_consumers=4,
        max_age=60.0,
        duplicate_window=30.0,
        discard=DiscardPolicy.NEW,
        allow_rollup_hdrs=True,
        allow_direct=True,
        deny_delete=True,
    )
    assert info.created == created.created
    assert (info.state.messages, info.state.last_seq) == (1, 1)
    assert js.publish("b.x", b"2").seq == 2


def test_update_with_same_config_keeps_state(js):
    created = js.add_stream(name="S", subjects=["a"])
    js.publish("a", b"1")
    info = js.update_stream(name="S", subjects=["a"])
    assert info.config == created.config
    assert info.created == created.created
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (1, 1, 1)


def test_retention_limits_interest_is_mutable(js):
    js.add_stream(name="S", subjects=["a"])
    info = js.update_stream(name="S", subjects=["a"], retention="interest")
    assert info.config.retention == RetentionPolicy.INTEREST
    info = js.update_stream(name="S", subjects=["a"], retention="limits")
    assert info.config.retention == RetentionPolicy.LIMITS


@pytest.mark.parametrize(
    "start,to", [("workqueue", "limits"), ("workqueue", "interest"), ("interest", "workqueue"), ("limits", "workqueue")]
)
def test_retention_to_or_from_workqueue_is_immutable(js, start, to):
    before = js.add_stream(name="S", subjects=["a"], retention=start)
    with api_error(10052, "stream configuration update can not change retention policy to/from workqueue"):
        js.update_stream(name="S", subjects=["a"], retention=to)
    assert js.stream_info("S").config == before.config
    assert before.config.retention == RetentionPolicy(start)


@pytest.mark.parametrize(
    "update,description",
    [
        ({"deny_delete": False, "deny_purge": True}, "stream configuration update can not cancel deny message deletes"),
        ({"deny_delete": True, "deny_purge": False}, "stream configuration update can not cancel deny purge"),
    ],
    ids=["deny_delete", "deny_purge"],
)
def test_deny_flags_cannot_be_cleared(js, update, description):
    before = js.add_stream(name="S", subjects=["a"], deny_delete=True, deny_purge=True)
    with api_error(10052, description):
        js.update_stream(name="S", subjects=["a"], **update)
    assert js.stream_info("S").config == before.config


def test_deny_flags_can_be_turned_on(js):
    js.add_stream(name="S", subjects=["a"])
    info = js.update_stream(name="S", subjects=["a"], deny_delete=True, deny_purge=True)
    assert info.config == defaults(js, subjects=["a"], deny_delete=True, deny_purge=True)


# --------------------------------------------------------------------------- sealing


def test_sealing_forces_its_settings_and_blocks_writes(js):
    js.add_stream(name="S", subjects=["a"], max_age=60, discard="old")
    js.publish("a", b"1")
    js.publish("a", b"2")
    info = js.update_stream(name="S", subjects=["a"], max_age=60, sealed=True)
    # max_age cleared, discard new, deny delete and purge; the window stays.
    sealed = defaults(
        js,
        subjects=["a"],
        sealed=True,
        max_age=0.0,
        duplicate_window=60.0,
        discard=DiscardPolicy.NEW,
        deny_delete=True,
        deny_purge=True,
    )
    assert info.config == sealed
    assert (info.state.messages, info.state.last_seq) == (2, 2)

    for op in (lambda: js.publish("a", b"3"), lambda: js.purge_stream("S"), lambda: js.delete_msg("S", 1)):
        with api_error(10109, "invalid operation on sealed stream"):
            op()
    info = js.stream_info("S")
    assert info.config == sealed
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (2, 1, 2)
    assert js.get_msg("S", seq=1).data == b"1"


def test_sealed_stream_cannot_be_unsealed(js):
    js.add_stream(name="S", subjects=["a"])
    sealed = js.update_stream(name="S", subjects=["a"], sealed=True).config
    # Sealing turned deny_delete/deny_purge on: omitting them is cancelling them.
    with api_error(10052, "stream configuration update can not cancel deny message deletes"):
        js.update_stream(name="S", subjects=["a"], sealed=True)
    with api_error(10052, "stream configuration update can not unseal a sealed stream"):
        js.update_stream(name="S", subjects=["a"], deny_delete=True, deny_purge=True)
    assert js.stream_info("S").config == sealed


def test_sealed_stream_config_can_still_be_updated(js):
    js.add_stream(name="S", subjects=["a"])
    js.update_stream(name="S", subjects=["a"], sealed=True)
    info = js.update_stream(
        name="S", subjects=["a", "b"], sealed=True, deny_delete=True, deny_purge=True, description="x", max_msgs=3
    )
    assert info.config == defaults(
        js,
        subjects=["a", "b"],
        description="x",
        max_msgs=3,
        sealed=True,
        deny_delete=True,
        deny_purge=True,
        discard=DiscardPolicy.NEW,
    )
    with api_error(10109, "invalid operation on sealed stream"):
        js.publish("b", b"1")


# --------------------------------------------------------------------------- tighter limits


def test_tighter_limits_with_discard_old_trim_at_once(js):
    js.add_stream(name="S", subjects=["a.*"])
    for i in range(5):  # seq 1..5 on a.y a.x a.y a.x a.y
        js.publish("a.x" if i % 2 else "a.y", str(i).encode())
    m = js.msg_bytes("a.x", b"0")

    info = js.update_stream(name="S", subjects=["a.*"], max_msgs=3)
    st = info.state  # the update's own response already shows the trim
    assert (st.messages, st.bytes, st.first_seq, st.last_seq, st.num_subjects) == (3, 3 * m, 3, 5, 2)

    info = js.update_stream(name="S", subjects=["a.*"], max_msgs=3, max_msgs_per_subject=1)
    st = info.state  # seq 3 (a.y) goes, the newer a.y at 5 stays
    assert (st.messages, st.bytes, st.first_seq, st.last_seq, st.num_subjects) == (2, 2 * m, 4, 5, 2)

    info = js.update_stream(name="S", subjects=["a.*"], max_bytes=m)
    st = info.state
    assert (st.messages, st.bytes, st.first_seq, st.last_seq, st.num_subjects) == (1, m, 5, 5, 1)
    assert js.get_msg("S", seq=5).data == b"4"
    with api_error(10037, "no message found"):
        js.get_msg("S", seq=4)


def test_tighter_limits_with_discard_new_keep_messages_and_reject(js):
    js.add_stream(name="S", subjects=["a.*"], discard="new")
    for i in range(5):
        js.publish("a.x", str(i).encode())
    m = js.msg_bytes("a.x", b"0")

    info = js.update_stream(name="S", subjects=["a.*"], discard="new", max_msgs=3)
    assert (info.state.messages, info.state.bytes, info.state.first_seq, info.state.last_seq) == (5, 5 * m, 1, 5)
    with api_error(10077, "maximum messages exceeded"):
        js.publish("a.y", b"z")

    info = js.update_stream(name="S", subjects=["a.*"], discard="new", max_bytes=3 * m)
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (5, 1, 5)
    with api_error(10077, "maximum bytes exceeded"):
        js.publish("a.y", b"z")

    st = js.stream_info("S").state
    assert (st.messages, st.bytes, st.first_seq, st.last_seq) == (5, 5 * m, 1, 5)


def test_tighter_per_subject_limit_trims_even_with_discard_new(js):
    # Server behaviour (not the "discard new keeps messages" rule of the other
    # limits): max_msgs_per_subject trims the excess at once under discard new too.
    js.add_stream(name="S", subjects=["a.*"], discard="new")
    for i in range(5):
        js.publish("a.x" if i < 3 else "a.y", str(i).encode())
    info = js.update_stream(name="S", subjects=["a.*"], discard="new", max_msgs_per_subject=1)
    st = info.state
    assert (st.messages, st.first_seq, st.last_seq, st.num_subjects, st.num_deleted) == (2, 3, 5, 2, 1)
    assert js.get_msg("S", seq=3).data == b"2"
    assert js.get_msg("S", seq=5).data == b"4"


# --------------------------------------------------------------------------- subjects on update


def test_removing_a_subject_keeps_its_messages(js):
    js.add_stream(name="S", subjects=["a", "b"])
    js.publish("a", b"1")
    js.publish("b", b"2")
    info = js.update_stream(name="S", subjects=["b"])
    assert info.config.subjects == ["b"]
    st = info.state
    assert (st.messages, st.first_seq, st.last_seq, st.num_subjects) == (2, 1, 2, 2)
    msg = js.get_msg("S", seq=1)
    assert (msg.subject, msg.data) == ("a", b"1")
    assert js.get_last_msg("S", "a").seq == 1
    # ...but the stream no longer captures the removed subject.
    with pytest.raises(jetspark.errors.NoStreamResponseError):
        js.publish("a", b"3")
    assert js.publish("b", b"4").seq == 3
    assert js.stream_info("S").state.messages == 3


# --------------------------------------------------------------------------- first_seq


def test_first_seq_starts_the_stream_there(js):
    info = js.add_stream(name="S", first_seq=100)
    assert info.config == defaults(js, first_seq=100)
    st = info.state
    assert (st.messages, st.first_seq, st.last_seq) == (0, 100, 99)
    assert js.publish("S", b"x").seq == 100
    st = js.stream_info("S").state
    assert (st.messages, st.first_seq, st.last_seq) == (1, 100, 100)


def test_first_seq_one_differs_from_unset(js):
    # Unset: first=last=0.  first_seq=1: first=1, last=0.
    st = js.add_stream(name="S1", first_seq=1).state
    assert (st.first_seq, st.last_seq) == (1, 0)
    st = js.add_stream(name="S0").state
    assert (st.first_seq, st.last_seq) == (0, 0)
    assert js.publish("S1").seq == 1
    assert js.publish("S0").seq == 1
