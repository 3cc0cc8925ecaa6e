"""The protocol of 6680b29 in the model (issue 41's "before").

The driver side is that commit's code (``Committer``'s ``_recover``, ``_commit`` and
``_abort`` with the model's admin). The task side follows that commit's
``txn_task.write_transaction`` step for step: InitProducerId on ``<prefix>-<partition>``, the
marker read (RequireStable) and ``decide_task``, the rows and the marker in the transaction,
the prepare.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from aiokprod.errors import KafkaError
from aiokprod.testing.eos_model.scheduler import ModelAdmin, ModelTaskKafka
from aiokprod.testing.eos_model.spark import Write
from aiokprod.types import PreparedTransaction, TopicPartition

PREFIX = "eos"
TOPIC = "t"


class _ModelTime:
    def __init__(self, admin: ModelAdmin) -> None:
        self._admin = admin

    def time(self) -> float:
        return self._admin.now_ms() / 1000


class LegacyAdapter:
    """Runs the sink of 6680b29 in the model."""

    def __init__(self) -> None:
        from eos_legacy import committer as module

        self._module = module

    def _committer(self, write: Write, admin: ModelAdmin) -> Any:
        self._module.time = _ModelTime(admin)
        return self._module.Committer("model:9092", {}, PREFIX, write.streaming)

    async def plan(self, write: Write, admin: ModelAdmin) -> Any:
        committer = self._committer(write, admin)
        await committer._recover(admin, fence_open=not write.streaming)
        return PREFIX

    async def task(
        self, write: Write, config: Any, partition: int, attempt: int, kafka: ModelTaskKafka
    ) -> Any:
        from eos_legacy.eos_records import marker, marker_group, transactional_id
        from eos_legacy.exactly_once import TaskAction, TaskResult, decide_task

        tid = transactional_id(PREFIX, partition)
        pid, epoch = await kafka.init_producer_id(tid)
        tp = TopicPartition(TOPIC, 0)
        action = TaskAction.WRITE
        if write.streaming:
            offsets = await kafka.admin.list_consumer_group_offsets(
                marker_group(PREFIX, partition), [tp], require_stable=True
            )
            action = decide_task(1, offsets, write.query_id, write.index)
        if action is TaskAction.SKIP:
            return TaskResult(partition, TaskAction.SKIP)
        try:
            await kafka.produce(tid, pid, epoch, write.label(partition))
            if write.streaming:
                await kafka.txn_offset_commit(
                    tid,
                    pid,
                    epoch,
                    marker_group(PREFIX, partition),
                    tp,
                    marker(write.query_id, write.index),
                )
        except KafkaError:
            with contextlib.suppress(KafkaError):
                await kafka.end_txn(tid, pid, epoch, False)
            raise
        return TaskResult(
            partition, TaskAction.WRITE, PreparedTransaction(tid, pid, epoch, 2), TOPIC
        )

    async def commit(self, write: Write, messages: Sequence[Any], admin: ModelAdmin) -> None:
        committer = self._committer(write, admin)
        if write.streaming:  # Spark's commit process calls streamWriter() first
            await committer._recover(admin, fence_open=False)
            await committer._commit(admin, write.query_id, write.index, messages)
        else:
            await committer._commit(admin, write.run_id, None, messages)

    async def abort(self, write: Write, messages: Sequence[Any | None], admin: ModelAdmin) -> None:
        committer = self._committer(write, admin)
        if write.streaming:
            await committer._recover(admin, fence_open=False)
            await committer._abort(admin, write.query_id, write.index, messages)
        else:
            await committer._abort(admin, write.run_id, None, messages)


__all__ = ["LegacyAdapter"]
