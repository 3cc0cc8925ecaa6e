"""The send path alone: CPU nanoseconds per ``send()``, no broker and no sender.

A producer is put in the running state by hand, with a 6-partition topic in its metadata,
and ``send()`` is called N times in the pattern named (``futures``: every future kept;
``callback``: one ``add_done_callback`` each; ``keyed``: 1,000 keys); the best of 7 rounds is
printed. Nothing is sent (the sender never runs). Use it to compare builds or commits of the
per-record path::

    .venv/bin/python benchmarks/send_path_micro.py 100000 futures
    .venv-mypyc/bin/python benchmarks/send_path_micro.py 100000 futures

``NOGC=1`` disables the cyclic garbage collector for the run (what it costs with futures kept).
Not a test: it reaches into the producer's internals and asserts nothing.
"""

from __future__ import annotations

import _thread
import asyncio
import gc
import os
import sys
import time

from aiokprod import DeliveryFuture, Producer
from aiokprod.internals.metadata import BrokerNode, ClusterSnapshot, TopicInfo
from aiokprod.lifecycle import ProducerState


async def run(n: int, mode: str) -> float:
    producer = Producer("127.0.0.1:1", buffer_memory=1 << 31, linger_ms=5)
    producer._state = ProducerState.RUNNING
    producer._path.thread_id = _thread.get_ident()
    producer._metadata.snapshot = ClusterSnapshot.build(
        {1: BrokerNode(1, "h", 1)}, {"t": TopicInfo("t", (1,) * 6, (0,) * 6)}
    )
    value = b"x" * 100
    keys = [str(i % 1000).encode() for i in range(n)]

    def ignore(_: DeliveryFuture) -> None:
        pass

    send = producer.send
    best = float("inf")
    for _ in range(7):
        producer._acc._queues.clear()
        start = time.process_time()
        if mode == "keyed":
            kept = [await send("t", value, key=k) for k in keys]
        elif mode == "callback":
            for _ in range(n):
                (await send("t", value)).add_done_callback(ignore)
        else:
            kept = [await send("t", value) for _ in range(n)]
        best = min(best, (time.process_time() - start) / n * 1e9)
        kept = []
    del kept
    return best


if __name__ == "__main__":
    if os.environ.get("NOGC"):
        gc.disable()
    count, pattern = int(sys.argv[1]), sys.argv[2]
    print(f"{pattern}: {asyncio.run(run(count, pattern)):.0f} ns/record")
