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
        pytest_plugin.start_or_give_up(1)


@pytest.mark.usefixtures("broken_start")
def test_unavailable_kafka_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="3-node Kafka cluster: java is not"):
        pytest_plugin.start_or_give_up(3)


@pytest.mark.usefixtures("broken_start")
def test_unavailable_release_fails_in_ci_naming_the_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"node of Apache Kafka 3\.9\.2: java is not"):
        pytest_plugin.start_or_give_up(1, version="3.9.2")


class _FakeItem:
    def __init__(self, *fixtures: str, version: Any = None) -> None:
        self.fixturenames = list(fixtures)
        self.markers: list[str] = []
        self.version = version  # a kafka_version mark, or None

    def add_marker(self, marker: Any) -> None:
        self.markers.append(marker.name)

    def get_closest_marker(self, name: str) -> Any:
        return self.version if name == "kafka_version" else None


class _FakeConfig:
    def __init__(self, selection: str) -> None:
        self.selection = selection
        self.deselected: list[Any] = []
        self.hook = self

    def getoption(self, name: str, default: Any = None) -> Any:
        assert name == "--kafka-versions"
        return self.selection

    def pytest_deselected(self, items: list[Any]) -> None:
        self.deselected.extend(items)


def test_markers_follow_requested_fixtures() -> None:
    items = [
        _FakeItem("tmp_path"),
        _FakeItem("kafka"),
        _FakeItem("new_topic"),
        _FakeItem("kafka_cluster"),
        _FakeItem("new_cluster_topic", "kafka"),
    ]
    pytest_plugin.pytest_collection_modifyitems(_FakeConfig("smoke"), items)  # type: ignore[arg-type]
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


@pytest.mark.parametrize(
    ("selection", "kept"),
    [
        ("smoke", ["plain", "3.9.2", "4.4.0"]),
        ("all", ["plain", "3.6.2", "3.9.2", "4.4.0"]),
        ("3.6.2, 4.4.0", ["plain", "3.6.2", "4.4.0"]),
    ],
)
def test_version_matrix_selection(selection: str, kept: list[str]) -> None:
    items = [_FakeItem("tmp_path")] + [
        _FakeItem("tmp_path", version=pytest.mark.kafka_version(v, smoke=smoke).mark)
        for v, smoke in [("3.6.2", False), ("3.9.2", True), ("4.4.0", True)]
    ]
    config = _FakeConfig(selection)
    pytest_plugin.pytest_collection_modifyitems(config, items)  # type: ignore[arg-type]
    names = [item.version.args[0] if item.version else "plain" for item in items]
    assert names == kept
    assert len(config.deselected) == 4 - len(kept)
