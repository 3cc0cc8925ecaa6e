"""What a Spark partition reports: counts and the first error, and the tally that makes them."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aiokprod.errors import KafkaError
from aiokprod.spark.eos_records import RunToken
from aiokprod.types import PreparedTransaction

if TYPE_CHECKING:
    from aiokprod import DeliveryFuture
    from aiokprod.internals.bulk import BulkDelivery  # what send_many returns

__all__ = ["PartitionResult", "SparkWriteError", "Tally"]

#: How many failing partitions an error message lists one by one.
_LISTED_PARTITIONS = 20


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionResult:
    """What one Spark partition (one task attempt) did.

    Attributes:
        partition: the Spark partition's index.
        rows: rows in the partition.
        delivered: records the brokers acknowledged.
        failed: records that failed, or whose outcome is unknown: a bulk call that raised
            counts all its rows here, although those queued before the error may arrive.
        not_sent: rows not sent because an earlier record of the partition had failed.
        error: the partition's first error, as ``"TypeName: message"``, or None.
        attempt: the task attempt (0 for the first; Spark retries count up).
        transaction: exactly-once: the prepared transaction the driver commits, or None
            (at-least-once, an empty partition, a skipped replay, or a failure).
        skipped: exactly-once streaming: a replayed micro-batch whose rows this partition
            had committed already; nothing was written (``delivered`` counts them).
        topic: exactly-once: the topic of the partition's first row.
        run: exactly-once: the run token the task wrote under.
    """

    partition: int
    rows: int
    delivered: int
    failed: int
    not_sent: int
    error: str | None = None
    attempt: int = 0
    transaction: PreparedTransaction | None = None
    skipped: bool = False
    topic: str | None = None
    run: RunToken | None = None

    @property
    def ok(self) -> bool:
        """Whether every row of the partition was delivered."""
        return self.delivered == self.rows and self.error is None

    def summary(self) -> str:
        """One line: ``partition 3 (attempt 0): 95 of 100 rows delivered, ...``."""
        return (
            f"partition {self.partition} (attempt {self.attempt}): {self.delivered} of "
            f"{self.rows} rows delivered, {self.failed} failed, {self.not_sent} not sent"
        )


class SparkWriteError(KafkaError):
    """Some rows of the DataFrame were not delivered.

    Raised by :func:`~aiokprod.spark.write_dataframe` on the driver (with every partition's
    counts), and by a failing task of the ``aiokprod`` data source (with its own counts;
    Spark then shows it inside its task failure).

    Attributes:
        results: one :class:`PartitionResult` per Spark partition reported.
    """

    def __init__(self, results: Sequence[PartitionResult]) -> None:
        self.results = list(results)
        super().__init__(describe_failure(self.results))

    @property
    def delivered(self) -> dict[int, int]:
        """Records delivered per Spark partition (also for the partitions that failed)."""
        return {r.partition: r.delivered for r in self.results}

    def __reduce__(self) -> tuple[object, ...]:
        return (SparkWriteError, (self.results,))


def describe_failure(results: Sequence[PartitionResult]) -> str:
    """The message of a :class:`SparkWriteError`: totals, failing partitions, first error."""
    rows = sum(r.rows for r in results)
    delivered = sum(r.delivered for r in results)
    failed = sum(r.failed for r in results)
    not_sent = sum(r.not_sent for r in results)
    bad = [r for r in results if not r.ok]
    lines = [
        f"writing to Kafka failed: {delivered} of {rows} rows delivered, "
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
    first = next((r for r in bad if r.error is not None), None)
    if first is not None:
        lines.append(f"first error (partition {first.partition}): {first.error}")
    return "\n".join(lines)


class Tally:
    """Counts of one partition while it is written.

    Bulk deliveries still pending, per-record callbacks, the first error; :meth:`result`
    turns them into a :class:`PartitionResult`.
    """

    __slots__ = (
        "accounted_in_batch",
        "delivered",
        "failed_records",
        "first_error",
        "not_sent",
        "pending",
        "pending_rows",
        "rows",
    )

    def __init__(self) -> None:
        self.rows = 0
        self.delivered = 0
        self.failed_records = 0
        self.not_sent = 0
        self.first_error: str | None = None
        self.pending: collections.deque[BulkDelivery] = collections.deque()
        self.pending_rows = 0  # per-record sends not yet called back
        self.accounted_in_batch = 0

    @property
    def stopped(self) -> bool:
        """Whether a failure stopped the partition (the rows after it are not sent)."""
        return self.first_error is not None

    def fail(self, records: int, error: BaseException) -> None:
        """``records`` failed; the first error is kept."""
        self.failed_records += records
        if self.first_error is None:
            self.first_error = f"{type(error).__name__}: {error}"

    def on_done(self, delivery: DeliveryFuture) -> None:
        """The done-callback of a record sent one by one."""
        self.pending_rows -= 1
        error = delivery.exception()
        if error is None:
            self.delivered += 1
        else:
            self.fail(1, error)

    def result(self, index: int, attempt: int, **extra: Any) -> PartitionResult:
        """The partition's counts."""
        return PartitionResult(
            index,
            self.rows,
            self.delivered,
            self.rows - self.delivered - self.not_sent,
            self.not_sent,
            self.first_error,
            attempt,
            **extra,
        )

    def collect(self, final: bool = False) -> None:
        """Count the bulk deliveries that completed (all of them when ``final``)."""
        pending = self.pending
        while pending and (final or pending[0].done()):
            bulk = pending.popleft()
            if not bulk.done():  # the producer closed without an answer for these
                self.fail(len(bulk), TimeoutError("not acknowledged when the producer closed"))
                continue
            errors = bulk.errors()
            self.delivered += len(bulk) - len(errors)
            if errors:
                self.fail(len(errors), errors[0][1])
        if final and self.pending_rows and self.first_error is None:
            self.first_error = "TimeoutError: not acknowledged when the producer closed"
