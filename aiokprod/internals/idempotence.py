"""Idempotent producer state: the producer id and epoch, and per-partition sequences.

The broker accepts a batch only if its base sequence follows the last one it stored for this
(producer id, epoch, partition), and answers a resent batch it already has with success and
the original offset. So retries can never duplicate or reorder records, provided that:

- sequences are assigned when a batch is first drained, in queue order, and kept across
  plain retries (the bytes are resent as they are);
- a retried batch is sent only when it is the lowest unacknowledged sequence of its
  partition (:meth:`IdempotenceState.can_drain`), so retries reach the broker in order;
- when a sequence is lost for good (a batch failed after it may have been sent), the
  producer bumps its epoch (KIP-360): the broker then expects sequence 0 again, and every
  partition restarts its sequences once its old-epoch batches are done.

The rules follow the Java client's TransactionManager for an idempotent, non-transactional
producer; this module is synchronous and does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiokprod.internals.batch import ProducerBatch
from aiokprod.types import TopicPartition

INT32_MAX = 2**31 - 1
INT16_MAX = 2**15 - 1


def increment_sequence(sequence: int, count: int) -> int:
    """The sequence after ``count`` records; wraps to 0 past Int32 max, as Kafka does."""
    if sequence > INT32_MAX - count:
        return count - (INT32_MAX - sequence) - 1
    return sequence + count


@dataclass(slots=True)
class PartitionSequences:
    """Sequence bookkeeping of one partition."""

    #: The (producer id, epoch) under which ``next_sequence`` counts.
    producer_id: int = -1
    producer_epoch: int = -1
    next_sequence: int = 0
    last_acked_sequence: int = -1
    #: Batches with a sequence that are not completed yet, in sequence order.
    unacked: list[ProducerBatch] = field(default_factory=list)


class IdempotenceState:
    """Producer id, epoch and sequences for an idempotent producer."""

    def __init__(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        self._partitions: dict[TopicPartition, PartitionSequences] = {}
        #: Set when a sequence was lost; the sender then bumps the epoch.
        self.epoch_bump_required = False
        #: Set when the id must be fetched again (none yet, or the epoch wrapped).
        self.producer_id_required = True

    @property
    def has_producer_id(self) -> bool:
        """Whether batches can be stamped now."""
        return self.producer_id >= 0 and not self.producer_id_required

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """Install the id and epoch from InitProducerId."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.producer_id_required = False
        self.epoch_bump_required = False

    def _state(self, tp: TopicPartition) -> PartitionSequences:
        state = self._partitions.get(tp)
        if state is None:
            state = self._partitions[tp] = PartitionSequences(self.producer_id, self.producer_epoch)
        return state

    # --- draining ---------------------------------------------------------------------------

    def can_drain(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` may be sent now without risking order or sequence gaps."""
        if not self.has_producer_id or self.epoch_bump_required:
            return False
        state = self._state(batch.tp)
        current = (self.producer_id, self.producer_epoch)
        if batch.has_sequence:
            # A retry: only the oldest unacknowledged batch may go, so that the broker
            # sees the sequences in order again.
            if (batch.producer_id, batch.producer_epoch) != current:
                return False
            return bool(state.unacked) and state.unacked[0] is batch
        if (state.producer_id, state.producer_epoch) != current:
            # The epoch moved on: new batches wait until the old epoch's batches are done,
            # then this partition starts again at sequence 0.
            if state.unacked:
                return False
            state.producer_id, state.producer_epoch = current
            state.next_sequence = 0
            state.last_acked_sequence = -1
        return True

    def assign_sequence(self, batch: ProducerBatch) -> None:
        """Stamp a newly drained batch (retries keep their stamp)."""
        if batch.has_sequence and (batch.producer_id, batch.producer_epoch) == (
            self.producer_id,
            self.producer_epoch,
        ):
            return
        state = self._state(batch.tp)
        sequence = state.next_sequence
        batch.stamp(self.producer_id, self.producer_epoch, sequence)
        state.next_sequence = increment_sequence(sequence, batch.record_count)
        state.unacked.append(batch)

    # --- outcomes ---------------------------------------------------------------------------

    def on_success(self, batch: ProducerBatch) -> None:
        """A batch was acknowledged."""
        state = self._partitions.get(batch.tp)
        if state is None:
            return
        _remove(state.unacked, batch)
        if (batch.producer_id, batch.producer_epoch) == (state.producer_id, state.producer_epoch):
            last = increment_sequence(batch.base_sequence, batch.record_count - 1)
            if state.last_acked_sequence < 0 or _seq_after(last, state.last_acked_sequence):
                state.last_acked_sequence = last

    def on_failure(self, batch: ProducerBatch) -> None:
        """A batch with a sequence failed for good: its sequence numbers are lost.

        The broker would reject every later sequence of the partition (a gap), and whether
        a sent batch was written is unknown, so the epoch is always bumped: every partition
        then starts again at sequence 0 (KIP-360).
        """
        state = self._partitions.get(batch.tp)
        if state is None or not batch.has_sequence:
            return
        _remove(state.unacked, batch)
        if (batch.producer_id, batch.producer_epoch) != (self.producer_id, self.producer_epoch):
            return  # already under an older epoch: the bump happened
        self.epoch_bump_required = True

    def is_next_expected(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` directly follows the last acknowledged sequence.

        An OUT_OF_ORDER_SEQUENCE_NUMBER for a batch that is *not* next is a consequence of an
        earlier batch's failure and is retried as is; for the next one it means the broker
        lost our state, which only an epoch bump repairs.
        """
        state = self._partitions.get(batch.tp)
        if state is None:
            return True
        expected = increment_sequence(state.last_acked_sequence, 1)
        if state.last_acked_sequence < 0:
            expected = 0
        return batch.base_sequence == expected

    def bump_epoch(self) -> bool:
        """Client-side epoch bump (KIP-360); False if the epoch is exhausted.

        When the epoch cannot grow, a new producer id is needed instead
        (``producer_id_required`` is set and the sender sends InitProducerId).
        """
        self.epoch_bump_required = False
        if self.producer_epoch >= INT16_MAX:
            self.producer_id_required = True
            return False
        self.producer_epoch += 1
        return True

    def reset_unacked_sequences(self, tp: TopicPartition, batches: list[ProducerBatch]) -> None:
        """After a bump: renumber a partition's still-queued retry batches from 0, in order.

        ``batches`` are the partition's queued batches that carry an old-epoch sequence,
        in sequence order; they are re-stamped under the current epoch.
        """
        state = self._state(tp)
        others = [b for b in state.unacked if b not in batches]
        if others:
            return  # old-epoch batches still in flight; renumber when they are done
        state.unacked = []
        state.producer_id, state.producer_epoch = self.producer_id, self.producer_epoch
        state.next_sequence = 0
        state.last_acked_sequence = -1
        for batch in batches:
            batch.stamp(self.producer_id, self.producer_epoch, state.next_sequence)
            state.next_sequence = increment_sequence(state.next_sequence, batch.record_count)
            state.unacked.append(batch)

    def unacked(self, tp: TopicPartition) -> list[ProducerBatch]:
        """The partition's batches with a sequence and no outcome yet."""
        state = self._partitions.get(tp)
        return list(state.unacked) if state else []

    def forget(self, tp: TopicPartition) -> None:
        """Drop a partition's state (used after the producer id changes)."""
        self._partitions.pop(tp, None)


def _remove(batches: list[ProducerBatch], batch: ProducerBatch) -> None:
    for i, queued in enumerate(batches):
        if queued is batch:
            del batches[i]
            return


def _seq_after(a: int, b: int) -> bool:
    """Whether sequence ``a`` comes after ``b``, allowing for the wrap at Int32 max."""
    return (a - b) % (2**31) < 2**30 and a != b
