"""The best-of-rounds CPU timer the micro-benchmarks share (``produce_frame``, ``keyed_split``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def best_cpu_s(step: Callable[[], Any], rounds: int, calls: int) -> float:
    """CPU seconds per call of ``step``: the best of ``rounds`` rounds of ``calls`` calls.

    The process's CPU time (``time.process_time``), so other processes do not count; one
    call before the first round warms it up.
    """
    step()
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(calls):
            step()
        best = min(best, (time.process_time() - started) / calls)
    return best
