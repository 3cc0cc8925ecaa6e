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
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import difflib
import json
import logging
import os
import random
import sys
import threading
import time
import typing
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import IO, NoReturn

from aiokprod import __version__
from aiokprod.config import OPTIONS, ProducerConfig, option_for_java_name, option_from_text
from aiokprod.errors import ConfigError, KafkaError
from aiokprod.internals.batch import DeliveryFuture
from aiokprod.producer import Producer

__all__ = ["build_parser", "main", "parse_option", "producer_options"]

#: Options that cannot come from a command line: objects, or given by their own flag.
_NOT_FROM_CLI = {"bootstrap_servers": "use --bootstrap-servers"}
#: At most this many latencies are kept for the percentiles (as Java's ProducerPerformance).
_MAX_LATENCY_SAMPLES = 500_000
_MB = 1024 * 1024


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
        close = difflib.get_close_matches(name, list(OPTIONS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(f"-X {name}: not a producer option{hint}")
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


def _make_producer(args: argparse.Namespace, client_id: str) -> Producer:
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
    parser.add_argument("--version", action="version", version=f"aiokprod {__version__}")
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


# --- produce ------------------------------------------------------------------------------


@dataclasses.dataclass
class _Outcome:
    """Delivery counts of a run; callbacks on the event loop update it."""

    delivered: int = 0
    failed: int = 0
    first_error: BaseException | None = None

    def on_delivery(self, delivery: DeliveryFuture) -> None:
        error = delivery.exception()
        if error is None:
            self.delivered += 1
            return
        self.failed += 1
        if self.first_error is None:
            self.first_error = error


async def _read_chunks(stream: IO[bytes]) -> typing.AsyncIterator[bytes]:
    """Chunks of ``stream``, read by a daemon thread so the loop keeps sending meanwhile.

    ``read1`` returns what one read gives (at most 64 KiB): a pipe or a terminal hands a
    line over as soon as it is typed, a file arrives in large chunks. A bounded queue keeps
    the reader at most a few chunks ahead. The thread is a daemon: a read blocked on a
    terminal does not keep the process alive after Ctrl-C.
    """
    read: Callable[[int], bytes] = getattr(stream, "read1", stream.read)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | BaseException] = asyncio.Queue(maxsize=8)

    def reader() -> None:
        item: bytes | BaseException
        try:
            while True:
                try:
                    item = read(65536)
                except Exception as exc:  # noqa: BLE001 - any read error goes to the loop,
                    item = exc  # which reports it; a lost one would leave the loop waiting
                asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()
                if not isinstance(item, bytes) or not item:
                    return
        except BaseException:  # noqa: BLE001 - the loop is gone (the command ended or stopped)
            return

    threading.Thread(target=reader, name="aiokprod-cli-reader", daemon=True).start()
    while True:
        item = await queue.get()
        if isinstance(item, BaseException):
            raise UsageError(f"cannot read the input: {item}")
        if not item:
            return
        yield item


async def _lines(stream: IO[bytes]) -> typing.AsyncIterator[list[bytes]]:
    """Lists of complete lines without their line endings (LF or CR LF)."""
    rest = b""
    async for chunk in _read_chunks(stream):
        data = rest + chunk
        parts = data.split(b"\n")
        rest = parts.pop()
        yield [p[:-1] if p.endswith(b"\r") else p for p in parts]
    if rest:
        yield [rest[:-1] if rest.endswith(b"\r") else rest]


async def _produce(args: argparse.Namespace, stream: IO[bytes], out: IO[str]) -> int:
    outcome = _Outcome()
    headers = args.header or None
    separator: bytes | None = args.key_separator
    line_number = 0
    stopped: str | None = None
    started = time.perf_counter()
    producer = _make_producer(args, "aiokprod-cli-produce")
    async with producer:
        send = producer.send
        callback = outcome.on_delivery
        async for lines in _lines(stream):
            for line in lines:
                line_number += 1
                key: bytes | None = None
                value = line
                if separator is not None:
                    key, sep, value = line.partition(separator)
                    if not sep:
                        stopped = f"line {line_number} has no key separator {separator!r}"
                        break
                try:
                    delivery = await send(args.topic, value, key, args.partition, None, headers)
                except KafkaError as exc:
                    stopped = f"line {line_number} was not accepted: {type(exc).__name__}: {exc}"
                    break
                delivery.add_done_callback(callback)
            if stopped:
                break
        await producer.flush()
    elapsed = time.perf_counter() - started
    total = outcome.delivered + outcome.failed
    if not args.quiet:
        rate = total / elapsed if elapsed > 0 else 0.0
        print(
            f"produced {outcome.delivered} record(s) to {args.topic!r}, {outcome.failed} "
            f"failed, in {elapsed:.2f} s ({rate:,.0f} records/s)",
            file=out,
        )
    if outcome.first_error is not None:
        error = outcome.first_error
        print(f"aiokprod produce: first failure: {type(error).__name__}: {error}", file=sys.stderr)
    if stopped:
        print(f"aiokprod produce: stopped: {stopped}", file=sys.stderr)
    return 1 if stopped or outcome.failed else 0


# --- perf ---------------------------------------------------------------------------------


class _PerfStats:
    """Counts and send-to-acknowledgement latencies of a perf run (updated on the loop)."""

    def __init__(self, num_records: int, record_size: int) -> None:
        self.record_size = record_size
        self.sampling = max(1, num_records // _MAX_LATENCY_SAMPLES)
        self.samples: list[float] = []
        self.acked = 0
        self.failed = 0
        self.first_error: BaseException | None = None
        self.latency_sum = 0.0
        self.latency_max = 0.0
        # the current progress window
        self.window_count = 0
        self.window_latency = 0.0
        self.window_max = 0.0

    def on_delivery(self, sent_at: float, delivery: DeliveryFuture) -> None:
        latency = (time.perf_counter() - sent_at) * 1000.0
        error = delivery.exception()
        if error is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = error
            return
        acked = self.acked = self.acked + 1
        self.latency_sum += latency
        if latency > self.latency_max:
            self.latency_max = latency
        self.window_count += 1
        self.window_latency += latency
        if latency > self.window_max:
            self.window_max = latency
        if acked % self.sampling == 0:
            self.samples.append(latency)

    def take_window(self) -> tuple[int, float, float]:
        window = (self.window_count, self.window_latency, self.window_max)
        self.window_count = 0
        self.window_latency = 0.0
        self.window_max = 0.0
        return window

    def percentiles(self, *points: float) -> list[float]:
        ordered = sorted(self.samples)
        if not ordered:
            return [0.0 for _ in points]
        return [ordered[min(len(ordered) - 1, int(p * len(ordered)))] for p in points]


class _Progress:
    """A progress line on stderr at most every ``interval`` s.

    On a terminal the line is redrawn in place with a bar; otherwise (a log file, CI) one
    line is printed per interval.
    """

    def __init__(self, stream: IO[str], total: int, interval: float | None) -> None:
        self.stream = stream
        self.total = total
        self.tty = stream.isatty()
        self.interval = interval if interval is not None else (0.5 if self.tty else 5.0)
        self._width = 0

    def line(self, stats: _PerfStats, sent: int, window_s: float) -> str:
        count, latency_sum, latency_max = stats.take_window()
        rate = count / window_s if window_s > 0 else 0.0
        mb = rate * stats.record_size / _MB
        avg = latency_sum / count if count else 0.0
        done = stats.acked + stats.failed
        text = (
            f"{done:,}/{self.total:,} acked ({sent:,} sent), {rate:,.0f} records/s "
            f"({mb:.2f} MB/s), {avg:.1f} ms avg latency, {latency_max:.1f} ms max"
        )
        if stats.failed:
            text += f", {stats.failed:,} failed"
        if self.tty:
            filled = int(20 * done / self.total) if self.total else 20
            text = f"[{'#' * filled}{'.' * (20 - filled)}] {100 * done / self.total:3.0f}% {text}"
        return text

    def show(self, text: str) -> None:
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()


def _payload(size: int) -> bytes:
    """Random upper-case letters, as Java's ProducerPerformance sends."""
    rng = random.Random(0)
    return bytes(rng.randrange(65, 91) for _ in range(size))


async def _perf(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    total: int = args.num_records
    stats = _PerfStats(total, args.record_size)
    progress = _Progress(err, total, args.progress_interval)
    payload = _payload(args.record_size)
    target = float(args.throughput)
    producer = _make_producer(args, "aiokprod-perf")
    sent = 0
    elapsed = 0.0
    stopped: BaseException | None = None

    async def report() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(progress.interval)
            now = time.perf_counter()
            progress.show(progress.line(stats, sent, now - last))
            last = now

    async with producer:
        reporter = asyncio.create_task(report()) if progress.interval > 0 else None
        send = producer.send
        on_delivery = stats.on_delivery
        perf_counter = time.perf_counter
        sleep = asyncio.sleep
        topic = args.topic
        start = perf_counter()
        try:
            for i in range(total):
                sent_at = perf_counter()
                try:
                    delivery = await send(topic, payload)
                except KafkaError as exc:
                    stopped = exc
                    break
                delivery.add_done_callback(partial(on_delivery, sent_at))
                sent = i + 1
                if target > 0:
                    ahead = sent / target - (perf_counter() - start)
                    if ahead > 0.002:
                        await sleep(ahead)
            await producer.flush()
            elapsed = perf_counter() - start
        finally:
            if reporter is not None:
                reporter.cancel()
                await asyncio.gather(reporter, return_exceptions=True)
            progress.finish()

    _print_perf_summary(args, stats, sent, elapsed, out)
    if stats.first_error is not None:
        error = stats.first_error
        print(
            f"aiokprod perf: {stats.failed} record(s) failed, the first with "
            f"{type(error).__name__}: {error}",
            file=err,
        )
    if stopped is not None:
        print(
            f"aiokprod perf: stopped after {sent} record(s): {type(stopped).__name__}: {stopped}",
            file=err,
        )
    return 1 if stopped is not None or stats.failed else 0


def perf_summary(stats: _PerfStats, sent: int, elapsed: float) -> dict[str, float | int]:
    """The numbers of a finished perf run."""
    rate = stats.acked / elapsed if elapsed > 0 else 0.0
    p50, p95, p99, p999 = stats.percentiles(0.5, 0.95, 0.99, 0.999)
    return {
        "records_sent": sent,
        "records_acked": stats.acked,
        "records_failed": stats.failed,
        "record_size": stats.record_size,
        "elapsed_s": round(elapsed, 6),
        "records_per_s": round(rate, 1),
        "mb_per_s": round(rate * stats.record_size / _MB, 3),
        "latency_avg_ms": round(stats.latency_sum / stats.acked, 3) if stats.acked else 0.0,
        "latency_max_ms": round(stats.latency_max, 3),
        "latency_p50_ms": round(p50, 3),
        "latency_p95_ms": round(p95, 3),
        "latency_p99_ms": round(p99, 3),
        "latency_p999_ms": round(p999, 3),
        "latency_samples": len(stats.samples),
    }


def _print_perf_summary(
    args: argparse.Namespace, stats: _PerfStats, sent: int, elapsed: float, out: IO[str]
) -> None:
    summary = perf_summary(stats, sent, elapsed)
    if args.json:
        print(json.dumps(summary), file=out)
        return
    # The shape of ProducerPerformance's final line, with fractional percentiles.
    print(
        f"{summary['records_acked']} records sent, {summary['records_per_s']:.1f} records/sec "
        f"({summary['mb_per_s']:.2f} MB/sec), {summary['latency_avg_ms']:.2f} ms avg latency, "
        f"{summary['latency_max_ms']:.2f} ms max latency, {summary['latency_p50_ms']:.2f} ms "
        f"50th, {summary['latency_p95_ms']:.2f} ms 95th, {summary['latency_p99_ms']:.2f} ms "
        f"99th, {summary['latency_p999_ms']:.2f} ms 99.9th.",
        file=out,
    )


# --- entry point --------------------------------------------------------------------------


def _configure_logging(verbose: int) -> None:
    if verbose:
        logging.basicConfig(
            stream=sys.stderr,
            level=logging.DEBUG if verbose > 1 else logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s %(message)s",
        )


def _fail(message: str, code: int) -> NoReturn:
    print(f"aiokprod: {message}", file=sys.stderr)
    raise SystemExit(code)


@contextlib.contextmanager
def _open_input(path: str | None) -> Iterator[IO[bytes]]:
    if path is None:
        yield sys.stdin.buffer
        return
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise UsageError(f"--file {path}: {exc.strerror or exc}") from None
    try:
        yield stream
    finally:
        stream.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``aiokprod`` command; returns the exit code.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    try:
        if args.command == "produce":
            with _open_input(args.file) as stream:
                return asyncio.run(_produce(args, stream, sys.stdout))
        return asyncio.run(_perf(args, sys.stdout, sys.stderr))
    except UsageError as exc:
        parser.exit(2, f"aiokprod {args.command}: error: {exc}\n")
    except ConfigError as exc:
        _fail(f"{args.command}: bad producer option: {exc}", 2)
    except KafkaError as exc:
        _fail(f"{args.command}: {type(exc).__name__}: {exc}", 1)
    except KeyboardInterrupt:
        _fail(f"{args.command}: interrupted", 130)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
