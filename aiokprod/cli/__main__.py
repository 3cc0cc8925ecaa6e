"""``python -m aiokprod.cli``: the same command as ``python -m aiokprod``."""

from __future__ import annotations

import sys

from aiokprod.cli import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
