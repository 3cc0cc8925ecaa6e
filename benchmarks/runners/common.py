"""What every runner shares: the spec it is given, the records, the timing, the result file."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import payload


@dataclass
class Spec:
    """One run, as the harness describes it."""

    client: str
    kind: str
    mode: str
    bootstrap: str
    topic: str
    records: int
    warmup: int
    value_size: int
    keys: int
    settings: dict[str, Any]
    event_loop: str = "asyncio"

    @property
    def library_defaults(self) -> bool:
        """Run with the library's own defaults (only bootstrap is set)."""
        return bool(self.settings.get("library_defaults"))

    def setting(self, name: str) -> Any:
        """One of the common settings (``acks``, ``linger_ms``, ...)."""
        return self.settings[name]


@dataclass
class Outcome:
    """What a runner measured; written as JSON for the harness."""

    library: str = ""
    sent: int = 0
    errors: int = 0
    first_error: str = ""
    elapsed_s: float = 0.0
    window_cpu_s: float = 0.0
    latencies_ns: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def error(self, exc: BaseException | str) -> None:
        """Count one failed record."""
        self.errors += 1
        if not self.first_error:
            self.first_error = exc if isinstance(exc, str) else repr(exc)


class Window:
    """Wall and process CPU time (all threads) from :meth:`start` to :meth:`stop`."""

    def __init__(self) -> None:
        self._t0 = self._c0 = 0.0
        self.elapsed = self.cpu = 0.0

    def start(self) -> None:
        """Start timing."""
        self._c0 = time.process_time()
        self._t0 = time.perf_counter()

    def stop(self, outcome: Outcome) -> None:
        """Stop timing and store the figures in ``outcome``."""
        self.elapsed = time.perf_counter() - self._t0
        self.cpu = time.process_time() - self._c0
        outcome.elapsed_s = self.elapsed
        outcome.window_cpu_s = self.cpu


class Records:
    """The values and keys of a run, cycled through by index (cheap per record)."""

    def __init__(self, spec: Spec) -> None:
        self.values = payload.values(spec.value_size)
        self.keys: list[bytes] | None = payload.keys(spec.keys) if spec.keys else None

    def lists(self, count: int) -> tuple[list[bytes] | None, list[bytes]]:
        """Keys (None if unkeyed) and values of ``count`` records, built before timing.

        Lists of references to the pooled objects: a send loop then costs the same for every
        client (``for value in values``), and nothing is built per record while timing.
        """
        pool = self.values
        values = (pool * (count // len(pool) + 1))[:count]
        if self.keys is None:
            return None, values
        keys = (self.keys * (count // len(self.keys) + 1))[:count]
        return keys, values


def parse_args() -> tuple[Spec, Path]:
    """``--spec JSON --result FILE`` from the command line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True, help="the run, as JSON")
    parser.add_argument("--result", required=True, type=Path, help="where to write the result")
    args = parser.parse_args()
    return Spec(**json.loads(args.spec)), args.result


def summarize_latencies(samples_ns: list[int]) -> dict[str, float]:
    """p50/p90/p99/p99.9/mean/max in microseconds (nearest-rank percentiles)."""
    if not samples_ns:
        return {}
    ordered = sorted(samples_ns)
    n = len(ordered)

    def rank(q: float) -> float:
        index = min(n - 1, max(0, int(q * n + 0.999999) - 1))
        return ordered[index] / 1000

    return {
        "p50": rank(0.50),
        "p90": rank(0.90),
        "p99": rank(0.99),
        "p999": rank(0.999),
        "mean": sum(ordered) / n / 1000,
        "max": ordered[-1] / 1000,
        "samples": n,
    }


def peak_rss_mib() -> float | None:
    """This process's peak resident set size since it started (``VmHWM``, Linux).

    Unlike ``ru_maxrss`` as the parent sees it, it does not include the RSS the parent had
    when it forked this process.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def finish(path: Path, outcome: Outcome, crash: BaseException | None = None) -> None:
    """Write the result file the harness reads."""
    result: dict[str, Any] = {
        "peak_rss_self_mib": peak_rss_mib(),
        "library": outcome.library,
        "sent": outcome.sent,
        "errors": outcome.errors,
        "first_error": outcome.first_error,
        "elapsed_s": outcome.elapsed_s,
        "window_cpu_s": outcome.window_cpu_s,
        "latency_us": summarize_latencies(outcome.latencies_ns),
        "notes": outcome.notes,
        "crash": "".join(traceback.format_exception(crash))[-4000:] if crash else "",
    }
    path.write_text(json.dumps(result), encoding="utf-8")


def run_main(body: Any) -> None:
    """Parse the arguments, run ``body(spec, outcome)`` and always write a result file."""
    spec, path = parse_args()
    outcome = Outcome()
    try:
        body(spec, outcome)
    except BaseException as exc:
        finish(path, outcome, exc)
        raise
    finish(path, outcome)
    sys.stdout.flush()


async def throughput_callbacks(
    producer: Any, spec: Spec, records: Records, outcome: Outcome
) -> None:
    """The callback pattern: ``(await send(...)).add_done_callback(on_delivery)`` per record,
    no future kept; the window closes once every callback has run.

    For any producer whose ``send`` coroutine returns a future with ``add_done_callback`` and
    that has ``flush()`` (aiokprod and aiokafka alike).
    """
    keys, values = records.lists(spec.records)
    topic = spec.topic
    send = producer.send
    done = 0
    errors: list[BaseException] = []

    def on_delivery(future: Any) -> None:
        nonlocal done
        done += 1
        exc = future.exception()
        if exc is not None:
            errors.append(exc)

    window = Window()
    window.start()
    if keys is None:
        for value in values:
            (await send(topic, value)).add_done_callback(on_delivery)
    else:
        for key, value in zip(keys, values, strict=True):
            (await send(topic, value, key=key)).add_done_callback(on_delivery)
    await producer.flush()
    for _ in range(1000):  # callbacks scheduled with call_soon run within a few loop turns
        if done == spec.records:
            break
        await asyncio.sleep(0)
    window.stop(outcome)
    outcome.sent = spec.records
    if done != spec.records:
        outcome.error(f"{spec.records - done} delivery callback(s) had not run after flush()")
    for exc in errors:
        outcome.error(exc)
