"""Reading a streaming query's next range ahead (jetspark/connector/readahead.py), on a
real nats-server: whatever a task takes from a read ahead, it yields exactly what a
read of its own range gives; a read ahead that does not fit, failed or was not taken
is dropped.  Also the driver's hint (StreamReader.partitions)."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

import jetspark
from jetspark.connector import readahead
from jetspark.connector.options import reader_options
from jetspark.connector.source import SeqRange, StreamReader, read_range
from jetspark.errors import JetSparkError
from tests.conftest import drop_streams


class Recording:
    """A real handle that notes the ranges read through it (the task's own reads and the
    read ahead's), so a test can tell where a task's rows came from."""

    def __init__(self, js, fail_reads_from: int = 0) -> None:
        self.js = js
        self.calls: list[tuple[int, int]] = []
        self.fail_reads_from = fail_reads_from  # the first read starting there fails (a fault, injected)
        self._lock = threading.Lock()

    def stream_info(self, stream):
        return self.js.stream_info(stream)

    def read_batches(self, stream, lo, hi, **kw):
        with self._lock:
            self.calls.append((lo, hi))
        if lo == self.fail_reads_from:
            self.fail_reads_from = 0
            raise JetSparkError(f"a read from seq {lo} failed (injected)")
        return self.js.read_batches(stream, lo, hi, **kw)


@pytest.fixture
def js(server):
    handle = jetspark.connect(server.url)
    handle.add_stream(name="S", subjects=["s.>"])
    subjects = [f"s.{'ab'[i % 2]}" for i in range(100)]
    handle.publish_batch(pa.table({"subject": subjects, "data": [b"x%d" % i for i in range(100)]}), stream="S")
    yield handle
    for a in list(readahead._aheads.values()):
        a.stop()
    readahead._aheads.clear()
    drop_streams(handle)
    handle.close()


KEY = ("k",)


def rows(batches) -> list[tuple[int, str, bytes]]:
    t = pa.Table.from_batches(list(batches))
    return list(zip(t.column("seq").to_pylist(), t.column("subject").to_pylist(), t.column("data").to_pylist()))


def task(rec, lo, hi, ahead=0, key=KEY, subjects=None, headers=False):
    return rows(readahead.read(rec, "S", lo, hi, subjects, headers, 7, key, ahead))


def expected(js, lo, hi, subjects=None):
    return rows(js.read_batches("S", lo, hi, subjects=subjects))


def kept(key=KEY):
    return readahead._aheads.get((readahead.os.getpid(), *key))


def test_the_next_task_takes_what_was_read_ahead(js):
    rec = Recording(js)
    assert task(rec, 1, 30, ahead=60) == expected(js, 1, 30)
    a = kept()
    assert a is not None and a.lo == 31
    assert task(rec, 31, 60) == expected(js, 31, 60)
    # The second task read nothing itself: its rows came from the read ahead of 31..60.
    assert rec.calls == [(1, 30), (31, 60)]
    assert kept() is None and a.stopped


def test_a_shorter_task_leaves_the_rest_for_the_next(js):
    rec = Recording(js)
    task(rec, 1, 30, ahead=80)
    assert task(rec, 31, 50) == expected(js, 31, 50)  # a batch cut at 50
    assert kept().lo == 51
    assert task(rec, 51, 80) == expected(js, 51, 80)
    assert rec.calls == [(1, 30), (31, 80)]


def test_a_longer_task_reads_the_rest_itself(js):
    rec = Recording(js)
    task(rec, 1, 30, ahead=40)
    assert task(rec, 31, 70) == expected(js, 31, 70)
    assert rec.calls == [(1, 30), (31, 40), (41, 70)]


def test_a_read_ahead_stops_at_the_streams_end_and_the_task_reads_what_came_since(js):
    rec = Recording(js)
    task(rec, 1, 100, ahead=150)  # nothing past 100 yet
    js.publish_batch(pa.table({"subject": ["s.a"] * 20, "data": [b"new"] * 20}), stream="S")
    assert task(rec, 101, 120) == expected(js, 101, 120)
    assert [r[0] for r in task(rec, 101, 120)] == list(range(101, 121))
    assert (101, 120) in rec.calls and (101, 150) not in rec.calls


def test_a_read_ahead_starting_elsewhere_is_dropped(js):
    """Spark runs a task again (or another range lands here): it reads its own range."""
    rec = Recording(js)
    task(rec, 1, 30, ahead=60)
    a = kept()
    assert task(rec, 1, 30) == expected(js, 1, 30)
    assert a.stopped and kept() is None
    assert rec.calls.count((1, 30)) == 2


def test_a_failed_read_ahead_is_read_afresh(js):
    rec = Recording(js, fail_reads_from=31)
    task(rec, 1, 30, ahead=60)
    assert task(rec, 31, 60) == expected(js, 31, 60)
    assert rec.calls == [(1, 30), (31, 60), (31, 60)]  # the read ahead's, failed, then the task's


def test_an_abandoned_task_stops_its_read_ahead(js):
    rec = Recording(js)
    task(rec, 1, 30, ahead=90)
    a = kept()
    it = readahead.read(rec, "S", 31, 90, None, False, 7, KEY, 0)
    next(it)
    it.close()  # Spark stopped reading the partition (a limit reached)
    assert a.stopped and kept() is None


def test_subjects_and_headers_key_the_read_ahead(js, server):
    """A read ahead of the c.a messages is no use to a read of every subject: the partition's
    key holds its subjects, headers and store."""
    base = dict(store=server.url, stream="S", include_headers=False)
    filtered = SeqRange(lo=1, hi=30, subjects=("s.a",), ahead=60, **base)
    assert rows(read_range(filtered)) == expected(js, 1, 30, ["s.a"])
    everything = SeqRange(lo=31, hi=60, subjects=(), **base)
    assert rows(read_range(everything)) == expected(js, 31, 60)
    assert len(rows(read_range(everything))) == 30


def test_the_buffer_is_bounded(js, monkeypatch):
    monkeypatch.setattr(readahead, "MAX_BYTES", 1)  # one batch at a time
    a = readahead.ReadAhead(js, "S", 1, 100, None, False, 10)
    with a._cond:
        assert a._cond.wait_for(lambda: a._items, 30)
        assert len(a._items) == 1  # the thread waits for room
    assert rows(a.take(100)) == expected(js, 1, 100)
    a._thread.join(30)
    assert not a._thread.is_alive()


def test_a_read_ahead_no_task_takes_lets_go(js, monkeypatch):
    monkeypatch.setattr(readahead, "KEEP_S", 0.05)
    task(Recording(js), 1, 30, ahead=60)
    a = kept()
    with a._cond:
        assert a._cond.wait_for(lambda: a._stopped, 30)
    assert kept() is None and not a._items


# ---------------------------------------------------------------------- the driver's hint


def reader(url, **options):
    opts = {"store": url, "stream": "S", **options}
    return StreamReader(reader_options(opts, streaming=True))


def test_the_last_range_of_a_micro_batch_carries_the_next_ones_first_range(js, server):
    parts = reader(server.url, maxOffsetsPerTrigger="25").partitions({"seq": 0}, {"seq": 25})
    assert [(p.lo, p.hi, p.ahead) for p in parts] == [(1, 25, 50)]
    parts = reader(server.url, maxOffsetsPerTrigger="25", minPartitions="2").partitions({"seq": 0}, {"seq": 25})
    # The next micro-batch (26..50) is split the same way: its first range ends at 38.
    assert [(p.lo, p.hi, p.ahead) for p in parts] == [(1, 13, 0), (14, 25, 38)]
    parts = reader(server.url).partitions({"seq": 0}, {"seq": 60})
    assert [(p.lo, p.hi, p.ahead) for p in parts] == [(1, 60, 100)]  # all that is there now


def test_no_hint_at_the_streams_end_past_the_target_or_for_an_engine_store(js, server, tmp_path):
    assert [p.ahead for p in reader(server.url).partitions({"seq": 0}, {"seq": 100})] == [0]
    r = reader(server.url, maxOffsetsPerTrigger="25")
    r.prepareForTriggerAvailableNow()  # the target: 100
    js.publish("s.a", b"later")
    assert [p.ahead for p in r.partitions({"seq": 75}, {"seq": 100})] == [0]
    assert [p.ahead for p in r.partitions({"seq": 50}, {"seq": 75})] == [100]
    path = str(tmp_path / "engine")
    with jetspark.connect(path) as e:
        e.add_stream(name="S", subjects=["s.>"])
        for _ in range(10):
            e.publish("s.a", b"m")
    assert [p.ahead for p in reader(path, maxOffsetsPerTrigger="5").partitions({"seq": 0}, {"seq": 5})] == [0]
