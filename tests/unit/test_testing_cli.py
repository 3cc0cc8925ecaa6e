"""Argument parsing of ``python -m aiokprod.testing`` (nothing is started)."""

from __future__ import annotations

import argparse

import pytest

from aiokprod.testing.__main__ import (
    EXIT_KAFKA_FAILED,
    TopicSpec,
    build_parser,
    main,
    parse_config_entry,
    parse_topic_spec,
)


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
