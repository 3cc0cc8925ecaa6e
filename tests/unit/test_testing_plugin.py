"""The pytest plugin's policy: skip locally, fail under CI=true; markers from fixtures."""

from __future__ import annotations

from typing import Any

import pytest

from aiokprod.testing import pytest_plugin
from aiokprod.testing.cluster import LocalKafka
from aiokprod.testing.errors import LocalKafkaError


@pytest.fixture
def broken_start(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(self: LocalKafka) -> LocalKafka:
        raise LocalKafkaError("java is not installed")

    monkeypatch.setattr(LocalKafka, "start", fail)


@pytest.mark.usefixtures("broken_start")
def test_unavailable_kafka_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="java is not installed"):
        pytest_plugin._start_or_give_up(1)


@pytest.mark.usefixtures("broken_start")
def test_unavailable_kafka_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="3-node Kafka cluster: java is not"):
        pytest_plugin._start_or_give_up(3)


class _FakeItem:
    def __init__(self, *fixtures: str) -> None:
        self.fixturenames = list(fixtures)
        self.markers: list[str] = []

    def add_marker(self, marker: Any) -> None:
        self.markers.append(marker.name)


def test_markers_follow_requested_fixtures(pytestconfig: pytest.Config) -> None:
    items = [
        _FakeItem("tmp_path"),
        _FakeItem("kafka"),
        _FakeItem("new_topic"),
        _FakeItem("kafka_cluster"),
        _FakeItem("new_cluster_topic", "kafka"),
    ]
    pytest_plugin.pytest_collection_modifyitems(pytestconfig, items)  # type: ignore[arg-type]
    assert [item.markers for item in items] == [
        [],
        ["broker"],
        ["broker"],
        ["cluster"],
        ["broker", "cluster"],
    ]


def test_this_module_needs_no_broker(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("broker") is None
    assert request.node.get_closest_marker("cluster") is None
