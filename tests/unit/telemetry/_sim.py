"""A simulated cluster with a telemetry receiver, and the pushes it took, decoded."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry.proto.metrics.v1 import metrics_pb2

from aiokprod import Producer
from aiokprod.testing.sim.scale import ScaleWorld
from aiokprod.testing.sim.telemetry import SimPush, SimTelemetry

TOPIC = "t"


def telemetry_world(
    brokers: int = 1, seed: int = 1, **subscription: Any
) -> tuple[ScaleWorld, SimTelemetry]:
    """A ScaleWorld whose brokers receive client telemetry (``subscription``: SimTelemetry's)."""
    world = ScaleWorld(brokers, {TOPIC: 2}, seed=seed)
    telemetry = SimTelemetry(world.now_ms, **subscription)

    def stop(node_id: int) -> None:
        world.cluster.stop_broker(node_id)
        world.network.cut_broker(node_id)

    telemetry.stop_broker = stop
    world.cluster.telemetry = telemetry
    return world, telemetry


def run(
    world: ScaleWorld,
    seconds: float,
    *,
    during: Callable[[Producer, float], Awaitable[None]] | None = None,
    close_timeout: float | None = None,
    **options: Any,
) -> tuple[Producer, int]:
    """Send a record every 100 ms for ``seconds`` (virtual), then close; (producer, acked)."""
    acked = 0
    producer = world.producer(**options)

    async def body() -> None:
        nonlocal acked
        await producer.start()
        futures = []
        for i in range(int(seconds * 10)):
            futures.append(await producer.send(TOPIC, b"v%d" % i))
            await asyncio.sleep(0.1)
            if during is not None:
                await during(producer, (i + 1) / 10)
        await producer.flush()
        acked = sum(1 for f in futures if f.done() and f.exception() is None)
        await producer.close(close_timeout)

    try:
        world.run(body())
    finally:
        world.close()
    return producer, acked


def decode(push: SimPush) -> metrics_pb2.MetricsData:
    """The push's OTLP payload, parsed by the OpenTelemetry reference classes."""
    return metrics_pb2.MetricsData.FromString(push.metrics)


def metric_names(push: SimPush) -> set[str]:
    """The names of the metrics in a push."""
    return {
        m.name
        for rm in decode(push).resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }


def points(push: SimPush, name: str) -> list[Any]:
    """The data points of metric ``name`` in a push (gauge or sum)."""
    for rm in decode(push).resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    return list(getattr(m, m.WhichOneof("data")).data_points)
    return []
