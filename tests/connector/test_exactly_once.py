"""Stream to stream, each message exactly once: restarts, replays and a real crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tests.connector.support import batch_sizes, run_available_now

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def pipeline(store, checkpoint, **options):
    """IN -> OUT: each message's data, on out.<subject>; availableNow, then wait for the end."""
    df = store.read_stream("IN", startingOffsets="earliest", **options)
    out = df.select(F.concat(F.lit("out."), F.col("subject")).alias("subject"), "data")
    return run_available_now(out, sink="jetstream", checkpoint=checkpoint, store=store.path)


@pytest.fixture
def two_streams(store):
    store.js.add_stream(name="IN", subjects=["in.>"])
    store.js.add_stream(name="OUT", subjects=["out.>"])
    return store


def assert_exactly_once(store):
    assert Counter(store.payloads("OUT")) == Counter(store.payloads("IN"))
    assert len(set(store.payloads("IN"))) == len(store.payloads("IN"))  # payloads are distinct


def test_restart_from_checkpoint(two_streams):
    store, ckpt = two_streams, two_streams.checkpoint()
    store.publish(["in.a", "in.b"], 10)
    q = pipeline(store, ckpt, maxOffsetsPerTrigger="4")
    assert batch_sizes(q) == [4, 4, 2]
    assert_exactly_once(store)
    store.publish(["in.a", "in.b"], 7, start=10)
    q = pipeline(store, ckpt, maxOffsetsPerTrigger="4")
    assert batch_sizes(q) == [4, 3]
    assert_exactly_once(store)
    assert store.js.stream_info("OUT").state.last_seq == 17  # nothing was stored twice, even as a duplicate
    # Nothing new: a run reads nothing and writes nothing.
    q = pipeline(store, ckpt, maxOffsetsPerTrigger="4")
    assert sum(batch_sizes(q)) == 0
    assert store.js.stream_info("OUT").state.last_seq == 17


def _forget_last_commit(checkpoint: str) -> int:
    """Delete the newest commit-log entry: Spark then runs that batch again on restart."""
    commits = Path(checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    crc = commits / f".{last}.crc"
    if crc.exists():
        crc.unlink()
    return last


@pytest.mark.parametrize("sink_record", ["kept", "removed"])
def test_replayed_batch_writes_nothing_twice(two_streams, sink_record):
    store, ckpt = two_streams, two_streams.checkpoint()
    store.publish(["in.a", "in.b"], 10)
    q = pipeline(store, ckpt, maxOffsetsPerTrigger="4")
    assert batch_sizes(q) == [4, 4, 2]
    assert_exactly_once(store)
    assert store.sink_records() == 1  # the store's record of this query's committed batches

    assert _forget_last_commit(ckpt) == 2
    if sink_record == "removed":
        # Without the record the replay is written again, with the same message ids,
        # inside the stream's duplicate window: the stream drops every row.
        store.remove_sink_records()
    # (else the sink sees batch 2 recorded as committed for this query and skips it.)
    store.publish(["in.a", "in.b"], 3, start=10)
    q = pipeline(store, ckpt, maxOffsetsPerTrigger="4")
    assert batch_sizes(q) == [2, 3]  # batch 2 again (its offsets are in the log), then 11..13
    assert_exactly_once(store)
    assert store.js.stream_info("OUT").state.last_seq == 13


CRASH_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from pyspark.sql import functions as F
    from jetspark.connector.session import local_session

    store, ckpt = sys.argv[1], sys.argv[2]
    spark = local_session("crash-child", master="local[2]")
    df = (spark.readStream.format("jetstream").option("store", store).option("stream", "IN")
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "3").load())
    q = (df.select(F.concat(F.lit("out."), F.col("subject")).alias("subject"), "data")
         .writeStream.format("jetstream").option("store", store).option("checkpointLocation", ckpt)
         .trigger(processingTime="50 milliseconds").start())
    print("started", flush=True)
    q.awaitTermination()  # runs until killed
    """
)


@pytest.mark.slow
def test_crash_and_restart_from_checkpoint(two_streams, tmp_path):
    """A continuous query is killed (SIGKILL, Spark's JVM and Python workers with it) in the
    middle of its work; a restart from the checkpoint finishes it: OUT holds every IN
    message exactly once."""
    store, ckpt = two_streams, two_streams.checkpoint()
    store.publish(["in.a", "in.b", "in.c"], 150)
    script = tmp_path / "crash_child.py"
    script.write_text(CRASH_SCRIPT.format(root=str(ROOT)))
    child = subprocess.Popen(
        [sys.executable, str(script), store.path, ckpt],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the JVM and the workers go down too
    )
    try:
        # The one bounded poll: wait for output to appear in the store, which the child
        # writes from Spark's Python workers (3 messages per micro-batch).
        deadline = time.monotonic() + 120
        while store.js.stream_info("OUT").state.messages < 9:
            assert child.poll() is None, "the child query exited before it was killed"
            assert time.monotonic() < deadline, "the child query wrote nothing in 120 s"
            time.sleep(0.05)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    written = store.js.stream_info("OUT").state.messages
    assert 9 <= written < 150, "the crash should come in the middle of the work"

    q = pipeline(store, ckpt)  # the same checkpoint, availableNow, no read limit
    assert sum(batch_sizes(q)) >= 150 - written
    assert_exactly_once(store)
