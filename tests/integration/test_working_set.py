"""The partitioner's working set against a real broker, read back with librdkafka.

Each value carries the 100-ms slot (of the test's monotonic clock) in which it was sent. With
a working set of 4 partitions kept 400 ms, no slot's records can be spread over more than two
sets (8 partitions) — a set's age is counted from the last new batch before it was drawn, so
the margin covers a stall of up to 300 ms there on a busy machine; with the Java rule (a set
of 0) a slot's ~75 moves reach most of the 24.
"""

from __future__ import annotations

import time
from collections import defaultdict

from readback import consume_all

from aiokprod import DeliveryFuture, Producer
from aiokprod.testing import LocalKafka

PARTITIONS = 24
RECORDS = 30_000
SLOT_S = 0.1
#: Slots with fewer records are too short to say anything (a move every ~4 records).
MIN_PER_SLOT = 300


async def spread_per_slot(kafka: LocalKafka, topic: str, working_set_size: int) -> list[int]:
    """Distinct partitions of each well-filled slot, after checking every record came once."""
    futures: list[DeliveryFuture] = []
    async with Producer(
        kafka.bootstrap_servers,
        batch_size=512,  # about 4 records a batch: a move every few records
        linger_ms=5,
        partitioner_working_set_size=working_set_size,
        partitioner_working_set_ms=400,
    ) as producer:
        start = time.monotonic()
        for i in range(RECORDS):
            slot = int((time.monotonic() - start) / SLOT_S)
            futures.append(await producer.send(topic, f"{slot}:{i}:".encode().ljust(100, b".")))
        await producer.flush()
    assert all(f.exception() is None for f in futures)
    consumed = consume_all(kafka.bootstrap_servers, topic, RECORDS)
    assert sorted(int(r.value.split(b":")[1]) for r in consumed) == list(range(RECORDS))
    per_slot: dict[int, set[int]] = defaultdict(set)
    counts: dict[int, int] = defaultdict(int)
    for r in consumed:
        slot = int(r.value.split(b":")[0])
        per_slot[slot].add(r.partition)
        counts[slot] += 1
    spread = [len(per_slot[s]) for s in sorted(per_slot) if counts[s] >= MIN_PER_SLOT]
    assert spread, f"no slot had {MIN_PER_SLOT} records: {dict(counts)}"
    print(f"\nworking set {working_set_size}: partitions per full slot {spread}")
    return spread


async def test_unkeyed_records_move_among_a_working_set(kafka: LocalKafka, new_topic) -> None:
    spread = await spread_per_slot(kafka, new_topic(partitions=PARTITIONS), 4)
    assert max(spread) <= 8, spread


async def test_the_java_rule_moves_over_the_whole_topic(kafka: LocalKafka, new_topic) -> None:
    spread = await spread_per_slot(kafka, new_topic(partitions=PARTITIONS), 0)
    assert max(spread) > 8, spread
