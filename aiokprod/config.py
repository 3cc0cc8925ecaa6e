"""Producer options: names, Java 4.x defaults, and validation at construction.

Option names are the Java client's with dots turned into underscores (``linger.ms`` becomes
``linger_ms``). Every check happens in :meth:`ProducerConfig.from_options`, so a wrong name,
type or combination fails where the producer is constructed, with a message naming the option.

Decisions that differ from, or go beyond, the Java client are listed in docs/configuration.md.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokprod.errors import ConfigError
from aiokprod.types import ProducerInterceptor

MAX_INT32 = 2**31 - 1
#: The broker keeps the last five batches per producer and partition for duplicate checks.
MAX_IN_FLIGHT_WITH_IDEMPOTENCE = 5
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONERS = ("builtin", "murmur3", "round_robin")
_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1, -1: -1, 0: 0, 1: 1}

Serializer = Callable[[Any], bytes | None]
#: A custom partitioner: (topic, serialized key, number of partitions, available partitions)
#: -> partition.
PartitionerFunction = Callable[[str, bytes | None, int, Sequence[int]], int]

_client_ids = itertools.count(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig:
    """Every producer option, validated. Build it with :meth:`from_options`.

    Attributes mirror the Java producer's options; see docs/configuration.md for each.
    """

    bootstrap_servers: tuple[tuple[str, int], ...]
    client_id: str
    acks: int = -1
    enable_idempotence: bool = True
    linger_ms: int = 5
    batch_size: int = 16384
    buffer_memory: int = 32 * 1024 * 1024
    max_block_ms: int = 60_000
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    max_in_flight_requests_per_connection: int = 5
    retries: int = MAX_INT32
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1000
    socket_connection_setup_timeout_ms: int = 10_000
    connections_max_idle_ms: int = 540_000
    metadata_max_age_ms: int = 300_000
    metadata_max_idle_ms: int = 300_000
    max_request_size: int = 1024 * 1024
    compression_type: str = "none"
    partitioner: str | PartitionerFunction = "builtin"
    partitioner_ignore_keys: bool = False
    allow_auto_create_topics: bool = True
    key_serializer: Serializer | None = None
    value_serializer: Serializer | None = None
    interceptors: tuple[ProducerInterceptor, ...] = field(default_factory=tuple)

    @classmethod
    def from_options(cls, bootstrap_servers: object = None, **options: Any) -> ProducerConfig:
        """Validate keyword options into a config.

        Raises:
            ConfigError: an unknown option, a wrong type, an impossible value or an
                impossible combination; the message names the option.
        """
        return _build(bootstrap_servers, options)


_INT_OPTIONS: dict[str, tuple[int, int]] = {
    # name: (min, max)
    "linger_ms": (0, MAX_INT32),
    "batch_size": (0, MAX_INT32),
    "buffer_memory": (1, 2**62),
    "max_block_ms": (0, 2**62),
    "delivery_timeout_ms": (0, MAX_INT32),
    "request_timeout_ms": (1, MAX_INT32),
    "max_in_flight_requests_per_connection": (1, MAX_INT32),
    "retries": (0, MAX_INT32),
    "retry_backoff_ms": (0, 2**62),
    "retry_backoff_max_ms": (0, 2**62),
    "reconnect_backoff_ms": (0, 2**62),
    "reconnect_backoff_max_ms": (0, 2**62),
    "socket_connection_setup_timeout_ms": (1, 2**62),
    "connections_max_idle_ms": (-1, 2**62),
    "metadata_max_age_ms": (0, 2**62),
    "metadata_max_idle_ms": (5000, 2**62),
    "max_request_size": (1, MAX_INT32),
}
_BOOL_OPTIONS = ("enable_idempotence", "partitioner_ignore_keys", "allow_auto_create_topics")
_KNOWN = {f.name for f in dataclasses.fields(ProducerConfig)}


def _build(bootstrap_servers: object, options: dict[str, Any]) -> ProducerConfig:
    unknown = sorted(set(options) - _KNOWN)
    if unknown:
        hint = ""
        dotted = [u for u in unknown if "." in u]
        if dotted:
            hint = f" (use underscores: {dotted[0].replace('.', '_')})"
        raise ConfigError(f"unknown producer option(s): {', '.join(unknown)}{hint}")
    values: dict[str, Any] = {"bootstrap_servers": parse_bootstrap_servers(bootstrap_servers)}
    client_id = options.pop("client_id", None)
    if client_id is not None and not isinstance(client_id, str):
        raise ConfigError(f"client_id must be a str, got {type(client_id).__name__}")
    values["client_id"] = client_id or f"aiokprod-producer-{next(_client_ids)}"
    for name, (lo, hi) in _INT_OPTIONS.items():
        if name in options:
            values[name] = _int_option(name, options.pop(name), lo, hi)
    for name in _BOOL_OPTIONS:
        if name in options:
            value = options.pop(name)
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be a bool, got {value!r}")
            values[name] = value
    if "acks" in options:
        acks = options.pop("acks")
        key = acks.lower() if isinstance(acks, str) else acks
        # 1.0 == 1 would find a dict entry: only ints and strs are acks values.
        if isinstance(key, bool) or not isinstance(key, int | str) or key not in _ACKS:
            raise ConfigError(f"acks must be 'all', -1, 0 or 1, got {acks!r}")
        values["acks"] = _ACKS[key]
    if "compression_type" in options:
        codec = options.pop("compression_type")
        codec = "none" if codec is None else codec
        if not isinstance(codec, str) or codec.lower() not in COMPRESSION_TYPES:
            raise ConfigError(f"compression_type must be one of {COMPRESSION_TYPES}, got {codec!r}")
        values["compression_type"] = codec.lower()
    if "partitioner" in options:
        values["partitioner"] = _partitioner_option(options.pop("partitioner"))
    for name in ("key_serializer", "value_serializer"):
        if name in options:
            serializer = options.pop(name)
            if serializer is not None and not callable(serializer):
                raise ConfigError(f"{name} must be callable or None, got {serializer!r}")
            values[name] = serializer
    if "interceptors" in options:
        values["interceptors"] = _interceptors_option(options.pop("interceptors"))
    if options:  # pragma: no cover - every known option is handled above
        raise ConfigError(f"unhandled option(s): {sorted(options)}")
    explicit = set(values)
    _check_combinations(values, explicit)
    return ProducerConfig(**values)


def _int_option(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, got {value!r}")
    if not lo <= value <= hi:
        raise ConfigError(f"{name} must be between {lo} and {hi}, got {value}")
    return value


def _partitioner_option(value: object) -> str | PartitionerFunction:
    if isinstance(value, str):
        if value not in PARTITIONERS:
            raise ConfigError(f"partitioner must be one of {PARTITIONERS} or a callable")
        return value
    if callable(value):
        return value
    raise ConfigError(f"partitioner must be one of {PARTITIONERS} or a callable, got {value!r}")


def _interceptors_option(value: object) -> tuple[ProducerInterceptor, ...]:
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise ConfigError("interceptors must be a sequence of ProducerInterceptor objects")
    for item in value:
        if not isinstance(item, ProducerInterceptor):
            raise ConfigError(
                f"interceptor {item!r} needs on_send(record) and "
                "on_acknowledgement(metadata, exception) methods"
            )
    return tuple(value)


def _check_combinations(values: dict[str, Any], explicit: set[str]) -> None:
    def get(name: str) -> Any:
        if name in values:
            return values[name]
        return ProducerConfig.__dataclass_fields__[name].default

    # Idempotence needs acks=all, retries and at most five requests in flight. Like the Java
    # client: when the user asked for it, a conflict is an error; when it is only the
    # default, the conflicting option wins and idempotence is turned off.
    conflicts = []
    if get("acks") != -1:
        conflicts.append(f"acks={get('acks')} (needs 'all')")
    if get("retries") == 0:
        conflicts.append("retries=0")
    if get("max_in_flight_requests_per_connection") > MAX_IN_FLIGHT_WITH_IDEMPOTENCE:
        conflicts.append(
            "max_in_flight_requests_per_connection="
            f"{get('max_in_flight_requests_per_connection')} (at most 5)"
        )
    if conflicts:
        if "enable_idempotence" in explicit and get("enable_idempotence"):
            raise ConfigError("enable_idempotence=True conflicts with " + ", ".join(conflicts))
        values["enable_idempotence"] = False

    floor = get("linger_ms") + get("request_timeout_ms")
    if get("delivery_timeout_ms") < floor:
        if "delivery_timeout_ms" in explicit:
            raise ConfigError(
                f"delivery_timeout_ms ({get('delivery_timeout_ms')}) must be at least "
                f"linger_ms + request_timeout_ms ({floor})"
            )
        values["delivery_timeout_ms"] = floor
    if get("retry_backoff_max_ms") < get("retry_backoff_ms"):
        if "retry_backoff_max_ms" in explicit:
            raise ConfigError("retry_backoff_max_ms must not be less than retry_backoff_ms")
        values["retry_backoff_max_ms"] = get("retry_backoff_ms")
    if get("reconnect_backoff_max_ms") < get("reconnect_backoff_ms"):
        if "reconnect_backoff_max_ms" in explicit:
            raise ConfigError("reconnect_backoff_max_ms must not be less than reconnect_backoff_ms")
        values["reconnect_backoff_max_ms"] = get("reconnect_backoff_ms")


def parse_bootstrap_servers(value: object) -> tuple[tuple[str, int], ...]:
    """``"h1:9092,h2:9092"`` or a list of ``"host:port"`` into (host, port) pairs.

    Raises:
        ConfigError: missing, empty or malformed addresses.
    """
    if value is None:
        raise ConfigError("bootstrap_servers is required, e.g. '127.0.0.1:9092'")
    if isinstance(value, str):
        items = [s.strip() for s in value.split(",")]
    elif isinstance(value, Sequence) and not isinstance(value, bytes):
        items = []
        for item in value:
            if not isinstance(item, str):
                raise ConfigError(
                    f"bootstrap_servers entries must be 'host:port' strings: {item!r}"
                )
            items.extend(s.strip() for s in item.split(","))
    else:
        raise ConfigError(f"bootstrap_servers must be a str or a list of str, got {value!r}")
    result = []
    for item in items:
        if not item:
            continue
        host, sep, port_text = item.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(f"bootstrap_servers entry {item!r} is not 'host:port'")
        result.append((host, int(port_text)))
    if not result:
        raise ConfigError("bootstrap_servers is empty")
    return tuple(result)


def describe_options(config: ProducerConfig) -> Mapping[str, object]:
    """The config as a plain mapping (for logs and docs; holds no secrets)."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
