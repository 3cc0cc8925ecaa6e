"""The configurations the model checker explores, each named, with why it is there.

``make model-check`` explores :data:`LONG` and walks :data:`WALKS`; ``make test`` explores
:data:`EXHAUSTIVE` (tests/model/test_eos_model.py).
"""

from __future__ import annotations

import dataclasses

from aiokprod.testing.eos_model.spark import Config

__all__ = ["EXHAUSTIVE", "LONG", "WALKS", "Named"]


@dataclasses.dataclass(frozen=True)
class Named:
    """A configuration and what it is for."""

    name: str
    config: Config
    why: str


#: Explored whole in ``make test`` (seconds each here).
EXHAUSTIVE = (
    Named(
        "batch-straggler",
        Config(
            streaming=False,
            partitions=1,
            writes=1,
            attempts=2,
            give_ups=1,
            crashes=0,
            preemptions=1,
        ),
        "a retry or speculative copy racing the commit and the abort (issue 41's (2), (3))",
    ),
    Named(
        "batch-crash",
        Config(
            streaming=False,
            partitions=2,
            writes=1,
            attempts=1,
            give_ups=1,
            crashes=1,
            preemptions=0,
        ),
        "every crash point and lost answer of a two-partition job, the driver's included",
    ),
    Named(
        "batch-next-job",
        Config(
            streaming=False,
            partitions=1,
            writes=2,
            attempts=2,
            give_ups=1,
            crashes=0,
            preemptions=0,
        ),
        "a straggler of a failed job meeting the next job on the prefix (issue 41's (3))",
    ),
    Named(
        "stream-replay",
        Config(
            streaming=True,
            partitions=1,
            writes=1,
            attempts=1,
            give_ups=0,
            crashes=1,
            restarts=1,
            ticks=2,
            timeout_ticks=2,
            preemptions=0,
        ),
        "the driver dying mid-commit, transactions timing out, the replay (issue 41's (1))",
    ),
)

#: Explored whole by ``make model-check`` (minutes to an hour here).
LONG = (
    Named(
        "batch-2x1x2-crash",
        Config(
            streaming=False,
            partitions=2,
            writes=1,
            attempts=2,
            give_ups=1,
            crashes=1,
            preemptions=1,
        ),
        "every crash point and lost answer of a job with stragglers",
    ),
    Named(
        "batch-2x2x2",
        Config(
            streaming=False,
            partitions=2,
            writes=2,
            attempts=2,
            give_ups=1,
            crashes=1,
            preemptions=1,
        ),
        "two jobs on a prefix, stragglers and a crash",
    ),
    Named(
        "stream-2x2x2",
        Config(
            streaming=True,
            partitions=2,
            writes=2,
            attempts=2,
            give_ups=1,
            crashes=1,
            restarts=1,
            preemptions=1,
        ),
        "two micro-batches, stragglers, a stop, a crash and a restart",
    ),
    Named(
        "stream-timeouts",
        Config(
            streaming=True,
            partitions=2,
            writes=1,
            attempts=1,
            give_ups=0,
            crashes=1,
            restarts=1,
            ticks=4,
            timeout_ticks=3,
            preemptions=1,
        ),
        "decided transactions timing out around a driver crash",
    ),
    Named(
        "batch-timeouts",
        Config(
            streaming=False,
            partitions=2,
            writes=2,
            attempts=1,
            give_ups=1,
            crashes=1,
            ticks=4,
            timeout_ticks=3,
            preemptions=1,
        ),
        "transactions timing out before and after a job's decision",
    ),
)

#: Random runs (seeded) of configurations too large to explore whole.
WALKS = (
    Named(
        "stream-wide",
        Config(
            streaming=True,
            partitions=2,
            writes=2,
            attempts=2,
            give_ups=1,
            crashes=2,
            restarts=2,
            ticks=6,
            timeout_ticks=3,
        ),
        "everything at once, streaming",
    ),
    Named(
        "batch-wide",
        Config(
            streaming=False,
            partitions=2,
            writes=2,
            attempts=2,
            give_ups=1,
            crashes=2,
            ticks=6,
            timeout_ticks=3,
        ),
        "everything at once, batch jobs",
    ),
)
