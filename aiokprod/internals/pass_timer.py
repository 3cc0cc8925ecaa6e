"""PassTimer: when the sender loop runs its next pass.

The sender computes, at the end of each pass, how long it may sleep (the next linger expiry,
retry backoff, request or delivery timeout). Three things can cut that sleep short:
:meth:`PassTimer.wakeup` (something can go now: a full batch, a response that freed an
in-flight slot, a flush), :meth:`PassTimer.reschedule` (something is due earlier than planned:
a new batch's linger deadline), and the timer; :meth:`PassTimer.ran` re-plans the sleep after
a pass ``send_and_wait`` ran in its own task.

It sleeps on one future with one timer handle: not an ``asyncio.Event`` inside
``asyncio.timeout``, which costs a context manager, a timeout object and an event waiter per
sleep. ``reschedule`` moves the next pass instead of waking the loop, so a new batch with
``linger_ms`` to go costs no extra pass (the Java client wakes its sender thread there).

The timer is moved lazily. A timer that fires before the planned pass (it was re-planned
later) only re-arms itself; a pass planned earlier than the armed timer re-arms it once, in a
callback at the next loop turn, before the loop can sleep. So ``send_and_wait`` (the new
batch's linger deadline, then its own pass re-planning the sleep) costs one ``call_soon``
instead of cancelling and scheduling the loop's timer twice per record.
"""

from __future__ import annotations

import asyncio

from aiokprod.clock import SYSTEM_CLOCK, Clock

#: The longest sleep between passes (an idle producer still looks once an hour).
MAX_SLEEP_MS = 3_600_000

#: ``_armed_ms`` when no timer is armed.
_NOT_ARMED = 2**62


class PassTimer:
    """The sender loop's sleep between passes (see the module docstring).

    Args:
        clock: the producer's clock (``now_ms`` arguments come from it).
    """

    __slots__ = (
        "_arm_scheduled",
        "_armed_ms",
        "_clock",
        "_next_pass_ms",
        "_timer",
        "_waiter",
        "wake_requested",
    )

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        #: Set by :meth:`wakeup`: a pass is due even if the loop was about to sleep.
        self.wake_requested = False
        #: While the loop sleeps: the future it awaits, when its next pass is due, and the
        #: timer (armed for ``_armed_ms``, never later than the pass once ``_arm`` ran).
        self._waiter: asyncio.Future[None] | None = None
        self._next_pass_ms = 0
        self._timer: asyncio.TimerHandle | None = None
        self._armed_ms = _NOT_ARMED
        self._arm_scheduled = False

    def wakeup(self) -> None:
        """Make the loop run a pass soon (cheap if it is already awake)."""
        self.wake_requested = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def reschedule(self, now_ms: int, delay_ms: int) -> None:
        """A pass is needed ``delay_ms`` after ``now_ms``: bring the next pass forward if later.

        Nothing to do while the loop is awake: it computes its sleep after its pass.
        """
        if self._waiter is not None and now_ms + delay_ms < self._next_pass_ms:
            self._plan(now_ms + delay_ms)

    def ran(self, now_ms: int, delay_ms: int) -> None:
        """A pass ran outside the loop (``send_and_wait``): the next is due after ``delay_ms``.

        That pass decided everything the loop's own next pass would have, so the next pass
        is planned from its delay, later as well as earlier. Otherwise a batch's linger
        deadline (0 ms with ``linger_ms=0``), planned just before that pass sent the batch,
        would wake the loop for a pass with nothing to do: one per ``send_and_wait``. A loop
        that is awake, or already woken, runs its pass anyway and plans its own sleep.
        """
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            self._plan(now_ms + min(delay_ms, MAX_SLEEP_MS))

    def _plan(self, next_pass_ms: int) -> None:
        self._next_pass_ms = next_pass_ms
        if next_pass_ms < self._armed_ms and not self._arm_scheduled:
            # Re-armed at the next loop turn: a pass may yet be planned later before then.
            self._arm_scheduled = True
            asyncio.get_running_loop().call_soon(self._arm)

    def _arm(self) -> None:
        self._arm_scheduled = False
        waiter = self._waiter
        if waiter is not None and not waiter.done() and self._next_pass_ms < self._armed_ms:
            self._set_timer(waiter, self._next_pass_ms - self._clock.monotonic_ms())

    def _set_timer(self, waiter: asyncio.Future[None], delay_ms: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_ms = self._next_pass_ms
        self._timer = asyncio.get_running_loop().call_later(
            max(delay_ms, 0) / 1000, self._on_timer, waiter
        )

    def _on_timer(self, waiter: asyncio.Future[None]) -> None:
        self._timer = None
        self._armed_ms = _NOT_ARMED
        if waiter is not self._waiter or waiter.done():
            return
        left_ms = self._next_pass_ms - self._clock.monotonic_ms()
        if left_ms > 0:
            self._set_timer(waiter, left_ms)  # the pass was planned later meanwhile
        else:
            waiter.set_result(None)

    async def sleep(self, now_ms: int, delay_ms: int) -> None:
        """Sleep until ``delay_ms`` after ``now_ms``, a wakeup, or an earlier reschedule.

        Returns at once (after one loop turn) if a wakeup came during the pass.
        """
        if self.wake_requested or delay_ms <= 0:
            await asyncio.sleep(0)
            return
        delay_ms = min(delay_ms, MAX_SLEEP_MS)
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        self._next_pass_ms = now_ms + delay_ms
        self._set_timer(waiter, delay_ms)
        try:
            await waiter
        finally:
            self._waiter = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._armed_ms = _NOT_ARMED
