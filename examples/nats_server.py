"""The same API on a real NATS server: jetspark.connect("nats://...") instead of a directory.

    nats-server -js &                      # a server with JetStream on, port 4222
    python examples/nats_server.py [URL]

The URL is the first argument, else $NATS_URL (as the nats CLI reads it), else
nats://127.0.0.1:4222.  Needs only the core install (pip install jetspark).
The example's stream, EXAMPLE_ORDERS, is deleted at the end.
"""

import os
import sys

import jetspark

url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("NATS_URL", "nats://127.0.0.1:4222")

with jetspark.connect(url, timeout=10) as js:
    # The verbs, dataclasses and errors are the engine's (and nats-py's).
    try:
        js.delete_stream("EXAMPLE_ORDERS")  # left over from an interrupted run
    except jetspark.StreamNotFoundError:
        pass
    js.add_stream(name="EXAMPLE_ORDERS", subjects=["example.orders.>"])
    try:
        for i in range(1, 6):
            ack = js.publish("example.orders.new", b'{"id": %d}' % i)
        print(f"published 5 messages, the last at {ack.stream} seq {ack.seq}")

        sub = js.pull_subscribe("example.orders.>", durable="worker", stream="EXAMPLE_ORDERS")
        msgs = sub.fetch(5, timeout=5)
        for msg in msgs:
            msg.ack_sync()
        print(f"fetched and acked {len(msgs)}: {[m.data.decode() for m in msgs]}")

        info = js.consumer_info("EXAMPLE_ORDERS", "worker")
        print(f"consumer 'worker': ack floor at stream seq {info.ack_floor.stream_seq}, {info.num_pending} to deliver")

        # Arrow bulk paths work here too: a stream's messages as record batches.
        rows = sum(batch.num_rows for batch in js.read_batches("EXAMPLE_ORDERS"))
        print(f"read_batches: {rows} rows")
    finally:
        js.delete_stream("EXAMPLE_ORDERS")
