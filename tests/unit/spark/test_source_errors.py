"""The data source's driver-side mistakes: a ConfigError, shown by Spark without a traceback.

What Spark shows is checked on a real Spark application (tests/integration/
test_spark_discovery.py); here, that the traceback is hidden only inside PySpark's planner
worker, which reports the error and exits, never in the process that called ``writer()``.
"""

from __future__ import annotations

import os
import sys
import types

import pytest

pytest.importorskip("pyspark.sql.datasource")
pytest.importorskip("pyarrow")

from pyspark.sql.types import StringType, StructField, StructType

from aiokprod import ConfigError
from aiokprod.spark.source import AiokprodDataSource

SCHEMA = StructType([StructField("value", StringType())])
WRONG = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t", "deliveryguarantee": "twice"}


def test_a_mistake_leaves_the_calling_process_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HIDE_TRACEBACK", raising=False)
    with pytest.raises(ConfigError, match="option deliveryGuarantee: 'twice' is not one of"):
        AiokprodDataSource(WRONG).writer(SCHEMA, False)
    assert "SPARK_HIDE_TRACEBACK" not in os.environ


def test_in_spark_planner_worker_the_traceback_is_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    # the module whose worker_run reports a planner worker's error, then exits
    monkeypatch.setitem(sys.modules, "pyspark.sql.worker.utils", types.ModuleType("utils"))
    monkeypatch.delenv("SPARK_HIDE_TRACEBACK", raising=False)
    with pytest.raises(ConfigError, match="option deliveryGuarantee"):
        AiokprodDataSource(WRONG).streamWriter(SCHEMA, False)
    assert os.environ["SPARK_HIDE_TRACEBACK"] == "1"
