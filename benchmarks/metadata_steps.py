"""The CPU of each synchronous step of applying one large Metadata answer (issue 30).

Builds a Metadata v13 answer (3 replicas a partition, every partition led), then applies it
as the fetcher does - ``MetadataDecoder`` and ``MetadataState.update_steps``, the loop given
back at every ``yield`` - twice (a first answer, then the same again, as a periodic refresh),
and prints the number of steps, the longest one and their sum, in CPU time (``process_time``:
a busy machine's preemption does not inflate it, a garbage-collector pass does), and then
what the view adds to the garbage collector's work: the objects it tracks, and the CPU of a
full collection with the view held::

    .venv/bin/python -m benchmarks.metadata_steps
    .venv/bin/python -m benchmarks.metadata_steps --layouts 1x10000x10,10000x10x100

A layout is TOPICSxPARTITIONSxBROKERS. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import time

from aiokprod.internals.metadata import MetadataState
from aiokprod.protocol.messages.metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataResponse,
    MetadataTopic,
)
from aiokprod.protocol.metadata_fast import MetadataDecoder
from aiokprod.protocol.schema import encode_struct

VERSION = 13


def answer(topics: int, partitions: int, brokers: int) -> tuple[bytes, list[str]]:
    """The encoded answer's body and its topic names."""
    names = [f"topic-{t:05d}" for t in range(topics)]
    listed = []
    for name in names:
        parts = []
        for p in range(partitions):
            replicas = [(p + j) % brokers for j in range(min(3, brokers))]
            parts.append(
                MetadataPartition(
                    error_code=0,
                    partition_index=p,
                    leader_id=replicas[0],
                    leader_epoch=5,
                    replica_nodes=replicas,
                    isr_nodes=replicas,
                    offline_replicas=[],
                )
            )
        listed.append(MetadataTopic(error_code=0, name=name, partitions=parts))
    response = MetadataResponse(
        throttle_time_ms=0,
        brokers=[
            MetadataBroker(node_id=i, host=f"broker{i}.example", port=9092, rack=None)
            for i in range(brokers)
        ],
        cluster_id="c",
        controller_id=0,
        topics=listed,
    )
    out = bytearray()
    encode_struct(response, VERSION, True, out)
    return bytes(out), names


def apply_in_steps(state: MetadataState, body: bytes, names: list[str]) -> tuple[int, float, float]:
    """Steps, the longest (s of CPU) and their sum, applying ``body`` to ``state``."""
    began = last = time.process_time()
    decoder = MetadataDecoder(body, VERSION)
    longest = 0.0
    steps = 0
    for _ in state.update_steps(decoder, names, 0):
        now = time.process_time()
        longest = max(longest, now - last)
        last = now
        steps += 1
    now = time.process_time()
    return steps + 1, max(longest, now - last), now - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layouts", default="1x10000x10,1000x100x100,10000x10x100")
    args = parser.parse_args()
    for layout in args.layouts.split(","):
        topics, partitions, brokers = (int(n) for n in layout.split("x"))
        body, names = answer(topics, partitions, brokers)
        gc.collect()
        tracked = len(gc.get_objects())
        state = MetadataState(300_000, 300_000, 100)
        for label in ("first", "again"):
            steps, longest, total = apply_in_steps(state, body, names)
            print(
                f"{topics:,} topics x {partitions:,} partitions, {brokers} brokers, {label}: "
                f"{len(body) / 1e3:,.0f} KB, {steps} steps, longest {longest * 1e3:.1f} ms CPU, "
                f"all {total * 1e3:.0f} ms CPU",
                flush=True,
            )
        began = time.process_time()
        gc.collect()
        full_s = time.process_time() - began
        print(
            f"    the view: {len(gc.get_objects()) - tracked:,} more objects tracked by the "
            f"garbage collector, a full collection {full_s * 1e3:.1f} ms CPU",
            flush=True,
        )


if __name__ == "__main__":
    main()
