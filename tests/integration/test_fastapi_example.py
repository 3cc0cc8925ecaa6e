"""The FastAPI example (examples/fastapi_app.py) with its TestClient against the local broker.

TestClient runs the app's lifespan, so the producer is opened and closed exactly as under a
real server; what a request produced is read back with librdkafka.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient
from readback import consume_all

from aiokprod import ProducerClosedError
from aiokprod.testing import LocalKafka

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(60)
def test_a_request_produces_a_record_that_is_read_back(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=3)
    example = load_example("fastapi_app")
    app = example.create_app(kafka.bootstrap_servers, topic)

    with TestClient(app) as client:
        responses = [
            client.post("/events", json={"user": f"u-{i}", "action": "login"}) for i in range(5)
        ]
        bad = client.post("/events", json={"user": "u-1"})  # no action: FastAPI's 422
        producer = app.state.producer
    assert [r.status_code for r in responses] == [201] * 5, [r.text for r in responses]
    assert bad.status_code == 422

    # leaving the TestClient ran the lifespan's exit: the producer is closed
    with pytest.raises(ProducerClosedError):
        asyncio.run(producer.send(topic, b"late"))

    records = consume_all(kafka.bootstrap_servers, topic, expected=5, timeout_s=30)
    assert len(records) == 5
    by_position = {(r.partition, r.offset): r for r in records}
    for i, response in enumerate(responses):
        body = response.json()
        assert body["topic"] == topic
        record = by_position[(body["partition"], body["offset"])]
        assert record.key == f"u-{i}".encode()
        assert json.loads(record.value) == {"user": f"u-{i}", "action": "login"}
