"""Idempotent producer state: the producer id and epoch, and per-partition sequences.

The broker keeps, per partition and producer id, the epoch and the last five batches it
appended. It appends a batch only if its first sequence follows the last one (or is 0 under
a newer epoch), and answers a resent batch it already has with success and the original
offset. So retries never duplicate or reorder records, provided that the client:

- assigns sequences when a batch is first drained, in queue order, and keeps a batch's
  (producer id, epoch, sequence) across retries: an earlier attempt may have been written,
  and only the same stamp lets the broker recognise it;
- sends a retried batch only when it is its partition's lowest unacknowledged sequence, so
  that retries reach the broker in order;
- sends one batch per partition until the broker acknowledged one of the producer id there:
  without state for the id it appends any first sequence (KIP-360), so a later batch could
  be appended before an earlier refused one (the Java client pipelines from the start);
- moves a partition to a new epoch (sequences from 0) only when none of its batches is in
  flight under the old one, and rewrites batches under a new epoch only when the broker
  provably did not append them.

When the outcome of a sent batch is unknown (it expired after being sent), the partition is
*unresolved*: nothing new is drained until every batch in flight has an outcome; then either
the last acknowledged sequence shows the batch was written, or the epoch is bumped (KIP-360).

This follows the Java client's ``TransactionManager`` for an idempotent, non-transactional
producer (``canRetry``, ``handleFailedBatch``, ``maybeResolveSequences``,
``bumpIdempotentProducerEpoch``). It is synchronous and does no I/O. One partition's
bookkeeping, and what an error response means for it, are in ``internals/sequences.py``.
"""

from __future__ import annotations

from aiokprod.errors import (
    BrokerError,
    OutOfOrderSequenceNumberError,
    UnknownProducerIdError,
)
from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.sequences import (
    PartitionSequences,
    Verdict,
    error_verdict,
    increment_sequence,
    is_next_sequence,
    may_have_later,
    overtaken,
    seq_after,
)
from aiokprod.types import TopicPartition

INT16_MAX = 2**15 - 1


class IdempotenceState:
    """Producer id, epoch and sequences for an idempotent producer."""

    def __init__(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        self._partitions: dict[TopicPartition, PartitionSequences] = {}
        #: Set when a partition lost a sequence for good; the sender then bumps the epoch.
        self.epoch_bump_required = False
        #: Set when the id must be fetched again (none yet, or the epoch is exhausted).
        self.producer_id_required = True
        #: Partitions that asked for the next bump: their unacknowledged batches get new
        #: sequences then (Java: ``partitionsToRewriteSequences``).
        self._rewrite: set[TopicPartition] = set()
        #: Partitions that are unresolved or in gap mode (what :meth:`resolve_sequences`
        #: looks at: not every partition ever written, issue 30). Ordered, for replays.
        self._attention: dict[TopicPartition, None] = {}
        #: Partitions with state, by topic (to release an idle topic's).
        self._by_topic: dict[str, dict[TopicPartition, None]] = {}
        #: Partitions of released topics whose state waits for an outcome to be released.
        self._release_pending: dict[TopicPartition, None] = {}
        #: Set when a partition's state under the current id and epoch was released: the
        #: broker may still expect its next sequence, so a partition without state waits
        #: for an epoch bump before its first batch (see :meth:`release_topics`).
        self._released_since_bump = False

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
        self._released_since_bump = False
        # A new id may settle a bump the exhausted epoch could not: the partitions that
        # asked for it are renumbered under the new id (their batches were not appended).
        self._renumber_requested()

    def reset_for_new_cluster(self) -> None:
        """The cluster was replaced: the id, the epoch and every sequence belong to the old one.

        The new cluster never issued this producer id (and may have issued it to another
        producer: writing under it would break that producer's sequences, or have its
        batches dropped as duplicates of ours), and it has none of the old cluster's log. So
        a new id is needed before anything is sent (:meth:`can_drain` holds every batch
        until then), and every partition's unacknowledged batches are numbered from 0 under
        it when it comes (:meth:`set_producer_id`), in the order they had. A batch whose
        outcome on the old cluster is unknown is written to the new cluster all the same:
        the old log is gone with its cluster (docs/delivery-guarantees.md).
        """
        self.producer_id = -1
        self.producer_epoch = -1
        self.producer_id_required = True
        self.epoch_bump_required = False
        self._released_since_bump = False
        for tp, state in self._partitions.items():
            # Not the new id, whatever number it has: the new cluster holds no state for us.
            state.producer_id = state.producer_epoch = -1
            state.broker_has_state = False
            self._rewrite.add(tp)

    def _state(self, tp: TopicPartition) -> PartitionSequences:
        state = self._partitions.get(tp)
        if state is None:
            state = self._partitions[tp] = PartitionSequences(self.producer_id, self.producer_epoch)
            held = self._by_topic.get(tp.topic)
            if held is None:
                held = self._by_topic[tp.topic] = {}
            held[tp] = None
        return state

    def _attend(self, tp: TopicPartition) -> None:
        """``tp`` became unresolved or entered gap mode: resolve_sequences looks at it."""
        self._attention[tp] = None

    def _is_stale(self, state: PartitionSequences) -> bool:
        return (state.producer_id, state.producer_epoch) != (self.producer_id, self.producer_epoch)

    # --- draining ---------------------------------------------------------------------------

    def can_drain(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` (its partition's first queued batch) may be sent now.

        Java: ``RecordAccumulator.shouldStopDrainBatchesForPartition``, negated.
        """
        if not self.has_producer_id:
            return False
        state = self._partitions.get(batch.tp)
        if state is None:
            if batch.has_sequence:
                return False
            if self._released_since_bump:
                # This partition may be one whose state was released: the broker would want
                # its next sequence, not 0. A new epoch makes 0 right everywhere (KIP-360).
                self.epoch_bump_required = True
                return False
            return True  # a partition never drained before: a clean start
        if not batch.has_sequence:
            if state.in_flight and self._is_stale(state):
                # Old-epoch batches are still out: a new-epoch batch with sequence 0 must
                # not overtake them.
                return False
            if state.in_flight and not state.broker_has_state:
                # Nothing of this producer id acknowledged here yet: the broker may have no
                # state for it, and then it appends a batch with any first sequence
                # (KIP-360). A later batch sent now could be taken while an earlier one is
                # refused (NOT_LEADER_OR_FOLLOWER from a leader still loading, a leader
                # that moved, MESSAGE_TOO_LARGE), and the earlier one could then never be
                # written in its place. So one batch at a time until the first answer.
                return False
            # An earlier batch's outcome is unknown, or a gap is being settled: wait.
            return not (state.unresolved or state.gap)
        # A retry: only the lowest unacknowledged sequence may go (in-flight drops to 1);
        # behind a gap, one the broker refused waits to be renumbered.
        if batch.not_appended and state.gap:
            return False
        return bool(state.in_flight) and state.in_flight[0] is batch

    def assign_sequence(self, batch: ProducerBatch) -> None:
        """Stamp a batch at its first drain; a batch that has a stamp keeps it."""
        if batch.has_sequence:
            return
        if self._release_pending:
            self._release_pending.pop(batch.tp, None)  # in use again
        state = self._state(batch.tp)
        if self._is_stale(state) and not state.in_flight:
            self._restart_numbering(state)
        sequence = state.next_sequence
        batch.stamp(state.producer_id, state.producer_epoch, sequence)
        state.next_sequence = increment_sequence(sequence, batch.record_count)
        state.in_flight.append(batch)

    # --- outcomes ---------------------------------------------------------------------------

    def on_success(self, batch: ProducerBatch) -> None:
        """A batch was acknowledged (or answered DUPLICATE_SEQUENCE_NUMBER)."""
        state = self._partitions.get(batch.tp)
        if state is None or not batch.has_sequence:
            return
        _remove(state.in_flight, batch)
        if batch.producer_id == state.producer_id:
            state.broker_has_state = True
        if (batch.producer_id, batch.producer_epoch) == (state.producer_id, state.producer_epoch):
            last = increment_sequence(batch.base_sequence, batch.record_count - 1)
            if state.last_acked_sequence < 0 or seq_after(last, state.last_acked_sequence):
                state.last_acked_sequence = last

    def on_error(self, batch: ProducerBatch, error: BaseException) -> Verdict:
        """Decide on an error response for a stamped batch (Java's ``canRetry``).

        The decision is the partition's (:func:`~aiokprod.internals.sequences.error_verdict`);
        when it calls for renumbering under a new epoch, the bump is requested here. The
        caller still checks the delivery timeout and ``retries`` for a RETRY.
        """
        verdict, bump = error_verdict(self._partitions.get(batch.tp), batch, error)
        if bump:
            self._request_bump(batch.tp)
        return verdict

    def on_failure(self, batch: ProducerBatch, error: BaseException, *, may_retry: bool) -> None:
        """A stamped batch failed for good with a definite broker error.

        The broker did not append it, so its sequences are a gap. The Java client
        (``handleFailedBatch``) bumps the epoch at once and renumbers every unacknowledged
        batch of the partition; but a batch sent before the failed one may have been
        appended (its answer was lost), and so may one sent after it when the broker has no
        state for this producer (it then accepts any sequence). Renumbering those would
        write them twice. So the partition enters *gap* mode instead: nothing new is sent,
        its other batches are resent under their own stamps until each is either
        acknowledged or refused with OUT_OF_ORDER_SEQUENCE_NUMBER, and then the epoch is
        bumped and only the refused ones are renumbered (:meth:`resolve_sequences`).
        With ``may_retry`` false (retries exhausted) the outcome of earlier attempts is
        unknown, so the partition is left alone, as the Java client does.
        """
        state = self._partitions.get(batch.tp)
        if state is None or not batch.has_sequence:
            return
        later = may_have_later(state, batch) or overtaken(state, batch)
        _remove(state.in_flight, batch)
        if isinstance(error, OutOfOrderSequenceNumberError) and later:
            state.gap = True  # see on_error: the later batches are resent under own stamps
            self._attend(batch.tp)
        elif isinstance(error, (OutOfOrderSequenceNumberError, UnknownProducerIdError)):
            self._request_bump(batch.tp)
        elif may_retry and isinstance(error, BrokerError):
            state.gap = True
            self._attend(batch.tp)

    def on_split(self, batch: ProducerBatch, pieces: list[ProducerBatch]) -> None:
        """A stamped batch refused as too large was split into ``pieces`` (in record order).

        The broker did not append it (MESSAGE_TOO_LARGE is checked before any sequence), so
        its sequence range is free: the pieces take it over in order, under its producer id
        and epoch (Java: ``ProducerBatch.split``, each piece's base sequence is the batch's
        plus the records before it), and take its place in the partition's unacknowledged
        list. No gap and no duplicate: the broker sees the same sequences, only in smaller
        batches. Batches sent after it and answered OUT_OF_ORDER_SEQUENCE_NUMBER (the broker
        still waits for the range) are not the next expected sequence, so :meth:`on_error`
        retries them, and they go after the pieces (:meth:`can_drain`: lowest first).
        A piece of a renumbered batch counts as renumbered too (``sequence_reset``).
        """
        sequence = batch.base_sequence
        for piece in pieces:
            piece.stamp(batch.producer_id, batch.producer_epoch, sequence)
            piece.sequence_reset = batch.sequence_reset
            sequence = increment_sequence(sequence, piece.record_count)
        state = self._partitions.get(batch.tp)
        if state is None:  # pragma: no cover - a stamped batch's partition has state
            return
        for i, queued in enumerate(state.in_flight):
            if queued is batch:
                state.in_flight[i : i + 1] = pieces
                return
        state.in_flight.extend(pieces)  # pragma: no cover - a live stamped batch is listed

    def on_expired(self, batch: ProducerBatch, *, outstanding: bool) -> None:
        """A stamped batch reached its delivery timeout (its records fail with a timeout).

        A stamped batch has been sent at least once, so whether the broker appended it is
        unknown: the partition is unresolved until everything in flight has an outcome
        (:meth:`resolve_sequences`). With ``outstanding`` its request is still unanswered:
        it stays in the partition's in-flight list until :meth:`on_late_outcome`, so that
        nothing is decided while the broker may still append it. (Java marks only batches
        in retry; an expired first attempt is just as unknown, so both count here.)
        """
        state = self._partitions.get(batch.tp)
        if state is None or not batch.has_sequence:
            return
        if not outstanding:
            _remove(state.in_flight, batch)
        if (batch.producer_id, batch.producer_epoch) != (state.producer_id, state.producer_epoch):
            return
        next_sequence = increment_sequence(batch.base_sequence, batch.record_count)
        state.after_expired.add(next_sequence)
        state.unresolved = True
        self._attend(batch.tp)

    def on_late_outcome(self, batch: ProducerBatch, *, appended: bool) -> None:
        """The request of a batch that had already expired was answered (or failed)."""
        if appended:
            self.on_success(batch)
            return
        state = self._partitions.get(batch.tp)
        if state is not None:
            _remove(state.in_flight, batch)

    def on_abandoned(self, batch: ProducerBatch) -> None:
        """A batch ended without a broker verdict (the producer is closing or crashed)."""
        state = self._partitions.get(batch.tp)
        if state is not None:
            _remove(state.in_flight, batch)

    def resolve_sequences(self) -> None:
        """Settle unresolved partitions that have nothing in flight any more.

        Java's ``maybeResolveSequences``: if the last acknowledged sequence reaches the
        partition's next sequence, every batch was written after all; otherwise a sequence
        is lost and the epoch is bumped (the partition restarts at 0 under it).
        """
        if self._release_pending:
            self._release_settled()
        if not self._attention:
            return
        for tp in list(self._attention):
            state = self._partitions.get(tp)
            if state is None:
                del self._attention[tp]
                continue
            if state.gap:
                self._settle_gap(tp, state)
            if state.unresolved and not state.in_flight:
                state.unresolved = False
                state.after_expired.clear()
                if not is_next_sequence(state, state.next_sequence):
                    self._request_bump(tp)
            if not (state.gap or state.unresolved):
                del self._attention[tp]

    def _settle_gap(self, tp: TopicPartition, state: PartitionSequences) -> None:
        """End gap mode once every remaining batch's fate is known (see :meth:`on_failure`)."""
        batches = state.in_flight
        if any(b.in_flight for b in batches):
            return  # answers are still coming
        if batches and not batches[0].not_appended:
            return  # the head is resent under its own stamp first (can_drain lets it go)
        # Nothing left, or the head was refused: the broker has state and refuses everything
        # behind the gap, so what remains was not appended and can be renumbered.
        state.gap = False
        self._request_bump(tp)

    def _request_bump(self, tp: TopicPartition) -> None:
        self.epoch_bump_required = True
        self._rewrite.add(tp)

    def bump_epoch(self) -> bool:
        """Client-side epoch bump (KIP-360); False if a new producer id is needed instead.

        The partitions that asked for the bump get their unacknowledged batches renumbered
        from 0 under the new epoch (the broker provably did not append them: they follow a
        gap); other partitions finish their old-epoch batches first and start at 0 with their
        next new batch.
        """
        self.epoch_bump_required = False
        if self.producer_epoch >= INT16_MAX:
            self.producer_id_required = True
            return False
        self.producer_epoch += 1
        self._released_since_bump = False
        self._renumber_requested()
        return True

    def _restart_numbering(self, state: PartitionSequences) -> None:
        """Move a partition to the current id and epoch: its sequences start again at 0.

        Under a new epoch of the same id the broker keeps our state (and wants sequence 0);
        under a new id it may have none (see :meth:`can_drain`).
        """
        if state.producer_id != self.producer_id:
            state.broker_has_state = False
        state.producer_id, state.producer_epoch = self.producer_id, self.producer_epoch
        state.next_sequence = 0
        state.last_acked_sequence = -1

    def _renumber_requested(self) -> None:
        """Renumber the partitions that asked for it from 0 under the current id and epoch."""
        for tp in sorted(self._rewrite):
            state = self._state(tp)
            self._restart_numbering(state)
            state.unresolved = False
            state.after_expired.clear()
            state.gap = False
            # Expired batches are never resent: they keep no place in the new numbering.
            state.in_flight = [b for b in state.in_flight if b.final_state is None]
            for batch in state.in_flight:
                batch.stamp(self.producer_id, self.producer_epoch, state.next_sequence)
                batch.sequence_reset = True
                batch.not_appended = False
                state.next_sequence = increment_sequence(state.next_sequence, batch.record_count)
        self._rewrite.clear()

    # --- idle topics --------------------------------------------------------------------------

    def release_topics(self, topics: list[str]) -> None:
        """Forget the sequence state of idle topics' partitions (issue 30).

        A partition with a batch still unanswered, unresolved or in gap mode keeps its state
        until that settles. The broker keeps the producer's last sequence per partition, so
        a released partition written again must not start at 0 under the same epoch: after
        a release, the first batch of any partition without state waits for an epoch bump
        (client-side, KIP-360), under which every partition starts at 0 anyway. Not for a
        transactional producer (its epoch belongs to the coordinator).
        """
        for topic in topics:
            held = self._by_topic.get(topic)
            if not held:
                continue
            for tp in list(held):
                if not self._release(tp):
                    self._release_pending[tp] = None
        # A dict keeps its size when emptied: new ones, sized for what is left.
        self._partitions = dict(self._partitions)
        self._by_topic = dict(self._by_topic)

    def _release(self, tp: TopicPartition) -> bool:
        """Drop ``tp``'s state if nothing of it is outstanding; True if dropped (or none)."""
        state = self._partitions.get(tp)
        if state is None:
            return True
        if state.in_flight or state.unresolved or state.gap or tp in self._rewrite:
            return False
        del self._partitions[tp]
        self._attention.pop(tp, None)
        held = self._by_topic.get(tp.topic)
        if held is not None:
            held.pop(tp, None)
            if not held:
                del self._by_topic[tp.topic]
        if not self._is_stale(state):
            self._released_since_bump = True
        return True

    def _release_settled(self) -> None:
        for tp in list(self._release_pending):
            if self._release(tp):
                del self._release_pending[tp]

    @property
    def partitions_held(self) -> int:
        """How many partitions have sequence state (for tests and diagnostics)."""
        return len(self._partitions)

    def unacked(self, tp: TopicPartition) -> list[ProducerBatch]:
        """The partition's batches with a sequence and no outcome yet."""
        state = self._partitions.get(tp)
        return list(state.in_flight) if state else []

    def is_unresolved(self, tp: TopicPartition) -> bool:
        """Whether an expired batch's outcome is still unknown for ``tp``."""
        state = self._partitions.get(tp)
        return state is not None and state.unresolved


def _remove(batches: list[ProducerBatch], batch: ProducerBatch) -> None:
    for i, queued in enumerate(batches):
        if queued is batch:
            del batches[i]
            return
