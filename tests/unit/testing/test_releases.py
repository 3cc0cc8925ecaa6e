"""Per-release decisions of the local Kafka runner (pure functions, no Java, no Maven)."""

from __future__ import annotations

import pytest

from aiokprod.testing.distribution import DEFAULT_KAFKA_VERSION, distribution_artifacts
from aiokprod.testing.errors import LocalKafkaError
from aiokprod.testing.releases import (
    FALLBACK_LOG4J2_VERSION,
    NEWEST_VERSION,
    SMOKE_VERSIONS,
    TESTED_VERSIONS,
    TOOLS_VERSION,
    kafka_release,
    parse_version,
)


def test_parse_version() -> None:
    assert parse_version("3.9.2") == (3, 9, 2)
    assert parse_version("4.0") == (4, 0, 0)
    assert parse_version("4.4.0-rc3") == (4, 4, 0)
    for bad in ("", "4", "four.0", "../4.0"):
        with pytest.raises(LocalKafkaError, match="not a Kafka version"):
            parse_version(bad)


@pytest.mark.parametrize(
    ("version", "logging", "tools", "share"),
    [
        ("3.6.2", "reload4j", False, False),
        ("3.9.2", "reload4j", False, False),
        ("4.0.2", "log4j2", True, True),
        ("4.4.0", "log4j2", True, True),
    ],
)
def test_release_profile(version: str, logging: str, tools: bool, share: bool) -> None:
    release = kafka_release(version)
    assert release.logging == logging
    assert release.wants_tools is tools
    assert release.has_share_coordinator is share
    assert release.probe_artifact == ("kafka-server" if tools else "kafka_2.13")


def test_releases_before_3_6_are_refused() -> None:
    with pytest.raises(LocalKafkaError, match=r"Apache Kafka 3\.5\.2 is older than 3\.6"):
        kafka_release("3.5.2")
    with pytest.raises(LocalKafkaError, match="older than"):
        kafka_release("2.8.2")


def test_logging_artifacts() -> None:
    kafka3 = [(a.artifact, a.version) for a in kafka_release("3.8.1").logging_artifacts(None)]
    assert kafka3 == [("slf4j-reload4j", "1.7.36"), ("reload4j", "1.2.25")]
    kafka4 = kafka_release("4.3.1").logging_artifacts("2.25.4")
    assert [a.jar_name for a in kafka4] == [
        "log4j-slf4j-impl-2.25.4.jar",
        "log4j-core-2.25.4.jar",
        "log4j-api-2.25.4.jar",
    ]
    assert {a.version for a in kafka_release("4.0.2").logging_artifacts(None)} == {
        FALLBACK_LOG4J2_VERSION
    }


def test_distribution_artifacts() -> None:
    names = [
        a.artifact
        for a in distribution_artifacts(kafka_release("4.3.1"), "2.25.4", with_tools=True)
    ]
    assert names[:2] == ["kafka_2.13", "kafka-tools"]
    names = [
        a.artifact for a in distribution_artifacts(kafka_release("3.9.2"), None, with_tools=False)
    ]
    assert names == ["kafka_2.13", "slf4j-reload4j", "reload4j"]


def test_version_lists_are_consistent() -> None:
    assert list(TESTED_VERSIONS) == sorted(TESTED_VERSIONS, key=parse_version)
    assert set(SMOKE_VERSIONS) <= set(TESTED_VERSIONS)
    assert TESTED_VERSIONS[-1] == NEWEST_VERSION
    assert DEFAULT_KAFKA_VERSION in TESTED_VERSIONS
    assert TOOLS_VERSION in TESTED_VERSIONS
    # one entry per minor line, from the oldest supported to the newest
    minors = [parse_version(v)[:2] for v in TESTED_VERSIONS]
    assert len(set(minors)) == len(minors)
    assert minors[0] == (3, 6)
