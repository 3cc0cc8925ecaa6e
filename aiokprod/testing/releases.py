"""What differs between the Apache Kafka releases the runner can start (pure, no I/O).

Every release from 3.6 to the newest 4.x runs the same way here (KRaft, combined
broker+controller nodes, a static quorum in ``controller.quorum.voters``, ``StorageTool format
--cluster-id --config``), because that setup is accepted unchanged by all of them. What does
differ is decided here from the version number alone, so no environment variable is needed:

* **Logging.** 3.x logs through Log4j 1 (reload4j, SLF4J binding ``slf4j-reload4j``, config
  in ``log4j.properties`` given with ``-Dlog4j.configuration``); 4.x through Log4j 2
  (binding ``log4j-slf4j-impl``, ``-Dlog4j2.configurationFile``). Neither binding is a
  transitive Maven dependency of ``kafka_2.13``: the release tarballs add it by hand.
* **Log4j 2 version.** Read from the release's ``kafka-server`` POM (4.1+ names it); 4.0.x's
  POM names none, and nothing else on its classpath brings Log4j 2, so
  :data:`FALLBACK_LOG4J2_VERSION` is used.
* **Tools.** ``kafka-tools`` (TopicCommand, ConsoleConsumer, the perf tools) is fetched with
  a 4.x broker when Maven Central has it; 3.x brokers and 4.x releases whose ``kafka-tools``
  is missing (4.2.2, 4.4.0) run the tools from :data:`TOOLS_VERSION` instead. The tools are
  clients, and a 4.x client speaks to every broker from 2.1 on.
* **Broker settings.** The share-coordinator settings exist from 4.0 on; they are left out
  for 3.x (which would only warn about unknown settings).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from aiokprod.testing.errors import LocalKafkaError

OLDEST_SUPPORTED = (3, 6)
"""The oldest release line the runner starts (see ``docs/compatibility.md`` for why)."""

NEWEST_VERSION = "4.4.0"
"""The newest Apache Kafka release whose broker Maven Central serves completely."""

TOOLS_VERSION = "4.3.1"
"""The newest release whose ``kafka-tools`` jar Maven Central serves; tools fall back to it."""

TESTED_VERSIONS: tuple[str, ...] = (
    "3.6.2",
    "3.7.2",
    "3.8.1",
    "3.9.2",
    "4.0.2",
    "4.1.2",
    "4.2.2",
    "4.3.1",
    "4.4.0",
)
"""The newest patch release of every supported minor line: the version matrix."""

SMOKE_VERSIONS: tuple[str, ...] = ("3.9.2", "4.0.2", NEWEST_VERSION)
"""The bounded subset that ``make test`` (and so CI) runs on every change."""

FALLBACK_LOG4J2_VERSION = "2.25.3"
"""Log4j 2 for releases whose POM names none (4.0.x); the version 4.1.2's POM names."""

SLF4J_VERSION = "1.7.36"
"""The SLF4J API every 3.x and 4.x release depends on (so the reload4j binding matches it)."""

RELOAD4J_VERSION = "1.2.25"
"""reload4j (Log4j 1) for 3.x brokers; the version 3.6's ``kafka-tools`` POM names."""

Logging = Literal["log4j2", "reload4j"]

_VERSION_RE = re.compile(r"^([0-9]+)\.([0-9]+)(?:\.([0-9]+))?(?:[.-][A-Za-z0-9.-]+)?$")


@dataclass(frozen=True)
class MavenArtifact:
    """One ``groupId:artifactId:version`` of the generated POM."""

    group: str
    artifact: str
    version: str

    @property
    def jar_name(self) -> str:
        """The file name ``copy-dependencies`` gives its jar."""
        return f"{self.artifact}-{self.version}.jar"


@dataclass(frozen=True)
class KafkaRelease:
    """How one Apache Kafka release is fetched and run.

    Attributes:
        version: e.g. ``"3.9.2"``.
        numbers: ``(major, minor, patch)``.
    """

    version: str
    numbers: tuple[int, int, int]

    @property
    def logging(self) -> Logging:
        """``"reload4j"`` (Log4j 1) for 3.x, ``"log4j2"`` from 4.0 on."""
        return "reload4j" if self.numbers[0] < 4 else "log4j2"

    @property
    def wants_tools(self) -> bool:
        """Whether ``kafka-tools`` of this very release is fetched when available (4.x)."""
        return self.numbers[0] >= 4

    @property
    def has_share_coordinator(self) -> bool:
        """Whether the broker knows the ``share.coordinator.*`` settings (4.0+)."""
        return self.numbers[0] >= 4

    @property
    def probe_artifact(self) -> str:
        """The artifact whose POM is read first: it tells whether the release exists.

        4.x: ``kafka-server``, whose POM also names the Log4j 2 version; 3.x: ``kafka_2.13``.
        """
        return "kafka-server" if self.wants_tools else "kafka_2.13"

    def logging_artifacts(self, log4j2_version: str | None) -> list[MavenArtifact]:
        """The logging backend and SLF4J binding to add to the POM.

        Args:
            log4j2_version: the Log4j 2 version (4.x only; ignored for 3.x).
        """
        if self.logging == "reload4j":
            return [
                MavenArtifact("org.slf4j", "slf4j-reload4j", SLF4J_VERSION),
                MavenArtifact("ch.qos.reload4j", "reload4j", RELOAD4J_VERSION),
            ]
        version = log4j2_version or FALLBACK_LOG4J2_VERSION
        group = "org.apache.logging.log4j"
        return [
            MavenArtifact(group, "log4j-slf4j-impl", version),
            MavenArtifact(group, "log4j-core", version),
            MavenArtifact(group, "log4j-api", version),
        ]

    def logging_version(self, log4j2_version: str | None) -> str:
        """The version of the logging backend: reload4j's for 3.x, Log4j 2's for 4.x."""
        if self.logging == "reload4j":
            return RELOAD4J_VERSION
        return log4j2_version or FALLBACK_LOG4J2_VERSION


def parse_version(version: str) -> tuple[int, int, int]:
    """``"3.9.2"`` -> ``(3, 9, 2)``; a suffix (``-rc1``) is ignored, a missing patch is 0.

    Raises:
        LocalKafkaError: not a Kafka version number.
    """
    match = _VERSION_RE.match(version.strip())
    if match is None:
        raise LocalKafkaError(f"{version!r} is not a Kafka version such as 4.3.1")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def kafka_release(version: str) -> KafkaRelease:
    """The :class:`KafkaRelease` of ``version``.

    Raises:
        LocalKafkaError: not a version, or older than :data:`OLDEST_SUPPORTED`.
    """
    numbers = parse_version(version)
    if numbers[:2] < OLDEST_SUPPORTED:
        oldest = ".".join(map(str, OLDEST_SUPPORTED))
        raise LocalKafkaError(
            f"Apache Kafka {version} is older than {oldest}, the oldest release this runner "
            f"starts (KRaft-only setup; see docs/compatibility.md)"
        )
    return KafkaRelease(version=version, numbers=numbers)
