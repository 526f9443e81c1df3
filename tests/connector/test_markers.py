"""Subject delete markers read through the Spark source: ordinary messages, with their headers.

A stream with ``subject_delete_marker_ttl`` stores a marker when a TTL (or max_age) removes a
subject's last message (tests/contract/test_msg_ttl.py).  The source reads it as it reads any
stored message: an empty payload and its headers (with ``includeHeaders``), so a pipeline
that wants to see deletions keeps it and one that does not filters on
``Nats-Marker-Reason`` (docs/guides/spark-source.md).
"""

from __future__ import annotations

import time

import pytest
from pyspark.sql import functions as F

pytestmark = pytest.mark.spark

MARKER = {"Nats-Marker-Reason": ["MaxAge"], "Nats-TTL": ["1h0m0s"], "Nats-Rollup": ["sub"]}


def rows(df):
    with_headers = "headers" in df.columns
    return [(r.subject, r.seq, bytes(r.data), r.headers if with_headers else None) for r in df.orderBy("seq").collect()]


def test_a_delete_marker_is_read_as_a_message_with_its_headers(store, spark):
    js = store.js
    # (One message a subject: a TTL shorter than the marker TTL is kept as it is.)
    js.add_stream(name="M", subjects=["m.>"], subject_delete_marker_ttl=3600, max_msgs_per_subject=1)
    js.publish("m.a", b"1", headers={"Nats-TTL": "1s"})
    js.publish("m.b", b"2")
    time.sleep(1.6)  # m.a's TTL passes (once, a known duration): its marker takes its place

    df = store.read("M", includeHeaders="true")
    assert rows(df) == [("m.b", 2, b"2", None), ("m.a", 3, b"", MARKER)]
    # A pipeline that wants the data alone filters the markers out by their header.
    data = df.where(F.col("headers")["Nats-Marker-Reason"].isNull())
    assert rows(data) == [("m.b", 2, b"2", None)]
    # Without includeHeaders a marker is an empty message on its subject.
    assert rows(store.read("M")) == [("m.b", 2, b"2", None), ("m.a", 3, b"", None)]
