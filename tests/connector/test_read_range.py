"""A partition's read (jetspark/connector/source.py, read_range): the rows of its range,
as the API's range read gives them; from a server in batches of at most SERVER_BATCH
rows, so Spark takes a task's first rows while the rest still come from the server."""

from __future__ import annotations

import pyarrow as pa
import pytest

import jetspark
from jetspark.connector.source import SERVER_BATCH, SeqRange, read_range
from tests.conftest import drop_streams

N = 2 * SERVER_BATCH + 100


def fill(js) -> None:
    js.add_stream(name="S", subjects=["s.>"])
    subjects = [f"s.{'ab'[i % 2]}" for i in range(N)]
    js.publish_batch(pa.table({"subject": subjects, "data": [b"x%d" % i for i in range(N)]}), stream="S")


@pytest.fixture(params=["engine", "server"])
def store(request, tmp_path):
    path = str(tmp_path / "store") if request.param == "engine" else request.getfixturevalue("server").url
    js = jetspark.connect(path)
    fill(js)
    yield path, js
    if request.param == "server":
        drop_streams(js)
    js.close()


def rows(batches) -> list:
    t = pa.Table.from_batches(batches)
    return list(zip(t.column("seq").to_pylist(), t.column("subject").to_pylist(), t.column("data").to_pylist()))


@pytest.mark.parametrize("subjects", [(), ("s.b",)])
def test_a_partition_reads_its_range(store, subjects):
    path, js = store
    part = SeqRange(path, "S", 5, N - 3, subjects, False)
    batches = list(read_range(part))
    assert rows(batches) == rows(list(js.read_batches("S", 5, N - 3, subjects=list(subjects) or None)))
    assert all(r[1] == "s.b" for r in rows(batches)) if subjects else len(rows(batches)) == N - 7
    sizes = [b.num_rows for b in batches]
    if path.startswith("nats://"):
        assert max(sizes) <= SERVER_BATCH and len(sizes) >= (2 if subjects else 3)
    else:
        assert len(sizes) == 1  # the engine's reads: the API's default batches


def test_an_empty_range_reads_nothing(store):
    path, _ = store
    assert list(read_range(SeqRange(path, "S", N + 1, N + 10, (), False))) == []


def test_a_stream_reader_opens_the_store_at_the_drivers_first_call(server):
    """Spark also builds the reader in a planning worker, only to hand it to the tasks:
    building it neither connects nor checks; the driver's first call does both."""
    from jetspark.connector import store as cache
    from jetspark.connector.options import reader_options
    from jetspark.connector.source import StreamReader
    from jetspark.errors import OptionError

    nowhere = "nats://127.0.0.1:1"  # nothing listens there: a connection would fail
    StreamReader(reader_options({"store": nowhere, "stream": "S"}, streaming=True))
    assert not any(key[1] == nowhere for key in cache._handles)
    missing = StreamReader(reader_options({"store": server.url, "stream": "NOPE"}, streaming=True))
    with pytest.raises(OptionError, match="there is no stream 'NOPE'"):
        missing.initialOffset()
