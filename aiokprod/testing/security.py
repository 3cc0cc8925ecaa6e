"""TLS and SASL listeners for the local Kafka: the ``server.properties`` entries and users.

Pure functions (no I/O), unit-tested without Java. ``LocalKafka(security=True)`` adds, per node,
four client listeners next to PLAINTEXT (which stays the inter-broker listener, and CONTROLLER
stays plaintext too):

=================  ==============  ==========================================================
listener           protocol        what it checks
=================  ==============  ==========================================================
``SSL``            SSL             server certificate only (``ssl.client.auth=none``)
``MTLS``           SSL             mutual TLS (``ssl.client.auth=required``, test CA trusted)
``SASL_PLAINTEXT`` SASL_PLAINTEXT  PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER
``SASL_SSL``       SASL_SSL        the same mechanisms over TLS
=================  ==============  ==========================================================

PLAIN users are the ``user_<name>="<password>"`` options of the PLAIN login module; SCRAM
users are written into the metadata log when the node is formatted (``--add-scram``);
OAUTHBEARER uses Kafka's *unsecured* JWS validator (the default server callback handler for
the mechanism), so a test mints its own token with :func:`unsecured_jwt`.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from pathlib import Path

from aiokprod.testing.config import NodeAddress

#: Extra client listeners per node, in port order.
SECURITY_LISTENERS = ("SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: Test users (PLAIN and both SCRAM mechanisms): name -> password. Test values, not secrets.
SASL_USERS: Mapping[str, str] = {"alice": "alice-pw-3f9c61d2", "bob": "bob-pw-8e27a4c5"}
#: The broker's own principal when its OAUTHBEARER login module logs in.
_BROKER_OAUTH_SUBJECT = "broker"

_PROTOCOL_MAP = ",".join(
    [
        "CONTROLLER:PLAINTEXT",
        "PLAINTEXT:PLAINTEXT",
        "SSL:SSL",
        "MTLS:SSL",
        "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "SASL_SSL:SASL_SSL",
    ]
)


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def security_properties(
    node: NodeAddress,
    ports: Mapping[str, int],
    *,
    server_keystore: Path,
    ca_file: Path,
    users: Mapping[str, str] = SASL_USERS,
) -> dict[str, str]:
    """The entries that add the secure listeners to one node's ``server.properties``.

    Args:
        node: the node (its PLAINTEXT and CONTROLLER ports stay as they are).
        ports: listener name (each of :data:`SECURITY_LISTENERS`) -> port.
        server_keystore: PEM file with the broker's key and certificate chain.
        ca_file: PEM file with the CA that signs client certificates (for MTLS).
        users: PLAIN users, name -> password.
    """
    host = node.host
    client_listeners = [f"PLAINTEXT://{host}:{node.port}"] + [
        f"{name}://{host}:{ports[name]}" for name in SECURITY_LISTENERS
    ]
    props: dict[str, str] = {
        "listeners": ",".join([*client_listeners, f"CONTROLLER://{host}:{node.controller_port}"]),
        "advertised.listeners": ",".join(client_listeners),
        "listener.security.protocol.map": _PROTOCOL_MAP,
        "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        # TLS: one PEM keystore (key + chain) serves the SSL, MTLS and SASL_SSL listeners.
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(server_keystore),
        "ssl.client.auth": "none",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.truststore.type": "PEM",
        "listener.name.mtls.ssl.truststore.location": str(ca_file),
    }
    plain_users = " ".join(f"user_{name}={_jaas_quote(pw)}" for name, pw in users.items())
    for listener in ("sasl_plaintext", "sasl_ssl"):
        prefix = f"listener.name.{listener}"
        props[f"{prefix}.plain.sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
        )
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            props[f"{prefix}.{mechanism}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
        # The broker's login module needs a subject to mint its own (unused) token; client
        # tokens are checked by the default OAuthBearerUnsecuredValidatorCallbackHandler.
        props[f"{prefix}.oauthbearer.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f"unsecuredLoginStringClaim_sub={_jaas_quote(_BROKER_OAUTH_SUBJECT)};"
        )
    return props


def scram_format_args(users: Mapping[str, str] = SASL_USERS) -> list[str]:
    """``StorageTool format`` arguments that create the SCRAM credentials of ``users``."""
    args: list[str] = []
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        for name, password in users.items():
            args += ["--add-scram", f'{mechanism}=[name={name},password="{password}"]']
    return args


def unsecured_jwt(
    subject: str, lifetime_s: float = 3600.0, *, issued_at: float | None = None
) -> str:
    """An unsigned JWS (``alg: none``) that Kafka's unsecured OAUTHBEARER validator accepts.

    Args:
        subject: the ``sub`` claim (the principal).
        lifetime_s: seconds until ``exp``; the broker ends the session then (KIP-368).
        issued_at: the ``iat`` claim (default: now).
    """
    now = time.time() if issued_at is None else issued_at

    def part(obj: Mapping[str, object]) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    claims = {"sub": subject, "iat": round(now, 3), "exp": round(now + lifetime_s, 3)}
    return f"{part({'alg': 'none'})}.{part(claims)}."
