"""The virtual-time loop: time jumps to the next timer, a deadlock fails instead of hanging."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from aiokprod.testing.sim.loop import DeadlockError, LivelockError, VirtualLoop

T = TypeVar("T")


def run(loop: VirtualLoop, coro: Coroutine[Any, Any, T]) -> T:
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def test_sleeping_jumps_virtual_time_exactly() -> None:
    loop = VirtualLoop(start_s=100.0)

    async def main() -> float:
        start = loop.time()
        await asyncio.sleep(3600)  # an hour of virtual time
        return loop.time() - start

    assert run(loop, main()) == pytest.approx(3600, abs=1e-6)


def test_timers_fire_in_time_order() -> None:
    loop = VirtualLoop()
    fired: list[tuple[str, int]] = []
    origin = loop.time_ms()

    async def main() -> None:
        def fire(name: str) -> None:
            fired.append((name, loop.time_ms() - origin))

        for name, delay in (("c", 0.3), ("a", 0.1), ("b", 0.2)):
            loop.call_later(delay, fire, name)
        await asyncio.sleep(1)

    run(loop, main())
    assert fired == [("a", 100), ("b", 200), ("c", 300)]


def test_asyncio_timeout_uses_virtual_time() -> None:
    loop = VirtualLoop()

    async def main() -> bool:
        try:
            async with asyncio.timeout(5):
                await asyncio.sleep(10)
        except TimeoutError:
            return True
        return False

    assert run(loop, main())
    # wall-clock seconds did not pass: the virtual clock did


def test_a_deadlock_is_reported_not_hung() -> None:
    loop = VirtualLoop()

    async def main() -> None:
        await loop.create_future()  # nobody will ever resolve it

    with pytest.raises(DeadlockError):
        run(loop, main())


def test_a_busy_loop_in_zero_time_is_a_livelock() -> None:
    loop = VirtualLoop(max_steps=1000)

    async def main() -> None:
        for _ in range(10**9):  # bounded, but far past max_steps
            await asyncio.sleep(0)

    with pytest.raises(LivelockError):
        run(loop, main())


def test_starvation_jumps_the_clock_before_ready_callbacks() -> None:
    loop = VirtualLoop()
    jumps = iter([0.0, 250.0] + [0.0] * 100)
    loop.starvation = lambda: next(jumps)

    async def main() -> float:
        start = loop.time()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return loop.time() - start

    assert run(loop, main()) == pytest.approx(0.25, abs=1e-6)
