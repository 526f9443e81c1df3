"""Damaged message-id journals (``dedup``, ``dedup_ranges``): removed or cut short, they are
reported like every other damaged file (CorruptStoreError naming the file, nothing written),
``check_stream`` and ``jetspark stream check`` list them, and a repair forgets only the ids
that are gone."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from click.testing import CliRunner

import jetspark
from jetspark.cli.app import cli
from jetspark.errors import CorruptStoreError

N = 20
RECORD = {"dedup": 36, "dedup_ranges": 52}


def files(path, name="S"):
    return path / "streams" / name / "data"


def make(path, kind):
    with jetspark.connect(path) as js:
        js.add_stream(name="S", subjects=["s.>"], duplicate_window=600)
        if kind == "dedup":
            for i in range(N):
                js.publish("s.x", b"%d" % i, headers={"Nats-Msg-Id": f"id-{i}"})
        else:  # one range record per batch of generated ids
            for b in range(N):
                table = pa.table({"subject": ["s.x"] * 2, "data": [b"a", b"b"]})
                js.publish_batch(table, stream="S", msg_id_prefix=f"b{b}-", msg_id_start=0)
    return files(path) / kind


def duplicate_of(kind, i):
    return f"id-{i}" if kind == "dedup" else f"b{i}-1"


DAMAGE = {
    "removed": lambda f: f.unlink(),
    "emptied": lambda f: os.truncate(f, 0),
    "cut mid-record": lambda f: os.truncate(f, f.stat().st_size // 2 + 5),
    "cut at a record": lambda f: os.truncate(f, f.stat().st_size - 3 * RECORD[f.name]),
}


@pytest.mark.parametrize("kind", ["dedup", "dedup_ranges"])
@pytest.mark.parametrize("damage", DAMAGE)
def test_a_cut_or_removed_id_journal_is_reported_never_a_raw_error(tmp_path, kind, damage):
    journal = make(tmp_path, kind)
    size = journal.stat().st_size
    DAMAGE[damage](journal)
    held = journal.stat().st_size if journal.exists() else 0
    with jetspark.connect(tmp_path) as js:
        before = js.stream_info("S").state
        with pytest.raises(
            CorruptStoreError, match=rf"{kind}: the file holds {held} of the {size} bytes the stream header commits"
        ) as err:
            js.publish("s.x", b"again", headers={"Nats-Msg-Id": duplicate_of(kind, 0)})
        assert err.value.path.endswith(kind)
        assert js.stream_info("S").state == before  # nothing written
        assert js.publish("s.x", b"no id").seq == before.last_seq + 1  # publishes without ids go on

        report = js.check_stream("S")
        (problem,) = report.problems
        assert not report.ok and problem.path.endswith(kind) and "truncated or removed" in problem.what

    listed = CliRunner().invoke(cli, ["--store", str(tmp_path), "stream", "check", "S"])
    assert listed.exit_code == 1 and f"PROBLEM: {journal}" in listed.output, listed.output

    with jetspark.connect(tmp_path) as js:
        assert js.check_stream("S", repair=True).ok
        assert js.check_stream("S").problems == ()
        # Ids whose records are still there still count; the lost ones are forgotten.
        intact = held // RECORD[kind]
        if intact:
            assert js.publish("s.x", b"dup", headers={"Nats-Msg-Id": duplicate_of(kind, 0)}).duplicate
        assert not js.publish("s.x", b"resent", headers={"Nats-Msg-Id": duplicate_of(kind, N - 1)}).duplicate
