"""What the exactly-once Spark sink stores in Kafka, and under which names (docs/spark.md).

Pure functions and records, no I/O. For a sink with ``transactionalIdPrefix`` *P*:

- **The run register**: the transactional id ``P-run``. Its producer id and epoch are the
  *run token*: the driver's planning bumps it (InitProducerId) to open a run - a batch job, or
  one micro-batch - and its commit or abort bumps it again to close the run. A task writes
  only while the register still holds the token it was planned with.
- **Transactional ids**, one per task attempt: ``P-<run tag>-<partition>.<attempt>`` for a
  batch job (its ids are its own: a straggler of one job can never touch another job's
  transaction), ``P-<partition>.<attempt>`` for a streaming query (shared by its micro-batches,
  so that the coordinator keeps a bounded number of ids).
- **Markers** (streaming): the offset a task commits inside its transaction, group
  ``P-<partition>.<query tag>.marker``, offset = the micro-batch id.
- **The decision**: what the driver commits, as offset metadata of group ``P.commit`` (the
  *header*) and, when it does not fit the broker's 4,096 bytes of ``offset.metadata.max.bytes``,
  of the *chunk* groups ``P.commit.<sequence>.<k>``, written before the header. The header is
  the decision: until it is stored, the chunks mean nothing.

:mod:`aiokprod.spark.exactly_once` decides with them.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import re
import zlib
from collections.abc import Mapping, Sequence

from aiokprod.types import OffsetAndMetadata, PreparedTransaction, TopicPartition

__all__ = [
    "FORMAT",
    "MAX_METADATA_BYTES",
    "Decision",
    "RunToken",
    "TxnName",
    "batch_committed",
    "chunk_group",
    "decision_group",
    "latest_decision",
    "marker",
    "marker_group",
    "next_sequence",
    "parse_transactional_id",
    "query_tag",
    "run_register_id",
    "transactional_id",
]

#: The format tag that starts every marker and decision the sink writes.
FORMAT = "aiokprod-spark/2"
#: The broker's default ``offset.metadata.max.bytes``: the room one offset's metadata has.
MAX_METADATA_BYTES = 4096
#: Characters of a decision's body per chunk (a chunk's metadata stays below 4,096 bytes).
_CHUNK_CHARS = 4000
#: Lost partitions a header lists by number (the count is always there).
_LISTED_LOST = 64


# --- the run register ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class RunToken:
    """The run register's producer id and epoch while a run is open.

    Attributes:
        producer_id: the register's producer id.
        epoch: its epoch.
    """

    producer_id: int
    epoch: int

    @property
    def tag(self) -> str:
        """The run's part of a batch job's transactional ids: ``r<pid hex>e<epoch hex>``."""
        return f"r{self.producer_id:x}e{self.epoch:x}"

    def __str__(self) -> str:
        return f"{self.producer_id}.{self.epoch}"

    @classmethod
    def parse(cls, text: str) -> RunToken | None:
        """``"<pid>.<epoch>"`` back to a token; None if it is not one."""
        match = re.fullmatch(r"(\d+)\.(\d+)", text)
        return None if match is None else cls(int(match[1]), int(match[2]))


def run_register_id(prefix: str) -> str:
    """The transactional id whose epoch is the run token: ``<prefix>-run``."""
    return f"{prefix}-run"


# --- transactional ids ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class TxnName:
    """What a transactional id of the sink says: run (batch jobs), partition, attempt."""

    run_tag: str | None
    partition: int
    attempt: int | None


def transactional_id(prefix: str, partition: int, attempt: int, run: RunToken | None) -> str:
    """The transactional id of a task attempt (see the module's names)."""
    if run is None:
        return f"{prefix}-{partition}.{attempt}"
    return f"{prefix}-{run.tag}-{partition}.{attempt}"


_NUMBER = r"(0|[1-9][0-9]*)"
_ID = re.compile(rf"(?:(r[0-9a-f]+e[0-9a-f]+)-)?{_NUMBER}(?:\.{_NUMBER})?", re.ASCII)


def parse_transactional_id(prefix: str, txn_id: str) -> TxnName | None:
    """What ``txn_id`` names, or None if it is not an id of this prefix's tasks.

    Also recognises the ids of format 1 (``<prefix>-<partition>``, before run registers and
    per-attempt ids), so that what an older version left open is found and ended. The ids
    of a prefix that merely starts with ``prefix`` are not this prefix's: ``P-3-1.0`` is
    partition 1 of prefix ``P-3``, never anything of ``P``.
    """
    if not txn_id.startswith(prefix + "-"):
        return None
    match = _ID.fullmatch(txn_id[len(prefix) + 1 :])
    if match is None:
        return None
    run_tag, partition, attempt = match.groups()
    if run_tag is not None and attempt is None:
        return None
    return TxnName(run_tag, int(partition), None if attempt is None else int(attempt))


# --- markers (streaming) ------------------------------------------------------------------


def query_tag(query_id: str) -> str:
    """A streaming query's short name in group names and decisions (a hash of its id)."""
    return hashlib.sha256(query_id.encode()).hexdigest()[:12]


def marker_group(prefix: str, query_id: str, partition: int) -> str:
    """The group that holds partition ``partition``'s marker for streaming query ``query_id``.

    One per query: a query started on the prefix with a new checkpoint (a new id) never
    reads, or overwrites, another query's markers.
    """
    return f"{prefix}-{partition}.{query_tag(query_id)}.marker"


def marker(query_id: str, batch_id: int) -> OffsetAndMetadata:
    """The marker a streaming task commits inside its transaction."""
    return OffsetAndMetadata(batch_id, f"{FORMAT} query={query_id}")


def batch_committed(
    offsets: Mapping[TopicPartition, OffsetAndMetadata], query_id: str, batch_id: int
) -> bool:
    """Whether a partition's marker group says micro-batch ``batch_id`` of ``query_id`` committed.

    Any entry of the group counts (the marker's topic is the topic of the partition's first
    row, which may differ between micro-batches); a marker of another query never does.
    """
    expected = marker(query_id, batch_id)
    return any(value == expected for value in offsets.values())


# --- the driver's decision ----------------------------------------------------------------


def decision_group(prefix: str) -> str:
    """The group whose offsets hold the decisions' headers."""
    return f"{prefix}.commit"


def chunk_group(prefix: str, sequence: int, index: int) -> str:
    """The group holding chunk ``index`` (from 1) of the decision stored as ``sequence``."""
    return f"{prefix}.commit.{sequence}.{index}"


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """The driver's commit decision for one batch job or micro-batch.

    Attributes:
        run: the run token the tasks wrote under.
        batch_id: the micro-batch, or None for a batch job.
        transactions: every transaction the driver commits, by Spark partition.
        done: every transaction was committed or found lost: nothing is left to complete.
        lost: how many decided partitions were found lost (aborted before their commit).
        lost_partitions: the first of them (up to 64).
        query: a micro-batch's query (its tag: a hash of the query id), else "".
        partitions: how many Spark partitions the write had (0: not recorded).
    """

    run: RunToken
    batch_id: int | None
    transactions: Mapping[int, PreparedTransaction]
    done: bool = False
    lost: int = 0
    lost_partitions: tuple[int, ...] = ()
    query: str = ""
    partitions: int = 0

    def finished(self, lost: Sequence[int] = ()) -> Decision:
        """The same decision, marked done (with the partitions found lost)."""
        listed = tuple(sorted(lost)[:_LISTED_LOST])
        return dataclasses.replace(self, done=True, lost=len(lost), lost_partitions=listed)

    def encode(self) -> list[str]:
        """The decision as offset metadata: the header, then its chunks (often none)."""
        protocols = {t.protocol for t in self.transactions.values()} or {2}
        body = _encode_transactions(self.transactions)
        lost = ",".join(str(p) for p in self.lost_partitions) or "-"
        head = (
            f"{FORMAT} run={self.run} batch={'-' if self.batch_id is None else self.batch_id} "
            f"state={'done' if self.done else 'commit'} tv={max(protocols)} "
            f"n={len(self.transactions)} lost={self.lost}:{lost} "
            f"q={self.query or '-'} parts={self.partitions} "
            f"crc={zlib.crc32(body.encode()):08x}"
        )
        inline = f"{head} chunks=0 txns={body}"
        if len(inline.encode()) <= MAX_METADATA_BYTES:
            return [inline]
        pieces = [body[i : i + _CHUNK_CHARS] for i in range(0, len(body), _CHUNK_CHARS)]
        chunks = [f"{FORMAT} chunk {k}/{len(pieces)} {p}" for k, p in enumerate(pieces, 1)]
        return [f"{head} chunks={len(pieces)} txns=", *chunks]

    @staticmethod
    def chunks_of(header: str) -> int | None:
        """How many chunks a header needs (0: inline); None if it is not a header."""
        match = _HEADER.fullmatch(header)
        return None if match is None else int(match["chunks"])

    @classmethod
    def decode(cls, prefix: str, header: str, chunks: Sequence[str] = ()) -> Decision | None:
        """A decision from its header and chunks; None if it is not (whole) one of ours."""
        match = _HEADER.fullmatch(header)
        run = None if match is None else RunToken.parse(match["run"])
        if match is None or run is None:
            return None
        count = int(match["chunks"])
        if len(chunks) != count:
            return None
        body = match["txns"]
        for k, chunk in enumerate(chunks, 1):
            found = re.fullmatch(rf"{re.escape(FORMAT)} chunk {k}/{count} ([A-Za-z0-9_-]*)", chunk)
            if found is None:
                return None
            body += found[1]
        if f"{zlib.crc32(body.encode()):08x}" != match["crc"]:
            return None
        batch = None if match["batch"] == "-" else int(match["batch"])
        try:
            txns = _decode_transactions(body, prefix, int(match["tv"]), batch, run)
        except ValueError:
            return None
        if len(txns) != int(match["n"]):
            return None
        listed = () if match["listed"] == "-" else tuple(int(p) for p in match["listed"].split(","))
        query = "" if match["q"] == "-" else match["q"]
        done = match["state"] == "done"
        return cls(run, batch, txns, done, int(match["lost"]), listed, query, int(match["parts"]))


_HEADER = re.compile(
    re.escape(FORMAT)
    + r" run=(?P<run>\d+\.\d+) batch=(?P<batch>-|\d+) state=(?P<state>commit|done)"
    r" tv=(?P<tv>[12]) n=(?P<n>\d+) lost=(?P<lost>\d+):(?P<listed>-|\d+(?:,\d+)*)"
    r" q=(?P<q>-|[0-9a-f]+) parts=(?P<parts>\d+) crc=(?P<crc>[0-9a-f]{8})"
    r" chunks=(?P<chunks>\d+) txns=(?P<txns>[A-Za-z0-9_-]*)"
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
    """(partition, attempt, producer id, epoch) as deltas in varints, base64url, no padding.

    Producer ids of one run come from the same blocks (deltas of a byte or two): about 4
    bytes a partition, so 10,000 partitions take about 55 KB in 14 chunks.
    """
    out = bytearray()
    last_partition = -1
    last_pid = 0
    for partition in sorted(txns):
        txn = txns[partition]
        _varint(out, partition - last_partition - 1)
        _varint(out, _attempt_of(txn.transactional_id))
        _varint(out, _zigzag(txn.producer_id - last_pid))
        _varint(out, txn.producer_epoch)
        last_partition, last_pid = partition, txn.producer_id
    return base64.urlsafe_b64encode(bytes(out)).decode().rstrip("=")


def _attempt_of(txn_id: str) -> int:
    attempt = txn_id.rsplit(".", 1)[-1]
    if not attempt.isdigit():
        raise ValueError(f"not an attempt's transactional id: {txn_id!r}")
    return int(attempt)


def _decode_transactions(
    body: str, prefix: str, protocol: int, batch_id: int | None, run: RunToken
) -> dict[int, PreparedTransaction]:
    data = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    txns: dict[int, PreparedTransaction] = {}
    at = 0
    last_partition, last_pid = -1, 0
    scope = run if batch_id is None else None  # a batch job's ids carry its run
    while at < len(data):
        gap, at = _read_varint(data, at)
        attempt, at = _read_varint(data, at)
        delta, at = _read_varint(data, at)
        epoch, at = _read_varint(data, at)
        partition = last_partition + gap + 1
        pid = last_pid + _unzigzag(delta)
        tid = transactional_id(prefix, partition, attempt, scope)
        txns[partition] = PreparedTransaction(tid, pid, epoch, protocol)
        last_partition, last_pid = partition, pid
    return txns


def latest_decision(
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> tuple[int, TopicPartition, str] | None:
    """The newest decision header in the decision group: (its sequence, where, the header).

    Headers are stored with a sequence as the offset (milliseconds, strictly increasing per
    prefix), against partition 0 of a topic the sink wrote to; the highest is the newest.
    """
    best: tuple[int, TopicPartition, str] | None = None
    for tp, value in offsets.items():
        if Decision.chunks_of(value.metadata) is None:
            continue
        if best is None or value.offset > best[0]:
            best = (value.offset, tp, value.metadata)
    return best


def next_sequence(now_ms: int, latest: int | None) -> int:
    """The sequence of a new decision: now, or one past the newest if the clock is behind."""
    return now_ms if latest is None or now_ms > latest else latest + 1
