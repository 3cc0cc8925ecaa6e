"""Micro-benchmark: building v2 record batches, ours against aiokafka's and kafka-python's.

Appends N records (100-byte values; unkeyed, then with 16-byte keys) into 16 KiB batches the
way a producer's accumulator does: append until the builder refuses the record, then finish
the batch (close + stamp the idempotence fields for ours, build() for the others, which take
the producer id/epoch/sequence at construction) and start a new builder with that record.
Every implementation gets the same records; the best of ``--repeat`` runs is reported.

Not a test: it asserts nothing about speed. Run it with::

    .venv/bin/python benchmarks/bench_record_builder.py
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

from aiokprod.protocol.record_reader import read_record_batches
from aiokprod.protocol.records import RecordBatchBuilder

with warnings.catch_warnings():
    # kafka-python 3.x loads its JSON schemas through deprecated importlib.resources calls.
    warnings.simplefilter("ignore", DeprecationWarning)
    import aiokafka
    import aiokafka.record.default_records as aiokafka_records
    import kafka
    import kafka.record.default_records as kafka_records

PRODUCER_ID = 4242
PRODUCER_EPOCH = 3
TIMESTAMP = 1_700_000_000_000

Run = Callable[[list[bytes | None], bytes, int], tuple[int, int]]


def run_ours(keys: list[bytes | None], value: bytes, batch_size: int) -> tuple[int, int]:
    """Returns (batches, total bytes)."""
    builder = RecordBatchBuilder()
    append = builder.try_append
    sequence = 0
    batches = 0
    total = 0
    for key in keys:
        if append(TIMESTAMP, key, value, None, batch_size) < 0:
            batch = builder.close()
            batch.stamp(PRODUCER_ID, PRODUCER_EPOCH, sequence)
            sequence += batch.record_count
            batches += 1
            total += len(batch.data)
            builder = RecordBatchBuilder()
            append = builder.try_append
            append(TIMESTAMP, key, value, None, batch_size)
    batch = builder.close()
    batch.stamp(PRODUCER_ID, PRODUCER_EPOCH, sequence)
    return batches + 1, total + len(batch.data)


def make_their_run(builder_cls: Any) -> Run:
    def run(keys: list[bytes | None], value: bytes, batch_size: int) -> tuple[int, int]:
        sequence = 0
        offset = 0
        batches = 0
        total = 0
        builder = builder_cls(2, 0, 0, PRODUCER_ID, PRODUCER_EPOCH, sequence, batch_size)
        append = builder.append
        headers: list[tuple[str, bytes | None]] = []
        for key in keys:
            if append(offset, TIMESTAMP, key, value, headers) is None:
                data = builder.build()
                sequence += offset
                batches += 1
                total += len(data)
                builder = builder_cls(2, 0, 0, PRODUCER_ID, PRODUCER_EPOCH, sequence, batch_size)
                append = builder.append
                offset = 0
                append(offset, TIMESTAMP, key, value, headers)
            offset += 1
        data = builder.build()
        return batches + 1, total + len(data)

    return run


def implementations() -> list[tuple[str, Run]]:
    c_builder = aiokafka_records.DefaultRecordBatchBuilder
    kind = "C extension" if "_crecords" in c_builder.__module__ else "pure Python fallback"
    result: list[tuple[str, Run]] = [
        ("aiokprod RecordBatchBuilder", run_ours),
        (f"aiokafka {aiokafka.__version__} default ({kind})", make_their_run(c_builder)),
    ]
    py_builder = getattr(aiokafka_records, "_DefaultRecordBatchBuilderPy", None)
    if py_builder is not None and py_builder is not c_builder:
        result.append((f"aiokafka {aiokafka.__version__} pure Python", make_their_run(py_builder)))
    result.append(
        (
            f"kafka-python {kafka.__version__} (pure Python)",
            make_their_run(kafka_records.DefaultRecordBatchBuilder),
        )
    )
    return result


def check_output(records: int, keys: list[bytes | None], value: bytes, batch_size: int) -> None:
    """Our batches decode (CRC included) to the records that went in."""
    blob = bytearray()
    builder = RecordBatchBuilder()
    sequence = 0
    for key in keys[:2000]:
        if builder.try_append(TIMESTAMP, key, value, None, batch_size) < 0:
            batch = builder.close()
            batch.stamp(PRODUCER_ID, PRODUCER_EPOCH, sequence)
            sequence += batch.record_count
            blob += batch.data
            builder = RecordBatchBuilder()
            builder.try_append(TIMESTAMP, key, value, None, batch_size)
    batch = builder.close()
    batch.stamp(PRODUCER_ID, PRODUCER_EPOCH, sequence)
    blob += batch.data
    decoded = [r for b in read_record_batches(blob) for r in b.records]
    assert [r.key for r in decoded] == keys[:2000]
    assert all(r.value == value for r in decoded)
    del records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--key-size", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=16_384)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    value = bytes(range(256))[: args.value_size].ljust(args.value_size, b"v")
    scenarios: dict[str, list[bytes | None]] = {
        "unkeyed": [None] * args.records,
        f"keyed ({args.key_size}-byte keys)": [
            (b"key-%012d" % (i % 100_000)).ljust(args.key_size, b"k")[: args.key_size]
            for i in range(args.records)
        ],
    }
    c_used = aiokafka_records.DefaultRecordBatchBuilder.__module__
    print(f"Python {sys.version.split()[0]} on {platform.machine()} ({platform.system()})")
    print(
        f"{args.records:,} records, {args.value_size}-byte values, "
        f"{args.batch_size:,}-byte batches, best of {args.repeat}"
    )
    print(f"aiokafka DefaultRecordBatchBuilder is {c_used}")
    print(f"  (C extension in use: {'_crecords' in c_used})")
    print()
    for scenario, keys in scenarios.items():
        check_output(args.records, keys, value, args.batch_size)
        print(f"== {scenario}")
        print(f"  {'implementation':<44} {'records/s':>12} {'best s':>8} {'batches':>8}")
        for name, run in implementations():
            best = float("inf")
            batches = 0
            for _ in range(args.repeat):
                gc.collect()
                start = time.perf_counter()
                batches, _total = run(keys, value, args.batch_size)
                best = min(best, time.perf_counter() - start)
            rate = args.records / best
            print(f"  {name:<44} {rate:>12,.0f} {best:>8.3f} {batches:>8,}")
        print()


if __name__ == "__main__":
    main()
