"""Subjects: stream subject validity, capture, overlap and publish routing (docs/semantics.md §2).

Every expected value below was checked against nats-server v2.15.1 (the
``oracle-*`` parametrisations of the ``js`` fixture); the engine must give the
same answers.  Streams configured with ``no_ack`` are never published to here:
such a stream sends no PubAck, so a publish would only time out.
"""

from __future__ import annotations

import contextlib

import pytest

import jetspark.errors
from tests.contract import consumer_support as cs

HTTP_CODE = {10052: 500, 10060: 400, 10065: 400}


@contextlib.contextmanager
def api_error(err_code: int, description: str | None = None):
    """Expect a jetspark APIError with ``err_code``, its HTTP code and exactly ``description``."""
    with pytest.raises(jetspark.errors.APIError) as e:
        yield e
    err = e.value
    assert err.err_code == err_code, str(err)
    assert err.code == HTTP_CODE[err_code], str(err)
    if description is not None:
        assert err.description == description, str(err)


def no_stream(js, subject: str, **kw) -> None:
    with pytest.raises(jetspark.errors.NoStreamResponseError):
        js.publish(subject, b"x", **kw)


# --------------------------------------------------------------------------- valid stream subjects

# Subject lists a stream accepts and echoes back unchanged.
VALID_SUBJECTS = [
    ["a"],
    ["a.b.c"],
    ["a.*"],
    ["a.>"],
    ["*"],  # one token cannot reach $JS.> (two or more)
    ["a.*.>"],
    ["x.*.*"],
    ["a.*.b"],
    # '*' and '>' are wildcards only as whole tokens: these are literals
    ["ba*"],
    ["ba>"],
    ["a.**"],
    ["a.>>"],
    ["a.b*c"],
    # any non-whitespace character is allowed in a token
    ["a.é"],
    ["a\u00a0b"],  # NBSP is not whitespace to the server
    ["a-b_c~!@#%^&()"],
    # reserved-looking prefixes the server lets through without no_ack
    ["_INBOX.>"],
    ["$JS.EVENT.>"],
    ["$JS.EVENT.foo.>"],
    ["$SYS.ACCOUNT.x"],
    ["$JSX.a"],
    # several subjects that do not collide
    ["a.>", "a"],  # 'a.>' does not match 'a'
    ["a.*", "a.*.*"],
    ["a.b", "a.c"],
    ["a.>", "b.>"],
    ["foo.>", "bar.*", "baz"],
]


@pytest.mark.parametrize("subjects", VALID_SUBJECTS, ids=[repr(s) for s in VALID_SUBJECTS])
def test_valid_stream_subjects_are_echoed(js, subjects):
    info = js.add_stream(name="S", subjects=subjects)
    assert info.config.subjects == subjects
    assert js.stream_info("S").config.subjects == subjects


# --------------------------------------------------------------------------- invalid stream subjects

INVALID_SUBJECT = "invalid subject"

# id, subjects, err_code, description
INVALID_SUBJECTS = [
    # --- not a valid subject
    ("empty", [""], 10052, INVALID_SUBJECT),
    ("empty token inside", ["a..b"], 10052, INVALID_SUBJECT),
    ("leading dot", [".a"], 10052, INVALID_SUBJECT),
    ("trailing dot", ["a."], 10052, INVALID_SUBJECT),
    ("space inside", ["a b"], 10052, INVALID_SUBJECT),
    ("leading space", [" a"], 10052, INVALID_SUBJECT),
    ("trailing space", ["a "], 10052, INVALID_SUBJECT),
    ("tab", ["a\tb"], 10052, INVALID_SUBJECT),
    ("newline", ["a\nb"], 10052, INVALID_SUBJECT),
    ("carriage return", ["a.b\r"], 10052, INVALID_SUBJECT),
    ("> not last", ["a.>.b"], 10052, INVALID_SUBJECT),
    ("> first", [">.a"], 10052, INVALID_SUBJECT),
    ("> twice", ["a.>.>"], 10052, INVALID_SUBJECT),
    ("*.> not last", ["*.>.b"], 10052, INVALID_SUBJECT),
    ("one bad among good", ["a", "b..c"], 10052, INVALID_SUBJECT),
    # --- two subjects of one stream collide (message names them in list order)
    ("wildcard then literal", ["a.*", "a.b"], 10052, 'subject "a.*" overlaps with "a.b"'),
    ("literal then wildcard", ["a.b", "a.*"], 10052, 'subject "a.b" overlaps with "a.*"'),
    ("duplicate", ["a", "a"], 10052, 'subject "a" overlaps with "a"'),
    ("> covers *", ["a.>", "a.*.c"], 10052, 'subject "a.>" overlaps with "a.*.c"'),
    ("partial wildcards", ["a.*.c", "a.b.*"], 10052, 'subject "a.*.c" overlaps with "a.b.*"'),
    ("first colliding pair", ["x", "a.>", "a.b.c"], 10052, 'subject "a.>" overlaps with "a.b.c"'),
    ("non-adjacent pair", ["a.>", "b", "a.x"], 10052, 'subject "a.>" overlaps with "a.x"'),
    # --- capturing everything, or the JetStream / system API, needs no_ack
    (">", [">"], 10052, "capturing all subjects requires no-ack to be true"),
    ("> first among others", [">", "a"], 10052, "capturing all subjects requires no-ack to be true"),
    # checks run subject by subject in list order: "a" meets ">" as a pair first
    ("> after another", ["a", ">"], 10052, 'subject "a" overlaps with ">"'),
    ("*.>", ["*.>"], 10052, "subjects that overlap with jetstream api require no-ack to be true"),
    ("*.*", ["*.*"], 10052, "subjects that overlap with jetstream api require no-ack to be true"),
    ("*.b", ["*.b"], 10052, "subjects that overlap with jetstream api require no-ack to be true"),
    ("*.*.*", ["*.*.*"], 10052, "subjects that overlap with jetstream api require no-ack to be true"),
    ("$JS.>", ["$JS.>"], 10052, "subjects that overlap with jetstream api require no-ack to be true"),
    ("$JS.API.foo", ["$JS.API.foo"], 10052, "subjects that overlap with jetstream api require no-ack to be true"),
    ("$JS.ACK.>", ["$JS.ACK.>"], 10052, "subjects that overlap with jetstream api require no-ack to be true"),
    ("$JSC.x", ["$JSC.x"], 10052, "subjects that overlap with jetstream api require no-ack to be true"),
    ("$NRG.>", ["$NRG.>"], 10052, "subjects that overlap with jetstream api require no-ack to be true"),
    (
        "api check before pair check",
        ["a.*", "*.b.c"],
        10052,
        "subjects that overlap with jetstream api require no-ack to be true",
    ),
    ("$SYS.>", ["$SYS.>"], 10052, "subjects that overlap with system api require no-ack to be true"),
    ("$SYS.x", ["$SYS.x"], 10052, "subjects that overlap with system api require no-ack to be true"),
]


@pytest.mark.parametrize(
    "subjects,err_code,description",
    [row[1:] for row in INVALID_SUBJECTS],
    ids=[row[0] for row in INVALID_SUBJECTS],
)
def test_invalid_stream_subjects_are_rejected(js, subjects, err_code, description):
    with api_error(err_code, description):
        js.add_stream(name="S", subjects=subjects)
    assert js.stream_names() == []


@pytest.mark.parametrize(
    "subjects,err_code,description",
    [row[1:] for row in INVALID_SUBJECTS],
    ids=[row[0] for row in INVALID_SUBJECTS],
)
def test_invalid_stream_subjects_are_rejected_on_update(js, subjects, err_code, description):
    before = js.add_stream(name="S", subjects=["keep"])
    with api_error(err_code, description):
        js.update_stream(name="S", subjects=subjects)
    assert js.stream_info("S").config == before.config
    assert js.publish("keep", b"x").seq == 1


@pytest.mark.parametrize("subjects", [[">"], ["*.>"], ["*.*"], ["$JS.API.foo"], ["$SYS.>"]], ids=repr)
def test_no_ack_allows_capturing_everything_and_the_apis(js, subjects):
    info = js.add_stream(name="S", subjects=subjects, no_ack=True)
    assert info.config.subjects == subjects
    assert info.config.no_ack is True
    assert js.stream_names() == ["S"]


# --------------------------------------------------------------------------- capture


def test_capture_example(js):
    js.add_stream(name="S", subjects=["foo.>", "bar.*", "baz"])
    captured = ["foo.a", "foo.a.b", "bar.a", "baz"]
    for seq, subject in enumerate(captured, 1):
        ack = js.publish(subject, subject.encode())
        assert (ack.stream, ack.seq) == ("S", seq)
    # '>' needs at least one token; '*' exactly one; literals match only themselves.
    for subject in ["foo", "bar", "bar.a.b", "baz.a", "fooa.b", "ba", "bazz", "x.foo.a"]:
        no_stream(js, subject)
    st = js.stream_info("S").state
    assert (st.messages, st.first_seq, st.last_seq, st.num_subjects) == (4, 1, 4, 4)
    for seq, subject in enumerate(captured, 1):
        msg = js.get_msg("S", seq=seq)
        assert (msg.subject, msg.data) == (subject, subject.encode())


def test_star_and_gt_inside_a_token_are_literal(js):
    js.add_stream(name="S", subjects=["ba*", "q>", "x.b*c"])
    assert js.publish("ba*").seq == 1
    assert js.publish("q>").seq == 2
    assert js.publish("x.b*c").seq == 3
    for subject in ["bax", "ba", "q", "q.x", "qq", "x.bc", "x.bxc", "x.b*c.d"]:
        no_stream(js, subject)
    assert js.stream_info("S").state.messages == 3
    assert [js.get_msg("S", seq=s).subject for s in (1, 2, 3)] == ["ba*", "q>", "x.b*c"]


def test_multi_token_wildcards(js):
    js.add_stream(name="S", subjects=["a.*.c", "b.*.>", "*"])
    for subject in ["a.x.c", "b.x.y", "b.x.y.z", "single"]:
        js.publish(subject)
    for subject in ["a.x.d", "a.x.c.d", "a.c", "b.x", "x.y"]:  # single tokens all go to "*"
        no_stream(js, subject)
    st = js.stream_info("S").state
    assert (st.messages, st.last_seq) == (4, 4)


def test_wildcard_tokens_in_a_published_subject_are_literal(js):
    # The server does not refuse a publish whose subject contains '*' or '>'
    # tokens: they are matched as literal tokens against the stream's subjects
    # and stored verbatim.
    js.add_stream(name="S", subjects=["bar.>", "foo.x", "one.*"])
    assert js.publish("bar.*").seq == 1  # 'bar.>' matches any second token
    assert js.publish("bar.>").seq == 2
    assert js.publish("bar.a.>").seq == 3
    assert js.publish("one.*").seq == 4  # '*' matches the literal token '*'
    no_stream(js, "foo.*")  # 'foo.x' does not match the token '*'
    no_stream(js, "foo.>")
    no_stream(js, "*")
    no_stream(js, ">")
    assert [js.get_msg("S", seq=s).subject for s in (1, 2, 3, 4)] == ["bar.*", "bar.>", "bar.a.>", "one.*"]
    assert js.stream_info("S").state.messages == 4


@pytest.mark.parametrize("subject", ["a..b", "a.", ".a", "x..", "x.", "a.b.", ".x.y", "foo..a"])
def test_publish_to_an_invalid_subject_is_not_captured(js, subject):
    js.add_stream(name="S", subjects=["a.>", "x.*", "foo.>"])
    no_stream(js, subject)
    st = js.stream_info("S").state
    assert (st.messages, st.last_seq) == (0, 0)


def test_publish_without_any_stream(js):
    no_stream(js, "a")
    no_stream(js, "a.b.c")
    assert js.stream_names() == []


# --------------------------------------------------------------------------- overlap across streams

# subjects of a second stream B, next to stream A on ["foo.*", "bar", "k.a.*"]
# (no '*.x' here: a leading '*' with two or more tokens hits the JetStream API rule)
COLLIDING = [
    ["foo.x"],  # matched by foo.*
    ["foo.>"],  # covers foo.*
    ["k.*.b"],  # k.a.b matches both k.*.b and k.a.*
    ["bar"],  # identical
    ["*"],  # matches bar
    ["x", "bar"],  # one colliding entry is enough
    ["foo.*"],
]
NOT_COLLIDING = [
    ["foo"],  # foo.* needs two tokens
    ["foo.x.y"],
    ["foo.*.*"],
    ["foo.*.>"],
    ["bar.>"],  # bar.> needs a token after bar
    ["baz", "qux.*"],
    ["k.b.*", "k.*.a.b"],
]


@pytest.mark.parametrize("subjects", COLLIDING, ids=repr)
def test_subjects_overlapping_another_stream_are_10065(js, subjects):
    a = js.add_stream(name="A", subjects=["foo.*", "bar", "k.a.*"])
    with api_error(10065, "subjects overlap with an existing stream") as e:
        js.add_stream(name="B", subjects=subjects)
    assert isinstance(e.value, jetspark.errors.BadRequestError)
    assert js.stream_names() == ["A"]
    assert js.stream_info("A").config == a.config


@pytest.mark.parametrize("subjects", NOT_COLLIDING, ids=repr)
def test_subjects_not_overlapping_another_stream_are_accepted(js, subjects):
    js.add_stream(name="A", subjects=["foo.*", "bar", "k.a.*"])
    assert js.add_stream(name="B", subjects=subjects).config.subjects == subjects
    assert js.stream_names() == ["A", "B"]


def test_default_subject_overlapping_another_stream_is_10065(js):
    # A stream named "bar" defaults to subject "bar", which A already captures.
    js.add_stream(name="A", subjects=["foo.*", "bar"])
    with api_error(10065, "subjects overlap with an existing stream"):
        js.add_stream(name="bar")
    assert js.stream_names() == ["A"]


def test_a_catch_all_stream_overlaps_everything(js):
    js.add_stream(name="ALL", subjects=[">"], no_ack=True)
    with api_error(10065, "subjects overlap with an existing stream"):
        js.add_stream(name="B", subjects=["x"])
    assert js.stream_names() == ["ALL"]


def test_catch_all_stream_overlaps_existing_streams(js):
    js.add_stream(name="A", subjects=["x"])
    with api_error(10065, "subjects overlap with an existing stream"):
        js.add_stream(name="ALL", subjects=[">"], no_ack=True)
    assert js.stream_names() == ["A"]


def test_update_adding_an_overlapping_subject_is_10065(js):
    js.add_stream(name="A", subjects=["foo.*", "bar"])
    b = js.add_stream(name="B", subjects=["baz"])
    with api_error(10065, "subjects overlap with an existing stream"):
        js.update_stream(name="B", subjects=["baz", "foo.y"])
    assert js.stream_info("B").config == b.config
    # A stream's own subjects never count against it.
    info = js.update_stream(name="A", subjects=["foo.*", "bar", "qq"])
    assert info.config.subjects == ["foo.*", "bar", "qq"]
    # A subject released by one stream can be taken by another.
    js.update_stream(name="A", subjects=["foo.*"])
    assert js.update_stream(name="B", subjects=["baz", "bar"]).config.subjects == ["baz", "bar"]
    assert js.publish("bar").stream == "B"


def test_deleting_a_stream_releases_its_subjects(js):
    js.add_stream(name="A", subjects=["a.>"])
    js.delete_stream("A")
    # (the account's last stream gone: a server may refuse a file stream for a moment, 10049)
    assert cs.add_stream(js, name="B", subjects=["a.b"]).config.subjects == ["a.b"]
    assert js.publish("a.b").stream == "B"


# --------------------------------------------------------------------------- routing


def test_publish_goes_to_the_stream_that_captures_it(js):
    js.add_stream(name="A", subjects=["a.*"])
    js.add_stream(name="B", subjects=["b.>"])
    js.add_stream(name="C")  # subject "C"
    expected = [("a.1", "A", 1), ("b.1.2", "B", 1), ("C", "C", 1), ("a.2", "A", 2), ("b.x", "B", 2)]
    for subject, stream, seq in expected:
        ack = js.publish(subject, subject.encode())
        assert (ack.stream, ack.seq, ack.duplicate) == (stream, seq, None)
    for name, n in [("A", 2), ("B", 2), ("C", 1)]:
        st = js.stream_info(name).state
        assert (st.messages, st.first_seq, st.last_seq) == (n, 1, n)
    assert js.get_msg("B", seq=1).subject == "b.1.2"
    assert js.get_msg("A", seq=2).data == b"a.2"
    no_stream(js, "c")  # stream names are case-sensitive subjects too
    no_stream(js, "a")


def test_expected_stream_matches(js):
    js.add_stream(name="A", subjects=["a.*"])
    js.add_stream(name="B", subjects=["b.*"])
    ack = js.publish("a.1", b"x", stream="A")
    assert (ack.stream, ack.seq) == ("A", 1)
    ack = js.publish("b.1", b"x", stream="B")
    assert (ack.stream, ack.seq) == ("B", 1)


@pytest.mark.parametrize("stream", ["B", "Z", "a"], ids=["other stream", "missing stream", "wrong case"])
def test_expected_stream_mismatch_is_10060(js, stream):
    js.add_stream(name="A", subjects=["a.*"])
    js.add_stream(name="B", subjects=["b.*"])
    js.publish("a.1", b"x")
    with api_error(10060, "expected stream does not match") as e:
        js.publish("a.2", b"x", stream=stream)
    assert isinstance(e.value, jetspark.errors.BadRequestError)
    # Nothing stored anywhere.
    for name, n in [("A", 1), ("B", 0)]:
        st = js.stream_info(name).state
        assert (st.messages, st.last_seq) == (n, n)
    assert js.publish("a.3", b"x").seq == 2


def test_expected_stream_on_an_uncaptured_subject(js):
    js.add_stream(name="A", subjects=["a.*"])
    no_stream(js, "zzz", stream="A")
    assert js.stream_info("A").state.messages == 0
