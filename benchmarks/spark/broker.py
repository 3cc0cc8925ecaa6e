"""What the broker and the processes spent: CPU seconds from /proc, Produce requests over JMX.

The request counts explain the broker's CPU per record: a broker pays per request and per
partition entry in it, so a client whose requests carry fewer batches costs it more per
record. They are read from the broker's own metrics over JMX (the broker is started with a
JMX port, see :func:`enable_broker_jmx`), through the Spark driver's JVM (py4j), so reading
them starts no process.
"""

from __future__ import annotations

import os
from typing import Any

from aiokprod.testing import node
from aiokprod.testing.ports import pick_free_ports

#: Produce requests (all versions) and the partition entries they carried.
REQUESTS = "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce,*"
PARTITION_ENTRIES = "kafka.server:type=BrokerTopicMetrics,name=TotalProduceRequestsPerSec"


def enable_broker_jmx() -> int:
    """Start the brokers of this process with JMX on a free loopback port; returns it.

    Patches the broker JVM flags of :mod:`aiokprod.testing.node` (a measuring tool's
    business, not the test tooling's): every broker started afterwards gets them.
    """
    (port,) = pick_free_ports(1)
    node.BROKER_JVM_FLAGS = (
        *node.BROKER_JVM_FLAGS,
        "-Dcom.sun.management.jmxremote",
        f"-Dcom.sun.management.jmxremote.port={port}",
        f"-Dcom.sun.management.jmxremote.rmi.port={port}",
        "-Dcom.sun.management.jmxremote.host=127.0.0.1",
        "-Djava.rmi.server.hostname=127.0.0.1",
        "-Dcom.sun.management.jmxremote.authenticate=false",
        "-Dcom.sun.management.jmxremote.ssl=false",
    )
    return port


class BrokerCounters:
    """The broker's Produce request and partition-entry counts, read through ``jvm``."""

    def __init__(self, jvm: Any, port: int) -> None:
        url = jvm.javax.management.remote.JMXServiceURL(
            f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi"
        )
        self._jvm = jvm
        self._connector = jvm.javax.management.remote.JMXConnectorFactory.connect(url)
        self._server = self._connector.getMBeanServerConnection()

    def _count(self, pattern: str) -> int:
        names = self._server.queryNames(self._jvm.javax.management.ObjectName(pattern), None)
        return sum(int(self._server.getAttribute(name, "Count")) for name in names)

    def snapshot(self) -> dict[str, int]:
        return {"requests": self._count(REQUESTS), "entries": self._count(PARTITION_ENTRIES)}

    def close(self) -> None:
        self._connector.close()


def _tree_cpu_seconds(root: int) -> tuple[float, float]:
    """User+system CPU seconds of ``root`` itself, and of its descendants (from /proc).

    Each live process counts its own time and that of the children it has reaped (so a
    Python worker that exited still counts, in the daemon that reaped it); ``root``'s own
    figure leaves out the children it reaped.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    own = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks
        if int(entry) == root:
            own = sum(int(fields[i]) for i in (11, 12)) / ticks
    total = 0.0
    for pid, seconds in cpu.items():
        p = pid
        while p > 1:
            if p == root:
                total += seconds
                break
            p = parents.get(p, 0)
    return own, total - own


def cpu_snapshot(spark_pid: int, broker_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of Spark (its JVM; its Python daemon and workers) and the broker.

    A Python worker that exits while /proc is read can be counted twice (alive, and in the
    parent that reaped it meanwhile): of two reads in a row, the smaller is kept.
    """
    jvm, python = min(_tree_cpu_seconds(spark_pid), _tree_cpu_seconds(spark_pid), key=sum)
    return {
        "spark": jvm + python,
        "jvm": jvm,
        "python": python,
        "broker": sum(_tree_cpu_seconds(broker_pid)) if broker_pid else 0.0,
    }
