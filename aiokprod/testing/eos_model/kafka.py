"""The Kafka side of the exactly-once model: coordinator, consumer-group offsets, records.

Small and exact about what the Spark sink's protocol relies on, with Kafka 4.4's rules for
transaction protocol 2 (KIP-890; docs/spark.md, /shared reference ``exactly-once-sinks.md``):

- **InitProducerId** on a transactional id aborts its open transaction (bumping the epoch)
  and hands out the next epoch: every older holder of the id is fenced.
- **Writes** (records, transactional offset commits) need the id's current producer id and
  epoch; the first one of a transaction opens it (``Ongoing``), at the model's clock.
- **EndTxn** needs the producer id and the epoch of the open transaction and bumps the epoch
  when it completes it; a retry of the same outcome at the epoch before the bump succeeds;
  the other outcome then fails with INVALID_TXN_STATE; any other epoch is fenced.
- **The transaction timeout**: once the clock passes an open transaction's start plus its
  timeout, the coordinator may abort it (bumping the epoch) at any step.
- **Offsets**: a plain OffsetCommit is visible at once; a transactional one is pending until
  its transaction commits (dropped if it aborts). OffsetFetch with RequireStable waits while
  a pending offset of the asked partitions exists.

Time is a count of ticks; records are labels (what Spark partition of what write they carry).
Everything is plain data with a canonical :meth:`ModelKafka.digest` for the explorer.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterable, Mapping

from aiokprod.errors import (
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
)
from aiokprod.types import OffsetAndMetadata, TopicPartition, TransactionDescription

__all__ = ["ModelKafka", "Record", "TxnId"]

ONGOING = "Ongoing"
EMPTY = "Empty"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"

#: Milliseconds per model tick (what DescribeTransactions reports as times).
TICK_MS = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """A record in the topic: whose rows it carries and the transaction that wrote it."""

    label: tuple[object, ...]
    transactional_id: str
    producer_id: int
    epoch: int
    #: "pending", "committed" or "aborted".
    status: str = "pending"
    #: Why it was aborted: "endtxn" (EndTxn abort), "fenced" (InitProducerId), "timeout".
    cause: str = ""


@dataclasses.dataclass(slots=True)
class TxnId:
    """The coordinator's state of one transactional id."""

    producer_id: int
    epoch: int
    timeout_ticks: int
    state: str = EMPTY
    start_tick: int = -1
    #: Records (indices into the log) and pending offsets of the open transaction.
    records: list[int] = dataclasses.field(default_factory=list)
    offsets: list[tuple[str, TopicPartition, OffsetAndMetadata]] = dataclasses.field(
        default_factory=list
    )
    #: Which actor opened the current transaction, and the actors that listed it open
    #: (ListTransactions) since: a driver that lists it is expected to end it.
    opener: str = ""
    listed_by: frozenset[str] = frozenset()


class ModelKafka:
    """The cluster as the sink sees it: one coordinator for everything, no failover.

    (Coordinator failover and retries are the producer's and the admin client's business,
    tested against real brokers and the producer's simulator; what matters here is the order
    of the protocol's effects.)
    """

    def __init__(self) -> None:
        self.tick = 0
        self.ids: dict[str, TxnId] = {}
        self.log: list[Record] = []
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}

    # --- the coordinator --------------------------------------------------------------------

    def init_producer_id(self, tid: str, timeout_ticks: int) -> tuple[int, int]:
        """InitProducerId: abort the open transaction (fencing its holder), then a new epoch."""
        state = self.ids.get(tid)
        if state is None:
            # A producer id that depends on the id only, not on the order ids are first
            # used in: two tasks starting in either order reach the same state.
            state = TxnId(1000 + zlib.crc32(tid.encode()) % 1_000_000, 0, timeout_ticks)
            self.ids[tid] = state
            return state.producer_id, state.epoch
        if state.state == ONGOING:
            self._end(state, commit=False, cause="fenced")
            state.epoch += 1
        state.epoch += 1
        state.timeout_ticks = timeout_ticks
        return state.producer_id, state.epoch

    def produce(self, tid: str, pid: int, epoch: int, label: tuple[object, ...], actor: str) -> int:
        """A transactional record; the first write opens the transaction."""
        state = self._writable(tid, pid, epoch, actor)
        self.log.append(Record(label, tid, pid, epoch))
        state.records.append(len(self.log) - 1)
        return len(self.log) - 1

    def txn_offset_commit(
        self,
        tid: str,
        pid: int,
        epoch: int,
        group: str,
        tp: TopicPartition,
        value: OffsetAndMetadata,
        actor: str,
    ) -> None:
        """A transactional offset commit (AddOffsetsToTxn + TxnOffsetCommit)."""
        state = self._writable(tid, pid, epoch, actor)
        state.offsets.append((group, tp, value))

    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> None:
        """EndTxn under transaction protocol 2.

        Raises:
            InvalidProducerIdMappingError: an unknown id or another producer id.
            ProducerFencedError: an epoch that is neither the open one nor, for a retry,
                the one before the bump.
            InvalidTxnStateError: the transaction ended the other way (or never opened).
        """
        state = self.ids.get(tid)
        if state is None or state.producer_id != pid:
            raise InvalidProducerIdMappingError(f"model: {tid} has no producer id {pid}")
        if state.state == ONGOING and epoch == state.epoch:
            self._end(state, commit, cause="endtxn")
            state.epoch += 1
            return
        if epoch == state.epoch - 1 and state.state in (COMPLETE_COMMIT, COMPLETE_ABORT):
            if (state.state == COMPLETE_COMMIT) == commit:
                return  # a retry of the same outcome
            raise InvalidTxnStateError(f"model: {tid} is {state.state}")
        if epoch == state.epoch:
            raise InvalidTxnStateError(f"model: {tid} is {state.state}")
        raise ProducerFencedError(f"model: {tid} is at epoch {state.epoch}, not {epoch}")

    def time_out(self, tid: str) -> None:
        """The coordinator aborts an open transaction past its timeout (bumping the epoch)."""
        state = self.ids[tid]
        self._end(state, commit=False, cause="timeout")
        state.epoch += 1

    def expired(self) -> list[str]:
        """Open transactions whose timeout has passed (the coordinator may abort them)."""
        return sorted(
            tid
            for tid, s in self.ids.items()
            if s.state == ONGOING and self.tick >= s.start_tick + s.timeout_ticks
        )

    def describe(self, ids: Iterable[str]) -> dict[str, TransactionDescription]:
        """DescribeTransactions."""
        out = {}
        for tid in ids:
            s = self.ids.get(tid)
            if s is None:
                continue
            ongoing = s.state == ONGOING
            # A negative timeout is one given in milliseconds (see ModelAdmin.fence_producers).
            timeout_ms = -s.timeout_ticks if s.timeout_ticks < 0 else s.timeout_ticks * TICK_MS
            out[tid] = TransactionDescription(
                tid,
                s.state,
                s.producer_id,
                s.epoch,
                timeout_ms,
                s.start_tick * TICK_MS if ongoing else -1,
                frozenset(),
            )
        return out

    def ongoing_exists(self) -> bool:
        """Whether any transaction is open."""
        return any(s.state == ONGOING for s in self.ids.values())

    def ongoing(self, actor: str) -> list[str]:
        """ListTransactions(states=[Ongoing]), as ``actor`` asks it."""
        found = sorted(tid for tid, s in self.ids.items() if s.state == ONGOING)
        for tid in found:
            state = self.ids[tid]
            state.listed_by = state.listed_by | {actor}
        return found

    # --- offsets ----------------------------------------------------------------------------

    def commit_offsets(
        self, group: str, values: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        """A plain OffsetCommit (visible at once)."""
        self.offsets.setdefault(group, {}).update(values)

    def fetch_offsets(
        self, group: str, tps: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """OffsetFetch: the committed offsets (of ``tps``, or every committed one)."""
        committed = self.offsets.get(group, {})
        if tps is None:
            return dict(committed)
        return {tp: committed[tp] for tp in tps if tp in committed}

    def unstable(self, group: str, tps: Iterable[TopicPartition] | None) -> bool:
        """Whether an open transaction holds a pending offset of ``tps`` in ``group``."""
        wanted = None if tps is None else set(tps)
        for s in self.ids.values():
            if s.state != ONGOING:
                continue
            for g, tp, _ in s.offsets:
                if g == group and (wanted is None or tp in wanted):
                    return True
        return False

    # --- reading back -------------------------------------------------------------------------

    def visible(self) -> list[tuple[object, ...]]:
        """The labels a read_committed consumer reads, in log order."""
        return [r.label for r in self.log if r.status == "committed"]

    def digest(self) -> tuple[object, ...]:
        """Everything that decides what happens next, canonically."""
        ids = tuple(
            (
                tid,
                s.producer_id,
                s.epoch,
                s.timeout_ticks,
                s.state,
                s.start_tick,
                tuple(s.records),
                tuple(s.offsets),
                s.opener,
                tuple(sorted(s.listed_by)),
            )
            for tid, s in sorted(self.ids.items())
        )
        offsets = tuple(
            (g, tuple(sorted(v.items(), key=lambda kv: (kv[0].topic, kv[0].partition))))
            for g, v in sorted(self.offsets.items())
        )
        return (self.tick, ids, tuple(self.log), offsets)

    # --- internals ------------------------------------------------------------------------------

    def _writable(self, tid: str, pid: int, epoch: int, actor: str) -> TxnId:
        state = self.ids.get(tid)
        if state is None or state.producer_id != pid or state.epoch != epoch:
            raise ProducerFencedError(f"model: {tid} epoch {epoch} is fenced")
        if state.state != ONGOING:
            state.state = ONGOING
            state.start_tick = self.tick
            state.records = []
            state.offsets = []
            state.opener = actor
            state.listed_by = frozenset()
        return state

    def _end(self, state: TxnId, commit: bool, cause: str) -> None:
        if state.state != ONGOING:
            raise KafkaError("model: ending a transaction that is not open")
        status = "committed" if commit else "aborted"
        for index in state.records:
            self.log[index] = dataclasses.replace(
                self.log[index], status=status, cause="" if commit else cause
            )
        if commit:
            for group, tp, value in state.offsets:
                self.offsets.setdefault(group, {})[tp] = value
        state.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        state.start_tick = -1
        state.records = []
        state.offsets = []
