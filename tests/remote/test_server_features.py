"""Server features through jetspark's nats:// backend: mirrors, sources (with filters and
subject transforms), republish, stream subject transforms, message counters, compression,
placement and consumer pauses, all created through jetspark on a real nats-server and read
back as nats-py reads them on the same server (nats-py is the oracle).  The server decides
what is wrong, and its errors arrive as jetspark's typed errors with its err_codes.

Waiting for a mirror or a source to copy is a pull on the copy that returns once the
messages are there (a bounded fetch, no sleep-and-poll).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import nats
import pytest
from nats.js import api as napi
from nats.js.errors import APIError as NatsAPIError

import jetspark
from jetspark.api import (
    PersistMode,
    Placement,
    RePublish,
    StoreCompression,
    StreamSource,
    StreamSourceInfo,
    SubjectTransform,
)
from jetspark.errors import APIError, BadRequestError, ServerError

pytestmark = pytest.mark.server


def nats_py(url: str, fn):
    """``await fn(js)`` with nats-py's own JetStream context on the server at ``url``."""

    async def run():
        nc = await nats.connect(servers=url.split(","))
        try:
            return await fn(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(run())


def copied(js, stream: str, count: int) -> list:
    """The first ``count`` messages of ``stream`` once a mirror or source has copied them
    (a pull that waits for them, bounded by its timeout)."""
    sub = js.pull_subscribe(stream=stream, config={"ack_policy": "none"})
    got: list = []
    while len(got) < count:
        batch = sub.fetch(count - len(got), timeout=15)
        assert batch, f"{stream} holds {len(got)} of {count} messages after 15 s"
        got.extend(batch)
    sub.unsubscribe()
    return got


def same_source_info(ours: StreamSourceInfo, theirs: napi.StreamSourceInfo) -> None:
    """jetspark's StreamSourceInfo against nats-py's, field by field (``active`` is the
    time since the server last heard from the origin: it moves between the two calls)."""
    assert (ours.name, ours.lag, ours.error) == (theirs.name, theirs.lag, theirs.error)
    assert isinstance(ours.active, int) and isinstance(theirs.active, int)
    assert (ours.active >= 0) == (theirs.active >= 0)


def test_a_mirror_copies_its_origin_and_reports_as_nats_py_does(js, server, name):
    origin, mirror = name("O"), name("M")
    js.add_stream(name=origin, subjects=[f"{origin}.>"])
    for i in range(5):
        js.publish(f"{origin}.{i % 2}", b"m%d" % i, headers={"Nats-Msg-Id": f"id{i}"})
    info = js.add_stream(name=mirror, mirror=StreamSource(name=origin))
    assert info.config.mirror == StreamSource(name=origin) and info.config.subjects is None
    msgs = copied(js, mirror, 5)
    assert [(m.subject, m.data) for m in msgs] == [(f"{origin}.{i % 2}", b"m%d" % i) for i in range(5)]
    for seq in range(1, 6):
        a, b = js.get_msg(origin, seq), js.get_msg(mirror, seq)
        assert (a.subject, a.data, a.seq, a.headers["Nats-Msg-Id"]) == (
            b.subject,
            b.data,
            b.seq,
            b.headers["Nats-Msg-Id"],
        )

    ours = js.stream_info(mirror)
    theirs = nats_py(server.url, lambda njs: njs.stream_info(mirror))
    assert ours.state.messages == theirs.state.messages == 5
    assert ours.sources is None and theirs.sources is None
    same_source_info(ours.mirror, theirs.mirror)
    assert ours.mirror.lag == 0
    assert ours.config.mirror.name == theirs.config.mirror.name == origin


def test_a_stream_sources_two_streams_with_a_filter_and_a_transform(js, server, name):
    a, b, s = name("A"), name("B"), name("S")
    js.add_stream(name=a, subjects=[f"{a}.>"])
    js.add_stream(name=b, subjects=[f"{b}.>"])
    sources = [
        StreamSource(name=a, filter_subject=f"{a}.keep"),
        StreamSource(name=b, subject_transforms=[SubjectTransform(src=f"{b}.>", dest=f"from{b}.>")]),
    ]
    info = js.add_stream(name=s, sources=sources)
    assert info.config.sources == sources
    for subject in (f"{a}.keep", f"{a}.drop", f"{b}.x", f"{a}.keep", f"{b}.y", f"{a}.drop"):
        js.publish(subject, subject.encode())
    msgs = copied(js, s, 4)
    assert sorted((m.subject, m.data) for m in msgs) == sorted(
        [(f"{a}.keep", f"{a}.keep".encode())] * 2
        + [(f"from{b}.x", f"{b}.x".encode()), (f"from{b}.y", f"{b}.y".encode())]
    )

    ours = js.stream_info(s)
    theirs = nats_py(server.url, lambda njs: njs.stream_info(s))
    assert ours.state.messages == theirs.state.messages == 4  # the dropped subject never came
    assert ours.mirror is None and theirs.mirror is None
    # (the server lists a stream's sources in no fixed order)
    mine, nats_py_s = ({i.name: i for i in infos} for infos in (ours.sources, theirs.sources))
    assert sorted(mine) == sorted(nats_py_s) == sorted([a, b]) and len(ours.sources) == 2
    for source in (a, b):
        same_source_info(mine[source], nats_py_s[source])
    # The server's own fields of a source's info that nats-py drops, jetspark keeps.
    assert mine[a].filter_subject == f"{a}.keep" and mine[a].subject_transforms is None
    assert mine[b].subject_transforms == [SubjectTransform(src=f"{b}.>", dest=f"from{b}.>")]
    assert [(x.name, x.filter_subject) for x in theirs.config.sources] == [(a, f"{a}.keep"), (b, None)]


def test_a_source_added_by_an_update_starts_copying(js, name):
    a, s = name("A"), name("S")
    js.add_stream(name=a, subjects=[f"{a}.>"])
    js.add_stream(name=s, subjects=[f"{s}.>"])
    js.publish(f"{a}.1", b"before")
    js.publish(f"{s}.own", b"own")
    info = js.update_stream(name=s, subjects=[f"{s}.>"], sources=[{"name": a}])
    assert info.config.sources == [StreamSource(name=a)]
    msgs = copied(js, s, 2)
    assert [(m.subject, m.data) for m in msgs] == [(f"{s}.own", b"own"), (f"{a}.1", b"before")]


def test_republish_sends_each_stored_message_to_a_core_subscription(js, server, name):
    r = name("R")
    js.add_stream(name=r, subjects=[f"{r}.>"], republish=RePublish(src=f"{r}.>", dest=f"again.{r}.>"))
    assert js.stream_info(r).config.republish == RePublish(src=f"{r}.>", dest=f"again.{r}.>")

    async def listen():
        nc = await nats.connect(server.url)
        try:
            sub = await nc.subscribe(f"again.{r}.>")
            await nc.flush()
            # jetspark's handle runs on its own loop thread: the publish does not block this one for long.
            acks = [await asyncio.to_thread(js.publish, f"{r}.{i}", b"p%d" % i) for i in range(3)]
            got = [await sub.next_msg(timeout=10) for _ in acks]
            return acks, got
        finally:
            await nc.close()

    acks, got = asyncio.run(listen())
    assert [m.subject for m in got] == [f"again.{r}.{i}" for i in range(3)]
    assert [m.data for m in got] == [b"p0", b"p1", b"p2"]
    assert [m.headers["Nats-Stream"] for m in got] == [r] * 3
    assert [int(m.headers["Nats-Sequence"]) for m in got] == [a.seq for a in acks] == [1, 2, 3]
    assert [m.headers["Nats-Subject"] for m in got] == [f"{r}.{i}" for i in range(3)]


def test_a_stream_subject_transform_stores_under_the_new_subject(js, server, name):
    t = name("T")
    js.add_stream(
        name=t, subjects=[f"{t}.in.>"], subject_transform=SubjectTransform(src=f"{t}.in.>", dest=f"{t}.out.>")
    )
    ack = js.publish(f"{t}.in.a", b"x")
    assert (ack.stream, ack.seq) == (t, 1)
    assert js.get_msg(t, 1).subject == f"{t}.out.a"
    assert js.stream_info(t, subjects_filter=">").state.subjects == {f"{t}.out.a": 1}
    theirs = nats_py(server.url, lambda njs: njs.get_msg(t, 1))
    assert theirs.subject == f"{t}.out.a"
    assert js.stream_info(t).config.subject_transform == SubjectTransform(src=f"{t}.in.>", dest=f"{t}.out.>")


def test_a_counter_stream_adds_increments_and_reads_as_nats_py(js, server, name):
    c = name("C")
    info = js.add_stream(name=c, subjects=[f"{c}.>"], allow_msg_counter=True)
    assert info.config.allow_msg_counter is True
    assert js.publish(f"{c}.x", b"", headers={"Nats-Incr": "5"}).val == "5"
    assert js.publish(f"{c}.x", b"", headers={"Nats-Incr": "-2"}).val == "3"
    assert js.publish(f"{c}.y", b"", headers={"Nats-Incr": "+10"}).val == "10"

    async def theirs(njs):
        ack = await njs.publish(f"{c}.x", b"", headers={"Nats-Incr": "4"})
        last = await njs.get_last_msg(c, f"{c}.x")
        return ack.val, json.loads(last.data)

    assert nats_py(server.url, theirs) == ("7", {"val": "7"})
    assert json.loads(js.get_last_msg(c, f"{c}.x").data) == {"val": "7"}
    assert json.loads(js.get_last_msg(c, f"{c}.y").data) == {"val": "10"}

    # A message without an increment is refused by the counter stream, through either client.
    with pytest.raises(APIError) as exc:
        js.publish(f"{c}.x", b"plain")
    with pytest.raises(NatsAPIError) as nats_exc:
        nats_py(server.url, lambda njs: njs.publish(f"{c}.x", b"plain"))
    assert (exc.value.err_code, exc.value.description) == (nats_exc.value.err_code, nats_exc.value.description)
    assert js.stream_info(c).state.last_seq == 4


def test_compression_persist_mode_and_placement_are_accepted(js, server, name):
    z = name("Z")
    info = js.add_stream(
        name=z,
        subjects=[f"{z}.>"],
        storage="file",
        compression="s2",
        persist_mode=PersistMode.ASYNC,
        placement=Placement(cluster=None, tags=None),
    )
    assert info.config.compression == StoreCompression.S2
    assert info.config.persist_mode == PersistMode.ASYNC
    js.publish(f"{z}.a", b"y" * 1000)
    assert js.get_msg(z, 1).data == b"y" * 1000
    theirs = nats_py(server.url, lambda njs: njs.stream_info(z))
    assert theirs.config.compression == "s2" and theirs.config.persist_mode == "async"


def test_a_paused_consumer_round_trips(js, server, name):
    p = name("P")
    js.add_stream(name=p, subjects=[f"{p}.>"])
    until = dt.datetime.now(dt.timezone.utc).replace(microsecond=123456) + dt.timedelta(days=1)
    info = js.add_consumer(p, durable_name="D", pause_until=until)
    assert info.config.pause_until == until
    # (``until``'s microseconds may put it up to a second past now + 1 day)
    assert info.paused is True and 0 < info.pause_remaining <= 86_401 * 10**9
    theirs = nats_py(server.url, lambda njs: njs.consumer_info(p, "D"))
    assert theirs.paused is True
    assert dt.datetime.fromisoformat(theirs.config.pause_until.replace("Z", "+00:00")) == until
    again = js.consumer_info(p, "D")
    assert again.config == info.config and again.paused is True
    # nats-py's own form (an RFC 3339 string) is taken too; a time past means not paused.
    past = js.add_consumer(p, durable_name="E", pause_until="2020-01-01T00:00:00Z")
    assert past.config.pause_until == dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)
    assert past.paused is None and past.pause_remaining is None


# ------------------------------------------------------------------ the server decides what is wrong

BAD = [
    # (what, config, the server's err_code)
    ("a mirror with subjects", lambda s, o: dict(subjects=[f"{s}.x"], mirror={"name": o}), 10034),
    ("a mirror and sources", lambda s, o: dict(mirror={"name": o}, sources=[{"name": o}]), 10031),
    ("mirror_direct without a mirror", lambda s, o: dict(subjects=[f"{s}.x"], mirror_direct=True), 10052),
    ("a republish cycle", lambda s, o: dict(subjects=[f"{s}.>"], republish={"src": f"{s}.>", "dest": f"{s}.>"}), 10052),
    (
        "a source's filter with transforms",
        lambda s, o: dict(
            sources=[{"name": o, "filter_subject": f"{o}.a", "subject_transforms": [{"src": f"{o}.a", "dest": "b"}]}]
        ),
        10144,
    ),
    ("async persist on memory", lambda s, o: dict(subjects=[f"{s}.x"], storage="memory", persist_mode="async"), 10052),
    ("an unknown compression", lambda s, o: dict(subjects=[f"{s}.x"], compression="zstd"), 10025),
    ("a mirror that is no object", lambda s, o: dict(mirror=o), 10025),
]


@pytest.mark.parametrize("what, config, err_code", BAD, ids=[b[0] for b in BAD])
def test_a_server_error_arrives_typed_with_its_err_code(js, server, name, what, config, err_code):
    origin, s = name("O"), name("S")
    js.add_stream(name=origin, subjects=[f"{origin}.>"])
    with pytest.raises(APIError) as exc:
        js.add_stream(name=s, **config(s, origin))
    assert exc.value.err_code == err_code, str(exc.value)
    assert isinstance(exc.value, ServerError if exc.value.code == 500 else BadRequestError)
    assert s not in js.stream_names()


def test_a_mirror_of_a_missing_stream_is_the_server_s_to_accept(js, server, name):
    m, missing = name("M"), name("NOPE")
    info = js.add_stream(name=m, mirror={"name": missing})
    theirs = nats_py(server.url, lambda njs: njs.stream_info(m))
    assert info.config.mirror == StreamSource(name=missing)
    same_source_info(js.stream_info(m).mirror, theirs.mirror)
    assert js.stream_info(m).state.messages == 0


def test_a_source_s_start_round_trips_and_its_stream_backs_up(js, server, name, tmp_path):
    origin, s = name("O"), name("S")
    js.add_stream(name=origin, subjects=[f"{origin}.>"])
    for i in range(4):
        js.publish(f"{origin}.x", b"%d" % i)
    start = dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc)
    sources = [StreamSource(name=origin, opt_start_seq=3), StreamSource(name=origin, opt_start_time=start)]
    info = js.add_stream(name=s, sources=sources[:1])
    assert info.config.sources == sources[:1]
    assert [m.data for m in copied(js, s, 2)] == [b"2", b"3"]  # from the origin's sequence 3
    m = name("M")
    assert js.add_stream(name=m, mirror=sources[1]).config.mirror == sources[1]
    theirs = nats_py(server.url, lambda njs: njs.stream_info(m))
    assert theirs.config.mirror.opt_start_time == start
    # A config holding a start time is plain JSON: a backup's manifest carries it.
    backup = js.backup_stream(m, tmp_path / "m.backup")
    assert backup.config.mirror == sources[1]


def test_a_replicated_mirror_placed_in_the_cluster(cluster, name):
    """On the 3-node cluster: an R3 origin, its R3 mirror placed by the cluster's name, and a
    placement no cluster matches refused by the cluster (its err_code, typed)."""
    origin, mirror = name("O"), name("M")
    with jetspark.connect(cluster.url, timeout=15) as js:
        try:
            js.add_stream(name=origin, subjects=[f"{origin}.>"], num_replicas=3)
            for i in range(3):
                js.publish(f"{origin}.x", b"%d" % i)
            info = js.add_stream(
                name=mirror, mirror=StreamSource(name=origin), num_replicas=3, placement=Placement(cluster=cluster.name)
            )
            assert info.config.placement == Placement(cluster=cluster.name) and info.config.num_replicas == 3
            assert [m.data for m in copied(js, mirror, 3)] == [b"0", b"1", b"2"]
            ours = js.stream_info(mirror)
            theirs = nats_py(cluster.url, lambda njs: njs.stream_info(mirror))
            same_source_info(ours.mirror, theirs.mirror)
            assert ours.cluster.name == theirs.cluster.name == cluster.name
            with pytest.raises(APIError) as exc:
                js.add_stream(name=name("X"), subjects=["nowhere.>"], placement=Placement(cluster="elsewhere"))
            errs = nats_py(
                cluster.url,
                lambda njs: _nats_py_error(
                    njs.add_stream(name="Y", subjects=["y.>"], placement=napi.Placement(cluster="elsewhere"))
                ),
            )
            assert (exc.value.err_code, exc.value.description) == errs
        finally:
            for n in (mirror, origin):
                if n in js.stream_names():
                    js.delete_stream(n)


async def _nats_py_error(call):
    try:
        await call
    except NatsAPIError as exc:
        return (exc.err_code, exc.description)
    raise AssertionError("nats-py's call succeeded")


@pytest.mark.parametrize("field", ["mirror_direct", "compression", "allow_msg_counter", "template_owner"])
def test_a_value_json_cannot_carry_is_10025_naming_the_field(js, name, field):
    s = name("S")
    with pytest.raises(BadRequestError) as exc:
        js.add_stream(name=s, subjects=[f"{s}.>"], **{field: b"bytes"})
    assert exc.value.err_code == 10025 and field in exc.value.description
    with pytest.raises(BadRequestError) as exc:
        js.add_stream(name=s, subjects=[f"{s}.>"], placement=Placement(cluster=object()))
    assert exc.value.err_code == 10025 and "placement" in exc.value.description
    js.add_stream(name="X" + s, subjects=[f"x{s}.>"])
    with pytest.raises(BadRequestError) as exc:
        js.add_consumer("X" + s, durable_name="C", sample_freq=b"50%")
    assert exc.value.err_code == 10025 and "sample_freq" in exc.value.description
    assert s not in js.stream_names() and js.stream_info("X" + s).state.consumer_count == 0
