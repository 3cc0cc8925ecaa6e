"""Free-port picking and TCP reachability (loopback only, no broker)."""

from __future__ import annotations

import socket

import pytest

from aiokprod.testing.ports import pick_free_ports, port_accepts


def test_ports_are_distinct_and_bindable() -> None:
    ports = pick_free_ports(6)
    assert len(set(ports)) == 6
    for port in ports:
        assert 1024 <= port <= 65535
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_count_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        pick_free_ports(0)


def test_port_accepts_sees_listener_and_its_absence() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert port_accepts("127.0.0.1", port, timeout=2.0)
    assert not port_accepts("127.0.0.1", port, timeout=2.0)
