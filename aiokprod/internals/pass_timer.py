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
callback at the next loop turn, before the loop can sleep. And ``send_and_wait`` moves
nothing at all: it :meth:`~PassTimer.hold` s the timer while its record is appended, so the
new batch's linger deadline is left to the pass it runs next (:meth:`~PassTimer.ran`), which
plans the sleep from everything queued. Without the hold that deadline cost a callback, and
so a turn of the event loop, per call; before the lazy timer it cost cancelling and
scheduling the loop's timer twice.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

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
        "_held_ms",
        "_holder",
        "_loop",
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
        #: The loop the sender sleeps on (known from its first sleep).
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The task holding the timer (:meth:`hold`), and the earliest pass asked of it meanwhile.
        self._holder: asyncio.Task[Any] | None = None
        self._held_ms = _NOT_ARMED

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

        Nothing to do while the loop is awake: it computes its sleep after its pass. Nor,
        for now, when the task holding the timer asks (:meth:`hold`).
        """
        if self._waiter is None or now_ms + delay_ms >= self._next_pass_ms:
            return
        holder = self._holder
        if holder is not None and holder is asyncio.current_task(self._loop):
            self._held_ms = min(self._held_ms, now_ms + delay_ms)
            return
        self._plan(now_ms + delay_ms)

    def hold(self) -> None:
        """Leave the calling task's :meth:`reschedule` calls to the pass it runs next.

        The caller runs a pass (and :meth:`ran`) before it next waits. ``send_and_wait``
        holds the timer around its append: the new batch's linger deadline would otherwise
        re-arm the timer (a loop turn) just before the pass that sends the batch re-plans
        the sleep anyway. Only the holding task's requests wait, and only until :meth:`ran`
        or :meth:`release`; another task that holds meanwhile takes the hold over (the
        first one's requests are then planned at once, as without a hold).
        """
        loop = self._loop
        if loop is not None and self._waiter is not None:
            self._holder = asyncio.current_task(loop)
            self._held_ms = _NOT_ARMED

    def release(self) -> None:
        """End a hold that no pass ended, planning what was asked meanwhile.

        (The append failed, or the record was done before a pass was needed.)
        """
        self._holder = None
        held_ms = self._held_ms
        if held_ms != _NOT_ARMED:
            self._held_ms = _NOT_ARMED
            waiter = self._waiter
            if waiter is not None and not waiter.done() and held_ms < self._next_pass_ms:
                self._plan(held_ms)

    def ran(self, now_ms: int, delay_ms: int) -> None:
        """A pass ran outside the loop (``send_and_wait``): the next is due after ``delay_ms``.

        That pass decided everything the loop's own next pass would have, so the next pass
        is planned from its delay, later as well as earlier. Otherwise a batch's linger
        deadline (0 ms with ``linger_ms=0``), planned just before that pass sent the batch,
        would wake the loop for a pass with nothing to do: one per ``send_and_wait``. A loop
        that is awake, or already woken, runs its pass anyway and plans its own sleep. It
        ends a :meth:`hold`: that pass decided what the holder asked for too.
        """
        self._holder = None
        self._held_ms = _NOT_ARMED
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            self._plan(now_ms + min(delay_ms, MAX_SLEEP_MS))

    def _plan(self, next_pass_ms: int) -> None:
        self._next_pass_ms = next_pass_ms
        if next_pass_ms < self._armed_ms and not self._arm_scheduled:
            # Re-armed at the next loop turn: a pass may yet be planned later before then.
            self._arm_scheduled = True
            cast(asyncio.AbstractEventLoop, self._loop).call_soon(self._arm)  # set: waiting

    def _arm(self) -> None:
        self._arm_scheduled = False
        waiter = self._waiter
        if waiter is not None and not waiter.done() and self._next_pass_ms < self._armed_ms:
            self._set_timer(waiter, self._next_pass_ms - self._clock.monotonic_ms())

    def _set_timer(self, waiter: asyncio.Future[None], delay_ms: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_ms = self._next_pass_ms
        self._timer = cast(asyncio.AbstractEventLoop, self._loop).call_later(
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
        loop = self._loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
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
