"""The model's scheduler: real asyncio code, one Kafka call at a time, in a chosen order.

Every actor (a Spark task attempt, the driver's planning, its commit or abort) is real code
of the sink running as an asyncio task on a :class:`~aiokprod.testing.sim.loop.VirtualLoop`.
Its Kafka calls go through :class:`ModelAdmin` and :class:`ModelTaskKafka`, whose every
method is a *step*: it registers itself as pending and waits. Between steps the loop runs
until every actor is waiting again; the explorer then picks which pending step happens next
(or a fault: an actor crashes before a step, or after it with the answer lost). So a run is
a pure function of the sequence of choices, and the explorer can enumerate them.
"""

from __future__ import annotations

import asyncio
import asyncio.events as asyncio_events
import contextlib
import dataclasses
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any

from aiokprod.errors import KafkaError, KafkaTimeoutError
from aiokprod.testing.eos_model.kafka import TICK_MS, ModelKafka
from aiokprod.testing.sim.loop import VirtualLoop
from aiokprod.types import (
    OffsetAndMetadata,
    PreparedTransaction,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)

__all__ = ["ModelAdmin", "ModelTaskKafka", "Scheduler", "Step"]


@dataclasses.dataclass(eq=False)
class Step:
    """A pending Kafka call of an actor."""

    actor: str
    name: str
    args: tuple[object, ...]
    apply: Callable[[], Any]
    future: asyncio.Future[Any]
    seq: int
    #: False while the call cannot complete (RequireStable and a pending offset).
    ready: Callable[[], bool] | None = None

    def is_ready(self) -> bool:
        """Whether the call can complete now."""
        return self.ready is None or self.ready()

    def key(self) -> tuple[object, ...]:
        """What the step is, for the state digest and traces."""
        return (self.actor, self.name, self.args)


class Scheduler:
    """Runs actors on a virtual loop and applies their steps one at a time, as chosen."""

    def __init__(self, kafka: ModelKafka) -> None:
        self.kafka = kafka
        self.loop = VirtualLoop()
        self.pending: list[Step] = []
        self.dead: set[str] = set()
        self.history: dict[str, list[tuple[object, ...]]] = {}
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self.results: dict[str, tuple[str, object]] = {}
        self._seq = 0
        self._closing = False

    # --- actors -----------------------------------------------------------------------------

    def spawn(self, actor: str, coro: Coroutine[Any, Any, Any]) -> None:
        """Start ``coro`` as ``actor``; it runs until its first step."""
        if actor in self.tasks:
            raise ValueError(f"actor {actor} exists already")
        self.history[actor] = []
        self.tasks[actor] = self.loop.create_task(coro, name=actor)
        self.run_until_idle()

    def finished(self) -> dict[str, tuple[str, object]]:
        """Actors that returned ("ok", value) or raised ("error", exception) since last asked."""
        done = {}
        for actor, task in self.tasks.items():
            if actor in self.results or actor in self.dead or not task.done():
                continue
            error = task.exception()
            result = ("error", error) if error is not None else ("ok", task.result())
            self.results[actor] = result
            done[actor] = result
        return done

    def alive(self, actor: str) -> bool:
        """Whether ``actor`` still runs (not finished, not crashed)."""
        task = self.tasks.get(actor)
        return task is not None and not task.done() and actor not in self.dead

    def crash(self, actor: str) -> None:
        """The actor's process dies: its pending steps vanish, it never runs again."""
        self.dead.add(actor)
        self.pending = [s for s in self.pending if s.actor != actor]

    # --- steps ------------------------------------------------------------------------------

    async def call(
        self,
        actor: str,
        name: str,
        args: tuple[object, ...],
        apply: Callable[[], Any],
        ready: Callable[[], bool] | None = None,
    ) -> Any:
        """Register a step of ``actor`` and wait until the explorer applies it."""
        if self._closing:  # the run is over: whatever an actor still tries, it is cancelled
            raise asyncio.CancelledError
        future: asyncio.Future[Any] = self.loop.create_future()
        self._seq += 1
        self.pending.append(Step(actor, name, args, apply, future, self._seq, ready))
        return await future

    def apply(self, step: Step, *, answer: bool = True) -> None:
        """Apply ``step``'s effect; deliver the answer (or, ``answer=False``, lose it)."""
        self.pending.remove(step)
        try:
            value = step.apply()
            outcome: tuple[object, ...] = ("ok", _canonical(value))
            error: BaseException | None = None
        except KafkaError as exc:
            value, error = None, exc
            outcome = ("error", type(exc).__name__)
        self.history[step.actor].append((step.name, step.args, outcome))
        if not answer:
            self.crash(step.actor)
        elif error is not None:
            step.future.set_exception(error)
        else:
            step.future.set_result(value)
        self.run_until_idle()

    def run_to_end(self, actor: str, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` as ``actor`` alone, every step applied as soon as it is taken.

        For tests of one component against the model (no choices): returns what the
        coroutine returns, or raises what it raises. A step that cannot complete fails as it
        would after ``max_block_ms``; a sleep jumps the virtual clock.
        """
        self.spawn(actor, coro)
        task = self.tasks[actor]
        while not task.done():
            ready = [st for st in self.pending if st.is_ready()]
            if ready:
                self.apply(min(ready, key=lambda st: st.seq))
            elif self.pending:
                self.time_out(min(self.pending, key=lambda st: st.seq))
            else:  # waiting on a timer: let the loop move its clock to it
                previous = asyncio_events._get_running_loop()
                asyncio_events._set_running_loop(self.loop)
                try:
                    self.loop._run_once()  # type: ignore[attr-defined]
                finally:
                    asyncio_events._set_running_loop(previous)
                self.run_until_idle()
        self.results[actor] = ("done", None)
        return task.result()

    def time_out(self, step: Step) -> None:
        """A step that could not complete gives up (the client's ``max_block_ms``)."""
        self.pending.remove(step)
        self.history[step.actor].append((step.name, step.args, ("error", "KafkaTimeoutError")))
        step.future.set_exception(KafkaTimeoutError(f"model: {step.name} timed out"))
        self.run_until_idle()

    def run_until_idle(self) -> None:
        """Run ready callbacks until every live actor waits on a step (or is done)."""
        loop = self.loop
        ready = loop._ready  # type: ignore[attr-defined]
        previous = asyncio_events._get_running_loop()
        asyncio_events._set_running_loop(loop)
        try:
            for _ in range(100_000):
                if not ready:
                    return
                loop._run_once()  # type: ignore[attr-defined]
        finally:
            asyncio_events._set_running_loop(previous)
        raise RuntimeError("model: an actor runs without ever taking a step")

    def close(self) -> None:
        """End the run: cancel every actor still waiting (dead ones included), close the loop."""
        self._closing = True
        for step in self.pending:
            step.future.cancel()
        self.pending = []
        for task in self.tasks.values():
            task.cancel()
        with contextlib.suppress(RuntimeError):  # an actor that never waits again
            self.run_until_idle()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    def digest(self) -> tuple[object, ...]:
        """The actors' states: each one's answers so far, and what it waits for."""
        actors = tuple(
            (name, name in self.dead, self.tasks[name].done(), tuple(self.history[name]))
            for name in sorted(self.tasks)
        )
        waiting = tuple(sorted((s.key() for s in self.pending), key=repr))
        return (actors, waiting)


def _canonical(value: object) -> object:
    """A hashable, order-independent form of a step's answer."""
    if isinstance(value, Mapping):
        return tuple(sorted(((repr(k), _canonical(v)) for k, v in value.items()), key=repr))
    if isinstance(value, list | tuple | frozenset | set):
        return tuple(_canonical(v) for v in value)
    return value


class ModelAdmin:
    """The :class:`~aiokprod.admin.Admin` calls the sink's driver makes, over the model.

    Every call is one step of ``actor``.
    """

    def __init__(self, scheduler: Scheduler, actor: str, timeout_ticks: int) -> None:
        self._s = scheduler
        self._k = scheduler.kafka
        self._actor = actor
        self.timeout_ticks = timeout_ticks

    async def complete_transaction(self, prepared: PreparedTransaction, *, commit: bool) -> None:
        """EndTxn with the prepared producer id and epoch."""
        p = prepared
        await self._s.call(
            self._actor,
            "EndTxn",
            (p.transactional_id, p.producer_id, p.producer_epoch, commit),
            lambda: self._k.end_txn(p.transactional_id, p.producer_id, p.producer_epoch, commit),
        )

    async def fence_producers(
        self, transactional_ids: Iterable[str], *, transaction_timeout_ms: int | None = None
    ) -> None:
        """InitProducerId on each id (one step each, concurrently, as the real admin)."""
        ids = list(dict.fromkeys(transactional_ids))
        await asyncio.gather(*(self._fence(tid, transaction_timeout_ms) for tid in ids))

    async def _fence(self, tid: str, timeout_ms: int | None) -> None:
        # The model keeps a timeout in ticks; one given in milliseconds (the run register's
        # open/closed marks) is kept as is, so that DescribeTransactions reports it back.
        ticks = self.timeout_ticks if timeout_ms is None else -timeout_ms
        await self._s.call(
            self._actor,
            "InitProducerId",
            (tid,),
            lambda: self._k.init_producer_id(tid, ticks),
        )

    async def list_transactions(
        self, *, states: Iterable[str] = (), producer_ids: Iterable[int] = ()
    ) -> list[TransactionListing]:
        """ListTransactions; the model answers for ``Ongoing`` only."""
        if list(states) != ["Ongoing"] or list(producer_ids):
            raise NotImplementedError("model: ListTransactions(states=['Ongoing']) only")

        def listing() -> list[TransactionListing]:
            return [
                TransactionListing(tid, self._k.ids[tid].producer_id, "Ongoing")
                for tid in self._k.ongoing(self._actor)
            ]

        result: list[TransactionListing] = await self._s.call(
            self._actor, "ListTransactions", (), listing
        )
        return result

    async def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> dict[str, TransactionDescription]:
        """DescribeTransactions."""
        ids = tuple(dict.fromkeys(transactional_ids))
        result: dict[str, TransactionDescription] = await self._s.call(
            self._actor, "DescribeTransactions", ids, lambda: self._k.describe(ids)
        )
        return result

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """OffsetFetch; with ``require_stable`` it waits while a pending offset exists."""
        tps = None if partitions is None else tuple(partitions)
        ready = None
        if require_stable:
            ready = lambda: not self._k.unstable(group_id, tps)  # noqa: E731
        result: dict[TopicPartition, OffsetAndMetadata] = await self._s.call(
            self._actor,
            "OffsetFetch",
            (group_id, tps, require_stable),
            lambda: self._k.fetch_offsets(group_id, tps),
            ready,
        )
        return result

    async def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | int]
    ) -> None:
        """OffsetCommit (plain)."""
        values = {
            tp: v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(v)
            for tp, v in offsets.items()
        }
        key = tuple(sorted(((tp.topic, tp.partition, v) for tp, v in values.items()), key=repr))
        await self._s.call(
            self._actor,
            "OffsetCommit",
            (group_id, key),
            lambda: self._k.commit_offsets(group_id, values),
        )

    def now_ms(self) -> int:
        """The model's clock (what the driver's wall clock reads)."""
        return self._k.tick * TICK_MS


class ModelTaskKafka:
    """What a task's transactional producer does, as steps of ``actor``."""

    def __init__(self, scheduler: Scheduler, actor: str, timeout_ticks: int) -> None:
        self._s = scheduler
        self._k = scheduler.kafka
        self.actor = actor
        self.timeout_ticks = timeout_ticks
        self.admin = ModelAdmin(scheduler, actor, timeout_ticks)

    async def init_producer_id(self, tid: str) -> tuple[int, int]:
        """InitProducerId: the producer's start."""
        result: tuple[int, int] = await self._s.call(
            self.actor,
            "InitProducerId",
            (tid,),
            lambda: self._k.init_producer_id(tid, self.timeout_ticks),
        )
        return result

    async def produce(self, tid: str, pid: int, epoch: int, label: tuple[object, ...]) -> None:
        """Records of the transaction, acknowledged."""
        await self._s.call(
            self.actor,
            "Produce",
            (tid, pid, epoch, label),
            lambda: self._k.produce(tid, pid, epoch, label, self.actor),
        )

    async def txn_offset_commit(
        self,
        tid: str,
        pid: int,
        epoch: int,
        group: str,
        tp: TopicPartition,
        value: OffsetAndMetadata,
    ) -> None:
        """AddOffsetsToTxn + TxnOffsetCommit."""
        await self._s.call(
            self.actor,
            "TxnOffsetCommit",
            (tid, pid, epoch, group, tp, value),
            lambda: self._k.txn_offset_commit(tid, pid, epoch, group, tp, value, self.actor),
        )

    def now_ms(self) -> int:
        """The model's clock."""
        return self._k.tick * TICK_MS

    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> None:
        """The producer's own EndTxn (an abort after a failure)."""
        await self._s.call(
            self.actor,
            "EndTxn",
            (tid, pid, epoch, commit),
            lambda: self._k.end_txn(tid, pid, epoch, commit),
        )
