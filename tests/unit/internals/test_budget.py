"""ByteBudget: accounting, FIFO-fair waiting, timeouts and cancellation safety."""

from __future__ import annotations

import asyncio

import pytest

from aiokprod.errors import BufferExhaustedError, ProducerClosedError
from aiokprod.internals.budget import ByteBudget

#: Long enough never to fire in these tests; waits end by release, cancel or fail_waiters.
NEVER_S = 3600.0

#: A hang (a waiter never woken) fails fast instead of stalling the run.
pytestmark = pytest.mark.timeout(10)


async def settle() -> None:
    """Let every runnable task take its next step (no wall-clock wait)."""
    for _ in range(5):
        await asyncio.sleep(0)


def full_budget(total: int = 100) -> ByteBudget:
    budget = ByteBudget(total)
    assert budget.try_reserve(total)
    return budget


# --- synchronous accounting -----------------------------------------------------------------


def test_needs_positive_total() -> None:
    with pytest.raises(ValueError, match="positive"):
        ByteBudget(0)


def test_try_reserve_and_release_account_bytes() -> None:
    budget = ByteBudget(100)
    assert budget.try_reserve(60)
    assert (budget.used, budget.available) == (60, 40)
    assert not budget.try_reserve(41)
    assert budget.used == 60  # a failed try reserves nothing
    assert budget.try_reserve(40)
    assert budget.available == 0
    budget.release(60)
    assert (budget.used, budget.available) == (40, 60)
    assert not budget.has_waiters
    assert budget.waiter_count == 0


async def test_reserve_with_room_returns_at_once() -> None:
    budget = ByteBudget(100)
    await budget.reserve(30, NEVER_S)
    assert budget.used == 30


async def test_reserve_larger_than_total_fails_at_once() -> None:
    budget = ByteBudget(100)
    with pytest.raises(BufferExhaustedError, match=r"101 bytes.*buffer_memory=100"):
        await budget.reserve(101, NEVER_S)
    assert budget.available == 100
    assert not budget.has_waiters


# --- waiting --------------------------------------------------------------------------------


async def test_reserve_waits_until_release() -> None:
    budget = full_budget()
    task = asyncio.create_task(budget.reserve(40, NEVER_S))
    await settle()
    assert not task.done()
    assert budget.has_waiters
    assert budget.waiter_count == 1
    budget.release(30)
    await settle()
    assert not task.done()  # 30 < 40: still waiting
    budget.release(10)
    await settle()
    assert task.done()
    await task
    assert budget.available == 0  # 40 released, 40 granted
    assert not budget.has_waiters


async def test_timeout_raises_buffer_exhausted_with_numbers() -> None:
    budget = full_budget()
    budget.release(20)
    with pytest.raises(BufferExhaustedError) as info:
        await budget.reserve(50, 0)
    message = str(info.value)
    assert "50 bytes" in message
    assert "buffer_memory=100" in message
    assert "available=20" in message
    assert not budget.has_waiters
    assert budget.available == 20


async def test_timeout_error_is_a_kafka_timeout() -> None:
    budget = full_budget()
    with pytest.raises(TimeoutError):
        await budget.reserve(1, 0)


async def test_fifo_head_blocks_later_smaller_reservations() -> None:
    """Fairness (Java BufferPool): memory goes to the longest waiter first."""
    budget = full_budget()
    order: list[str] = []

    async def reserve(name: str, size: int) -> None:
        await budget.reserve(size, NEVER_S)
        order.append(name)

    big = asyncio.create_task(reserve("big", 80))
    await settle()
    small = asyncio.create_task(reserve("small", 10))
    await settle()
    budget.release(30)
    await settle()
    # 30 bytes are free and "small" needs 10, but "big" is ahead of it.
    assert not big.done()
    assert not small.done()
    assert not budget.try_reserve(10)  # try_reserve queues behind waiters too
    assert budget.available == 30
    budget.release(70)
    await settle()
    assert big.done()
    assert small.done()
    assert order == ["big", "small"]
    assert budget.available == 10


async def test_release_grants_several_waiters_in_order() -> None:
    budget = full_budget()
    tasks = [asyncio.create_task(budget.reserve(size, NEVER_S)) for size in (10, 20, 30)]
    await settle()
    assert budget.waiter_count == 3
    budget.release(35)
    await settle()
    assert [t.done() for t in tasks] == [True, True, False]
    assert budget.available == 5
    budget.release(25)
    await settle()
    assert all(t.done() for t in tasks)
    assert budget.available == 0


async def test_cancelled_head_waiter_unblocks_the_ones_behind() -> None:
    budget = full_budget()
    budget.release(30)
    big = asyncio.create_task(budget.reserve(80, NEVER_S))
    await settle()
    small = asyncio.create_task(budget.reserve(10, NEVER_S))
    await settle()
    assert not small.done()
    big.cancel()
    await settle()
    assert big.cancelled()
    assert small.done()
    await small
    assert budget.available == 20
    assert not budget.has_waiters


async def test_timed_out_head_waiter_unblocks_the_ones_behind() -> None:
    budget = full_budget()
    budget.release(30)
    big = asyncio.create_task(budget.reserve(80, 0))
    small = asyncio.create_task(budget.reserve(10, NEVER_S))
    await settle()
    with pytest.raises(BufferExhaustedError):
        await big
    await small
    assert budget.available == 20
    assert not budget.has_waiters


async def test_cancel_while_waiting_reserves_nothing() -> None:
    budget = full_budget()
    task = asyncio.create_task(budget.reserve(40, NEVER_S))
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not budget.has_waiters
    budget.release(100)
    assert budget.available == 100


async def test_cancel_racing_a_grant_returns_the_grant() -> None:
    """The grant is set, then the task is cancelled before it resumes: nothing leaks."""
    budget = full_budget()
    task = asyncio.create_task(budget.reserve(50, NEVER_S))
    await settle()
    budget.release(50)  # grants the waiter (available 0 again) ...
    assert budget.available == 0
    task.cancel()  # ... but the task is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await task
    assert budget.available == 50
    assert not budget.has_waiters


async def test_cancel_at_the_checkpoint_of_an_immediate_reservation_returns_it() -> None:
    """reserve() with room still checkpoints; cancelled there, it must keep nothing."""
    budget = ByteBudget(100)
    task = asyncio.create_task(budget.reserve(10, NEVER_S))
    await asyncio.sleep(0)  # the task reserved and is now at its checkpoint
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert budget.available == 100


async def test_fail_waiters_fails_every_waiter_and_keeps_accounting() -> None:
    budget = full_budget()
    budget.release(5)
    tasks = [asyncio.create_task(budget.reserve(size, NEVER_S)) for size in (10, 20)]
    await settle()
    error = ProducerClosedError("closing")
    budget.fail_waiters(error)
    await settle()
    assert all(task.done() for task in tasks)
    for task in tasks:
        with pytest.raises(ProducerClosedError) as info:
            await task
        assert info.value is error
    assert not budget.has_waiters
    assert budget.available == 5
    # Later reservations work normally.
    budget.release(95)
    await budget.reserve(100, NEVER_S)
    assert budget.available == 0
