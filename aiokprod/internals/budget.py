"""ByteBudget: the ``buffer_memory`` bound over every batch the producer holds.

The Java client pools byte buffers (BufferPool); in Python pooling buys little, so only the
accounting is kept. A batch reserves its bytes when it is created (``batch_size``, or the
record's size if larger) and returns them when it completes, so reservations happen once per
batch, not per record.

Waiting is fair, as in Java's pool: once anyone waits, later reservations queue behind them
even if they would fit, so a stream of small batches cannot starve a large one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from aiokprod.errors import BufferExhaustedError


class _Waiter:
    __slots__ = ("future", "size")

    def __init__(self, size: int, future: asyncio.Future[None]) -> None:
        self.size = size
        self.future = future


class ByteBudget:
    """Counts reserved bytes against a fixed total; reservations may wait for releases.

    Args:
        total: the byte bound (``buffer_memory``).
    """

    def __init__(self, total: int) -> None:
        if total <= 0:
            raise ValueError("a byte budget needs a positive total")
        self.total = total
        self.available = total
        self._waiters: deque[_Waiter] = deque()

    @property
    def used(self) -> int:
        """Bytes reserved now."""
        return self.total - self.available

    @property
    def has_waiters(self) -> bool:
        """True while some ``reserve()`` is waiting: the accumulator then drains at once."""
        return bool(self._waiters)

    @property
    def waiter_count(self) -> int:
        """How many ``reserve()`` calls are waiting."""
        return len(self._waiters)

    def try_reserve(self, size: int) -> bool:
        """Reserve ``size`` bytes now if they are free and nobody is queued ahead."""
        if self._waiters or size > self.available:
            return False
        self.available -= size
        return True

    async def reserve(self, size: int, timeout_s: float) -> None:
        """Reserve ``size`` bytes, waiting up to ``timeout_s`` for releases.

        Raises:
            BufferExhaustedError: no room within the timeout, or ``size`` exceeds the total.

        Cancellation:
            If cancelled, nothing stays reserved: a grant that raced with the cancellation
            is returned to the budget.
        """
        if size > self.total:
            raise BufferExhaustedError(
                f"a batch of {size} bytes can never fit in buffer_memory={self.total}"
            )
        if self.try_reserve(size):
            try:
                await asyncio.sleep(0)  # a checkpoint, as every public await promises
            except BaseException:
                self.release(size)  # cancelled at the checkpoint: keep nothing reserved
                raise
            return
        loop = asyncio.get_running_loop()
        waiter = _Waiter(size, loop.create_future())
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout_s):
                await waiter.future
        except BaseException as exc:
            future = waiter.future
            if future.done() and not future.cancelled() and future.exception() is None:
                self.release(size)  # granted just as we gave up: hand it back
            else:
                waiter.future.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
                self._grant_waiters()  # we may have been the head that blocked others
            if isinstance(exc, TimeoutError):
                raise BufferExhaustedError(
                    f"failed to reserve {size} bytes within {timeout_s * 1000:.0f} ms: "
                    f"buffer_memory={self.total}, available={self.available}, "
                    f"waiting={len(self._waiters)}"
                ) from None
            raise

    def release(self, size: int) -> None:
        """Return ``size`` reserved bytes and wake the queued reservations that now fit."""
        self.available += size
        if self.available > self.total:  # pragma: no cover - accounting bug guard
            raise RuntimeError(f"byte budget over-released: {self.available} > {self.total}")
        if self._waiters:
            self._grant_waiters()

    def _grant_waiters(self) -> None:
        waiters = self._waiters
        while waiters and waiters[0].size <= self.available:
            waiter = waiters.popleft()
            if waiter.future.done():
                continue
            self.available -= waiter.size
            waiter.future.set_result(None)

    def fail_waiters(self, exc: BaseException) -> None:
        """Fail every queued reservation (the producer is closing)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_exception(exc)
