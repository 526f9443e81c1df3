"""Writing to streams with Spark, exactly once: a batch write whose rows carry message ids,
and a streaming query that copies one stream into another and, restarted from its
checkpoint, writes each row once.

    python examples/spark_sink.py

Needs the spark extra (pip install "jetspark[spark]") and Java 17+.  The store and the
checkpoint are made afresh each run in ./jetspark-example-data and ./jetspark-example-ckpt.
"""

import shutil

from pyspark.sql import functions as F

import jetspark

STORE, CHECKPOINT = "./jetspark-example-data", "./jetspark-example-ckpt"
for path in (STORE, CHECKPOINT):
    shutil.rmtree(path, ignore_errors=True)  # start afresh on each run

with jetspark.connect(STORE) as js:
    js.add_stream(name="EVENTS", subjects=["events.>"])
    js.add_stream(name="AUDIT", subjects=["audit.>"])
    for i in range(3):
        js.publish("events.login", b"user %d" % i)

spark = jetspark.local_session("jetspark-example")

# Batch: each row a message (columns subject and data; optional headers and msg_id).
# A msg_id makes the write idempotent: the same rows written again store nothing new.
notes = spark.createDataFrame([("audit.note", "hello", "note-1")], "subject string, data string, msg_id string")
for _ in range(2):
    notes.write.format("jetstream").option("store", STORE).mode("append").save()


def copy_events() -> None:
    """EVENTS -> AUDIT (audit.<subject>), everything there is now, from the checkpoint on."""
    query = (
        spark.readStream.format("jetstream")
        .option("store", STORE)
        .option("stream", "EVENTS")
        .option("startingOffsets", "earliest")
        .load()
        .select(F.concat(F.lit("audit."), "subject").alias("subject"), "data")
        .writeStream.format("jetstream")
        .option("store", STORE)
        .option("stream", "AUDIT")
        .option("checkpointLocation", CHECKPOINT)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


copy_events()
with jetspark.connect(STORE) as js:
    print(
        f"after the first run: AUDIT holds {js.stream_info('AUDIT').state.messages} messages"
    )  # the note once, 3 events
    for i in range(3, 5):
        js.publish("events.login", b"user %d" % i)

# The query again, from its checkpoint: only the two new events are copied.
copy_events()
spark.stop()

with jetspark.connect(STORE) as js:
    audit = js.stream_info("AUDIT", subjects_filter=">").state
    print(f"after the second run: AUDIT holds {audit.messages} messages: {dict(sorted(audit.subjects.items()))}")
