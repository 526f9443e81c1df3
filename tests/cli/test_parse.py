"""Durations, sizes, headers, deliver policies and pub templates, as the nats CLI reads them."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jetspark.cli.parse import (
    format_duration,
    format_size,
    parse_deliver,
    parse_duration,
    parse_header,
    parse_size,
    split_list,
)
from jetspark.cli.templates import Template, TemplateError


@pytest.mark.parametrize(
    "text, seconds",
    [
        # Go's units
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("2m30s", 150.0),
        ("100us", 0.0001),
        ("100µs", 0.0001),
        ("250ns", 250e-9),
        # the nats CLI's extra units (choria-io/fisk ParseDuration)
        ("1d", 86400.0),
        ("1D", 86400.0),
        ("1w", 7 * 86400.0),
        ("1M", 30 * 86400.0),  # M is a month, m a minute
        ("1y", 365 * 86400.0),
        ("1d12h", 1.5 * 86400.0),
        # forms
        ("0", 0.0),
        (" 1h 30m ", 5400.0),
        ("-1s", -1.0),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "h", "1x", "1h x", "abc", "1hh", "--1s"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=400 * 86400 * 1000))
def test_format_duration_reads_back(ms):
    assert parse_duration(format_duration(ms / 1000)) == pytest.approx(ms / 1000)


@pytest.mark.parametrize(
    "seconds, text", [(0, "0s"), (0.5, "500ms"), (5400, "1h30m"), (86400 * 2 + 1, "2d1s"), (120.0, "2m")]
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    "text, size",
    [
        # 1024-based, any case, as the nats CLI's ParseStringAsBytes
        ("100", 100),
        ("0", 0),
        ("10B", 10),
        ("1K", 1024),
        ("1kb", 1024),
        ("1KiB", 1024),
        ("10MB", 10 * 2**20),
        ("10mib", 10 * 2**20),
        ("1G", 2**30),
        ("1GiB", 2**30),
        ("2TB", 2 * 2**40),
        # a negative number is unlimited
        ("-1", -1),
        ("-5", -1),
    ],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "MB", "10XB", "1.5GB", "-1GB", "ten"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


@pytest.mark.parametrize(
    "n, text",
    [
        (-1, "unlimited"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (10 * 2**20, "10.0 MiB"),
        (3 * 2**30 // 2, "1.5 GiB"),
    ],
)
def test_format_size(n, text):
    assert format_size(n) == text


def test_headers_and_lists():
    assert parse_header("Content-Type: text/plain") == ("Content-Type", "text/plain")
    assert parse_header("K=V") == ("K", "V")
    assert parse_header("Url:http://x") == ("Url", "http://x")
    with pytest.raises(ValueError):
        parse_header("novalue")
    assert split_list(["a,b", "c d", "e"]) == ["a", "b", "c", "d", "e"]


def test_parse_deliver():
    now = dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone.utc)
    assert parse_deliver("all").policy == "all"
    assert parse_deliver("NEW").policy == "new"
    assert parse_deliver("subject").policy == "last_per_subject"
    d = parse_deliver("100")
    assert (d.policy, d.seq) == ("by_start_sequence", 100)
    d = parse_deliver("1h", now=now)
    assert (d.policy, d.time) == ("by_start_time", now - dt.timedelta(hours=1))
    d = parse_deliver("2025-06-01T00:00:00Z")
    assert d.time == dt.datetime(2025, 6, 1, tzinfo=dt.timezone.utc)
    with pytest.raises(ValueError, match="invalid start"):
        parse_deliver("sometime")


def test_templates():
    t = Template('{"id": {{Count}}, "n": {{ count }}}')
    assert t.render(7) == '{"id": 7, "n": 7}'
    assert Template("plain").is_static and Template("plain").render(3) == "plain"
    assert Template(b"\xff raw").render_bytes(1) == b"\xff raw"
    assert Template(b"{{Count}}\xff").render_bytes(2) == b"2\xff"
    assert len(Template("{{ID}}").render(1)) == 32
    assert Template("{{ID}}").render(1) != Template("{{ID}}").render(1)
    for _ in range(20):
        assert 3 <= len(Template("{{Random 3 5}}").render(1)) <= 5
    assert Template("{{Unix}}").render(1).isdigit() and Template("{{UnixNano}}").render(1).isdigit()
    assert Template("{{TimeStamp}}").render(1).endswith("Z")
    assert len(Template("{{Time}}").render(1)) == 8
    for bad in ("{{Nope}}", "{{Random 1}}", "{{Random 5 1}}", "{{Count 1}}"):
        with pytest.raises(TemplateError):
            Template(bad)
