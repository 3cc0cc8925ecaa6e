"""One SparkSession per test module: ``local[2]``, a small driver, no UI, bound to 127.0.0.1."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def local_spark(app: str, **conf: str) -> Iterator[Any]:
    """A ``local[2]`` session with the ``aiokprod`` data source registered."""
    from pyspark.sql import SparkSession

    import aiokprod.spark

    saved = {k: os.environ.get(k) for k in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON")}
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors' Python has aiokprod
    builder = (
        SparkSession.builder.master(conf.pop("master", "local[2]"))
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "512m")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "true")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    aiokprod.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
