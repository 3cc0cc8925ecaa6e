"""Structured logging through structlog, routed into the standard ``logging`` tree.

aiokprod emits structured events (an event name plus key/value context) with structlog, but
hands them to stdlib loggers named ``aiokprod.*``, so an application's logging configuration
decides what is shown: by default only warnings and errors, and nothing on the hot path.
Events below the logger's level are dropped before any formatting work.

Records' keys, values and headers are never logged, and neither are credentials.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,
    structlog.processors.format_exc_info,
    structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True),
]


def get_logger(name: str) -> Any:
    """A structlog logger bound to the stdlib logger ``name`` (e.g. ``aiokprod.sender``)."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=_PROCESSORS,
        wrapper_class=structlog.stdlib.BoundLogger,
    )


class LogEvery:
    """Rate limit for repeated warnings: at most one per ``interval_ms`` per key.

    A broker that stays down must be visible (a WARNING soon after it fails) without
    flooding the log while the producer keeps retrying it.
    """

    __slots__ = ("_interval_ms", "_last")

    def __init__(self, interval_ms: int) -> None:
        self._interval_ms = interval_ms
        self._last: dict[object, int] = {}

    def due(self, key: object, now_ms: int) -> bool:
        """Whether a message for ``key`` may be logged now (and note that it was)."""
        last = self._last.get(key)
        if last is not None and now_ms - last < self._interval_ms:
            return False
        self._last[key] = now_ms
        return True

    def reset(self, key: object) -> None:
        """Forget ``key`` (it recovered): its next problem is logged at once."""
        self._last.pop(key, None)
