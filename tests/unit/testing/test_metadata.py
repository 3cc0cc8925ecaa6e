"""The runner's tiny Metadata v5 client, against a fake broker on a loopback socket."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from aiokprod.testing.errors import LocalKafkaError
from aiokprod.testing.metadata import (
    decode_metadata_response,
    encode_metadata_request,
    fetch_metadata,
)


def _s(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _ints(values: list[int]) -> bytes:
    return struct.pack(">i", len(values)) + b"".join(struct.pack(">i", v) for v in values)


def _response(correlation_id: int) -> bytes:
    body = struct.pack(">ii", correlation_id, 0)  # correlation id, throttle
    body += struct.pack(">i", 2)
    body += struct.pack(">i", 1) + _s("127.0.0.1") + struct.pack(">i", 9092) + _s(None)
    body += struct.pack(">i", 2) + _s("127.0.0.1") + struct.pack(">i", 9093) + _s("rack-b")
    body += _s("cluster-x") + struct.pack(">i", 1)
    body += struct.pack(">i", 2)
    # topic "orders": two partitions, one without leader yet
    body += struct.pack(">h", 0) + _s("orders") + b"\x00" + struct.pack(">i", 2)
    body += struct.pack(">hii", 0, 0, 1) + _ints([1, 2]) + _ints([1, 2]) + _ints([])
    body += struct.pack(">hii", 5, 1, -1) + _ints([2, 1]) + _ints([]) + _ints([2])
    # unknown topic
    body += struct.pack(">h", 3) + _s("missing") + b"\x00" + struct.pack(">i", 0)
    return body


def test_request_layout() -> None:
    data = encode_metadata_request(7, ["a", "bc"], allow_auto_create=False)
    size, api_key, version, correlation = struct.unpack(">ihhi", data[:12])
    assert size == len(data) - 4
    assert (api_key, version, correlation) == (3, 5, 7)
    assert data.endswith(struct.pack(">i", 2) + _s("a") + _s("bc") + b"\x00")
    assert encode_metadata_request(1, None).endswith(struct.pack(">i", -1) + b"\x00")


def test_decode_response() -> None:
    metadata = decode_metadata_response(_response(42), 42)
    assert metadata.broker_ids == {1, 2}
    assert metadata.brokers[1].rack == "rack-b"
    assert metadata.cluster_id == "cluster-x"
    assert metadata.controller_id == 1
    orders = metadata.topics["orders"]
    assert orders.partitions[0].replicas == (1, 2)
    assert orders.partitions[1].offline_replicas == (2,)
    assert not orders.fully_led()  # partition 1 has no leader
    assert metadata.topics["missing"].error_code == 3
    assert not metadata.topics["missing"].fully_led()


def test_decode_rejects_wrong_correlation_and_truncation() -> None:
    with pytest.raises(LocalKafkaError, match="correlation"):
        decode_metadata_response(_response(1), 2)
    with pytest.raises(LocalKafkaError, match="truncated"):
        decode_metadata_response(_response(1)[:-3], 1)


def test_fetch_metadata_over_a_socket() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            (size,) = struct.unpack(">i", conn.recv(4))
            request = b""
            while len(request) < size:
                request += conn.recv(size - len(request))
            (correlation,) = struct.unpack(">i", request[4:8])
            payload = _response(correlation)
            conn.sendall(struct.pack(">i", len(payload)) + payload)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        metadata = fetch_metadata("127.0.0.1", port, ["orders"], timeout=5.0)
    finally:
        thread.join(5)
        server.close()
    assert metadata.broker_ids == {1, 2}


def test_fetch_metadata_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(LocalKafkaError, match="failed"):
        fetch_metadata("127.0.0.1", port, [], timeout=2.0)
