"""SaslHandshake (key 17) and SaslAuthenticate (key 36)."""

from __future__ import annotations

from dataclasses import dataclass

from aiokprod.protocol.schema import (
    ArrayOf,
    Bytes,
    Int16,
    Int64,
    NullableString,
    String,
    Struct,
    kfield,
)


@dataclass(kw_only=True, slots=True)
class SaslHandshakeRequest(Struct):
    """SaslHandshake request: the mechanism the client wants (v1: tokens go in SaslAuthenticate)."""

    mechanism: str = kfield(String)


@dataclass(kw_only=True, slots=True)
class SaslHandshakeResponse(Struct):
    """SaslHandshake response: an error, and the mechanisms the broker enables."""

    error_code: int = kfield(Int16)
    mechanisms: list[str] = kfield(ArrayOf(String))


@dataclass(kw_only=True, slots=True)
class SaslAuthenticateRequest(Struct):
    """One SASL token from the client."""

    auth_bytes: bytes = kfield(Bytes)


@dataclass(kw_only=True, slots=True)
class SaslAuthenticateResponse(Struct):
    """One SASL token from the broker, or the authentication error."""

    error_code: int = kfield(Int16)
    error_message: str | None = kfield(NullableString)
    auth_bytes: bytes = kfield(Bytes)
    session_lifetime_ms: int = kfield(Int64, versions="1+")
