"""Exponential backoff with jitter (KIP-580): the one formula for reconnects and retries."""

from __future__ import annotations

import random

#: Each failure doubles the wait (CommonClientConfigs.RETRY_BACKOFF_EXP_BASE).
BACKOFF_MULTIPLIER = 2
#: The wait is spread by +/-20% so that clients that failed together do not retry together.
BACKOFF_JITTER = 0.2


def backoff_ms(
    attempts: int, initial_ms: int, max_ms: int, rng: random.Random | None = None
) -> int:
    """How long to wait after ``attempts`` consecutive failures (``attempts`` >= 1).

    ``initial_ms * 2**(attempts-1)``, capped at ``max_ms``, then spread by +/-20%; never more
    than ``max_ms`` and never negative.
    """
    if attempts < 1 or initial_ms <= 0:
        return max(initial_ms, 0) if attempts >= 1 else 0
    exponent = min(attempts - 1, 62)
    base = min(initial_ms * BACKOFF_MULTIPLIER**exponent, max_ms)
    spread = (rng or random).uniform(1 - BACKOFF_JITTER, 1 + BACKOFF_JITTER)
    return max(0, min(int(base * spread), max_ms))
