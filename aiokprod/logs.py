"""Structured logging through structlog, routed into the standard ``logging`` tree.

aiokprod emits structured events (an event name plus key/value context) with structlog, but
hands them to stdlib loggers named ``aiokprod.*``, so an application's logging configuration
decides what is shown: by default only warnings and errors, and nothing on the hot path.
Events below the logger's level are dropped before any formatting work.

Records' keys, values and headers are never logged, and neither are credentials.

As the logging HOWTO asks of a library, the ``aiokprod`` logger has a
:class:`logging.NullHandler`: a program that configures no logging gets no output from
aiokprod (rather than Python's last-resort handler printing raw event lines to stderr).
Each record also carries the event name (:data:`EVENT_ATTR`) and its keys
(:data:`FIELDS_ATTR`) as attributes, for a handler that formats them itself (the command
line's warnings, :mod:`aiokprod.cli`).
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import structlog

#: The root of every aiokprod logger.
ROOT_LOGGER = "aiokprod"
#: The attribute of a log record holding the event name (``"cannot connect to broker; ..."``).
EVENT_ATTR = "aiokprod_event"
#: The attribute of a log record holding the event's keys (``{"node": -1, ...}``).
FIELDS_ATTR = "aiokprod_fields"

_KEY_VALUES = structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True)


def _render(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> Any:
    """The stdlib call's arguments: the rendered text as the message, the event as extras."""
    fields = {key: value for key, value in event_dict.items() if key != "event"}
    extra = {EVENT_ATTR: str(event_dict.get("event", "")), FIELDS_ATTR: fields}
    return {"msg": _KEY_VALUES(logger, method_name, event_dict), "extra": extra}


_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,
    structlog.processors.format_exc_info,
    _render,
]

if not any(isinstance(h, logging.NullHandler) for h in logging.getLogger(ROOT_LOGGER).handlers):
    logging.getLogger(ROOT_LOGGER).addHandler(logging.NullHandler())


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
