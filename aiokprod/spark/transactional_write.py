"""A task's side of exactly-once writes: the partition in one transaction, prepared.

:meth:`PartitionWriter.write <aiokprod.spark.partition_writer.PartitionWriter.write>` calls
:func:`write_transaction` when the sink writes exactly once. The steps (docs/spark.md,
"Exactly-once"; the decisions are :mod:`aiokprod.spark.exactly_once`'s):

1. read up to the first batch with rows: an empty partition opens no transaction;
2. start a producer with transactional id ``<prefix>-<partition>``: its InitProducerId fences
   every older attempt of the partition and aborts the transaction it left open;
3. streaming: read the partition's marker (RequireStable); if it says this micro-batch of this
   query committed, skip the rows (a replay);
4. send the rows inside a transaction, with the send path of at-least-once writes; streaming:
   add the marker (offset = micro-batch id) to the transaction;
5. prepare (every record acknowledged, the transaction left open) and close: the commit
   message carries the producer id and epoch for the driver's EndTxn.

Any failure aborts the transaction and fails the task: Spark's retry starts again at step 2,
so a retry never duplicates.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from aiokprod.admin import Admin
from aiokprod.producer import Producer
from aiokprod.spark.batches import first_rows
from aiokprod.spark.eos_records import marker, marker_group, transactional_id
from aiokprod.spark.exactly_once import ExactlyOnceConfig, MicroBatch, TaskAction, decide_task
from aiokprod.spark.results import PartitionResult, Tally
from aiokprod.spark.send_arrow import close_producer, send_all
from aiokprod.types import PreparedTransaction, TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["write_transaction"]


async def write_transaction(
    eos: ExactlyOnceConfig,
    bootstrap_servers: str | Sequence[str],
    options: dict[str, Any],
    fixed_topic: str | None,
    close_timeout: float | None,
    index: int,
    attempt: int,
    batches: AsyncIterator[pa.RecordBatch],
    tally: Tally,
    micro_batch: MicroBatch | None,
) -> PartitionResult:
    """Write the partition in a transaction and prepare it (see the module's steps).

    ``options`` are the producer's (credentials unsealed); ``fixed_topic`` the sink's
    ``topic`` option.
    """
    if eos.streaming and micro_batch is None:
        tally.fail(0, _no_micro_batch())
        return tally.result(index, attempt)
    first, batches = await first_rows(batches)
    if first is None:
        return tally.result(index, attempt)
    topic = fixed_topic if fixed_topic is not None else _first_topic(first)
    options = dict(options, transactional_id=transactional_id(eos.prefix, index))
    producer = Producer(bootstrap_servers, **options)
    prepared = None
    action = TaskAction.WRITE
    try:
        try:
            await producer.start()
            if micro_batch is not None and topic is not None:
                action = await _marker_action(
                    bootstrap_servers, options, topic, eos.prefix, index, micro_batch
                )
            if action is TaskAction.SKIP:
                await _count_skipped(batches, tally)
            else:
                prepared = await _write_and_prepare(
                    producer,
                    fixed_topic,
                    batches,
                    tally,
                    topic,
                    marker_group(eos.prefix, index),
                    micro_batch,
                )
        except Exception as exc:
            tally.fail(0, exc)
            await _count_rest(batches, tally)
        if prepared is None and action is TaskAction.WRITE:
            await _abort_quietly(producer)
    finally:
        await close_producer(producer, tally, close_timeout)
        tally.collect(final=True)
    if tally.stopped:  # a failed close after the prepare: the driver must not commit it
        prepared = None
    return tally.result(
        index, attempt, transaction=prepared, skipped=action is TaskAction.SKIP, topic=topic
    )


async def _write_and_prepare(
    producer: Producer,
    fixed_topic: str | None,
    batches: AsyncIterator[pa.RecordBatch],
    tally: Tally,
    topic: str | None,
    group: str,
    micro_batch: MicroBatch | None,
) -> PreparedTransaction | None:
    """The rows (and the marker, in ``group``) in a transaction, prepared.

    None after a failed row (the caller aborts).
    """
    await producer.begin_transaction()
    await send_all(producer, fixed_topic, batches, tally)
    if tally.stopped:
        return None
    if micro_batch is not None and topic is not None:
        await producer.send_offsets_to_transaction(
            {TopicPartition(topic, 0): marker(micro_batch.query_id, micro_batch.batch_id)}, group
        )
    prepared = await producer.prepare_transaction()  # raises if a record failed
    tally.collect(final=True)  # every record is acknowledged: count them
    return None if tally.stopped else prepared


async def _marker_action(
    bootstrap_servers: str | Sequence[str],
    options: dict[str, Any],
    topic: str,
    prefix: str,
    index: int,
    micro_batch: MicroBatch,
) -> TaskAction:
    """Read the partition's marker (after InitProducerId, RequireStable) and decide.

    The marker's partition is named: a broker asked for "every partition" of a group lists
    only those with a committed offset, so a marker still being committed would go unseen.
    """
    admin_options = {k: v for k, v in options.items() if k != "transactional_id"}
    async with Admin(bootstrap_servers, **admin_options) as admin:
        offsets = await admin.list_consumer_group_offsets(
            marker_group(prefix, index), [TopicPartition(topic, 0)], require_stable=True
        )
    return decide_task(1, offsets, micro_batch.query_id, micro_batch.batch_id)


async def _count_skipped(batches: AsyncIterator[pa.RecordBatch], tally: Tally) -> None:
    """A replayed partition that committed already: read its batches, count them delivered."""
    async for batch in batches:
        tally.rows += batch.num_rows
    tally.delivered = tally.rows


async def _count_rest(batches: AsyncIterator[pa.RecordBatch], tally: Tally) -> None:
    """After a failure: read what is left of the partition and count it not sent."""
    async for batch in batches:
        tally.rows += batch.num_rows
        tally.not_sent += batch.num_rows


async def _abort_quietly(producer: Producer) -> None:
    """Abort the transaction after a failure.

    If that fails too, the next attempt's InitProducerId (or the coordinator's timeout)
    aborts it.
    """
    with contextlib.suppress(Exception):
        await producer.abort_transaction()


def _first_topic(batch: pa.RecordBatch) -> str | None:
    names = {name.lower(): i for i, name in enumerate(batch.schema.names)}
    if "topic" not in names:
        return None
    value = batch.column(names["topic"])[0].as_py()
    return value if isinstance(value, str) else None


def _no_micro_batch() -> Exception:
    from aiokprod.errors import ConfigError

    return ConfigError(
        "deliveryGuarantee=exactly-once: the task does not know its micro-batch (Spark's "
        "task-local properties streaming.sql.batchId and sql.streaming.queryId are missing)"
    )
