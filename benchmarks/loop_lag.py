"""Event-loop lag while producing compressed batches (issue 7).

Batches are closed, and so compressed, by the sender on the event loop. This script produces
compressible ~1 KiB records with big batches and, meanwhile, runs a ticker task that sleeps
5 ms over and over and records how late each wake-up is: that lateness is what every other
coroutine of the application (a web handler, a consumer) would wait.

    .venv/bin/python benchmarks/loop_lag.py                      # zstd level 22, 1 MiB batches
    .venv/bin/python benchmarks/loop_lag.py --codec none gzip lz4 zstd:3 zstd:22
    .venv/bin/python benchmarks/loop_lag.py --bootstrap 127.0.0.1:9092   # an existing broker
    .venv/bin/python benchmarks/loop_lag.py --offload-demo zstd:22   # no Kafka: loop vs thread

Without ``--bootstrap`` it starts a local Kafka (aiokprod.testing) and stops it afterwards.
Prints, per codec: records/s, compression ratio (bytes the producer sent vs. record bytes),
and the lag's p50 / p99 / max in milliseconds.

``--offload-demo`` needs no broker: it compresses 1 MiB record sections (as the sender would
close batches) once on the loop and once through ``asyncio.to_thread`` (cramjam releases the
GIL), with the same ticker running, to show what moving compression off the loop would buy.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Literal

from aiokprod import Producer
from aiokprod.protocol.compression import codec_for_name

TICK_S = 0.005

CompressionType = Literal["none", "gzip", "snappy", "lz4", "zstd"]


def compression_type(name: str) -> CompressionType:
    """A codec name in any case (as ``Producer`` takes it) as the option's type: lower case."""
    match name.lower():
        case "none" | "gzip" | "snappy" | "lz4" | "zstd" as known:
            return known
    raise ValueError(f"no codec is called {name!r}")


@dataclass
class Result:
    codec: str
    records: int
    seconds: float
    record_bytes: int
    bytes_sent: int
    lags_ms: list[float]

    def row(self) -> str:
        lags = sorted(self.lags_ms)
        p50 = statistics.median(lags) if lags else 0.0
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else 0.0
        worst = lags[-1] if lags else 0.0
        ratio = self.record_bytes / self.bytes_sent if self.bytes_sent else 0.0
        return (
            f"{self.codec:<10} {self.records / self.seconds:>10,.0f} {ratio:>7.2f} "
            f"{len(lags):>7} {p50:>8.2f} {p99:>8.2f} {worst:>8.2f}"
        )


def make_values(count: int, size: int, seed: int = 7) -> list[bytes]:
    """JSON-ish records: repetitive field names, varying numbers, a bit of noise."""
    rng = random.Random(seed)
    words = ["order", "user", "sku", "status", "shipped", "pending", "amount", "currency"]
    pool = []
    for _ in range(min(count, 2000)):
        parts: list[str] = []
        while sum(len(p) for p in parts) < size:
            parts.append(f'"{rng.choice(words)}":{rng.randrange(10**9)},')
            if rng.random() < 0.1:
                parts.append(rng.randbytes(6).hex())
        pool.append("{" + "".join(parts)[: size - 2] + "}")
    return [pool[i % len(pool)].encode() for i in range(count)]


async def ticker(lags: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        await asyncio.sleep(TICK_S)
        lags.append((loop.time() - start - TICK_S) * 1000)


async def run_one(
    bootstrap: str,
    topic: str,
    codec: str,
    values: list[bytes],
    batch_size: int,
    max_request_size: int,
) -> Result:
    name, _, level_text = codec.partition(":")
    level = int(level_text) if level_text else None
    codec_for_name(name).check_level(level)
    lags: list[float] = []
    stop = asyncio.Event()
    async with Producer(
        bootstrap,
        batch_size=batch_size,
        linger_ms=20,
        max_request_size=max_request_size,
        buffer_memory=64 * batch_size,
        compression_type=compression_type(name),
        compression_level=level,
    ) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        sent_before = producer.metrics()["bytes_sent"]
        tick = asyncio.create_task(ticker(lags, stop))
        await asyncio.sleep(0.2)
        lags.clear()  # only what happens while producing
        started = time.perf_counter()
        for value in values:
            await producer.send(topic, value)
        await producer.flush()
        seconds = time.perf_counter() - started
        stop.set()
        await tick
        bytes_sent = producer.metrics()["bytes_sent"] - sent_before
    return Result(codec, len(values), seconds, sum(len(v) for v in values), int(bytes_sent), lags)


async def main_async(args: argparse.Namespace, bootstrap: str) -> list[Result]:
    values = make_values(args.records, args.record_size)
    request_size = args.max_request_size or args.batch_size + (64 << 10)
    if args.warmup:  # the broker's JIT and page cache, so the first codec is not penalised
        await run_one(
            bootstrap, f"loop-lag-warmup-{uuid.uuid4().hex[:6]}", "none",
            values[: args.warmup], args.batch_size, request_size,
        )  # fmt: skip
    results = []
    for codec in args.codec:
        topic = f"loop-lag-{codec.replace(':', '-')}-{uuid.uuid4().hex[:6]}"
        results.append(
            await run_one(bootstrap, topic, codec, values, args.batch_size, request_size)
        )
        print(results[-1].row(), flush=True)
    return results


async def offload_demo(codec: str, batches: int, batch_size: int, record_size: int) -> None:
    from aiokprod.protocol.records import RecordBatchBuilder

    name, _, level_text = codec.partition(":")
    spec = codec_for_name(name)
    compressor = spec.compressor(int(level_text) if level_text else None)
    values = make_values(batch_size // record_size + 1, record_size)
    sections = []
    for b in range(batches):
        builder = RecordBatchBuilder()
        for i, value in enumerate(values):
            if builder.try_append(b * 1000 + i, None, value, size_limit=batch_size) < 0:
                break
        sections.append(bytes(memoryview(builder.close().data)[61:]))
    for mode in ("on the loop", "in a thread"):
        lags: list[float] = []
        stop = asyncio.Event()
        tick = asyncio.create_task(ticker(lags, stop))
        await asyncio.sleep(0.1)
        lags.clear()
        started = time.perf_counter()
        for section in sections:
            if mode == "on the loop":
                compressor(section)
                await asyncio.sleep(0)
            else:
                await asyncio.to_thread(compressor, section)
        seconds = time.perf_counter() - started
        stop.set()
        await tick
        lags.sort()
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else 0.0
        print(
            f"{codec} {mode:<12}: {len(sections)} x {len(sections[0]):,} B in {seconds:.2f} s "
            f"({seconds / len(sections) * 1000:.0f} ms each); lag p99 {p99:.1f} ms, "
            f"max {lags[-1] if lags else 0.0:.1f} ms over {len(lags)} ticks"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="an existing broker (default: start a local one)")
    parser.add_argument(
        "--codec",
        nargs="+",
        default=["none", "zstd:22"],
        help="codec[:level] to run, e.g. gzip zstd:3 zstd:22",
    )
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--record-size", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=1 << 20)
    parser.add_argument(
        "--max-request-size",
        type=int,
        default=0,
        help="default: batch size + 64 KiB (one full batch per request)",
    )
    parser.add_argument("--warmup", type=int, default=20_000, help="uncompressed records first")
    parser.add_argument(
        "--offload-demo", metavar="CODEC", help="no Kafka: compress on the loop vs. in a thread"
    )
    parser.add_argument("--batches", type=int, default=8, help="for --offload-demo")
    args = parser.parse_args()
    if args.offload_demo:
        asyncio.run(
            offload_demo(args.offload_demo, args.batches, args.batch_size, args.record_size)
        )
        return
    print(
        f"{args.records:,} records of {args.record_size} B, batch_size {args.batch_size:,}; "
        f"lag = lateness of asyncio.sleep({TICK_S})"
    )
    print(f"{'codec':<10} {'records/s':>10} {'ratio':>7} {'ticks':>7} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'max ms':>8}")  # fmt: skip
    if args.bootstrap:
        asyncio.run(main_async(args, args.bootstrap))
        return
    from aiokprod.testing import LocalKafka

    # Batches up to a few MiB compressed must fit the broker's limit.
    with LocalKafka(broker_config={"message.max.bytes": str(8 << 20)}) as kafka:
        asyncio.run(main_async(args, kafka.bootstrap_servers))


if __name__ == "__main__":
    main()
