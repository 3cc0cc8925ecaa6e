"""``ClusterReplacement``: a cluster replaced by another behind one bootstrap address.

What an operator does when a whole cluster is replaced behind a DNS name or a load balancer:
the clients' one bootstrap address now leads to a new cluster (a new cluster id, brokers on
new addresses), and the old one is gone. Two single-node :class:`LocalKafka` clusters (started
side by side) and a :class:`TcpForwarder` in front of them (docs/local-kafka.md, "A cluster
replaced behind one address"; issue 29)::

    async with ClusterReplacement() as clusters:
        producer = Producer(clusters.bootstrap_servers)
        ...                          # writes to clusters.old
        clusters.replace()           # old killed, the address leads to clusters.new
        ...
        await clusters.restart_old() # to read what reached the old cluster
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import TracebackType
from typing import Self

from aiokprod.testing.cluster import LocalKafka
from aiokprod.testing.forwarder import TcpForwarder


class ClusterReplacement:
    """An old and a new single-node cluster behind one forwarded address.

    Args:
        broker_config: ``server.properties`` entries for both clusters.
        version: the Kafka release of both (see :class:`LocalKafka`).
    """

    def __init__(
        self, *, broker_config: Mapping[str, str] | None = None, version: str | None = None
    ) -> None:
        self.old = LocalKafka(broker_config=broker_config, version=version)
        self.new = LocalKafka(broker_config=broker_config, version=version)
        self.forwarder: TcpForwarder | None = None
        self.replaced = False

    @property
    def bootstrap_servers(self) -> str:
        """The one address clients bootstrap from (the forwarder)."""
        if self.forwarder is None:
            raise RuntimeError("ClusterReplacement is not started")
        return self.forwarder.bootstrap_servers

    async def start(self) -> Self:
        """Start both clusters (side by side, in threads) and the forwarder, leading to old.

        Raises:
            LocalKafkaError: a cluster did not start (both are stopped again).
        """
        try:
            await asyncio.gather(
                asyncio.to_thread(self.old.start), asyncio.to_thread(self.new.start)
            )
            self.forwarder = await TcpForwarder(self.old.bootstrap_servers).start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def stop(self) -> None:
        """Stop the forwarder and both clusters."""
        if self.forwarder is not None:
            await self.forwarder.stop()
        await asyncio.gather(asyncio.to_thread(self.old.stop), asyncio.to_thread(self.new.stop))

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def replace(self) -> None:
        """The old cluster dies (SIGKILL), and the address leads to the new one from now on.

        Connections through the forwarder are cut, as a load balancer's failover does.
        """
        if self.forwarder is None:
            raise RuntimeError("ClusterReplacement is not started")
        for node_id in self.old.running_node_ids:
            self.old.kill_node(node_id)
        self.forwarder.switch_to(self.new.bootstrap_servers)
        self.replaced = True

    def lead_to_old(self) -> None:
        """Let the address lead to the old cluster again (it must be running)."""
        if self.forwarder is None:
            raise RuntimeError("ClusterReplacement is not started")
        self.forwarder.switch_to(self.old.bootstrap_servers)
        self.replaced = False

    async def restart_old(self) -> None:
        """Start the old cluster's killed node again, with its data (to read it back)."""
        for node_id in self.old.nodes:
            if node_id not in self.old.running_node_ids:
                await asyncio.to_thread(self.old.start_node, node_id)
