"""A local Apache Kafka for tests, demos and benchmarks: jars from Maven Central, KRaft on loopback.

Nothing here is part of the producer client; it is the harness the client is tested against.

* :class:`LocalKafka` starts one node (or three) and tears it down again.
* :func:`ensure_distribution` fetches the Kafka jars once into ``~/.cache/aiokprod``.
* ``python -m aiokprod.testing run|exec|fetch|classpath`` is the command-line front end.
* ``aiokprod.testing.pytest_plugin`` provides the ``kafka``, ``kafka_cluster``,
  ``new_topic`` and ``new_cluster_topic`` fixtures.
* :class:`TcpForwarder` is one switchable address (a load balancer); with it,
  :class:`ClusterReplacement` replaces a cluster by another behind one bootstrap address.

See ``docs/local-kafka.md``.
"""

from __future__ import annotations

from aiokprod.testing.cluster import LocalKafka
from aiokprod.testing.config import NodeAddress
from aiokprod.testing.distribution import (
    DEFAULT_KAFKA_VERSION,
    KafkaDistribution,
    ensure_distribution,
    kafka_version,
)
from aiokprod.testing.errors import LocalKafkaError
from aiokprod.testing.forwarder import TcpForwarder
from aiokprod.testing.java import run_java_tool
from aiokprod.testing.metadata import ClusterMetadata, TopicInfo, fetch_metadata
from aiokprod.testing.replacement import ClusterReplacement


def kafka_classpath(version: str | None = None) -> str:
    """The classpath (``/…/lib/*``) of the Kafka jars, downloading them if needed.

    Raises:
        LocalKafkaError: the jars cannot be fetched.
    """
    return ensure_distribution(version).classpath


__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "ClusterMetadata",
    "ClusterReplacement",
    "KafkaDistribution",
    "LocalKafka",
    "LocalKafkaError",
    "NodeAddress",
    "TcpForwarder",
    "TopicInfo",
    "ensure_distribution",
    "fetch_metadata",
    "kafka_classpath",
    "kafka_version",
    "run_java_tool",
]
