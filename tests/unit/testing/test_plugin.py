"""The pytest plugin's policy: skip locally, fail under CI=true; markers from fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
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


# --- the pytest11 entry point --------------------------------------------------------------

_COUNT_PLUGIN = """
from aiokprod.testing import pytest_plugin

def test_plugin_registered_once(request):
    plugins = request.config.pluginmanager.get_plugins()
    assert sum(plugin is pytest_plugin for plugin in plugins) == 1
"""


def _run_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},
    )


def test_entry_point_names_the_plugin_module() -> None:
    found = [ep for ep in entry_points(group="pytest11") if ep.value == pytest_plugin.__name__]
    assert [ep.name for ep in found] == [pytest_plugin.__name__]


def test_plugin_loads_without_being_listed(tmp_path: Path) -> None:
    (tmp_path / "test_count.py").write_text(_COUNT_PLUGIN)
    result = _run_pytest(tmp_path, "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    fixtures = _run_pytest(tmp_path, "--fixtures", "-q")
    for name in ("kafka", "kafka_cluster", "kafka_secure", "new_topic", "new_cluster_topic"):
        assert f"\n{name} [session scope]" in fixtures.stdout or f"\n{name} --" in fixtures.stdout


def test_listing_the_plugin_by_hand_too_registers_it_once(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["aiokprod.testing.pytest_plugin"]\n')
    (tmp_path / "test_count.py").write_text(_COUNT_PLUGIN)
    result = _run_pytest(tmp_path, "-q")
    assert result.returncode == 0, result.stdout + result.stderr


def test_plugin_can_be_disabled(tmp_path: Path) -> None:
    (tmp_path / "test_count.py").write_text("def test_nothing():\n    pass\n")
    result = _run_pytest(tmp_path, "--fixtures", "-q", "-p", f"no:{pytest_plugin.__name__}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "new_topic" not in result.stdout


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
