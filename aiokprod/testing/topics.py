"""Create and delete topics on the local cluster, and wait until the change is visible.

Two separate concerns:

* *Issuing* the change is behind the small :class:`TopicAdmin` protocol. For now the only
  implementation, :class:`JavaTopicAdmin`, runs Kafka's own ``TopicCommand`` in a JVM (slow to
  start, but it is the reference behaviour); a wire-protocol implementation (CreateTopics /
  DeleteTopics requests) can replace it without touching callers.
* *Waiting* until every running broker's metadata shows the result uses the plain-socket
  Metadata client (:mod:`aiokprod.testing.metadata`): ``TopicCommand --create`` returns when
  the controller has accepted the topic, which is before every broker knows its leaders.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from aiokprod.testing.config import NodeAddress
from aiokprod.testing.errors import LocalKafkaError, error_with_output
from aiokprod.testing.metadata import UNKNOWN_TOPIC_OR_PARTITION, TopicInfo, fetch_metadata

TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
_TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class ToolRunner(Protocol):
    """Runs a Java main class from the Kafka jars (``LocalKafka.run_java_tool``)."""

    def __call__(
        self, main_class: str, *args: str, timeout: float = ...
    ) -> subprocess.CompletedProcess[str]:
        """Run ``main_class`` with ``args`` and return its captured output."""
        ...


class TopicAdmin(Protocol):
    """Issues topic changes; returns once the controller accepted them."""

    def create(
        self,
        bootstrap: str,
        name: str,
        partitions: int,
        replication_factor: int,
        config: Mapping[str, str],
        *,
        timeout: float,
    ) -> None:
        """Create a topic; raise ``LocalKafkaError`` if the cluster refuses."""
        ...

    def delete(self, bootstrap: str, name: str, *, timeout: float) -> None:
        """Delete a topic; raise ``LocalKafkaError`` if the cluster refuses."""
        ...


class JavaTopicAdmin:
    """:class:`TopicAdmin` backed by ``org.apache.kafka.tools.TopicCommand``.

    Args:
        run_tool: runs a Java main class from the same jars as the broker.
    """

    def __init__(self, run_tool: ToolRunner) -> None:
        self._run_tool = run_tool

    def create(
        self,
        bootstrap: str,
        name: str,
        partitions: int,
        replication_factor: int,
        config: Mapping[str, str],
        *,
        timeout: float,
    ) -> None:
        """Run ``TopicCommand --create``."""
        args = [
            "--bootstrap-server",
            bootstrap,
            "--create",
            "--topic",
            name,
            "--partitions",
            str(partitions),
            "--replication-factor",
            str(replication_factor),
        ]
        for key, value in config.items():
            args += ["--config", f"{key}={value}"]
        self._check(
            self._run_tool(TOPIC_COMMAND, *args, timeout=timeout), f"creating topic {name!r}"
        )

    def delete(self, bootstrap: str, name: str, *, timeout: float) -> None:
        """Run ``TopicCommand --delete``."""
        args = ["--bootstrap-server", bootstrap, "--delete", "--topic", name]
        self._check(
            self._run_tool(TOPIC_COMMAND, *args, timeout=timeout), f"deleting topic {name!r}"
        )

    @staticmethod
    def _check(done: subprocess.CompletedProcess[str], what: str) -> None:
        # TopicCommand prints "Error while executing topic command" and exits 1 on failure;
        # the reason (e.g. TopicExistsException) is in its output.
        if done.returncode != 0:
            raise error_with_output(
                f"{what} failed: TopicCommand exited with code {done.returncode}",
                done.stdout + done.stderr,
            )


def validate_topic(name: str, partitions: int, replication_factor: int) -> None:
    """Reject impossible topic parameters before starting a JVM.

    Raises:
        ValueError: bad name (Kafka allows ``[a-zA-Z0-9._-]``, 1 to 249 characters, not
            ``.`` or ``..``), or a non-positive count.
    """
    if not _TOPIC_NAME_RE.match(name) or name in (".", ".."):
        raise ValueError(f"invalid Kafka topic name {name!r}")
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    if replication_factor < 1:
        raise ValueError(f"replication_factor must be at least 1, got {replication_factor}")


def wait_for_topic(
    brokers: Sequence[NodeAddress],
    name: str,
    *,
    partitions: int,
    replication_factor: int | None = None,
    timeout: float = 30.0,
    poll_interval: float = 0.1,
) -> TopicInfo:
    """Wait until every broker in ``brokers`` reports ``name`` with a leader per partition.

    Args:
        brokers: the running nodes to ask (each keeps its own metadata cache).
        name: the topic.
        partitions: the expected partition count.
        replication_factor: if given, also require this many replicas per partition.
        timeout: seconds to wait.
        poll_interval: pause between rounds.

    Returns:
        The topic as the last broker reported it.

    Raises:
        LocalKafkaError: not visible everywhere in time (the message says what was seen).
    """
    deadline = time.monotonic() + timeout
    last_seen = "no answer yet"
    while True:
        info: TopicInfo | None = None
        for broker in brokers:
            try:
                metadata = fetch_metadata(broker.host, broker.port, [name], timeout=5.0)
            except LocalKafkaError as exc:
                last_seen = f"node {broker.node_id}: {exc}"
                break
            info = metadata.topics.get(name)
            if (
                info is None
                or not info.fully_led(partitions)
                or not _has_replicas(info, replication_factor)
            ):
                last_seen = f"node {broker.node_id}: {info}"
                info = None
                break
        if info is not None:
            return info
        if time.monotonic() >= deadline:
            raise LocalKafkaError(
                f"topic {name!r} did not get leaders for {partitions} partition(s) on every "
                f"running node within {timeout:.0f} s; last seen: {last_seen}"
            )
        time.sleep(poll_interval)


def wait_for_topic_absent(
    brokers: Sequence[NodeAddress],
    name: str,
    *,
    timeout: float = 30.0,
    poll_interval: float = 0.1,
) -> None:
    """Wait until every broker answers ``UNKNOWN_TOPIC_OR_PARTITION`` for ``name``.

    Raises:
        LocalKafkaError: the topic is still visible somewhere after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        remaining = []
        for broker in brokers:
            try:
                metadata = fetch_metadata(broker.host, broker.port, [name], timeout=5.0)
            except LocalKafkaError:
                remaining.append(broker.node_id)
                continue
            info = metadata.topics.get(name)
            if info is not None and info.error_code != UNKNOWN_TOPIC_OR_PARTITION:
                remaining.append(broker.node_id)
        if not remaining:
            return
        if time.monotonic() >= deadline:
            raise LocalKafkaError(
                f"topic {name!r} was still visible on node(s) {remaining} {timeout:.0f} s "
                f"after its deletion"
            )
        time.sleep(poll_interval)


def _has_replicas(info: TopicInfo, replication_factor: int | None) -> bool:
    if replication_factor is None:
        return True
    return all(len(p.replicas) == replication_factor for p in info.partitions)
