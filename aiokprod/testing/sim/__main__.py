"""``python -m aiokprod.testing.sim --seeds N [--start S] [--seed X] [--verbose]``.

Runs seeded simulations of the producer against simulated brokers on virtual time and prints
every failing seed with a one-line replay command. Exit status 1 if any seed failed.
"""

from __future__ import annotations

import argparse
import sys
import time

from aiokprod.testing.sim.runner import RunResult, format_failure, run_seed


def main(argv: list[str] | None = None) -> int:
    """The command line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m aiokprod.testing.sim",
        description="Deterministic simulation of the producer under injected faults.",
    )
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, default=None, help="run (replay) this one seed")
    parser.add_argument(
        "--verbose", action="store_true", help="print the workload, faults and event trace"
    )
    parser.add_argument(
        "--max-failures", type=int, default=20, help="stop after this many failing seeds"
    )
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    started = time.perf_counter()
    failures: list[RunResult] = []
    runs = records = 0
    for seed in seeds:
        result = run_seed(seed, keep_trace=args.verbose)
        runs += 1
        records += result.records
        if args.verbose:
            _print_verbose(result)
        if not result.ok:
            failures.append(result)
            print(format_failure(result), flush=True)
            if len(failures) >= args.max_failures:
                print(f"stopping after {len(failures)} failing seeds")
                break
    elapsed = time.perf_counter() - started
    print(
        f"{runs} seed(s), {records} records, {len(failures)} failing, {elapsed:.1f} s"
        + (f": {' '.join(str(f.seed) for f in failures)}" if failures else "")
    )
    return 1 if failures else 0


def _print_verbose(result: RunResult) -> None:
    print(f"seed {result.seed}: digest {result.digest}, {result.virtual_ms} virtual ms")
    print("workload:\n" + result.workload)
    print("faults:\n" + result.faults)
    print("trace:")
    for line in result.trace:
        print("  " + line)
    print(f"records {result.records}, acknowledged {result.acked}")


if __name__ == "__main__":
    sys.exit(main())
