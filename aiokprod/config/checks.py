"""Checks across options: what one option's own check cannot see.

Each function takes ``values`` (the options given, already through their own checks; None
values removed) and ``default`` (the table's default of an option). It raises
:class:`~aiokprod.errors.ConfigError`, or adjusts ``values`` where the Java client adjusts a
default that conflicts with an explicit option.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from aiokprod.errors import ConfigError, KerberosUnavailableError
from aiokprod.protocol.compression import codec_for_name

#: The broker keeps the last five batches per producer and partition for duplicate checks.
MAX_IN_FLIGHT_WITH_IDEMPOTENCE = 5
_SSL_FILE_OPTIONS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
_KERBEROS_OPTIONS = (
    "sasl_kerberos_service_name",
    "sasl_kerberos_domain_name",
    "sasl_kerberos_principal",
    "sasl_kerberos_keytab",
)
_SASL_OPTIONS = (
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
    "sasl_oauth_token_provider",
    *_KERBEROS_OPTIONS,
)

Default = Callable[[str], Any]


def check_all(values: dict[str, Any], default: Default) -> None:
    """Every check across options, in order."""
    check_idempotence(values, default)
    check_timeouts(values, default)
    check_compression_level(values)
    check_tls(values)
    check_sasl(values)


def check_idempotence(values: dict[str, Any], default: Default) -> None:
    """Idempotence needs acks=all, retries and at most five requests in flight.

    Like the Java client: when the user asked for it, a conflict is an error; when it is only
    the default, the conflicting option wins and idempotence is turned off.
    """

    def get(name: str) -> Any:
        return values[name] if name in values else default(name)

    conflicts = []
    if get("acks") != -1:
        conflicts.append(f"acks={get('acks')} (needs 'all')")
    if get("retries") == 0:
        conflicts.append("retries=0")
    in_flight = get("max_in_flight_requests_per_connection")
    if in_flight > MAX_IN_FLIGHT_WITH_IDEMPOTENCE:
        conflicts.append(f"max_in_flight_requests_per_connection={in_flight} (at most 5)")
    if values.get("transactional_id") is not None:
        if values.get("enable_idempotence") is False:
            raise ConfigError("transactional_id needs idempotence: enable_idempotence=False")
        if conflicts:
            raise ConfigError(
                "transactional_id needs idempotence, which conflicts with " + ", ".join(conflicts)
            )
        values["enable_idempotence"] = True
    if conflicts:
        if values.get("enable_idempotence") is True:
            raise ConfigError("enable_idempotence=True conflicts with " + ", ".join(conflicts))
        values["enable_idempotence"] = False


def check_timeouts(values: dict[str, Any], default: Default) -> None:
    """The delivery timeout covers linger and one request; backoff maxima cover the start.

    An explicit value that breaks the rule is an error; a default is raised to fit.
    """

    def get(name: str) -> Any:
        return values[name] if name in values else default(name)

    floor = get("linger_ms") + get("request_timeout_ms")
    if get("delivery_timeout_ms") < floor:
        if "delivery_timeout_ms" in values:
            raise ConfigError(
                f"delivery_timeout_ms ({get('delivery_timeout_ms')}) must be at least "
                f"linger_ms + request_timeout_ms ({floor})"
            )
        values["delivery_timeout_ms"] = floor
    for kind in ("retry", "reconnect"):
        start, most = f"{kind}_backoff_ms", f"{kind}_backoff_max_ms"
        if get(most) < get(start):
            if most in values:
                raise ConfigError(f"{most} must not be less than {start}")
            values[most] = get(start)


def check_compression_level(values: dict[str, Any]) -> None:
    """The level fits the codec (the check is the codec's own, in protocol/compression.py)."""
    if values.get("compression_level") is not None:
        codec_for_name(values.get("compression_type", "none")).check_level(
            values["compression_level"]
        )


def check_tls(values: dict[str, Any]) -> None:
    """TLS options need a TLS protocol, and a ready context excludes the file options."""
    protocol = values.get("security_protocol", "PLAINTEXT")
    tls_set = [n for n in ("ssl_context", *_SSL_FILE_OPTIONS, "ssl_password") if values.get(n)]
    if values.get("ssl_check_hostname") is False:
        tls_set.append("ssl_check_hostname")
    if tls_set and protocol not in ("SSL", "SASL_SSL"):
        raise ConfigError(
            f"{', '.join(tls_set)} set but security_protocol is {protocol!r} "
            "(use 'SSL' or 'SASL_SSL' for TLS)"
        )
    if values.get("ssl_context") is not None:
        clash = [n for n in (*_SSL_FILE_OPTIONS, "ssl_password") if values.get(n)]
        if clash:
            raise ConfigError(
                f"ssl_context cannot be combined with {', '.join(clash)}: "
                "load them into the context yourself"
            )
        if "ssl_check_hostname" in values:
            raise ConfigError("ssl_check_hostname does not apply to a ready ssl_context")
    if values.get("ssl_keyfile") and not values.get("ssl_certfile"):
        raise ConfigError("ssl_keyfile needs ssl_certfile (the client certificate)")
    if values.get("ssl_password") and not values.get("ssl_certfile"):
        raise ConfigError("ssl_password decrypts the client key: it needs ssl_certfile")


def check_sasl(values: dict[str, Any]) -> None:
    """SASL options need a SASL protocol, and each mechanism its own credentials."""
    protocol = values.get("security_protocol", "PLAINTEXT")
    uses_sasl = protocol.startswith("SASL_")
    sasl_set = [n for n in _SASL_OPTIONS if values.get(n) is not None]
    if sasl_set and not uses_sasl:
        raise ConfigError(
            f"{', '.join(sasl_set)} set but security_protocol is {protocol!r} "
            "(use 'SASL_PLAINTEXT' or 'SASL_SSL' for SASL)"
        )
    if not uses_sasl:
        return
    mechanism = values.get("sasl_mechanism", "PLAIN")
    if mechanism == "GSSAPI":
        check_gssapi(values)
        return
    kerberos = [n for n in _KERBEROS_OPTIONS if n in values]
    if kerberos:
        raise ConfigError(f"{', '.join(kerberos)} apply to sasl_mechanism GSSAPI only")
    if mechanism == "OAUTHBEARER":
        if values.get("sasl_oauth_token_provider") is None:
            raise ConfigError("sasl_mechanism OAUTHBEARER needs sasl_oauth_token_provider")
        stray = [n for n in ("sasl_plain_username", "sasl_plain_password") if n in values]
        if stray:
            raise ConfigError(f"{', '.join(stray)} do not apply to OAUTHBEARER")
        return
    missing = [n for n in ("sasl_plain_username", "sasl_plain_password") if not values.get(n)]
    if missing:
        raise ConfigError(f"sasl_mechanism {mechanism} needs {' and '.join(missing)}")
    if values.get("sasl_oauth_token_provider") is not None:
        raise ConfigError(f"sasl_oauth_token_provider does not apply to {mechanism}")


def check_gssapi(values: dict[str, Any]) -> None:
    """GSSAPI takes no password or token, and needs the ``gssapi`` package (an extra)."""
    stray = [
        n
        for n in ("sasl_plain_username", "sasl_plain_password", "sasl_oauth_token_provider")
        if n in values
    ]
    if stray:
        raise ConfigError(
            f"{', '.join(stray)} do not apply to GSSAPI: Kerberos takes its credentials from "
            "the ticket cache (kinit) or a keytab (sasl_kerberos_keytab)"
        )
    if importlib.util.find_spec("gssapi") is None:
        raise KerberosUnavailableError(
            "sasl_mechanism GSSAPI needs the 'gssapi' package (MIT Kerberos bindings): "
            "pip install 'aiokprod[gssapi]' (it builds against libkrb5-dev; Debian/Ubuntu: "
            "apt-get install libkrb5-dev)"
        )
