"""A store option that looks like a URL fails the query in the driver, with the server URL
meant (jetspark/connection.py; the option parsing alone: tests/test_connect.py)."""

from __future__ import annotations

import pytest


def test_a_mistyped_server_url_fails_the_read_and_the_write(spark):
    with pytest.raises(
        Exception, match=r"option store 'nats:/127.0.0.1:4222' looks like a URL, not a store directory"
    ) as err:
        spark.read.format("jetstream").option("store", "nats:/127.0.0.1:4222").option("stream", "S").load().collect()
    assert '.option("store", "nats://127.0.0.1:4222")' in str(err.value)
    df = spark.createDataFrame([("s.a", b"x")], "subject string, data binary")
    with pytest.raises(Exception, match=r"option path \(load/save\) 'tls:h:4443' looks like a URL"):
        df.write.format("jetstream").mode("append").save("tls:h:4443")
