"""Argument parsing of ``python -m aiokprod.testing`` (nothing is started)."""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aiokprod.testing import __main__ as testing_main
from aiokprod.testing.__main__ import (
    EXIT_COMMAND_NOT_FOUND,
    EXIT_KAFKA_FAILED,
    TopicSpec,
    build_parser,
    check_command,
    main,
    parse_config_entry,
    parse_topic_spec,
)
from aiokprod.testing.errors import LocalKafkaError
from aiokprod.testing.ports import pick_free_ports
from aiokprod.testing.startup import pick_addresses


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("orders", TopicSpec("orders", 1, None)),
        ("orders:6", TopicSpec("orders", 6, None)),
        ("orders:6:3", TopicSpec("orders", 6, 3)),
    ],
)
def test_topic_spec(text: str, expected: TopicSpec) -> None:
    assert parse_topic_spec(text) == expected


@pytest.mark.parametrize("text", ["", ":3", "a:b", "a:0", "a:1:0", "a:1:2:3"])
def test_bad_topic_spec(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_topic_spec(text)


def test_config_entry() -> None:
    assert parse_config_entry("auto.create.topics.enable=false") == (
        "auto.create.topics.enable",
        "false",
    )
    assert parse_config_entry("a=b=c") == ("a", "b=c")
    for bad in ("novalue", "=x"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_config_entry(bad)


def test_exec_parsing_keeps_the_command_verbatim() -> None:
    args = build_parser().parse_args(
        ["exec", "--nodes", "3", "--topic", "t:2", "--", "python", "-c", "print(1)", "--nodes"]
    )
    assert args.nodes == 3
    assert args.topics == [TopicSpec("t", 2, None)]
    assert args.cmd == ["--", "python", "-c", "print(1)", "--nodes"]


def test_exec_without_command_fails_before_starting_kafka(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["exec"]) == EXIT_KAFKA_FAILED
    assert "exec needs a command" in capsys.readouterr().err


def test_run_rejects_zero_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--nodes", "0"]) == EXIT_KAFKA_FAILED
    assert "--nodes must be at least 1" in capsys.readouterr().err


def _never_start(*args: object, **kwargs: object) -> None:
    raise AssertionError("Kafka must not be started for a command that cannot run")


def test_exec_of_a_missing_command_fails_before_starting_kafka(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(testing_main, "_start", _never_start)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["exec", "--", "uvicorn", "examples.fastapi_app:app"]) == EXIT_COMMAND_NOT_FOUND
    err = capsys.readouterr().err
    assert "cannot run 'uvicorn': not found on PATH" in err
    assert "pip install 'aiokprod[examples]'" in err
    assert "Kafka was not started" in err


def test_exec_of_a_missing_path_fails_before_starting_kafka(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(testing_main, "_start", _never_start)
    missing = tmp_path / "no-such-script"
    assert main(["exec", "--", str(missing)]) == EXIT_COMMAND_NOT_FOUND
    assert "it does not exist" in capsys.readouterr().err
    not_executable = tmp_path / "plain.txt"
    not_executable.write_text("x")
    assert main(["exec", "--", str(not_executable)]) == EXIT_COMMAND_NOT_FOUND
    assert "is not an executable file" in capsys.readouterr().err


def test_check_command_finds_commands_on_path_and_by_path(tmp_path: Path) -> None:
    assert check_command([sys.executable, "-c", "pass"]) == sys.executable
    script = tmp_path / "tool"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert check_command([str(script)]) == str(script)
    assert Path(check_command(["sh", "-c", "true"])).name == "sh"


def test_every_option_has_help_text() -> None:
    parser = build_parser()
    missing = []
    for sub in _subparsers(parser):
        for action in sub._actions:
            if action.help in (None, "") and not isinstance(action, argparse._SubParsersAction):
                missing.append(f"{sub.prog} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.extend(_subparsers(sub))
    return found


class _FakeNode:
    def __init__(self) -> None:
        self.process: object | None = None


class _FakeKafka:
    """Walks through the steps LocalKafka.start goes through, as the watcher sees them."""

    node_count = 2

    def __init__(self) -> None:
        self.nodes: dict[int, _FakeNode] = {}

    def node(self, node_id: int) -> _FakeNode:
        if not self.nodes:
            raise LocalKafkaError("not started")
        return self.nodes[node_id]


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_start_progress_reports_each_step_once(capsys: pytest.CaptureFixture[str]) -> None:
    kafka = _FakeKafka()
    lines: list[str] = []

    def seen(text: str) -> bool:
        lines.extend(capsys.readouterr().err.splitlines())
        return any(text in line for line in lines)

    with testing_main._StartProgress(kafka, poll_s=0.01):  # type: ignore[arg-type]
        kafka.nodes = {1: _FakeNode(), 2: _FakeNode()}
        _wait_for(lambda: seen("formatting storage"))
        kafka.nodes[1].process = object()
        _wait_for(lambda: seen("JVMs started, waiting for every broker to be ready"))
    lines.extend(capsys.readouterr().err.splitlines())
    assert sum("formatting storage" in line for line in lines) == 1
    assert sum("JVMs started" in line for line in lines) == 1
    assert all(line.startswith("[aiokprod.testing] ") for line in lines)


def test_a_first_run_says_it_is_fetching_the_jars(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fetched: list[str] = []

    class _Dist:
        version = "4.3.1"
        lib_dir = tmp_path / "lib"

    def fake_ensure(version: str | None = None) -> _Dist:
        assert "fetching the Kafka" in capsys.readouterr().err  # said before the download
        fetched.append(str(version))
        return _Dist()

    monkeypatch.setenv("AIOKPROD_KAFKA_VERSION", "4.3.1")
    monkeypatch.setattr(testing_main, "find_distribution", lambda version=None: None)
    monkeypatch.setattr(testing_main, "ensure_distribution", fake_ensure)
    testing_main._fetch_with_progress()
    assert fetched == ["4.3.1"]
    assert f"fetched Kafka 4.3.1 jars into {tmp_path / 'lib'}" in capsys.readouterr().err


def test_cached_jars_are_not_announced(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(testing_main, "find_distribution", lambda version=None: object())
    monkeypatch.setattr(testing_main, "ensure_distribution", _never_start)
    testing_main._fetch_with_progress()
    assert capsys.readouterr().err == ""


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port something listens on for the test's duration."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_run_listens_on_the_usual_port_when_it_is_free(monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 39: the README's snippet connects to 127.0.0.1:9092, where `make kafka` now listens
    assert testing_main.DEFAULT_PORT == 9092
    assert build_parser().parse_args(["run"]).port is None
    (free,) = pick_free_ports(1)
    monkeypatch.setattr(testing_main, "DEFAULT_PORT", free)
    assert testing_main._client_port(None) == free
    addresses, _ = pick_addresses(3, security=False, port=free)
    assert addresses[0].bootstrap == f"127.0.0.1:{free}"
    ports = [p for a in addresses for p in (a.port, a.controller_port)]
    assert len(set(ports)) == 6


def test_run_says_so_when_the_usual_port_is_taken(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], taken_port: int
) -> None:
    monkeypatch.setattr(testing_main, "DEFAULT_PORT", taken_port)
    assert testing_main._client_port(None) is None  # any free port
    err = capsys.readouterr().err
    assert f"port {taken_port} is in use (another Kafka?)" in err
    assert "connect to the BOOTSTRAP address printed below, or choose a port with --port" in err
    assert testing_main._client_port(0) is None


def test_run_refuses_a_port_in_use_before_starting_kafka(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], taken_port: int
) -> None:
    monkeypatch.setattr(testing_main, "ensure_distribution", _never_start)
    monkeypatch.setattr(testing_main, "find_distribution", _never_start)
    assert main(["run", "--port", str(taken_port)]) == EXIT_KAFKA_FAILED
    assert f"--port {taken_port}: 127.0.0.1:{taken_port} is in use" in capsys.readouterr().err
    assert main(["run", "--port", "70000"]) == EXIT_KAFKA_FAILED
    assert "--port must be between 1 and 65535" in capsys.readouterr().err
