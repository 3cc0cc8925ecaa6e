"""The simulated cluster answers our own protocol layer as a Kafka 4.3 broker would."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest

from aiokprod.errors import ProtocolError
from aiokprod.protocol.api import METADATA, PRODUCE
from aiokprod.protocol.connection import ClientConnection
from aiokprod.protocol.messages.init_producer_id import InitProducerIdRequest
from aiokprod.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from aiokprod.protocol.messages.produce import (
    ProducePartitionData,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicData,
)
from aiokprod.protocol.records import RecordBatchBuilder
from aiokprod.protocol.schema import Struct
from aiokprod.testing.sim.faults import FaultSchedule, FaultWindow
from aiokprod.testing.sim.network import ClientStream
from aiokprod.testing.sim.world import SimWorld, Topology


class Client:
    """Our protocol layer over one simulated connection."""

    def __init__(self, stream: ClientStream) -> None:
        self.stream = stream
        self.proto = ClientConnection("sim-test")

    async def call(self, request: Struct | None) -> Struct:
        if request is None:
            _, frame = self.proto.api_versions_request("sim", "1")
        else:
            _, frame = self.proto.send(request)
        self.stream.write(frame)
        while True:
            data = await self.stream.read(65536)
            if not data:
                raise ConnectionError("closed")
            responses = self.proto.receive_data(data)
            if responses:
                return responses[0].body

    @classmethod
    async def open(cls, world: SimWorld, node: int) -> Client:
        broker = world.cluster.brokers[node]
        client = cls(await world.transport().connect(broker.host, broker.port))
        client.proto.set_broker_versions(await client.call(None))  # type: ignore[arg-type]
        return client


def produce(
    topic: str, partition: int, pid: int, epoch: int, seq: int, *values: bytes
) -> ProduceRequest:
    builder = RecordBatchBuilder()
    for v in values:
        builder.try_append(1_000, None, v)
    closed = builder.close()
    closed.stamp(pid, epoch, seq)
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            ProduceTopicData(
                name=topic,
                partition_data=[ProducePartitionData(index=partition, records=bytes(closed.data))],
            )
        ],
    )


def simulate(
    body: Callable[[SimWorld], Awaitable[object]],
    nodes: int = 3,
    faults: FaultSchedule | None = None,
) -> object:
    world = SimWorld(random.Random(1), Topology(nodes, {"t": 2}), faults)
    try:
        return world.loop.run_until_complete(body(world))
    finally:
        world.loop.close()


def partition_result(response: Struct) -> ProducePartitionResponse:
    assert isinstance(response, ProduceResponse)
    return response.responses[0].partition_responses[0]


def test_versions_metadata_and_a_produce_round_trip() -> None:
    async def body(world: SimWorld) -> None:
        client = await Client.open(world, 0)
        assert client.proto.version_for(PRODUCE) == 12  # Kafka 4.3 advertises 13, we speak 12
        assert client.proto.version_for(METADATA) == 13
        meta = await client.call(
            MetadataRequest(
                topics=[MetadataRequestTopic(name="t")], allow_auto_topic_creation=False
            )
        )
        assert sorted(b.node_id for b in meta.brokers) == [0, 1, 2]  # type: ignore[attr-defined]
        parts = meta.topics[0].partitions  # type: ignore[attr-defined]
        assert [(p.partition_index, p.leader_id, p.leader_epoch) for p in parts] == [
            (0, 0, 0),
            (1, 1, 0),
        ]
        init = await client.call(InitProducerIdRequest(transactional_id=None))
        pid = init.producer_id  # type: ignore[attr-defined]
        first = partition_result(await client.call(produce("t", 0, pid, 0, 0, b"a", b"b")))
        assert (first.error_code, first.base_offset) == (0, 0)
        dup = partition_result(await client.call(produce("t", 0, pid, 0, 0, b"a", b"b")))
        assert (dup.error_code, dup.base_offset) == (0, 0)
        gap = partition_result(await client.call(produce("t", 0, pid, 0, 5, b"z")))
        assert gap.error_code == 45
        log = world.cluster.partitions["t", 0].log
        assert [r.value for r in log.records()] == [b"a", b"b"]

    simulate(body)


def test_not_leader_carries_a_kip951_hint_and_state_survives_the_election() -> None:
    async def body(world: SimWorld) -> None:
        old = await Client.open(world, 0)
        pid = 4242
        assert partition_result(await old.call(produce("t", 0, pid, 0, 0, b"a"))).error_code == 0
        world.cluster.elect(("t", 0), 2)
        response = await old.call(produce("t", 0, pid, 0, 0, b"a"))
        result = partition_result(response)
        assert result.error_code == 6
        hint = result.current_leader
        assert hint is not None
        assert (hint.leader_id, hint.leader_epoch) == (2, 1)
        assert [(e.node_id, e.port) for e in response.node_endpoints] == [(2, 9094)]  # type: ignore[attr-defined]
        new = await Client.open(world, 2)
        again = partition_result(await new.call(produce("t", 0, pid, 0, 0, b"a")))
        assert (again.error_code, again.base_offset) == (0, 0)  # deduplicated after failover
        assert len(world.cluster.partitions["t", 0].log.records()) == 1

    simulate(body)


def test_a_restart_on_a_new_port_is_in_metadata_and_the_old_port_refuses() -> None:
    async def body(world: SimWorld) -> None:
        cluster = world.cluster
        cluster.stop_broker(1)
        world.network.cut_broker(1)
        with pytest.raises(ConnectionRefusedError):
            await world.transport().connect("broker1.sim", 9093)
        cluster.start_broker(1, new_port=True)
        with pytest.raises(ConnectionRefusedError):
            await world.transport().connect("broker1.sim", 9093)
        client = await Client.open(world, 1)
        meta = await client.call(MetadataRequest(topics=None))
        ports = {b.node_id: b.port for b in meta.brokers}  # type: ignore[attr-defined]
        assert ports[1] == cluster.brokers[1].port != 9093
        # partition 1 (preferred leader 1) moved away while broker 1 was down
        leader = {p.partition_index: p.leader_id for p in meta.topics[0].partitions}  # type: ignore[attr-defined]
        assert leader[1] != 1
        cluster.preferred_election()
        assert cluster.partitions["t", 1].leader == 1

    simulate(body)


def test_a_stopped_broker_cuts_its_connections() -> None:
    async def body(world: SimWorld) -> bytes | None:
        client = await Client.open(world, 0)
        world.cluster.stop_broker(0)
        world.network.cut_broker(0)
        try:
            return await client.stream.read(100)
        except ConnectionResetError:
            return None

    assert simulate(body) in (b"", None)


@pytest.mark.parametrize("kind", ["corrupt", "wrong_correlation", "bad_frame_size", "truncate"])
def test_response_faults_reach_the_client_as_protocol_errors(kind: str) -> None:
    # From t=0 on, every response (after ApiVersions on a fresh connection) is broken.
    async def body(world: SimWorld) -> None:
        broker = world.cluster.brokers[0]
        client = Client(await world.transport().connect(broker.host, broker.port))
        world.faults.windows.append(FaultWindow(kind, 1.0, 0, 10**9))
        with pytest.raises((ProtocolError, ConnectionError)):
            await client.call(None)

    simulate(body)


def test_apply_then_drop_writes_but_never_answers() -> None:
    async def body(world: SimWorld) -> None:
        client = await Client.open(world, 0)
        world.faults.windows.append(FaultWindow("apply_drop", 1.0, 0, 10**9))
        with pytest.raises((ConnectionError, OSError, TimeoutError)):
            async with asyncio.timeout(5):
                await client.call(produce("t", 0, 1, 0, 0, b"a"))
        assert len(world.cluster.partitions["t", 0].log.records()) == 1

    simulate(body)


def test_same_seed_same_trace() -> None:
    def once() -> str:
        faults = FaultSchedule(windows=[FaultWindow("delay_response", 0.5, 0, 10**9, 40)])
        world = SimWorld(random.Random(5), Topology(3, {"t": 2}), faults)

        async def body() -> None:
            client = await Client.open(world, 0)
            for seq in range(20):
                await client.call(produce("t", 0, 1, 0, seq, b"v%d" % seq))

        world.loop.run_until_complete(body())
        world.loop.close()
        return world.digest()

    assert once() == once()
