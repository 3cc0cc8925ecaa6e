"""SASL mechanisms (without a broker), TLS context building, and the security options."""

from __future__ import annotations

import base64
import copy
import pickle
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from aiokprod.config import ProducerConfig, Secret, describe_options
from aiokprod.errors import AuthenticationError, ConfigError, UnsupportedVersionError
from aiokprod.net.connection import BrokerConnection
from aiokprod.net.sasl import (
    SaslAuthenticator,
    ScramClient,
    oauthbearer_initial_response,
    plain_token,
    sasl_authenticator,
    scram_escape,
)
from aiokprod.net.security import (
    OAuthTokenError,
    SaslAuthenticationError,
    SaslMechanismError,
    SaslUnknownUserError,
    SaslWrongPasswordError,
    build_ssl_context,
)
from aiokprod.protocol.api import SASL_AUTHENTICATE, SASL_HANDSHAKE
from aiokprod.protocol.messages.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from aiokprod.testing.tls import make_test_pki

# --- SCRAM against RFC 7677's example -------------------------------------------------------

RFC7677: dict[str, Any] = {
    "nonce": "rOprNGfwEbeRWgbNEkqO",
    "server_first": b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    "client_final": b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    "server_final": b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
}


def test_scram_sha256_matches_rfc7677() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", nonce=RFC7677["nonce"])
    assert client.client_first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    first = client.parse_server_first(RFC7677["server_first"])
    salted = client.salted_password(Secret("pencil"), first)
    assert client.client_final(first, salted) == RFC7677["client_final"]
    client.verify_server_final(RFC7677["server_final"])  # no error


def test_scram_sha512_round_trip_with_a_server_side_computation() -> None:
    import hashlib
    import hmac

    client = ScramClient("SCRAM-SHA-512", "al,i=ce", nonce="abc")
    assert client.client_first() == b"n,,n=al=2Ci=3Dce,r=abc"
    salt = b"0123456789abcdef"
    server_first = b"r=abcdef,s=" + base64.b64encode(salt) + b",i=4096"
    first = client.parse_server_first(server_first)
    salted = client.salted_password(Secret("pässword"), first)
    final = client.client_final(first, salted)
    # The server's side (RFC 5802): verify the proof from the stored key.
    expected_salted = hashlib.pbkdf2_hmac("sha512", "pässword".encode(), salt, 4096)
    client_key = hmac.new(expected_salted, b"Client Key", "sha512").digest()
    stored_key = hashlib.sha512(client_key).digest()
    auth_message = b"n=al=2Ci=3Dce,r=abc," + server_first + b",c=biws,r=abcdef"
    signature = hmac.new(stored_key, auth_message, "sha512").digest()
    proof = base64.b64decode(final.split(b",p=")[1])
    assert (
        hashlib.sha512(bytes(a ^ b for a, b in zip(proof, signature, strict=True))).digest()
        == stored_key
    )
    server_key = hmac.new(expected_salted, b"Server Key", "sha512").digest()
    server_sig = hmac.new(server_key, auth_message, "sha512").digest()
    client.verify_server_final(b"v=" + base64.b64encode(server_sig))


@pytest.mark.parametrize(
    ("server_first", "match"),
    [
        (b"r=other123,s=c2FsdA==,i=4096", "nonce"),
        (b"r=abc,s=c2FsdA==,i=4096", "nonce"),  # not extended
        (b"r=abcd,s=c2FsdA==,i=100", "iteration count"),
        (b"r=abcd,s=c2FsdA==,i=100000000", "iteration count"),
        (b"r=abcd,s=!!,i=4096", "malformed"),
        (b"garbage", "malformed"),
        (b"m=ext,r=abcd,s=c2FsdA==,i=4096", "extension"),
    ],
)
def test_scram_rejects_bad_server_first(server_first: bytes, match: str) -> None:
    client = ScramClient("SCRAM-SHA-256", "u", nonce="abc")
    with pytest.raises(SaslAuthenticationError, match=match):
        client.parse_server_first(server_first)


def test_scram_rejects_wrong_server_signature_and_errors() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", nonce=RFC7677["nonce"])
    first = client.parse_server_first(RFC7677["server_first"])
    client.client_final(first, client.salted_password(Secret("pencil"), first))
    with pytest.raises(SaslAuthenticationError, match="signature is wrong"):
        client.verify_server_final(b"v=" + base64.b64encode(b"x" * 32))
    with pytest.raises(SaslAuthenticationError, match="other-error"):
        client.verify_server_final(b"e=other-error")


def test_tokens() -> None:
    assert scram_escape("a=b,c") == "a=3Db=2Cc"
    assert plain_token("alice", Secret("pw")) == b"\x00alice\x00pw"
    assert oauthbearer_initial_response("t0k") == b"n,,\x01auth=Bearer t0k\x01\x01"


# --- the authenticator over a scripted connection -------------------------------------------


class FakeProtocol:
    def __init__(self, handshake_version: int = 1) -> None:
        self.handshake_version = handshake_version

    def supports(self, api: Any) -> bool:
        return api is SASL_AUTHENTICATE

    def version_for(self, api: Any) -> int:
        assert api is SASL_HANDSHAKE
        return self.handshake_version


class FakeConnection:
    """Answers handshake requests from a script; records what was sent."""

    node_id, host, port = 1, "127.0.0.1", 9094

    def __init__(self, responses: Sequence[Any], handshake_version: int = 1) -> None:
        self.protocol = FakeProtocol(handshake_version)
        self.responses = list(responses)
        self.sent: list[Any] = []
        self.lifetime_ms: int | None = None

    async def handshake_request(self, request: Any) -> Any:
        self.sent.append(request)
        return self.responses.pop(0)

    def set_session_lifetime(self, lifetime_ms: int) -> None:
        self.lifetime_ms = lifetime_ms


def ok_handshake() -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"])


def auth_ok(data: bytes = b"", lifetime: int = 0) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(
        error_code=0, error_message=None, auth_bytes=data, session_lifetime_ms=lifetime
    )


def auth_failed(message: str) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(
        error_code=58, error_message=message, auth_bytes=b"", session_lifetime_ms=0
    )


async def test_plain_exchange_and_session_lifetime() -> None:
    conn = FakeConnection([ok_handshake(), auth_ok(lifetime=3600_000)])
    auth = SaslAuthenticator("PLAIN", username="alice", password=Secret("pw"))
    await auth(conn)  # type: ignore[arg-type]
    assert isinstance(conn.sent[0], SaslHandshakeRequest)
    assert conn.sent[0].mechanism == "PLAIN"
    assert isinstance(conn.sent[1], SaslAuthenticateRequest)
    assert conn.sent[1].auth_bytes == b"\x00alice\x00pw"
    assert conn.lifetime_ms == 3600_000
    assert "pw" not in repr(auth)


async def test_unsupported_mechanism_lists_the_enabled_ones() -> None:
    conn = FakeConnection([SaslHandshakeResponse(error_code=33, mechanisms=["PLAIN", "GSSAPI"])])
    auth = SaslAuthenticator("SCRAM-SHA-256", username="alice", password=Secret("pw"))
    with pytest.raises(SaslMechanismError, match="offers PLAIN, GSSAPI") as info:
        await auth(conn)  # type: ignore[arg-type]
    assert info.value.enabled == ("PLAIN", "GSSAPI")
    assert isinstance(copy.copy(info.value), SaslMechanismError)


async def test_handshake_v0_only_broker_is_refused() -> None:
    auth = SaslAuthenticator("PLAIN", username="alice", password=Secret("pw"))
    with pytest.raises(UnsupportedVersionError):
        await auth(FakeConnection([], handshake_version=0))  # type: ignore[arg-type]


async def test_scram_failure_stage_picks_the_error_type() -> None:
    auth = SaslAuthenticator("SCRAM-SHA-256", username="bob", password=Secret("s3cr3t-pw"))
    with pytest.raises(SaslUnknownUserError, match="user 'bob'") as unknown:
        await auth(FakeConnection([ok_handshake(), auth_failed("nope")]))  # type: ignore[arg-type]
    assert unknown.value.broker_message == "nope"
    server_first = b"r=NONCE" + b"x" * 10 + b",s=c2FsdA==,i=4096"

    class Scripted(FakeConnection):
        async def handshake_request(self, request: Any) -> Any:
            self.sent.append(request)
            if len(self.sent) == 2:  # answer the client-first with its own nonce extended
                nonce = request.auth_bytes.split(b"r=")[1]
                return auth_ok(server_first.replace(b"NONCE", nonce))
            return self.responses.pop(0)

    conn = Scripted([ok_handshake(), auth_failed("echo s3cr3t-pw back")])
    with pytest.raises(SaslWrongPasswordError) as wrong:
        await auth(conn)  # type: ignore[arg-type]
    assert "s3cr3t-pw" not in str(wrong.value)  # scrubbed from the broker's message
    assert "***" in str(wrong.value)
    clone = copy.copy(wrong.value)
    assert (type(clone), clone.mechanism, clone.username) == (
        SaslWrongPasswordError,
        "SCRAM-SHA-256",
        "bob",
    )


async def test_oauthbearer_error_exchange() -> None:
    async def provider() -> str:
        return "tok-123"

    conn = FakeConnection(
        [ok_handshake(), auth_ok(b'{"status":"invalid_token"}'), auth_failed("{...}")]
    )
    auth = SaslAuthenticator("OAUTHBEARER", token_provider=provider)
    with pytest.raises(SaslAuthenticationError, match="token was rejected"):
        await auth(conn)  # type: ignore[arg-type]
    assert conn.sent[1].auth_bytes == b"n,,\x01auth=Bearer tok-123\x01\x01"
    assert conn.sent[2].auth_bytes == b"\x01"  # the RFC 7628 acknowledgement


@pytest.mark.parametrize("result", [None, "", 123, "a\x01b"])
async def test_oauthbearer_provider_must_return_a_token(result: Any) -> None:
    async def provider() -> Any:
        return result

    auth = SaslAuthenticator("OAUTHBEARER", token_provider=provider)
    with pytest.raises(OAuthTokenError, match="must return"):
        await auth(FakeConnection([ok_handshake()]))  # type: ignore[arg-type]


async def test_oauthbearer_provider_failure_is_wrapped_without_its_message() -> None:
    async def provider() -> str:
        raise RuntimeError("secret-detail")

    auth = SaslAuthenticator("OAUTHBEARER", token_provider=provider)
    with pytest.raises(OAuthTokenError) as info:
        await auth(FakeConnection([ok_handshake()]))  # type: ignore[arg-type]
    assert "secret-detail" not in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert isinstance(info.value, AuthenticationError)


def test_session_lifetime_plans_reauthentication() -> None:
    conn = BrokerConnection(1, "h", 1, client_id="c", max_in_flight=5, software_version="1")
    conn.set_session_lifetime(0)
    reauth_at_ms = conn.reauth_at_ms  # (a local: the assert must not narrow the attribute)
    assert reauth_at_ms is None
    assert not conn.needs_reauth(10**15)
    conn.set_session_lifetime(10_000)
    assert conn.reauth_at_ms is not None
    now = conn.reauth_at_ms - 1
    assert not conn.needs_reauth(now)
    assert conn.needs_reauth(conn.reauth_at_ms)


# --- options --------------------------------------------------------------------------------


def test_secret_never_shows() -> None:
    secret = Secret("hunter2")
    assert "hunter2" not in repr(secret) + str(secret) + f"{secret}" + f"{secret!r}"
    assert secret.reveal() == "hunter2"
    assert secret == Secret("hunter2")
    assert secret != Secret("other")
    assert copy.deepcopy(secret) is secret
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(secret)


async def test_sasl_options_validated_and_hidden() -> None:
    async def provider() -> str:
        return "t"

    cfg = ProducerConfig.from_options(
        "h:1",
        security_protocol="sasl_ssl",
        sasl_mechanism="scram-sha-512",
        sasl_plain_username="alice",
        sasl_plain_password="hunter2",
    )
    assert (cfg.security_protocol, cfg.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert isinstance(cfg.sasl_plain_password, Secret)
    assert "hunter2" not in repr(cfg) + str(describe_options(cfg))
    assert isinstance(sasl_authenticator(cfg), SaslAuthenticator)
    oauth = ProducerConfig.from_options(
        "h:1",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=provider,
    )
    assert "sasl_oauth_token_provider" not in repr(oauth)
    assert sasl_authenticator(ProducerConfig.from_options("h:1")) is None


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"security_protocol": "TLS"}, "security_protocol must be one of"),
        ({"sasl_plain_username": "a", "sasl_plain_password": "p"}, "security_protocol is"),
        ({"security_protocol": "SASL_PLAINTEXT"}, "needs sasl_plain_username"),
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_plain_username": "a"},
            "needs sasl_plain_password",
        ),
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "AWS_MSK_IAM"},
            "sasl_mechanism must be one of",
        ),
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER"},
            "needs sasl_oauth_token_provider",
        ),
        ({"security_protocol": "SASL_SSL", "sasl_plain_password": 1234}, "str or Secret"),
        ({"ssl_check_hostname": False}, "security_protocol is 'PLAINTEXT'"),
        ({"security_protocol": "SSL", "ssl_cafile": "/no/such/ca.pem"}, "no such file"),
        ({"security_protocol": "SSL", "ssl_context": "ctx"}, "ssl.SSLContext"),
    ],
)
def test_bad_security_options(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        ProducerConfig.from_options("h:1", **options)
    assert "1234" not in str(info.value)  # a password of the wrong type is not echoed


def test_ssl_context_conflicts(tmp_path: Path) -> None:
    pki = make_test_pki(tmp_path)
    context = ssl.create_default_context()
    with pytest.raises(ConfigError, match="cannot be combined"):
        ProducerConfig.from_options(
            "h:1", security_protocol="SSL", ssl_context=context, ssl_cafile=str(pki.ca_file)
        )
    with pytest.raises(ConfigError, match="needs ssl_certfile"):
        ProducerConfig.from_options("h:1", security_protocol="SSL", ssl_keyfile=str(pki.client_key))
    cfg = ProducerConfig.from_options("h:1", security_protocol="SSL", ssl_context=context)
    assert build_ssl_context(cfg) is context


def test_build_ssl_context_defaults_and_mutual_tls(tmp_path: Path) -> None:
    pki = make_test_pki(tmp_path)
    assert build_ssl_context(ProducerConfig.from_options("h:1")) is None
    cfg = ProducerConfig.from_options("h:1", security_protocol="SSL", ssl_cafile=str(pki.ca_file))
    context = build_ssl_context(cfg)
    assert context is not None
    assert context.check_hostname is True
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    relaxed = ProducerConfig.from_options(
        "h:1", security_protocol="SSL", ssl_cafile=str(pki.ca_file), ssl_check_hostname=False
    )
    relaxed_context = build_ssl_context(relaxed)
    assert relaxed_context is not None
    assert relaxed_context.check_hostname is False
    assert relaxed_context.verify_mode == ssl.CERT_REQUIRED  # the chain is still checked
    mutual = ProducerConfig.from_options(
        "h:1",
        security_protocol="SASL_SSL",
        sasl_plain_username="a",
        sasl_plain_password="p",
        ssl_cafile=str(pki.ca_file),
        ssl_certfile=str(pki.client_cert),
        ssl_keyfile=str(pki.client_key),
        ssl_password=pki.client_key_password,
    )
    assert build_ssl_context(mutual) is not None


def test_wrong_or_missing_key_password_fails_without_prompting(tmp_path: Path) -> None:
    pki = make_test_pki(tmp_path)
    common = {
        "security_protocol": "SSL",
        "ssl_certfile": str(pki.client_cert),
        "ssl_keyfile": str(pki.client_key),
    }
    wrong = ProducerConfig.from_options("h:1", **common, ssl_password="not-the-pass-77")
    with pytest.raises(ConfigError, match="wrong ssl_password") as info:
        build_ssl_context(wrong)
    assert "not-the-pass-77" not in str(info.value)
    # No password for an encrypted key: an error, not OpenSSL prompting on the terminal.
    with pytest.raises(ConfigError, match="encrypted key"):
        build_ssl_context(ProducerConfig.from_options("h:1", **common))


def test_test_pki_files(tmp_path: Path) -> None:
    from cryptography import x509

    pki = make_test_pki(tmp_path / "tls")
    server = x509.load_pem_x509_certificates(pki.server_keystore.read_bytes())
    names = server[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert b"BEGIN PRIVATE KEY" in pki.server_keystore.read_bytes()  # PKCS#8 for Kafka
    assert b"BEGIN ENCRYPTED PRIVATE KEY" in pki.client_key.read_bytes()
