"""Reading a stream with Spark: a batch snapshot, then a streaming query with
Trigger.AvailableNow and a durable consumer whose ack floor follows Spark's commits.

    python examples/spark_source.py

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
    js.add_stream(name="ORDERS", subjects=["orders.>"])
    for i in range(1, 7):
        js.publish("orders.paid" if i % 3 == 0 else "orders.new", b'{"id": %d, "amount": %d}' % (i, 10 * i))

spark = jetspark.local_session("jetspark-example")  # local[2], the jetstream format registered

# Batch: a snapshot of the stream as a DataFrame (stream, subject, seq, timestamp, data).
orders = spark.read.format("jetstream").option("store", STORE).option("stream", "ORDERS").load()
for row in orders.groupBy("subject").count().orderBy("subject").collect():
    print(f"batch: {row['subject']}: {row['count']} messages")
amounts = orders.select(F.get_json_object(F.col("data").cast("string"), "$.amount").cast("long").alias("amount"))
print(f"batch: total amount {amounts.agg(F.sum('amount')).first()[0]}")

# Streaming: everything there is now, at most 4 sequences a micro-batch, then stop.
# The durable consumer "spark-orders" acknowledges each micro-batch once Spark commits it.
query = (
    spark.readStream.format("jetstream")
    .option("store", STORE)
    .option("stream", "ORDERS")
    .option("consumer", "spark-orders")
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "4")
    .load()
    .writeStream.format("memory")
    .queryName("orders_seen")
    .option("checkpointLocation", CHECKPOINT)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
batches = [p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0]
print(f"streaming: {spark.table('orders_seen').count()} rows in {len(batches)} micro-batches")
spark.stop()

with jetspark.connect(STORE) as js:
    info = js.consumer_info("ORDERS", "spark-orders")
    print(
        f"consumer 'spark-orders': ack floor at stream seq {info.ack_floor.stream_seq}, {info.num_pending} to deliver"
    )
