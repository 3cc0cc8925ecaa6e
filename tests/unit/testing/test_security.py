"""The secure listeners' server.properties entries, SCRAM format arguments and test tokens."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from aiokprod.testing.config import NodeAddress, broker_properties, render_properties
from aiokprod.testing.security import (
    SASL_USERS,
    SECURITY_LISTENERS,
    scram_format_args,
    security_properties,
    unsecured_jwt,
)


def test_security_properties() -> None:
    node = NodeAddress(1, "127.0.0.1", 9092, 9093)
    ports = dict(zip(SECURITY_LISTENERS, (9094, 9095, 9096, 9097), strict=True))
    props = security_properties(
        node, ports, server_keystore=Path("/k/server.pem"), ca_file=Path("/k/ca.pem")
    )
    assert props["listeners"] == (
        "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9094,MTLS://127.0.0.1:9095,"
        "SASL_PLAINTEXT://127.0.0.1:9096,SASL_SSL://127.0.0.1:9097,CONTROLLER://127.0.0.1:9093"
    )
    assert "CONTROLLER" not in props["advertised.listeners"]
    assert "MTLS:SSL" in props["listener.security.protocol.map"]
    assert props["listener.name.mtls.ssl.client.auth"] == "required"
    assert props["ssl.keystore.type"] == "PEM"
    plain = props["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    for name, password in SASL_USERS.items():
        assert f'user_{name}="{password}"' in plain
    assert (
        "unsecuredLoginStringClaim_sub"
        in props["listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"]
    )
    # The overrides win over the defaults, and the file renders.
    merged = broker_properties(node, [node], Path("/d"), props)
    assert merged["listeners"] == props["listeners"]
    assert "inter.broker.listener.name=PLAINTEXT" in render_properties(merged)


def test_scram_format_args_cover_both_mechanisms() -> None:
    args = scram_format_args({"alice": "pw"})
    assert args == [
        "--add-scram", 'SCRAM-SHA-256=[name=alice,password="pw"]',
        "--add-scram", 'SCRAM-SHA-512=[name=alice,password="pw"]',
    ]  # fmt: skip


def test_unsecured_jwt_claims() -> None:
    token = unsecured_jwt("carol", 60, issued_at=1000.0)
    header, payload, signature = token.split(".")
    assert signature == ""

    def decode(part: str) -> dict[str, object]:
        return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))

    assert decode(header) == {"alg": "none"}
    assert decode(payload) == {"sub": "carol", "iat": 1000.0, "exp": 1060.0}
