"""The real Producer against a simulated topic with ``max.message.bytes`` (issue 13, part 2).

The simulated broker refuses batches larger than the topic's limit with MESSAGE_TOO_LARGE.
Each test first sends one record, so that the broker has the producer's state and the
producer pipelines batches (until then it sends one batch per partition, see
docs/delivery-guarantees.md). The producer must split them until they pass: every record
lands once, in order, at the offset its handle reports; a lone record above the limit fails.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from aiokprod import DeliveryFuture, RecordTooLargeError
from aiokprod.testing.sim.world import SimWorld, Topology
from aiokprod.types import ProducerRecord, RecordMetadata

LIMIT = 2000


def run(body_args: dict[str, Any], sizes: list[int]) -> tuple[list[DeliveryFuture], SimWorld]:
    world = SimWorld(random.Random(3), Topology(1, {"t": 1}, {"t": LIMIT}))
    futures: list[DeliveryFuture] = []

    async def body() -> None:
        producer = world.producer(random.Random(4), linger_ms=50, **body_args)
        await producer.start()
        await (await producer.send("t", b"warm-up"))  # the broker now has this producer's state
        for i, size in enumerate(sizes):
            value = b"%04d" % i + random.Random(i).randbytes(size - 4)
            futures.append(await producer.send("t", value, key=b"k"))
        await producer.flush()
        assert producer.metrics()["batch-split-total"] > 0
        await producer.close()

    world.run(body())
    return futures, world


def logged(world: SimWorld) -> list[tuple[int, bytes]]:
    log = world.cluster.partitions["t", 0].log
    return [(r.offset, r.value or b"") for r in log.records()][1:]  # without the warm-up


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"max_in_flight_requests_per_connection": 1, "enable_idempotence": False},
    ],
    ids=["idempotent", "not-idempotent"],
)
def test_refused_batches_are_split_until_every_record_lands_once_in_order(
    options: dict[str, Any],
) -> None:
    futures, world = run(options, [500] * 100)
    offsets = [f.result().offset for f in futures]
    assert [(o, v[:4]) for o, v in logged(world)] == [
        (offset, b"%04d" % i) for i, offset in enumerate(offsets)
    ]
    assert all(f.result().serialized_value_size == 500 for f in futures)


def test_only_a_record_above_the_limit_fails_and_its_neighbours_land() -> None:
    sizes = [500] * 21
    sizes[10] = 3000
    futures, world = run({}, sizes)
    errors = [f.exception() for f in futures]
    assert isinstance(errors[10], RecordTooLargeError)
    assert [i for i, e in enumerate(errors) if e is not None] == [10]
    delivered = [i for i in range(21) if i != 10]
    assert [v[:4] for _, v in logged(world)] == [b"%04d" % i for i in delivered]
    assert [o for o, _ in logged(world)] == [futures[i].result().offset for i in delivered]


class Acks:
    """An interceptor that notes every acknowledgement."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, bool]] = []

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        return record

    def on_acknowledgement(
        self, metadata: RecordMetadata | None, exception: BaseException | None
    ) -> None:
        self.seen.append((-1 if metadata is None else metadata.offset, exception is None))


def test_interceptors_hear_of_every_record_of_a_split_batch_once() -> None:
    acks = Acks()
    futures, _ = run({"interceptors": [acks]}, [500] * 40)
    expected = [(0, True)]  # the warm-up record, at offset 0
    expected += [(f.result().offset, True) for f in futures]
    assert sorted(acks.seen) == sorted(expected)
