"""Spark's side of the exactly-once model: jobs, micro-batches, task attempts, the driver.

:class:`SparkModel` plays what Spark does around the sink, as the Python Data Source API and
Structured Streaming do it (docs/spark.md, /shared reference ``spark-python-datasource.md``):

- **Planning**: the driver calls ``writer()`` (a batch job) or ``streamWriter()`` (every
  micro-batch) and ships the writer to the tasks.
- **Tasks**: every Spark partition runs attempt 0; Spark may start another attempt of a
  partition that has not succeeded yet (a retry after a failure or a lost executor, or a
  speculative copy of a slow one); the first attempt to succeed is the partition's (Spark's
  commit coordinator). An attempt Spark has given up on keeps running: a *straggler*.
- **Commit**: once every partition succeeded, the driver calls ``commit(messages)``; when
  it raises, Spark calls ``abort`` with the same messages. When Spark gives up on a job or
  micro-batch (a task failed too often, ``query.stop()``), it calls ``abort``.
- **Streaming**: a micro-batch committed by the sink is added to Spark's commit log; a
  restarted query replays the first micro-batch not in it, with the same rows.
- **Faults**: any process may die at any step (a task's Python worker, the driver), with or
  without the answer to its last call; the clock may advance, and the coordinator then
  aborts transactions past their timeout.

The sink's code runs through an :class:`Adapter`: how the driver plans, how a task writes,
how the driver commits and aborts. The model's own choices are :meth:`SparkModel.moves`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from aiokprod.testing.eos_model.kafka import ModelKafka
from aiokprod.testing.eos_model.scheduler import ModelAdmin, ModelTaskKafka, Scheduler, Step

__all__ = ["Adapter", "Config", "Move", "SparkModel", "Write"]


@dataclasses.dataclass(frozen=True)
class Config:
    """The size of what is explored.

    Attributes:
        streaming: micro-batches of one query (else batch jobs, one after the other).
        partitions: Spark partitions of every write.
        writes: batch jobs, or micro-batches the query must commit.
        attempts: attempts Spark may start per partition of a write.
        crashes: process deaths in all (task attempts and drivers; a lost answer counts).
        ticks: clock steps (each lets the coordinator time out transactions older than
            ``timeout_ticks``).
        give_ups: times Spark may give up on a write that has not failed (a stop, a lost
            stage); a write that cannot succeed any more is always given up.
        restarts: streaming: query restarts after it stopped or its driver died.
        timeout_ticks: the transaction timeout, in ticks.
        preemptions: switches from an actor that could go on to another one (None: any).
            Bounding them (CHESS's context bounding) keeps the search small while keeping
            every interleaving that needs at most that many switches; crashes, clock ticks
            and Spark's own choices are not counted.
    """

    streaming: bool
    partitions: int = 2
    writes: int = 2
    attempts: int = 2
    crashes: int = 1
    ticks: int = 0
    give_ups: int = 1
    restarts: int = 1
    timeout_ticks: int = 4
    preemptions: int | None = None

    def describe(self) -> str:
        """One line: what was explored."""
        kind = "micro-batches" if self.streaming else "batch jobs"
        return (
            f"{self.partitions} partitions x {self.writes} {kind} x {self.attempts} attempts, "
            f"{self.crashes} crash(es), {self.ticks} tick(s) (timeout {self.timeout_ticks}), "
            f"{self.give_ups} give-up(s)"
            + (f", {self.restarts} restart(s)" if self.streaming else "")
            + ("" if self.preemptions is None else f", {self.preemptions} preemption(s)")
        )


class Adapter(Protocol):
    """The sink's code, as the model runs it."""

    async def plan(self, run: Write, admin: ModelAdmin) -> Any:
        """The driver's planning (``writer()`` / ``streamWriter()``): the tasks' config."""
        ...

    async def task(
        self, run: Write, config: Any, partition: int, attempt: int, kafka: ModelTaskKafka
    ) -> Any:
        """A task attempt: its commit message, or it raises (the attempt fails)."""
        ...

    async def commit(self, run: Write, messages: Sequence[Any], admin: ModelAdmin) -> None:
        """The driver's ``commit(messages[, batchId])``."""
        ...

    async def abort(self, run: Write, messages: Sequence[Any | None], admin: ModelAdmin) -> None:
        """The driver's ``abort(messages[, batchId])``."""
        ...


@dataclasses.dataclass
class Write:
    """One batch job, or one attempt at one micro-batch (a run of the query's driver)."""

    run: int
    index: int
    streaming: bool
    partitions: int
    phase: str = "planning"
    config: Any = None
    launched: list[int] = dataclasses.field(default_factory=list)
    failed: list[int] = dataclasses.field(default_factory=list)
    messages: dict[int, Any] = dataclasses.field(default_factory=dict)
    outcome: str = ""

    @property
    def name(self) -> str:
        """``r<run>.w<index>``."""
        return f"r{self.run}.w{self.index}"

    @property
    def query_id(self) -> str:
        """The streaming query's id (stable across restarts)."""
        return "query-1"

    @property
    def run_id(self) -> str:
        """The query run's id (a new one after each restart), or the batch job's."""
        return f"run-{self.run}"

    def label(self, partition: int) -> tuple[object, ...]:
        """What partition ``partition`` of this write writes (the same in every attempt)."""
        return ("batch" if self.streaming else "job", self.index, partition)

    def digest(self) -> tuple[object, ...]:
        """The write's state."""
        return (
            self.run,
            self.index,
            self.phase,
            tuple(self.launched),
            tuple(self.failed),
            tuple(sorted(self.messages)),
            self.outcome,
        )


@dataclasses.dataclass(frozen=True)
class Move:
    """One choice of the explorer."""

    describe: Callable[[], str]
    act: Callable[[], None]

    @property
    def label(self) -> str:
        """What the move does, for traces."""
        return self.describe()


class SparkModel:
    """Spark around the sink, on a :class:`ModelKafka`, with every choice exposed."""

    def __init__(self, config: Config, adapter: Adapter) -> None:
        self.config = config
        self.adapter = adapter
        self.kafka = ModelKafka()
        self.scheduler = Scheduler(self.kafka)
        self.writes: list[Write] = []
        self.commit_log: list[int] = []
        self.crashes = config.crashes
        self.ticks = config.ticks
        self.give_ups = config.give_ups
        self.restarts = config.restarts
        self.preemptions = config.preemptions
        #: The actor whose step was applied last (a switch away from it, while it could go
        #: on, is a preemption).
        self.current: str | None = None
        self.runs = 0
        self.errors: list[str] = []
        #: Exceptions the sink raised to Spark, per write: (write name, where, exception).
        self.raised: list[tuple[str, str, BaseException]] = []
        self.events: list[str] = []
        self._actors: dict[str, tuple[Write, str, int, int]] = {}
        self._start_run(0)

    # --- runs and writes ---------------------------------------------------------------------

    def _start_run(self, index: int) -> None:
        write = Write(self.runs, index, self.config.streaming, self.config.partitions)
        self.runs += 1
        self.writes.append(write)
        admin = ModelAdmin(self.scheduler, f"{write.name}.plan", self.config.timeout_ticks)
        self._spawn(write, "plan", -1, -1, self.adapter.plan(write, admin))

    def _spawn(self, write: Write, role: str, partition: int, attempt: int, coro: Any) -> None:
        actor = f"{write.name}.{role}"
        self._actors[actor] = (write, role, partition, attempt)
        self.scheduler.spawn(actor, coro)
        self._settle()

    def _launch(self, write: Write, partition: int) -> None:
        attempt = write.launched[partition]
        write.launched[partition] += 1
        kafka = ModelTaskKafka(
            self.scheduler, f"{write.name}.p{partition}a{attempt}", self.config.timeout_ticks
        )
        coro = self.adapter.task(write, write.config, partition, attempt, kafka)
        self._spawn(write, f"p{partition}a{attempt}", partition, attempt, coro)

    def _settle(self) -> None:
        """React to the actors that finished (Spark's bookkeeping), until nothing changes."""
        while True:
            finished = self.scheduler.finished()
            if not finished:
                return
            for actor, (kind, value) in sorted(finished.items()):
                self._finished(actor, kind, value)

    def _finished(self, actor: str, kind: str, value: object) -> None:
        write, role, partition, _ = self._actors[actor]
        if kind == "error" and not isinstance(value, Exception):
            self.errors.append(f"{actor} ended with {value!r}")
            return
        if kind == "error" and _is_bug(value):
            self.errors.append(f"{actor} crashed: {type(value).__name__}: {value}")
        if role == "plan":
            self._planned(write, kind, value)
        elif role == "commit":
            self._committed(write, kind, value)
        elif role == "abort":
            if kind == "error":
                self.raised.append((write.name, "abort", value))  # type: ignore[arg-type]
            write.phase = "ended"
            write.outcome = write.outcome or "failed"
        elif write.phase == "running":
            if kind == "ok" and partition not in write.messages:
                write.messages[partition] = value
                if len(write.messages) == write.partitions:
                    self._commit(write)
            elif kind == "error":
                write.failed[partition] += 1

    def _planned(self, write: Write, kind: str, value: object) -> None:
        if kind == "error":
            self.raised.append((write.name, "plan", value))  # type: ignore[arg-type]
            write.phase, write.outcome = "ended", "failed"
            return
        write.config = value
        write.phase = "running"
        write.launched = [0] * write.partitions
        write.failed = [0] * write.partitions
        for partition in range(write.partitions):
            self._launch(write, partition)

    def _commit(self, write: Write) -> None:
        write.phase = "committing"
        messages = [write.messages[p] for p in range(write.partitions)]
        admin = ModelAdmin(self.scheduler, f"{write.name}.commit", self.config.timeout_ticks)
        self._spawn(write, "commit", -1, -1, self.adapter.commit(write, messages, admin))

    def _committed(self, write: Write, kind: str, value: object) -> None:
        if kind == "ok":
            write.phase, write.outcome = "ended", "committed"
            if write.streaming:
                self.commit_log.append(write.index)
                if write.index + 1 < self.config.writes:
                    self._start_run_continued(write)
            return
        self.raised.append((write.name, "commit", value))  # type: ignore[arg-type]
        write.outcome = "commit failed"
        self._abort(write)

    def _start_run_continued(self, done: Write) -> None:
        """The next micro-batch of the same query run."""
        write = Write(done.run, done.index + 1, True, self.config.partitions)
        self.writes.append(write)
        admin = ModelAdmin(self.scheduler, f"{write.name}.plan", self.config.timeout_ticks)
        self._spawn(write, "plan", -1, -1, self.adapter.plan(write, admin))

    def _abort(self, write: Write) -> None:
        write.phase = "aborting"
        messages = [write.messages.get(p) for p in range(write.partitions)]
        admin = ModelAdmin(self.scheduler, f"{write.name}.abort", self.config.timeout_ticks)
        self._spawn(write, "abort", -1, -1, self.adapter.abort(write, messages, admin))

    # --- the choices -------------------------------------------------------------------------

    def moves(self) -> list[Move]:
        """Every choice the explorer may take now (empty: the run is over)."""
        moves: list[Move] = []
        s = self.scheduler
        crashed_now: set[str] = set()
        current_ready = self.current is not None and any(
            st.actor == self.current and st.is_ready() for st in s.pending
        )
        for step in sorted(s.pending, key=lambda st: st.seq):
            preempts = current_ready and step.actor != self.current
            if preempts and self.preemptions == 0:
                pass
            elif step.is_ready():
                moves.append(Move(functools.partial(_step_label, step, ""), self._do(step)))
                if self.crashes:
                    label = functools.partial(_step_label, step, ", answer lost")
                    moves.append(Move(label, self._lose(step)))
            else:
                label = functools.partial(_step_label, step, " gives up waiting")
                moves.append(Move(label, self._wait_out(step)))
            if self.crashes and step.actor not in crashed_now:
                crashed_now.add(step.actor)
                moves.append(Move(_text(f"{step.actor} dies"), self._kill(step.actor)))
        for tid in self.kafka.expired():
            moves.append(Move(_text(f"coordinator times out {tid}"), self._expire(tid)))
        if self.ticks and self.kafka.ongoing_exists():
            # The clock matters only to open transactions (their timeout and the driver's
            # margin): a tick with none open changes nothing but the decisions' sequences.
            moves.append(Move(_text("clock ticks"), self._tick))
        moves.extend(self._spark_moves())
        return moves

    def _spark_moves(self) -> list[Move]:
        moves: list[Move] = []
        for write in self.writes:
            if write.phase != "running":
                continue
            stuck = False
            for p in range(write.partitions):
                if p in write.messages:
                    continue
                live = any(
                    self.scheduler.alive(f"{write.name}.p{p}a{a}") for a in range(write.launched[p])
                )
                if write.launched[p] < self.config.attempts:
                    label = _text(f"spark starts attempt {write.launched[p]} of {write.name}.p{p}")
                    moves.append(Move(label, self._starter(write, p)))
                elif not live:
                    stuck = True
            if stuck or self.give_ups:
                label = _text(f"spark gives up on {write.name}")
                moves.append(Move(label, self._giver(write, forced=stuck)))
        last = self.writes[-1]
        if last.phase == "ended" and not self._pending_driver():
            if self.config.streaming:
                if self.restarts and len(self.commit_log) < self.config.writes:
                    moves.append(Move(_text("the query restarts"), self._restart))
            elif last.index + 1 < self.config.writes:
                moves.append(Move(_text("the next batch job starts"), self._next_job))
        return moves

    def _pending_driver(self) -> bool:
        return any(
            self.scheduler.alive(a)
            for a, (_, role, _, _) in self._actors.items()
            if role in ("plan", "commit", "abort")
        )

    def _switch(self, actor: str) -> None:
        """``actor`` takes a step: count a preemption if the current actor could go on."""
        current = self.current
        if (
            actor != current
            and current is not None
            and self.preemptions is not None
            and any(st.actor == current and st.is_ready() for st in self.scheduler.pending)
        ):
            self.preemptions -= 1
        self.current = actor

    def _do(self, step: Step) -> Callable[[], None]:
        def act() -> None:
            self._switch(step.actor)
            self.scheduler.apply(step)
            self._settle()

        return act

    def _lose(self, step: Step) -> Callable[[], None]:
        def act() -> None:
            self._switch(step.actor)
            self.crashes -= 1
            self.scheduler.apply(step, answer=False)
            self._died(step.actor)
            self._settle()

        return act

    def _wait_out(self, step: Step) -> Callable[[], None]:
        def act() -> None:
            self._switch(step.actor)
            self.scheduler.time_out(step)
            self._settle()

        return act

    def _kill(self, actor: str) -> Callable[[], None]:
        def act() -> None:
            self.crashes -= 1
            self.scheduler.crash(actor)
            self._died(actor)
            self._settle()

        return act

    def _died(self, actor: str) -> None:
        """A dead driver process ends its write (a streaming query's run with it)."""
        write, role, partition, _ = self._actors[actor]
        self.events.append(f"{actor} died")
        if role in ("plan", "commit", "abort"):
            write.phase = "ended"
            write.outcome = "driver died"
        elif write.phase == "running":
            write.failed[partition] += 1

    def _expire(self, tid: str) -> Callable[[], None]:
        def act() -> None:
            self.kafka.time_out(tid)
            self._settle()

        return act

    def _tick(self) -> None:
        self.ticks -= 1
        self.kafka.tick += 1

    def _starter(self, write: Write, partition: int) -> Callable[[], None]:
        return lambda: self._launch(write, partition)

    def _giver(self, write: Write, forced: bool) -> Callable[[], None]:
        def act() -> None:
            if not forced:
                self.give_ups -= 1
            write.outcome = "given up"
            self._abort(write)

        return act

    def _restart(self) -> None:
        self.restarts -= 1
        self._start_run(len(self.commit_log))

    def _next_job(self) -> None:
        self._start_run(self.writes[-1].index + 1)

    # --- the explorer's view ---------------------------------------------------------------------

    def digest(self) -> tuple[object, ...]:
        """Everything that decides what can happen next."""
        return (
            self.kafka.digest(),
            self.scheduler.digest(),
            tuple(w.digest() for w in self.writes),
            tuple(self.commit_log),
            (self.crashes, self.ticks, self.give_ups, self.restarts, self.preemptions),
            self.current,
            tuple(self.errors),
        )


def _step_label(step: Step, suffix: str) -> str:
    return f"{step.actor}: {step.name}(" + ", ".join(repr(a) for a in step.args) + ")" + suffix


def _text(label: str) -> Callable[[], str]:
    return functools.partial(str, label)


def _is_bug(error: object) -> bool:
    """An exception no Kafka call explains: the sink's own code failed."""
    from aiokprod.errors import KafkaError

    return not isinstance(error, KafkaError)
