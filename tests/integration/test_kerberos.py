"""Kerberos (SASL/GSSAPI) against a real MIT KDC and the broker's GSSAPI listeners.

The realm, its KDC, principals and keytabs are made per run by ``aiokprod.testing`` (the
``kafka_kerberos`` fixture). The Java console producer on the same listener is the reference
that the set-up works; what aiokprod produces is read back by the Java console consumer over
GSSAPI, or by librdkafka over PLAINTEXT (its wheels have no GSSAPI), never by our own code.
Each error a user can meet fails fast with its typed error and a message naming the fix.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from readback import consume_all
from txn_readback import read_committed

from aiokprod import Producer
from aiokprod.errors import KafkaTimeoutError
from aiokprod.net.security import (
    KerberosClockSkewError,
    KerberosCredentialsError,
    KerberosKeytabError,
    KerberosPrincipalNotFoundError,
    SaslMechanismError,
)
from aiokprod.testing import LocalKafka, LocalKafkaError
from aiokprod.testing.kdc import LocalKdc, krb5_conf
from aiokprod.testing.kerberos import CLIENT, KerberosKafka
from aiokprod.testing.pytest_plugin import KERBEROS_REAUTH_MS, in_ci

try:
    import gssapi  # noqa: F401 - only whether it is there
except ImportError:  # pragma: no cover - CI installs the extra
    if in_ci():
        raise
    pytest.skip(
        "the gssapi extra is not installed: pip install 'aiokprod[gssapi]' (needs libkrb5-dev)",
        allow_module_level=True,
    )

#: An error must arrive within this long (max_block_ms stays at its 60 s default).
FAST_S = 10.0
RECORDS = 200
Options = dict[str, Any]


@pytest.fixture(autouse=True)
def krb5_env(
    kafka_kerberos: KerberosKafka, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The realm's krb5.conf, an empty ticket cache of this test's own, no default keytab."""
    monkeypatch.setenv("KRB5_CONFIG", str(kafka_kerberos.kdc.krb5_conf_path))
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'ccache'}")
    monkeypatch.delenv("KRB5_CLIENT_KTNAME", raising=False)


def new_topic(kerberos: KerberosKafka, partitions: int = 2) -> str:
    name = f"krb5-{uuid.uuid4().hex[:10]}"
    kerberos.create_topic(name, partitions=partitions)
    return name


async def produce(options: Options, topic: str, values: list[bytes]) -> dict[str, float]:
    async with asyncio.timeout(90), Producer(**options) as producer:
        futures = [await producer.send(topic, value) for value in values]
        await producer.flush()
        for future in futures:
            await future
        return producer.metrics()


def test_java_console_producer_is_the_reference(kafka_kerberos: KerberosKafka) -> None:
    """Kafka's own client produces over GSSAPI on the listener the tests use."""
    topic = new_topic(kafka_kerberos)
    values = [f"java-{i}" for i in range(20)]
    done = kafka_kerberos.java_produce(topic, values)
    assert done.returncode == 0, done.stderr[-3000:]
    consumed = consume_all(kafka_kerberos.bootstrap_servers, topic, len(values))
    assert sorted(r.value for r in consumed) == sorted(v.encode() for v in values)


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
async def test_idempotent_produce_read_back_by_the_java_consumer(
    kafka_kerberos: KerberosKafka, listener: str
) -> None:
    topic = new_topic(kafka_kerberos)
    values = [f"{listener}-{i}".encode() for i in range(RECORDS)]
    options = kafka_kerberos.client_options(listener)
    metrics = await produce({**options, "enable_idempotence": True}, topic, values)
    assert metrics["records_sent"] == RECORDS
    read = kafka_kerberos.java_consume(topic, RECORDS, listener=listener)
    assert sorted(read) == sorted(v.decode() for v in values)


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
async def test_transactional_produce_read_committed(
    kafka_kerberos: KerberosKafka, listener: str
) -> None:
    topic = new_topic(kafka_kerberos)
    options = {**kafka_kerberos.client_options(listener), "transactional_id": uuid.uuid4().hex}
    async with asyncio.timeout(90), Producer(**options) as producer:
        for outcome in ("commit", "abort", "commit"):
            await producer.begin_transaction()
            for i in range(50):
                await producer.send(topic, f"{outcome}-{i}".encode(), partition=i % 2)
            if outcome == "commit":
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
    values = read_committed(kafka_kerberos.bootstrap_servers, topic, partitions=2)
    assert sorted(values) == sorted([f"commit-{i}".encode() for i in range(50)] * 2)


async def test_a_developers_ticket_cache(kafka_kerberos: KerberosKafka, tmp_path: Path) -> None:
    """No principal, no keytab: the ticket ``kinit`` put in the cache (KRB5CCNAME)."""
    kafka_kerberos.kdc.kinit(CLIENT, kafka_kerberos.keytab(CLIENT), tmp_path / "ccache")
    topic = new_topic(kafka_kerberos)
    options = kafka_kerberos.client_options(principal=None)
    assert "sasl_kerberos_keytab" not in options
    await produce(options, topic, [b"from-kinit"])
    assert [r.value for r in consume_all(kafka_kerberos.bootstrap_servers, topic, 1)] == [
        b"from-kinit"
    ]


# --- failures: typed, fast, naming the fix --------------------------------------------------


async def expect_failure(options: Options, topic: str, error_type: type[Exception]) -> Exception:
    """The error ``send()`` gets (five at once, then one more), checked to come fast."""
    started = time.monotonic()
    async with asyncio.timeout(FAST_S + 20), Producer(**options) as producer:
        results = await asyncio.gather(
            *(producer.send(topic, b"never") for _ in range(5)), return_exceptions=True
        )
        elapsed = time.monotonic() - started
        with pytest.raises(error_type) as again:
            await producer.send(topic, b"never")
        assert producer.metrics()["records_sent"] == 0
    assert elapsed < FAST_S, f"took {elapsed:.1f} s"
    for result in results:
        assert type(result) is error_type, repr(result)
    return again.value


async def test_no_credentials_says_kinit_or_keytab(kafka_kerberos: KerberosKafka) -> None:
    options = kafka_kerberos.client_options(principal=None)  # and an empty ticket cache
    error = await expect_failure(options, new_topic(kafka_kerberos), KerberosCredentialsError)
    assert "kinit" in str(error), str(error)
    assert "sasl_kerberos_keytab" in str(error), str(error)


async def test_unknown_service_principal_names_the_principal_and_its_host(
    kafka_kerberos: KerberosKafka,
) -> None:
    options = kafka_kerberos.client_options()
    del options["sasl_kerberos_domain_name"]  # the host connected to: 127.0.0.1
    host, port = options["bootstrap_servers"].split(",")[0].split(":")
    error = await expect_failure(options, new_topic(kafka_kerberos), KerberosPrincipalNotFoundError)
    assert isinstance(error, KerberosPrincipalNotFoundError)
    text = str(error)
    assert f"kafka/{host}@{kafka_kerberos.realm}" in text, text
    assert f"the bootstrap address {host}:{port}" in text, text
    assert "sasl_kerberos_domain_name" in text, text
    assert error.service_principal == f"kafka/{host}@{kafka_kerberos.realm}"
    assert error.host == host


async def test_stale_keytab(kafka_kerberos: KerberosKafka) -> None:
    name = f"stale-{uuid.uuid4().hex[:6]}"
    keytab = kafka_kerberos.add_client(name)
    kafka_kerberos.kdc.change_key(name)  # the keytab now holds the old key
    options = kafka_kerberos.client_options(principal=name, keytab=keytab)
    error = await expect_failure(options, new_topic(kafka_kerberos), KerberosKeytabError)
    assert "does not match the KDC" in str(error), str(error)
    assert str(keytab) in str(error), str(error)


async def test_keytab_without_the_principal(kafka_kerberos: KerberosKafka) -> None:
    options = kafka_kerberos.client_options(principal="java-client", keytab=kafka_kerberos.keytab())
    error = await expect_failure(options, new_topic(kafka_kerberos), KerberosKeytabError)
    assert "holds no key for java-client@" in str(error), str(error)


@pytest.fixture(scope="module")
def skewed_kdc(kafka_kerberos: KerberosKafka) -> Iterator[LocalKdc]:
    """A second KDC of the realm, an hour ahead; its clients do not adopt its clock."""
    kdc = LocalKdc(
        kafka_kerberos.root / "kdc-skewed",
        kafka_kerberos.realm,
        time_offset="+1h",
        database_of=kafka_kerberos.kdc,
        kdc_timesync=False,
    )
    try:
        kdc.start()
    except LocalKafkaError as exc:  # libfaketime missing (.ci/run installs it)
        if in_ci():
            raise
        pytest.skip(f"no KDC off the clock: {exc}")
    try:
        yield kdc
    finally:
        kdc.stop()


async def test_clock_skew(
    kafka_kerberos: KerberosKafka, skewed_kdc: LocalKdc, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KRB5_CONFIG", str(skewed_kdc.krb5_conf_path))
    options = kafka_kerberos.client_options()
    error = await expect_failure(options, new_topic(kafka_kerberos), KerberosClockSkewError)
    assert "clock" in str(error), str(error)
    assert "Clock skew too great" in str(error), str(error)


async def test_expired_ticket_cache(kafka_kerberos: KerberosKafka, tmp_path: Path) -> None:
    kafka_kerberos.kdc.kinit(
        CLIENT, kafka_kerberos.keytab(CLIENT), tmp_path / "ccache", lifetime="2s"
    )
    await asyncio.sleep(3)
    options = kafka_kerberos.client_options(principal=None)
    error = await expect_failure(options, new_topic(kafka_kerberos), KerberosCredentialsError)
    assert "has expired" in str(error), str(error)
    assert "kinit" in str(error), str(error)


async def test_broker_without_gssapi(kafka_secure: LocalKafka) -> None:
    """A SASL listener that does not offer GSSAPI (the secure broker without a realm)."""
    topic = f"no-krb5-{uuid.uuid4().hex[:8]}"
    kafka_secure.create_topic(topic)
    options = {
        "bootstrap_servers": kafka_secure.listener_bootstrap("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "GSSAPI",
    }
    error = await expect_failure(options, topic, SaslMechanismError)
    assert isinstance(error, SaslMechanismError)
    assert "does not enable SASL mechanism GSSAPI" in str(error), str(error)
    assert "GSSAPI" not in error.enabled
    assert "PLAIN" in error.enabled


# --- a KDC that does not answer -------------------------------------------------------------


class SilentKdc:
    """A TCP port that accepts Kerberos requests and never answers (a hung KDC)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.1)
        self.port = int(self.server.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self._closing.set()
        self._thread.join(10)
        self.server.close()
        for conn in self.accepted:  # the GSS calls still waiting fail at once
            conn.close()


async def test_a_hung_kdc_never_blocks_the_loop(
    kafka_kerberos: KerberosKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KDC that never answers keeps MIT krb5 waiting for ~50 s per call: the loop runs on,
    and each attempt ends at socket_connection_setup_timeout_ms."""
    silent = SilentKdc()
    conf = tmp_path / "krb5.conf"
    conf.write_text(krb5_conf(kafka_kerberos.realm, silent.port), encoding="utf-8")
    monkeypatch.setenv("KRB5_CONFIG", str(conf))
    options = {
        **kafka_kerberos.client_options(),
        "socket_connection_setup_timeout_ms": 1000,
        "max_block_ms": 4000,
    }
    worst = 0.0
    stop = False

    async def ticker() -> None:
        nonlocal worst
        while not stop:
            began = time.perf_counter()
            await asyncio.sleep(0.005)
            worst = max(worst, time.perf_counter() - began - 0.005)

    topic = new_topic(kafka_kerberos)
    task = asyncio.create_task(ticker())
    try:
        async with Producer(**options) as producer:
            with pytest.raises(KafkaTimeoutError) as info:
                await producer.send(topic, b"never")
    finally:
        stop = True
        await task
        silent.close()
    assert "timed out after 1000 ms" in str(info.value), str(info.value)
    assert silent.accepted, "the client asked the silent KDC"
    # A GSS call on the loop would have stalled it for the KDC's whole timeout (~25-50 s).
    assert worst < 5.0, f"the loop stalled for {worst:.2f} s"


# --- tickets that expire --------------------------------------------------------------------


async def test_reauthentication_across_ticket_expiry(
    kafka_kerberos: KerberosKafka, caplog: pytest.LogCaptureFixture
) -> None:
    """Tickets of 5 s, sessions of KERBEROS_REAUTH_MS on SASL_SSL: a producer running for
    longer than several ticket lifetimes keeps delivering, with tickets renewed from its
    keytab, and no request cut by an expired session."""
    name = f"short-{uuid.uuid4().hex[:6]}"
    lifetime_s = 5
    keytab = kafka_kerberos.add_client(name, max_life=f"{lifetime_s}s")
    options = kafka_kerberos.client_options("SASL_SSL", principal=name, keytab=keytab)
    topic = new_topic(kafka_kerberos)
    caplog.set_level(logging.DEBUG, logger="aiokprod")
    began = time.time()
    sent = 0
    async with asyncio.timeout(90), Producer(**options) as producer:
        deadline = time.monotonic() + 2.5 * lifetime_s
        while time.monotonic() < deadline:
            await producer.send_and_wait(topic, f"r{sent}".encode())
            sent += 1
            await asyncio.sleep(0.05)
        metrics = producer.metrics()
    authenticated = [
        r.created for r in caplog.records if "kerberos authenticated" in r.getMessage()
    ]
    tgts = kafka_kerberos.kdc.log_lines("AS_REQ", name)
    # Sessions end every ~4 s: re-authenticated several times, the last ones with tickets
    # issued after the first had expired.
    assert len(authenticated) >= 4, authenticated
    assert max(authenticated) > began + lifetime_s + 1
    assert len(tgts) >= 2, tgts  # a new ticket-granting ticket from the keytab
    # Replaced before the broker ends the session: nothing had to be retried.
    assert metrics["records_retried"] == 0, metrics
    consumed = consume_all(kafka_kerberos.bootstrap_servers, topic, sent)
    assert sorted(r.value for r in consumed) == sorted(f"r{i}".encode() for i in range(sent))
    assert lifetime_s * 1000 > KERBEROS_REAUTH_MS
    assert os.environ["KRB5_CONFIG"] == str(kafka_kerberos.kdc.krb5_conf_path)
