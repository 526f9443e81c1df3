"""format("jetstream") on a real NATS server: the store option names it, and options
prefixed ``nats.`` carry the connection's credentials to every Spark task."""

from __future__ import annotations

import pytest

import jetspark
from tests.connector.support import error_text
from tests.servers import NatsServer

pytestmark = pytest.mark.spark


@pytest.fixture
def secured():
    server = NatsServer("--user", "spark", "--pass", "s3cret").start()
    yield server
    server.stop()


def test_batch_write_and_read_with_credentials(spark, secured):
    with jetspark.connect(secured.url, user="spark", password="s3cret") as js:
        js.add_stream(name="ORDERS", subjects=["orders.>"])
    creds = {"store": secured.url, "nats.user": "spark", "nats.password": "s3cret"}

    rows = spark.createDataFrame([(f"orders.{i % 2}", f"m{i}") for i in range(20)], "subject string, data string")
    rows.write.format("jetstream").options(**creds).mode("append").save()

    df = spark.read.format("jetstream").options(**creds).option("stream", "ORDERS").load()
    got = sorted((r.seq, r.subject, bytes(r.data).decode()) for r in df.collect())
    assert [g[0] for g in got] == list(range(1, 21))
    assert sorted(g[2] for g in got) == sorted(f"m{i}" for i in range(20))
    assert all(g[1] == f"orders.{g[2][1:] and int(g[2][1:]) % 2}" for g in got)
    with jetspark.connect(secured.url, user="spark", password="s3cret") as js:
        assert js.stream_info("ORDERS").state.messages == 20


def test_wrong_credentials_are_a_clear_error(spark, secured):
    df = (
        spark.read.format("jetstream")
        .option("store", secured.url)
        .option("nats.user", "spark")
        .option("nats.password", "wrong")
        .option("stream", "ORDERS")
        .load()
    )
    with pytest.raises(Exception) as e:
        df.collect()
    assert "authentication failed" in error_text(e.value).lower()


def test_nats_options_need_a_nats_store(spark, tmp_path):
    df = (
        spark.read.format("jetstream")
        .option("store", str(tmp_path))
        .option("nats.user", "x")
        .option("stream", "S")
        .load()
    )
    with pytest.raises(Exception) as e:
        df.collect()
    assert "are for a nats:// store" in error_text(e.value)
