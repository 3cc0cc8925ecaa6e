"""One producer, N records, in the pattern users write; for before/after pairs.

Times nothing itself: run it under ``benchmarks/ab.py`` (the whole process from outside,
A and B in turn) against a local Kafka whose topics ``bench`` and ``benchk`` exist, e.g.::

    .venv/bin/python -m aiokprod.testing run --topic bench:6:1 --topic benchk:6:1
    B=$BOOTSTRAP; S=benchmarks/send_patterns.py
    .venv/bin/python -m benchmarks.ab -n 5 --a ".venv-mypyc/bin/python $S $B callback 300000" \\
        --b ".venv/bin/python $S $B callback 300000"

Modes: ``futures`` (``send()``, every future kept), ``callback`` (``send()`` and one
``add_done_callback`` per record, nothing kept), ``keyed`` (1,000 keys, futures kept),
``many`` / ``manykeyed`` (``send_many`` of 10,000 at a time), ``wait`` (``send_and_wait``
one at a time). 100 B values, ``linger_ms=5``. Every record must be acknowledged, or it exits
with an error.
"""

from __future__ import annotations

import asyncio
import sys

from aiokprod import DeliveryFuture, Producer

VALUE = b"x" * 100


async def run(bootstrap: str, mode: str, n: int) -> None:
    done = 0

    def count(_: DeliveryFuture) -> None:
        nonlocal done
        done += 1

    async with Producer(bootstrap, linger_ms=5) as producer:
        topic = "benchk" if "keyed" in mode else "bench"
        await producer.partitions_for(topic)
        futures: list[DeliveryFuture] = []
        if mode == "futures":
            futures = [await producer.send(topic, VALUE) for _ in range(n)]
        elif mode == "callback":
            for _ in range(n):
                (await producer.send(topic, VALUE)).add_done_callback(count)
        elif mode == "keyed":
            keys = [str(i % 1000).encode() for i in range(n)]
            futures = [await producer.send(topic, VALUE, key=k) for k in keys]
        elif mode in ("many", "manykeyed"):
            bulk_keys = (
                [str(i % 1000).encode() for i in range(10_000)] if mode == "manykeyed" else None
            )
            bulks = [
                await producer.send_many(topic, [VALUE] * 10_000, keys=bulk_keys)
                for _ in range(0, n, 10_000)
            ]
            await producer.flush()
            for bulk in bulks:
                await bulk
            return
        elif mode == "wait":
            for _ in range(n):
                await producer.send_and_wait(topic, VALUE)
            return
        else:
            raise SystemExit(f"unknown mode {mode!r}")
        await producer.flush()
        await asyncio.sleep(0)
        failed = [f for f in futures if f.exception() is not None]
        if failed or (mode == "callback" and done != n):
            raise SystemExit(f"not delivered: {len(failed)} failed, {done} of {n} called back")


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], sys.argv[2], int(sys.argv[3])))
