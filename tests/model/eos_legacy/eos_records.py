"""What the exactly-once Spark sink stores in Kafka, and under which names (docs/spark.md).

Pure functions and records, no I/O: the transactional id and consumer groups of a sink's
prefix, the marker a streaming task commits inside its transaction, and the driver's commit
decision as offset metadata (a compact encoding: it must fit the broker's 4,096 bytes of
``offset.metadata.max.bytes``). :mod:`aiokprod.spark.exactly_once` decides with them.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Mapping

from aiokprod.errors import ConfigError
from aiokprod.types import OffsetAndMetadata, PreparedTransaction, TopicPartition

__all__ = [
    "FORMAT",
    "MAX_METADATA_BYTES",
    "Decision",
    "DecisionTooLargeError",
    "batch_committed",
    "decision_group",
    "latest_decision",
    "marker",
    "marker_group",
    "next_sequence",
    "partition_of",
    "transactional_id",
]

#: The format tag that starts every marker and decision the sink writes.
FORMAT = "aiokprod-spark/1"
#: The broker's default ``offset.metadata.max.bytes``: the room one offset's metadata has.
MAX_METADATA_BYTES = 4096


class DecisionTooLargeError(ConfigError):
    """A commit decision does not fit the offset metadata that stores it."""


# --- names --------------------------------------------------------------------------------


def transactional_id(prefix: str, partition: int) -> str:
    """The transactional id of Spark partition ``partition``: ``<prefix>-<partition>``."""
    return f"{prefix}-{partition}"


def marker_group(prefix: str, partition: int) -> str:
    """The consumer group that holds partition ``partition``'s marker."""
    return f"{prefix}-{partition}.marker"


def decision_group(prefix: str) -> str:
    """The consumer group that holds the driver's commit decisions."""
    return f"{prefix}.commit"


def partition_of(prefix: str, txn_id: str) -> int | None:
    """The Spark partition whose transactional id ``txn_id`` is, or None if not this sink's.

    ``<prefix>-<digits>`` only: the ids of a prefix that merely starts with ``prefix``
    (``<prefix>-3-1`` of prefix ``<prefix>-3``) are not this sink's.
    """
    if not txn_id.startswith(prefix + "-"):
        return None
    rest = txn_id[len(prefix) + 1 :]
    if not rest.isdigit() or not rest.isascii() or (len(rest) > 1 and rest[0] == "0"):
        return None
    return int(rest)


# --- markers (streaming) ------------------------------------------------------------------


def marker(query_id: str, batch_id: int) -> OffsetAndMetadata:
    """The marker a streaming task commits inside its transaction."""
    return OffsetAndMetadata(batch_id, f"{FORMAT} query={query_id}")


def batch_committed(
    offsets: Mapping[TopicPartition, OffsetAndMetadata], query_id: str, batch_id: int
) -> bool:
    """Whether a partition's marker group says micro-batch ``batch_id`` of ``query_id`` committed.

    Any entry of the group counts (the marker's topic is the topic of the partition's first row,
    which may differ between micro-batches). A marker of another query - a new checkpoint
    reusing the prefix restarts batch ids at 0 - never counts.
    """
    expected = marker(query_id, batch_id)
    return any(value == expected for value in offsets.values())


# --- the driver's decision ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """The driver's commit decision for one batch job or micro-batch.

    Attributes:
        run_id: the streaming query's id, or a batch job's id (made by its driver).
        batch_id: the micro-batch, or None for a batch job.
        transactions: every transaction the driver commits, by Spark partition.
        done: every transaction was committed (or found lost); nothing is left to complete.
    """

    run_id: str
    batch_id: int | None
    transactions: Mapping[int, PreparedTransaction]
    done: bool = False

    def finished(self) -> Decision:
        """The same decision, marked done."""
        return dataclasses.replace(self, done=True)

    def encode(self, prefix: str) -> str:
        """The decision as offset metadata.

        Raises:
            DecisionTooLargeError: more transactions than fit in the metadata.
        """
        protocols = {t.protocol for t in self.transactions.values()} or {2}
        header = (
            f"{FORMAT} run={self.run_id} batch={'-' if self.batch_id is None else self.batch_id} "
            f"state={'done' if self.done else 'commit'} tv={max(protocols)} "
            f"n={len(self.transactions)} txns="
        )
        body = _encode_transactions(self.transactions)
        text = header + body
        if len(text.encode()) > MAX_METADATA_BYTES:
            raise DecisionTooLargeError(
                f"the commit decision of {len(self.transactions)} Spark partitions takes "
                f"{len(text.encode())} bytes, more than the {MAX_METADATA_BYTES} bytes of offset "
                "metadata that store it: write from fewer Spark partitions (coalesce or "
                "repartition before the sink)"
            )
        return text

    @classmethod
    def parse(cls, text: str, prefix: str) -> Decision | None:
        """A decision from offset metadata; None if it is not one this module wrote."""
        match = _DECISION.fullmatch(text)
        if match is None:
            return None
        run_id, batch, state, tv, count, body = match.groups()
        try:
            txns = _decode_transactions(body, prefix, int(tv))
        except ValueError:
            return None
        if len(txns) != int(count):
            return None
        return cls(run_id, None if batch == "-" else int(batch), txns, state == "done")


_DECISION = re.compile(
    re.escape(FORMAT)
    + r" run=(\S+) batch=(-|\d+) state=(commit|done) tv=([12]) n=(\d+) txns=([A-Za-z0-9_-]*)"
)


def _varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _zigzag(value: int) -> int:
    return value * 2 if value >= 0 else -value * 2 - 1


def _unzigzag(value: int) -> int:
    return value // 2 if value % 2 == 0 else -(value + 1) // 2


def _encode_transactions(txns: Mapping[int, PreparedTransaction]) -> str:
    """(partition, producer id, epoch) triples as deltas in varints, base64url without padding.

    Producer ids of one run come from the same blocks (deltas of a few bytes); a decision of
    200 partitions takes about 1 KB of the 4 KB of metadata.
    """
    out = bytearray()
    last_partition = -1
    last_pid = 0
    for partition in sorted(txns):
        txn = txns[partition]
        _varint(out, partition - last_partition - 1)
        _varint(out, _zigzag(txn.producer_id - last_pid))
        _varint(out, txn.producer_epoch)
        last_partition, last_pid = partition, txn.producer_id
    return base64.urlsafe_b64encode(bytes(out)).decode().rstrip("=")


def _decode_transactions(body: str, prefix: str, protocol: int) -> dict[int, PreparedTransaction]:
    data = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    txns: dict[int, PreparedTransaction] = {}
    at = 0
    last_partition, last_pid = -1, 0
    while at < len(data):
        gap, at = _read_varint(data, at)
        delta, at = _read_varint(data, at)
        epoch, at = _read_varint(data, at)
        partition = last_partition + gap + 1
        pid = last_pid + _unzigzag(delta)
        txns[partition] = PreparedTransaction(
            transactional_id(prefix, partition), pid, epoch, protocol
        )
        last_partition, last_pid = partition, pid
    return txns


def latest_decision(
    prefix: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
) -> tuple[int, Decision] | None:
    """The newest decision in the decision group's offsets: (its sequence, the decision).

    Decisions are stored with a sequence as the offset (milliseconds, strictly increasing per
    prefix), on the topic the sink wrote to; the highest sequence is the newest decision.
    """
    best: tuple[int, Decision] | None = None
    for value in offsets.values():
        decision = Decision.parse(value.metadata, prefix)
        if decision is not None and (best is None or value.offset > best[0]):
            best = (value.offset, decision)
    return best


def next_sequence(now_ms: int, latest: int | None) -> int:
    """The sequence of a new decision: now, or one past the newest if the clock is behind."""
    return now_ms if latest is None or now_ms > latest else latest + 1
