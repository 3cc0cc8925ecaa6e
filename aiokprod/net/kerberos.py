"""SASL/GSSAPI: Kerberos V5 in SaslAuthenticate (RFC 4752), every GSS call off the event loop.

:class:`KerberosLogin` is what :class:`~aiokprod.net.sasl.SaslAuthenticator` delegates the
GSSAPI mechanism to. Per new connection, after SaslHandshake:

1. In a worker thread: the credentials (the ticket cache, or ``sasl_kerberos_keytab`` through
   a private in-memory cache), a security context for ``service@host`` (a host-based service
   name: ``kafka@broker1.example.com``) and its first token, which may need the KDC (a
   ticket-granting ticket from the keytab, a service ticket).
2. The context tokens go back and forth in SaslAuthenticate until the context is complete
   (mutual authentication is required: the broker proves it holds the service key).
3. The security-layer negotiation of RFC 4752 section 3.1: the broker's wrapped offer is
   unwrapped, and the client answers "no security layer" (Kafka never uses one), a zero
   buffer size and the client principal as the authorization identity, wrapped.

The host of the service principal is the host the connection goes to, exactly as written: the
bootstrap address, then the host each broker advertises. aiokprod never asks DNS for another
name (the Java client reverse-resolves an IP address); ``sasl_kerberos_domain_name`` replaces
it for every broker, and krb5.conf's ``dns_canonicalize_hostname`` and ``rdns`` decide what the
Kerberos library itself does with the name (docs/security.md, "Kerberos").

The GSS calls block (file and KDC I/O inside MIT krb5), so they run in a small pool of threads
of their own (:data:`GSS_THREADS`), never in the loop's default executor that name resolution
shares; each login lets at most :data:`GSS_THREADS` calls be outstanding, so a dead KDC can
hold threads but cannot make work pile up. Each wait is inside the connection's
``socket_connection_setup_timeout_ms``, like every handshake step.

Errors from the GSS library become the typed errors of :mod:`aiokprod.net.security` with a
message naming the fix (:func:`explain`); an unreachable KDC is retriable like an unreachable
broker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import hashlib
import importlib
import os
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from aiokprod.errors import KafkaError, KerberosUnavailableError
from aiokprod.logs import get_logger
from aiokprod.net.kerberos_errors import explain, kerberos_reason
from aiokprod.net.security import KerberosError
from aiokprod.protocol.messages.sasl import SaslAuthenticateResponse

if TYPE_CHECKING:
    from aiokprod.net.connection import BrokerConnection

log = get_logger("aiokprod.net.kerberos")

#: Worker threads for GSS calls, shared by every producer of the process.
GSS_THREADS = 8
#: Context tokens a broker may send before the context must be complete (Kerberos: one).
MAX_CONTEXT_TOKENS = 4
#: RFC 4752 security layers: the bits of the first octet of both negotiation messages.
LAYER_NONE = 0x01
LAYER_INTEGRITY = 0x02
LAYER_CONFIDENTIALITY = 0x04

_T = TypeVar("_T")
Exchange = Callable[["BrokerConnection", bytes], Awaitable[SaslAuthenticateResponse]]

_executor: concurrent.futures.ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def load_gssapi() -> ModuleType:
    """The ``gssapi`` package (python-gssapi on MIT krb5).

    Raises:
        KerberosUnavailableError: it is not installed or cannot load its library.
    """
    try:
        return importlib.import_module("gssapi")
    except ImportError as exc:
        raise KerberosUnavailableError(
            "sasl_mechanism GSSAPI needs the 'gssapi' package: pip install 'aiokprod[gssapi]' "
            f"({exc})"
        ) from None


def gss_executor() -> concurrent.futures.ThreadPoolExecutor:
    """The threads GSS calls run in (created on first use)."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(
                GSS_THREADS, thread_name_prefix="aiokprod-gssapi"
            )
        return _executor


@dataclass(frozen=True, slots=True)
class KerberosSettings:
    """The ``sasl_kerberos_*`` options."""

    service_name: str = "kafka"
    domain_name: str | None = None
    principal: str | None = None
    keytab: str | None = None


@dataclass(frozen=True, slots=True)
class Target:
    """Whom one connection authenticates to, and why that name (for error messages).

    Attributes:
        service: ``service@host``, the GSS host-based service name asked for.
        principal: ``service/host``, the principal it stands for (the realm is the KDC's).
        host: the host part.
        origin: where the host came from, in words.
        node: ``node N (host:port)``.
    """

    service: str
    principal: str
    host: str
    origin: str
    node: str


def target_for(settings: KerberosSettings, node_id: int, host: str, port: int) -> Target:
    """The service principal for a connection to ``host:port`` (see the module docstring)."""
    if settings.domain_name:
        service_host, origin = settings.domain_name, "sasl_kerberos_domain_name"
    elif node_id < 0:
        service_host, origin = host, f"the bootstrap address {host}:{port}"
    else:
        service_host, origin = host, f"the address {host}:{port} node {node_id} advertises"
    name = settings.service_name
    return Target(
        service=f"{name}@{service_host}",
        principal=f"{name}/{service_host}",
        host=service_host,
        origin=origin,
        node=f"node {node_id} ({host}:{port})",
    )


def security_layer_reply(offer: bytes, authzid: str) -> bytes:
    """The client's answer to the broker's unwrapped security-layer offer (RFC 4752, 3.1).

    ``offer`` is one octet of offered layers and three of the largest message the broker
    accepts. The answer chooses no security layer (Kafka protects nothing with GSSAPI; TLS
    does that) with a zero buffer size, then the authorization identity (UTF-8).

    Raises:
        KerberosError: a malformed offer, or one without "no security layer".
    """
    if len(offer) != 4:
        raise KerberosError(
            f"the broker's security-layer offer has {len(offer)} bytes instead of 4 (RFC 4752)"
        )
    if not offer[0] & LAYER_NONE:
        raise KerberosError(
            f"the broker offers only SASL security layers (mask {offer[0]:#04x}), and Kafka "
            "clients use none: is this a Kafka broker?"
        )
    return bytes((LAYER_NONE, 0, 0, 0)) + authzid.encode()


def memory_ccache_name(keytab: str, principal: str | None) -> str:
    """A private in-memory credential cache for tickets from ``keytab`` in this process.

    Shared by the producers of the process that use the same keytab, principal and krb5.conf
    (one ticket-granting ticket, like the Java client's shared login), never written to disk,
    and never the user's default cache.
    """
    key = "\0".join((os.path.realpath(keytab), principal or "", os.environ.get("KRB5_CONFIG", "")))
    return "MEMORY:aiokprod-" + hashlib.sha256(key.encode()).hexdigest()[:24]


class GssContext:
    """One connection's GSS security context; its methods block (run them in a thread)."""

    def __init__(self, gssapi: ModuleType, settings: KerberosSettings, target: Target) -> None:
        self._gssapi = gssapi
        self.settings = settings
        self.target = target
        self.client: str | None = settings.principal
        self._context: Any = None

    def start(self) -> bytes:
        """Acquire the credentials and make the first context token (may ask the KDC)."""
        gssapi = self._gssapi
        settings = self.settings
        name = None
        if settings.principal:
            name = gssapi.Name(settings.principal, gssapi.NameType.kerberos_principal)
        store = None
        if settings.keytab:
            ccache = memory_ccache_name(settings.keytab, settings.principal)
            store = {"client_keytab": settings.keytab, "ccache": ccache}
        creds = gssapi.Credentials(
            name=name, usage="initiate", mechs=[gssapi.MechType.kerberos], store=store
        )
        self.client = str(creds.name)
        flags = gssapi.RequirementFlag
        self._context = gssapi.SecurityContext(
            name=gssapi.Name(self.target.service, gssapi.NameType.hostbased_service),
            creds=creds,
            usage="initiate",
            mech=gssapi.MechType.kerberos,
            flags=flags.mutual_authentication | flags.integrity,
        )
        token = self._context.step()
        return bytes(token or b"")

    @property
    def complete(self) -> bool:
        """Whether the context is established."""
        return bool(self._context is not None and self._context.complete)

    def step(self, token: bytes) -> bytes:
        """Process a broker token; the next token to send (empty when there is none)."""
        out = self._context.step(token)
        if self._context.complete:
            flags = self._gssapi.RequirementFlag
            if flags.mutual_authentication not in self._context.actual_flags:
                raise KerberosError(
                    f"{self.target.node} did not prove its identity (no mutual authentication)"
                )
        return bytes(out or b"")

    def negotiate(self, wrapped_offer: bytes) -> bytes:
        """Unwrap the broker's security-layer offer and wrap the answer (RFC 4752, 3.1)."""
        offer = self._context.unwrap(wrapped_offer).message
        reply = security_layer_reply(bytes(offer), self.client or "")
        return bytes(self._context.wrap(reply, False).message)


class KerberosLogin:
    """GSSAPI for the connections of one producer (or admin client).

    Args:
        settings: the ``sasl_kerberos_*`` options.
        gssapi: the ``gssapi`` module (default: imported now; raises
            :class:`~aiokprod.errors.KerberosUnavailableError` if missing).
    """

    def __init__(self, settings: KerberosSettings, gssapi: ModuleType | None = None) -> None:
        self.settings = settings
        self._gssapi = gssapi or load_gssapi()
        self._permits: asyncio.Semaphore | None = None
        self._first = asyncio.Lock()
        self._warm = False

    def __repr__(self) -> str:
        who = self.settings.principal or "the ticket cache's principal"
        return f"<KerberosLogin {who} service={self.settings.service_name!r}>"

    async def authenticate(
        self, conn: BrokerConnection, exchange: Exchange
    ) -> SaslAuthenticateResponse:
        """The GSSAPI exchange on ``conn`` (after SaslHandshake); the last response.

        Args:
            conn: the connection being opened.
            exchange: sends one SaslAuthenticate token, returns the response (any error
                code included).

        Raises:
            KerberosError: a subclass saying what to fix (see aiokprod.net.security).
            KerberosKdcUnreachableError: no KDC answered (retriable).
        """
        target = target_for(self.settings, conn.node_id, conn.host, conn.port)
        context = GssContext(self._gssapi, self.settings, target)
        token = await self._start(context)
        response = await self._send(conn, exchange, context, token)
        for _ in range(MAX_CONTEXT_TOKENS):
            if context.complete:
                break
            token = await self._in_thread(context, context.step, response.auth_bytes)
            response = await self._send(conn, exchange, context, token)
        else:
            raise KerberosError(
                f"{target.node} sent more than {MAX_CONTEXT_TOKENS} GSSAPI context tokens "
                "(Kerberos needs two): is this a Kafka broker?"
            )
        if not response.auth_bytes:  # the final context token had no answer: ask again
            response = await self._send(conn, exchange, context, b"")
        reply = await self._in_thread(context, context.negotiate, response.auth_bytes)
        response = await self._send(conn, exchange, context, reply)
        log.debug(
            "kerberos authenticated",
            node=conn.node_id,
            principal=context.client,
            service=target.principal,
        )
        return response

    async def _start(self, context: GssContext) -> bytes:
        # The first connection alone gets the tickets; the others then find them cached
        # instead of all asking the KDC for the same ticket at once.
        if self._warm:
            return await self._in_thread(context, context.start)
        async with self._first:
            token = await self._in_thread(context, context.start)
            self._warm = True
            return token

    async def _send(
        self, conn: BrokerConnection, exchange: Exchange, context: GssContext, token: bytes
    ) -> SaslAuthenticateResponse:
        response = await exchange(conn, token)
        if response.error_code:
            raise rejected(context, response.error_code, response.error_message)
        return response

    async def _in_thread(self, context: GssContext, fn: Callable[..., _T], *args: Any) -> _T:
        """Run a blocking GSS call in the GSS threads; its GSS errors become typed errors.

        If the wait is cancelled (the connection's setup timeout), the call runs on to its
        end in its thread, holding its permit until then.
        """
        if self._permits is None:
            self._permits = asyncio.Semaphore(GSS_THREADS)
        permits = self._permits
        await permits.acquire()
        loop = asyncio.get_running_loop()
        call = functools.partial(_explained, context, fn, *args)
        future = loop.run_in_executor(gss_executor(), call)

        def done(f: asyncio.Future[_T]) -> None:
            permits.release()
            if not f.cancelled():
                f.exception()  # retrieved: a cancelled waiter no longer looks at it

        future.add_done_callback(done)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            log.warning(
                "kerberos step cut short by socket_connection_setup_timeout_ms "
                "(is the KDC slow or unreachable?)",
                node=context.target.node,
                step=getattr(fn, "__name__", "?"),
            )
            raise


def _explained(context: GssContext, fn: Callable[..., _T], *args: Any) -> _T:
    """Call ``fn``; a GSS library error becomes the typed error that says what to fix."""
    try:
        return fn(*args)
    except KafkaError:
        raise
    except Exception as exc:
        gss_error = getattr(importlib.import_module("gssapi.exceptions"), "GSSError", None)
        if gss_error is None or not isinstance(exc, gss_error):
            raise
        raise explain(
            exc,
            target=context.target,
            client=context.client,
            keytab=context.settings.keytab,
        ) from None


def rejected(context: GssContext, error_code: int, broker_message: str | None) -> KerberosError:
    """The error for a broker that refused the exchange (SASL_AUTHENTICATION_FAILED...)."""
    target = context.target
    detail = f" [{broker_message}]" if broker_message else f" [error code {error_code}]"
    return KerberosError(
        f"{target.node} rejected the Kerberos ticket of {context.client or 'this client'} for "
        f"{target.principal}{detail}: the broker's keytab may not match the KDC (a key "
        "extracted again since), its clock may be off, or it runs as another principal "
        "(its log says which)",
        username=context.client,
        service_principal=target.principal,
        host=target.host,
        broker_message=broker_message,
    )


__all__ = [
    "GSS_THREADS",
    "GssContext",
    "KerberosLogin",
    "KerberosSettings",
    "Target",
    "kerberos_reason",
    "load_gssapi",
    "memory_ccache_name",
    "security_layer_reply",
    "target_for",
]
