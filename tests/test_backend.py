"""Both handles satisfy the declared contract (``jetspark.backend``), verb for verb.

The behaviour behind each verb is checked on both backends by tests/contract;
here: every verb the Protocols declare exists on both
implementations with the same parameters (names, kinds, defaults), and neither
implementation has a public method the Protocols do not declare, so a verb
added to one backend only, or an argument accepted by one only, fails here.
"""

from __future__ import annotations

import inspect
import pathlib
import re

import pytest

import jetspark
from jetspark.backend import (
    ConsumeContextAPI,
    JetStreamAPI,
    MessagesAPI,
    MsgAPI,
    PullSubscriptionAPI,
    PushSubscriptionAPI,
)
from jetspark.backend.base import HandleBase
from jetspark.backend.hooks import Hooks
from jetspark.backend.live import ConsumeContext
from jetspark.engine import deliveries as engine_deliveries
from jetspark.engine import pull as engine_pull
from jetspark.engine import push as engine_push
from jetspark.engine.handle import JetStream
from jetspark.remote import pull as remote_pull
from jetspark.remote import pull_messages as remote_pull_messages
from jetspark.remote import push as remote_push
from jetspark.remote.client import NatsJetStream
from tests.conftest import drop_streams

# Public methods outside the contract, per implementation: backend-specific tools.
EXTRAS = {
    JetStream: {
        "check_stream",  # file checks and repair: the engine's own (jetspark check)
    },
    NatsJetStream: {
        "from_options",  # the constructor from a ConnectOptions (jetspark.connect)
    },
}

IMPLEMENTATIONS = [
    (JetStreamAPI, JetStream),
    (JetStreamAPI, NatsJetStream),
    (PullSubscriptionAPI, engine_pull.PullSubscription),
    (PullSubscriptionAPI, remote_pull.PullSubscription),
    (PushSubscriptionAPI, engine_push.PushSubscription),
    (PushSubscriptionAPI, remote_push.PushSubscription),
    (MsgAPI, engine_deliveries.Msg),
    (MsgAPI, remote_pull.Msg),
    (MessagesAPI, engine_pull.Messages),
    (MessagesAPI, remote_pull_messages.Messages),
    (ConsumeContextAPI, ConsumeContext),  # one class, both backends' consume() returns it
]


def declared(protocol) -> dict[str, object]:
    """The protocol's members: methods (and properties), with __enter__/__exit__."""
    out = {}
    for name, value in vars(protocol).items():
        if name.startswith("_") and name not in ("__enter__", "__exit__"):
            continue
        if callable(value) or isinstance(value, property):
            out[name] = value
    return out


def declared_attributes(protocol) -> set[str]:
    return set(getattr(protocol, "__annotations__", {}))


def public_methods(cls) -> set[str]:
    names = set()
    for name in dir(cls):
        if name.startswith("_"):
            continue
        value = inspect.getattr_static(cls, name)
        if callable(value) or isinstance(value, (classmethod, staticmethod)):
            names.add(name)
    return names


def parameters(fn) -> list[tuple]:
    """What a caller sees of a signature: each parameter's name, kind and default
    (annotations are documentation: the Protocol names its own types)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


CASES = [(protocol, cls, verb) for protocol, cls in IMPLEMENTATIONS for verb in declared(protocol)]


@pytest.mark.parametrize(
    "protocol, cls, verb", CASES, ids=[f"{c.__module__.split('.')[1]}.{c.__name__}.{v}" for _, c, v in CASES]
)
def test_every_declared_verb_has_the_declared_signature(protocol, cls, verb):
    assert hasattr(cls, verb), f"{cls.__module__}.{cls.__name__} lacks {verb}, which {protocol.__name__} declares"
    want = declared(protocol)[verb]
    have = inspect.getattr_static(cls, verb)
    if isinstance(want, property):
        # Msg.reply is a property on the engine and a slot on the server's Msg: either reads.
        return
    assert callable(have), f"{cls.__name__}.{verb} is not a method"
    assert parameters(getattr(cls, verb)) == parameters(want), (
        f"{cls.__name__}.{verb}{inspect.signature(getattr(cls, verb))} "
        f"differs from {protocol.__name__}.{verb}{inspect.signature(want)}"
    )


@pytest.mark.parametrize(
    "protocol, cls", IMPLEMENTATIONS, ids=[f"{c.__module__.split('.')[1]}.{c.__name__}" for _, c in IMPLEMENTATIONS]
)
def test_the_protocol_declares_every_public_method(protocol, cls):
    undeclared = public_methods(cls) - set(declared(protocol)) - declared_attributes(protocol) - EXTRAS.get(cls, set())
    assert not undeclared, (
        f"{cls.__name__} has public methods {sorted(undeclared)} that {protocol.__name__} ({protocol.__module__}) "
        "does not declare: declare them with their contract, or list them in EXTRAS as backend-only"
    )


def test_the_extras_are_really_backend_only():
    """An extra both handles have is a verb of the API: it belongs in the Protocol."""
    shared = (EXTRAS[JetStream] & public_methods(JetStream)) & (EXTRAS[NatsJetStream] & public_methods(NatsJetStream))
    assert not shared, shared


def test_the_handles_share_one_base():
    """Every verb of the contract is written once, in HandleBase, which checks its arguments once
    for both backends (so both accept and refuse exactly the same: tests/contract/test_bad_input.py);
    a backend implements hooks only."""
    assert issubclass(JetStream, HandleBase) and issubclass(NatsJetStream, HandleBase)
    verbs = [name for name, value in vars(JetStreamAPI).items() if not name.startswith("_") and callable(value)]
    assert len(verbs) > 30
    for verb in verbs:
        assert verb in HandleBase.__dict__, f"{verb} is not written in HandleBase"
        for cls in (JetStream, NatsJetStream):
            assert verb not in cls.__dict__, (
                f"{cls.__name__} writes {verb} again: a backend implements the hooks (jetspark/backend/hooks.py)"
            )


HOOKS = sorted(HandleBase.__abstractmethods__)


def test_the_hooks_are_declared_whole():
    """Every hook HandleBase calls is declared in Hooks, abstract, with a one-line contract."""
    assert len(HOOKS) > 25 and all(h.startswith("_") for h in HOOKS)
    called = set(re.findall(r"self\.(_[a-z][a-z_]*)\(", inspect.getsource(HandleBase)))
    helpers = {name for name, value in vars(HandleBase).items() if callable(value)}
    assert called - helpers <= set(HOOKS), f"HandleBase calls undeclared hooks: {sorted(called - helpers - set(HOOKS))}"
    for hook in HOOKS:
        declared = inspect.getattr_static(Hooks, hook)
        doc = (declared.fget if isinstance(declared, property) else declared).__doc__
        assert doc and doc.strip() and "\n" not in doc.strip(), f"Hooks.{hook} has no one-line contract"


@pytest.mark.parametrize("cls", [JetStream, NatsJetStream], ids=lambda c: c.__name__)
@pytest.mark.parametrize("hook", HOOKS)
def test_each_backend_implements_each_hook_with_its_signature(cls, hook):
    assert hook not in cls.__abstractmethods__
    want, have = inspect.getattr_static(Hooks, hook), inspect.getattr_static(cls, hook)
    if isinstance(want, property):
        assert isinstance(have, property), f"{cls.__name__}.{hook} is not a property"
        return
    assert parameters(getattr(cls, hook)) == parameters(want), (
        f"{cls.__name__}.{hook}{inspect.signature(getattr(cls, hook))} "
        f"differs from Hooks.{hook}{inspect.signature(want)}"
    )


@pytest.mark.parametrize("cls", [JetStream, NatsJetStream], ids=lambda c: c.__name__)
def test_each_backend_names_its_backups(cls):
    assert cls._BACKUP_KIND in ("engine", "nats")


def test_a_handle_missing_a_hook_cannot_be_made():
    """The declaration is enforced: a backend that leaves out one hook fails at once."""
    body = {hook: inspect.getattr_static(JetStream, hook) for hook in HOOKS if hook != "_delete_consumer"}
    Partial = type("Partial", (HandleBase,), body)
    with pytest.raises(TypeError, match="_delete_consumer"):
        Partial()


def test_every_verb_shows_its_contract():
    """help(js.verb) shows the contract declared in jetspark.backend, on either handle."""
    for cls in (JetStream, NatsJetStream):
        for name, declared in vars(JetStreamAPI).items():
            if not name.startswith("_") and callable(declared):
                assert getattr(cls, name).__doc__, f"{cls.__name__}.{name} has no docstring"
    assert JetStream.read_batches.__doc__ == JetStreamAPI.read_batches.__doc__


def _check_live_objects(js) -> None:
    assert isinstance(js, JetStreamAPI)
    js.add_stream(name="PROTO", subjects=["proto.>"])
    js.publish("proto.a", b"x")
    sub = js.pull_subscribe("proto.a", durable="D")
    assert isinstance(sub, PullSubscriptionAPI)
    (msg,) = sub.fetch(1, timeout=1)
    assert isinstance(msg, MsgAPI)
    msg.ack()
    assert js.ack_floor("PROTO", "D").stream_seq == 1
    (ordered,) = list(js.ordered_consumer("PROTO"))
    assert isinstance(ordered, MsgAPI)
    push = js.subscribe("proto.a")
    assert isinstance(push, PushSubscriptionAPI)
    assert isinstance(push.next_msg(timeout=5), MsgAPI)
    push.unsubscribe()


def test_an_engine_handle_is_a_jetstream_api(tmp_path):
    with jetspark.connect(tmp_path / "store") as js:
        assert isinstance(js, JetStream)
        _check_live_objects(js)
        js.delete_stream("PROTO")


@pytest.mark.server
def test_a_nats_handle_is_a_jetstream_api(server):
    with jetspark.connect(server.url, timeout=3) as js:
        assert isinstance(js, NatsJetStream)
        try:
            _check_live_objects(js)
        finally:
            drop_streams(js)


def test_an_object_missing_a_verb_is_not_a_jetstream_api():
    """The isinstance checks above can fail: an object without one verb is refused."""

    def handle_without(*missing: str):
        methods = {verb: (lambda self: None) for verb in declared(JetStreamAPI) if verb not in missing}
        return type("Handle", (), methods)()

    assert isinstance(handle_without(), JetStreamAPI)
    assert not isinstance(handle_without("advance_ack_floor"), JetStreamAPI)


CONTRACT_SUITE = pathlib.Path(__file__).resolve().parent / "contract"


@pytest.mark.parametrize(
    "protocol",
    [JetStreamAPI, PullSubscriptionAPI, PushSubscriptionAPI, MsgAPI, MessagesAPI, ConsumeContextAPI],
    ids=lambda p: p.__name__,
)
def test_the_contract_suite_calls_every_declared_verb(protocol):
    """Every verb the Protocols declare is called somewhere in tests/contract, whose tests run
    on every backend: a verb added to the contract without a contract test fails here."""
    source = "\n".join(path.read_text() for path in sorted(CONTRACT_SUITE.glob("test_*.py")))
    verbs = [name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")]
    assert verbs, f"{protocol.__name__} declares no verbs"
    untested = [verb for verb in verbs if not re.search(rf"\.{verb}\(", source)]
    assert not untested, f"{protocol.__name__} verbs no test in tests/contract calls: {untested}"
