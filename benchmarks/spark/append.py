"""``python -m benchmarks.spark.append``: the Spark writer's append path alone, no broker.

CPU nanoseconds per record of ``Producer.send_many`` with the values of Arrow batches of
10,000 rows, either as the data source passes them (``--mode arrow``: an
:class:`~aiokprod.spark.encoder.ArrowValues` column, encoded from the Arrow buffers) or as
a list (``--mode list``: ``to_pylist()``, the path before issue 27), plus what the sender
does to each batch before writing it (drain, close, stamp the CRC, complete): a producer is
put in the running state by hand with a 6-partition topic in its metadata, and nothing is
sent. Best of ``--rounds``. Use it to compare builds, commits or encoder settings::

    .venv/bin/python -m benchmarks.spark.append --size 1024 --mode arrow
    .venv-mypyc/bin/python -P benchmarks/spark/append.py --size 1024 --mode arrow

(``-P``: the compiled install, not the source tree of the current directory.) Not a test: it
reaches into the producer's internals and asserts nothing.
"""

from __future__ import annotations

import _thread
import argparse
import asyncio
import time
from typing import Any

import pyarrow as pa

import aiokprod.compiled
from aiokprod import Producer
from aiokprod.internals.metadata import BrokerNode, ClusterSnapshot, TopicInfo
from aiokprod.lifecycle import ProducerState
from aiokprod.spark import encoder
from aiokprod.spark.encoder import ArrowValues


def arrow_batches(rows: int, size: int, per_batch: int = 10_000) -> list[pa.RecordBatch]:
    return [
        pa.RecordBatch.from_arrays(
            [
                pa.array(
                    [str(i).rjust(size, "x").encode() for i in range(s, min(s + per_batch, rows))],
                    pa.binary(),
                )
            ],
            ["value"],
        )
        for s in range(0, rows, per_batch)
    ]


def drain(producer: Producer) -> None:
    """What the sender does to each batch before writing it, then its completion."""
    acc = producer._acc
    snapshot = producer._metadata.snapshot
    acc.begin_flush()
    while acc.has_undrained():
        for batches in acc.drain(snapshot, {1}, 1 << 20, 0).values():
            for batch in batches:
                batch.stamp(1, 0, 0)
                batch.complete(0, -1)
                acc.deallocate(batch)
    acc.end_flush()


async def run(batches: list[Any], mode: str, batch_size: int, rounds: int) -> float:
    producer = Producer("127.0.0.1:1", buffer_memory=1 << 31, linger_ms=5, batch_size=batch_size)
    producer._state = ProducerState.RUNNING
    producer._path.thread_id = _thread.get_ident()
    producer._metadata.snapshot = ClusterSnapshot.build(
        {1: BrokerNode(1, "h", 1)}, {"t": TopicInfo("t", (1,) * 6, (0,) * 6, tuple(range(6)))}
    )
    rows = sum(b.num_rows for b in batches)
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for batch in batches:
            column = batch.column(0)
            values: Any = ArrowValues(column) if mode == "arrow" else column.to_pylist()
            await producer.send_many("t", values)
            drain(producer)
        best = min(best, (time.process_time() - started) / rows * 1e9)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark.append", description=__doc__)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--rows", type=int, default=0, help="default 500,000 (200,000 > 500 B)")
    parser.add_argument("--mode", choices=("arrow", "list"), default="arrow")
    parser.add_argument("--batch-size", type=int, default=16_384)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=int, default=0, help="records per plan (encoder)")
    args = parser.parse_args(argv)
    if args.window:
        encoder.WINDOW_RECORDS = args.window  # type: ignore[misc]
    rows = args.rows or (200_000 if args.size > 500 else 500_000)
    batches = arrow_batches(rows, args.size)
    ns = asyncio.run(run(batches, args.mode, args.batch_size, args.rounds))
    build = len(aiokprod.compiled.compiled_modules())
    print(
        f"{args.mode} {args.size} B, batch_size {args.batch_size}: {ns:,.0f} ns per record "
        f"(CPU, best of {args.rounds}; {'compiled' if build else 'pure'} build)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
