"""ApiVersions (key 18): which versions of each API the broker speaks.

Its response always travels with response header v0, even in flexible versions (KIP-511), and
a broker that does not know the version we asked for answers in the v0 layout with
UNSUPPORTED_VERSION and its own ApiVersions range (see ``protocol.negotiation``).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokprod.protocol.schema import (
    ArrayOf,
    Bool,
    Int16,
    Int32,
    Int64,
    String,
    Struct,
    kfield,
)


@dataclass(kw_only=True, slots=True)
class ApiVersionsRequest(Struct):
    """ApiVersions request; v3+ names the client software."""

    client_software_name: str = kfield(String, versions="3+")
    client_software_version: str = kfield(String, versions="3+")


@dataclass(kw_only=True, slots=True)
class ApiVersionRange(Struct):
    """One API the broker supports and its version range."""

    api_key: int = kfield(Int16)
    min_version: int = kfield(Int16)
    max_version: int = kfield(Int16)


@dataclass(kw_only=True, slots=True)
class SupportedFeature(Struct):
    """A feature the broker supports (tagged, v3+)."""

    name: str = kfield(String)
    min_version: int = kfield(Int16)
    max_version: int = kfield(Int16)


@dataclass(kw_only=True, slots=True)
class FinalizedFeature(Struct):
    """A feature level finalized for the cluster (tagged, v3+)."""

    name: str = kfield(String)
    max_version_level: int = kfield(Int16)
    min_version_level: int = kfield(Int16)


@dataclass(kw_only=True, slots=True)
class ApiVersionsResponse(Struct):
    """ApiVersions response."""

    error_code: int = kfield(Int16)
    api_keys: list[ApiVersionRange] = kfield(ArrayOf(ApiVersionRange))
    throttle_time_ms: int = kfield(Int32, versions="1+")
    supported_features: list[SupportedFeature] = kfield(
        ArrayOf(SupportedFeature), versions="3+", tag=0
    )
    finalized_features_epoch: int = kfield(Int64, versions="3+", tag=1, default=-1)
    finalized_features: list[FinalizedFeature] = kfield(
        ArrayOf(FinalizedFeature), versions="3+", tag=2
    )
    zk_migration_ready: bool = kfield(Bool, versions="3+", tag=3)
