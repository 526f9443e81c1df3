"""Msg.ack() from several threads at once, while other calls flush the acks: none is lost.

The engine buffers acks and applies them at the handle's next call
(jetspark/engine/deliveries.py: Deliveries.ack / flush); callback threads of push
subscriptions and consume() ack concurrently with the caller's own thread.
"""

from __future__ import annotations

import threading

import pyarrow as pa

import jetspark


def test_acks_from_threads_while_others_flush_are_all_applied(tmp_path):
    js = jetspark.connect(tmp_path / "store")
    js.add_stream(name="T", subjects=["t.>"])
    n, threads = 20_000, 4
    js.publish_batch(pa.table({"subject": ["t.x"] * n, "data": [b"m"] * n}), stream="T")
    js.add_consumer("T", durable_name="C", max_ack_pending=-1)
    msgs = js.pull_subscribe_bind("C", stream="T").fetch(n, timeout=5)
    assert len(msgs) == n
    go = threading.Barrier(threads + 1)  # the ackers and the flusher start together

    def acker(part):
        go.wait()
        for m in part:
            m.ack()

    def flusher():
        go.wait()
        for _ in range(200):
            js.publish("t.y", b"flush")  # each call applies the acks buffered so far

    workers = [threading.Thread(target=acker, args=(msgs[i::threads],)) for i in range(threads)]
    workers.append(threading.Thread(target=flusher))
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    info = js.consumer_info("T", "C")  # applies what is still buffered
    assert info.num_ack_pending == 0
    assert info.ack_floor.stream_seq == n
    js.close()
