"""TLS for broker connections, and the typed errors of the security handshakes.

:func:`build_ssl_context` turns the ``ssl_*`` options into an :class:`ssl.SSLContext`: the
system's trusted CAs (or ``ssl_cafile``), certificate *and* host name verification on
(``ssl_check_hostname=False`` keeps the chain check and drops only the name check, like the
Java client's empty ``ssl.endpoint.identification.algorithm``), TLS 1.2 at least, and a client
certificate for mutual TLS when ``ssl_certfile`` is given. A ready ``ssl_context`` is used
as it is.

The error classes extend :class:`aiokprod.errors.AuthenticationError`, so one ``except``
catches every credential or handshake failure, and each says what went wrong without ever
quoting a secret. The Kerberos ones (SASL/GSSAPI, :mod:`aiokprod.net.kerberos`) are defined
here; an unreachable KDC is a retriable connection error instead, like an unreachable broker.
"""

from __future__ import annotations

import ssl

from aiokprod.config import ProducerConfig
from aiokprod.errors import (
    ConfigError,
    KafkaConnectionError,
    OAuthTokenError,
    SaslAuthenticationError,
    SaslMechanismError,
    SaslUnknownUserError,
    SaslWrongPasswordError,
    SslAuthenticationError,
    SslCertificateError,
)

__all__ = [
    "KerberosClockSkewError",
    "KerberosCredentialsError",
    "KerberosError",
    "KerberosKdcUnreachableError",
    "KerberosKeytabError",
    "KerberosPrincipalNotFoundError",
    "OAuthTokenError",
    "SaslAuthenticationError",
    "SaslMechanismError",
    "SaslUnknownUserError",
    "SaslWrongPasswordError",
    "SslAuthenticationError",
    "SslCertificateError",
    "build_ssl_context",
]


# --- Kerberos (SASL/GSSAPI) -------------------------------------------------------------------


class KerberosError(SaslAuthenticationError):
    """Kerberos (SASL/GSSAPI) authentication failed; the message says what to fix.

    Also what a broker's rejection of a Kerberos ticket raises. ``username`` is the client
    principal (when known).

    Attributes:
        service_principal: the broker principal asked for (``kafka/host@REALM``), if known.
        host: the host it was made from (the host connected to, or
            ``sasl_kerberos_domain_name``).
        gss_message: the GSS library's own words, if it failed.
    """

    def __init__(
        self,
        message: str,
        *,
        username: str | None = None,
        service_principal: str | None = None,
        host: str | None = None,
        gss_message: str | None = None,
        broker_message: str | None = None,
    ) -> None:
        super().__init__(
            message, mechanism="GSSAPI", username=username, broker_message=broker_message
        )
        self.service_principal = service_principal
        self.host = host
        self.gss_message = gss_message

    def __reduce__(self) -> tuple[object, ...]:
        fields = (self.username, self.service_principal, self.host, self.gss_message)
        return (_rebuild_kerberos_error, (type(self), str(self), *fields, self.broker_message))


def _rebuild_kerberos_error(
    cls: type[KerberosError],
    message: str,
    username: str | None,
    service_principal: str | None,
    host: str | None,
    gss_message: str | None,
    broker_message: str | None,
) -> KerberosError:
    return cls(
        message,
        username=username,
        service_principal=service_principal,
        host=host,
        gss_message=gss_message,
        broker_message=broker_message,
    )


class KerberosCredentialsError(KerberosError):
    """No usable Kerberos credentials: none, expired ones, or a principal the KDC refuses.

    The message says what to do: ``kinit``, or a keytab for a service.
    """


class KerberosPrincipalNotFoundError(KerberosError):
    """The KDC has no such broker (service) principal: see ``service_principal`` and ``host``."""


class KerberosClockSkewError(KerberosError):
    """This machine's clock and the KDC's (or the broker's) differ by more than allowed."""


class KerberosKeytabError(KerberosError):
    """The keytab does not match the KDC: a stale key, or no key for the principal."""


class KerberosKdcUnreachableError(KafkaConnectionError):
    """No KDC of the realm answered; retried like an unreachable broker."""


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
