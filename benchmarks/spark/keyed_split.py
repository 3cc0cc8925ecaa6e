"""``python -m benchmarks.spark.keyed_split``: the steps of a keyed Arrow batch, one by one.

CPU nanoseconds per row of each step the data source takes for one Spark batch of 10,000
keyed rows before the producer's append path (``spark/keyed.py``, ``spark/encoder.py``):
murmur2 and the partition of every key, the stable sort, the ``take`` of the values and of
the keys, the whole split, then the encoding of the split column's first plan; with
``--keys none`` the unkeyed column's encoding for comparison. Best of ``--rounds`` rounds
of 200 batches. Use it to compare builds or commits::

    .venv/bin/python -m benchmarks.spark.keyed_split --size 100 --keys string
    .venv-mypyc/bin/python -P benchmarks/spark/keyed_split.py --size 1024 --keys binary

(``-P``: the compiled install, not the source tree of the current directory; these modules
are not compiled, but what they call is.) Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from aiokprod.spark import keyed
from aiokprod.spark.encoder import ArrowValues

if not __package__:  # run as a path with -P: the checkout last, after the installed aiokprod
    sys.path.append(str(Path(__file__).resolve().parents[2]))
from benchmarks.cpu_timer import best_cpu_s
from benchmarks.spark.append import arrow_batches

ROWS = 10_000


def _per_row_ns(step: Callable[[], Any], rounds: int, calls: int = 200) -> float:
    return best_cpu_s(step, rounds, calls) / ROWS * 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--keys", default="string", choices=("none", "string", "binary"))
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    batch = arrow_batches(ROWS, args.size, ROWS, args.keys)[0]
    values = batch.column(0)
    steps: dict[str, Callable[[], Any]] = {}
    if args.keys == "none":
        column = ArrowValues(values)
        steps["encode (first plan)"] = lambda: column.encode_batches(0, 16_384, 1 << 20)
    else:
        keys = batch.column(1)
        if pa.types.is_string(keys.type):
            keys = keys.view(pa.binary())
        n = args.partitions
        of_row = keyed.partitions(keys, n)
        order = pa.array(np.argsort(of_row.astype(np.int16), kind="stable"))
        split = keyed.split_by_partition(values, keys, n)[1]
        steps["murmur2 + partition"] = lambda: keyed.partitions(keys, n)
        steps["stable sort"] = lambda: np.argsort(of_row.astype(np.int16), kind="stable")
        steps["take values"] = lambda: values.take(order)
        steps["take keys"] = lambda: keys.take(order)
        steps["split_by_partition (all)"] = lambda: keyed.split_by_partition(values, keys, n)
        steps["encode (first plan)"] = lambda: split.encode_batches(0, 16_384, 1 << 20)
    print(
        f"{ROWS:,} rows of {args.size} B, keys {args.keys}; CPU ns per row (best of {args.rounds})"
    )
    for name, step in steps.items():
        print(f"  {name:26} {_per_row_ns(step, args.rounds):8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
