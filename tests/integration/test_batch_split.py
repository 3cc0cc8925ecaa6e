"""Batches the broker refuses as too large are split and sent again (issue 13, part 2).

A topic with ``max.message.bytes=2000`` and records of 500 bytes: a linger lets them batch
into batches of up to ``batch_size`` (16 KiB), which the broker refuses with
MESSAGE_TOO_LARGE. The producer splits them (again, on each refusal) until they pass; each
test reads the topic back with librdkafka and checks every record is there once, in the
order it was sent, at the offset its handle reported. A lone record larger than the limit
fails with ``RecordTooLargeError`` and only it.
"""

from __future__ import annotations

import random
from typing import Literal

import pytest
from readback import consume_all

from aiokprod import DeliveryFuture, Producer, RecordTooLargeError
from aiokprod.testing import LocalKafka
from aiokprod.testing.pytest_plugin import NewTopic

LIMIT = {"max.message.bytes": "2000"}
RECORDS = 100


def value_for(i: int, size: int = 500) -> bytes:
    """A record's value: its number, then bytes that do not compress (so batches stay big)."""
    return b"%04d" % i + random.Random(i).randbytes(size - 4)


@pytest.mark.parametrize(
    ("idempotence", "compression"),
    [(True, "none"), (False, "none"), (True, "zstd")],
    ids=["idempotent", "not-idempotent", "idempotent-zstd"],
)
async def test_every_record_of_too_large_batches_arrives_once_in_order(
    kafka: LocalKafka,
    new_topic: NewTopic,
    idempotence: bool,
    compression: Literal["none", "zstd"],
) -> None:
    topic = new_topic(partitions=1, config=LIMIT)
    futures: list[DeliveryFuture] = []
    # Without idempotence only one request in flight keeps a partition's order (as in Java):
    # a refused batch's pieces must not be overtaken by a later batch.
    in_flight = 5 if idempotence else 1
    async with Producer(
        kafka.bootstrap_servers,
        linger_ms=200,
        enable_idempotence=idempotence,
        max_in_flight_requests_per_connection=in_flight,
        compression_type=compression,
    ) as producer:
        for i in range(RECORDS):
            futures.append(await producer.send(topic, value_for(i), key=b"k%d" % i))
        await producer.flush()
        metadata = [await f for f in futures]
        splits = producer.metrics()["batch-split-total"]
    assert splits > 0, "the batches were refused and split"
    offsets = [m.offset for m in metadata]
    assert offsets == sorted(offsets)
    assert len(set(offsets)) == RECORDS

    consumed = consume_all(kafka.bootstrap_servers, topic, RECORDS)
    assert [r.value for r in consumed] == [value_for(i) for i in range(RECORDS)]
    assert [r.key for r in consumed] == [b"k%d" % i for i in range(RECORDS)]
    assert [r.offset for r in consumed] == offsets


async def test_only_the_record_larger_than_the_limit_fails(
    kafka: LocalKafka, new_topic: NewTopic
) -> None:
    topic = new_topic(partitions=1, config=LIMIT)
    big = 10
    sizes = [3000 if i == big else 500 for i in range(21)]
    async with Producer(kafka.bootstrap_servers, linger_ms=200) as producer:
        futures = [await producer.send(topic, value_for(i, n)) for i, n in enumerate(sizes)]
        await producer.flush()
    errors = [f.exception() for f in futures]
    assert isinstance(errors[big], RecordTooLargeError)
    assert [i for i, e in enumerate(errors) if e is not None] == [big]
    delivered = [i for i in range(len(sizes)) if i != big]
    offsets = [futures[i].result().offset for i in delivered]
    assert offsets == sorted(offsets)

    consumed = consume_all(kafka.bootstrap_servers, topic, len(delivered))
    assert [r.value for r in consumed] == [value_for(i, sizes[i]) for i in delivered]
    assert [r.offset for r in consumed] == offsets
