"""``format("aiokprod")`` after installing aiokprod, without ``aiokprod.spark.register``.

Issue 39: a session that forgot ``register(spark)`` got ``[DATA_SOURCE_NOT_FOUND]``. The
release files now carry ``pyspark_aiokprod``, a top-level ``pyspark_*`` module PySpark's
Python Data Source lookup imports (``pyspark/sql/worker/lookup_data_sources.py``), and the
sink's option mistakes come first in what Spark shows. Here the sdist and the wheel built from
it are made as ``make wheels`` makes them, the wheel is unpacked as pip installs it, and a
fresh Spark application that never imports ``aiokprod.spark`` writes through it, in its own
process (the lookup runs once per application) on the session's broker; librdkafka reads back.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from readback import consume_all

from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import in_ci

if importlib.util.find_spec("pyspark") is None and not in_ci():
    pytest.skip("PySpark is not installed (pip install 'aiokprod[spark]')", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
MODULE = "pyspark_aiokprod.py"
ROWS = 1000

# The application: a fresh session, no register(); one write, then the three mistakes.
APP = r"""
import json, os, sys
import aiokprod, pyspark_aiokprod
from pyspark.sql import SparkSession

bootstrap, topic, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("OFF")
print(json.dumps({"aiokprod": aiokprod.__file__, "module": pyspark_aiokprod.__file__}))
df = spark.range(rows).selectExpr("cast(id AS string) AS key", "cast(id AS string) AS value")
write = lambda: df.write.format("aiokprod").option("kafka.bootstrap.servers", bootstrap)
write().option("topic", topic).mode("append").save()
mistakes = {
    "prefix": {"deliveryGuarantee": "exactly-once"},
    "guarantee": {"deliveryGuarantee": "exactly_once", "transactionalIdPrefix": "p"},
    "unknown": {"lingerMs": "5"},
}
for name, options in mistakes.items():
    writer = write().option("topic", topic)
    for key, value in options.items():
        writer = writer.option(key, value)
    try:
        writer.mode("append").save()
        print(json.dumps({name: None}))
    except Exception as exc:
        print(json.dumps({name: str(exc)}))
spark.stop()
"""


def release_files(out: Path) -> tuple[Path, Path]:
    """The sdist, and the pure wheel built from it (``make wheels``'s first step)."""
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "-x", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (sdist,) = out.glob("aiokprod-*.tar.gz")
    (wheel,) = out.glob("aiokprod-*-py3-none-any.whl")
    return sdist, wheel


def test_a_fresh_session_writes_without_register(
    kafka: LocalKafka, new_topic, tmp_path: Path
) -> None:
    sdist, wheel = release_files(tmp_path / "dist")
    with tarfile.open(sdist) as archive:
        assert f"{sdist.name.removesuffix('.tar.gz')}/{MODULE}" in archive.getnames()
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        assert MODULE in archive.namelist()  # at the top level, beside aiokprod/
        archive.extractall(site)  # what pip puts in site-packages
    topic = new_topic(partitions=2)
    env = {
        **os.environ,
        "PYTHONPATH": str(site),  # before this environment's own aiokprod
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    app = tmp_path / "app.py"
    app.write_text(APP)
    run = subprocess.run(
        [sys.executable, str(app), kafka.bootstrap_servers, topic, str(ROWS)],
        cwd=tmp_path,  # not the source tree
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    said: dict[str, str | None] = {}
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            said.update(json.loads(line))
    assert said["aiokprod"] == str(site / "aiokprod" / "__init__.py")
    assert said["module"] == str(site / MODULE)
    records = consume_all(kafka.bootstrap_servers, topic, expected=ROWS, timeout_s=60)
    assert sorted(r.value for r in records) == sorted(str(i).encode() for i in range(ROWS))

    # Spark's words, then ours at once (the traceback came first, our sentence last)
    prefix = (
        "[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer: "
        "aiokprod.errors.ConfigError: "
    )
    expected = {
        "prefix": "option transactionalIdPrefix: required with deliveryGuarantee=exactly-once",
        "guarantee": "option deliveryGuarantee: 'exactly_once' is not one of at-least-once, "
        "exactly-once",
        "unknown": "unknown option 'lingerms' for format('aiokprod')",
    }
    for name, sentence in expected.items():
        text = said[name]
        assert text is not None, f"{name}: the write succeeded"
        assert text.startswith(prefix + sentence), text
        assert "Traceback" not in text
