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
from aiokprod.spark.results import Tally
from aiokprod.spark.send_arrow import send_batch

#: The key columns of ``--keys``, as the Spark benchmark makes them (benchmarks.spark).
KEYS = ("none", "string", "binary")


def key_column(ids: range, keys: str) -> pa.Array:
    """``'k' + id % 10000`` as a string column, or ``id % 100000`` as 8 big-endian bytes."""
    if keys == "string":
        return pa.array([f"k{i % 10_000}" for i in ids], pa.string())
    return pa.array([(i % 100_000).to_bytes(8, "big") for i in ids], pa.binary())


def arrow_batches(
    rows: int, size: int, per_batch: int = 10_000, keys: str = "none"
) -> list[pa.RecordBatch]:
    batches = []
    for s in range(0, rows, per_batch):
        ids = range(s, min(s + per_batch, rows))
        columns = [pa.array([str(i).rjust(size, "x").encode() for i in ids], pa.binary())]
        names = ["value"]
        if keys != "none":
            columns.append(key_column(ids, keys))
            names.append("key")
        batches.append(pa.RecordBatch.from_arrays(columns, names))
    return batches


def drain(producer: Producer, full_only: bool = False) -> None:
    """What the sender does to each batch before writing it, then its completion.

    Every queued batch, or with ``full_only`` the full ones: the others stay open for the
    next call to fill, as when the next Spark batch comes within ``linger_ms``.
    """
    acc = producer._acc
    snapshot = producer._metadata.snapshot
    acc.begin_flush()
    can_drain = (lambda batch: batch.is_full) if full_only else None
    while acc.has_undrained():
        drained = acc.drain(snapshot, {1}, 1 << 20, 0, can_drain)
        if not drained:
            break
        for batches in drained.values():
            for batch in batches:
                batch.stamp(1, 0, 0)
                batch.complete(0, -1)
                acc.deallocate(batch)
    acc.end_flush()


async def run(
    batches: list[Any], mode: str, batch_size: int, rounds: int, full_only: bool = False
) -> float:
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
        tally = Tally()
        for batch in batches:
            if mode == "task":  # what a Spark task does with the batch (send_arrow.py)
                await send_batch(producer, "t", batch, tally)
                drain(producer, full_only)
                tally.collect()
                continue
            column = batch.column(0)
            values: Any = ArrowValues(column) if mode == "arrow" else column.to_pylist()
            await producer.send_many("t", values)
            drain(producer, full_only)
        drain(producer)
        tally.collect()
        if tally.first_error is not None or tally.delivered != (rows if mode == "task" else 0):
            raise SystemExit(f"not all delivered: {tally.result(0, 0)}")
        best = min(best, (time.process_time() - started) / rows * 1e9)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark.append", description=__doc__)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--rows", type=int, default=0, help="default 500,000 (200,000 > 500 B)")
    parser.add_argument(
        "--mode",
        choices=("arrow", "list", "task"),
        default="arrow",
        help="unkeyed values as an ArrowValues column or a list, or the task's send_batch",
    )
    parser.add_argument(
        "--keys", choices=KEYS, default="none", help="a key column (--mode task): see KEYS"
    )
    parser.add_argument("--batch-size", type=int, default=16_384)
    parser.add_argument(
        "--drain",
        choices=("all", "full"),
        default="all",
        help="after each Spark batch, drain every batch, or only the full ones (the others "
        "are filled by the next Spark batch, as within linger_ms)",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=int, default=0, help="records per plan (encoder)")
    args = parser.parse_args(argv)
    if args.window:
        encoder.WINDOW_RECORDS = args.window  # type: ignore[misc]
    rows = args.rows or (200_000 if args.size > 500 else 500_000)
    if args.keys != "none" and args.mode != "task":
        parser.error("--keys needs --mode task")
    batches = arrow_batches(rows, args.size, keys=args.keys)
    ns = asyncio.run(run(batches, args.mode, args.batch_size, args.rounds, args.drain == "full"))
    build = len(aiokprod.compiled.compiled_modules())
    print(
        f"{args.mode} {args.size} B, keys {args.keys}, batch_size {args.batch_size}, "
        f"drain {args.drain}: "
        f"{ns:,.0f} ns per record "
        f"(CPU, best of {args.rounds}; {'compiled' if build else 'pure'} build)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
