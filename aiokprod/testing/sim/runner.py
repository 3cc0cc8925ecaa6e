"""One seeded simulation run of the real Producer, and many of them.

``run_seed(seed)`` draws a workload and a fault schedule from ``random.Random(seed)``, builds
the simulated world, runs the workload on virtual time against :class:`aiokprod.Producer`
(with the simulated transport, the loop's clock and a seeded ``rng``), then checks the
invariants of :mod:`.invariants`. The same seed replays the same run: same event trace, same
digest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokprod.clock import LoopClock
from aiokprod.errors import (
    BufferExhaustedError,
    KafkaError,
    KafkaTimeoutError,
    MetadataTimeoutError,
    ProducerClosedError,
)
from aiokprod.internals.batch import DeliveryFuture
from aiokprod.internals.bulk import BulkDelivery
from aiokprod.producer import Producer
from aiokprod.testing.sim.faults import draw_schedule
from aiokprod.testing.sim.invariants import check_run
from aiokprod.testing.sim.loop import SimulationError
from aiokprod.testing.sim.workload import (
    BAD_CALLS,
    Op,
    Recorder,
    Sent,
    Workload,
    draw_workload,
)
from aiokprod.testing.sim.world import SimWorld, Topology

#: Record timestamps: a fixed epoch plus virtual time (wall time would break replays).
TIMESTAMP_BASE_MS = 1_750_000_000_000
#: Fixed part of the lateness allowed past delivery_timeout_ms (plus 4 starvation jumps).
SLACK_MS = 500
#: After the last fault, how long the producer may take to find its way back, on top of its
#: own timeouts and backoffs (see settle_ms()).
SETTLE_MS = 2000


def settle_ms(options: dict[str, Any]) -> int:
    """How long after the last fault the producer gets before it must deliver again.

    A fault's effect can outlast its window by the producer's own bounds: a lost answer is
    noticed after ``request_timeout_ms`` (``socket_connection_setup_timeout_ms`` during the
    handshake), then come a reconnect and a retry backoff.
    """
    return (
        SETTLE_MS
        + max(
            int(options["request_timeout_ms"]), int(options["socket_connection_setup_timeout_ms"])
        )
        + int(options["reconnect_backoff_max_ms"])
        + int(options["retry_backoff_max_ms"])
    )


@dataclass(slots=True)
class RunResult:
    """What one seed did."""

    seed: int
    problems: list[str]
    digest: str
    records: int = 0
    acked: int = 0
    virtual_ms: int = 0
    faults: str = ""
    workload: str = ""
    trace: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No invariant was violated."""
        return not self.problems

    def replay_command(self) -> str:
        """The one-line command that replays this run."""
        return f"python -m aiokprod.testing.sim --seed {self.seed} --verbose"


def run_seed(seed: int, *, keep_trace: bool = False) -> RunResult:
    """Run the simulation for ``seed`` and check its invariants."""
    rng = random.Random(seed)
    workload = draw_workload(random.Random(rng.getrandbits(64)))
    schedule = draw_schedule(
        random.Random(rng.getrandbits(64)), workload.horizon_ms(), workload.nodes
    )
    world = SimWorld(
        random.Random(rng.getrandbits(64)),
        Topology(workload.nodes, workload.topics, workload.max_message_bytes),
        schedule,
    )
    producer_rng = random.Random(rng.getrandbits(64))
    recorder = Recorder(world.now_ms)
    loop = world.loop
    loop.set_exception_handler(
        lambda _loop, context: recorder.problems.append(
            f"unhandled in the event loop: {context.get('message')} {context.get('exception')!r}"
        )
    )
    metrics: dict[str, Any] = {}
    execution = _Execution(world, workload, recorder, producer_rng, seed, metrics)
    # Code that reaches for the module-level ``random`` (instead of the injected rng) gets a
    # stream drawn from the seed too; the state is put back afterwards.
    global_state = random.getstate()
    random.seed(rng.getrandbits(64))
    with _quiet_logs(recorder.problems):
        try:
            loop.run_until_complete(execution.run())
        except SimulationError as exc:
            recorder.problems.append(f"{type(exc).__name__}: {exc}")
        finally:
            _shutdown(loop)
            random.setstate(global_state)
    problems = list(recorder.problems)
    if metrics:
        problems = check_run(
            workload,
            world.clusters,
            recorder,
            slack_ms=SLACK_MS + 4 * world.max_jump_ms,
            buffer_total=int(metrics["buffer_total_bytes"]),
            buffer_available=int(metrics["buffer_available_bytes"]),
            buffer_waiters=int(metrics["buffer_waiters"]),
            faulty=bool(schedule.windows or schedule.events),
        )
    return RunResult(
        seed,
        problems,
        world.digest(),
        records=len(recorder.records),
        acked=sum(1 for r in recorder.records if r.outcome == "acked"),
        virtual_ms=world.now_ms(),
        faults=schedule.describe(),
        workload=workload.describe(),
        trace=world.trace_lines if keep_trace else [],
    )


class _Execution:
    def __init__(
        self,
        world: SimWorld,
        workload: Workload,
        recorder: Recorder,
        producer_rng: random.Random,
        seed: int,
        metrics: dict[str, Any],
    ) -> None:
        self.world = world
        self.workload = workload
        self.rec = recorder
        self.rng = producer_rng
        self.seed = seed
        self.metrics = metrics
        self.tasks: list[asyncio.Task[None]] = []
        self.closing = False
        self.producer: Producer | None = None

    async def run(self) -> None:
        world = self.world
        producer = Producer(
            world.cluster.bootstrap(),
            transport=world.transport(),
            clock=LoopClock(world.loop),
            rng=self.rng,
            client_id="sim",
            **self.workload.options,
        )
        self.producer = producer
        await producer.start()
        for op in self.workload.ops:
            world.trace(f"op {op.kind} {op.topic} n={op.count} ms={op.ms}")
            if op.kind == "sleep":
                await asyncio.sleep(op.ms / 1000)
            elif op.kind == "send":
                await self.send(op, "send")
            elif op.kind == "send_many":
                await self.send_many(op)
            elif op.kind == "send_and_wait":
                self.spawn(self.send_and_wait(op), cancel_after_ms=op.ms)
            elif op.kind == "flush":
                await self.flush(op)
            elif op.kind == "bad_send":
                await self.bad_send(op)
        await self.healed_phase()
        for _ in range(self.workload.racing_sends):
            self.spawn(self.send(Op("send", self.workload.ops[0].topic or "t0"), "racing"))
        self.closing = True
        world.trace("close")
        try:
            await producer.close(self.workload.close_timeout_s)
        except BaseException as exc:  # noqa: BLE001 - every outcome is recorded and judged
            self.rec.problems.append(f"close() raised {exc!r}")
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.metrics.update(producer.metrics())

    async def healed_phase(self) -> None:
        """Once every fault is over (and the cluster settled), one record per topic + flush."""
        healed = self.world.faults.healed_at_ms() + settle_ms(self.workload.options)
        wait_ms = healed - self.world.now_ms()
        if wait_ms > 0:
            await asyncio.sleep(wait_ms / 1000)
        self.world.trace("healed")
        for topic in sorted(self.workload.topics):
            await self.send(Op("send", topic), "healed")
        await self.flush(Op("flush"))

    def spawn(self, coro: Any, cancel_after_ms: int = -1) -> None:
        task = self.world.loop.create_task(coro)
        self.tasks.append(task)
        if cancel_after_ms >= 0:
            self.world.loop.call_later(cancel_after_ms / 1000, task.cancel)

    def timestamp(self) -> int:
        return TIMESTAMP_BASE_MS + self.world.now_ms()

    def expected(self, exc: BaseException) -> bool:
        if isinstance(exc, KafkaTimeoutError):
            return True  # max_block_ms passed (metadata or buffer memory)
        return isinstance(exc, ProducerClosedError) and self.closing

    async def send(self, op: Op, how: str) -> None:
        assert self.producer is not None
        records = self.rec.new_records(op, how, self.seed)
        sent = records[0]
        try:
            future = await self.producer.send(
                op.topic,
                sent.value,
                key=sent.key,
                timestamp_ms=self.timestamp(),
                headers=list(sent.headers) or None,
            )
        except BaseException as exc:  # noqa: BLE001 - every outcome is recorded and judged
            # send() queues nothing when it raises, even when cancelled (its contract).
            self.rec.rejected(records, exc, expected=self.expected(exc), maybe_queued=False)
            return
        self.rec.returned(records)
        sent.done = future.done
        future.add_done_callback(self._resolver(sent))

    def _resolver(self, sent: Sent) -> Callable[[DeliveryFuture], None]:
        def resolve(future: DeliveryFuture) -> None:
            error = future.exception()
            self.rec.resolved(sent, None if error else future.result(), error)

        return resolve

    async def send_many(self, op: Op) -> None:
        assert self.producer is not None
        records = self.rec.new_records(op, "send_many", self.seed)
        keys = [r.key for r in records] if op.keyed else None
        try:
            bulk = await self.producer.send_many(
                op.topic,
                [r.value for r in records],
                keys=keys,
                timestamp_ms=self.timestamp(),
                headers=list(records[0].headers) or None,
            )
        except BaseException as exc:  # noqa: BLE001 - every outcome is recorded and judged
            # The records before the failing one may be queued (send_many's contract).
            self.rec.rejected(records, exc, expected=self.expected(exc), maybe_queued=True)
            return
        if op.headers:
            for r in records:
                r.headers = records[0].headers
        self.rec.returned(records)
        for r in records:
            r.done = bulk.done
        self.spawn(self.watch_bulk(bulk, records))

    async def watch_bulk(self, bulk: BulkDelivery, records: list[Sent]) -> None:
        await bulk.wait()
        errors = dict(bulk.errors())
        metadata = bulk.metadata() if not errors else None
        for i, sent in enumerate(records):
            if i in errors:
                self.rec.resolved(sent, None, errors[i])
            else:
                self.rec.resolved(sent, metadata[i] if metadata else None, None)

    async def send_and_wait(self, op: Op) -> None:
        assert self.producer is not None
        records = self.rec.new_records(op, "send_and_wait", self.seed)
        sent = records[0]
        try:
            meta = await self.producer.send_and_wait(
                op.topic,
                sent.value,
                key=sent.key,
                timestamp_ms=self.timestamp(),
                headers=list(sent.headers) or None,
            )
        except asyncio.CancelledError as exc:
            self.rec.rejected(records, exc, expected=True, maybe_queued=True)
            return
        except (MetadataTimeoutError, BufferExhaustedError, ProducerClosedError) as exc:
            # Maybe from send() (not queued), maybe from the delivery (close() gave up).
            self.rec.rejected(records, exc, expected=self.expected(exc), maybe_queued=True)
            return
        except BaseException as exc:  # noqa: BLE001 - every outcome is recorded and judged
            self.rec.returned(records)
            self.rec.resolved(sent, None, exc)
            return
        self.rec.returned(records)
        self.rec.resolved(sent, meta, None)

    async def bad_send(self, op: Op) -> None:
        """A call with a bad argument: a typed error here, nothing queued, nothing else hurt."""
        assert self.producer is not None
        what = BAD_CALLS[op.count]
        single = what.startswith("send timestamp_ms=")
        records = self.rec.new_records(
            Op("send", op.topic, 1 if single else 2, op.keyed), "bad", self.seed
        )
        values = [r.value for r in records]
        keys = [r.key for r in records] if op.keyed else None
        producer = self.producer
        try:
            if single:
                stamp = {"2**63": 2**63, "2**64": 2**64, "-5": -5}[what.split("=")[1]]
                await producer.send(op.topic, values[0], key=records[0].key, timestamp_ms=stamp)
            elif what == "send_many timestamp_ms=2**63":
                await producer.send_many(op.topic, values, keys=keys, timestamp_ms=2**63)
            elif what == "send_many values=5 (not iterable)":
                not_iterable: Any = 5
                await producer.send_many(op.topic, not_iterable)
            else:
                await producer.send_many(op.topic, values, keys=[b"k"])
        except BaseException as exc:  # noqa: BLE001 - judged below
            self.rec.rejected(
                records, exc, expected=isinstance(exc, KafkaError), maybe_queued=False
            )
            return
        self.rec.returned(records)
        for sent in records:
            sent.outcome = "rejected"  # must not be in the log either
        self.rec.problems.append(f"{what} was accepted")

    async def flush(self, op: Op) -> None:
        assert self.producer is not None
        call_tick = self.rec.next_tick()
        try:
            await self.producer.flush(None if op.ms < 0 else op.ms / 1000)
        except KafkaTimeoutError:
            if op.ms < 0:
                self.rec.problems.append("flush() without a timeout raised a timeout")
            return
        except BaseException as exc:  # noqa: BLE001 - every outcome is recorded and judged
            self.rec.problems.append(f"flush() raised {exc!r}")
            return
        for sent in self.rec.records:
            if 0 <= sent.ret_tick < call_tick and sent.done is not None and not sent.done():
                self.rec.problems.append(
                    f"flush() returned before record {sent.value.decode()} resolved"
                )
                return


def _shutdown(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        with contextlib.suppress(SimulationError):
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.close()


class _CrashLog(logging.Handler):
    """Keeps the producer's error-level log lines (a crash is logged there)."""

    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(f"the producer logged an error: {record.getMessage()}")


class _quiet_logs:
    """Producer logs stay out of the output (the trace tells the story); errors are kept."""

    def __init__(self, sink: list[str]) -> None:
        self._handler = _CrashLog(sink)
        self._logger = logging.getLogger("aiokprod")

    def __enter__(self) -> None:
        self._propagate = self._logger.propagate
        self._level = self._logger.level
        self._logger.propagate = False
        self._logger.setLevel(logging.ERROR)
        self._logger.addHandler(self._handler)

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self._handler)
        self._logger.propagate = self._propagate
        self._logger.setLevel(self._level)


def run_many(
    seeds: Iterable[int],
    *,
    on_result: Callable[[RunResult], None] | None = None,
) -> list[RunResult]:
    """Run every seed; returns the failing ones (``on_result`` sees each result)."""
    failures = []
    for seed in seeds:
        result = run_seed(seed)
        if on_result is not None:
            on_result(result)
        if not result.ok:
            failures.append(result)
    return failures


def format_failure(result: RunResult) -> str:
    """The report for a failing seed: the seed, its problems, and the replay command."""
    lines = [f"SEED {result.seed} FAILED ({len(result.problems)} problem(s)):"]
    lines += [f"  - {p}" for p in result.problems[:10]]
    if len(result.problems) > 10:
        lines.append(f"  ... and {len(result.problems) - 10} more")
    lines.append(f"  replay: {result.replay_command()}")
    return "\n".join(lines)
