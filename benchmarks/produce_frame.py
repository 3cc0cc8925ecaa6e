"""``python -m benchmarks.produce_frame``: framing one Produce request, no socket.

CPU microseconds per request of the framing a connection does before writing (header, body,
every batch's records: ``protocol.connection._encode_frame``), for ``--batches`` batches of
``--batch-bytes`` each (default: six 16 KiB batches, one per partition of a 6-partition
topic, as the Spark benchmark's requests carry). Best of ``--rounds``. Use it to compare
builds or commits::

    .venv/bin/python -m benchmarks.produce_frame
    .venv-mypyc/bin/python -P benchmarks/produce_frame.py

(``-P``: the compiled install, not the source tree of the current directory.) Not a test:
it calls a private function and asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import aiokprod.compiled
from aiokprod.protocol.api import PRODUCE
from aiokprod.protocol.connection import _encode_frame
from aiokprod.protocol.produce_fast import partition_data, produce_request

if not __package__:  # run as a path with -P: the checkout last, after the installed aiokprod
    sys.path.append(str(Path(__file__).resolve().parents[1]))
from benchmarks.cpu_timer import best_cpu_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--batch-bytes", type=int, default=16_384)
    parser.add_argument("--version", type=int, default=9, help="Produce version")
    parser.add_argument("--calls", type=int, default=2_000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    batches = [bytearray(b"x" * args.batch_bytes) for _ in range(args.batches)]
    parts = [partition_data(i, batch) for i, batch in enumerate(batches)]
    request = produce_request(None, -1, 30_000, {"topic": parts})
    for _ in range(200):  # warm
        _encode_frame(PRODUCE, args.version, 1, b"bench", request)
    best = best_cpu_s(
        lambda: _encode_frame(PRODUCE, args.version, 1, b"bench", request), args.rounds, args.calls
    )
    compiled = len(aiokprod.compiled.compiled_modules())
    build = f"compiled build, {compiled} modules" if compiled else "pure build"
    print(
        f"{args.batches} x {args.batch_bytes:,} B, Produce v{args.version}: "
        f"{best * 1e6:.1f} us per request (CPU, best of {args.rounds}; {build})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
