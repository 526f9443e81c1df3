"""``stream add``'s flags for the server features (``nats stream add``'s names): on a
nats-server they create what the API creates and ``stream info`` shows them, mirrors and
sources with their lag as ``nats stream info`` does; on the embedded engine they are
refused, naming the field, and nothing is created."""

from __future__ import annotations

import uuid

import pytest

import jetspark
from jetspark.api import (
    PersistMode,
    Placement,
    RePublish,
    StoreCompression,
    StreamConsumerLimits,
    StreamSource,
    SubjectTransform,
)


@pytest.fixture
def url(server):
    yield server.url
    with jetspark.connect(server.url) as js:
        for name in js.stream_names():
            if name.startswith("CLI"):
                js.delete_stream(name)


def fresh(prefix: str) -> str:
    return f"CLI{prefix}{uuid.uuid4().hex[:8].upper()}"


def wait_copied(url: str, stream: str, count: int) -> None:
    """Until ``stream`` holds ``count`` messages (a pull that waits for them, bounded)."""
    with jetspark.connect(url) as js:
        sub = js.pull_subscribe(stream=stream, config={"ack_policy": "none"})
        got = 0
        while got < count:
            batch = sub.fetch(count - got, timeout=15)
            assert batch, f"{stream} holds {got} of {count} messages after 15 s"
            got += len(batch)


def test_stream_add_mirror_and_stream_info_shows_it_with_its_lag(cli, url):
    origin, mirror = fresh("O"), fresh("M")
    cli("-s", url, "stream", "add", origin, "--subjects", f"{origin}.>")
    cli("-s", url, "pub", f"{origin}.a", "x{{Count}}", "--count", "3")
    r = cli("-s", url, "stream", "add", mirror, "--mirror", origin)
    assert f"Mirror: {origin}\n" in r.stdout
    assert "Mirror Information:" in r.stdout and f"Stream Name: {origin}" in r.stdout
    wait_copied(url, mirror, 3)

    text = cli("-s", url, "stream", "info", mirror).stdout
    section = text.split("Mirror Information:")[1].split("State:")[0]
    assert f"Stream Name: {origin}" in section and "Lag: 0" in section and "Last Seen:" in section
    assert "Messages: 3" in text.split("State:")[1]
    doc = cli.json("-s", url, "stream", "info", mirror)
    assert doc["config"]["mirror"] == {"name": origin}
    assert "subjects" not in doc["config"]
    assert doc["mirror"]["name"] == origin and doc["mirror"]["lag"] == 0
    with jetspark.connect(url) as js:
        assert js.stream_info(mirror).config.mirror == StreamSource(name=origin)


def test_stream_add_sources_transform_republish_and_the_rest(cli, url):
    a, b, s = fresh("A"), fresh("B"), fresh("S")
    cli("-s", url, "stream", "add", a, "--subjects", f"{a}.>")
    cli("-s", url, "stream", "add", b, "--subjects", f"{b}.>")
    cli(
        "-s", url, "stream", "add", s, "--subjects", f"{s}.in.>", "--source", a, "--source", b,
        "--transform-source", f"{s}.in.>", "--transform-destination", f"{s}.out.>",
        "--republish-source", f"{s}.out.>", "--republish-destination", f"again.{s}.>", "--republish-headers",
        "--compression", "s2", "--persist-mode", "async", "--cluster", "east",
        "--limit-consumer-inactive", "1m", "--limit-consumer-max-pending", "50",
        "--allow-msg-ttl", "--subject-del-markers-ttl", "5m",
    )  # fmt: skip
    with jetspark.connect(url) as js:
        c = js.stream_info(s).config
    assert c.sources == [StreamSource(name=a), StreamSource(name=b)]
    assert c.subject_transform == SubjectTransform(src=f"{s}.in.>", dest=f"{s}.out.>")
    assert c.republish == RePublish(src=f"{s}.out.>", dest=f"again.{s}.>", headers_only=True)
    assert (c.compression, c.persist_mode) == (StoreCompression.S2, PersistMode.ASYNC)
    assert c.placement == Placement(cluster="east")
    assert c.consumer_limits == StreamConsumerLimits(inactive_threshold=60.0, max_ack_pending=50)
    assert (c.allow_msg_ttl, c.subject_delete_marker_ttl) == (True, 300.0)

    cli("-s", url, "pub", f"{a}.1", "from-a")
    cli("-s", url, "pub", f"{s}.in.1", "own")
    wait_copied(url, s, 2)
    text = cli("-s", url, "stream", "info", s).stdout
    for line in (
        f"Sources: {a}",
        f"Source 2: {b}",
        f"Subject Transform: {s}.in.> to {s}.out.>",
        f"Republishing Headers: {s}.out.> to again.{s}.>",
        "Compression: s2",
        "Persistence Mode: async",
        "Placement Cluster: east",
        "Consumer Inactive Threshold: 1m",
        "Consumer Max Ack Pending: 50",
        "Allows Per-Message TTL: true",
        "Subject Delete Markers TTL: 5m",
    ):
        assert line in text, line
    sources = text.split("Source Information:")[1].split("State:")[0]
    assert sources.count("Stream Name:") == 2 and f"Stream Name: {a}" in sources and f"Stream Name: {b}" in sources
    assert "Messages: 2" in text.split("State:")[1]

    r = cli("-s", url, "stream", "edit", s, "--no-republish", "--no-transform")
    assert f"Republishing Headers: {s}.out.> to again.{s}.> -> -" in r.stdout
    with jetspark.connect(url) as js:
        c = js.stream_info(s).config
    assert (
        c.republish is None
        and c.subject_transform is None
        and c.sources == [StreamSource(name=a), StreamSource(name=b)]
    )


def test_stream_edit_of_one_consumer_limit_keeps_the_other(cli, url):
    s = fresh("L")
    cli("-s", url, "stream", "add", s, "--subjects", f"{s}.>", "--limit-consumer-inactive", "1m")
    cli("-s", url, "stream", "edit", s, "--limit-consumer-max-pending", "50")
    with jetspark.connect(url) as js:
        limits = js.stream_info(s).config.consumer_limits
    assert limits == StreamConsumerLimits(inactive_threshold=60.0, max_ack_pending=50)
    cli("-s", url, "stream", "edit", s, "--limit-consumer-inactive", "2m")
    with jetspark.connect(url) as js:
        limits = js.stream_info(s).config.consumer_limits
    assert limits == StreamConsumerLimits(inactive_threshold=120.0, max_ack_pending=50)


def test_a_placement_flag_given_alone_keeps_the_other_half():
    from jetspark.api import StreamConfig
    from jetspark.cli.stream_config import config_changes

    base = StreamConfig(name="P", placement=Placement(cluster="east", tags=["ssd"]))
    assert config_changes({"placement_tags": ("fast",)}, base)["placement"] == Placement(cluster="east", tags=["fast"])
    assert config_changes({"placement_cluster": "west"}, base)["placement"] == Placement(cluster="west", tags=["ssd"])
    assert config_changes({"placement_tags": ("fast",)})["placement"] == Placement(tags=["fast"])


def test_a_counter_stream_from_the_command_line(cli, url):
    c = fresh("C")
    cli("-s", url, "stream", "add", c, "--subjects", f"{c}.>", "--allow-counter")
    assert "Allows Counters: true" in cli("-s", url, "stream", "info", c).stdout
    acks = cli.json_lines("-s", url, "pub", f"{c}.x", "", "-H", "Nats-Incr:2", "--count", "3")
    assert [a["val"] for a in acks] == ["2", "4", "6"]


def test_the_server_s_error_for_a_mirror_with_subjects(cli, url):
    origin, mirror = fresh("O"), fresh("M")
    cli("-s", url, "stream", "add", origin, "--subjects", f"{origin}.>")
    r = cli("-s", url, "stream", "add", mirror, "--mirror", origin, "--subjects", "x.y", code=1)
    assert "stream mirrors can not contain subjects" in r.stderr and "10034" in r.stderr
    with jetspark.connect(url) as js:
        assert mirror not in js.stream_names()


@pytest.mark.parametrize(
    "flags, field",
    [
        (["--mirror", "ORIGIN"], "mirror"),
        (["--source", "ORIGIN"], "sources"),
        (["--compression", "s2"], "compression"),
        (["--allow-counter"], "allow_msg_counter"),
        (["--transform-destination", "t.>"], "subject_transform"),
        (["--republish-source", ">", "--republish-destination", "r.>"], "republish"),
    ],
)
def test_the_engine_refuses_them_naming_the_field(cli, flags, field):
    r = cli("stream", "add", "E", "--subjects", "e.>", *flags, code=1)
    assert f"['{field}'] not supported by the embedded engine" in r.stderr
    assert cli.json("stream", "ls") == []


def test_half_given_pairs_are_usage_errors(cli):
    for flags in (["--transform-source", "a.>"], ["--republish-source", "a.>"], ["--republish-headers"]):
        r = cli("stream", "add", "E", *flags, code=2)
        assert "--transform-destination" in r.stderr or "--republish-" in r.stderr


def test_consumer_add_pause_on_a_server_and_consumer_info_shows_it(cli, url):
    s = fresh("P")
    cli("-s", url, "stream", "add", s, "--subjects", f"{s}.>")
    doc = cli.json("-s", url, "consumer", "add", s, "D", "--pause", "1h")
    assert doc["paused"] is True and 0 < doc["pause_remaining"] <= 3600 * 10**9
    text = cli("-s", url, "consumer", "info", s, "D").stdout
    assert "Paused Until Deadline: " in text and " remaining)" in text.split("State:")[1]
    with jetspark.connect(url) as js:
        info = js.consumer_info(s, "D")
    assert info.paused is True
    assert info.config.pause_until.isoformat().replace("+00:00", "Z")[:19] == doc["config"]["pause_until"][:19]
    until = cli.json("-s", url, "consumer", "add", s, "E", "--pause", "2020-01-02T03:04:05Z")
    assert until["config"]["pause_until"].startswith("2020-01-02T03:04:05") and "paused" not in until
    r = cli("-s", url, "consumer", "add", s, "F", "--pause", "soon", code=2)
    assert "neither a duration (1h) nor an RFC 3339 time" in r.stderr


def test_consumer_add_pause_on_the_engine(cli):
    cli("stream", "add", "E", "--subjects", "e.>")
    doc = cli.json("consumer", "add", "E", "D", "--pause", "1h")
    assert doc["paused"] is True and 0 < doc["pause_remaining"] <= 3600 * 10**9
    assert "Paused Until Deadline: " in cli("consumer", "info", "E", "D").stdout
    r = cli("consumer", "add", "E", "F", "--pause", "soon", code=2)
    assert "neither a duration (1h) nor an RFC 3339 time" in r.stderr
    assert [c["name"] for c in cli.json("consumer", "ls", "E")] == ["D"]


def test_the_flags_whose_help_says_the_engine_refuses_them_set_only_fields_it_refuses():
    """``stream add --help`` marks the flags of the features the engine does not implement: each
    marked flag sets only fields in the engine's ``UNIMPLEMENTED``, each unmarked one none."""
    import click

    from jetspark.cli.stream_config import config_changes
    from jetspark.cli.streams import stream
    from jetspark.engine.config import UNIMPLEMENTED

    partners = {  # the flags a flag needs beside it
        "transform_source": {"transform_destination": "t.>"},
        "republish_source": {"republish_destination": "r.>"},
        "republish_destination": {"republish_source": ">"},
        "republish_headers": {"republish_source": ">", "republish_destination": "r.>"},
    }
    marked = 0
    for p in stream.commands["add"].params:
        if not isinstance(p, click.Option) or p.name in ("config_file",):
            continue
        if p.is_flag:
            value = True
        elif isinstance(p.type, click.Choice):
            value = p.type.choices[-1]  # (s2, async: not the default)
        elif p.multiple:
            value = ("x",)
        elif p.type is click.INT:
            value = 5
        elif "duration" in type(p.type).__name__.lower():
            value = 60.0
        else:
            value = "x"
        try:
            fields = set(config_changes({p.name: value, **partners.get(p.name, {})}))
        except click.ClickException:  # a flag of the engine's features whose value this guess is not
            assert not (p.help and "the embedded engine refuses it" in p.help), p.opts
            continue
        if p.help and "the embedded engine refuses it" in p.help:
            marked += 1
            assert fields and fields <= set(UNIMPLEMENTED), (p.opts, fields)
        else:
            assert not fields & set(UNIMPLEMENTED), (p.opts, fields)
    assert marked >= 10
