"""A partition's log and the producer state that lives with it, as a real broker keeps them.

The rules are Apache Kafka 4.3.1's (``ProducerStateEntry``, ``ProducerAppendInfo``,
``UnifiedLog.analyzeAndValidateProducerState``; see docs/simulation.md):

1. **Duplicate**: same epoch and exactly the (first, last) sequence of one of the 5 retained
   batches -> success with the original base offset, nothing appended.
2. **Epoch**: a lower epoch than the stored one -> INVALID_PRODUCER_EPOCH.
3. **Sequence**: no state for the producer -> any sequence; a new (higher) epoch -> the first
   sequence must be 0; the same epoch -> it must follow the last one (0 follows int32 max);
   else OUT_OF_ORDER_SEQUENCE_NUMBER.

The state belongs to the partition's log, not to a broker: it survives leader changes, and a
truncation (an acks=1 write lost in a failover) rebuilds it from the batches that remain.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from aiokprod.protocol.record_reader import RecordBatch
from aiokprod.types import Header

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1
NO_PRODUCER_ID = -1

NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_RECORD = 87


def last_sequence(base_sequence: int, record_count: int) -> int:
    """The sequence of a batch's last record (wraps after int32 max, as Kafka's does)."""
    last = base_sequence + record_count - 1
    return last - INT32_MAX - 1 if last > INT32_MAX else last


def in_sequence(last_seq: int, first_seq: int) -> bool:
    """Whether ``first_seq`` directly follows ``last_seq``."""
    return first_seq == last_seq + 1 or (first_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What the broker retains of one of a producer's recent batches."""

    first_seq: int
    last_seq: int
    first_offset: int


@dataclass(slots=True)
class ProducerStateEntry:
    """A producer's state on one partition: its epoch and its last 5 batches."""

    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=deque)

    @property
    def last_seq(self) -> int:
        """The last sequence written under this epoch (-1: none yet)."""
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch this one repeats exactly, if any."""
        if epoch != self.epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def add(self, epoch: int, meta: BatchMetadata) -> None:
        """Record an appended batch (a new epoch clears the retained ones)."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch
        self.batches.append(meta)
        while len(self.batches) > NUM_BATCHES_TO_RETAIN:
            self.batches.popleft()


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One record as stored in the simulated log."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(slots=True)
class LogBatch:
    """One appended batch (records keep their own offsets)."""

    base_offset: int
    producer_id: int
    epoch: int
    first_seq: int
    last_seq: int
    records: tuple[LogRecord, ...]
    #: False while an acks=1 write exists only on the leader (lost if leadership moves).
    replicated: bool


@dataclass(frozen=True, slots=True)
class AppendResult:
    """The outcome of a client append: an error code and the base offset (-1 on error)."""

    error_code: int
    base_offset: int
    duplicate: bool = False
    message: str | None = None


class PartitionLog:
    """A partition's records and its producers' state."""

    def __init__(self) -> None:
        self.batches: list[LogBatch] = []
        self.next_offset = 0
        self.producers: dict[int, ProducerStateEntry] = {}
        #: Values of records removed by truncation (acks=1 writes lost in a failover).
        self.truncated: list[LogRecord] = []

    def append(self, batch: RecordBatch, *, replicated: bool = True) -> AppendResult:
        """Validate and append a client's batch (records must be decoded already)."""
        pid = batch.producer_id
        count = len(batch.records)
        if count == 0:
            return AppendResult(INVALID_RECORD, -1, message="empty batch")
        entry: ProducerStateEntry | None = None
        last_seq = -1
        if pid != NO_PRODUCER_ID:
            if batch.base_sequence < 0:
                return AppendResult(INVALID_RECORD, -1, message="producer id without sequence")
            last_seq = last_sequence(batch.base_sequence, count)
            entry = self.producers.get(pid)
            if entry is not None:
                dup = entry.find_duplicate(batch.producer_epoch, batch.base_sequence, last_seq)
                if dup is not None:
                    return AppendResult(NONE, dup.first_offset, duplicate=True)
                error = _check(entry, batch.producer_epoch, batch.base_sequence)
                if error is not None:
                    return error
        base = self.next_offset
        records = tuple(
            LogRecord(base + i, r.key, r.value, r.headers) for i, r in enumerate(batch.records)
        )
        self.batches.append(
            LogBatch(
                base, pid, batch.producer_epoch, batch.base_sequence, last_seq, records, replicated
            )
        )
        self.next_offset = base + count
        if pid != NO_PRODUCER_ID:
            if entry is None:
                entry = self.producers[pid] = ProducerStateEntry(batch.producer_epoch)
            entry.add(batch.producer_epoch, BatchMetadata(batch.base_sequence, last_seq, base))
        return AppendResult(NONE, base)

    def would_append(self, batch: RecordBatch) -> bool:
        """Whether :meth:`append` would write ``batch`` (not a duplicate, no error)."""
        entry = self.producers.get(batch.producer_id)
        if entry is None or batch.producer_id == NO_PRODUCER_ID:
            return True
        last_seq = last_sequence(batch.base_sequence, len(batch.records))
        if entry.find_duplicate(batch.producer_epoch, batch.base_sequence, last_seq):
            return False
        return _check(entry, batch.producer_epoch, batch.base_sequence) is None

    def replicate(self) -> None:
        """Every batch so far reached the followers."""
        for batch in reversed(self.batches):
            if batch.replicated:
                break
            batch.replicated = True

    def truncate_unreplicated(self) -> int:
        """Drop the batches no follower has (a failover); returns how many records went."""
        keep = len(self.batches)
        while keep and not self.batches[keep - 1].replicated:
            keep -= 1
        if keep == len(self.batches):
            return 0
        lost = self.batches[keep:]
        del self.batches[keep:]
        for batch in lost:
            self.truncated.extend(batch.records)
        self.next_offset = lost[0].base_offset
        self._rebuild_producer_state()
        return sum(len(b.records) for b in lost)

    def expire_producer(self, producer_id: int) -> bool:
        """Forget a producer's state (``producer.id.expiration.ms`` passed)."""
        return self.producers.pop(producer_id, None) is not None

    def records(self) -> list[LogRecord]:
        """Every record, in offset order."""
        return [r for batch in self.batches for r in batch.records]

    def _rebuild_producer_state(self) -> None:
        # As a follower replays batches (origin REPLICATION): no checks, only bookkeeping.
        self.producers.clear()
        for batch in self.batches:
            if batch.producer_id == NO_PRODUCER_ID:
                continue
            entry = self.producers.get(batch.producer_id)
            if entry is None:
                entry = self.producers[batch.producer_id] = ProducerStateEntry(batch.epoch)
            entry.add(
                batch.epoch, BatchMetadata(batch.first_seq, batch.last_seq, batch.base_offset)
            )


def _check(entry: ProducerStateEntry, epoch: int, first_seq: int) -> AppendResult | None:
    if epoch < entry.epoch:
        return AppendResult(
            INVALID_PRODUCER_EPOCH, -1, message=f"epoch {epoch} is older than {entry.epoch}"
        )
    if epoch != entry.epoch:
        if first_seq != 0:
            return AppendResult(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                -1,
                message=f"new epoch {epoch} must start at sequence 0, not {first_seq}",
            )
        return None
    if not in_sequence(entry.last_seq, first_seq):
        return AppendResult(
            OUT_OF_ORDER_SEQUENCE_NUMBER,
            -1,
            message=f"sequence {first_seq} does not follow {entry.last_seq} (epoch {epoch})",
        )
    return None
