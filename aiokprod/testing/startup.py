"""How a :class:`~aiokprod.testing.LocalKafka` comes up, and how its JVMs go down.

The process plumbing behind :meth:`LocalKafka.start <aiokprod.testing.LocalKafka.start>`
and :meth:`~aiokprod.testing.LocalKafka.stop`, in the order a start runs it: free loopback
ports for every node (:func:`pick_addresses`), each node's folder and files
(:func:`make_nodes`), ``StorageTool format`` for all nodes in parallel (:func:`format_all`),
then the JVMs, waited on until every node is ready and registered (:func:`start_nodes`).
A node that could not bind a port picked a moment earlier raises :class:`PortClashError`,
on which the cluster retries with new ports. :mod:`aiokprod.testing.cluster` holds the
cluster's state and public API; docs/local-kafka.md tells the steps and their reasons.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from aiokprod.testing import reaper
from aiokprod.testing.config import NodeAddress, broker_properties
from aiokprod.testing.distribution import KafkaDistribution
from aiokprod.testing.errors import LocalKafkaError, error_with_output
from aiokprod.testing.metadata import fetch_metadata
from aiokprod.testing.node import KafkaNode
from aiokprod.testing.ports import LOOPBACK, pick_free_ports
from aiokprod.testing.releases import kafka_release
from aiokprod.testing.security import SECURITY_LISTENERS, security_properties
from aiokprod.testing.tls import TestPki

_FORMAT_TIMEOUT = 120.0
# A node stops cleanly in about a second, but when every node of a multi-node cluster stops,
# whichever one is still the active controller at the end may wait forever for its own
# controlled shutdown (its quorum is gone); seen about 1 run in 5 with 3 nodes. The data is
# thrown away, so such a straggler is SIGKILLed after this grace period.
_STOP_GRACE = 10.0


class PortClashError(LocalKafkaError):
    """A node could not bind a port picked a moment earlier (someone else took it)."""


def pick_addresses(
    node_count: int, security: bool, port: int | None = None
) -> tuple[list[NodeAddress], dict[int, dict[str, int]]]:
    """Free loopback ports for ``node_count`` nodes; ``port``: node 1's client port, if given.

    Returns:
        Each node's addresses (client and controller ports), and node id -> secure
        listener name -> port (empty unless ``security``).
    """
    extra = len(SECURITY_LISTENERS) if security else 0
    count = (2 + extra) * node_count
    ports = pick_free_ports(count)
    if port is not None:
        ports = [port, *[p for p in ports if p != port][: count - 1]]
    addresses = [
        NodeAddress(i, LOOPBACK, ports[2 * i - 2], ports[2 * i - 1])
        for i in range(1, node_count + 1)
    ]
    extra_ports = ports[2 * node_count :]
    security_ports = {
        a.node_id: dict(
            zip(SECURITY_LISTENERS, extra_ports[k * extra : (k + 1) * extra], strict=True)
        )
        for k, a in enumerate(addresses)
        if extra
    }
    return addresses, security_ports


def make_nodes(
    dist: KafkaDistribution,
    root: Path,
    addresses: list[NodeAddress],
    *,
    broker_config: Mapping[str, str],
    pki: TestPki | None,
    security_ports: Mapping[int, Mapping[str, int]],
    sasl_users: Mapping[str, str],
    heap_min: str,
    heap_max: str,
    jvm_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    extra_classpath: Sequence[str | Path] = (),
) -> dict[int, KafkaNode]:
    """A :class:`KafkaNode` per address in ``root/node<N>``, its files written (not started).

    ``broker_config`` overrides the defaults, and the secure listeners' properties when
    ``pki`` is given. ``jvm_args`` and ``env`` go to every node's JVM; ``extra_classpath`` goes
    on every node's classpath.
    """
    release = kafka_release(dist.version)
    nodes: dict[int, KafkaNode] = {}
    for address in addresses:
        node_dir = root / f"node{address.node_id}"
        # A previous attempt (port clash) may have left a formatted folder behind.
        shutil.rmtree(node_dir, ignore_errors=True)
        overrides = dict(broker_config)
        if pki is not None:
            overrides = {
                **security_properties(
                    address,
                    security_ports[address.node_id],
                    server_keystore=pki.server_keystore,
                    ca_file=pki.ca_file,
                    users=sasl_users,
                ),
                **overrides,
            }
        props = broker_properties(
            address,
            addresses,
            node_dir / "data",
            overrides,
            share_coordinator=release.has_share_coordinator,
        )
        node = KafkaNode(
            dist,
            address,
            node_dir,
            props,
            heap_min=heap_min,
            heap_max=heap_max,
            jvm_args=jvm_args,
            env=env,
            extra_classpath=extra_classpath,
        )
        node.write_files()
        nodes[address.node_id] = node
    return nodes


def format_all(
    nodes: list[KafkaNode], cluster_id: str, extra_args: list[str] | None = None
) -> None:
    """Run ``StorageTool format`` for every node in parallel (each is a JVM start).

    ``extra_args`` go at the end of each command (``--add-scram`` entries).
    """
    running: list[tuple[KafkaNode, subprocess.Popen[bytes], Path]] = []
    try:
        for node in nodes:
            output = node.node_dir / "format.log"
            with output.open("wb") as sink:
                process = subprocess.Popen(
                    node.format_command(cluster_id) + list(extra_args or ()),
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            reaper.track(process)
            running.append((node, process, output))
        deadline = time.monotonic() + _FORMAT_TIMEOUT
        for node, process, output in running:
            try:
                code = process.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                raise error_with_output(
                    f"formatting node {node.node_id} took more than {_FORMAT_TIMEOUT:.0f} s",
                    output.read_text(encoding="utf-8", errors="replace"),
                ) from None
            if code != 0:
                raise error_with_output(
                    f"formatting node {node.node_id} failed with exit code {code}",
                    output.read_text(encoding="utf-8", errors="replace"),
                )
    finally:
        reaper.stop_processes([p for _, p, _ in running], grace=5.0)
        for _, process, _ in running:
            reaper.untrack(process)


def start_nodes(nodes: Mapping[int, KafkaNode], startup_timeout: float) -> None:
    """Start every node and wait until each is ready and every one lists every other.

    Raises:
        PortClashError: a node could not bind one of its ports.
        LocalKafkaError: a node exited, or was not ready within ``startup_timeout``.
    """
    for node in nodes.values():
        node.start()
    deadline = time.monotonic() + startup_timeout
    # Poll every node in each round, so that any node dying is noticed at once.
    pending = dict(nodes)
    while pending:
        for node_id, node in list(pending.items()):
            try:
                node.raise_if_exited()
            except LocalKafkaError as exc:
                if node.bind_failed():
                    raise PortClashError(str(exc)) from exc
                raise
            if node.is_ready():
                del pending[node_id]
        if not pending:
            break
        if time.monotonic() >= deadline:
            raise next(iter(pending.values())).not_ready_error()
        time.sleep(0.2)
    wait_registered(nodes, deadline)
    for node in nodes.values():
        node.raise_if_exited()  # none may have died while the others registered


def wait_registered(nodes: Mapping[int, KafkaNode], deadline: float) -> None:
    """Wait until every running node lists every running node as a broker."""
    while True:
        expected = {node_id for node_id, node in nodes.items() if node.is_running}
        missing: dict[int, set[int] | str] = {}
        for node_id in expected:
            address = nodes[node_id].address
            try:
                seen = fetch_metadata(address.host, address.port, [], timeout=5.0).broker_ids
            except LocalKafkaError as exc:
                missing[node_id] = str(exc)
                continue
            if not expected <= seen:
                missing[node_id] = expected - seen
        if not missing:
            return
        if time.monotonic() >= deadline:
            first = next(iter(missing))
            raise error_with_output(
                f"brokers did not all register in time; per node, what is missing: {missing}",
                nodes[first].log_tail(40),
            )
        time.sleep(0.2)


def stop_node_processes(nodes: Iterable[KafkaNode]) -> None:
    """Stop the JVMs of these nodes in parallel (SIGTERM, then SIGKILL after a grace)."""
    processes = []
    for node in nodes:
        process = node.process
        if process is not None:
            processes.append(process)
    reaper.stop_processes(processes, _STOP_GRACE)
    for process in processes:
        reaper.untrack(process)
