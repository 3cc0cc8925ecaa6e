"""``python -m benchmarks``: run the benchmark suite (see ``--help``)."""

from benchmarks.harness import main

if __name__ == "__main__":
    raise SystemExit(main())
