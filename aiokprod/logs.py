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
