"""One partition's sequences under the idempotent producer, and what an error response means.

KIP-98 gives each batch of an idempotent producer a sequence per partition: the first
record's number, counted from 0 under each (producer id, epoch) and wrapping to 0 past Int32
max. The broker appends a batch only if its first sequence follows the last one it has, and
answers one it already has with DUPLICATE_SEQUENCE_NUMBER. This module keeps one partition's
bookkeeping of that (:class:`PartitionSequences`, Java's ``TxnPartitionEntry``) and decides,
from it alone, what an error response for one of its batches means (:func:`error_verdict`,
the partition's part of Java's ``TransactionManager.canRetry``): retry it as it is, take it as
written, or fail it; and whether the partition's unacknowledged batches must be renumbered
under a new epoch (the client-side bump of KIP-360).

The hard cases come from a broker that holds no state for this producer (a new id, a
partition just created, state lost to retention: UNKNOWN_PRODUCER_ID): it appends a batch
with any first sequence (KIP-360), so a later batch may be in the log though an earlier one
is not. ``IdempotenceState`` (``internals/idempotence.py``) holds the partitions, the id and
the epoch, and acts on these verdicts. Synchronous, no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from aiokprod.errors import (
    DuplicateSequenceNumberError,
    OutOfOrderSequenceNumberError,
    UnknownProducerIdError,
)
from aiokprod.internals.batch import ProducerBatch

INT32_MAX = 2**31 - 1


def increment_sequence(sequence: int, count: int) -> int:
    """The sequence after ``count`` records; wraps to 0 past Int32 max, as Kafka does."""
    if sequence > INT32_MAX - count:
        return count - (INT32_MAX - sequence) - 1
    return sequence + count


def seq_after(a: int, b: int) -> bool:
    """Whether sequence ``a`` comes after ``b``, allowing for the wrap at Int32 max."""
    return (a - b) % (2**31) < 2**30 and a != b


class Verdict(enum.Enum):
    """What to do with a batch after an error response (see :meth:`IdempotenceState.on_error`)."""

    #: Resend it as it is (same stamp), after the usual checks (delivery timeout, retries).
    RETRY = "retry"
    #: The broker already has it (DUPLICATE_SEQUENCE_NUMBER): a success with no offset.
    DUPLICATE = "duplicate"
    #: Not retriable: fail it.
    FAIL = "fail"


@dataclass(slots=True)
class PartitionSequences:
    """Sequence bookkeeping of one partition (Java's ``TxnPartitionEntry``)."""

    #: The (producer id, epoch) under which ``next_sequence`` counts.
    producer_id: int = -1
    producer_epoch: int = -1
    next_sequence: int = 0
    last_acked_sequence: int = -1
    #: Batches with a sequence and no outcome yet (sent, or queued for a retry), in sequence
    #: order. Java: ``inflightBatchesBySequence``.
    in_flight: list[ProducerBatch] = field(default_factory=list)
    #: Set when a batch that had been sent expired: its outcome is unknown.
    unresolved: bool = False
    #: The sequences that directly follow an expired (unresolved) batch: an
    #: OUT_OF_ORDER_SEQUENCE_NUMBER for a batch starting there proves that expired batch was
    #: not appended.
    after_expired: set[int] = field(default_factory=set)
    #: Set when a batch was rejected for good: its sequences are a gap. Later batches are
    #: resent under their own stamps until each has a definite answer (appended, or refused
    #: with OUT_OF_ORDER_SEQUENCE_NUMBER); only then are the refused ones renumbered.
    gap: bool = False
    #: Set once a batch under ``producer_id`` was acknowledged here: the broker then holds
    #: state for the id and checks every sequence (see ``IdempotenceState.can_drain``).
    broker_has_state: bool = False


def error_verdict(
    state: PartitionSequences | None, batch: ProducerBatch, error: BaseException
) -> tuple[Verdict, bool]:
    """Decide on an error response for a stamped batch (Java's ``canRetry``).

    ``state`` is the batch's partition (None if it has none). Returns the verdict, and
    whether the partition must be renumbered under a new epoch (``IdempotenceState`` then
    asks for the bump). The caller still checks the delivery timeout and ``retries`` for a
    RETRY.
    """
    if isinstance(error, DuplicateSequenceNumberError):
        return Verdict.DUPLICATE, False
    if state is None or not batch.has_sequence:
        return Verdict.RETRY if getattr(error, "retriable", False) else Verdict.FAIL, False
    if isinstance(error, UnknownProducerIdError):
        # The broker lost our state (e.g. retention removed the log head). Unless this
        # batch was already renumbered, bump the epoch and renumber from 0. Without our
        # state it takes any first sequence: one batch at a time again (can_drain).
        state.broker_has_state = False
        return Verdict.RETRY, not batch.sequence_reset
    if isinstance(error, OutOfOrderSequenceNumberError):
        if overtaken(state, batch):
            # A later batch of ours was acknowledged and this one was not: a broker with
            # no state for this producer took the later one first (it accepts any first
            # sequence; e.g. this one was refused NOT_LEADER_OR_FOLLOWER by a partition
            # just created, the later one accepted a moment after). It can no longer be
            # written in order, and retrying would be refused until the delivery
            # timeout: it fails now, and on_failure settles the rest in gap mode.
            return Verdict.FAIL, False
        if state.gap:
            # Behind the gap: the broker refused it, so it was not appended. It waits
            # (see can_drain) and is renumbered once the gap is settled. A batch already
            # renumbered too: when the first batch of the new epoch fails for good, the
            # ones after it are refused until renumbered again (they were resent under
            # their stamps until the partition was blocked for the delivery timeout).
            batch.not_appended = True
            return Verdict.RETRY, False
        if not state.unresolved and (
            batch.sequence_reset or not is_next_sequence(state, batch.base_sequence)
        ):
            # Not the next expected batch: an earlier batch's failure or retry caused
            # this; it resolves when that one is resent.
            return Verdict.RETRY, False
        if not state.unresolved and may_have_later(state, batch):
            # Refused though it is the first batch the broker should expect, while a
            # later batch of ours was sent and nothing was acknowledged yet: a broker with
            # no state for this producer accepts any first sequence, so that later batch
            # may be in the log already. This one can no longer be written in order: it
            # fails (as in Java), and on_failure settles the later ones in gap mode.
            return Verdict.FAIL, False
        # A real gap: the broker has everything before this batch and not it, so
        # neither it nor anything after it was appended: renumber under a new epoch.
        # (Behind an expired batch this holds only once no earlier batch is still
        # unacknowledged: the pieces of a split batch share their creation time, so
        # one may expire while the piece before it is still in flight.)
        real_gap = not state.unresolved or (
            batch.base_sequence in state.after_expired and not _live_before(state, batch)
        )
        return Verdict.RETRY, real_gap
    return Verdict.RETRY if getattr(error, "retriable", False) else Verdict.FAIL, False


def is_next_sequence(state: PartitionSequences, sequence: int) -> bool:
    """Whether ``sequence`` is the one the broker expects next (after the last acknowledged)."""
    expected = 0 if state.last_acked_sequence < 0 else state.last_acked_sequence + 1
    return sequence == (expected if expected <= INT32_MAX else 0)


def may_have_later(state: PartitionSequences, batch: ProducerBatch) -> bool:
    """Whether a batch after ``batch`` may be in the log though ``batch`` is not.

    Only when the broker may have no state for this producer (nothing acknowledged in
    this epoch yet: it then accepts any first sequence) and a later batch was sent
    (every batch in ``in_flight`` has been stamped, so sent at least once).
    """
    return (
        state.last_acked_sequence < 0
        and (batch.producer_id, batch.producer_epoch) == (state.producer_id, state.producer_epoch)
        and any(b is not batch for b in state.in_flight)
    )


def overtaken(state: PartitionSequences, batch: ProducerBatch) -> bool:
    """Whether a later batch of the same numbering was acknowledged before ``batch``.

    Its sequences then lie at or before the last acknowledged one: an
    OUT_OF_ORDER_SEQUENCE_NUMBER for it means it is not in the log (a resend of a batch
    the broker has is answered DUPLICATE_SEQUENCE_NUMBER: it remembers the last five, and
    no more than five are in flight), and it never can be in order.
    """
    return (
        state.last_acked_sequence >= 0
        and (batch.producer_id, batch.producer_epoch) == (state.producer_id, state.producer_epoch)
        and not seq_after(batch.base_sequence, state.last_acked_sequence)
    )


def _live_before(state: PartitionSequences, batch: ProducerBatch) -> bool:
    """Whether an unexpired batch with an earlier sequence than ``batch`` awaits an ack."""
    for queued in state.in_flight:
        if queued is batch:
            return False
        if queued.final_state is None:
            return True
    return False
