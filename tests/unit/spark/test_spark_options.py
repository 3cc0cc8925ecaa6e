"""format("aiokprod") options and columns: Spark's Kafka sink spelling onto producer options."""

from __future__ import annotations

import importlib.util
import pickle
import re
from pathlib import Path

import pytest

from aiokprod import ConfigError
from aiokprod.spark.options import Sealed, is_secret, parse_sink_options, unseal
from aiokprod.spark.partition_writer import PartitionWriter

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_java_names_map_to_typed_producer_options() -> None:
    sink = parse_sink_options(
        {
            **BOOT,
            "topic": "events",
            "kafka.linger.ms": "20",
            "kafka.acks": "all",
            "kafka.enable.idempotence": "false",
            "kafka.compression.type": "lz4",
            "kafka.max.in.flight.requests.per.connection": "3",
            "kafka.client.id": "etl",
            "kafka.partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner",
        }
    )
    assert sink.bootstrap_servers == "127.0.0.1:9092"
    assert sink.topic == "events"
    assert sink.producer_options == {
        "linger_ms": 20,
        "acks": "all",
        "enable_idempotence": False,
        "compression_type": "lz4",
        "max_in_flight_requests_per_connection": 3,
        "client_id": "etl",
        "partitioner": "round_robin",
    }


def test_spark_options_are_accepted_and_ignored() -> None:
    sink = parse_sink_options({**BOOT, "includeheaders": "true", "checkpointlocation": "/x"})
    assert sink.producer_options == {}
    assert sink.topic is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "kafka.bootstrap.servers is required"),
        (
            {**BOOT, "kafka.linger.msec": "5"},
            r"no option linger_msec \(did you mean kafka.linger.ms",
        ),
        ({**BOOT, "kafka.send.buffer.bytes": "5"}, "kafka.send.buffer.bytes"),
        ({**BOOT, "kafka.linger.ms": "soon"}, "kafka.linger.ms: expected an integer, got 'soon'"),
        ({**BOOT, "kafka.linger.ms": "-1"}, "linger_ms must be between"),
        ({**BOOT, "kafka.enable.idempotence": "maybe"}, "expected true or false"),
        ({**BOOT, "kafka.value.serializer": "x.Y"}, "value column's bytes"),
        ({**BOOT, "kafka.ssl.truststore.location": "/t.jks"}, "use kafka.ssl.cafile"),
        ({**BOOT, "kafka.partitioner.class": "com.acme.P"}, "not a partitioner"),
        ({**BOOT, "linger.ms": "5"}, "unknown option 'linger.ms'"),
        ({**BOOT, "topic": ""}, "topic: must not be empty"),
        ({**BOOT, "kafka.acks": "2"}, "acks must be"),
    ],
)
def test_bad_options_are_config_errors_naming_the_option(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_sink_options(options)


def test_jaas_config_becomes_username_and_sealed_password() -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="p4ss\\"word";'
    )
    sink = parse_sink_options(
        {
            **BOOT,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": jaas,
        }
    )
    options = sink.producer_options
    assert options["sasl_plain_username"] == "alice"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    password = options["sasl_plain_password"]
    assert isinstance(password, Sealed)
    assert unseal(password) == 'p4ss"word'
    assert "p4ss" not in repr(sink) + repr(options) + str(password) + f"{password}"


@pytest.mark.skipif(
    importlib.util.find_spec("gssapi") is None, reason="the gssapi extra is not installed"
)
def test_krb5_login_module_becomes_gssapi_with_principal_and_keytab(tmp_path: Path) -> None:
    keytab = tmp_path / "etl.keytab"
    keytab.write_bytes(b"\x05\x02")
    jaas = (
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
        f'storeKey=true keyTab="{keytab}" principal="etl@EXAMPLE.COM";'
    )
    base = {
        **BOOT,
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.kerberos.service.name": "kafka",
        "kafka.sasl.jaas.config": jaas,
    }
    options = parse_sink_options(base).producer_options
    assert options["sasl_mechanism"] == "GSSAPI"
    assert options["sasl_kerberos_principal"] == "etl@EXAMPLE.COM"
    assert options["sasl_kerberos_keytab"] == str(keytab)
    assert options["sasl_kerberos_service_name"] == "kafka"
    with pytest.raises(ConfigError, match=r"Krb5LoginModule is for kafka\.sasl\.mechanism=GSSAPI"):
        parse_sink_options({**base, "kafka.sasl.mechanism": "PLAIN"})


def test_secrets_never_appear_in_errors_or_reprs() -> None:
    with pytest.raises(ConfigError) as bad_jaas:
        parse_sink_options(
            {**BOOT, "kafka.sasl.jaas.config": "com.Acme required password=hunter2;"}
        )
    assert "hunter2" not in str(bad_jaas.value)
    with pytest.raises(ConfigError) as wrong_protocol:  # a password without SASL
        parse_sink_options({**BOOT, "kafka.sasl.plain.password": "hunter2"})
    assert "hunter2" not in str(wrong_protocol.value)
    sink = parse_sink_options(
        {
            **BOOT,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.plain.username": "u",
            "kafka.sasl.plain.password": "hunter2",
        }
    )
    writer = PartitionWriter(sink.bootstrap_servers, sink.producer_options, "t")
    assert "hunter2" not in repr(sink) + repr(writer) + str(sink.producer_options)
    shipped = pickle.loads(pickle.dumps(writer))  # what the executors get keeps the value
    assert unseal(shipped.options["sasl_plain_password"]) == "hunter2"
    assert type(unseal(shipped.options["sasl_plain_password"])) is str


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("kafka.sasl.plain.password", True),
        ("ssl_password", True),
        ("kafka.sasl.jaas.config", True),
        ("sasl_oauth_token_provider", True),
        ("kafka.aws.secret.key", True),
        ("kafka.linger.ms", False),
        ("sasl_plain_username", False),
    ],
)
def test_which_options_are_secrets(name: str, secret: bool) -> None:
    assert is_secret(name) is secret


def test_schema_rules_of_sparks_kafka_sink() -> None:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    from aiokprod.spark.columns import check_schema

    def schema(**fields: object) -> StructType:
        return StructType([StructField(n, t) for n, t in fields.items()])  # type: ignore[arg-type]

    headers = ArrayType(
        StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    )
    full = schema(
        value=BinaryType(),
        key=StringType(),
        topic=StringType(),
        partition=IntegerType(),
        headers=headers,
        other=LongType(),
    )
    assert check_schema(full, None) == ("value", "key", "topic", "partition", "headers")
    assert check_schema(full, "t") == ("value", "key", "partition", "headers")  # option wins
    with pytest.raises(ConfigError, match="needs a 'value' column"):
        check_schema(schema(key=StringType()), "t")
    with pytest.raises(ConfigError, match="column 'value' must be string or binary, got bigint"):
        check_schema(schema(value=LongType()), "t")
    with pytest.raises(ConfigError, match="no 'topic' column"):
        check_schema(schema(value=StringType()), None)
    with pytest.raises(ConfigError, match="column 'partition' must be int, got bigint"):
        check_schema(schema(value=StringType(), partition=LongType()), "t")
    with pytest.raises(ConfigError, match="column 'headers' must be array"):
        check_schema(schema(value=StringType(), headers=StringType()), "t")


# --- deliveryGuarantee and transactionalIdPrefix ---------------------------------------------


def test_at_least_once_is_the_default() -> None:
    sink = parse_sink_options({**BOOT, "topic": "t"})
    assert sink.delivery_guarantee == "at-least-once"
    assert not sink.exactly_once
    assert sink.transactional_id_prefix is None
    assert "transaction_timeout_ms" not in sink.producer_options


def test_exactly_once_takes_a_prefix_and_a_timeout_sized_to_the_write() -> None:
    from aiokprod.spark.exactly_once import transaction_options

    # Spark hands the names over lower-cased
    sink = parse_sink_options(
        {**BOOT, "deliveryguarantee": "Exactly-Once", "transactionalidprefix": "orders"}
    )
    assert sink.exactly_once
    assert sink.transactional_id_prefix == "orders"
    assert "transaction_timeout_ms" not in sink.producer_options  # set per kind of write:
    batch = transaction_options(sink.producer_options, streaming=False)
    assert batch["transaction_timeout_ms"] == 900_000
    stream = transaction_options(sink.producer_options, streaming=True)
    assert stream["transaction_timeout_ms"] == 300_000


def test_a_transaction_timeout_given_is_kept() -> None:
    sink = parse_sink_options(
        {
            **BOOT,
            "deliveryguarantee": "exactly-once",
            "transactionalidprefix": "orders",
            "kafka.transaction.timeout.ms": "60000",
        }
    )
    assert sink.producer_options["transaction_timeout_ms"] == 60_000


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"deliveryguarantee": "twice"}, "option deliveryGuarantee: 'twice' is not one of"),
        ({"deliveryguarantee": "exactly-once"}, "transactionalIdPrefix: required"),
        (
            {"deliveryguarantee": "exactly-once", "transactionalidprefix": " "},
            "transactionalIdPrefix: required",
        ),
        ({"transactionalidprefix": "orders"}, "only used with deliveryGuarantee=exactly-once"),
        ({"kafka.transactional.id": "mine"}, "kafka.transactional.id is not supported"),
        (
            {
                "deliveryguarantee": "exactly-once",
                "transactionalidprefix": "orders",
                "kafka.enable.idempotence": "false",
            },
            "transactional_id needs idempotence",
        ),
        (
            {
                "deliveryguarantee": "exactly-once",
                "transactionalidprefix": "orders",
                "kafka.acks": "1",
            },
            "acks",
        ),
    ],
)
def test_exactly_once_mistakes_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_sink_options({**BOOT, "topic": "t", **options})


def test_the_writer_of_an_exactly_once_sink_pickles_with_its_prefix() -> None:
    from aiokprod.spark.exactly_once import ExactlyOnceConfig

    writer = PartitionWriter("b:9092", {}, "t", exactly_once=ExactlyOnceConfig("orders", True))
    copy = pickle.loads(pickle.dumps(writer))
    assert copy.exactly_once == ExactlyOnceConfig("orders", True)
