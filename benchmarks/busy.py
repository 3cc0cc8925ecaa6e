"""One core kept busy while latency is measured: how a machine with other work looks.

On an idle machine every wake-up of a sleeping thread is slow (an idle virtual CPU has to
be woken), and a round trip of any client is mostly those wake-ups; with other work on
the machine they are quick, and what a client's own code costs on its critical path shows
(docs/benchmarks.md, "Third round"). The busy loop runs at ``nice -n 19``, so it yields to
every other process, and it ends by itself after :data:`BUSY_LIMIT_S` whatever happens to
the process that started it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: The busy loop ends by itself after this long.
BUSY_LIMIT_S = 3600

#: How the results say it (the suite's report, ``latency_pairs.py``).
DESCRIPTION = "one core kept busy by a `nice -n 19` loop (`--busy`)"


@contextmanager
def one_core_busy(enabled: bool = True) -> Iterator[None]:
    """Keep one core busy for the ``with`` block (nothing when not ``enabled``)."""
    if not enabled:
        yield
        return
    loop = "\n".join(
        (
            "import time",
            f"end = time.monotonic() + {BUSY_LIMIT_S}",
            "while time.monotonic() < end: pass",
        )
    )
    busy = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", loop])
    try:
        yield
    finally:
        busy.kill()
        busy.wait()
