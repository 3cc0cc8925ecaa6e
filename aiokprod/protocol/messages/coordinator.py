"""FindCoordinator (key 10): which broker coordinates a transactional id (or a group)."""

from __future__ import annotations

from dataclasses import dataclass

from aiokprod.protocol.schema import (
    ArrayOf,
    Int8,
    Int16,
    Int32,
    NullableString,
    String,
    Struct,
    kfield,
)

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


@dataclass(kw_only=True, slots=True)
class FindCoordinatorRequest(Struct):
    """FindCoordinator request: one key up to v3, a batch of keys from v4."""

    key: str = kfield(String, versions="0-3")
    key_type: int = kfield(Int8, versions="1+")
    coordinator_keys: list[str] = kfield(ArrayOf(String), versions="4+")


@dataclass(kw_only=True, slots=True)
class Coordinator(Struct):
    """The coordinator for one key (v4+)."""

    key: str = kfield(String)
    node_id: int = kfield(Int32)
    host: str = kfield(String)
    port: int = kfield(Int32)
    error_code: int = kfield(Int16)
    error_message: str | None = kfield(NullableString)


@dataclass(kw_only=True, slots=True)
class FindCoordinatorResponse(Struct):
    """FindCoordinator response."""

    throttle_time_ms: int = kfield(Int32, versions="1+")
    error_code: int = kfield(Int16, versions="0-3")
    error_message: str | None = kfield(NullableString, versions="1-3")
    node_id: int = kfield(Int32, versions="0-3")
    host: str = kfield(String, versions="0-3")
    port: int = kfield(Int32, versions="0-3")
    coordinators: list[Coordinator] = kfield(ArrayOf(Coordinator), versions="4+")
