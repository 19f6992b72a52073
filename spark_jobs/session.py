"""The Spark session factory: never a session at import time."""

from __future__ import annotations

import os

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.ui.showConsoleProgress": "false",
}


def get_spark(app_name: str = "haproof-audit", master: str | None = None, conf: dict | None = None):
    """A SparkSession: ``local[*]`` by default, a cluster with ``spark://...``, or a Spark
    Connect server with ``sc://...``."""
    from pyspark.sql import SparkSession

    master = master or os.environ.get("HAPROOF_SPARK_MASTER") or "local[*]"
    if master.startswith("sc://"):
        builder = SparkSession.builder.remote(master).appName(app_name)
    else:
        builder = SparkSession.builder.master(master).appName(app_name)
        for k, v in {**DEFAULT_CONF, **(conf or {})}.items():
            builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if not master.startswith("sc://"):
        spark.sparkContext.setLogLevel("WARN")
    return spark
