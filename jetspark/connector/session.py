"""A local SparkSession set up for jetspark.

Spark's Python workers must run this very interpreter (otherwise they fail
with "Python worker failed to connect back" or miss pyarrow), filter
pushdown for Python data sources is switched on, logging is quiet, and the
``jetstream`` format is registered.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Package data (pyproject.toml): in a wheel as in a checkout.
CONF_DIR = Path(__file__).resolve().parent / "conf"


def spark_conf(conf_dir: Optional[Path] = None) -> dict[str, str]:
    """The settings jetspark needs, then jetspark/connector/conf/spark-defaults.conf on top."""
    conf = {
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
    }
    conf_dir = conf_dir or CONF_DIR
    defaults = conf_dir / "spark-defaults.conf"
    if defaults.exists():
        for line in defaults.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, value = line.partition(" ")
                conf[key.strip()] = value.strip()
    log4j = conf_dir / "log4j2.properties"
    if log4j.exists():
        opt = f"-Dlog4j.configurationFile=file:{log4j}"
        conf["spark.driver.extraJavaOptions"] = opt
        conf["spark.executor.extraJavaOptions"] = opt
    return conf


def local_session(
    app_name: str = "jetspark",
    master: str = "local[2]",
    *,
    jvm_started: Optional[Callable[[], None]] = None,
    **extra: str,
) -> SparkSession:
    """Build (or get) a local SparkSession with the jetstream format registered.

    Under Spark Connect (``SPARK_REMOTE`` set, e.g. ``sc://host:15002`` or ``local[2]``)
    it is a Connect session instead: Spark's own settings belong to the server then
    (its Python must have jetspark installed), and only the format is registered, with
    the session setting its batch reads need (docs/guides/spark-connect.md).

    ``jvm_started``: called once Spark's JVM runs, before the SparkContext is made in it
    (not under Spark Connect, nor when the JVM already ran).  What it raises gives up the
    session with nothing left behind, since that JVM exits when this process does; an
    interrupted launch, by contrast, can leave a JVM that never exits.  The demo stops
    there on a Ctrl-C during start-up instead of waiting for the whole session."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from jetspark.connector import register

    if os.environ.get("SPARK_REMOTE"):
        spark = SparkSession.builder.appName(app_name).getOrCreate()
        register(spark)
        return spark

    settings = {**spark_conf(), **extra}
    if jvm_started is not None:
        from pyspark import SparkConf, SparkContext

        if SparkContext._gateway is None:
            # The JVM alone first, launched with what the session's SparkConf would give it.
            SparkContext._ensure_initialized(
                conf=SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name).setAll(list(settings.items()))
            )
            jvm_started()
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
