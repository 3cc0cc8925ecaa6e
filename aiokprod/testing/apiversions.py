"""A minimal, blocking ApiVersions client over a plain socket: what a broker speaks.

The version-matrix tests record, per broker release, the version range of every API and the
finalized features (``metadata.version``, ``transaction.version``...). Like
:mod:`aiokprod.testing.metadata`, this is deliberately independent of aiokprod's own protocol
code, so that a bug there cannot hide itself in the report.

ApiVersions v3 is spoken (every broker from 2.4 on): a flexible request (header v2, compact
strings, tagged fields) whose response nevertheless uses response header v0 (KIP-511), with
the supported and finalized features as tagged fields 0 and 2 of the body.
"""

from __future__ import annotations

import itertools
import socket
import struct
from dataclasses import dataclass, field

from aiokprod.testing.errors import LocalKafkaError
from aiokprod.testing.metadata import _recv_exactly

_API_VERSIONS_KEY = 18
_VERSION = 3
_CLIENT_ID = b"aiokprod-testing"
_MAX_RESPONSE = 1024 * 1024
_correlation_ids = itertools.count(1)


@dataclass(frozen=True)
class BrokerApiVersions:
    """One broker's ApiVersions answer.

    Attributes:
        api_ranges: api key -> (min version, max version).
        supported_features: feature name -> (min level, max level) the broker can run.
        finalized_features: feature name -> the level finalized for the cluster
            (e.g. ``{"metadata.version": 21, "transaction.version": 2}``).
    """

    api_ranges: dict[int, tuple[int, int]]
    supported_features: dict[str, tuple[int, int]] = field(default_factory=dict)
    finalized_features: dict[str, int] = field(default_factory=dict)

    def max_version(self, api_key: int) -> int | None:
        """The highest version of ``api_key`` the broker speaks, or None if it has none."""
        found = self.api_ranges.get(api_key)
        return found[1] if found is not None else None


def encode_api_versions_request(correlation_id: int, software_version: str = "0") -> bytes:
    """A size-prefixed ApiVersions v3 request."""
    header = struct.pack(">hhih", _API_VERSIONS_KEY, _VERSION, correlation_id, len(_CLIENT_ID))
    header += _CLIENT_ID + b"\x00"  # client id (a non-compact string) and empty tag buffer
    name = b"aiokprod-testing"
    version = software_version.encode()
    body = (
        _uvarint(len(name) + 1) + name + _uvarint(len(version) + 1) + version + b"\x00"
    )  # compact strings, then the empty tag buffer
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def decode_api_versions_response(payload: bytes, correlation_id: int) -> BrokerApiVersions:
    """Decode an ApiVersions v3 response (header v0 + body).

    Raises:
        LocalKafkaError: wrong correlation id, an error code, or a malformed response.
    """
    reader = _Reader(payload)
    try:
        got = reader.int32()
        if got != correlation_id:
            raise LocalKafkaError(f"ApiVersions: correlation id {got}, expected {correlation_id}")
        error = reader.int16()
        if error:
            raise LocalKafkaError(f"ApiVersions failed with error code {error}")
        ranges: dict[int, tuple[int, int]] = {}
        for _ in range(reader.uvarint() - 1):
            key, low, high = reader.int16(), reader.int16(), reader.int16()
            reader.skip_tags()
            ranges[key] = (low, high)
        reader.int32()  # throttle_time_ms
        supported: dict[str, tuple[int, int]] = {}
        finalized: dict[str, int] = {}
        for _ in range(reader.uvarint()):
            tag, size = reader.uvarint(), reader.uvarint()
            if tag == 0:
                for _ in range(reader.uvarint() - 1):
                    name = reader.compact_string()
                    supported[name] = (reader.int16(), reader.int16())
                    reader.skip_tags()
            elif tag == 2:
                for _ in range(reader.uvarint() - 1):
                    name = reader.compact_string()
                    max_level = reader.int16()
                    reader.int16()  # min_version_level
                    reader.skip_tags()
                    finalized[name] = max_level
            else:
                reader.take(size)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise LocalKafkaError(f"malformed ApiVersions response: {exc}") from exc
    return BrokerApiVersions(ranges, supported, finalized)


def fetch_api_versions(host: str, port: int, *, timeout: float = 10.0) -> BrokerApiVersions:
    """Ask one broker which API versions and features it supports.

    Raises:
        LocalKafkaError: the broker is unreachable or answered nonsense.
    """
    correlation_id = next(_correlation_ids) & 0x7FFFFFFF
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(encode_api_versions_request(correlation_id))
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            if not 0 < size <= _MAX_RESPONSE:
                raise LocalKafkaError(f"ApiVersions response of implausible size {size}")
            payload = _recv_exactly(sock, size)
    except OSError as exc:
        raise LocalKafkaError(f"ApiVersions request to {host}:{port} failed: {exc}") from exc
    return decode_api_versions_response(payload, correlation_id)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def take(self, size: int) -> bytes:
        end = self._pos + size
        if size < 0 or end > len(self._data):
            raise IndexError(f"need {size} bytes at {self._pos}, have {len(self._data)}")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def int16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            byte = self.take(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise IndexError("varint too long")

    def compact_string(self) -> str:
        return self.take(self.uvarint() - 1).decode("utf-8")

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())
