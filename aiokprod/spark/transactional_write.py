"""A task's side of exactly-once writes: the partition in one transaction, prepared.

:meth:`PartitionWriter.write <aiokprod.spark.partition_writer.PartitionWriter.write>` calls
:func:`write_transaction` when the sink writes exactly once. The steps are
:func:`write_in_transaction`'s (docs/spark.md, "Exactly-once"; the protocol is
:mod:`aiokprod.spark.exactly_once`'s), written against :class:`TaskKafka` so that the model
checker (:mod:`aiokprod.testing.eos_model`) runs the same steps:

1. an empty partition opens no transaction;
2. check that the run register still holds the run the task was planned in (a straggler of
   a closed run never touches Kafka), start the producer (InitProducerId on the attempt's
   own transactional id), and check again (a run closed before that InitProducerId is seen);
3. streaming: read the partition's marker (RequireStable); if it says this micro-batch of
   this query committed, skip the rows (a replay);
4. send the rows inside a transaction, checking the run every ``check_interval_ms``;
   streaming: add the marker (offset = micro-batch id) to the transaction;
5. prepare (every record acknowledged, the transaction left open), check the run once more,
   and hand the producer id and epoch to the driver in the commit message.

Any failure - a stale run included - aborts the transaction and fails the task.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from aiokprod.admin import Admin
from aiokprod.errors import ConfigError, KafkaError
from aiokprod.producer import Producer
from aiokprod.spark.batches import first_rows
from aiokprod.spark.eos_records import (
    RunToken,
    marker,
    marker_group,
    run_register_id,
    transactional_id,
)
from aiokprod.spark.exactly_once import ExactlyOnceConfig, MicroBatch, TaskAction, decide_task
from aiokprod.spark.results import PartitionResult, Tally
from aiokprod.spark.send_arrow import close_producer, send_batch
from aiokprod.types import OffsetAndMetadata, PreparedTransaction, TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["StaleRunError", "TaskKafka", "write_in_transaction", "write_transaction"]

B = TypeVar("B", contravariant=True)


class StaleRunError(KafkaError):
    """The driver closed the run this task was planned in: it must write nothing more.

    The run was committed or aborted (the job failed, the query stopped, Spark gave up on
    this attempt), or another job or query with the same ``transactionalIdPrefix`` started.
    """


class TaskKafka(Protocol[B]):
    """What a task's steps do with Kafka (a producer and an admin client, or the model)."""

    async def run_token(self) -> RunToken | None:
        """The token the run register holds now."""
        ...

    async def start(self) -> None:
        """Start the transactional producer (InitProducerId)."""

    async def read_marker(
        self, group: str, tp: TopicPartition
    ) -> Mapping[TopicPartition, OffsetAndMetadata]:
        """The partition's marker (OffsetFetch, RequireStable)."""
        ...

    async def begin(self) -> None:
        """Begin the transaction."""

    async def send(self, batch: B) -> bool:
        """Send a batch of rows in the transaction; False once a record failed."""
        ...

    async def add_marker(self, group: str, tp: TopicPartition, value: OffsetAndMetadata) -> None:
        """Add the marker to the transaction."""

    async def prepare(self) -> PreparedTransaction:
        """Every record acknowledged, the transaction left open: its ids."""
        ...

    async def abort(self) -> None:
        """Abort the transaction (never raises: the run's close or its timeout ends it too)."""

    def now_ms(self) -> int:
        """A monotonic clock, in milliseconds."""
        ...


async def write_in_transaction(
    kafka: TaskKafka[B],
    eos: ExactlyOnceConfig,
    index: int,
    topic: str | None,
    batches: AsyncIterator[B],
    micro_batch: MicroBatch | None,
) -> tuple[TaskAction, PreparedTransaction | None]:
    """The task's steps (see the module), from the first row on.

    Returns:
        ``(SKIP, None)`` for a replay that committed already, ``(WRITE, prepared)`` when
        every row is in the prepared transaction, ``(WRITE, None)`` when a row failed (the
        transaction was aborted; the failure is the caller's to report).

    Raises:
        StaleRunError: the run was closed; nothing of this attempt will be visible.
        KafkaError: a failure of the transaction (it was aborted).
    """
    run = eos.run
    if run is None:
        raise ConfigError(
            "deliveryGuarantee=exactly-once: the task has no run token (the driver's "
            "planning did not open a run)"
        )
    await _check_run(kafka, run, "before starting")
    await kafka.start()
    await _check_run(kafka, run, "after its InitProducerId")
    if micro_batch is not None and topic is not None:
        group = marker_group(eos.prefix, micro_batch.query_id, index)
        offsets = await kafka.read_marker(group, TopicPartition(topic, 0))
        if decide_task(1, offsets, micro_batch.query_id, micro_batch.batch_id) is TaskAction.SKIP:
            return TaskAction.SKIP, None
    await kafka.begin()
    try:
        checked = kafka.now_ms()
        async for batch in batches:
            if not await kafka.send(batch):
                await kafka.abort()
                return TaskAction.WRITE, None
            if kafka.now_ms() - checked >= eos.check_interval_ms:
                await _check_run(kafka, run, "while writing")
                checked = kafka.now_ms()
        if micro_batch is not None and topic is not None:
            group = marker_group(eos.prefix, micro_batch.query_id, index)
            value = marker(micro_batch.query_id, micro_batch.batch_id)
            await kafka.add_marker(group, TopicPartition(topic, 0), value)
        prepared = await kafka.prepare()
        await _check_run(kafka, run, "after preparing")
    except BaseException:
        await kafka.abort()
        raise
    return TaskAction.WRITE, prepared


async def _check_run(kafka: TaskKafka[Any], run: RunToken, when: str) -> None:
    now = await kafka.run_token()
    if now != run:
        raise StaleRunError(
            f"the driver ended this write's run {run} ({when}; the run register holds "
            f"{now}): Spark gave up on this task attempt or its job, the query stopped, or "
            "another job or query with the same transactionalIdPrefix started; nothing this "
            "attempt wrote will be visible"
        )


# --- the real one: a transactional producer and an admin client ----------------------------


class _ProducerKafka:
    """:class:`TaskKafka` over a transactional :class:`Producer` and an :class:`Admin`."""

    def __init__(
        self, producer: Producer, admin: Admin, prefix: str, fixed_topic: str | None, tally: Tally
    ) -> None:
        self._producer = producer
        self._admin = admin
        self._register = run_register_id(prefix)
        self._fixed_topic = fixed_topic
        self._tally = tally

    async def run_token(self) -> RunToken | None:
        view = (await self._admin.describe_transactions([self._register])).get(self._register)
        return None if view is None else RunToken(view.producer_id, view.producer_epoch)

    async def start(self) -> None:
        await self._producer.start()

    async def read_marker(
        self, group: str, tp: TopicPartition
    ) -> Mapping[TopicPartition, OffsetAndMetadata]:
        # The marker's partition is named: a broker asked for "every partition" of a group
        # lists only those with a committed offset, so a marker being committed would go unseen.
        return await self._admin.list_consumer_group_offsets(group, [tp], require_stable=True)

    async def begin(self) -> None:
        await self._producer.begin_transaction()

    async def send(self, batch: pa.RecordBatch) -> bool:
        tally = self._tally
        tally.rows += batch.num_rows
        if batch.num_rows:
            await send_batch(self._producer, self._fixed_topic, batch, tally)
            tally.collect()
        return not tally.stopped

    async def add_marker(self, group: str, tp: TopicPartition, value: OffsetAndMetadata) -> None:
        await self._producer.send_offsets_to_transaction({tp: value}, group)

    async def prepare(self) -> PreparedTransaction:
        prepared = await self._producer.prepare_transaction()  # raises if a record failed
        self._tally.collect(final=True)  # every record is acknowledged: count them
        return prepared

    async def abort(self) -> None:
        with contextlib.suppress(Exception):
            await self._producer.abort_transaction()

    def now_ms(self) -> int:
        return int(time.monotonic() * 1000)


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
    """Write the partition in a transaction and prepare it; its counts and transaction.

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
    scope = None if eos.streaming else eos.run
    txn_id = transactional_id(eos.prefix, index, attempt, scope)
    producer = Producer(bootstrap_servers, **dict(options, transactional_id=txn_id))
    admin = Admin(bootstrap_servers, **options)
    kafka = _ProducerKafka(producer, admin, eos.prefix, fixed_topic, tally)
    action, prepared = TaskAction.WRITE, None
    try:
        try:
            await admin.start()
            action, prepared = await write_in_transaction(
                kafka, eos, index, topic, batches, micro_batch
            )
        except Exception as exc:
            tally.fail(0, exc)
        if action is TaskAction.SKIP:
            await _count_skipped(batches, tally)
        else:
            await _count_rest(batches, tally)
    finally:
        await close_producer(producer, tally, close_timeout)
        with contextlib.suppress(Exception):
            await admin.close()
        tally.collect(final=True)
    if tally.stopped:  # a failed close after the prepare: the driver must not commit it
        prepared = None
    return tally.result(
        index,
        attempt,
        transaction=prepared,
        skipped=action is TaskAction.SKIP,
        topic=topic,
        run=eos.run,
    )


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


def _first_topic(batch: pa.RecordBatch) -> str | None:
    names = {name.lower(): i for i, name in enumerate(batch.schema.names)}
    if "topic" not in names:
        return None
    value = batch.column(names["topic"])[0].as_py()
    return value if isinstance(value, str) else None


def _no_micro_batch() -> Exception:
    return ConfigError(
        "deliveryGuarantee=exactly-once: the task does not know its micro-batch (Spark's "
        "task-local properties streaming.sql.batchId and sql.streaming.queryId are missing)"
    )
