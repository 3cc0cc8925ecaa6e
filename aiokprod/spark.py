"""Write a PySpark DataFrame to Kafka with one aiokprod producer per Spark partition.

::

    from aiokprod.spark import write_dataframe

    delivered = write_dataframe(df, "broker1:9092,broker2:9092", topic="events", linger_ms=20)
    # {0: 12500, 1: 12500, ...}: records delivered by each Spark partition

The DataFrame has the columns of Spark's own Kafka sink:

========== ======================================== ===========================================
column     type                                     meaning
========== ======================================== ===========================================
value      string or binary (required)              the record's value (null: a tombstone)
key        string or binary (optional)              the record's key (strings are UTF-8)
topic      string (optional)                        the record's topic, when ``topic=`` is not
                                                    given (as in Spark, ``topic=`` overrides it)
partition  int (optional)                           an explicit partition (null: partitioner)
headers    array<struct<key:string,value:binary>>   the record's headers
========== ======================================== ===========================================

Other columns are ignored. Each Spark task runs ``asyncio.run()`` around an aiokprod
:class:`~aiokprod.Producer` in its Python worker: it sends the partition's rows, waits until
every record is acknowledged or failed, closes the producer, and reports its counts to the
driver. The driver raises :class:`SparkWriteError`, with the per-partition counts and the
first error, if any record failed. See docs/spark.md.

PySpark is an optional dependency (``pip install aiokprod[spark]``); importing this module does
not import it. aiokprod must be installed on the executors too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiokprod import config as config_module
from aiokprod.config import ProducerConfig
from aiokprod.errors import ConfigError, KafkaError
from aiokprod.internals.batch import DeliveryFuture
from aiokprod.producer import Producer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType

__all__ = ["PartitionResult", "SparkWriteError", "write_dataframe"]

#: The sink's columns, in the order the executors receive them.
_COLUMNS = ("value", "key", "topic", "partition", "headers")
#: Options holding passwords: sealed on their way to the executors even when given as str.
_SECRET_OPTIONS = frozenset({"ssl_password", "sasl_plain_password"})
#: How many failing partitions the error message lists one by one.
_LISTED_PARTITIONS = 20


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionResult:
    """What one Spark partition did.

    Attributes:
        partition: the Spark partition's index.
        rows: rows in the partition.
        delivered: records the brokers acknowledged.
        failed: records that failed (rejected by ``send()`` or not acknowledged).
        not_sent: rows not sent because an earlier record of the partition had failed.
        error: the partition's first error, as ``"TypeName: message"``, or None.
    """

    partition: int
    rows: int
    delivered: int
    failed: int
    not_sent: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether every row of the partition was delivered."""
        return self.delivered == self.rows and self.error is None


class SparkWriteError(KafkaError):
    """Some rows of the DataFrame were not delivered.

    Attributes:
        results: one :class:`PartitionResult` per Spark partition, by index.
    """

    def __init__(self, results: Sequence[PartitionResult]) -> None:
        self.results = list(results)
        super().__init__(_describe_failure(self.results))

    @property
    def delivered(self) -> dict[int, int]:
        """Records delivered per Spark partition (also for the partitions that failed)."""
        return {r.partition: r.delivered for r in self.results}


def write_dataframe(
    df: DataFrame,
    bootstrap_servers: str | Sequence[str],
    *,
    topic: str | None = None,
    close_timeout: float | None = None,
    **options: Any,
) -> dict[int, int]:
    """Write every row of ``df`` to Kafka; one producer per Spark partition.

    Args:
        df: a DataFrame with a ``value`` column and optionally ``key``, ``topic``,
            ``partition`` and ``headers`` (the columns of Spark's Kafka sink).
        bootstrap_servers: ``"host:port"``, a comma-separated list, or a list of them.
        topic: the topic of every row. Required when ``df`` has no ``topic`` column; when
            both are present this wins, as with Spark's ``topic`` option.
        close_timeout: seconds each partition's producer waits, when closing, for records
            not yet acknowledged; None waits (bounded by ``delivery_timeout_ms``).
        **options: producer options, exactly as for :class:`~aiokprod.Producer` (credentials
            included). They are validated here, on the driver, and shipped to the executors
            inside the task closure; they are never logged. Without ``client_id``, partition
            N uses ``aiokprod-spark-N``.

    Returns:
        Records delivered per Spark partition index (every row, when this returns).

    Raises:
        ConfigError: a bad producer option, a missing ``value`` column, a column of the
            wrong type, or neither a ``topic`` column nor ``topic=``.
        SparkWriteError: some rows were not delivered; its message and ``results`` give
            the counts of every partition and the first error.
        ImportError: PySpark is not installed.
    """
    _require_pyspark()
    ProducerConfig.from_options(bootstrap_servers, **options)  # fail on the driver, not later
    columns = _check_schema(df, topic)
    writer = _PartitionWriter(
        bootstrap_servers=bootstrap_servers,
        options=_shippable(options),
        topic=topic,
        columns=tuple(columns),
        close_timeout=close_timeout,
    )
    results: list[PartitionResult] = (
        df.select(*columns).rdd.mapPartitionsWithIndex(writer).collect()
    )
    results.sort(key=lambda r: r.partition)
    if not all(r.ok for r in results):
        raise SparkWriteError(results)
    return {r.partition: r.delivered for r in results}


def _require_pyspark() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise ImportError("aiokprod.spark needs PySpark: pip install 'aiokprod[spark]'") from exc


class _Sealed(str):
    """A credential on its way to the executors: a ``str`` that never shows its value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'***'"

    def __str__(self) -> str:
        return "***"

    def __format__(self, spec: str) -> str:
        return "***"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Sealed, (str.__str__(self),))


def _unseal(value: Any) -> Any:
    return str.__str__(value) if isinstance(value, _Sealed) else value


def _shippable(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options as they travel to the executors (pickled in the task closure).

    A :class:`~aiokprod.config.Secret` refuses to be pickled, so its value travels as a
    :class:`_Sealed` string (the producer on the executor wraps it in a Secret again). Any
    other value that cannot be pickled (an ``ssl.SSLContext``, a lambda holding a lock) is a
    ConfigError naming the option, raised here rather than as a Spark serialization failure.
    """
    from pyspark import cloudpickle

    dumps: Callable[[Any], bytes] = cloudpickle.dumps
    secret_type = getattr(config_module, "Secret", None)
    shipped: dict[str, Any] = {}
    for name, value in options.items():
        if secret_type is not None and isinstance(value, secret_type):
            value = _Sealed(value.reveal())
        elif name in _SECRET_OPTIONS and isinstance(value, str):
            value = _Sealed(value)
        try:
            dumps(value)
        except Exception:
            hint = (
                "; use ssl_cafile, ssl_certfile and ssl_keyfile (files present on every "
                "executor) instead"
                if name == "ssl_context"
                else ""
            )
            raise ConfigError(
                f"producer option {name} ({type(value).__name__}) cannot be sent to the Spark "
                f"executors: it cannot be pickled{hint}"
            ) from None
        shipped[name] = value
    return shipped


def _check_schema(df: DataFrame, topic: str | None) -> list[str]:
    """The sink columns present in ``df``, checked against Spark's Kafka sink rules."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructType,
    )

    fields: dict[str, DataType] = {f.name: f.dataType for f in df.schema.fields}

    def check(name: str, ok: bool, expected: str) -> None:
        if not ok:
            got = fields[name].simpleString()
            raise ConfigError(f"column {name!r} must be {expected}, got {got}")

    if "value" not in fields:
        raise ConfigError(
            "the DataFrame needs a 'value' column (string or binary); found: " + ", ".join(fields)
        )
    for name in ("value", "key"):
        if name in fields:
            check(name, isinstance(fields[name], StringType | BinaryType), "string or binary")
    if "topic" in fields:
        check("topic", isinstance(fields["topic"], StringType), "string")
    elif topic is None:
        raise ConfigError("the DataFrame has no 'topic' column: pass topic=")
    if topic is not None and (not isinstance(topic, str) or not topic):
        raise ConfigError(f"topic must be a non-empty str, got {topic!r}")
    if "partition" in fields:
        check("partition", isinstance(fields["partition"], IntegerType), "int")
    if "headers" in fields:
        headers = fields["headers"]
        element = headers.elementType if isinstance(headers, ArrayType) else None
        ok = (
            isinstance(element, StructType)
            and [f.name for f in element.fields] == ["key", "value"]
            and isinstance(element.fields[0].dataType, StringType)
            and isinstance(element.fields[1].dataType, BinaryType | StringType)
        )
        check("headers", ok, "array<struct<key:string,value:binary>>")
    return [name for name in _COLUMNS if name in fields and not (name == "topic" and topic)]


@dataclasses.dataclass(frozen=True)
class _PartitionWriter:
    """The function each Spark task runs (pickled to the executors with its settings)."""

    bootstrap_servers: str | Sequence[str]
    options: Mapping[str, Any]
    topic: str | None
    columns: tuple[str, ...]
    close_timeout: float | None

    def __repr__(self) -> str:  # options may hold credentials: never show them
        return f"<aiokprod.spark partition writer topic={self.topic!r} columns={self.columns}>"

    def __call__(self, index: int, rows: Iterable[Sequence[Any]]) -> Iterator[PartitionResult]:
        iterator = iter(rows)
        first = next(iterator, None)
        if first is None:
            yield PartitionResult(index, 0, 0, 0, 0)
            return
        # A fresh event loop per task: nothing is shared with, or left to, the next task
        # that this (possibly reused) Python worker runs.
        yield asyncio.run(self._write(index, first, iterator))

    async def _write(
        self, index: int, first: Sequence[Any], rest: Iterator[Sequence[Any]]
    ) -> PartitionResult:
        positions = {name: i for i, name in enumerate(self.columns)}
        value_at = positions["value"]
        key_at = positions.get("key")
        topic_at = positions.get("topic")
        partition_at = positions.get("partition")
        headers_at = positions.get("headers")
        fixed_topic = self.topic
        counts = _Counts()
        rows = 0
        not_sent = 0
        all_rows = itertools.chain((first,), rest)
        # Unsealed only here, on the executor: the config wraps them in Secrets again.
        options = {k: _unseal(v) for k, v in self.options.items()}
        options.setdefault("client_id", f"aiokprod-spark-{index}")
        producer = Producer(self.bootstrap_servers, **options)
        try:
            try:
                await producer.start()
            except Exception as exc:
                counts.fail(exc)
            send = producer.send
            on_done = counts.on_done
            for row in all_rows:
                rows += 1
                if counts.failed:  # stop sending at the first failure, as Spark's sink does
                    not_sent += 1
                    continue
                topic = row[topic_at] if topic_at is not None else fixed_topic or ""
                try:
                    delivery = await send(
                        topic,
                        row[value_at],
                        None if key_at is None else row[key_at],
                        None if partition_at is None else row[partition_at],
                        None,
                        (None if headers_at is None else row[headers_at]) or None,
                    )
                except Exception as exc:  # rejected by send(): this row failed
                    counts.fail(exc)
                    continue
                delivery.add_done_callback(on_done)
        finally:
            try:
                await producer.close(self.close_timeout)
            except Exception as exc:
                counts.fail(exc)
        delivered = counts.delivered
        return PartitionResult(
            index, rows, delivered, rows - delivered - not_sent, not_sent, counts.first_error
        )


class _Counts:
    """Delivered/failed counts of one partition, updated by delivery callbacks."""

    __slots__ = ("delivered", "failed", "first_error")

    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.first_error: str | None = None

    def on_done(self, delivery: DeliveryFuture) -> None:
        error = delivery.exception()
        if error is None:
            self.delivered += 1
        else:
            self.fail(error)

    def fail(self, error: BaseException) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error = f"{type(error).__name__}: {error}"


def _describe_failure(results: Sequence[PartitionResult]) -> str:
    rows = sum(r.rows for r in results)
    delivered = sum(r.delivered for r in results)
    failed = sum(r.failed for r in results)
    not_sent = sum(r.not_sent for r in results)
    bad = [r for r in results if not r.ok]
    lines = [
        f"writing the DataFrame to Kafka failed: {delivered} of {rows} rows delivered, "
        f"{failed} failed, {not_sent} not sent (a partition stops at its first failure); "
        f"{len(bad)} of {len(results)} Spark partitions failed",
        "per Spark partition (delivered/failed/not sent of rows):",
    ]
    for r in bad[:_LISTED_PARTITIONS]:
        lines.append(
            f"  partition {r.partition}: {r.delivered}/{r.failed}/{r.not_sent} of {r.rows}"
        )
    if len(bad) > _LISTED_PARTITIONS:
        lines.append(f"  ... and {len(bad) - _LISTED_PARTITIONS} more failed partitions")
    first = next(r for r in bad)
    if first.error is not None:
        lines.append(f"first error (partition {first.partition}): {first.error}")
    return "\n".join(lines)
