"""The ack floor released in the background (jetspark/connector/release.py), on a real
engine store: what it released is released once ``settle`` returns, and a release that
cannot take effect raises at the next ``settle``, never in silence.  The Spark-level
behaviour (the floor follows within one trigger; a failed release fails the query) is
in tests/connector/test_consumers.py; the stream reader's calls around a release (a
restart after the driver died, a stop while one runs) are driven here without Spark."""

from __future__ import annotations

import pickle
import threading

import pytest

import jetspark
from jetspark import AckPolicy
from jetspark.connector.release import Releases
from jetspark.errors import ConsumerNotFoundError


@pytest.fixture
def js(tmp_path):
    handle = jetspark.connect(str(tmp_path / "store"))
    handle.add_stream(name="S", subjects=["s.>"])
    handle.add_consumer("S", durable_name="c", ack_policy=AckPolicy.ALL)
    for i in range(10):
        handle.publish("s.a", b"m%d" % i)
    yield handle
    handle.close()


def floor(js) -> int:
    return js.consumer_info("S", "c").ack_floor.stream_seq


def releases(js, calls=None) -> Releases:
    def advance(seq):
        if calls is not None:
            calls.append(seq)
        js.advance_ack_floor("S", "c", seq)

    return Releases("stream 'S', consumer 'c'", advance)


def test_a_release_is_done_once_settled(js):
    r = releases(js)
    r.start(4)
    assert r.covered(4) and r.covered(3) and not r.covered(5)
    r.settle()
    assert floor(js) == 4 and r.released == 4


def test_seqs_at_or_below_what_is_released_are_nothing_to_do(js):
    calls: list[int] = []
    r = releases(js, calls)
    r.now(6)
    r.start(6)
    r.start(2)
    r.settle()
    r.now(9)
    assert calls == [6, 9] and floor(js) == 9


def test_the_next_release_waits_for_the_one_under_way(js):
    """Two releases never run at once: the second starts once the first is done."""
    gate = threading.Event()
    seen: list[tuple[int, int]] = []

    def advance(seq):
        if seq == 3:
            assert gate.wait(30)
        seen.append((seq, floor(js)))
        js.advance_ack_floor("S", "c", seq)

    r = Releases("test", advance)
    r.start(3)
    threading.Timer(0.05, gate.set).start()
    r.start(7)  # waits for 3 to finish first
    r.settle()
    assert seen == [(3, 0), (7, 3)] and floor(js) == 7


def test_a_release_that_cannot_take_effect_raises_at_the_next_settle(js):
    r = releases(js)
    r.now(2)
    js.delete_consumer("S", "c")
    r.start(5)  # runs, fails in its thread
    with pytest.raises(ConsumerNotFoundError):
        r.settle()
    assert r.released == 2 and not r.covered(5)  # a later release tries 5 again
    r.settle()  # the error was raised once
    js.add_consumer("S", durable_name="c", ack_policy=AckPolicy.ALL)
    r.now(5)
    assert floor(js) == 5


def test_start_raises_the_error_of_the_release_before(js):
    r = releases(js)
    js.delete_consumer("S", "c")
    r.start(3)
    with pytest.raises(ConsumerNotFoundError):
        r.start(6)
    assert r.released == -1


def test_a_pickled_reader_carries_no_thread(js):
    r = releases(js)
    r.start(4)
    state = r.__getstate__()
    assert state["_thread"] is None
    r.settle()
    copy = pickle.loads(pickle.dumps(Releases("x", print)))  # a module-level callable pickles
    assert copy.released == -1 and copy._thread is None


# The stream reader's side, without Spark: the calls Spark's driver makes, in its order.


@pytest.fixture
def reader_of(js, tmp_path):
    """Stream readers of the store ``js`` is on, bound to consumer 'c' (the connector's
    cached handle closed afterwards)."""
    from jetspark.connector import store as cache
    from jetspark.connector.options import reader_options
    from jetspark.connector.source import StreamReader

    path = str(tmp_path / "store")
    opts = {"store": path, "stream": "S", "consumer": "c", "startingOffsets": "earliest"}
    yield lambda: StreamReader(reader_options(opts, streaming=True))
    for key in [k for k in cache._handles if k[1] == path]:
        cache._close_quietly(cache._handles.pop(key))


def test_a_restarted_query_releases_its_checkpointed_end_at_its_first_trigger(js, reader_of):
    """The driver dies before the release of a batch in the checkpoint ran (or while it
    ran): the query started again from that checkpoint releases it at its first trigger."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    first = reader_of()
    start = first.initialOffset()
    end = first.latestOffset(start, ReadAllAvailable())
    assert end["seq"] == 10 and floor(js) == 0  # batch 0 planned; nothing committed yet
    # ... batch 0 runs and is committed to the checkpoint, then the driver is killed.
    again = reader_of()  # Spark gives the restarted reader the checkpoint's end, no initialOffset
    assert again.latestOffset(end, ReadAllAvailable()) == end  # nothing new: it waits for its release
    assert floor(js) == 10


def test_stop_waits_for_the_release_under_way(js, reader_of):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from jetspark.connector import store as cache

    reader = reader_of()
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    gate = threading.Event()
    handle = cache.handle(str(js.path))
    advance = handle.advance_ack_floor

    calls = []

    def slow(*args):
        calls.append(args)
        assert gate.wait(30)
        advance(*args)

    handle.advance_ack_floor = slow
    js.publish("s.a", b"more")
    assert reader.latestOffset(end, ReadAllAvailable())["seq"] == 11  # the release of 10 runs meanwhile
    threading.Timer(0.05, gate.set).start()
    reader.stop()  # the query stops while its release is under way
    assert floor(js) == 10 and calls == [("S", "c", 10)]


def test_stop_raises_the_error_of_a_release_that_failed(js, reader_of):
    """A release cut short by the query's stop still says so (Spark logs what stop raised)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    reader = reader_of()
    end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    js.delete_consumer("S", "c")
    js.publish("s.a", b"more")
    assert reader.latestOffset(end, ReadAllAvailable())["seq"] == 11  # the release of 10 fails meanwhile
    with pytest.raises(ConsumerNotFoundError):
        reader.stop()
