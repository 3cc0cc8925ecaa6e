"""Small pure helpers of aiokprod.testing: errors, Java version parsing, plugin naming."""

from __future__ import annotations

import re

import pytest

from aiokprod.testing.errors import LocalKafkaError, error_with_output, tail_lines
from aiokprod.testing.java import (
    PERF_JVM_FLAGS,
    TOOL_JVM_FLAGS,
    default_jvm_flags,
    parse_java_major,
)
from aiokprod.testing.pytest_plugin import in_ci, unique_topic_name
from aiokprod.testing.topics import validate_topic


def test_tail_lines_strips_colours_and_keeps_the_end() -> None:
    text = "\n".join(f"\x1b[0mline {i}\x1b[1;31m" for i in range(100)) + "\n"
    assert tail_lines(text, 3) == "line 97\nline 98\nline 99"
    assert tail_lines(text, 0) == ""


def test_error_with_output() -> None:
    error = error_with_output("it broke", "a\nb\n", lines=40)
    assert isinstance(error, LocalKafkaError)
    assert str(error) == "it broke; last 2 lines of output:\n    a\n    b"
    assert str(error_with_output("it broke", "  \n")) == "it broke (no output)"


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
        ('java version "1.8.0_402"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "25-ea" 2025-09-16', 25),
    ],
)
def test_parse_java_major(output: str, major: int) -> None:
    assert parse_java_major(output) == major


def test_parse_java_major_without_version() -> None:
    with pytest.raises(LocalKafkaError, match="no version"):
        parse_java_major("command not found")


def test_unique_topic_names_are_valid_and_distinct() -> None:
    names = {unique_topic_name("test_x[param with spaces/and:colons]") for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", name)
        assert name.startswith("test_x-param-with-spaces-and-colons-")
    assert unique_topic_name("[]").startswith("test-")


def test_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert in_ci()
    monkeypatch.setenv("CI", "TRUE")
    assert in_ci()
    monkeypatch.setenv("CI", "false")
    assert not in_ci()
    monkeypatch.delenv("CI")
    assert not in_ci()


@pytest.mark.parametrize(
    ("name", "partitions", "rf"),
    [("", 1, 1), ("a b", 1, 1), ("..", 1, 1), ("x" * 250, 1, 1), ("ok", 0, 1), ("ok", 1, 0)],
)
def test_validate_topic_rejects(name: str, partitions: int, rf: int) -> None:
    with pytest.raises(ValueError, match=r"invalid Kafka topic name|must be at least 1"):
        validate_topic(name, partitions, rf)


def test_validate_topic_accepts() -> None:
    validate_topic("orders.v1_A-2", 12, 3)


def test_perf_tools_get_full_jit_flags() -> None:
    assert default_jvm_flags("org.apache.kafka.tools.ProducerPerformance") == PERF_JVM_FLAGS
    assert default_jvm_flags("org.apache.kafka.tools.TopicCommand") == TOOL_JVM_FLAGS
    assert "-XX:TieredStopAtLevel=1" not in PERF_JVM_FLAGS
