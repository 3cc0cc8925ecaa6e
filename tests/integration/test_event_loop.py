"""The event loop the integration tests run on, and a round trip on it.

``make test`` runs them on asyncio's own loop; ``make test-uvloop`` sets
``AIOKPROD_TEST_LOOP=uvloop`` and runs the integration tests it names on uvloop
(docs/getting-started.md, "Faster"). This test fails if the run is not on the loop it was
asked for, so a uvloop run that silently fell back to asyncio's loop cannot pass.
"""

from __future__ import annotations

import asyncio
import os

from readback import consume_all

from aiokprod import Producer
from aiokprod.testing import LocalKafka

RECORDS = 20_000


async def test_the_tests_run_on_the_loop_asked_for_and_records_round_trip(
    kafka: LocalKafka, new_topic
) -> None:
    loop = asyncio.get_running_loop()
    wanted = os.environ.get("AIOKPROD_TEST_LOOP", "asyncio") or "asyncio"
    module = type(loop).__module__.split(".")[0]
    assert module == wanted, f"running on {type(loop)!r}, asked for {wanted}"

    topic = new_topic(partitions=3)
    async with Producer(kafka.bootstrap_servers, linger_ms=5) as producer:
        futures = [
            await producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 50)) for i in range(RECORDS)
        ]
        last = await producer.send_and_wait(topic, b"last", key=b"k0")
        await producer.flush()
        offsets = {(m.partition, m.offset) for m in [await f for f in futures]}
    assert len(offsets) == RECORDS
    assert (last.partition, last.offset) not in offsets

    consumed = consume_all(kafka.bootstrap_servers, topic, RECORDS + 1)
    assert sorted(r.value for r in consumed) == sorted(
        [b"v%d" % i for i in range(RECORDS)] + [b"last"]
    )
