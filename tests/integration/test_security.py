"""TLS and SASL against the real broker's SSL, MTLS, SASL_PLAINTEXT and SASL_SSL listeners.

Every mode produces and the records are read back by librdkafka (over PLAINTEXT, and once over
SASL_SSL with SCRAM, so an independent client proves the listener too). Each kind of bad
credential fails fast with its own typed error, and no secret shows up in logs (DEBUG),
exception messages or reprs.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from readback import consume_all

from aiokprod import OffsetAndMetadata, Producer
from aiokprod import TopicPartition as Tp
from aiokprod.admin import Admin
from aiokprod.config import describe_options
from aiokprod.errors import AuthenticationError, KafkaError
from aiokprod.net.security import (
    OAuthTokenError,
    SaslAuthenticationError,
    SaslUnknownUserError,
    SaslWrongPasswordError,
    SslAuthenticationError,
    SslCertificateError,
)
from aiokprod.testing import LocalKafka
from aiokprod.testing.security import unsecured_jwt

#: An error must arrive within this long (max_block_ms stays at its 60 s default).
FAST_S = 5.0
RECORDS = 300

Options = dict[str, Any]


def new_topic(kafka: LocalKafka) -> str:
    name = f"secure-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(name, partitions=2)
    return name


def token_provider(subject: str = "carol", lifetime_s: float = 3600) -> Any:
    calls: list[float] = []

    async def provide() -> str:
        calls.append(time.monotonic())
        return unsecured_jwt(subject, lifetime_s)

    provide.calls = calls  # type: ignore[attr-defined]
    return provide


def modes(kafka: LocalKafka) -> dict[str, Options]:
    listeners, pki = kafka.security_listeners, kafka.pki
    alice = {"sasl_plain_username": "alice", "sasl_plain_password": kafka.sasl_users["alice"]}
    tls = {"ssl_cafile": str(pki.ca_file)}
    return {
        "SSL": {"bootstrap_servers": listeners["SSL"], "security_protocol": "SSL", **tls},
        "SSL ssl_context": {
            "bootstrap_servers": listeners["SSL"],
            "security_protocol": "SSL",
            "ssl_context": ssl.create_default_context(cafile=str(pki.ca_file)),
        },
        "mutual TLS": {
            "bootstrap_servers": listeners["MTLS"],
            "security_protocol": "SSL",
            "ssl_certfile": str(pki.client_cert),
            "ssl_keyfile": str(pki.client_key),
            "ssl_password": pki.client_key_password,
            **tls,
        },
        **{
            f"SASL_PLAINTEXT {mechanism}": {
                "bootstrap_servers": listeners["SASL_PLAINTEXT"],
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": mechanism,
                **alice,
            }
            for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        },
        **{
            f"SASL_SSL {mechanism}": {
                "bootstrap_servers": listeners["SASL_SSL"],
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": mechanism,
                **alice,
                **tls,
            }
            for mechanism in ("PLAIN", "SCRAM-SHA-512")
        },
        "SASL_PLAINTEXT OAUTHBEARER": {
            "bootstrap_servers": listeners["SASL_PLAINTEXT"],
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": token_provider(),
        },
        "SASL_SSL OAUTHBEARER": {
            "bootstrap_servers": listeners["SASL_SSL"],
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": token_provider(),
            **tls,
        },
    }


MODES = [
    "SSL",
    "SSL ssl_context",
    "mutual TLS",
    "SASL_PLAINTEXT PLAIN",
    "SASL_PLAINTEXT SCRAM-SHA-256",
    "SASL_PLAINTEXT SCRAM-SHA-512",
    "SASL_SSL PLAIN",
    "SASL_SSL SCRAM-SHA-512",
    "SASL_PLAINTEXT OAUTHBEARER",
    "SASL_SSL OAUTHBEARER",
]


async def produce(options: Options, topic: str, count: int = RECORDS, tag: str = "") -> None:
    async with asyncio.timeout(60), Producer(**options) as producer:
        futures = [await producer.send(topic, f"{tag}{i}".encode()) for i in range(count)]
        await producer.flush()
        for future in futures:
            await future


@pytest.mark.parametrize("mode", MODES)
async def test_mode_produces_and_reads_back(kafka_secure: LocalKafka, mode: str) -> None:
    topic = new_topic(kafka_secure)
    await produce(modes(kafka_secure)[mode], topic, tag=f"{mode}:")
    consumed = consume_all(kafka_secure.bootstrap_servers, topic, RECORDS)
    assert sorted(r.value for r in consumed) == sorted(
        f"{mode}:{i}".encode() for i in range(RECORDS)
    )


def test_independent_client_reads_over_sasl_ssl_scram(kafka_secure: LocalKafka) -> None:
    topic = new_topic(kafka_secure)
    asyncio.run(produce(modes(kafka_secure)["SASL_SSL SCRAM-SHA-512"], topic, 50, "x"))
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_secure.security_listeners["SASL_SSL"],
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": kafka_secure.sasl_users["alice"],
            "ssl.ca.location": str(kafka_secure.ca_file),
            "group.id": uuid.uuid4().hex,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < 50 and time.monotonic() < deadline:
            for msg in consumer.consume(100, timeout=0.5):
                value = msg.value()
                if msg.error() is None and value is not None:
                    values.append(value)
    finally:
        consumer.close()
    assert sorted(values) == sorted(f"x{i}".encode() for i in range(50))


# --- failures: typed, fast, and no retry storm ----------------------------------------------


def bad_options(kafka: LocalKafka) -> dict[str, tuple[Options, type[AuthenticationError], str]]:
    listeners, pki = kafka.security_listeners, kafka.pki
    sasl = {"bootstrap_servers": listeners["SASL_PLAINTEXT"], "security_protocol": "SASL_PLAINTEXT"}

    async def broken_provider() -> str:
        raise RuntimeError("identity provider is down")

    return {
        "PLAIN wrong password": (
            {**sasl, "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
             "sasl_plain_password": "wrong-password-1"},
            SaslAuthenticationError, "invalid username or password",
        ),
        "SCRAM wrong password": (
            {**sasl, "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "alice",
             "sasl_plain_password": "wrong-password-2"},
            SaslWrongPasswordError, "wrong password",
        ),
        "SCRAM unknown user": (
            {**sasl, "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "mallory",
             "sasl_plain_password": "wrong-password-3"},
            SaslUnknownUserError, "no credentials for this user",
        ),
        "PLAIN unknown user": (
            {**sasl, "sasl_mechanism": "PLAIN", "sasl_plain_username": "mallory",
             "sasl_plain_password": "wrong-password-4"},
            SaslAuthenticationError, "user 'mallory'",
        ),
        "OAUTHBEARER bad token": (
            {**sasl, "sasl_mechanism": "OAUTHBEARER",
             "sasl_oauth_token_provider": token_provider(lifetime_s=-60)},
            SaslAuthenticationError, "invalid_token",
        ),
        "OAUTHBEARER provider fails": (
            {**sasl, "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": broken_provider},
            OAuthTokenError, "token provider failed with RuntimeError",
        ),
        "untrusted certificate": (
            {"bootstrap_servers": listeners["SSL"], "security_protocol": "SSL",
             "ssl_cafile": str(pki.other_ca_file)},
            SslCertificateError, "certificate was not accepted",
        ),
        "system CAs only": (
            {"bootstrap_servers": listeners["SASL_SSL"], "security_protocol": "SASL_SSL",
             "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
             "sasl_plain_password": kafka.sasl_users["alice"]},
            SslCertificateError, "certificate was not accepted",
        ),
        "mutual TLS without a client certificate": (
            {"bootstrap_servers": listeners["MTLS"], "security_protocol": "SSL",
             "ssl_cafile": str(pki.ca_file)},
            SslAuthenticationError, "TLS handshake",
        ),
    }  # fmt: skip


BAD = [
    "PLAIN wrong password",
    "SCRAM wrong password",
    "SCRAM unknown user",
    "PLAIN unknown user",
    "OAUTHBEARER bad token",
    "OAUTHBEARER provider fails",
    "untrusted certificate",
    "system CAs only",
    "mutual TLS without a client certificate",
]


@pytest.mark.parametrize("case", BAD)
async def test_bad_credentials_fail_fast_with_typed_error(
    kafka_secure: LocalKafka, case: str
) -> None:
    options, error_type, text = bad_options(kafka_secure)[case]
    topic = new_topic(kafka_secure)
    started = time.monotonic()
    async with asyncio.timeout(FAST_S + 5), Producer(**options) as producer:
        # Several send()s waiting for metadata at once: all of them fail promptly.
        results = await asyncio.gather(
            *(producer.send(topic, b"never") for _ in range(5)), return_exceptions=True
        )
        elapsed = time.monotonic() - started
        # A later send() fails at once too (the pool remembers the failure).
        again = time.monotonic()
        with pytest.raises(error_type):
            await producer.send(topic, b"never")
        assert time.monotonic() - again < 1.0
        attempts = producer.metrics()
    assert elapsed < FAST_S, f"took {elapsed:.1f} s"
    for result in results:
        assert type(result) is error_type, repr(result)
        assert text in str(result), str(result)
    assert attempts["records_sent"] == 0
    consumed = consume_all(kafka_secure.bootstrap_servers, topic, 0, timeout_s=5)
    assert consumed == []


async def test_no_retry_storm_while_credentials_are_wrong(kafka_secure: LocalKafka) -> None:
    options, _, _ = bad_options(kafka_secure)["SCRAM wrong password"]
    attempts: list[float] = []

    class Counter(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "authentication failed" in record.getMessage():
                attempts.append(time.monotonic())

    handler = Counter(logging.WARNING)
    logging.getLogger("aiokprod").addHandler(handler)
    topic = new_topic(kafka_secure)
    try:
        async with Producer(**options, reconnect_backoff_max_ms=1000) as producer:
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:  # an application that keeps trying
                with pytest.raises(SaslWrongPasswordError):
                    await producer.send(topic, b"never")
                await asyncio.sleep(0.01)
    finally:
        logging.getLogger("aiokprod").removeHandler(handler)
    # Reconnects back off (50 ms doubling to 1 s): a handful of attempts, not hundreds.
    assert 1 <= len(attempts) <= 12, len(attempts)


# --- re-authentication ----------------------------------------------------------------------


async def test_oauthbearer_reauthenticates_before_the_token_expires(
    kafka_secure: LocalKafka,
) -> None:
    """The broker ends a session when its token expires (KIP-368): we reconnect with a fresh
    token before that, and records keep flowing."""
    topic = new_topic(kafka_secure)
    provider = token_provider(lifetime_s=3.0)
    options = modes(kafka_secure)["SASL_PLAINTEXT OAUTHBEARER"]
    options["sasl_oauth_token_provider"] = provider
    sent = 0
    async with asyncio.timeout(60), Producer(**options) as producer:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            await producer.send_and_wait(topic, f"r{sent}".encode())
            sent += 1
            await asyncio.sleep(0.05)
        metrics = producer.metrics()
    # At least one new token per ~3 s session (bootstrap and broker connections both count).
    assert len(provider.calls) >= 4, provider.calls
    # Replaced before expiry: the broker never cut a connection under a request, so nothing
    # had to be retried (without re-authentication the broker closes the connection on the
    # first request after expiry and the batch in it is retried).
    assert metrics["records_retried"] == 0, metrics
    consumed = consume_all(kafka_secure.bootstrap_servers, topic, sent)
    assert sorted(r.value for r in consumed) == sorted(f"r{i}".encode() for i in range(sent))


# --- secrets stay secret --------------------------------------------------------------------


async def test_secrets_never_in_logs_errors_or_reprs(
    kafka_secure: LocalKafka, caplog: pytest.LogCaptureFixture
) -> None:
    good_token = unsecured_jwt("carol", 3600)
    bad_token = "bad-token-" + uuid.uuid4().hex

    def provider_of(token: str) -> Callable[[], Awaitable[str]]:
        async def provide() -> str:
            return token

        return provide

    all_modes = modes(kafka_secure)
    bad = bad_options(kafka_secure)
    wrong = "wrong-password-" + uuid.uuid4().hex
    oauth = all_modes["SASL_PLAINTEXT OAUTHBEARER"]
    cases: list[Options] = [
        all_modes["SASL_PLAINTEXT PLAIN"],
        all_modes["SASL_SSL SCRAM-SHA-512"],
        all_modes["mutual TLS"],
        {**oauth, "sasl_oauth_token_provider": provider_of(good_token)},
        {**oauth, "sasl_oauth_token_provider": provider_of(bad_token)},
        {**bad["PLAIN wrong password"][0], "sasl_plain_password": wrong},
        {**bad["SCRAM wrong password"][0], "sasl_plain_password": wrong},
    ]  # fmt: skip
    secrets = [
        kafka_secure.sasl_users["alice"],
        kafka_secure.pki.client_key_password,
        good_token,
        bad_token,
        wrong,
    ]
    texts: list[str] = []
    caplog.set_level(logging.DEBUG, logger="aiokprod")
    topic = new_topic(kafka_secure)
    for options in cases:
        producer = Producer(**options)
        texts += [
            repr(producer.config),
            str(producer.config),
            str(describe_options(producer.config)),
        ]
        try:
            async with asyncio.timeout(30), producer:
                await producer.send_and_wait(topic, b"ok")
        except KafkaError as exc:
            texts += [str(exc), repr(exc), repr(exc.__cause__), repr(exc.__context__)]
    logged = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert "authenticated" in logged, "DEBUG logs of the authentication were captured"
    assert "authentication failed" in logged
    haystack = logged + "\n".join(texts)
    for secret in secrets:
        assert secret not in haystack


async def test_admin_client_over_sasl_ssl(kafka_secure: LocalKafka) -> None:
    # The admin client takes the producer's security options: SCRAM over TLS here.
    topic = new_topic(kafka_secure)
    group = f"g-{uuid.uuid4().hex[:8]}"
    options = modes(kafka_secure)["SASL_SSL SCRAM-SHA-512"]
    async with asyncio.timeout(60), Admin(**options) as admin:
        await admin.alter_consumer_group_offsets(group, {Tp(topic, 0): OffsetAndMetadata(4, "m")})
        assert await admin.list_consumer_group_offsets(group) == {
            Tp(topic, 0): OffsetAndMetadata(4, "m")
        }
        assert isinstance(await admin.list_transactions(), list)
    bad = {**options, "sasl_plain_password": "wrong-password-admin"}
    async with asyncio.timeout(60), Admin(**bad) as admin:
        with pytest.raises(AuthenticationError):
            await admin.list_consumer_group_offsets(group)
    consumer = Consumer({"bootstrap.servers": kafka_secure.bootstrap_servers, "group.id": group})
    try:
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        consumer.close()
    assert committed.offset == 4  # (librdkafka misreads a one-character metadata string)
