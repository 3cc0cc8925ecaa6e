"""SASL authentication of a fresh broker connection: PLAIN, SCRAM-SHA-256/512, OAUTHBEARER, GSSAPI.

The :class:`SaslAuthenticator` is the connection's ``Authenticator`` hook: it runs right after
ApiVersions, inside the connection's setup timeout, and does what the Java client's
``SaslClientAuthenticator`` does:

1. SaslHandshake v1 with the mechanism. ``UNSUPPORTED_SASL_MECHANISM`` becomes
   :class:`~aiokprod.net.security.SaslMechanismError` listing what the broker enables.
2. SaslAuthenticate (v2 when the broker has it, v1 at least) carrying the mechanism's tokens
   until the exchange completes; a rejection becomes a
   :class:`~aiokprod.net.security.SaslAuthenticationError` subclass at once (no retry of the
   same credentials on this connection).
3. The last response's ``session_lifetime_ms`` (KIP-368; non-zero when the broker sets
   ``connections.max.reauth.ms`` or the credential, e.g. an OAuth token, expires) is handed to
   the connection, which retires itself at 85-95 % of it so the pool opens a new,
   freshly authenticated one (see :meth:`BrokerConnection.set_session_lifetime`).

SCRAM follows RFC 5802 as Kafka implements it: the password is used as UTF-8 bytes (Kafka
does no SASLprep), the user name escapes ``=`` and ``,``, the nonce comes from ``secrets``,
iterations must lie in Kafka's range (4096-16384), and the server's signature is verified.
The salted password (PBKDF2) is computed in a worker thread and cached per salt and
iteration count, so many connections cost one derivation and the loop never stalls on it.

GSSAPI (Kerberos) is :mod:`aiokprod.net.kerberos`: its exchange runs the GSS library in worker
threads and is handed the SaslAuthenticate round trip (:meth:`SaslAuthenticator.exchange`).

Secrets stay out of logs and messages: nothing here logs tokens or passwords, errors name the
mechanism and the user only, and broker messages are scrubbed of the secret before use.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiokprod.config import ProducerConfig, Secret, TokenProvider
from aiokprod.errors import AuthenticationError, UnsupportedVersionError, error_for_code
from aiokprod.logs import get_logger
from aiokprod.net.kerberos import KerberosLogin, KerberosSettings
from aiokprod.net.security import (
    OAuthTokenError,
    SaslAuthenticationError,
    SaslMechanismError,
    SaslUnknownUserError,
    SaslWrongPasswordError,
)
from aiokprod.protocol.api import SASL_AUTHENTICATE, SASL_HANDSHAKE
from aiokprod.protocol.messages.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

if TYPE_CHECKING:
    from aiokprod.net.connection import BrokerConnection

log = get_logger("aiokprod.net.sasl")

UNSUPPORTED_SASL_MECHANISM = 33
#: Kafka's ScramMechanism bounds; a broker asking for more would make us burn CPU.
SCRAM_MIN_ITERATIONS = 4096
SCRAM_MAX_ITERATIONS = 16384
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_GS2_HEADER = "n,,"
_CHANNEL_BINDING = base64.b64encode(_GS2_HEADER.encode()).decode()  # "biws"


# --- SCRAM (sans-IO) ------------------------------------------------------------------------


def scram_escape(username: str) -> str:
    """A user name as SCRAM sends it: ``=`` becomes ``=3D`` and ``,`` becomes ``=2C``."""
    return username.replace("=", "=3D").replace(",", "=2C")


@dataclass(frozen=True, slots=True)
class ServerFirst:
    """The parsed server-first message."""

    nonce: str
    salt: bytes
    iterations: int
    raw: str


class ScramClient:
    """One SCRAM exchange (RFC 5802) for one connection; no I/O.

    Args:
        mechanism: ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``.
        username: the user.
        nonce: the client nonce (tests pass one; default: 32 random bytes, base64url).
    """

    def __init__(self, mechanism: str, username: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self.hash_name = _SCRAM_HASHES[mechanism]
        self.username = username
        self.client_nonce = nonce or secrets.token_urlsafe(32)
        self.client_first_bare = f"n={scram_escape(username)},r={self.client_nonce}"
        self._server_signature: bytes | None = None

    def client_first(self) -> bytes:
        """The client-first message."""
        return (_GS2_HEADER + self.client_first_bare).encode()

    def parse_server_first(self, data: bytes) -> ServerFirst:
        """Check the server-first message.

        Raises:
            SaslAuthenticationError: malformed, a nonce that does not extend ours, or an
                iteration count outside Kafka's range.
        """
        try:
            raw = data.decode()
            attrs = _scram_attributes(raw)
            nonce = attrs["r"]
            salt = base64.b64decode(attrs["s"], validate=True)
            iterations = int(attrs["i"])
        except (UnicodeDecodeError, KeyError, ValueError) as exc:
            raise self._error(f"malformed server-first message ({type(exc).__name__})") from None
        if "m" in attrs:
            raise self._error("the server asked for a SCRAM extension this client lacks")
        if not nonce.startswith(self.client_nonce) or len(nonce) == len(self.client_nonce):
            raise self._error("the server nonce does not extend the client nonce")
        if not SCRAM_MIN_ITERATIONS <= iterations <= SCRAM_MAX_ITERATIONS:
            raise self._error(
                f"iteration count {iterations} outside "
                f"{SCRAM_MIN_ITERATIONS}..{SCRAM_MAX_ITERATIONS}"
            )
        return ServerFirst(nonce, salt, iterations, raw)

    def client_final(self, server_first: ServerFirst, salted_password: bytes) -> bytes:
        """The client-final message (with the proof); remembers the expected server signature."""
        without_proof = f"c={_CHANNEL_BINDING},r={server_first.nonce}"
        auth_message = ",".join((self.client_first_bare, server_first.raw, without_proof)).encode()
        client_key = self._hmac(salted_password, b"Client Key")
        stored_key = hashlib.new(self.hash_name, client_key).digest()
        client_signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        server_key = self._hmac(salted_password, b"Server Key")
        self._server_signature = self._hmac(server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, data: bytes) -> None:
        """Check the server's signature: proof that the broker knows the credentials too.

        Raises:
            SaslAuthenticationError: an ``e=`` error or a wrong signature.
        """
        try:
            attrs = _scram_attributes(data.decode())
        except (UnicodeDecodeError, ValueError):
            raise self._error("malformed server-final message") from None
        if "e" in attrs:
            raise self._error(f"the server reported {attrs['e']!r}")
        expected = self._server_signature
        try:
            signature = base64.b64decode(attrs["v"], validate=True)
        except (KeyError, ValueError):
            raise self._error("the server-final message has no valid signature") from None
        if expected is None or not hmac.compare_digest(signature, expected):
            raise self._error("the server signature is wrong (is this the real broker?)")

    def salted_password(self, password: Secret, server_first: ServerFirst) -> bytes:
        """PBKDF2 of the password (``Hi()`` in RFC 5802); CPU-heavy, run it off the loop."""
        return hashlib.pbkdf2_hmac(
            self.hash_name,
            password.reveal().encode(),
            server_first.salt,
            server_first.iterations,
        )

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def _error(self, what: str) -> SaslAuthenticationError:
        return SaslAuthenticationError(
            f"SASL {self.mechanism} authentication of user {self.username!r} failed: {what}",
            mechanism=self.mechanism,
            username=self.username,
        )


def _scram_attributes(message: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ValueError("not a SCRAM attribute list")
        attrs.setdefault(key, value)
    return attrs


# --- other mechanisms (sans-IO) -------------------------------------------------------------


def plain_token(username: str, password: Secret) -> bytes:
    """PLAIN: ``authzid NUL authcid NUL password`` with an empty authzid (RFC 4616)."""
    return b"\x00" + username.encode() + b"\x00" + password.reveal().encode()


def oauthbearer_initial_response(token: str) -> bytes:
    r"""OAUTHBEARER client-first message (RFC 7628): ``n,,\x01auth=Bearer <token>\x01\x01``."""
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


# --- the authenticator ----------------------------------------------------------------------


class SaslAuthenticator:
    """Authenticates each new connection with one mechanism and one set of credentials.

    Args:
        mechanism: ``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512`` or ``OAUTHBEARER``.
        username: PLAIN/SCRAM user.
        password: PLAIN/SCRAM password.
        token_provider: OAUTHBEARER: awaited on every connection for the current token.
        kerberos: GSSAPI: the ``sasl_kerberos_*`` options (default: all defaults).
    """

    def __init__(
        self,
        mechanism: str,
        *,
        username: str | None = None,
        password: Secret | None = None,
        token_provider: TokenProvider | None = None,
        kerberos: KerberosSettings | None = None,
    ) -> None:
        if mechanism in ("PLAIN", *_SCRAM_HASHES) and (username is None or password is None):
            raise ValueError(f"{mechanism} needs a username and a password")
        if mechanism == "OAUTHBEARER" and token_provider is None:
            raise ValueError("OAUTHBEARER needs a token provider")
        if mechanism not in ("PLAIN", "OAUTHBEARER", "GSSAPI", *_SCRAM_HASHES):
            raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
        self._kerberos: KerberosLogin | None = None
        if mechanism == "GSSAPI":
            # Imports the gssapi package: KerberosUnavailableError when it is missing.
            kerberos = kerberos or KerberosSettings()
            self._kerberos = KerberosLogin(kerberos)
            username = kerberos.principal
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self._token_provider = token_provider
        self._last_token: str | None = None
        self._salted: dict[tuple[bytes, int], bytes] = {}

    def __repr__(self) -> str:
        user = f" user={self.username!r}" if self.username is not None else ""
        return f"<SaslAuthenticator {self.mechanism}{user}>"

    async def __call__(self, conn: BrokerConnection) -> None:
        """Run the handshake and the exchange on ``conn``.

        Raises:
            AuthenticationError: a subclass saying what failed (see aiokprod.net.security).
            UnsupportedVersionError: the broker lacks SaslHandshake v1 or SaslAuthenticate.
        """
        await self._handshake(conn)
        mechanism = self.mechanism
        if mechanism == "PLAIN":
            username, password = self._credentials()
            response = await self._authenticate(
                conn, plain_token(username, password), stage="plain"
            )
        elif mechanism == "OAUTHBEARER":
            response = await self._oauthbearer(conn)
        elif self._kerberos is not None:
            response = await self._kerberos.authenticate(conn, self.exchange)
        else:
            response = await self._scram(conn)
        conn.set_session_lifetime(response.session_lifetime_ms)
        log.debug(
            "authenticated",
            node=conn.node_id,
            mechanism=mechanism,
            user=self.username,
            session_lifetime_ms=response.session_lifetime_ms,
        )

    def _credentials(self) -> tuple[str, Secret]:
        if self.username is None or self._password is None:  # pragma: no cover - __init__
            raise AuthenticationError(f"{self.mechanism} needs a username and a password")
        return self.username, self._password

    async def _handshake(self, conn: BrokerConnection) -> None:
        protocol = conn.protocol
        if not protocol.supports(SASL_AUTHENTICATE) or protocol.version_for(SASL_HANDSHAKE) < 1:
            raise UnsupportedVersionError(
                f"node {conn.node_id} lacks SaslHandshake v1 / SaslAuthenticate (Kafka < 1.0)"
            )
        response = await conn.handshake_request(SaslHandshakeRequest(mechanism=self.mechanism))
        if not isinstance(response, SaslHandshakeResponse):  # pragma: no cover
            raise AuthenticationError("SaslHandshake answered with another message")
        if response.error_code == UNSUPPORTED_SASL_MECHANISM:
            enabled = tuple(response.mechanisms)
            hint = ""
            if self.mechanism == "GSSAPI":
                hint = (
                    " (a broker offers GSSAPI with it in the listener's sasl.enabled.mechanisms "
                    "and a Krb5LoginModule entry in its sasl.jaas.config)"
                )
            raise SaslMechanismError(
                f"node {conn.node_id} ({conn.host}:{conn.port}) does not enable SASL mechanism "
                f"{self.mechanism} on this listener; it offers {', '.join(enabled) or 'none'}"
                f"{hint}",
                enabled,
            )
        if response.error_code:
            error = error_for_code(response.error_code)
            raise AuthenticationError(
                f"SaslHandshake for {self.mechanism} refused by node {conn.node_id}: {error}"
            )

    async def exchange(self, conn: BrokerConnection, token: bytes) -> SaslAuthenticateResponse:
        """One SaslAuthenticate round trip; the response, whatever its error code."""
        response = await conn.handshake_request(SaslAuthenticateRequest(auth_bytes=token))
        if not isinstance(response, SaslAuthenticateResponse):  # pragma: no cover
            raise AuthenticationError("SaslAuthenticate answered with another message")
        return response

    async def _authenticate(
        self, conn: BrokerConnection, token: bytes, *, stage: str
    ) -> SaslAuthenticateResponse:
        response = await self.exchange(conn, token)
        if response.error_code:
            raise self._rejected(conn, response, stage)
        return response

    def _rejected(
        self, conn: BrokerConnection, response: SaslAuthenticateResponse, stage: str
    ) -> AuthenticationError:
        broker_message = self._scrub(response.error_message)
        name = error_for_code(response.error_code).name
        who = f"user {self.username!r}" if self.username is not None else "the token"
        where = f"node {conn.node_id} ({conn.host}:{conn.port})"
        detail = f"{name}: {broker_message}" if broker_message else name
        cls: type[SaslAuthenticationError] = SaslAuthenticationError
        if stage == "client-first":
            cls = SaslUnknownUserError
            what = "the broker has no credentials for this user and mechanism"
        elif stage == "client-final":
            cls = SaslWrongPasswordError
            what = "wrong password (the broker rejected the SCRAM proof)"
        elif stage == "plain":
            what = "invalid username or password (PLAIN does not say which)"
        else:
            what = "the token was rejected"
        return cls(
            f"SASL {self.mechanism} authentication of {who} to {where} failed: {what} [{detail}]",
            mechanism=self.mechanism,
            username=self.username,
            broker_message=broker_message,
        )

    async def _scram(self, conn: BrokerConnection) -> SaslAuthenticateResponse:
        username, password = self._credentials()
        client = ScramClient(self.mechanism, username)
        first = await self._authenticate(conn, client.client_first(), stage="client-first")
        server_first = client.parse_server_first(first.auth_bytes)
        key = (server_first.salt, server_first.iterations)
        salted = self._salted.get(key)
        if salted is None:
            salted = await asyncio.to_thread(client.salted_password, password, server_first)
            self._salted = {key: salted}  # one entry: the broker's current salt
        final = await self._authenticate(
            conn, client.client_final(server_first, salted), stage="client-final"
        )
        client.verify_server_final(final.auth_bytes)
        return final

    async def _oauthbearer(self, conn: BrokerConnection) -> SaslAuthenticateResponse:
        token = await self._fetch_token()
        response = await self._authenticate(
            conn, oauthbearer_initial_response(token), stage="token"
        )
        if response.auth_bytes:
            # RFC 7628 error: the server sends a JSON status, the client answers %x01, and
            # the server then fails the exchange with its error message.
            status = _oauth_status(response.auth_bytes)
            final = await conn.handshake_request(SaslAuthenticateRequest(auth_bytes=b"\x01"))
            if isinstance(final, SaslAuthenticateResponse) and final.error_code:
                raise self._rejected(conn, final, "token")
            raise SaslAuthenticationError(
                f"SASL OAUTHBEARER authentication to node {conn.node_id} failed: "
                f"the token was rejected (status {status!r})",
                mechanism=self.mechanism,
            )
        return response

    async def _fetch_token(self) -> str:
        provider = self._token_provider
        if provider is None:  # pragma: no cover - checked in __init__
            raise OAuthTokenError("no OAUTHBEARER token provider")
        try:
            pending = provider()
            if not isinstance(pending, Awaitable):
                raise TypeError("the provider must be an async function")
            token = await pending
        except (asyncio.CancelledError, AuthenticationError):
            raise
        except Exception as exc:
            # The cause is kept for debugging; our message never quotes the provider's.
            raise OAuthTokenError(
                f"the OAUTHBEARER token provider failed with {type(exc).__name__}"
            ) from exc
        if not isinstance(token, str) or not token or "\x01" in token:
            raise OAuthTokenError(
                "the OAUTHBEARER token provider must return a non-empty str without \\x01, "
                f"got a {type(token).__name__}"
            )
        self._last_token = token
        return token

    def _scrub(self, text: str | None) -> str | None:
        # Defence in depth: a broker message must never carry our secret into an error.
        if not text:
            return text
        for secret in (
            self._password.reveal() if self._password is not None else None,
            self._last_token,
        ):
            if secret:
                text = text.replace(secret, "***")
        return text


def _oauth_status(data: bytes) -> str:
    try:
        status = json.loads(data.decode()).get("status")
    except (UnicodeDecodeError, ValueError, AttributeError):
        return "unparsable error"
    return str(status)


def sasl_authenticator(config: ProducerConfig) -> SaslAuthenticator | None:
    """The authenticator ``config`` asks for, or None for a protocol without SASL."""
    if not config.security_protocol.startswith("SASL_"):
        return None
    kerberos = None
    if config.sasl_mechanism == "GSSAPI":
        kerberos = KerberosSettings(
            service_name=config.sasl_kerberos_service_name,
            domain_name=config.sasl_kerberos_domain_name,
            principal=config.sasl_kerberos_principal,
            keytab=config.sasl_kerberos_keytab,
        )
    return SaslAuthenticator(
        config.sasl_mechanism,
        username=config.sasl_plain_username,
        password=config.sasl_plain_password,
        token_provider=config.sasl_oauth_token_provider,
        kerberos=kerberos,
    )
