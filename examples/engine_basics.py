"""The embedded engine: a stream, messages, and a durable pull consumer that fetches and acks.

    python examples/engine_basics.py

Needs only the core install (pip install jetspark): no Spark, no Java, no server.
The store is a directory, ./jetspark-example-data, made afresh each run.
"""

import shutil

import jetspark

STORE = "./jetspark-example-data"
shutil.rmtree(STORE, ignore_errors=True)  # start afresh on each run

with jetspark.connect(STORE) as js:
    # A stream captures the subjects it names; publish returns the PubAck (stream, seq).
    js.add_stream(name="ORDERS", subjects=["orders.>"])
    for i in range(1, 6):
        ack = js.publish("orders.new", b'{"id": %d}' % i)
    print(f"published 5 messages, the last at {ack.stream} seq {ack.seq}")

    # A message id makes a publish idempotent within the stream's duplicate window.
    again = js.publish("orders.new", b'{"id": 5}', headers={"Nats-Msg-Id": "order-5"})
    dup = js.publish("orders.new", b'{"id": 5}', headers={"Nats-Msg-Id": "order-5"})
    print(f"a message id published twice: seq {again.seq} then seq {dup.seq}, duplicate={dup.duplicate}")

    # A durable pull consumer: fetch a batch, ack what was handled.
    sub = js.pull_subscribe("orders.>", durable="worker", stream="ORDERS")
    msgs = sub.fetch(4, timeout=5)
    for msg in msgs:
        msg.ack_sync()  # ack_sync returns once the ack is stored (ack() does not wait)
    print(f"fetched and acked {len(msgs)}: seqs {[m.metadata.sequence.stream for m in msgs]}")

    info = js.consumer_info("ORDERS", "worker")
    print(
        f"consumer 'worker': ack floor at stream seq {info.ack_floor.stream_seq}, "
        f"{info.num_pending} messages still to deliver"
    )

    # The rest, and a nak: a nak'd message is delivered again.
    rest = sub.fetch(10, timeout=5)
    rest[0].nak()
    for msg in rest[1:]:
        msg.ack_sync()
    redelivered = sub.fetch(1, timeout=5)[0]
    redelivered.ack_sync()
    print(
        f"seq {redelivered.metadata.sequence.stream} was nak'd and "
        f"delivered again (delivery {redelivered.metadata.num_delivered})"
    )

    info = js.consumer_info("ORDERS", "worker")
    print(
        f"consumer 'worker': ack floor at stream seq {info.ack_floor.stream_seq}, {info.num_pending} to deliver, "
        f"{info.num_ack_pending} unacknowledged"
    )
