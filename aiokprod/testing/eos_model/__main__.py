"""``python -m aiokprod.testing.eos_model [--long] [--walks N] [--max-minutes M]``.

Explores the exactly-once protocol's configurations (``configs.py``): the ``make test`` set,
or with ``--long`` the larger ones of ``make model-check``, then ``--walks`` seeded random
runs of the widest. Prints each configuration's explored states and any violation with the
trace that reproduces it. Exit status 1 if an invariant broke.
"""

from __future__ import annotations

import argparse
import logging
import sys

from aiokprod.testing.eos_model.adapter import SinkAdapter
from aiokprod.testing.eos_model.configs import EXHAUSTIVE, LONG, WALKS
from aiokprod.testing.eos_model.explore import Exploration, explore, walk


def main(argv: list[str] | None = None) -> int:
    """The command line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m aiokprod.testing.eos_model",
        description="Model-check the Spark sink's exactly-once protocol.",
    )
    parser.add_argument("--long", action="store_true", help="the larger configurations too")
    parser.add_argument("--walks", type=int, default=0, help="random runs of the widest ones")
    parser.add_argument(
        "--max-minutes", type=float, default=60.0, help="at most this long per configuration"
    )
    args = parser.parse_args(argv)
    logging.getLogger("aiokprod").setLevel(logging.CRITICAL)  # the committer's expected warnings
    results: list[Exploration] = []
    for named in (*EXHAUSTIVE, *(LONG if args.long else ())):
        result = explore(named.config, SinkAdapter, max_seconds=args.max_minutes * 60)
        print(f"{named.name}: {result.summary()}", flush=True)
        results.append(result)
    for named in WALKS if args.walks else ():
        result = walk(named.config, SinkAdapter, range(args.walks))
        print(f"{named.name} (walks): {result.summary()}", flush=True)
        results.append(result)
    for result in results:
        for violation in result.violations:
            print(f"\nVIOLATION in {result.config.describe()}:\n{violation.describe()}")
    return 1 if any(r.violations for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
