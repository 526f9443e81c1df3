"""What a streaming query's source process loads from a nats:// store.

Spark starts a Python process per streaming query for the source's offsets,
partitions and commits (``latestOffset``, ``partitions``, ``commit``): from a
server it needs a connection and stream infos, not the bulk paths.  The nats://
handle imports its range reads, batch appends, ack floor, subscriptions,
``publish_async`` and backups when a verb first needs them
(jetspark/remote/client.py), so that process starts sooner.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jetspark

ROOT = Path(__file__).resolve().parents[2]

# The modules of the nats:// backend that only the bulk paths, subscriptions and backups use.
BULK = (
    "jetspark.remote.reads",
    "jetspark.remote.range_reader",
    "jetspark.remote.direct",
    "jetspark.remote.appends",
    "jetspark.remote.ack_floor",
    "jetspark.remote.async_publish",
    "jetspark.remote.pull",
    "jetspark.remote.push",
    "jetspark.remote.snapshot",
)

CHILD = """
import json, sys
from jetspark.connector.store import handle

url, stream, bulk = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
js = handle(url)
last = js.stream_info(stream).state.last_seq  # what latestOffset asks
offsets_only = [m for m in bulk if m in sys.modules]
rows = [(b["seq"], b["data"]) for batch in js.read_batches(stream, 1, last) for b in batch.to_pylist()]
read = [m for m in bulk if m in sys.modules]
floor = js.advance_ack_floor(stream, "lazy", 2)
print(json.dumps({"offsets_only": offsets_only, "read": read, "rows": [[s, d.decode()] for s, d in rows],
                  "floor": floor.stream_seq, "after_floor": [m for m in bulk if m in sys.modules]}))
"""


def test_the_source_process_opens_a_server_store_without_the_bulk_paths(server):
    with jetspark.connect(server.url) as js:
        js.add_stream(name="LAZY", subjects=["lazy.>"])
        try:
            for i in range(3):
                js.publish(f"lazy.{i}", f"m{i}".encode())
            js.add_consumer("LAZY", durable_name="lazy", ack_policy=jetspark.AckPolicy.ALL)
            out = subprocess.run(
                [sys.executable, "-c", CHILD, server.url, "LAZY", ",".join(BULK)],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert out.returncode == 0, out.stderr
            got = json.loads(out.stdout)
            floor = js.consumer_info("LAZY", "lazy").ack_floor.stream_seq
        finally:
            js.delete_stream("LAZY")
    # A connection and a stream info load none of them.
    assert got["offsets_only"] == []
    # A range read loads the reads (and whatever they use) when it is asked for, and reads the range.
    assert "jetspark.remote.reads" in got["read"] and "jetspark.remote.range_reader" in got["read"]
    assert got["rows"] == [[1, "m0"], [2, "m1"], [3, "m2"]]
    # So does the ack floor's advance, which takes effect on the server.
    assert "jetspark.remote.ack_floor" in got["after_floor"]
    assert got["floor"] == 2 and floor == 2
