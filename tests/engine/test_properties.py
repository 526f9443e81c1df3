"""Property tests: subject matching against an independent oracle, header codec round
trips, and a stateful model of a limits stream checked operation by operation."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import jetspark
from jetspark.engine import block_writer
from jetspark.errors import APIError
from jetspark.protocol import headers as H
from jetspark.protocol import subjects as S

# ---------------------------------------------------------------- subjects

TOKENS = st.sampled_from(["a", "b", "c", "ab"])
LITERAL = st.lists(TOKENS, min_size=1, max_size=4).map(".".join)
PATTERN_TOKENS = st.sampled_from(["a", "b", "c", "ab", "*"])


@st.composite
def patterns(draw):
    toks = draw(st.lists(PATTERN_TOKENS, min_size=1, max_size=4))
    if draw(st.booleans()):
        toks.append(">")
    return ".".join(toks)


def oracle(pattern: str, subject: str) -> bool:
    """NATS matching as a regular expression: * is one token, a trailing > one or more."""
    parts = []
    for tok in pattern.split("."):
        parts.append({"*": r"[^.]+", ">": r"[^.]+(?:\.[^.]+)*"}.get(tok, re.escape(tok)))
    return re.fullmatch(r"\.".join(parts), subject) is not None


@given(patterns(), LITERAL)
def test_matches_agrees_with_the_regex_oracle(pattern, subject):
    assert S.matches(pattern, subject) == oracle(pattern, subject)


@given(patterns(), patterns())
def test_collide_is_symmetric(a, b):
    assert S.collide(a, b) == S.collide(b, a)


@given(patterns(), LITERAL)
def test_a_match_is_a_collision(pattern, subject):
    if S.matches(pattern, subject):
        assert S.collide(pattern, subject)


@given(patterns(), patterns(), LITERAL)
def test_subset_means_every_match_carries_over(a, b, subject):
    if S.subset(a, b) and S.matches(a, subject):
        assert S.matches(b, subject)


@given(patterns(), patterns(), LITERAL)
def test_both_matching_one_subject_means_they_collide(a, b, subject):
    if S.matches(a, subject) and S.matches(b, subject):
        assert S.collide(a, b)


# ---------------------------------------------------------------- headers

HEADER_KEYS = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters=":"), min_size=1, max_size=12
)
HEADER_VALUES = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=20)


@given(st.dictionaries(HEADER_KEYS, st.lists(HEADER_VALUES, min_size=1, max_size=3), min_size=1, max_size=5))
def test_header_blocks_round_trip(headers):
    block = H.encode(headers)
    assert block.startswith(b"NATS/1.0\r\n") and block.endswith(b"\r\n\r\n")
    assert H.decode_multi(block) == headers
    for key, values in headers.items():
        assert H.lookup(block, key) == values[0]


# ---------------------------------------------------------------- a stream against a model

SUBJECTS = ["m.a", "m.b", "m.c"]


class LimitsStream(RuleBasedStateMachine):
    """The engine must agree with a plain list of messages after every operation.

    Blocks are tiny (8 messages) so block roll-over, unlinking and reopening
    across block boundaries are exercised.
    """

    def __init__(self):
        super().__init__()
        self.msgs: list[tuple[int, str, bytes]] = []  # the model: (seq, subject, payload)
        self.last = 0
        self.held = False

    @initialize(max_msgs=st.sampled_from([-1, 5, 12]), per_subject=st.sampled_from([-1, 2, 4]))
    def open(self, max_msgs, per_subject):
        import tempfile

        self.path = tempfile.mkdtemp(prefix="jetspark-model-")
        self.js = jetspark.connect(self.path)
        self.max_msgs, self.per_subject = max_msgs, per_subject
        self.js.add_stream(name="M", subjects=["m.*"], max_msgs=max_msgs, max_msgs_per_subject=per_subject)

    def teardown(self):
        self.js.close()

    def _enforce(self, subject):
        if self.per_subject > 0:
            mine = [m for m in self.msgs if m[1] == subject]
            for m in mine[: max(len(mine) - self.per_subject, 0)]:
                self.msgs.remove(m)
        if self.max_msgs > 0:
            del self.msgs[: max(len(self.msgs) - self.max_msgs, 0)]

    @rule(subject=st.sampled_from(SUBJECTS), payload=st.binary(max_size=20))
    def publish(self, subject, payload):
        ack = self.js.publish(subject, payload)
        self.last += 1
        self.held = True
        assert ack.seq == self.last
        self.msgs.append((ack.seq, subject, payload))
        self._enforce(subject)

    @rule(n=st.integers(1, 30), subject=st.sampled_from(SUBJECTS))
    def publish_batch(self, n, subject):
        import pyarrow as pa

        payloads = [b"b%d" % i for i in range(n)]
        ack = self.js.publish_batch(pa.table({"subject": [subject] * n, "data": payloads}))
        assert ack.seqs.to_pylist() == list(range(self.last + 1, self.last + n + 1))
        for p in payloads:
            self.last += 1
            self.msgs.append((self.last, subject, p))
            self._enforce(subject)
        self.held = True

    @precondition(lambda self: self.last > 0)
    @rule(data=st.data())
    def delete(self, data):
        seq = data.draw(st.integers(1, self.last))
        live = [m for m in self.msgs if m[0] == seq]
        if live:
            self.js.delete_msg("M", seq)
            self.msgs.remove(live[0])
        else:
            with pytest.raises(APIError):
                self.js.delete_msg("M", seq)

    @rule(subject=st.sampled_from([None, *SUBJECTS]), keep=st.sampled_from([None, 0, 1, 3]))
    def purge(self, subject, keep):
        self.js.purge_stream("M", subject=subject, keep=keep)
        self.held = True
        matching = [m for m in self.msgs if subject is None or m[1] == subject]
        doomed = matching[: max(len(matching) - keep, 0)] if keep else matching
        self.msgs = [m for m in self.msgs if m not in doomed]

    @precondition(lambda self: self.last > 0)
    @rule(data=st.data())
    def purge_below(self, data):
        seq = data.draw(st.integers(1, self.last + 3))
        self.js.purge_stream("M", seq=seq)
        self.held = True
        self.msgs = [m for m in self.msgs if m[0] >= seq]
        if seq > self.last + 1:
            self.last = seq - 1

    @rule()
    def reopen(self):
        self.js.close()
        self.js = jetspark.connect(self.path)

    @invariant()
    def state_agrees(self):
        if not hasattr(self, "js"):
            return
        st_ = self.js.stream_info("M", subjects_filter=">", deleted_details=True).state
        assert st_.messages == len(self.msgs)
        assert st_.last_seq == self.last
        if self.msgs:
            first = self.msgs[0][0]
        else:
            first = self.last + 1 if self.held else 0
        assert st_.first_seq == first
        counts: dict[str, int] = {}
        for _, s, _ in self.msgs:
            counts[s] = counts.get(s, 0) + 1
        assert (st_.subjects or {}) == counts
        assert st_.num_subjects == len(counts)
        assert st_.bytes == sum(30 + len(s) + len(p) for _, s, p in self.msgs)
        if self.msgs:
            live = {m[0] for m in self.msgs}
            assert (st_.deleted or []) == [q for q in range(first, self.last + 1) if q not in live]
        rows = [
            r
            for b in self.js.read_batches("M", 1)
            for r in zip(*[b.column(c).to_pylist() for c in ("seq", "subject", "data")])
        ]
        assert rows == self.msgs


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(block_writer, "BLOCK_MAX_MSGS", 8)


def test_a_limits_stream_agrees_with_its_model(small_blocks):
    LimitsStream.TestCase.settings = settings(
        max_examples=100, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    LimitsStream.TestCase().runTest()
