"""Exponential backoff with jitter (KIP-580)."""

from __future__ import annotations

import random

import pytest

from aiokprod.backoff import BACKOFF_JITTER, backoff_ms


class FixedSpread(random.Random):
    """A random source whose ``uniform`` returns the low end, the middle or the high end."""

    def __init__(self, where: str) -> None:
        super().__init__(0)
        self.where = where

    def uniform(self, a: float, b: float) -> float:
        return {"low": a, "mid": (a + b) / 2, "high": b}[self.where]


@pytest.mark.parametrize(
    ("attempts", "expected"), [(1, 100), (2, 200), (3, 400), (4, 800), (5, 1000), (50, 1000)]
)
def test_doubles_per_attempt_up_to_the_cap(attempts: int, expected: int) -> None:
    assert backoff_ms(attempts, 100, 1000, FixedSpread("mid")) == expected


def test_jitter_spreads_twenty_percent() -> None:
    assert abs(BACKOFF_JITTER - 0.2) < 1e-12
    assert backoff_ms(1, 100, 1000, FixedSpread("low")) == 80
    assert backoff_ms(1, 100, 1000, FixedSpread("high")) == 120
    assert backoff_ms(3, 100, 1000, FixedSpread("low")) == 320


def test_never_above_max_even_with_jitter() -> None:
    assert backoff_ms(10, 100, 1000, FixedSpread("high")) == 1000
    assert backoff_ms(1, 100, 100, FixedSpread("high")) == 100
    rng = random.Random(1)
    for attempts in range(1, 40):
        value = backoff_ms(attempts, 100, 1000, rng)
        assert 0 <= value <= 1000
        base = min(100 * 2 ** (attempts - 1), 1000)
        assert value >= int(base * 0.8) - 1


def test_huge_attempt_counts_do_not_overflow() -> None:
    assert backoff_ms(10**6, 100, 1000, FixedSpread("low")) == 800


@pytest.mark.parametrize(("attempts", "initial"), [(0, 100), (-1, 100), (0, 0)])
def test_no_failures_no_wait(attempts: int, initial: int) -> None:
    assert backoff_ms(attempts, initial, 1000) == 0


def test_zero_initial_backoff_means_no_wait() -> None:
    assert backoff_ms(3, 0, 1000) == 0
