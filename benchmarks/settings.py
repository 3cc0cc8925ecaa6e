"""What is measured: the settings shared by every client, the workloads and the clients.

Every client gets the same producer settings (``COMMON``), translated into its own option
names by its runner; a workload changes only what it says it changes. Record counts depend on
how fast a client is (``Client.speed``) so that each run takes a few seconds: rates are
compared, not totals.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

Kind = Literal["throughput", "latency"]
Speed = Literal["fast", "medium", "slow"]
Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]
"""A ``compression_type`` name, as aiokprod's ``Producer`` option accepts it (lower case)."""

COMMON: dict[str, object] = {
    "linger_ms": 5,
    "batch_size": 16_384,
    "compression": "none",
    "idempotence": False,
    "max_in_flight": 5,
}
"""Settings every client runs with unless the workload or the client variant says otherwise.

Idempotence is off for all: kafka-python and aiokafka's defaults do not use it and it keeps
the comparison about the client, not the guarantee (the ``aiokprod idempotent`` row shows
what it costs). ``max_in_flight`` is set where the client has the option (aiokafka has no such
option: it keeps at most one Produce request in flight per broker).
"""

DEFAULT_PARTITIONS = 6
VALUE_POOL = 1_000
"""Distinct values each client cycles through (the Java perf tool picks among the same ones)."""
KEY_COUNT = 1_000


@dataclass(frozen=True)
class Workload:
    """One measured scenario; every selected client runs it with the same records."""

    name: str
    title: str
    kind: Kind = "throughput"
    acks: str = "1"
    value_size: int = 100
    keys: int = 0
    partitions: int = DEFAULT_PARTITIONS
    compression: Compression = "none"
    linger_ms: int = 5
    records: dict[Speed, int] = field(
        default_factory=lambda: {"fast": 1_000_000, "medium": 400_000, "slow": 100_000}
    )
    """Records per run by client speed (throughput), or timed sends (latency)."""
    warmup: int = 0
    """Latency workloads: untimed send-and-waits before the timed ones (also verified)."""
    note: str = ""

    def describe(self) -> str:
        """The settings of this workload in one line."""
        parts = [
            f"{self.value_size} B values",
            f"{self.keys:,} keys" if self.keys else "no keys",
            f"{self.partitions:,} partition(s)",
            f"acks={self.acks}",
            f"linger {self.linger_ms} ms",
            f"compression {self.compression}",
        ]
        if self.kind == "latency":
            parts.append("one send-and-wait at a time")
        return ", ".join(parts)


# Timed sends per latency run, the same for every client: with 2,000 and 1,000 (and 200 and 50
# warm-up sends) one run's p50 swung from 90 to 186 µs and its p99 from 221 to 1,779 µs for
# the same build (benchmarks/results/s34-sock.md); a p99 of 1,000 samples is their 10th
# slowest. A client that sits out linger_ms spends 5 ms per send: 25 s per run at 5,000.
_LATENCY_LINGER0: dict[Speed, int] = {"fast": 10_000, "medium": 10_000, "slow": 10_000}
_LATENCY_LINGER5: dict[Speed, int] = {"fast": 5_000, "medium": 5_000, "slow": 5_000}
_KIB: dict[Speed, int] = {"fast": 300_000, "medium": 150_000, "slow": 40_000}
_MANY_PARTITIONS: dict[Speed, int] = {"fast": 1_000_000, "medium": 400_000, "slow": 20_000}

WORKLOADS: tuple[Workload, ...] = (
    Workload("unkeyed", "Unkeyed 100 B, acks=1"),
    Workload("unkeyed-acks-all", "Unkeyed 100 B, acks=all", acks="all"),
    Workload("keyed", "Keyed (1,000 keys) 100 B, acks=1", keys=KEY_COUNT),
    Workload("value-1k", "Unkeyed 1 KiB, acks=1", value_size=1024, records=_KIB),
    Workload("lz4", "Unkeyed 100 B, lz4, acks=1", compression="lz4"),
    Workload("zstd", "Unkeyed 100 B, zstd, acks=1", compression="zstd"),
    Workload(
        "latency-linger0",
        "send-and-wait, linger 0",
        kind="latency",
        linger_ms=0,
        records=_LATENCY_LINGER0,
        warmup=1_000,
    ),
    Workload(
        "latency-linger5",
        "send-and-wait, linger 5 ms",
        kind="latency",
        linger_ms=5,
        records=_LATENCY_LINGER5,
        warmup=500,
        note="a client that sits out linger_ms takes >= 5 ms per send",
    ),
    Workload("partitions-1", "Unkeyed 100 B, 1 partition", partitions=1),
    Workload("partitions-100", "Unkeyed 100 B, 100 partitions", partitions=100),
    Workload(
        "partitions-1000",
        "Unkeyed 100 B, 1,000 partitions",
        partitions=1_000,
        records=_MANY_PARTITIONS,
    ),
)


BASELINE_ENV = "$AIOKPROD_BENCH_BASELINE"
"""The baseline rows' directory: ``venv`` (a pure install of another commit) and
``venv-mypyc`` (its compiled build) in it."""


@dataclass(frozen=True)
class Client:
    """A row of the tables: a client library (``family``) with optional setting overrides."""

    id: str
    family: str
    label: str
    speed: Speed
    overrides: dict[str, object] = field(default_factory=dict)
    mode: Literal["send", "send_many", "callback"] = "send"
    """``send``: stored futures; ``callback``: one done-callback per record, none stored."""
    library_defaults: bool = False
    """Use the library's defaults for everything except bootstrap (``aiokprod defaults``)."""
    only: tuple[str, ...] = ()
    """If set, the only workloads this row runs."""
    kinds: tuple[Kind, ...] = ("throughput", "latency")
    keyed: bool = True
    """Whether it can send keyed records."""
    interpreter: str = ""
    """Another Python than the suite's, relative to the project root (skipped if missing);
    ``$NAME`` is read from the environment (a row whose variable is unset is skipped)."""
    compiled: bool = False
    """The interpreter must run aiokprod's compiled build (the run fails otherwise)."""
    event_loop: Literal["asyncio", "uvloop"] = "asyncio"
    """The event loop an asynchronous client's runner runs on (aiokprod's runner only)."""
    note: str = ""


CLIENTS: tuple[Client, ...] = (
    Client("aiokprod", "aiokprod", "aiokprod", "medium"),
    Client(
        "aiokprod-send-many",
        "aiokprod",
        "aiokprod send_many",
        "fast",
        mode="send_many",
        kinds=("throughput",),
        note="bulk API; runs only if Producer has send_many",
    ),
    Client(
        "aiokprod-idempotent",
        "aiokprod",
        "aiokprod idempotent",
        "medium",
        overrides={"idempotence": True},
        only=("unkeyed-acks-all",),
        note="information: idempotence on (needs acks=all)",
    ),
    Client(
        "aiokprod-defaults",
        "aiokprod",
        "aiokprod defaults",
        "medium",
        library_defaults=True,
        only=("latency-linger5",),
        note="Producer(bootstrap) with nothing else: acks=all, idempotence on, linger 5 ms",
    ),
    Client(
        "aiokprod-callback",
        "aiokprod",
        "aiokprod, a callback per record",
        "medium",
        mode="callback",
        only=("unkeyed", "keyed"),
        note="add_done_callback on each send()'s future, no future stored",
    ),
    Client(
        "aiokprod-mypyc",
        "aiokprod",
        "aiokprod, compiled (mypyc)",
        "medium",
        interpreter=".venv-mypyc/bin/python",
        compiled=True,
        only=("unkeyed", "keyed", "value-1k", "latency-linger0", "latency-linger5"),
        note="the optional mypyc build (docs/compiled.md; make test-compiled builds it)",
    ),
    Client(
        "aiokprod-callback-mypyc",
        "aiokprod",
        "aiokprod, compiled (mypyc), a callback per record",
        "medium",
        mode="callback",
        interpreter=".venv-mypyc/bin/python",
        compiled=True,
        only=("unkeyed", "keyed"),
        note="the mypyc build, add_done_callback on each send()'s future",
    ),
    Client(
        "aiokprod-mypyc-uvloop",
        "aiokprod",
        "aiokprod, compiled (mypyc), uvloop",
        "medium",
        interpreter=".venv-mypyc/bin/python",
        compiled=True,
        event_loop="uvloop",
        only=("unkeyed", "latency-linger0", "latency-linger5"),
        note="the mypyc build on uvloop instead of asyncio's loop (an option users may pick)",
    ),
    Client(
        "aiokprod-baseline",
        "aiokprod",
        "aiokprod, baseline",
        "medium",
        interpreter=f"{BASELINE_ENV}/venv/bin/python",
        only=("unkeyed", "keyed", "latency-linger0", "latency-linger5"),
        note=f"another build of aiokprod, pure Python, for a before/after in one run: "
        f"{BASELINE_ENV}/venv (see docs/benchmarks.md)",
    ),
    Client(
        "aiokprod-mypyc-baseline",
        "aiokprod",
        "aiokprod, compiled (mypyc), baseline",
        "medium",
        interpreter=f"{BASELINE_ENV}/venv-mypyc/bin/python",
        compiled=True,
        only=("unkeyed", "keyed", "latency-linger0", "latency-linger5"),
        note=f"the baseline's compiled build: ${BASELINE_ENV}/venv-mypyc",
    ),
    Client("aiokafka", "aiokafka", "aiokafka", "medium"),
    Client(
        "aiokafka-callback",
        "aiokafka",
        "aiokafka, a callback per record",
        "medium",
        mode="callback",
        only=("unkeyed", "keyed"),
        note="add_done_callback on each send()'s future, no future stored",
    ),
    Client("confluent", "confluent", "confluent-kafka Producer", "fast"),
    Client("confluent-aio", "confluent-aio", "confluent-kafka AIOProducer", "medium"),
    Client("kafka-python", "kafka-python", "kafka-python", "slow"),
    Client(
        "java",
        "java",
        "Java ProducerPerformance",
        "fast",
        kinds=("throughput",),
        keyed=False,
        note="Apache Kafka's own perf tool (null keys only, no send-and-wait mode)",
    ),
)

BASELINE = "aiokafka"
"""The client every ratio is taken against."""


def applies(client: Client, workload: Workload) -> bool:
    """Whether ``client`` has a row in ``workload`` (capabilities, not availability)."""
    if client.only:
        return workload.name in client.only
    if workload.kind not in client.kinds:
        return False
    return not (workload.keys and not client.keyed)


def quick(workload: Workload) -> Workload:
    """The ``--quick`` version of a workload: a tenth of the records (at least 300).

    A latency workload keeps a fifth of its timed sends (at least 100) and at most 20 warm-up
    sends: a tenth would leave too few samples for a p99.
    """
    if workload.kind == "latency":
        records = {speed: max(n // 5, 100) for speed, n in workload.records.items()}
        return replace(workload, records=records, warmup=min(workload.warmup, 20))
    records = {speed: max(n // 10, 300) for speed, n in workload.records.items()}
    return replace(workload, records=records)


def run_settings(client: Client, workload: Workload) -> dict[str, object]:
    """The producer settings of one run, before the runner translates them."""
    settings: dict[str, object] = dict(COMMON)
    settings.update(
        acks=workload.acks,
        linger_ms=workload.linger_ms,
        compression=workload.compression,
    )
    settings.update(client.overrides)
    if client.library_defaults:
        settings = {"library_defaults": True}
    return settings
