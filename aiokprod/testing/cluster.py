"""``LocalKafka``: a real Apache Kafka (KRaft) of one or three nodes on 127.0.0.1.

Usage::

    with LocalKafka() as kafka:                 # one node
        kafka.create_topic("orders", partitions=3)
        produce_somehow(kafka.bootstrap_servers)

    cluster = LocalKafka(nodes=3).start()       # three nodes, RF 3, min.insync.replicas=2
    try:
        cluster.kill_node(2)                    # crash one broker
        cluster.start_node(2)                   # and bring it back with its data
    finally:
        cluster.stop()

Every node runs in combined broker+controller mode with a static quorum, on free loopback
ports, with its data in a fresh temporary folder that :meth:`LocalKafka.stop` deletes.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from aiokprod.testing import reaper
from aiokprod.testing.config import NodeAddress, new_cluster_id
from aiokprod.testing.distribution import (
    KafkaDistribution,
    ensure_distribution,
    ensure_tools_distribution,
)
from aiokprod.testing.errors import LocalKafkaError
from aiokprod.testing.java import default_jvm_flags, find_java, run_java_tool
from aiokprod.testing.metadata import ClusterMetadata, TopicInfo, fetch_metadata
from aiokprod.testing.node import KafkaNode
from aiokprod.testing.ports import port_is_free
from aiokprod.testing.security import SASL_USERS, SECURITY_LISTENERS, scram_format_args
from aiokprod.testing.startup import (
    PortClashError,
    format_all,
    make_nodes,
    pick_addresses,
    start_nodes,
    stop_node_processes,
    wait_registered,
)
from aiokprod.testing.tls import TestPki, make_test_pki
from aiokprod.testing.topics import (
    JavaTopicAdmin,
    TopicAdmin,
    validate_topic,
    wait_for_topic,
    wait_for_topic_absent,
)

DEFAULT_STARTUP_TIMEOUT = 90.0
_PORT_ATTEMPTS = 3


class LocalKafka:
    """A local Apache Kafka cluster of ``nodes`` combined broker+controller JVMs.

    Args:
        nodes: 1 (default) or more; 3 gives a replicated cluster (RF 3 defaults,
            ``min.insync.replicas=2``).
        broker_config: ``server.properties`` entries applied to every node on top of the
            defaults, e.g. ``{"auto.create.topics.enable": "false"}``.
        version: Kafka version, any release from 3.6 to the newest 4.x (see
            :mod:`aiokprod.testing.releases`); default ``AIOKPROD_KAFKA_VERSION``, else
            :data:`~aiokprod.testing.distribution.DEFAULT_KAFKA_VERSION`.
        startup_timeout: seconds to wait for every node to be ready.
        heap_min: ``-Xms`` of each node.
        heap_max: ``-Xmx`` of each node.
        work_dir: parent of the temporary data folder (default: the system temp folder).
        keep_data: keep the data folder (logs included) after :meth:`stop`, for debugging.
        security: also open the SSL, MTLS (mutual TLS), SASL_PLAINTEXT and SASL_SSL listeners
            of :mod:`aiokprod.testing.security`, with a generated test CA (see
            :attr:`ca_file`, :attr:`pki`), PLAIN and SCRAM users (:attr:`sasl_users`) and
            OAUTHBEARER with Kafka's unsecured token validator. Needs ``cryptography``.
        jvm_args: more JVM flags for every node (system properties such as
            ``-Djava.security.krb5.conf=...``), kept across :meth:`start_node`.
        env: environment variables added to every node's JVM, kept across restarts.
        port: the client port of node 1 on 127.0.0.1 (``python -m aiokprod.testing run``
            uses 9092 when it is free); default: a free port, as for every other port.
        extra_classpath: folders or jars on every node's classpath after Kafka's jars: broker
            plugins (a ``metric.reporters`` class set in ``broker_config``, e.g. the client
            telemetry recorder of :mod:`aiokprod.testing.telemetry_plugin`).
    """

    def __init__(
        self,
        nodes: int = 1,
        *,
        broker_config: Mapping[str, str] | None = None,
        version: str | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        heap_min: str = "256m",
        heap_max: str = "512m",
        work_dir: str | Path | None = None,
        keep_data: bool = False,
        security: bool = False,
        jvm_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        extra_classpath: Sequence[str | Path] = (),
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {nodes}")
        self.port = port
        self.node_count = nodes
        self.broker_config = dict(broker_config or {})
        self.version = version
        self.startup_timeout = startup_timeout
        self.heap_min = heap_min
        self.heap_max = heap_max
        self.work_dir = Path(work_dir) if work_dir is not None else None
        self.keep_data = keep_data
        self.security = security
        self.jvm_args = tuple(jvm_args)
        self.env = dict(env or {})
        self.extra_classpath = [str(entry) for entry in extra_classpath]
        self.sasl_users: dict[str, str] = dict(SASL_USERS) if security else {}
        """PLAIN and SCRAM users (name -> password) when ``security`` is on."""
        self._pki: TestPki | None = None
        self._security_ports: dict[int, dict[str, int]] = {}
        self.topic_admin: TopicAdmin = JavaTopicAdmin(self.run_java_tool)
        self._dist: KafkaDistribution | None = None
        self._tools_dist: KafkaDistribution | None = None
        self._dir: Path | None = None
        self._nodes: dict[int, KafkaNode] = {}
        self.startup_seconds: float | None = None
        """Wall time of the last :meth:`start`, from format to ready (after any download)."""

    # --- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Fetch the jars if needed, format and start every node, wait until all are ready.

        Raises:
            LocalKafkaError: Java or Maven missing, download failed, or a node did not become
                ready within ``startup_timeout`` (the message ends with its log tail). Every
                process started so far is stopped before raising.
        """
        if self._nodes:
            raise LocalKafkaError("this LocalKafka is already started")
        if self.port is not None and not port_is_free(self.port):
            raise LocalKafkaError(f"port {self.port} of 127.0.0.1 is in use (another Kafka?)")
        self._dist = ensure_distribution(self.version)
        find_java()
        self._dir = Path(tempfile.mkdtemp(prefix="aiokprod-kafka-", dir=self.work_dir))
        if not self.keep_data:
            reaper.add_cleanup(self, self._remove_data)
        began = time.monotonic()
        try:
            for attempt in range(1, _PORT_ATTEMPTS + 1):
                try:
                    self._start_once(self._dist, self._dir)
                    break
                except PortClashError:
                    stop_node_processes(self._nodes.values())
                    if attempt == _PORT_ATTEMPTS:
                        raise
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Stop every JVM this object started (in parallel), then delete the data folder.

        Safe to call more than once and on a cluster that failed to start.
        """
        stop_node_processes(self._nodes.values())
        self._nodes = {}
        reaper.remove_cleanup(self)
        if not self.keep_data:
            self._remove_data()

    @property
    def is_running(self) -> bool:
        """Whether at least one node is running."""
        return any(node.is_running for node in self._nodes.values())

    # --- addresses -------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:p1,127.0.0.1:p2,...``: the client listener of every node."""
        return ",".join(address.bootstrap for address in self.nodes.values())

    def listener_bootstrap(self, listener: str) -> str:
        """``host:port,...`` of one listener on every node.

        ``listener`` is ``SSL``, ``MTLS``, ``SASL_PLAINTEXT`` or ``SASL_SSL``; ``PLAINTEXT``
        gives :attr:`bootstrap_servers`.

        Raises:
            LocalKafkaError: not started with ``security=True``, or an unknown listener.
        """
        self._require_started()
        if listener == "PLAINTEXT":
            return self.bootstrap_servers
        if not self.security:
            raise LocalKafkaError("secure listeners need LocalKafka(security=True)")
        if listener not in SECURITY_LISTENERS:
            raise LocalKafkaError(f"no listener {listener!r}; have {SECURITY_LISTENERS}")
        return ",".join(
            f"{self._nodes[i].address.host}:{ports[listener]}"
            for i, ports in sorted(self._security_ports.items())
        )

    @property
    def security_listeners(self) -> dict[str, str]:
        """Listener name -> bootstrap string, for every secure listener."""
        return {name: self.listener_bootstrap(name) for name in SECURITY_LISTENERS}

    @property
    def pki(self) -> TestPki:
        """The generated test certificates (``security=True`` only)."""
        if self._pki is None:
            raise LocalKafkaError("no test PKI: start LocalKafka(security=True) first")
        return self._pki

    @property
    def ca_file(self) -> Path:
        """The test CA that signed the brokers' certificates (trust it to connect over TLS)."""
        return self.pki.ca_file

    @property
    def nodes(self) -> dict[int, NodeAddress]:
        """Node id → addresses, for every node (running or not)."""
        self._require_started()
        return {node_id: node.address for node_id, node in self._nodes.items()}

    @property
    def running_node_ids(self) -> list[int]:
        """Ids of the nodes whose JVM is alive."""
        return [node_id for node_id, node in self._nodes.items() if node.is_running]

    @property
    def data_dir(self) -> Path:
        """The temporary folder holding every node's files."""
        if self._dir is None:
            raise LocalKafkaError("this LocalKafka has not been started")
        return self._dir

    @property
    def distribution(self) -> KafkaDistribution:
        """The jars this cluster runs (available after :meth:`start`)."""
        if self._dist is None:
            raise LocalKafkaError("this LocalKafka has not been started")
        return self._dist

    @property
    def tools_distribution(self) -> KafkaDistribution:
        """The jars :meth:`run_java_tool` (and so topic creation) uses.

        :attr:`distribution` when it has ``kafka-tools``, else the newest release that does
        (fetched on first use).
        """
        if self._tools_dist is None:
            self._tools_dist = ensure_tools_distribution(self.distribution)
        return self._tools_dist

    @property
    def kafka_version(self) -> str:
        """The Apache Kafka version the nodes run (available after :meth:`start`)."""
        return self.distribution.version

    @property
    def classpath(self) -> str:
        """The Java classpath of the broker's Kafka jars (``kafka-clients`` included)."""
        return self.distribution.classpath

    # --- single nodes ----------------------------------------------------------------------

    def node(self, node_id: int) -> KafkaNode:
        """The :class:`KafkaNode` with this id (for its PID, paths and process)."""
        self._require_started()
        try:
            return self._nodes[node_id]
        except KeyError:
            raise LocalKafkaError(f"no node {node_id}; nodes are {sorted(self._nodes)}") from None

    def stop_node(self, node_id: int, timeout: float = 60.0) -> int | None:
        """Stop one node cleanly (SIGTERM, controlled shutdown) and wait for it.

        Returns:
            Its exit code, or None if it was not running.
        """
        return self.node(node_id).stop(timeout)

    def kill_node(self, node_id: int) -> int | None:
        """Kill one node with SIGKILL, as a crash would (for failure tests).

        Returns:
            Its exit code (-9), or None if it was not running.
        """
        return self.node(node_id).kill()

    def start_node(self, node_id: int, timeout: float | None = None) -> None:
        """Restart a stopped or killed node with its existing data and wait until it is ready.

        Raises:
            LocalKafkaError: it is running already or did not become ready in time.
        """
        node = self.node(node_id)
        node.start()
        deadline = time.monotonic() + (timeout if timeout is not None else self.startup_timeout)
        node.wait_ready(deadline)
        wait_registered(self._nodes, deadline)

    def log_tail(self, node_id: int, lines: int = 40) -> str:
        """The last ``lines`` lines of one node's log."""
        return self.node(node_id).log_tail(lines)

    def log_path(self, node_id: int) -> Path:
        """The file holding one node's log."""
        return self.node(node_id).log_path

    # --- metadata and topics ---------------------------------------------------------------

    def metadata(
        self, topics: list[str] | None = None, node_id: int | None = None
    ) -> ClusterMetadata:
        """Ask a running node (the first one unless ``node_id`` is given) for metadata.

        Args:
            topics: topic names, or None for every topic; never auto-creates topics.
            node_id: the node to ask.
        """
        ids = [node_id] if node_id is not None else self.running_node_ids
        if not ids:
            raise LocalKafkaError("no node is running")
        address = self.node(ids[0]).address
        return fetch_metadata(address.host, address.port, topics)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
        *,
        timeout: float = 60.0,
    ) -> TopicInfo:
        """Create a topic and wait until every running node knows a leader per partition.

        Args:
            name: topic name.
            partitions: partition count.
            replication_factor: replicas per partition (at most the number of nodes).
            config: topic-level configs, e.g. ``{"min.insync.replicas": "3"}``.
            timeout: seconds for the creation and, separately, for the wait.

        Returns:
            The topic's metadata once it is usable.

        Raises:
            ValueError: impossible arguments.
            LocalKafkaError: the cluster refused (e.g. the topic exists) or timed out.
        """
        validate_topic(name, partitions, replication_factor)
        self.topic_admin.create(
            self._running_bootstrap(),
            name,
            partitions,
            replication_factor,
            dict(config or {}),
            timeout=timeout,
        )
        return wait_for_topic(
            self._running_addresses(),
            name,
            partitions=partitions,
            replication_factor=replication_factor,
            timeout=timeout,
        )

    def delete_topic(self, name: str, *, timeout: float = 60.0) -> None:
        """Delete a topic and wait until no running node reports it any more.

        Raises:
            LocalKafkaError: the cluster refused (e.g. no such topic) or timed out.
        """
        self.topic_admin.delete(self._running_bootstrap(), name, timeout=timeout)
        wait_for_topic_absent(self._running_addresses(), name, timeout=timeout)

    def run_java_tool(
        self,
        main_class: str,
        *args: str,
        timeout: float = 120.0,
        input: str | None = None,
        jvm_flags: tuple[str, ...] | None = None,
        extra_jvm_flags: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a Java main class from :attr:`tools_distribution`; logging goes to stderr.

        Example::

            kafka.run_java_tool(
                "org.apache.kafka.tools.consumer.ConsoleConsumer",
                "--bootstrap-server", kafka.bootstrap_servers, "--topic", "t",
                "--from-beginning", "--max-messages", "3", "--timeout-ms", "10000",
            )

        The exit code is not checked. Raises ``LocalKafkaError`` if it runs over ``timeout``.
        Perf tools (``ProducerPerformance``...) get full-JIT flags unless ``jvm_flags`` says
        otherwise; see :func:`aiokprod.testing.java.default_jvm_flags`. ``extra_jvm_flags``
        are added to those (system properties), ``env`` to the tool's environment.
        """
        flags = jvm_flags if jvm_flags is not None else default_jvm_flags(main_class)
        return run_java_tool(
            self.tools_distribution,
            main_class,
            *args,
            timeout=timeout,
            input=input,
            jvm_flags=(*flags, *extra_jvm_flags),
            env=env,
        )

    # --- internals -------------------------------------------------------------------------

    def _require_started(self) -> None:
        if not self._nodes:
            raise LocalKafkaError("this LocalKafka has not been started (or was stopped)")

    def _running_addresses(self) -> list[NodeAddress]:
        addresses = [self._nodes[i].address for i in self.running_node_ids]
        if not addresses:
            raise LocalKafkaError("no node is running")
        return addresses

    def _running_bootstrap(self) -> str:
        return ",".join(a.bootstrap for a in self._running_addresses())

    def _start_once(self, dist: KafkaDistribution, root: Path) -> None:
        addresses, self._security_ports = pick_addresses(self.node_count, self.security, self.port)
        if self.security and (self._pki is None or not self._pki.ca_file.exists()):
            self._pki = make_test_pki(root / "tls")
        cluster_id = new_cluster_id()
        self._nodes = {}
        self._nodes = make_nodes(
            dist,
            root,
            addresses,
            broker_config=self.broker_config,
            pki=self._pki,
            security_ports=self._security_ports,
            sasl_users=self.sasl_users,
            heap_min=self.heap_min,
            heap_max=self.heap_max,
            jvm_args=self.jvm_args,
            env=self.env,
            extra_classpath=self.extra_classpath,
        )
        format_all(
            list(self._nodes.values()),
            cluster_id,
            scram_format_args(self.sasl_users) if self.security else [],
        )
        start_nodes(self._nodes, self.startup_timeout)

    def _remove_data(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
