"""The ``aiokprod`` command line: ``aiokprod produce`` and ``aiokprod perf``.

::

    # every line of a file (or of stdin) becomes a record; "key:value" lines, a header
    aiokprod produce -b 127.0.0.1:9092 -t orders -f orders.txt -K : -H source=cli -X linger_ms=20

    # what Apache Kafka's ProducerPerformance does: N records of S bytes, an optional cap
    aiokprod perf -b 127.0.0.1:9092 -t perf --num-records 1000000 --record-size 100

``-X name=value`` sets any producer option (the Java name ``linger.ms`` works too); the value
is read as the option table (aiokprod/config/table.py) types the option, and the producer
validates it as usual. ``--producer-config FILE`` reads ``name=value`` lines (use
it for credentials: a command line is visible to every user of the machine). Options are
never printed. ``--bootstrap-servers`` defaults to ``$KAFKA_BOOTSTRAP_SERVERS``.

Exit codes: 0 success; 1 some records failed or the producer failed; 2 bad usage or a bad
option; 130 interrupted.

The package: :mod:`~aiokprod.cli.options` (the argument parser, ``-X`` typing),
:mod:`~aiokprod.cli.produce` and :mod:`~aiokprod.cli.perf` (the two commands); this module
holds the entry point, :func:`main`.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

from aiokprod.cli.options import UsageError, build_parser
from aiokprod.cli.perf import run_perf
from aiokprod.cli.produce import open_input, run_produce
from aiokprod.errors import ConfigError, KafkaError
from aiokprod.logs import EVENT_ATTR, FIELDS_ATTR, ROOT_LOGGER

__all__ = ["main"]


class _CommandLogFormatter(logging.Formatter):
    """aiokprod's warnings in the command's words: ``aiokprod perf: warning: EVENT (k=v)``."""

    def __init__(self, command: str) -> None:
        super().__init__()
        self._command = command

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, EVENT_ATTR, None) or record.getMessage()
        fields: dict[str, object] = getattr(record, FIELDS_ATTR, None) or {}
        details = ", ".join(f"{k}={v}" for k, v in fields.items() if k != "exception")
        line = f"aiokprod {self._command}: {record.levelname.lower()}: {event}"
        return f"{line} ({details})" if details else line


def _configure_logging(verbose: int, command: str) -> logging.Handler | None:
    """``-v``: every logger at INFO (``-vv`` DEBUG) on stderr; without: aiokprod's warnings.

    Without ``-v`` the library's NullHandler (:mod:`aiokprod.logs`) would keep its warnings
    (a broker that cannot be reached) from the user; the command shows them in its own
    format instead of raw ``event='...'`` lines.
    """
    if verbose:
        logging.basicConfig(
            stream=sys.stderr,
            level=logging.DEBUG if verbose > 1 else logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s %(message)s",
        )
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_CommandLogFormatter(command))
    logging.getLogger(ROOT_LOGGER).addHandler(handler)
    return handler


def _fail(message: str, code: int) -> NoReturn:
    print(f"aiokprod: {message}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``aiokprod`` command; returns the exit code.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = _configure_logging(args.verbose, args.command)
    try:
        if args.command == "produce":
            with open_input(args.file) as stream:
                return asyncio.run(run_produce(args, stream, sys.stdout))
        return asyncio.run(run_perf(args, sys.stdout, sys.stderr))
    except UsageError as exc:
        parser.exit(2, f"aiokprod {args.command}: error: {exc}\n")
    except ConfigError as exc:
        _fail(f"{args.command}: bad producer option: {exc}", 2)
    except KafkaError as exc:
        _fail(f"{args.command}: {type(exc).__name__}: {exc}", 1)
    except KeyboardInterrupt:
        _fail(f"{args.command}: interrupted", 130)
    finally:
        if handler is not None:
            logging.getLogger(ROOT_LOGGER).removeHandler(handler)
