"""A consumer's times of its last delivery and last ack, kept in its log.

``delivered.last_active`` and ``ack_floor.last_active`` (what ``jetspark
consumer ls`` shows as "Last Delivery") are written with the record of the
call that sets them, in nanoseconds, so another process, a reopened store and
a compacted log report exactly what the process that delivered reported.  How
they move is the server's (tests/contract/test_consumer_delivery.py).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib

import jetspark
from jetspark.api import ns_to_datetime
from jetspark.engine import consumer_log

# 2026-01-01T00:00:00.123456789Z: digits below the microsecond, which no float keeps.
T0 = 1_767_225_600_123_456_789

_REPORT = """
import json, sys
import jetspark
with jetspark.connect(sys.argv[1], create=False) as js:
    out = {}
    for name in ("D", "E"):
        i = js.consumer_info("S", name)
        out[name] = [
            i.delivered.last_active and i.delivered.last_active.isoformat(),
            i.ack_floor.last_active and i.ack_floor.last_active.isoformat(),
        ]
    print(json.dumps(out))
"""


def times(info) -> list:
    return [t and t.isoformat() for t in (info.delivered.last_active, info.ack_floor.last_active)]


def test_times_survive_another_process_and_compaction(store, monkeypatch):
    now = [T0]
    with jetspark.connect(store, clock=lambda: now[0]) as js:
        js.add_stream(name="S", subjects=["s.>"])
        for _ in range(40):
            js.publish("s.x", b"x")
        js.add_consumer("S", durable_name="D", ack_policy="explicit")
        js.add_consumer("S", durable_name="E", ack_policy="explicit")
        sub = js.pull_subscribe_bind("D", stream="S")
        for m in sub.fetch(5):
            m.ack_sync()
        now[0] += 1_000_000_001  # the delivery and the ack at different times
        sub.fetch(1)
        d = js.consumer_info("S", "D")
        assert (d.delivered.last_active, d.ack_floor.last_active) == (
            ns_to_datetime(T0 + 1_000_000_001),
            ns_to_datetime(T0),
        )
        # E's log is compacted into one snapshot on every write from here on.
        monkeypatch.setattr(consumer_log, "COMPACT_BYTES", 1)
        e_sub = js.pull_subscribe_bind("E", stream="S")
        e_sub.fetch(3)[0].ack_sync()
        now[0] += 7
        e_sub.fetch(2)
        expected = {"D": times(d), "E": times(js.consumer_info("S", "E"))}
    assert expected["E"] == [
        ns_to_datetime(T0 + 1_000_000_008).isoformat(),
        ns_to_datetime(T0 + 1_000_000_001).isoformat(),
    ]
    child = subprocess.run([sys.executable, "-c", _REPORT, str(store)], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == expected


def _untimed_record(op: int, *scalars: int) -> bytes:
    """A consumer log record as written before the times were kept: no items, five scalars."""
    body = struct.pack("<BIqqqqq", op, 0, *scalars)
    return struct.pack("<II", 8 + len(body), zlib.crc32(body)) + body


def test_a_log_from_before_the_times_reads_with_no_times(store):
    now = [T0]
    with jetspark.connect(store, clock=lambda: now[0]) as js:
        js.add_stream(name="S", subjects=["s.>"])
        for _ in range(4):
            js.publish("s.x", b"x")
        js.add_consumer("S", durable_name="D", ack_policy="explicit")
    # D as an older jetspark left it: two delivered and acked, the floor at 2.
    (store / "streams" / "S" / "data" / "cons" / "D" / "log").write_bytes(
        _untimed_record(consumer_log.SNAPSHOT, 0, 1, 0, 0, T0) + _untimed_record(consumer_log.SCALARS, 2, 3, 2, 2, T0)
    )
    with jetspark.connect(store, clock=lambda: now[0]) as js:
        i = js.consumer_info("S", "D")
        assert (i.delivered.stream_seq, i.ack_floor.stream_seq, i.num_pending) == (2, 2, 2)
        assert (i.delivered.last_active, i.ack_floor.last_active) == (None, None)
        now[0] += 5
        (m,) = js.pull_subscribe_bind("D", stream="S").fetch(1)  # appended after the old records
        assert m.metadata.sequence.stream == 3
    with jetspark.connect(store, create=False) as js:
        i = js.consumer_info("S", "D")
        assert (i.delivered.stream_seq, i.delivered.last_active, i.ack_floor.last_active) == (
            3,
            ns_to_datetime(T0 + 5),
            None,
        )
