"""TLS for broker connections, and the typed errors of the security handshakes.

:func:`build_ssl_context` turns the ``ssl_*`` options into an :class:`ssl.SSLContext`: the
system's trusted CAs (or ``ssl_cafile``), certificate *and* host name verification on
(``ssl_check_hostname=False`` keeps the chain check and drops only the name check, like the
Java client's empty ``ssl.endpoint.identification.algorithm``), TLS 1.2 at least, and a client
certificate for mutual TLS when ``ssl_certfile`` is given. A ready ``ssl_context`` is used
as it is.

The error classes extend :class:`aiokprod.errors.AuthenticationError`, so one ``except``
catches every credential or handshake failure, and each says what went wrong without ever
quoting a secret.
"""

from __future__ import annotations

import ssl

from aiokprod.config import ProducerConfig
from aiokprod.errors import (
    ConfigError,
    OAuthTokenError,
    SaslAuthenticationError,
    SaslMechanismError,
    SaslUnknownUserError,
    SaslWrongPasswordError,
    SslAuthenticationError,
    SslCertificateError,
)

__all__ = [
    "OAuthTokenError",
    "SaslAuthenticationError",
    "SaslMechanismError",
    "SaslUnknownUserError",
    "SaslWrongPasswordError",
    "SslAuthenticationError",
    "SslCertificateError",
    "build_ssl_context",
]


def _no_password() -> str:
    return ""


def build_ssl_context(config: ProducerConfig) -> ssl.SSLContext | None:
    """The TLS context for ``config``, or None when its security protocol has no TLS.

    Raises:
        ConfigError: a CA, certificate or key file cannot be loaded (a wrong ``ssl_password``
            included); the message names the option, never the password.
    """
    if config.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    if config.ssl_context is not None:
        return config.ssl_context
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=config.ssl_cafile)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl_cafile {config.ssl_cafile!r} cannot be loaded: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = config.ssl_check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if config.ssl_certfile is not None:
        secret = config.ssl_password
        try:
            context.load_cert_chain(
                config.ssl_certfile,
                config.ssl_keyfile,
                # Without a callable, OpenSSL would prompt on the terminal for the passphrase
                # of an encrypted key (and hang a service); an empty one fails instead.
                password=secret.reveal if secret is not None else _no_password,
            )
        except ssl.SSLError as exc:
            hint = " (wrong ssl_password?)" if secret is not None else " (encrypted key?)"
            raise ConfigError(
                f"ssl_certfile/ssl_keyfile cannot be loaded{hint}: {exc.reason or exc}"
            ) from None
        except OSError as exc:
            raise ConfigError(f"ssl_certfile/ssl_keyfile cannot be read: {exc}") from None
    return context
