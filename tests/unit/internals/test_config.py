"""ProducerConfig.from_options: Java 4.x defaults, names, types, ranges and combinations."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from aiokprod.cli.options import UsageError, parse_option
from aiokprod.config import (
    JAVA_NAMES,
    MAX_INT32,
    OPTIONS,
    SECRET_OPTIONS,
    ProducerConfig,
    describe_options,
    option_for_java_name,
    option_from_text,
    parse_bootstrap_servers,
)
from aiokprod.errors import ConfigError
from aiokprod.producer import Producer
from aiokprod.types import ProducerRecord, RecordMetadata

BOOT = "127.0.0.1:9092"


def make(**options: object) -> ProducerConfig:
    return ProducerConfig.from_options(BOOT, **options)


# --- defaults -------------------------------------------------------------------------------

#: Java 4.x producer defaults (protocol-facts.md section 9) that ProducerConfig carries.
JAVA_DEFAULTS = {
    "acks": -1,
    "enable_idempotence": True,
    "linger_ms": 5,
    "batch_size": 16384,
    "buffer_memory": 33554432,
    "max_block_ms": 60000,
    "delivery_timeout_ms": 120000,
    "request_timeout_ms": 30000,
    "max_in_flight_requests_per_connection": 5,
    "retries": 2147483647,
    "retry_backoff_ms": 100,
    "retry_backoff_max_ms": 1000,
    "reconnect_backoff_ms": 50,
    "reconnect_backoff_max_ms": 1000,
    "socket_connection_setup_timeout_ms": 10000,
    "connections_max_idle_ms": 540000,
    "metadata_max_age_ms": 300000,
    "metadata_max_idle_ms": 300000,
    "max_request_size": 1048576,
    "compression_type": "none",
    "partitioner_ignore_keys": False,
    "partitioner_adaptive_partitioning": True,
    "partitioner_availability_timeout_ms": 0,
}


@pytest.mark.parametrize(("name", "expected"), sorted(JAVA_DEFAULTS.items()))
def test_java_4x_default(name: str, expected: object) -> None:
    config = make()
    assert getattr(config, name) == expected
    # The dataclass default itself, not only what from_options fills in.
    assert ProducerConfig.__dataclass_fields__[name].default == expected


def test_default_partitioner_is_builtin_and_no_serializers_or_interceptors() -> None:
    config = make()
    assert config.partitioner == "builtin"
    assert config.key_serializer is None
    assert config.value_serializer is None
    assert config.interceptors == ()


def test_config_is_frozen() -> None:
    config = make()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.linger_ms = 0  # type: ignore[misc]


def test_generated_client_ids_are_distinct_and_explicit_one_is_kept() -> None:
    a, b = make(), make()
    assert a.client_id.startswith("aiokprod-producer-")
    assert a.client_id != b.client_id
    assert make(client_id="svc").client_id == "svc"


def test_explicit_options_are_kept() -> None:
    config = make(
        linger_ms=0,
        batch_size=1000,
        buffer_memory=10_000,
        max_block_ms=5,
        request_timeout_ms=1000,
        delivery_timeout_ms=1000,
        retries=3,
        max_request_size=2000,
        compression_type="GZIP",
        partitioner="round_robin",
    )
    assert (config.linger_ms, config.batch_size, config.buffer_memory) == (0, 1000, 10_000)
    assert (config.max_block_ms, config.request_timeout_ms) == (5, 1000)
    assert (config.delivery_timeout_ms, config.retries, config.max_request_size) == (1000, 3, 2000)
    assert config.compression_type == "gzip"
    assert config.partitioner == "round_robin"


def test_describe_options_lists_every_field() -> None:
    config = make(linger_ms=7)
    described = describe_options(config)
    assert set(described) == {f.name for f in dataclasses.fields(ProducerConfig)}
    assert described["linger_ms"] == 7


# --- names ----------------------------------------------------------------------------------


def test_unknown_option_is_named() -> None:
    with pytest.raises(ConfigError, match="lingerms"):
        make(lingerms=5)


def test_several_unknown_options_are_all_named() -> None:
    with pytest.raises(ConfigError) as info:
        make(foo=1, bar=2)
    assert "foo" in str(info.value)
    assert "bar" in str(info.value)


def test_dotted_java_name_gets_an_underscore_hint() -> None:
    with pytest.raises(ConfigError, match=r"linger\.ms \(did you mean linger_ms\?\)"):
        ProducerConfig.from_options(BOOT, **{"linger.ms": 5})


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("linger", "linger_ms"),
        ("lingerms", "linger_ms"),
        ("linger.ms", "linger_ms"),
        ("Batch-Size", "batch_size"),
        ("max.in.flight.requests.per.connection", "max_in_flight_requests_per_connection"),
        ("idempotence", "enable_idempotence"),
    ],
)
def test_a_mistyped_option_gets_one_suggestion_everywhere(name: str, meant: str) -> None:
    # issue 39: Producer(linger=5) named no option while the CLI's -X said "did you mean";
    # the constructor, the CLI and option text now share closest_option.
    hint = f"{name} (did you mean {meant}?)"
    mistyped: dict[str, Any] = {name: 5}  # as an untyped caller passes it
    with pytest.raises(ConfigError) as info:
        Producer(BOOT, **mistyped)
    assert str(info.value) == f"unknown producer option: {hint}"
    with pytest.raises(ConfigError, match=re.escape(hint)):
        option_from_text(name, "5")
    if option_for_java_name(name) is None and name.lower() != meant.replace("_", "-"):
        # (the command line takes Java names and dashes as they are)
        with pytest.raises(UsageError) as usage:
            parse_option(f"{name}=5")
        assert str(usage.value) == f"-X {name}: not a producer option (did you mean {meant}?)"


def test_several_unknown_options_each_get_their_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        make(lingr_ms=5, zzz=1)
    assert str(info.value) == "unknown producer options: lingr_ms (did you mean linger_ms?), zzz"


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the base class is what is tested
        make(nope=1)


# --- types and ranges -----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["5", 5.0, True, None, [5]])
def test_int_option_wrong_type(value: object) -> None:
    with pytest.raises(ConfigError, match="linger_ms must be an int"):
        make(linger_ms=value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("linger_ms", -1),
        ("batch_size", -1),
        ("buffer_memory", 0),
        ("request_timeout_ms", 0),
        ("max_in_flight_requests_per_connection", 0),
        ("retries", -1),
        ("retries", MAX_INT32 + 1),
        ("metadata_max_idle_ms", 4999),
        ("max_request_size", 0),
        ("connections_max_idle_ms", -2),
        ("partitioner_availability_timeout_ms", -1),
    ],
)
def test_int_option_out_of_range_names_option(name: str, value: int) -> None:
    with pytest.raises(ConfigError, match=name):
        make(**{name: value})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("batch_size", 0),
        ("linger_ms", 0),
        ("metadata_max_idle_ms", 5000),
        ("connections_max_idle_ms", -1),
        ("retries", MAX_INT32),
        ("partitioner_availability_timeout_ms", 0),
    ],
)
def test_int_option_range_bounds_are_inclusive(name: str, value: int) -> None:
    assert getattr(make(**{name: value}), name) == value


@pytest.mark.parametrize(
    "name", ["enable_idempotence", "partitioner_ignore_keys", "partitioner_adaptive_partitioning"]
)
@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_bool_option_wrong_type(name: str, value: object) -> None:
    with pytest.raises(ConfigError, match=name):
        make(**{name: value})


@pytest.mark.parametrize(
    ("given", "expected"),
    [("all", -1), ("ALL", -1), ("-1", -1), (-1, -1), (0, 0), ("0", 0), (1, 1), ("1", 1)],
)
def test_acks_values(given: object, expected: int) -> None:
    assert make(acks=given, enable_idempotence=False).acks == expected


@pytest.mark.parametrize("value", [2, "2", "leader", True, False, None, 1.0, 0.0, -1.0])
def test_acks_wrong_value_or_type(value: object) -> None:
    with pytest.raises(ConfigError, match="acks"):
        make(acks=value)


@pytest.mark.parametrize(("given", "expected"), [("Snappy", "snappy"), (None, "none")])
def test_compression_type_normalised(given: object, expected: str) -> None:
    assert make(compression_type=given).compression_type == expected


@pytest.mark.parametrize("value", ["brotli", 1, b"gzip"])
def test_compression_type_rejected(value: object) -> None:
    with pytest.raises(ConfigError, match="compression_type"):
        make(compression_type=value)


def test_client_id_wrong_type() -> None:
    with pytest.raises(ConfigError, match="client_id"):
        make(client_id=5)


@pytest.mark.parametrize("name", ["key_serializer", "value_serializer"])
def test_serializer_must_be_callable(name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        make(**{name: "json"})
    assert getattr(make(**{name: str.encode}), name) is str.encode
    assert getattr(make(**{name: None}), name) is None


def test_partitioner_names_and_callables() -> None:
    def custom(topic: str, key: bytes | None, n: int, available: object) -> int:
        return 0

    assert make(partitioner="murmur3").partitioner == "murmur3"
    assert make(partitioner=custom).partitioner is custom
    with pytest.raises(ConfigError, match="partitioner"):
        make(partitioner="sticky")
    with pytest.raises(ConfigError, match="partitioner"):
        make(partitioner=3)


class _Interceptor:
    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        return record

    def on_acknowledgement(
        self, metadata: RecordMetadata | None, exception: BaseException | None
    ) -> None:
        return None


def test_interceptors_validated() -> None:
    interceptor = _Interceptor()
    assert make(interceptors=[interceptor]).interceptors == (interceptor,)
    assert make(interceptors=None).interceptors == ()
    with pytest.raises(ConfigError, match="interceptor"):
        make(interceptors=[object()])
    with pytest.raises(ConfigError, match="interceptors must be a sequence"):
        make(interceptors="not-a-list")
    with pytest.raises(ConfigError, match="interceptors must be a sequence"):
        make(interceptors=interceptor)


# --- combinations ---------------------------------------------------------------------------


def test_delivery_timeout_below_linger_plus_request_timeout_is_an_error_when_explicit() -> None:
    with pytest.raises(ConfigError, match=r"delivery_timeout_ms \(30004\).*\(30005\)"):
        make(delivery_timeout_ms=30_004)
    with pytest.raises(ConfigError, match="delivery_timeout_ms"):
        make(delivery_timeout_ms=1000, linger_ms=500, request_timeout_ms=600)


def test_delivery_timeout_equal_to_linger_plus_request_timeout_is_allowed() -> None:
    assert make(delivery_timeout_ms=30_005).delivery_timeout_ms == 30_005


def test_default_delivery_timeout_is_raised_silently() -> None:
    config = make(request_timeout_ms=200_000, linger_ms=100)
    assert config.delivery_timeout_ms == 200_100
    # Untouched when the default is already enough.
    assert make(request_timeout_ms=1000).delivery_timeout_ms == 120_000


def test_explicit_idempotence_with_acks_1_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"enable_idempotence.*acks=1"):
        make(enable_idempotence=True, acks=1)


@pytest.mark.parametrize("acks", [0, 1, "1"])
def test_default_idempotence_is_turned_off_by_acks(acks: object) -> None:
    config = make(acks=acks)
    assert config.enable_idempotence is False


def test_default_idempotence_is_turned_off_by_retries_0_or_many_in_flight() -> None:
    assert make(retries=0).enable_idempotence is False
    assert make(max_in_flight_requests_per_connection=6).enable_idempotence is False
    assert make(max_in_flight_requests_per_connection=5).enable_idempotence is True


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"retries": 0}, "retries=0"),
        ({"max_in_flight_requests_per_connection": 6}, "max_in_flight"),
    ],
)
def test_explicit_idempotence_conflicts_name_the_option(
    options: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        make(enable_idempotence=True, **options)


def test_explicit_idempotence_off_with_acks_all_stays_off() -> None:
    assert make(enable_idempotence=False).enable_idempotence is False
    assert make(enable_idempotence=True, acks="all").enable_idempotence is True


def test_backoff_max_below_initial() -> None:
    with pytest.raises(ConfigError, match="retry_backoff_max_ms"):
        make(retry_backoff_ms=500, retry_backoff_max_ms=100)
    assert make(retry_backoff_ms=2000).retry_backoff_max_ms == 2000
    with pytest.raises(ConfigError, match="reconnect_backoff_max_ms"):
        make(reconnect_backoff_ms=500, reconnect_backoff_max_ms=100)
    assert make(reconnect_backoff_ms=3000).reconnect_backoff_max_ms == 3000


# --- bootstrap servers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("h1:9092", (("h1", 9092),)),
        ("h1:9092, h2:9093", (("h1", 9092), ("h2", 9093))),
        (["h1:1", "h2:2,h3:3"], (("h1", 1), ("h2", 2), ("h3", 3))),
        (("h1:1",), (("h1", 1),)),
        ("[::1]:9092", (("::1", 9092),)),
        ("h1:9092,", (("h1", 9092),)),
    ],
)
def test_bootstrap_servers_parsed(given: object, expected: tuple[tuple[str, int], ...]) -> None:
    assert parse_bootstrap_servers(given) == expected
    assert ProducerConfig.from_options(given).bootstrap_servers == expected


@pytest.mark.parametrize(
    "given",
    ["h1", "h1:", ":9092", "h1:0", "h1:65536", "h1:port", "", " , ", [], [1], b"h:1", 9092],
)
def test_bootstrap_servers_rejected(given: object) -> None:
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        ProducerConfig.from_options(given)


def test_bootstrap_servers_required() -> None:
    with pytest.raises(ConfigError, match="bootstrap_servers is required"):
        ProducerConfig.from_options()


# --- the option table -------------------------------------------------------------------------


def test_the_table_is_the_config() -> None:
    # one row per ProducerConfig field, in the same order, with the field's default
    fields = dataclasses.fields(ProducerConfig)
    assert [f.name for f in fields] == list(OPTIONS)
    for f in fields:
        assert OPTIONS[f.name].default == f.default, f.name
        assert OPTIONS[f.name].doc.strip(), f.name
        assert OPTIONS[f.name].group, f.name
    assert [o.name for o in OPTIONS.values() if o.required] == ["bootstrap_servers", "client_id"]


async def token() -> str:
    return "jwt"


def test_secret_options_are_the_credentials_and_never_shown() -> None:
    assert {"ssl_password", "sasl_plain_password", "sasl_oauth_token_provider"} == SECRET_OPTIONS
    config = make(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=token,
    )
    assert "token" not in repr(config)
    assert describe_options(config)["sasl_oauth_token_provider"] == "***"
    plain = make(
        security_protocol="SASL_PLAINTEXT", sasl_plain_username="u", sasl_plain_password="pw-1"
    )
    assert "pw-1" not in repr(plain)
    assert "pw-1" not in str(describe_options(plain))


@pytest.mark.parametrize(
    ("java", "ours"),
    [
        ("linger.ms", "linger_ms"),
        ("max.in.flight.requests.per.connection", "max_in_flight_requests_per_connection"),
        ("compression.zstd.level", "compression_level"),
        ("ssl.key.password", "ssl_password"),
        ("partitioner.adaptive.partitioning.enable", "partitioner_adaptive_partitioning"),
        ("partitioner.availability.timeout.ms", "partitioner_availability_timeout_ms"),
        ("linger_ms", "linger_ms"),  # ours pass through
    ],
)
def test_java_names(java: str, ours: str) -> None:
    assert option_for_java_name(java) == ours


def test_java_properties_without_an_exact_equivalent_are_not_mapped() -> None:
    # a class name or a JAAS line does not mean the same as our option's value
    for java in ("partitioner.class", "sasl.jaas.config", "key.serializer", "ssl.keystore.key"):
        assert option_for_java_name(java) is None
    assert set(JAVA_NAMES.values()) <= set(OPTIONS)


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("linger_ms", "20", 20),
        ("acks", "all", "all"),
        ("acks", "-1", -1),
        ("linger_ms", "soon", "soon"),  # left for the option's check to reject
        ("enable_idempotence", "No", False),
        ("partitioner_adaptive_partitioning", "false", False),
        ("partitioner_availability_timeout_ms", "200", 200),
        ("compression_level", "-5", -5),
        ("ssl_password", "s3cret", "s3cret"),
        ("client_id", "svc", "svc"),
    ],
)
def test_option_from_text(name: str, text: str, expected: object) -> None:
    assert option_from_text(name, text) == expected


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("enable_idempotence", "maybe", "expected true or false"),
        ("key_serializer", "json", "cannot be given as text"),
        ("bootstrap_servers", "h:1", "cannot be given as text"),
        ("lingerms", "5", "unknown producer option"),
    ],
)
def test_option_from_text_refuses(name: str, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        option_from_text(name, text)


def test_none_means_not_set() -> None:
    default = make()
    given = make(
        compression_level=None,
        ssl_cafile=None,
        ssl_password=None,
        sasl_plain_username=None,
        key_serializer=None,
        interceptors=None,
        compression_type=None,
    )
    for name in OPTIONS:
        if name != "client_id":
            assert getattr(given, name) == getattr(default, name), name
    assert make(client_id=None).client_id.startswith("aiokprod-producer-")

    # a None username is "not set" for OAUTHBEARER too (it used to count as a stray option)
    config = make(
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=token,
        sasl_plain_username=None,
    )
    assert config.sasl_plain_username is None


def test_compression_level_is_checked_once_by_the_codec() -> None:
    # the message comes from protocol/compression.py's Codec.check_level
    from aiokprod.protocol.compression import codec_for_name

    with pytest.raises(ConfigError) as from_config:
        make(compression_type="lz4", compression_level=18)
    with pytest.raises(ConfigError) as from_codec:
        codec_for_name("lz4").check_level(18)
    assert str(from_config.value) == str(from_codec.value)
    with pytest.raises(ConfigError, match="must be an int or None"):
        make(compression_type="gzip", compression_level="5")
