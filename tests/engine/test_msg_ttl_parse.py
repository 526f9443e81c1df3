"""The Nats-TTL values as nats-server 2.15 reads them (jetspark/engine/msg_ttl.py), against the
answers the server gave (tests/contract/test_msg_ttl.py publishes the same values to it) and,
with Hypothesis, against the rules of its parser: "never" in any case, a Go duration of at
least 1 s in whole seconds, else a plain decimal number within int64, else 10165."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jetspark
from jetspark.engine import msg_ttl
from jetspark.engine.msg_ttl import NEVER, deadline, go_seconds, marker_header, parse_ttl, raise_ttl
from jetspark.errors import BadRequestError

I64_MAX = 2**63 - 1

# Published to nats-server 2.15.1 on an allow_msg_ttl stream: stored (its TTL) or 10165 (None).
SERVER = {
    "1s": 1,
    "60": 60,
    "never": NEVER,
    "NEVER": NEVER,
    "00": 0,
    "1.5s": 1,
    "1m": 60,
    "1h30m": 5400,
    "1000000000000": 1000000000000,
    "9223372036854775807": I64_MAX,
    "2562047h": 2562047 * 3600,
    "500ms": None,
    "-1": None,
    "0": None,
    "0s": None,
    "abc": None,
    "+5": None,
    "9223372036854775808": None,
    "1e3": None,
    "-1s": None,
    "3000000h": None,
    "292y": None,
}


@pytest.mark.parametrize(("value", "expected"), SERVER.items())
def test_the_server_s_answers(value, expected):
    assert parse_ttl(value) == expected


@given(st.text(alphabet="nevrNEVR", min_size=5, max_size=5))
def test_never_in_any_case(value):
    assert parse_ttl(value) == (NEVER if value.lower() == "never" else None)


@given(st.integers(min_value=0, max_value=I64_MAX))
def test_a_plain_number_is_seconds(n):
    # "0" alone is Go's zero duration (below 1 s: refused); "00" and the rest are numbers.
    assert parse_ttl(str(n)) == (None if n == 0 else n)
    assert parse_ttl("0" + str(n)) == n


@given(st.integers(min_value=I64_MAX + 1, max_value=10**30))
def test_a_number_past_int64_is_refused(n):
    assert parse_ttl(str(n)) is None


@given(st.integers(min_value=1, max_value=10**12))
def test_a_negative_or_signed_number_is_refused(n):
    assert parse_ttl(f"-{n}") is None
    assert parse_ttl(f"+{n}") is None


@given(st.integers(min_value=0, max_value=10**7), st.sampled_from(["ns", "us", "ms", "s", "m", "h"]))
def test_a_duration_is_its_whole_seconds_from_one_second(n, unit):
    scale = {"ns": 10**-9, "us": 10**-6, "ms": 10**-3, "s": 1, "m": 60, "h": 3600}[unit]
    seconds = n * scale
    fits = n * scale * 10**9 <= I64_MAX  # Go's durations are int64 nanoseconds ("3000000h" is refused)
    assert parse_ttl(f"{n}{unit}") == (int(seconds) if seconds >= 1 and fits else None)
    assert parse_ttl(f"-{n}{unit}") is None  # a negative duration is below 1 s


@given(st.integers(min_value=1, max_value=10**6), st.integers(min_value=0, max_value=59))
def test_durations_add_up(h, m):
    assert parse_ttl(f"{h}h{m}m") == h * 3600 + m * 60


@given(st.text(max_size=12))
def test_any_text_is_a_ttl_or_refused(value):
    got = parse_ttl(value)
    assert got is None or got == NEVER or got >= 0


def _wrap(n: int) -> int:
    n %= 2**64
    return n - 2**64 if n >= 2**63 else n


@given(st.integers(min_value=1_600_000_000 * 10**9, max_value=2_000_000_000 * 10**9), st.integers(1, I64_MAX))
def test_the_deadline_is_int64_nanoseconds(ts, ttl):
    d = deadline(ts, ttl)
    assert d == _wrap(ts + _wrap(ttl * 10**9))
    if ts + ttl * 10**9 <= I64_MAX:
        assert d == ts + ttl * 10**9  # no wrap: exactly the TTL later


def test_the_server_s_wrapped_deadlines():
    # What the server did with these (tests/contract/test_msg_ttl.py): expired at once, kept.
    now = 1_800_000_000 * 10**9
    assert deadline(now, 2562047 * 3600) < now
    assert deadline(now, I64_MAX) < now
    assert deadline(now, 1000000000000) > now + 10**18
    assert deadline(now, 5000000000) > now


@pytest.mark.parametrize(("seconds", "text"), [(1, "1s"), (59, "59s"), (60, "1m0s"), (61, "1m1s"), (3600, "1h0m0s")])
def test_a_marker_ttl_is_printed_as_go_prints_a_duration(seconds, text):
    assert go_seconds(seconds) == text
    assert f"Nats-TTL: {text}\r\n".encode() in marker_header(float(seconds))


def test_the_marker_header_and_what_counts_as_a_marker():
    hdr = marker_header(2.5)
    assert hdr == b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 2s\r\nNats-Rollup: sub\r\n\r\n"
    assert msg_ttl.is_marker(hdr)
    assert msg_ttl.is_marker(b"NATS/1.0\r\nKV-Operation: PURGE\r\n\r\n")
    assert not msg_ttl.is_marker(b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n")
    assert not msg_ttl.is_marker(b"NATS/1.0\r\nNats-TTL: 1s\r\n\r\n")
    assert not msg_ttl.is_marker(b"")


def test_a_raised_ttl_replaces_every_ttl_line_at_the_end():
    assert raise_ttl(b"NATS/1.0\r\nNats-TTL: 1s\r\nX-A: 1\r\n\r\n", 3) == b"NATS/1.0\r\nX-A: 1\r\nNats-TTL: 3\r\n\r\n"
    assert raise_ttl(b"NATS/1.0\r\nNats-TTL: 1s\r\n\r\n", 3) == b"NATS/1.0\r\nNats-TTL: 3\r\n\r\n"
    two = b"NATS/1.0\r\nNats-TTL: 1s\r\nX-A: 1\r\nNats-TTL: 2s\r\n\r\n"
    assert raise_ttl(two, 5) == b"NATS/1.0\r\nX-A: 1\r\nNats-TTL: 5\r\n\r\n"


@pytest.mark.parametrize("value", [True, float("nan"), float("inf"), -float("inf"), 1e300, "60", [60]])
def test_a_marker_ttl_that_is_not_a_number_of_seconds_is_refused_and_creates_nothing(tmp_path, value):
    # (a NaN or an infinite one had been stored, and broke every expiry after it)
    with jetspark.connect(tmp_path / "store") as js:
        with pytest.raises(BadRequestError, match="subject_delete_marker_ttl must be a finite number") as err:
            js.add_stream(name="T", subjects=["t.>"], subject_delete_marker_ttl=value)
        assert err.value.err_code == 10025
        assert js.streams_info() == []
        js.add_stream(name="T", subjects=["t.>"])
        with pytest.raises(BadRequestError, match="subject_delete_marker_ttl must be a finite number"):
            js.update_stream(name="T", subjects=["t.>"], subject_delete_marker_ttl=value)
        info = js.stream_info("T")
        assert (info.config.subject_delete_marker_ttl, info.config.allow_msg_ttl) == (None, False)
