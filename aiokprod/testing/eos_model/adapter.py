"""The sink's real code in the model: the committer, and a task's steps.

The driver side is :class:`~aiokprod.spark.committer.Committer` (``open_run_with``,
``commit_with``, ``abort_with``) with the model's admin and clock; a task is
:func:`~aiokprod.spark.transactional_write.write_in_transaction` with :class:`ModelTaskIO`,
the model's stand-in for a transactional producer and an admin client. What is not run is
what the steps hand to the producer (encoding rows) and Spark's own plumbing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from aiokprod.errors import KafkaError
from aiokprod.spark.committer import Committer
from aiokprod.spark.eos_records import RunToken, run_register_id, transactional_id
from aiokprod.spark.exactly_once import ExactlyOnceConfig, MicroBatch, TaskAction, TaskResult
from aiokprod.spark.transactional_write import write_in_transaction
from aiokprod.testing.eos_model.kafka import TICK_MS
from aiokprod.testing.eos_model.scheduler import ModelAdmin, ModelTaskKafka
from aiokprod.testing.eos_model.spark import Write
from aiokprod.types import OffsetAndMetadata, PreparedTransaction, TopicPartition

__all__ = ["PREFIX", "TOPIC", "ModelTaskIO", "SinkAdapter"]

PREFIX = "eos"
TOPIC = "t"


class RowFailedError(KafkaError):
    """A task's rows could not all be written (its attempt fails)."""


class ModelTaskIO:
    """:class:`~aiokprod.spark.transactional_write.TaskKafka` over the model."""

    def __init__(self, kafka: ModelTaskKafka, transactional_id: str) -> None:
        self._k = kafka
        self._tid = transactional_id
        self._pid = self._epoch = -1
        self._wrote = False

    async def run_token(self) -> RunToken | None:
        """The run register's token now."""
        register = run_register_id(PREFIX)
        view = (await self._k.admin.describe_transactions([register])).get(register)
        return None if view is None else RunToken(view.producer_id, view.producer_epoch)

    async def start(self) -> None:
        """InitProducerId."""
        self._pid, self._epoch = await self._k.init_producer_id(self._tid)

    async def read_marker(
        self, group: str, tp: TopicPartition
    ) -> Mapping[TopicPartition, OffsetAndMetadata]:
        """OffsetFetch, RequireStable."""
        return await self._k.admin.list_consumer_group_offsets(group, [tp], require_stable=True)

    async def begin(self) -> None:
        """Nothing to send yet (the first write opens it)."""
        return None

    async def send(self, batch: tuple[object, ...]) -> bool:
        """Produce (acknowledged at once)."""
        self._wrote = True
        await self._k.produce(self._tid, self._pid, self._epoch, batch)
        return True

    async def add_marker(self, group: str, tp: TopicPartition, value: OffsetAndMetadata) -> None:
        """TxnOffsetCommit."""
        self._wrote = True
        await self._k.txn_offset_commit(self._tid, self._pid, self._epoch, group, tp, value)

    async def prepare(self) -> PreparedTransaction:
        """The ids (every record is acknowledged already)."""
        return PreparedTransaction(self._tid, self._pid, self._epoch, 2)

    async def abort(self) -> None:
        """EndTxn(abort), if the transaction started."""
        if self._wrote:  # a producer sends EndTxn only for a transaction it started
            with contextlib.suppress(KafkaError):
                await self._k.end_txn(self._tid, self._pid, self._epoch, False)

    def now_ms(self) -> int:
        """The model's clock."""
        return self._k.now_ms()


class SinkAdapter:
    """Runs the sink's code (this tree's) in the model.

    Args:
        margin_ticks: the commit margin, in ticks.
    """

    def __init__(self, margin_ticks: int = 1, attempts: int = 2) -> None:
        self._margin_ms = margin_ticks * TICK_MS
        self._attempts = attempts

    def _committer(self, write: Write, admin: ModelAdmin, timeout_ticks: int) -> Committer:
        return Committer(
            "model:9092",
            {"transaction_timeout_ms": timeout_ticks * TICK_MS},
            PREFIX,
            write.streaming,
            clock=admin.now_ms,
            margin_ms=self._margin_ms,
            in_use_wait_ms=0,  # a wait for activity: liveness, not safety (docs/spark.md)
            fence_attempts=self._attempts,
        )

    async def plan(self, write: Write, admin: ModelAdmin) -> Any:
        """``writer()`` / the planning ``streamWriter()``: open the run."""
        run = await self._committer(write, admin, admin.timeout_ticks).open_run_with(admin)
        return ExactlyOnceConfig(PREFIX, write.streaming, run, check_interval_ms=TICK_MS)

    async def task(
        self, write: Write, config: Any, partition: int, attempt: int, kafka: ModelTaskKafka
    ) -> Any:
        """A task attempt: :func:`write_in_transaction` with the model's I/O."""
        eos: ExactlyOnceConfig = config
        scope = None if write.streaming else eos.run
        io = ModelTaskIO(kafka, transactional_id(PREFIX, partition, attempt, scope))
        micro = MicroBatch(write.query_id, write.index) if write.streaming else None

        async def rows() -> AsyncIterator[tuple[object, ...]]:
            yield write.label(partition)

        action, prepared = await write_in_transaction(io, eos, partition, TOPIC, rows(), micro)
        if action is TaskAction.WRITE and prepared is None:
            raise RowFailedError("a row failed")
        return TaskResult(partition, action, prepared, TOPIC, eos.run)

    async def commit(self, write: Write, messages: Sequence[Any], admin: ModelAdmin) -> None:
        """The driver's ``commit()``."""
        committer = self._committer(write, admin, admin.timeout_ticks)
        if write.streaming:
            await committer.commit_with(admin, None, write.index, messages, write.query_id)
        else:
            await committer.commit_with(admin, write.config.run, None, messages)

    async def abort(self, write: Write, messages: Sequence[Any | None], admin: ModelAdmin) -> None:
        """The driver's ``abort()``."""
        committer = self._committer(write, admin, admin.timeout_ticks)
        if write.streaming:
            await committer.abort_with(admin, None, write.index, messages)
        else:
            await committer.abort_with(admin, write.config.run, None, messages)
