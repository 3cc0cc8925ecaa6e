"""SASL/GSSAPI without a KDC: the RFC 4752 exchange, the error mapping, the options.

The GSS library is replaced here by a scripted stand-in (:class:`FakeGssapi`) so that the order
of the messages and the thread hand-off can be checked without Kerberos; the real library
against a real KDC and broker is tests/integration/test_kerberos.py.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import pickle
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiokprod.config import ProducerConfig
from aiokprod.errors import ConfigError, KerberosUnavailableError
from aiokprod.net import kerberos
from aiokprod.net.kerberos import (
    LAYER_CONFIDENTIALITY,
    LAYER_INTEGRITY,
    LAYER_NONE,
    KerberosLogin,
    KerberosSettings,
    memory_ccache_name,
    security_layer_reply,
    target_for,
)
from aiokprod.net.kerberos_errors import (
    CC_NOTFOUND,
    FCC_NOFILE,
    GSS_S_CREDENTIALS_EXPIRED,
    GSS_S_NO_CRED,
    KDC_UNREACH,
    PREAUTH_FAILED,
    S_PRINCIPAL_UNKNOWN,
    SKEW,
    explain,
    kerberos_reason,
    signed32,
)
from aiokprod.net.sasl import SaslAuthenticator, sasl_authenticator
from aiokprod.net.security import (
    KerberosClockSkewError,
    KerberosCredentialsError,
    KerberosError,
    KerberosKdcUnreachableError,
    KerberosKeytabError,
    KerberosPrincipalNotFoundError,
)
from aiokprod.protocol.messages.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

# --- RFC 4752 security-layer negotiation ----------------------------------------------------


def test_security_layer_reply_chooses_no_layer_and_names_the_client() -> None:
    offer = bytes((LAYER_NONE | LAYER_INTEGRITY | LAYER_CONFIDENTIALITY, 0x01, 0x00, 0x00))
    assert security_layer_reply(offer, "svc@EXAMPLE.COM") == b"\x01\x00\x00\x00svc@EXAMPLE.COM"


@pytest.mark.parametrize(
    ("offer", "match"),
    [
        (bytes((LAYER_INTEGRITY, 0, 0x10, 0)), "only SASL security layers"),
        (b"\x01\x00\x00", "3 bytes instead of 4"),
        (b"", "0 bytes instead of 4"),
    ],
)
def test_security_layer_reply_refuses_what_kafka_cannot_do(offer: bytes, match: str) -> None:
    with pytest.raises(KerberosError, match=match):
        security_layer_reply(offer, "svc@EXAMPLE.COM")


# --- the service principal's host -----------------------------------------------------------


def test_the_host_connected_to_as_written() -> None:
    settings = KerberosSettings()
    boot = target_for(settings, -1, "10.0.0.7", 9092)
    assert (boot.service, boot.principal, boot.host) == (
        "kafka@10.0.0.7",
        "kafka/10.0.0.7",
        "10.0.0.7",
    )
    assert boot.origin == "the bootstrap address 10.0.0.7:9092"
    node = target_for(KerberosSettings(service_name="kfk"), 3, "b3.example.com", 9093)
    assert node.service == "kfk@b3.example.com"
    assert node.origin == "the address b3.example.com:9093 node 3 advertises"
    assert node.node == "node 3 (b3.example.com:9093)"


def test_domain_name_replaces_the_host_for_every_broker() -> None:
    settings = KerberosSettings(domain_name="kafka.example.com")
    for node_id, host in ((-1, "127.0.0.1"), (2, "b2.internal")):
        target = target_for(settings, node_id, host, 9092)
        assert target.service == "kafka@kafka.example.com"
        assert target.origin == "sasl_kerberos_domain_name"


def test_memory_ccache_per_keytab_principal_and_krb5_conf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keytab = str(tmp_path / "a.keytab")
    monkeypatch.setenv("KRB5_CONFIG", "/etc/one.conf")
    first = memory_ccache_name(keytab, "svc@R")
    assert first == memory_ccache_name(keytab, "svc@R")
    assert first.startswith("MEMORY:aiokprod-")
    assert "svc" not in first
    assert first != memory_ccache_name(keytab, "other@R")
    monkeypatch.setenv("KRB5_CONFIG", "/etc/two.conf")
    assert first != memory_ccache_name(keytab, "svc@R")


# --- what GSS errors mean -------------------------------------------------------------------


class Failure(Exception):
    """Stands for gssapi's GSSError: the codes and the library's message."""

    def __init__(self, major: int, minor: int, message: str) -> None:
        super().__init__(message)
        self.maj_code = major
        self.min_code = minor & 0xFFFFFFFF  # gssapi reports them unsigned
        self.message = message

    def gen_message(self) -> str:
        return f"Major ({self.maj_code}): GSS words, Minor ({self.min_code}): {self.message}"


TARGET = target_for(KerberosSettings(), -1, "127.0.0.1", 9094)
UNSPECIFIED = 13 << 16


@pytest.mark.parametrize(
    ("major", "minor", "message", "keytab", "error_type", "words"),
    [
        (UNSPECIFIED, S_PRINCIPAL_UNKNOWN,
         "Server kafka/127.0.0.1@EXAMPLE.COM not found in Kerberos database", None,
         KerberosPrincipalNotFoundError,
         ["kafka/127.0.0.1@EXAMPLE.COM", "the bootstrap address 127.0.0.1:9094",
          "sasl_kerberos_domain_name"]),
        (GSS_S_NO_CRED, CC_NOTFOUND, "No Kerberos credentials available", None,
         KerberosCredentialsError, ["kinit", "sasl_kerberos_keytab", "KRB5_CLIENT_KTNAME"]),
        (GSS_S_NO_CRED, FCC_NOFILE, "No credentials cache found", None,
         KerberosCredentialsError, ["kinit"]),
        (GSS_S_NO_CRED, FCC_NOFILE, "No credentials cache found", "/k/svc.keytab",
         KerberosKeytabError, ["keytab /k/svc.keytab holds no key for svc@R", "klist -k"]),
        (GSS_S_NO_CRED, PREAUTH_FAILED, "Preauthentication failed", "/k/svc.keytab",
         KerberosKeytabError, ["does not match the KDC", "extract the keytab again"]),
        (GSS_S_NO_CRED, SKEW, "Clock skew too great", "/k/svc.keytab",
         KerberosClockSkewError, ["clock", "NTP", "Clock skew too great"]),
        (GSS_S_CREDENTIALS_EXPIRED, 100002, "Success", None,
         KerberosCredentialsError, ["has expired", "kinit again"]),
        (UNSPECIFIED, 12345, "Something new", None, KerberosError, ["Something new"]),
    ],
)  # fmt: skip
def test_gss_failures_become_typed_errors_naming_the_fix(
    major: int,
    minor: int,
    message: str,
    keytab: str | None,
    error_type: type[KerberosError],
    words: list[str],
) -> None:
    error = explain(Failure(major, minor, message), target=TARGET, client="svc@R", keytab=keytab)
    assert type(error) is error_type
    for word in words:
        assert word in str(error), str(error)
    assert isinstance(error, KerberosError)
    assert error.username == "svc@R"
    assert error.mechanism == "GSSAPI"


def test_an_unreachable_kdc_is_retried_like_an_unreachable_broker() -> None:
    failure = Failure(GSS_S_NO_CRED, KDC_UNREACH, "Cannot contact any KDC for realm 'R'")
    error = explain(failure, target=TARGET, client=None, keytab=None)
    assert type(error) is KerberosKdcUnreachableError
    assert error.retriable
    assert "Cannot contact any KDC" in str(error)


def test_reason_is_the_kerberos_part_of_the_message() -> None:
    assert kerberos_reason(Failure(1, SKEW, "Clock skew too great")) == "Clock skew too great"
    expired = Failure(GSS_S_CREDENTIALS_EXPIRED, 100001, "Success")
    assert kerberos_reason(expired) == "GSS words"  # the major part when the minor says nothing
    assert signed32(SKEW & 0xFFFFFFFF) == SKEW
    assert signed32(5) == 5


def test_kerberos_errors_survive_copy_and_pickle() -> None:
    error = KerberosPrincipalNotFoundError(
        "no such principal", username="svc@R", service_principal="kafka/h@R", host="h",
        gss_message="Server kafka/h@R not found",
    )  # fmt: skip
    for clone in (copy.copy(error), pickle.loads(pickle.dumps(error))):
        assert type(clone) is KerberosPrincipalNotFoundError
        assert (clone.username, clone.service_principal, clone.host, clone.gss_message) == (
            "svc@R", "kafka/h@R", "h", "Server kafka/h@R not found",
        )  # fmt: skip
        assert str(clone) == "no such principal"


# --- the options ----------------------------------------------------------------------------

GSSAPI = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI"}
needs_gssapi = pytest.mark.skipif(
    importlib.util.find_spec("gssapi") is None, reason="the gssapi extra is not installed"
)


@needs_gssapi
def test_gssapi_options_and_defaults(tmp_path: Path) -> None:
    keytab = tmp_path / "svc.keytab"
    keytab.write_bytes(b"\x05\x02")
    config = ProducerConfig.from_options("b:9092", **GSSAPI)
    assert (config.sasl_kerberos_service_name, config.sasl_kerberos_domain_name) == ("kafka", None)
    config = ProducerConfig.from_options(
        "b:9092",
        **GSSAPI,
        sasl_kerberos_service_name="kfk",
        sasl_kerberos_domain_name="kafka.example.com",
        sasl_kerberos_principal="svc@EXAMPLE.COM",
        sasl_kerberos_keytab=keytab,
    )
    assert config.sasl_kerberos_keytab == str(keytab)
    auth = sasl_authenticator(config)
    assert isinstance(auth, SaslAuthenticator)
    assert auth.username == "svc@EXAMPLE.COM"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({**GSSAPI, "sasl_plain_username": "u", "sasl_plain_password": "p"},
         "do not apply to GSSAPI"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
          "sasl_plain_username": "u", "sasl_plain_password": "p",
          "sasl_kerberos_service_name": "kafka"}, "apply to sasl_mechanism GSSAPI only"),
        ({"sasl_kerberos_principal": "svc@R"}, "security_protocol is 'PLAINTEXT'"),
        ({**GSSAPI, "sasl_kerberos_keytab": "/no/such.keytab"}, "no such file"),
        ({**GSSAPI, "sasl_kerberos_domain_name": "kafka/h"}, "one principal component"),
        ({**GSSAPI, "sasl_kerberos_service_name": ""}, "non-empty"),
    ],
)  # fmt: skip
def test_bad_gssapi_options(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ProducerConfig.from_options("b:9092", **options)


def test_without_the_extra_construction_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "gssapi" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(KerberosUnavailableError, match=r"pip install 'aiokprod\[gssapi\]'"):
        ProducerConfig.from_options("b:9092", **GSSAPI)


# --- the exchange, with a scripted GSS library ----------------------------------------------


MUTUAL = 1


class FakeContext:
    """An initiator context: two tokens for mutual authentication, then wrap/unwrap."""

    def __init__(self, gss: FakeGssapi, name: Any, **kwargs: Any) -> None:
        self.gss = gss
        self.target = name.value
        self.complete = False
        self.actual_flags = {MUTUAL}
        gss.calls.append(("context", self.target, threading.current_thread().name))

    def step(self, token: bytes | None = None) -> bytes | None:
        self.gss.calls.append(("step", token, threading.current_thread().name))
        if token is None:
            return b"AP-REQ"
        assert token == b"AP-REP"
        self.complete = True
        return None

    def unwrap(self, data: bytes) -> Any:
        assert data.startswith(b"wrapped:")
        return types.SimpleNamespace(message=data[len(b"wrapped:") :])

    def wrap(self, data: bytes, encrypt: bool) -> Any:
        assert encrypt is False
        return types.SimpleNamespace(message=b"wrapped:" + data)


class FakeGssapi(types.SimpleNamespace):
    """The part of python-gssapi that aiokprod.net.kerberos uses."""

    def __init__(self) -> None:
        calls: list[tuple[Any, ...]] = []

        def name(value: str, kind: str) -> Any:
            return types.SimpleNamespace(value=value, kind=kind)

        def credentials(**kwargs: Any) -> Any:
            calls.append(("credentials", kwargs["store"], threading.current_thread().name))
            return types.SimpleNamespace(name="svc@EXAMPLE.COM")

        super().__init__(
            calls=calls,
            Name=name,
            Credentials=credentials,
            SecurityContext=lambda **kw: FakeContext(self, **kw),
            NameType=types.SimpleNamespace(
                kerberos_principal="principal", hostbased_service="hostbased"
            ),
            MechType=types.SimpleNamespace(kerberos="krb5"),
            RequirementFlag=types.SimpleNamespace(mutual_authentication=MUTUAL, integrity=2),
        )


class FakeConnection:
    node_id, host, port = 2, "b2.example.com", 9094

    def __init__(self, responses: list[Any]) -> None:
        self.responses = responses
        self.sent: list[Any] = []
        self.lifetime_ms: int | None = None
        self.protocol = types.SimpleNamespace(supports=lambda api: True, version_for=lambda api: 1)

    async def handshake_request(self, request: Any) -> Any:
        self.sent.append(request)
        return self.responses.pop(0)

    def set_session_lifetime(self, lifetime_ms: int) -> None:
        self.lifetime_ms = lifetime_ms


def answer(data: bytes = b"", *, error: int = 0, lifetime: int = 0) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(
        error_code=error,
        error_message="Authentication failed" if error else None,
        auth_bytes=data,
        session_lifetime_ms=lifetime,
    )


@pytest.fixture
def fake_gss(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGssapi]:
    gss = FakeGssapi()
    monkeypatch.setattr(kerberos, "load_gssapi", lambda: gss)
    return gss


async def test_rfc4752_exchange_in_gss_threads(fake_gss: FakeGssapi, tmp_path: Path) -> None:
    offer = b"wrapped:" + bytes((LAYER_NONE | LAYER_INTEGRITY, 0, 0x40, 0))
    conn = FakeConnection(
        [
            SaslHandshakeResponse(error_code=0, mechanisms=["GSSAPI"]),
            answer(b"AP-REP"),
            answer(offer),
            answer(lifetime=60_000),
        ]
    )
    settings = KerberosSettings(keytab=str(tmp_path / "svc.keytab"), principal="svc@EXAMPLE.COM")
    auth = SaslAuthenticator("GSSAPI", kerberos=settings)
    await auth(conn)  # type: ignore[arg-type]
    sent = conn.sent
    assert isinstance(sent[0], SaslHandshakeRequest)
    assert sent[0].mechanism == "GSSAPI"
    assert all(isinstance(r, SaslAuthenticateRequest) for r in sent[1:])
    assert [r.auth_bytes for r in sent[1:]] == [
        b"AP-REQ",  # the first context token
        b"",  # the context is complete after the broker's AP-REP: an empty response
        b"wrapped:\x01\x00\x00\x00svc@EXAMPLE.COM",  # no layer, no buffer, the authzid
    ]
    assert conn.lifetime_ms == 60_000
    kinds = [call[0] for call in fake_gss.calls]
    assert kinds == ["credentials", "context", "step", "step"]
    store = fake_gss.calls[0][1]
    assert store["client_keytab"] == settings.keytab
    assert store["ccache"].startswith("MEMORY:aiokprod-")
    assert fake_gss.calls[1][1] == "kafka@b2.example.com"
    # Every GSS call ran in the GSS threads, none on the event loop's thread.
    assert all(call[-1].startswith("aiokprod-gssapi") for call in fake_gss.calls)


async def test_a_broker_rejection_names_node_client_and_principal(fake_gss: FakeGssapi) -> None:
    conn = FakeConnection(
        [SaslHandshakeResponse(error_code=0, mechanisms=["GSSAPI"]), answer(error=58)]
    )
    auth = SaslAuthenticator("GSSAPI", kerberos=KerberosSettings(domain_name="kafka.example.com"))
    with pytest.raises(KerberosError) as info:
        await auth(conn)  # type: ignore[arg-type]
    text = str(info.value)
    assert "node 2 (b2.example.com:9094) rejected the Kerberos ticket of svc@EXAMPLE.COM" in text
    assert "kafka/kafka.example.com" in text
    assert "Authentication failed" in text
    assert info.value.broker_message == "Authentication failed"


async def test_a_cancelled_wait_keeps_the_thread_and_its_permit(
    fake_gss: FakeGssapi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GSS call stuck on the KDC cannot be interrupted: the wait ends at the timeout, the
    call holds its permit until it returns, and no more calls than permits are started."""
    monkeypatch.setattr(kerberos, "GSS_THREADS", 2)
    release = threading.Event()
    started: list[int] = []
    two_started = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stuck(n: int) -> int:
        started.append(n)
        if len(started) == 2:
            loop.call_soon_threadsafe(two_started.set)
        release.wait(30)
        return n

    login = KerberosLogin(KerberosSettings())
    context = kerberos.GssContext(fake_gss, KerberosSettings(), TARGET)  # type: ignore[arg-type]
    waits = [asyncio.ensure_future(login._in_thread(context, stuck, n)) for n in range(3)]
    await asyncio.wait_for(two_started.wait(), 30)
    for wait in waits:
        wait.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    assert sorted(started) == [0, 1]  # the third never got a permit
    assert login._permits is not None
    assert login._permits.locked()
    release.set()
    # Both stuck calls end and give their permits back: a new call gets one and runs.
    assert await asyncio.wait_for(login._in_thread(context, stuck, 7), 30) == 7
    assert sorted(started) == [0, 1, 7]


async def test_a_broker_that_never_completes_the_context(
    fake_gss: FakeGssapi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakeContext, "step", lambda self, token=None: b"more")
    conn = FakeConnection(
        [SaslHandshakeResponse(error_code=0, mechanisms=["GSSAPI"])]
        + [answer(b"again") for _ in range(10)]
    )
    auth = SaslAuthenticator("GSSAPI")
    with pytest.raises(KerberosError, match="more than 4 GSSAPI context tokens"):
        await auth(conn)  # type: ignore[arg-type]
    assert len(conn.sent) == 1 + 1 + kerberos.MAX_CONTEXT_TOKENS
