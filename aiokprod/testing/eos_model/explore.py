"""Exhaustive exploration of the model: every choice at every step, states seen once.

Depth-first over the choices of :meth:`SparkModel.moves`. A run cannot be copied (its actors
are live coroutines), so a sibling branch is reached by replaying its choices from a fresh
model; a state already explored (the same Kafka, Spark and budgets, and every actor having
received the same answers in the same order — the code is deterministic, so that is its
whole state) is not explored again. Two steps of different actors that touch different
things therefore lead to one state whichever comes first, which keeps the search small
enough to be complete for small configurations.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from aiokprod.testing.eos_model.invariants import check
from aiokprod.testing.eos_model.spark import Adapter, Config, SparkModel

__all__ = ["Exploration", "Violation", "explore", "replay"]


@dataclasses.dataclass(frozen=True)
class Violation:
    """A run that broke an invariant, with the choices that reproduce it."""

    problems: tuple[str, ...]
    choices: tuple[int, ...]
    trace: tuple[str, ...]

    def describe(self) -> str:
        """The problems and the trace, one step a line."""
        lines = [*self.problems, f"choices: {list(self.choices)}", "trace:"]
        lines.extend(f"  {i:3d}. {step}" for i, step in enumerate(self.trace))
        return "\n".join(lines)


@dataclasses.dataclass
class Exploration:
    """What an exploration covered and found."""

    config: Config
    states: int = 0
    runs: int = 0
    replays: int = 0
    deepest: int = 0
    complete: bool = True
    seconds: float = 0.0
    violations: list[Violation] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        """One line."""
        return (
            f"{self.config.describe()}: {self.states} states, {self.runs} complete runs, "
            f"deepest {self.deepest} steps, {'complete' if self.complete else 'cut short'}, "
            f"{len(self.violations)} violation(s), {self.seconds:.1f} s"
        )


def replay(
    config: Config, adapter: Callable[[], Adapter], choices: Sequence[int]
) -> tuple[SparkModel, list[str]]:
    """A fresh model with ``choices`` applied; also the trace of their labels."""
    model = SparkModel(config, adapter())
    trace = []
    for choice in choices:
        move = model.moves()[choice]
        trace.append(move.label)
        move.act()
    return model, trace


def explore(
    config: Config,
    adapter: Callable[[], Adapter],
    *,
    max_states: int = 1_000_000,
    max_violations: int = 1,
    max_seconds: float = float("inf"),
) -> Exploration:
    """Explore every run of ``config`` (up to the limits); stop at ``max_violations``.

    (Forking a copy of the process for each branch instead of replaying it was tried: on
    this project's busy 2-core machine each fork waits to be scheduled, and it explored
    5x fewer states per second.)
    """
    result = Exploration(config)
    started = time.perf_counter()
    deadline = started + max_seconds
    visited: set[int] = set()
    found: list[tuple[tuple[str, ...], tuple[int, ...]]] = []
    # (choices so far, the live model at that point if this branch still holds it)
    stack: list[tuple[tuple[int, ...], SparkModel | None]] = [((), None)]
    while stack:
        if (
            len(found) >= max_violations
            or result.states >= max_states
            or time.perf_counter() > deadline
        ):
            result.complete = False
            break
        choices, model = stack.pop()
        if model is None:
            model, _ = replay(config, adapter, choices)
            result.replays += 1
        key = hash(model.digest())
        if key in visited:
            model.scheduler.close()
            continue
        visited.add(key)
        result.states += 1
        result.deepest = max(result.deepest, len(choices))
        moves = model.moves()
        if not moves:
            result.runs += 1
            problems = check(model)
            model.scheduler.close()
            if problems:
                found.append((tuple(problems), choices))
            continue
        # Siblings are replayed later; the first child continues on this model.
        for index in range(len(moves) - 1, 0, -1):
            stack.append(((*choices, index), None))
        moves[0].act()
        stack.append(((*choices, 0), model))
    for _, model in stack:
        if model is not None:
            model.scheduler.close()
    result.seconds = time.perf_counter() - started
    result.violations = [
        Violation(problems, choices, tuple(replay_trace(config, adapter, choices)))
        for problems, choices in found
    ]
    return result


def replay_trace(
    config: Config, adapter: Callable[[], Adapter], choices: Sequence[int]
) -> list[str]:
    """The labels of ``choices`` (a violation's trace)."""
    model, trace = replay(config, adapter, choices)
    model.scheduler.close()
    return trace


def walk(
    config: Config,
    adapter: Callable[[], Adapter],
    seeds: Sequence[int],
    *,
    max_violations: int = 1,
) -> Exploration:
    """Random runs of ``config``, one per seed.

    A quick look at configurations too large to explore whole; a violation found is replayed
    by its choices like any other.
    """
    import random

    result = Exploration(config, complete=False)
    started = time.perf_counter()
    for seed in seeds:
        rng = random.Random(seed)
        model = SparkModel(config, adapter())
        choices: list[int] = []
        while moves := model.moves():
            choice = rng.randrange(len(moves))
            choices.append(choice)
            moves[choice].act()
        result.runs += 1
        result.deepest = max(result.deepest, len(choices))
        problems = check(model)
        model.scheduler.close()
        if problems:
            trace = replay_trace(config, adapter, choices)
            result.violations.append(Violation(tuple(problems), tuple(choices), tuple(trace)))
            if len(result.violations) >= max_violations:
                break
    result.seconds = time.perf_counter() - started
    return result
