"""PassTimer: when the sender loop runs its next pass.

The sender computes, at the end of each pass, how long it may sleep (the next linger expiry,
retry backoff, request or delivery timeout). Three things can cut that sleep short:
:meth:`PassTimer.wakeup` (something can go now: a full batch, a response that freed an
in-flight slot, a flush), :meth:`PassTimer.reschedule` (something is due earlier than planned:
a new batch's linger deadline), and the timer; :meth:`PassTimer.ran` re-plans the sleep after
a pass ``send_and_wait`` ran in its own task.

It sleeps on one future with one timer handle: not an ``asyncio.Event`` inside
``asyncio.timeout``, which costs a context manager, a timeout object and an event waiter per
sleep. ``reschedule`` moves the timer instead of waking the loop, so a new batch with
``linger_ms`` to go costs no extra pass (the Java client wakes its sender thread there).
"""

from __future__ import annotations

import asyncio

#: The longest sleep between passes (an idle producer still looks once an hour).
MAX_SLEEP_MS = 3_600_000


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class PassTimer:
    """The sender loop's sleep between passes (see the module docstring)."""

    __slots__ = ("_next_pass_ms", "_timer", "_waiter", "wake_requested")

    def __init__(self) -> None:
        #: Set by :meth:`wakeup`: a pass is due even if the loop was about to sleep.
        self.wake_requested = False
        #: While the loop sleeps: the future it awaits, its timer, and when the timer fires.
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._next_pass_ms = 0

    def wakeup(self) -> None:
        """Make the loop run a pass soon (cheap if it is already awake)."""
        self.wake_requested = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def reschedule(self, now_ms: int, delay_ms: int) -> None:
        """A pass is needed ``delay_ms`` after ``now_ms``: bring the timer forward if later.

        Nothing to do while the loop is awake: it computes its sleep after its pass.
        """
        waiter = self._waiter
        if waiter is not None and now_ms + delay_ms < self._next_pass_ms:
            self._set_timer(waiter, now_ms, delay_ms)

    def ran(self, now_ms: int, delay_ms: int) -> None:
        """A pass ran outside the loop (``send_and_wait``): the next is due after ``delay_ms``.

        That pass decided everything the loop's own next pass would have, so the timer is set
        to its delay, later as well as earlier. Otherwise a batch's linger deadline (0 ms with
        ``linger_ms=0``), scheduled just before that pass sent the batch, would wake the loop
        for a pass with nothing to do: one per ``send_and_wait``. A loop that is awake, or
        already woken, runs its pass anyway and plans its own sleep.
        """
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        delay_ms = min(delay_ms, MAX_SLEEP_MS)
        if now_ms + delay_ms != self._next_pass_ms:
            self._set_timer(waiter, now_ms, delay_ms)

    def _set_timer(self, waiter: asyncio.Future[None], now_ms: int, delay_ms: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._next_pass_ms = now_ms + delay_ms
        self._timer = asyncio.get_running_loop().call_later(
            max(delay_ms, 0) / 1000, _resolve, waiter
        )

    async def sleep(self, now_ms: int, delay_ms: int) -> None:
        """Sleep until ``delay_ms`` after ``now_ms``, a wakeup, or an earlier reschedule.

        Returns at once (after one loop turn) if a wakeup came during the pass.
        """
        if self.wake_requested or delay_ms <= 0:
            await asyncio.sleep(0)
            return
        delay_ms = min(delay_ms, MAX_SLEEP_MS)
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        self._next_pass_ms = now_ms + delay_ms
        self._timer = loop.call_later(delay_ms / 1000, _resolve, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
