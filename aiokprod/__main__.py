"""``python -m aiokprod`` and the ``aiokprod`` console script: see :mod:`aiokprod.cli`."""

from __future__ import annotations

import sys

from aiokprod.cli import main as _cli_main

__all__ = ["main"]


def main() -> int:
    """Run the command line with ``sys.argv`` and return its exit code."""
    return _cli_main()


if __name__ == "__main__":
    sys.exit(main())
