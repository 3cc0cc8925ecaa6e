"""The exactly-once protocol, model-checked (docs/spark.md, "Model-checked").

The model (aiokprod/testing/eos_model) runs the sink's real decision code - the committer
with its admin calls answered by a model of Kafka's transaction coordinator, a task's steps
with its producer's - under Spark's scheduling: attempts, retries, speculative copies,
give-ups, restarts, crashes at every step, lost answers, transaction timeouts.

- Every run of the configurations of ``EXHAUSTIVE`` is explored, and every invariant holds.
- Seeded random runs of larger configurations hold too (``make model-check`` explores larger
  configurations whole).
- The same checker finds issue 41's defects in the protocol as it was (``eos_legacy``): the
  traces it found are kept and replayed here, and a search finds them again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from eos_legacy.adapter import LegacyAdapter

from aiokprod.testing.eos_model.adapter import SinkAdapter
from aiokprod.testing.eos_model.configs import EXHAUSTIVE, WALKS, Named
from aiokprod.testing.eos_model.explore import explore, replay, walk
from aiokprod.testing.eos_model.invariants import check
from aiokprod.testing.eos_model.spark import Config

TRACES = json.loads((Path(__file__).parent / "eos_legacy" / "traces.json").read_text())


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    """The committer's warnings (completing a decision, aborting leftovers) are expected."""
    logger = logging.getLogger("aiokprod")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


@pytest.mark.parametrize("named", EXHAUSTIVE, ids=lambda n: n.name)
def test_every_run_keeps_every_invariant(named: Named) -> None:
    result = explore(named.config, SinkAdapter, max_seconds=600)
    assert result.violations == [], result.violations[0].describe()
    assert result.complete, result.summary()
    assert result.runs > 10


@pytest.mark.parametrize("named", WALKS, ids=lambda n: n.name)
def test_random_runs_of_larger_configurations_keep_every_invariant(named: Named) -> None:
    result = walk(named.config, SinkAdapter, range(300))
    assert result.violations == [], result.violations[0].describe()
    assert result.runs == 300


@pytest.mark.parametrize("name", sorted(TRACES))
def test_the_old_protocols_defects_replay(name: str) -> None:
    case = TRACES[name]
    model, trace = replay(Config(**case["config"]), LegacyAdapter, case["choices"])
    try:
        problems = check(model)
    finally:
        model.scheduler.close()
    assert trace == case["trace"]
    assert any(case["expect"] in p for p in problems), problems


def test_a_search_finds_the_old_protocols_straggler() -> None:
    config = Config(**TRACES["3-straggler-left-open"]["config"])
    result = explore(config, LegacyAdapter, max_seconds=120)
    assert result.violations, result.summary()
    assert any("left open" in p for p in result.violations[0].problems)


def test_the_new_protocol_survives_the_old_ones_traces_configurations() -> None:
    # Where the old protocol failed (the configurations of the kept traces), bounded here:
    # make model-check explores them whole.
    for name, case in sorted(TRACES.items()):
        result = explore(Config(**case["config"]), SinkAdapter, max_states=3000)
        assert result.violations == [], f"{name}: {result.violations[0].describe()}"
