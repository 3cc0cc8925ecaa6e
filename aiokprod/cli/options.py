"""What the ``aiokprod`` command line says: its argument parser and the producer options.

``-X name=value`` and ``--producer-config FILE`` become producer options here, read as the
option table (aiokprod/config/table.py) types each option; the commands themselves are
:mod:`aiokprod.cli.produce` and :mod:`aiokprod.cli.perf`, the entry point :mod:`aiokprod.cli`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from aiokprod.compiled import describe_build
from aiokprod.config import (
    OPTIONS,
    ProducerConfig,
    did_you_mean,
    option_for_java_name,
    option_from_text,
)
from aiokprod.errors import ConfigError
from aiokprod.producer import Producer

__all__ = ["UsageError", "build_parser", "make_producer", "parse_option", "producer_options"]

#: Options that cannot come from a command line: objects, or given by their own flag.
_NOT_FROM_CLI = {"bootstrap_servers": "use --bootstrap-servers"}


class UsageError(Exception):
    """A command-line mistake: reported on stderr with exit code 2."""


# --- -X option typing ---------------------------------------------------------------------


def parse_option(assignment: str) -> tuple[str, object]:
    """Turn ``-X name=value`` into a producer option, read as the option table says.

    ``name`` may be ours (``linger_ms``), its Java name (``linger.ms``,
    ``compression.zstd.level``, see ``aiokprod.config.JAVA_NAMES``), or ours with dots or
    dashes. Values are read by :func:`aiokprod.config.option_from_text`: booleans accept
    true/false/yes/no/on/off/1/0; integers are parsed (``acks=all`` stays a string, which
    the producer accepts).

    Raises:
        UsageError: no ``=``, an unknown option (with a suggestion), an option that
            needs a Python object (serializers, interceptors), or a malformed value.
    """
    raw, sep, text = assignment.partition("=")
    raw = raw.strip()
    name = option_for_java_name(raw) or raw.replace(".", "_").replace("-", "_")
    if not sep or not name:
        raise UsageError(f"-X expects name=value, got {assignment!r}")
    if name in _NOT_FROM_CLI:
        raise UsageError(f"-X {name}: {_NOT_FROM_CLI[name]}")
    if name not in OPTIONS:
        raise UsageError(f"-X {raw}: not a producer option{did_you_mean(raw, OPTIONS)}")
    if OPTIONS[name].text_type is None:
        raise UsageError(
            f"-X {name}: takes a Python object; it cannot be set from the command line"
        )
    try:
        return name, option_from_text(name, text)
    except ConfigError as exc:
        raise UsageError(f"-X {exc}") from None


def read_properties(path: str) -> list[str]:
    """``name=value`` lines of a properties file (``#`` and ``!`` start comments).

    Raises:
        UsageError: the file cannot be read.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--producer-config {path}: {exc.strerror or exc}") from None
    lines = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", "!")):
            lines.append(line)
    return lines


def producer_options(args: argparse.Namespace) -> dict[str, object]:
    """Producer options from ``--producer-config`` then ``-X`` (later ones win)."""
    assignments: list[str] = []
    if args.producer_config:
        assignments.extend(read_properties(args.producer_config))
    assignments.extend(args.option or ())
    options: dict[str, object] = {}
    for assignment in assignments:
        name, value = parse_option(assignment)
        options[name] = value
    return options


def _bootstrap(args: argparse.Namespace) -> str:
    servers: str | None = args.bootstrap_servers or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not servers:
        raise UsageError("--bootstrap-servers is required (or set KAFKA_BOOTSTRAP_SERVERS)")
    return servers


def make_producer(args: argparse.Namespace, client_id: str) -> Producer:
    """A producer for a command: its options, ``client_id`` unless an option sets one."""
    options = producer_options(args)
    options.setdefault("client_id", client_id)
    return Producer(config=ProducerConfig.from_options(_bootstrap(args), **options))


# --- argument parsing ---------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _header(text: str) -> tuple[str, bytes]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"a header is key=value, got {text!r}")
    return key, value.encode("utf-8")


def _separator(text: str) -> bytes:
    if not text:
        raise argparse.ArgumentTypeError("the key separator must not be empty")
    return text.encode("utf-8")


class _VersionAction(argparse.Action):
    """``--version``: :func:`~aiokprod.compiled.describe_build`'s line, worked out when asked."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, argparse.SUPPRESS, nargs=0, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(describe_build())  # to stdout, as argparse's own version action
        parser.exit()


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-servers",
        "-b",
        metavar="HOST:PORT[,...]",
        help="brokers to bootstrap from (default: $KAFKA_BOOTSTRAP_SERVERS)",
    )
    parser.add_argument("--topic", "-t", required=True, help="the topic to produce to")
    parser.add_argument(
        "-X",
        dest="option",
        action="append",
        metavar="NAME=VALUE",
        help="a producer option, e.g. -X linger_ms=20 or -X acks=1 (repeatable)",
    )
    parser.add_argument(
        "--producer-config",
        metavar="FILE",
        help="a file of NAME=VALUE producer options (applied before -X)",
    )
    parser.add_argument(
        "--verbose", "-v", action="count", default=0, help="log to stderr (-vv: debug)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``aiokprod`` command."""
    parser = argparse.ArgumentParser(
        prog="aiokprod",
        description="aiokprod: an asyncio-native Apache Kafka producer.",
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="print the version, whether this install runs compiled, and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    produce = commands.add_parser(
        "produce",
        help="send lines of a file or of stdin as records",
        description="Send every line of a file (or of stdin) to a topic as one record, "
        "then print a summary. Lines are bytes; the line ending is removed.",
    )
    _add_common(produce)
    produce.add_argument(
        "--file", "-f", metavar="FILE", help="read lines from FILE (default: stdin)"
    )
    produce.add_argument(
        "--key-separator",
        "-K",
        type=_separator,
        metavar="SEP",
        help="split each line at the first SEP into key and value (a line without it is an error)",
    )
    produce.add_argument(
        "--header",
        "-H",
        type=_header,
        action="append",
        metavar="KEY=VALUE",
        help="a header added to every record (repeatable)",
    )
    produce.add_argument("--partition", "-p", type=int, help="send every record to this partition")
    produce.add_argument(
        "--quiet", "-q", action="store_true", help="print no summary (errors still go to stderr)"
    )

    perf = commands.add_parser(
        "perf",
        help="measure throughput and latency (like Kafka's ProducerPerformance)",
        description="Send NUM_RECORDS records of RECORD_SIZE random bytes as fast as allowed, "
        "show progress on stderr, then print records/s, MB/s and send-to-acknowledgement "
        "latency percentiles on stdout.",
    )
    _add_common(perf)
    perf.add_argument(
        "--num-records",
        "-n",
        type=_positive_int,
        required=True,
        metavar="N",
        help="how many records to send (required)",
    )
    perf.add_argument(
        "--record-size",
        "-s",
        type=_positive_int,
        required=True,
        metavar="BYTES",
        help="size of each record's value, random upper-case letters, no key (required)",
    )
    perf.add_argument(
        "--throughput",
        type=float,
        default=-1,
        metavar="RECORDS_PER_S",
        help="cap on records per second; -1 (default) for no cap",
    )
    perf.add_argument(
        "--progress-interval",
        type=float,
        metavar="SECONDS",
        help="seconds between progress reports (default: 0.5 on a terminal, 5 otherwise; "
        "0 turns them off)",
    )
    perf.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    return parser
