"""PassTimer: when the sender loop's sleep ends, on virtual time (the simulator's loop).

A sleep ends at its delay, at a wakeup, or at a pass planned earlier (``reschedule``, or
``ran`` after a pass ``send_and_wait`` ran itself); ``ran`` may also plan the next pass later.
The timer is moved lazily: planning a pass and re-planning it in the same loop turn (what
every ``send_and_wait`` does) must not cancel and re-schedule the loop's timer each time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiokprod.clock import LoopClock
from aiokprod.internals.pass_timer import PassTimer
from aiokprod.testing.sim.loop import VirtualLoop

#: What ``asyncio.sleep`` hands ``call_later`` (its timers are not the PassTimer's).
SLEEP_CALLBACK = getattr(asyncio.futures, "_set_result_unless_cancelled")  # noqa: B009


def sleep_ends_at(
    delay_ms: int, meanwhile: Callable[[PassTimer, LoopClock], Awaitable[None]]
) -> int:
    """Start ``sleep(now, delay_ms)``, run ``meanwhile``; the ms (from the start) it ended."""
    loop = VirtualLoop()
    clock = LoopClock(loop)
    timer = PassTimer(clock)
    start = clock.monotonic_ms()

    async def main() -> int:
        sleeper = asyncio.ensure_future(timer.sleep(clock.monotonic_ms(), delay_ms))
        await asyncio.sleep(0)  # the sleeper is waiting now
        await meanwhile(timer, clock)
        await sleeper
        return clock.monotonic_ms() - start

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


async def nothing(timer: PassTimer, clock: LoopClock) -> None:
    return None


def at(ms: int, action: Callable[[PassTimer, int], None]) -> Any:
    """``meanwhile``: at ``ms`` after the start, ``action(timer, now_ms)``."""

    async def run(timer: PassTimer, clock: LoopClock) -> None:
        await asyncio.sleep(ms / 1000)
        action(timer, clock.monotonic_ms())

    return run


def test_a_sleep_ends_at_its_delay() -> None:
    assert sleep_ends_at(50, nothing) == 50


def test_a_wakeup_ends_it_at_once() -> None:
    assert sleep_ends_at(1000, at(10, lambda t, now: t.wakeup())) == 10


def test_reschedule_only_brings_the_pass_forward() -> None:
    assert sleep_ends_at(1000, at(10, lambda t, now: t.reschedule(now, 5))) == 15
    assert sleep_ends_at(100, at(10, lambda t, now: t.reschedule(now, 500))) == 100


def test_ran_plans_the_next_pass_later_as_well_as_earlier() -> None:
    assert sleep_ends_at(100, at(10, lambda t, now: t.ran(now, 300))) == 310
    assert sleep_ends_at(1000, at(10, lambda t, now: t.ran(now, 20))) == 30


def test_a_linger_deadline_then_send_and_waits_own_pass_does_not_end_the_sleep() -> None:
    def send_and_wait(timer: PassTimer, now: int) -> None:
        timer.reschedule(now, 0)  # linger_ms=0: the new batch is due now
        timer.ran(now, 500)  # ... but send_and_wait's own pass sent it

    assert sleep_ends_at(1000, at(10, send_and_wait)) == 510


def test_send_and_wait_after_send_and_wait_moves_the_loops_timer_rarely() -> None:
    loop = VirtualLoop()
    clock = LoopClock(loop)
    timer = PassTimer(clock)
    timers = 0
    call_later = loop.call_later

    def counted(delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        nonlocal timers
        if callback is not SLEEP_CALLBACK:  # not asyncio.sleep's
            timers += 1
        return call_later(delay, callback, *args)

    loop.call_later = counted  # type: ignore[method-assign,assignment]

    async def main() -> bool:
        sleeper = asyncio.ensure_future(timer.sleep(clock.monotonic_ms(), 50))
        await asyncio.sleep(0)
        for _ in range(100):  # a send_and_wait each ms, each answered before the next
            await asyncio.sleep(0.001)
            now = clock.monotonic_ms()
            timer.reschedule(now, 0)
            timer.ran(now, 50)
        slept_through = not sleeper.done()
        timer.wakeup()
        await sleeper
        return slept_through

    try:
        assert loop.run_until_complete(main())  # no pass was due in those 100 ms
    finally:
        loop.close()
    # The first sleep's timer, then one re-arm per early firing (every 50 ms at most): not
    # the two per send_and_wait that cancelling and re-scheduling cost.
    assert timers <= 4, timers


def test_a_hold_leaves_the_holders_deadline_to_its_pass_without_a_loop_turn() -> None:
    loop = VirtualLoop()
    clock = LoopClock(loop)
    timer = PassTimer(clock)
    callbacks = 0
    call_soon = loop.call_soon

    def counted(callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:
        nonlocal callbacks
        callbacks += 1
        return call_soon(callback, *args, context=context)

    async def main() -> int:
        nonlocal callbacks
        start = clock.monotonic_ms()
        sleeper = asyncio.ensure_future(timer.sleep(start, 1000))
        await asyncio.sleep(0.01)
        loop.call_soon = counted  # type: ignore[method-assign,assignment]
        now = clock.monotonic_ms()
        timer.hold()  # what send_and_wait does around its append and its pass
        timer.reschedule(now, 0)  # linger_ms=0: the new batch is due now
        timer.ran(now, 2000)  # ... and the pass sent it (the next is due later)
        timer.release()
        scheduled = callbacks  # before the loop runs anything
        loop.call_soon = call_soon  # type: ignore[method-assign]
        await sleeper
        assert clock.monotonic_ms() - start == 2010
        return scheduled

    try:
        # Without the hold the deadline schedules a callback to re-arm the timer: a loop turn.
        assert loop.run_until_complete(main()) == 0
    finally:
        loop.close()


def test_a_hold_that_no_pass_ends_plans_what_was_asked_on_release() -> None:
    def held(timer: PassTimer, now: int) -> None:
        timer.hold()
        timer.reschedule(now, 5)
        timer.release()  # the append failed, or the record was done: no pass ran

    assert sleep_ends_at(1000, at(10, held)) == 15


def test_a_hold_does_not_delay_another_tasks_deadline() -> None:
    async def meanwhile(timer: PassTimer, clock: LoopClock) -> None:
        await asyncio.sleep(0.01)
        timer.hold()  # this task holds the timer (and never releases it here)

        async def other() -> None:
            timer.reschedule(clock.monotonic_ms(), 5)

        await asyncio.ensure_future(other())

    assert sleep_ends_at(1000, meanwhile) == 15
