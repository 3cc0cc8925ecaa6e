"""``aiokprod perf``: what Apache Kafka's ProducerPerformance does, N records of S bytes.

Throughput and send-to-acknowledgement latency, with progress on stderr and a summary (or
JSON) on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from functools import partial
from typing import IO

from aiokprod.cli.options import make_producer
from aiokprod.errors import KafkaError
from aiokprod.internals.batch import DeliveryFuture

__all__ = ["perf_summary", "run_perf"]

#: At most this many latencies are kept for the percentiles (as Java's ProducerPerformance).
_MAX_LATENCY_SAMPLES = 500_000
_MB = 1024 * 1024


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


async def run_perf(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """Run ``aiokprod perf``: the summary to ``out``, progress and failures to ``err``."""
    total: int = args.num_records
    stats = _PerfStats(total, args.record_size)
    progress = _Progress(err, total, args.progress_interval)
    payload = _payload(args.record_size)
    target = float(args.throughput)
    producer = make_producer(args, "aiokprod-perf")
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
