"""``aiokprod produce``: every line of a file (or of stdin) becomes a record."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import sys
import threading
import time
import typing
from collections.abc import Callable, Iterator
from typing import IO

from aiokprod.cli.options import UsageError, make_producer
from aiokprod.errors import KafkaError
from aiokprod.internals.batch import DeliveryFuture

__all__ = ["open_input", "run_produce"]


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


def _shown(separator: bytes) -> str:
    """The key separator as the user typed it (quoted; escaped only if unprintable)."""
    text = separator.decode("utf-8", "backslashreplace")
    return f"'{text}'" if text.isprintable() else repr(text)


@dataclasses.dataclass
class _Stop:
    """Why the run stopped at a line: that line's record was not sent, nor any after it."""

    line: int
    short: str  # for the summary: "no key separator ':'", "MetadataTimeoutError"
    detail: str  # for stderr: the whole reason


async def run_produce(args: argparse.Namespace, stream: IO[bytes], out: IO[str]) -> int:
    """Run ``aiokprod produce`` on the lines of ``stream``; returns the exit code."""
    outcome = _Outcome()
    headers = args.header or None
    separator: bytes | None = args.key_separator
    line_number = 0
    stopped: _Stop | None = None
    started = time.perf_counter()
    producer = make_producer(args, "aiokprod-cli-produce")
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
                        why = f"no key separator {_shown(separator)}"
                        stopped = _Stop(line_number, why, f"line {line_number} has {why}")
                        break
                try:
                    delivery = await send(args.topic, value, key, args.partition, None, headers)
                except KafkaError as exc:
                    name = type(exc).__name__
                    detail = f"line {line_number} could not be sent: {name}: {exc}"
                    stopped = _Stop(line_number, name, detail)
                    break
                delivery.add_done_callback(callback)
            if stopped:
                break
        await producer.flush()
    elapsed = time.perf_counter() - started
    total = outcome.delivered + outcome.failed
    if not args.quiet:
        rate = total / elapsed if elapsed > 0 else 0.0
        # the counts the exit code follows: a record not sent counts as much as a failed one
        not_sent = (
            f", 1 not sent (line {stopped.line}: {stopped.short}; the run stopped there)"
            if stopped
            else ""
        )
        print(
            f"produced {outcome.delivered} record(s) to {args.topic!r}, {outcome.failed} "
            f"failed{not_sent}, in {elapsed:.2f} s ({rate:,.0f} records/s)",
            file=out,
        )
    if outcome.first_error is not None:
        error = outcome.first_error
        print(f"aiokprod produce: first failure: {type(error).__name__}: {error}", file=sys.stderr)
    if stopped:
        after = "the lines after it, if any, were not sent"
        print(f"aiokprod produce: stopped: {stopped.detail}; {after}", file=sys.stderr)
    return 1 if stopped or outcome.failed else 0


@contextlib.contextmanager
def open_input(path: str | None) -> Iterator[IO[bytes]]:
    """The ``--file`` to read (stdin's bytes without one), closed afterwards."""
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
