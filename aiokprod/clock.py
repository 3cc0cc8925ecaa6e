"""The producer's one clock: monotonic milliseconds, injected so tests can own time.

Every deadline, backoff and linger in :mod:`aiokprod.net` and :mod:`aiokprod.internals` is
computed from ``Clock.monotonic_ms()``; decision code takes the time as an argument
(``now_ms``) and never reads a clock itself. Production uses :data:`SYSTEM_CLOCK`
(``time.monotonic``, which is also what asyncio's loop uses for its timers). The simulator
passes a :class:`LoopClock` on a virtual-time event loop, so that one seed replays a whole run.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """A source of monotonic time (for deadlines, never for record timestamps)."""

    def monotonic_ms(self) -> int:
        """Milliseconds from a clock that never goes backwards."""
        ...


class SystemClock:
    """``time.monotonic()`` in milliseconds: the same clock asyncio's timers use."""

    __slots__ = ()

    def monotonic_ms(self) -> int:
        """Milliseconds since an arbitrary point."""
        return int(time.monotonic() * 1000)


class LoopClock:
    """An event loop's own clock (virtual time on a simulated loop)."""

    __slots__ = ("_loop",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def monotonic_ms(self) -> int:
        """Milliseconds of the loop's time."""
        return int(self._loop.time() * 1000)


SYSTEM_CLOCK: Clock = SystemClock()
