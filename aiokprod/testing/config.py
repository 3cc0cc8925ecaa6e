"""Render the files a node needs: ``server.properties`` and the Log4j 2 configurations.

Pure functions only (no I/O), so they are unit-tested without Java.

Every node runs in KRaft *combined* mode (``process.roles=broker,controller``) with a
*static* quorum (``controller.quorum.voters``): the simplest setup that works the same for
one and for three nodes, and the one ``StorageTool format`` accepts without quorum flags.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

STARTED_MESSAGE = "Kafka Server started"
"""What a node logs once it is serving (``KafkaBroker.STARTED_MESSAGE``)."""

# Explicit: the implicit CONTROLLER mapping is only added when no SSL/SASL listener exists.
_SECURITY_PROTOCOL_MAP = ",".join(
    [
        "CONTROLLER:PLAINTEXT",
        "PLAINTEXT:PLAINTEXT",
        "SSL:SSL",
        "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "SASL_SSL:SASL_SSL",
    ]
)


@dataclass(frozen=True)
class NodeAddress:
    """Where one node listens.

    Attributes:
        node_id: the KRaft ``node.id`` (1, 2, 3, ...).
        host: always a loopback address.
        port: the PLAINTEXT client port.
        controller_port: the KRaft controller port.
    """

    node_id: int
    host: str
    port: int
    controller_port: int

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the client listener."""
        return f"{self.host}:{self.port}"

    @property
    def voter(self) -> str:
        """This node's entry in ``controller.quorum.voters``: ``id@host:port``."""
        return f"{self.node_id}@{self.host}:{self.controller_port}"


def new_cluster_id() -> str:
    """A random KRaft cluster id: 16 random bytes as URL-safe base64 without padding.

    Same rules as Java's ``Uuid.randomUuid()``: never starts with ``-`` (it would look like a
    command-line flag) and is never one of the two reserved ids (all zeros, zeros then 1).
    Generating it here saves a JVM start of ``StorageTool random-uuid``.
    """
    while True:
        raw = os.urandom(16)
        if raw in (bytes(16), bytes(15) + b"\x01"):
            continue
        text = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


def broker_properties(
    node: NodeAddress,
    voters: Sequence[NodeAddress],
    data_dir: Path,
    overrides: Mapping[str, str] | None = None,
    *,
    share_coordinator: bool = True,
) -> dict[str, str]:
    """The ``server.properties`` entries of one combined broker+controller node.

    Replication defaults follow the cluster size: with one node every internal topic has
    replication factor 1 (the defaults of 3 would leave the group and transaction
    coordinators unavailable forever); with three or more, internal and auto-created topics
    get replication factor 3 and ``min.insync.replicas=2``, so tests can provoke
    ``NOT_ENOUGH_REPLICAS`` by stopping two nodes.

    Args:
        node: this node's addresses.
        voters: every node of the cluster, this one included.
        data_dir: absolute path of this node's ``log.dirs`` (also holds the KRaft metadata).
        overrides: entries that replace or extend the defaults, e.g.
            ``{"auto.create.topics.enable": "false"}``.
        share_coordinator: include the ``share.coordinator.*`` settings (Kafka 4.0+; a 3.x
            broker does not know them).
    """
    replicated = len(voters) >= 3
    rf = "3" if replicated else "1"
    min_isr = "2" if replicated else "1"
    props: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": ",".join(v.voter for v in voters),
        "listeners": f"PLAINTEXT://{node.host}:{node.port},CONTROLLER://{node.host}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{node.host}:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": _SECURITY_PROTOCOL_MAP,
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "default.replication.factor": rf,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min_isr,
        # 50 partitions each (the defaults) make the first consumer group or transaction of
        # a test run wait for 50 (x3) replicas to be created; 5 is plenty on a laptop.
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.num.partitions": "5",
        # Consumers used for read-back join their group at once instead of after 3 s.
        "group.initial.rebalance.delay.ms": "0",
    }
    if share_coordinator:
        props["share.coordinator.state.topic.replication.factor"] = rf
        props["share.coordinator.state.topic.min.isr"] = min_isr
        props["share.coordinator.state.topic.num.partitions"] = "5"
    if overrides:
        props.update(overrides)
    return props


def render_properties(props: Mapping[str, str], header: str | None = None) -> str:
    """Serialise entries in Java ``.properties`` syntax, one ``key=value`` per line.

    Kafka reads the file as ISO-8859-1 and unescapes backslashes, so backslashes, line
    breaks, leading blanks and non-ASCII characters are escaped; a value may then contain
    anything (JAAS configurations, Windows paths, ``#``).

    Raises:
        ValueError: a key is empty.
    """
    lines = [f"# {line}" for line in (header or "").splitlines()]
    for key, value in props.items():
        if not key:
            raise ValueError("a properties key must not be empty")
        lines.append(f"{_escape(key, is_key=True)}={_escape(value, is_key=False)}")
    return "\n".join(lines) + "\n"


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def _escape(text: str, *, is_key: bool) -> str:
    out: list[str] = []
    for index, char in enumerate(text):
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char == " " and (is_key or index == 0):
            # Java strips leading blanks of a value and ends a key at a blank.
            out.append("\\ ")
        elif is_key and char in "=:#!":
            out.append("\\" + char)
        elif not " " <= char <= "~":
            out.extend(f"\\u{unit:04x}" for unit in _utf16_units(char))
        else:
            out.append(char)
    return "".join(out)


def _utf16_units(char: str) -> list[int]:
    data = char.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def broker_log4j2_properties() -> str:
    """Log4j 2 configuration of a node: INFO to stdout, which the runner sends to a file.

    Console rather than a File appender because the runner redirects the JVM's stdout and
    stderr into the node's log file anyway: then one file holds the broker log *and* what
    the JVM prints before Log4j exists (bad flags, missing classes, fatal errors).
    """
    return "\n".join(
        [
            "# Generated by aiokprod.testing (Log4j 2 properties syntax).",
            "status = warn",
            "appender.out.type = Console",
            "appender.out.name = STDOUT",
            "appender.out.layout.type = PatternLayout",
            "appender.out.layout.pattern = [%d] %p %m (%c)%n",
            "rootLogger.level = INFO",
            "rootLogger.appenderRef.out.ref = STDOUT",
            "logger.kafka.name = kafka",
            "logger.kafka.level = INFO",
            "logger.apache.name = org.apache.kafka",
            "logger.apache.level = INFO",
            "logger.request.name = kafka.request.logger",
            "logger.request.level = WARN",
            "",
        ]
    )


def tools_log4j2_properties() -> str:
    """Log4j 2 configuration of the Java tools: WARN and above to stderr.

    Keeps stdout for the tool's own output (topic listings, consumed records, perf lines).
    """
    return "\n".join(
        [
            "# Generated by aiokprod.testing (Log4j 2 properties syntax).",
            "status = warn",
            "appender.err.type = Console",
            "appender.err.name = STDERR",
            "appender.err.target = SYSTEM_ERR",
            "appender.err.layout.type = PatternLayout",
            "appender.err.layout.pattern = [%d] %p %m (%c)%n",
            "rootLogger.level = WARN",
            "rootLogger.appenderRef.err.ref = STDERR",
            "",
        ]
    )


def broker_log4j1_properties() -> str:
    """Log4j 1 (reload4j) configuration of a 3.x node: the same output as the Log4j 2 one."""
    return "\n".join(
        [
            "# Generated by aiokprod.testing (Log4j 1 / reload4j syntax, Kafka 3.x).",
            "log4j.rootLogger=INFO, stdout",
            "log4j.appender.stdout=org.apache.log4j.ConsoleAppender",
            "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n",
            "log4j.logger.kafka=INFO",
            "log4j.logger.org.apache.kafka=INFO",
            "log4j.logger.kafka.request.logger=WARN",
            "",
        ]
    )


def tools_log4j1_properties() -> str:
    """Log4j 1 (reload4j) configuration of 3.x tools: WARN and above to stderr."""
    return "\n".join(
        [
            "# Generated by aiokprod.testing (Log4j 1 / reload4j syntax, Kafka 3.x).",
            "log4j.rootLogger=WARN, stderr",
            "log4j.appender.stderr=org.apache.log4j.ConsoleAppender",
            "log4j.appender.stderr.Target=System.err",
            "log4j.appender.stderr.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n",
            "",
        ]
    )


def logging_jvm_flag(logging: str, config_file: Path) -> str:
    """The system property that points a Kafka JVM at its logging configuration.

    ``-Dlog4j2.configurationFile=PATH`` for Log4j 2 (4.x), ``-Dlog4j.configuration=file:PATH``
    for Log4j 1 / reload4j (3.x), which wants a URL.
    """
    if logging == "reload4j":
        return f"-Dlog4j.configuration={config_file.resolve().as_uri()}"
    return f"-Dlog4j2.configurationFile={config_file}"
