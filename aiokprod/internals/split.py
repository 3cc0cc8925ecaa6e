"""Splitting a batch the broker refused as too large (MESSAGE_TOO_LARGE).

The Java client's ``ProducerBatch.split``: the records are read back from the refused batch
and appended, in order, to new batches (the *pieces*), which take the batch's place at the
head of its partition's queue and are sent again. The broker did not append the refused
batch, so nothing is duplicated; with idempotence the pieces take over its sequence range
(``IdempotenceState.on_split``), so nothing leaves a gap either.

The records are read from the closed batch's bytes (decompressed when the producer
compresses): once a batch is closed the builder's buffer is gone, and keeping it for every
batch would cost memory and time on the hot path for an event that is rare. A split costs one
decode and one re-encode of the batch, once.

How small the pieces are: Java's first cut is ``batch.size``. A multi-record batch is never
larger than ``batch_size`` before compression, so when the topic's ``max.message.bytes`` is
below ``batch_size`` that first cut is the refused batch again; Java halves only pieces
refused again (KAFKA-8350, fixed in apache/kafka#20358; before, they were refused until the
delivery timeout). Here every cut is at most ``batch_size`` *and* half the refused batch, so
every refusal makes the pieces smaller, down to one record (a lone record that is still too
large then fails with ``RecordTooLargeError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiokprod.errors import RecordTooLargeError
from aiokprod.internals.batch import ProducerBatch
from aiokprod.protocol.compression import DECOMPRESSORS
from aiokprod.protocol.record_reader import read_record_batch
from aiokprod.protocol.records import RecordBatchBuilder, encode_headers

if TYPE_CHECKING:  # the accumulator imports this module
    from aiokprod.internals.accumulator import RecordAccumulator
    from aiokprod.internals.idempotence import IdempotenceState


def should_split(
    batch: ProducerBatch,
    error: BaseException,
    now_ms: int,
    delivery_timeout_ms: int,
    *,
    forced: bool = False,
) -> bool:
    """Whether a refused batch is split rather than failed (Java: ``Sender.completeBatch``).

    MESSAGE_TOO_LARGE for a batch of several records on its first attempt (``attempts``
    0; a piece of a split batch keeps that count): the broker appended none of them, and
    smaller batches may pass. A batch sent before may have been appended by that earlier
    attempt (its answer lost, or a broker with a larger limit then): splitting it would write
    those records twice (with idempotence the pieces' sequences are not the batch's, so the
    broker cannot tell), so it fails with the broker's error, as before. Java splits it
    anyway. A split is not a retry (``retries`` is not consulted), but there is none once
    the delivery timeout has passed or the producer is stopping by force (``forced``): the
    records then fail with the broker's error, as a lone record does.
    """
    return (
        isinstance(error, RecordTooLargeError)
        and batch.record_count > 1
        and batch.attempts == 0
        and not forced
        and now_ms - batch.created_ms < delivery_timeout_ms
    )


def split_refused(
    batch: ProducerBatch,
    accumulator: RecordAccumulator,
    idempotence: IdempotenceState | None,
    now_ms: int,
) -> list[ProducerBatch]:
    """Split a refused batch and queue the pieces in its place; returns them.

    With idempotence the pieces take over its sequences first (so they queue in sequence
    order); then it leaves the accumulator, and its result follows the pieces'.
    """
    pieces = accumulator.split(batch, now_ms)
    if idempotence is not None and batch.has_sequence:
        idempotence.on_split(batch, pieces)
    accumulator.put_back_split(batch, pieces)
    batch.mark_split(pieces)
    return pieces


def split_limit(batch: ProducerBatch, batch_size: int, smallest: int | None) -> int:
    """Bytes per piece when ``batch`` is split: at most ``batch_size`` and half of it.

    ``smallest`` is the smallest cut made for its topic before (None: none yet); a refused
    batch is cut at least that small, since the broker refused bigger pieces before.
    """
    limit = min(batch_size, max(batch.close().uncompressed_size // 2, 1))
    return limit if smallest is None else min(limit, smallest)


def split_batch(
    batch: ProducerBatch,
    new_builder: Callable[[], RecordBatchBuilder],
    limit: int,
    now_ms: int,
) -> list[ProducerBatch]:
    """The records of closed ``batch`` in new batches of at most ``limit`` bytes each.

    Each piece holds at least one record (a record larger than ``limit`` gets a piece of
    its own). The pieces keep the batch's creation time (so its delivery timeout), its
    attempts (a split is not a retry) and expedite flag; they are sealed (nothing more is
    appended to them), count as sent before (for the queue order of retries), may be sent
    at once, and share the batch's ``buffer_memory`` reservation between them.
    """
    records = read_record_batch(batch.close().data, DECOMPRESSORS).records
    builders: list[RecordBatchBuilder] = []
    builder: RecordBatchBuilder | None = None
    for record in records:
        headers = encode_headers(record.headers) if record.headers else None
        key, value, timestamp = record.key, record.value, record.timestamp
        if builder is None or builder.try_append(timestamp, key, value, headers, limit) < 0:
            builder = new_builder()
            builder.try_append(timestamp, key, value, headers, limit)
            builders.append(builder)
    pieces: list[ProducerBatch] = []
    reserved = batch.reserved_bytes
    for i, piece_builder in enumerate(builders):
        last = i == len(builders) - 1
        share = reserved if last else min(reserved, piece_builder.size_in_bytes)
        reserved -= share
        piece = ProducerBatch(batch.tp, piece_builder, batch.created_ms, share)
        piece.attempts = batch.attempts
        piece.drained_ms = batch.drained_ms
        piece.retry_at_ms = now_ms
        piece.is_full = True
        piece.expedite = batch.expedite
        piece.order = (*batch.order, i)
        pieces.append(piece)
    return pieces
