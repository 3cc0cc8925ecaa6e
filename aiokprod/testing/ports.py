"""Free loopback ports and TCP reachability checks.

Every node needs two ports (client and controller). They are picked by binding to port 0,
which lets the kernel choose; all sockets of one request are held open until every port is
known so that one call never returns the same port twice. There is an unavoidable window
between closing the socket and the JVM binding the port; the cluster retries a start that
fails with "Address already in use" with fresh ports.
"""

from __future__ import annotations

import contextlib
import socket

LOOPBACK = "127.0.0.1"


def pick_free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """Return ``count`` distinct TCP ports that are free on ``host`` right now.

    Args:
        count: how many ports; must be positive.
        host: the address to bind; loopback by default so nothing is exposed.

    Raises:
        ValueError: ``count`` is not positive.
    """
    if count <= 0:
        raise ValueError(f"count must be positive, got {count}")
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def port_accepts(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a TCP connection to ``host:port`` succeeds within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """Whether a listener could bind ``host:port`` now (as the JVM binds: SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True
