"""How late the loop's other tasks run while a tight ``send()`` loop produces.

One producer sends N unkeyed 100 B records in a tight loop (``await producer.send(...)``,
nothing else awaited) to an existing topic, while a ticker task sleeps 1 ms over and over
and records how late each wake-up is: what a web handler on the same loop would wait. The
send loop gives the loop up only at a new batch (docs/design.md, "The send path", step 3)::

    .venv/bin/python -m aiokprod.testing run --topic bench:6:1 --topic wide:1000:1
    .venv/bin/python benchmarks/send_loop_lag.py $BOOTSTRAP bench 300000
    .venv/bin/python benchmarks/send_loop_lag.py $BOOTSTRAP wide 300000

Prints records/s and the lateness's p50 / p99 / max in milliseconds. Not a test: it asserts
nothing. (A freshly created topic with many partitions is slow on the broker for its first
writes: send to it once before measuring.)
"""

from __future__ import annotations

import asyncio
import sys
import time

from aiokprod import Producer

TICK_S = 0.001
VALUES = [(b"%03d" % i) * 33 + b"x" for i in range(1000)]


async def run(bootstrap: str, topic: str, n: int) -> None:
    async with Producer(bootstrap, acks=1, linger_ms=5, enable_idempotence=False) as producer:
        await producer.partitions_for(topic)
        lateness: list[float] = []
        stop = False

        async def ticker() -> None:
            while not stop:
                began = time.perf_counter()
                await asyncio.sleep(TICK_S)
                lateness.append(time.perf_counter() - began - TICK_S)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        began = time.perf_counter()
        for i in range(n):
            await producer.send(topic, VALUES[i % len(VALUES)])
        await producer.flush()
        wall = time.perf_counter() - began
        stop = True
        await task
    lateness.sort()
    p50 = lateness[len(lateness) // 2] * 1000
    p99 = lateness[len(lateness) * 99 // 100] * 1000
    print(
        f"{topic}: {n / wall:,.0f} records/s; ticker {len(lateness)} wake-ups, late by "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {lateness[-1] * 1000:.1f} ms"
    )


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], sys.argv[2], int(sys.argv[3])))
