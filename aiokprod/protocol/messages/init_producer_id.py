"""InitProducerId (key 22): a producer id and epoch for idempotent or transactional sends."""

from __future__ import annotations

from dataclasses import dataclass

from aiokprod.protocol.schema import Int16, Int32, Int64, NullableString, Struct, kfield

NO_TRANSACTION_TIMEOUT_MS = 2**31 - 1


@dataclass(kw_only=True, slots=True)
class InitProducerIdRequest(Struct):
    """InitProducerId request; an idempotent producer sends no transactional id."""

    transactional_id: str | None = kfield(NullableString)
    transaction_timeout_ms: int = kfield(Int32, default=NO_TRANSACTION_TIMEOUT_MS)
    producer_id: int = kfield(Int64, versions="3+", default=-1)
    producer_epoch: int = kfield(Int16, versions="3+", default=-1)


@dataclass(kw_only=True, slots=True)
class InitProducerIdResponse(Struct):
    """InitProducerId response."""

    throttle_time_ms: int = kfield(Int32)
    error_code: int = kfield(Int16)
    producer_id: int = kfield(Int64, default=-1)
    producer_epoch: int = kfield(Int16)
