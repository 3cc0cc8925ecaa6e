"""The Kerberos test harness without a KDC: its profiles, the broker's and tools' settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiokprod.testing import LocalKafka
from aiokprod.testing.__main__ import build_parser
from aiokprod.testing.errors import LocalKafkaError
from aiokprod.testing.kdc import (
    KRB5_COMMANDS,
    LocalKdc,
    kdc_conf,
    krb5_conf,
    missing_krb5_commands,
    pick_tcp_udp_port,
    require_krb5,
)
from aiokprod.testing.kerberos import (
    GSSAPI_LISTENERS,
    KerberosKafka,
    cli_environ,
    gssapi_broker_properties,
    java_client_properties,
    krb5_jaas,
)
from aiokprod.testing.node import first_errors


def test_client_profile_makes_no_dns_guess_and_uses_tcp() -> None:
    text = krb5_conf("EXAMPLE.TEST", 8888, kdc_timesync=False)
    for line in (
        "default_realm = EXAMPLE.TEST",
        "rdns = false",
        "dns_canonicalize_hostname = false",
        "dns_lookup_kdc = false",
        "udp_preference_limit = 1",
        "kdc_timesync = 0",
        "kdc = 127.0.0.1:8888",
        "localhost = EXAMPLE.TEST",
    ):
        assert line in text


def test_kdc_profile_listens_on_loopback_and_can_share_a_database(tmp_path: Path) -> None:
    own = kdc_conf("EXAMPLE.TEST", tmp_path, 8888, "1h")
    assert "kdc_listen = 127.0.0.1:8888" in own
    assert "kdc_tcp_listen = 127.0.0.1:8888" in own
    assert f"database_name = {tmp_path / 'principal'}" in own
    assert "+preauth" in own
    shared = kdc_conf("EXAMPLE.TEST", tmp_path / "twin", 9999, "1h", tmp_path)
    assert f"database_name = {tmp_path / 'principal'}" in shared
    assert f"kdc = FILE:{tmp_path / 'twin' / 'kdc.log'}" in shared


def test_kdc_names_and_environment(tmp_path: Path) -> None:
    kdc = LocalKdc(tmp_path, "EXAMPLE.TEST")
    assert kdc.principal("kafka/localhost") == "kafka/localhost@EXAMPLE.TEST"
    assert kdc.principal("a@OTHER") == "a@OTHER"
    assert kdc.keytab_path("kafka/localhost") == tmp_path / "kafka_localhost.keytab"
    assert kdc.environ()["KRB5_CONFIG"] == str(tmp_path / "krb5.conf")
    assert kdc.jvm_flags() == [f"-Djava.security.krb5.conf={tmp_path / 'krb5.conf'}"]


def test_missing_krb5_names_the_debian_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("aiokprod.testing.kdc.find_krb5_command", lambda name: None)
    assert missing_krb5_commands() == list(KRB5_COMMANDS)
    with pytest.raises(LocalKafkaError, match="apt-get install krb5-admin-server krb5-kdc"):
        require_krb5()


def test_a_port_free_for_tcp_and_udp() -> None:
    assert 0 < pick_tcp_udp_port() < 65536


def test_broker_and_java_client_settings() -> None:
    keytab = Path("/k/kafka.keytab")
    props = gssapi_broker_properties("kafka/localhost@R", keytab)
    assert props["sasl.enabled.mechanisms"].split(",")[-1] == "GSSAPI"
    assert props["sasl.kerberos.service.name"] == "kafka"
    for listener in GSSAPI_LISTENERS:
        jaas = props[f"listener.name.{listener}.gssapi.sasl.jaas.config"]
        assert jaas == krb5_jaas(keytab, "kafka/localhost@R")
    assert 'keyTab="/k/kafka.keytab" principal="kafka/localhost@R";' in jaas
    client = java_client_properties("SASL_SSL", "c@R", Path("/k/c.keytab"), Path("/k/ca.pem"))
    assert client["sasl.mechanism"] == "GSSAPI"
    assert client["ssl.truststore.location"] == "/k/ca.pem"
    assert "ssl.truststore.location" not in java_client_properties(
        "SASL_PLAINTEXT", "c@R", Path("/k/c.keytab"), Path("/k/ca.pem")
    )


def test_the_command_line_kerberos_mode() -> None:
    assert build_parser().parse_args(["run", "--kerberos"]).kerberos is True
    assert build_parser().parse_args(["exec", "--", "true"]).kerberos is False
    assert cli_environ(LocalKafka()) == {}
    kafka = KerberosKafka(broker_config={"a": "b"})
    assert kafka.security is True
    with pytest.raises(LocalKafkaError, match="not started"):
        kafka.kdc  # noqa: B018 - the property raises


def test_start_up_failures_show_the_first_errors() -> None:
    log = "\n".join(
        [
            "[t] INFO starting (kafka.Kafka)",
            "[t] ERROR Exiting Kafka due to fatal exception (kafka.Kafka)",
            "javax.security.auth.login.LoginException: Cannot locate KDC",
            "Caused by: KrbException: Cannot locate KDC",
            "[t] INFO shutting down (kafka.Kafka)",
        ]
    )
    shown = first_errors(log)
    assert "ERROR Exiting Kafka" in shown
    assert "Caused by: KrbException" in shown
    assert "shutting down" not in shown
    assert first_errors("[t] INFO all fine") == ""
