"""A virtual-time asyncio event loop: no real I/O, no threads, time jumps to the next timer.

:class:`VirtualLoop` is an ordinary :class:`asyncio.BaseEventLoop` (so tasks, futures,
``asyncio.timeout``, anyio and ``call_later`` behave exactly as usual) whose selector never
waits: when no callback is ready, ``select(timeout)`` moves the virtual clock to the next timer
instead of sleeping. Callback order is then a pure function of the program and its inputs.

* A **deadlock** (nothing ready, no timer, the main coroutine not done) raises
  :class:`DeadlockError` out of ``run_until_complete`` instead of hanging.
* A **livelock** (more than ``max_steps`` loop iterations, or virtual time past
  ``max_time_s``) raises :class:`LivelockError`.
* **Starvation** (a busy machine): a hook called before each batch of ready callbacks may
  return milliseconds to jump the clock forward by, as if the process had not been scheduled.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any


class SimulationError(Exception):
    """The simulated world itself got stuck (not a producer failure to investigate alone)."""


class DeadlockError(SimulationError):
    """Nothing is ready, no timer is set, and the main coroutine has not finished."""


class LivelockError(SimulationError):
    """The loop ran more iterations, or more virtual time, than the run allows."""


#: Returns how many milliseconds to jump before the next batch of ready callbacks (0: none).
StarvationHook = Callable[[], float]


class _VirtualSelector:
    """Stands in for the selector: never blocks, advances virtual time instead."""

    def __init__(self, loop: VirtualLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        loop = self._loop
        loop.steps += 1
        if loop.steps > loop.max_steps:
            raise LivelockError(f"more than {loop.max_steps} event-loop iterations")
        if loop.starvation is not None:
            jump_ms = loop.starvation()
            if jump_ms > 0:
                loop.advance(jump_ms / 1000)
        if timeout is None:
            raise DeadlockError(
                f"deadlock at t={loop.time():.3f}s: nothing ready, no timer, main not done"
            )
        if timeout > 0:
            scheduled = loop.next_timer()
            target = scheduled if scheduled is not None else loop.time() + timeout
            loop.advance_to(target)
        if loop.time() > loop.max_time_s:
            raise LivelockError(f"virtual time passed {loop.max_time_s:.0f} s")
        return []

    def close(self) -> None:
        return None


class VirtualLoop(asyncio.BaseEventLoop):
    """An event loop on virtual time.

    Args:
        start_s: the virtual time the loop starts at (seconds).
        max_steps: iterations allowed before :class:`LivelockError`.
        max_time_s: virtual seconds allowed before :class:`LivelockError`.
    """

    def __init__(
        self, *, start_s: float = 1000.0, max_steps: int = 5_000_000, max_time_s: float = 3600.0
    ) -> None:
        super().__init__()
        self._now_ns = int(start_s * 1e9)
        self._clock_resolution = 1e-9
        self._selector = _VirtualSelector(self)
        self.steps = 0
        self.max_steps = max_steps
        self.max_time_s = start_s + max_time_s
        self.starvation: StarvationHook | None = None

    def time(self) -> float:
        """Virtual seconds."""
        return self._now_ns / 1e9

    def time_ms(self) -> int:
        """Virtual milliseconds (what :class:`~aiokprod.clock.LoopClock` reads)."""
        return self._now_ns // 1_000_000

    def advance(self, seconds: float) -> None:
        """Move virtual time forward by ``seconds`` (a starvation jump, or a test's wish)."""
        if seconds > 0:
            self._now_ns += math.ceil(seconds * 1e9)

    def advance_to(self, when: float) -> None:
        """Move virtual time to ``when`` (never backwards)."""
        target = math.ceil(when * 1e9)
        if target > self._now_ns:
            self._now_ns = target

    def next_timer(self) -> float | None:
        """When the earliest live timer is due, or None."""
        # _run_once drops cancelled timers from the head of the heap before it selects.
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        live = [h.when() for h in scheduled[:1] if not h.cancelled()]
        if live:
            return live[0]
        candidates = [h.when() for h in scheduled if not h.cancelled()]
        return min(candidates) if candidates else None

    # The selector event loop's hooks, with nothing to do here.
    def _process_events(self, event_list: list[Any]) -> None:
        return None

    def _write_to_self(self) -> None:
        return None

    def close(self) -> None:
        """Close the loop (no executor threads are ever started on it)."""
        super().close()

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Any, *args: Any
    ) -> asyncio.Future[Any]:
        """Not available: a simulated run must not touch threads."""
        raise SimulationError("run_in_executor on the simulated loop (threads are not simulated)")
