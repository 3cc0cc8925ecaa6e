"""The harness's own ApiVersions v3 codec, checked against hand-built bytes."""

from __future__ import annotations

import struct

import pytest

from aiokprod.testing.apiversions import (
    decode_api_versions_response,
    encode_api_versions_request,
)
from aiokprod.testing.errors import LocalKafkaError


def _compact(text: str) -> bytes:
    data = text.encode()
    return bytes([len(data) + 1]) + data


def _response(correlation_id: int, error: int = 0) -> bytes:
    ranges = [(0, 3, 11), (3, 0, 12), (18, 0, 4)]
    body = struct.pack(">ih", correlation_id, error) + bytes([len(ranges) + 1])
    for key, low, high in ranges:
        body += struct.pack(">hhh", key, low, high) + b"\x00"
    body += struct.pack(">i", 0)  # throttle
    supported = bytes([2]) + _compact("transaction.version") + struct.pack(">hh", 0, 2) + b"\x00"
    finalized = (
        bytes([3])
        + _compact("metadata.version")
        + struct.pack(">hh", 21, 21)
        + b"\x00"
        + _compact("transaction.version")
        + struct.pack(">hh", 2, 2)
        + b"\x00"
    )
    epoch = struct.pack(">q", 7)
    tags = [(0, supported), (1, epoch), (2, finalized), (3, b"\x00")]
    body += bytes([len(tags)])
    for tag, value in tags:
        body += bytes([tag, len(value)]) + value
    return body


def test_decode_ranges_and_features() -> None:
    got = decode_api_versions_response(_response(42), 42)
    assert got.api_ranges == {0: (3, 11), 3: (0, 12), 18: (0, 4)}
    assert got.max_version(0) == 11
    assert got.max_version(99) is None
    assert got.supported_features == {"transaction.version": (0, 2)}
    assert got.finalized_features == {"metadata.version": 21, "transaction.version": 2}


def test_decode_errors() -> None:
    with pytest.raises(LocalKafkaError, match="correlation id 42, expected 43"):
        decode_api_versions_response(_response(42), 43)
    with pytest.raises(LocalKafkaError, match="error code 35"):
        decode_api_versions_response(_response(1, error=35), 1)
    with pytest.raises(LocalKafkaError, match="malformed"):
        decode_api_versions_response(_response(1)[:20], 1)


def test_request_bytes() -> None:
    frame = encode_api_versions_request(5, "1.2")
    (size,) = struct.unpack(">i", frame[:4])
    assert size == len(frame) - 4
    assert struct.unpack(">hhih", frame[4:14]) == (18, 3, 5, len(b"aiokprod-testing"))
    assert frame.endswith(_compact("aiokprod-testing") + _compact("1.2") + b"\x00")
