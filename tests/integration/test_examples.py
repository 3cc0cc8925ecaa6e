"""The examples run against the local broker: aiohttp app, asyncio script, sync script.

(The FastAPI example has its own file, test_fastapi_example.py; the PySpark examples run in
test_spark_sink.py and test_spark_streaming.py on those files' Spark sessions.)
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from aiohttp import test_utils
from readback import consume_all

from aiokprod import ProducerClosedError
from aiokprod.testing import LocalKafka

pytestmark = pytest.mark.timeout(90)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_example(name: str, *args: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap},
    )


async def test_aiohttp_example(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=2)
    example = load_example("aiohttp_app")
    app = example.create_app(kafka.bootstrap_servers, topic)
    server = test_utils.TestServer(app, host="127.0.0.1")  # a real server on loopback
    async with test_utils.TestClient(server) as client:
        response = await client.post("/events?user=u-7", data=b"clicked")
        assert response.status == 201, await response.text()
        body = await response.json()
    # the cleanup_ctx closed the producer with the app
    with pytest.raises(ProducerClosedError):
        await app[example.PRODUCER].send(topic, b"late")
    records = consume_all(kafka.bootstrap_servers, topic, expected=1, timeout_s=30)
    assert len(records) == 1
    record = records[0]
    assert (record.partition, record.offset) == (body["partition"], body["offset"])
    assert (record.key, record.value, record.headers) == (
        b"u-7",
        b"clicked",
        (("via", b"aiohttp"),),
    )


def test_asyncio_script(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=3)
    result = run_example("asyncio_script.py", topic, "3000", bootstrap=kafka.bootstrap_servers)
    assert result.returncode == 0, result.stderr
    assert "3000 of 3000 records delivered" in result.stdout
    records = consume_all(kafka.bootstrap_servers, topic, expected=3001, timeout_s=30)
    assert len(records) == 3001
    assert sum(r.headers == (("source", b"asyncio_script"),) for r in records) == 3000


def test_sync_script(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=3)
    result = run_example("sync_script.py", topic, bootstrap=kafka.bootstrap_servers)
    assert result.returncode == 0, result.stderr
    assert "1000 of 1000 rows delivered" in result.stdout
    assert "typed error, raised in this thread" in result.stdout
    records = consume_all(kafka.bootstrap_servers, topic, expected=1001, timeout_s=30)
    assert len(records) == 1001
    assert all(r.value for r in records)
