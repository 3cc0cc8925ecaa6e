"""Producer options: names, Java 4.x defaults, and validation at construction.

Option names are the Java client's with dots turned into underscores (``linger.ms`` becomes
``linger_ms``). Every check happens in :meth:`ProducerConfig.from_options`, so a wrong name,
type or combination fails where the producer is constructed, with a message naming the option.

Decisions that differ from, or go beyond, the Java client are listed in docs/configuration.md.
"""

from __future__ import annotations

import dataclasses
import hmac
import itertools
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from aiokprod.errors import ConfigError
from aiokprod.types import ProducerInterceptor

MAX_INT32 = 2**31 - 1
#: The broker keeps the last five batches per producer and partition for duplicate checks.
MAX_IN_FLIGHT_WITH_IDEMPOTENCE = 5
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
#: codec -> (lowest level, highest level, default level), as the Java client's
#: ``compression.<codec>.level`` options; gzip's default -1 means zlib's default (6).
COMPRESSION_LEVEL_RANGES: dict[str, tuple[int, int, int]] = {
    "gzip": (1, 9, -1),
    "lz4": (1, 17, 9),
    "zstd": (-131072, 22, 3),
}
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
PARTITIONERS = ("builtin", "murmur3", "round_robin")
_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1, -1: -1, 0: 0, 1: 1}

Serializer = Callable[[Any], bytes | None]
#: A custom partitioner: (topic, serialized key, number of partitions, available partitions)
#: -> partition.
PartitionerFunction = Callable[[str, bytes | None, int, Sequence[int]], int]

#: Returns an OAuth 2 bearer token (a JWT, usually) for OAUTHBEARER; awaited per connection.
TokenProvider = Callable[[], Awaitable[str]]

_client_ids = itertools.count(1)


class Secret:
    """A credential whose ``repr``/``str`` is ``***``, so it never shows in logs or errors.

    Options that hold secrets (``sasl_plain_password``, ``ssl_password``) accept a plain
    ``str`` or a ``Secret``; the config always stores a ``Secret``. :meth:`reveal` is called
    only where the value goes on the wire or into OpenSSL.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret value itself."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __format__(self, spec: str) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self) -> Any:
        # Pickling would write the value out in clear; configs are not meant to travel.
        raise TypeError("a Secret cannot be pickled")

    def __copy__(self) -> Secret:
        return self  # immutable

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self


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
    compression_level: int | None = None
    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: Secret | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True
    sasl_mechanism: str = "PLAIN"
    sasl_plain_username: str | None = None
    sasl_plain_password: Secret | None = field(default=None, repr=False)
    sasl_oauth_token_provider: TokenProvider | None = field(default=None, repr=False)
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
_BOOL_OPTIONS = (
    "enable_idempotence",
    "partitioner_ignore_keys",
    "allow_auto_create_topics",
    "ssl_check_hostname",
)
_SECRET_OPTIONS = frozenset({"ssl_password", "sasl_plain_password", "sasl_oauth_token_provider"})
_SSL_FILE_OPTIONS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
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
    if "compression_level" in options:
        level = options.pop("compression_level")
        if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
            raise ConfigError(f"compression_level must be an int or None, got {level!r}")
        values["compression_level"] = level
    _security_options(options, values)
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
    _check_compression_level(values)
    _check_security(values)
    return ProducerConfig(**values)


def _check_compression_level(values: dict[str, Any]) -> None:
    level = values.get("compression_level")
    if level is None:
        return
    codec = values.get("compression_type", "none")
    spec = COMPRESSION_LEVEL_RANGES.get(codec)
    if spec is None:
        raise ConfigError(
            f"compression_level is set ({level}) but compression_type {codec!r} has no levels "
            f"(levels exist for {', '.join(COMPRESSION_LEVEL_RANGES)})"
        )
    lo, hi, default = spec
    if not (lo <= level <= hi or level == default):
        raise ConfigError(
            f"compression_level for {codec} must be between {lo} and {hi}, got {level}"
        )


def _security_options(options: dict[str, Any], values: dict[str, Any]) -> None:
    """Type checks of the TLS and SASL options (their combinations: _check_security)."""
    if "security_protocol" in options:
        protocol = options.pop("security_protocol")
        if not isinstance(protocol, str) or protocol.upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"security_protocol must be one of {SECURITY_PROTOCOLS}, got {protocol!r}"
            )
        values["security_protocol"] = protocol.upper()
    if "ssl_context" in options:
        context = options.pop("ssl_context")
        if context is not None and not isinstance(context, ssl.SSLContext):
            raise ConfigError(
                f"ssl_context must be an ssl.SSLContext, got {type(context).__name__}"
            )
        values["ssl_context"] = context
    for name in _SSL_FILE_OPTIONS:
        if name in options:
            path = options.pop(name)
            if path is None:
                continue
            if not isinstance(path, str | os.PathLike):
                raise ConfigError(f"{name} must be a file path, got {type(path).__name__}")
            text = os.fspath(path)
            if not isinstance(text, str) or not os.path.isfile(text):
                raise ConfigError(f"{name}: no such file: {text!r}")
            values[name] = text
    for name in ("ssl_password", "sasl_plain_password"):
        if name in options:
            secret = options.pop(name)
            if secret is None:
                continue
            if isinstance(secret, str):
                secret = Secret(secret)
            elif not isinstance(secret, Secret):
                # Never echo the value: it may be the password in a wrong type.
                raise ConfigError(f"{name} must be a str or Secret, got {type(secret).__name__}")
            values[name] = secret
    if "sasl_mechanism" in options:
        mechanism = options.pop("sasl_mechanism")
        if not isinstance(mechanism, str) or mechanism.upper() not in SASL_MECHANISMS:
            raise ConfigError(f"sasl_mechanism must be one of {SASL_MECHANISMS}, got {mechanism!r}")
        values["sasl_mechanism"] = mechanism.upper()
    if "sasl_plain_username" in options:
        username = options.pop("sasl_plain_username")
        if username is not None and (not isinstance(username, str) or not username):
            raise ConfigError("sasl_plain_username must be a non-empty str")
        values["sasl_plain_username"] = username
    if "sasl_oauth_token_provider" in options:
        provider = options.pop("sasl_oauth_token_provider")
        if provider is not None and not callable(provider):
            raise ConfigError(
                "sasl_oauth_token_provider must be an async function returning the token, "
                f"got {type(provider).__name__}"
            )
        values["sasl_oauth_token_provider"] = provider


def _check_security(values: dict[str, Any]) -> None:
    protocol = values.get("security_protocol", "PLAINTEXT")
    uses_tls = protocol in ("SSL", "SASL_SSL")
    uses_sasl = protocol.startswith("SASL_")
    tls_set = [n for n in ("ssl_context", *_SSL_FILE_OPTIONS, "ssl_password") if values.get(n)]
    if "ssl_check_hostname" in values and not values["ssl_check_hostname"]:
        tls_set.append("ssl_check_hostname")
    if tls_set and not uses_tls:
        raise ConfigError(
            f"{', '.join(tls_set)} set but security_protocol is {protocol!r} "
            "(use 'SSL' or 'SASL_SSL' for TLS)"
        )
    if values.get("ssl_context") is not None:
        clash = [n for n in (*_SSL_FILE_OPTIONS, "ssl_password") if values.get(n)]
        if clash:
            raise ConfigError(
                f"ssl_context cannot be combined with {', '.join(clash)}: "
                "load them into the context yourself"
            )
        if "ssl_check_hostname" in values:
            raise ConfigError("ssl_check_hostname does not apply to a ready ssl_context")
    if values.get("ssl_keyfile") and not values.get("ssl_certfile"):
        raise ConfigError("ssl_keyfile needs ssl_certfile (the client certificate)")
    if values.get("ssl_password") and not values.get("ssl_certfile"):
        raise ConfigError("ssl_password decrypts the client key: it needs ssl_certfile")
    sasl_set = [
        n
        for n in (
            "sasl_mechanism",
            "sasl_plain_username",
            "sasl_plain_password",
            "sasl_oauth_token_provider",
        )
        if values.get(n) is not None
    ]
    if sasl_set and not uses_sasl:
        raise ConfigError(
            f"{', '.join(sasl_set)} set but security_protocol is {protocol!r} "
            "(use 'SASL_PLAINTEXT' or 'SASL_SSL' for SASL)"
        )
    if not uses_sasl:
        return
    mechanism = values.get("sasl_mechanism", "PLAIN")
    if mechanism == "OAUTHBEARER":
        if values.get("sasl_oauth_token_provider") is None:
            raise ConfigError("sasl_mechanism OAUTHBEARER needs sasl_oauth_token_provider")
        stray = [n for n in ("sasl_plain_username", "sasl_plain_password") if n in values]
        if stray:
            raise ConfigError(f"{', '.join(stray)} do not apply to OAUTHBEARER")
        return
    missing = [n for n in ("sasl_plain_username", "sasl_plain_password") if not values.get(n)]
    if missing:
        raise ConfigError(f"sasl_mechanism {mechanism} needs {' and '.join(missing)}")
    if values.get("sasl_oauth_token_provider") is not None:
        raise ConfigError(f"sasl_oauth_token_provider does not apply to {mechanism}")


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
    """The config as a plain mapping (for logs and docs; secrets are shown as ``***``)."""
    return {
        f.name: (
            "***"
            if f.name in _SECRET_OPTIONS and getattr(config, f.name) is not None
            else getattr(config, f.name)
        )
        for f in dataclasses.fields(config)
    }


class OptionDoc(NamedTuple):
    """How docs/configuration.md describes an option (the page is generated from these)."""

    #: The Java producer's name for it, or None when the Java client has no such option.
    java: str | None
    #: What it does, in Markdown (one paragraph).
    text: str


#: The description of every ProducerConfig field, rendered by docs/gen_config.py into the
#: configuration reference. A field without an entry here fails the docs build.
OPTION_DOCS: dict[str, OptionDoc] = {
    "bootstrap_servers": OptionDoc(
        "bootstrap.servers",
        '`"host:port"`, comma-separated, or a list of them: the brokers asked for the '
        "cluster's metadata first. The first argument of `Producer(...)`; required.",
    ),
    "client_id": OptionDoc(
        "client.id",
        "Sent with every request; shows in broker logs and quotas. "
        "Default: `aiokprod-producer-N` (N counts producers in the process).",
    ),
    "acks": OptionDoc(
        "acks",
        '`"all"` (or -1): the leader answers once every in-sync replica has the batch; '
        "`1`: once the leader has it; `0`: no answer at all (offsets are then unknown, -1).",
    ),
    "enable_idempotence": OptionDoc(
        "enable.idempotence",
        "Producer id and per-partition sequence numbers, so retries neither duplicate nor "
        "reorder records. Needs `acks=all`, `retries > 0` and at most 5 requests in flight.",
    ),
    "linger_ms": OptionDoc(
        "linger.ms",
        "How long a batch waits for more records before it is sent (from its first "
        "record). `send_and_wait()` and `flush()` do not wait it out.",
    ),
    "batch_size": OptionDoc(
        "batch.size",
        "Bytes of records per partition batch before the batch is closed (a larger record "
        "gets a batch of its own). Also the size after which the sticky partitioner moves "
        "unkeyed records to another partition.",
    ),
    "buffer_memory": OptionDoc(
        "buffer.memory",
        "Bytes that all queued and in-flight batches may hold. When it is used up, `send()` "
        "waits up to `max_block_ms` for room, then raises `BufferExhaustedError`.",
    ),
    "max_block_ms": OptionDoc(
        "max.block.ms",
        "How long `send()` (and `partitions_for()`) may wait, in total, for the topic's "
        "metadata and for buffer space.",
    ),
    "delivery_timeout_ms": OptionDoc(
        "delivery.timeout.ms",
        "Upper bound from `send()` returning to the record being acknowledged or failed, "
        "retries included; then it fails with `DeliveryTimeoutError`. At least "
        "`linger_ms + request_timeout_ms`.",
    ),
    "request_timeout_ms": OptionDoc(
        "request.timeout.ms",
        "How long to wait for the answer to one request (the connection is closed and the "
        "batches retried after it); also the Produce request's `timeout_ms` for the broker.",
    ),
    "max_in_flight_requests_per_connection": OptionDoc(
        "max.in.flight.requests.per.connection",
        "Unanswered requests per broker connection. At most 5 with idempotence (which keeps "
        "order across retries); without idempotence, more than 1 may reorder on retry.",
    ),
    "retries": OptionDoc(
        "retries",
        "How often a failed batch is retried. Leave it at the maximum and bound retrying "
        "with `delivery_timeout_ms`; 0 turns idempotence off (or conflicts with it).",
    ),
    "retry_backoff_ms": OptionDoc(
        "retry.backoff.ms",
        "First wait before retrying a failed batch or metadata request; doubles on each "
        "attempt (±20% jitter) up to `retry_backoff_max_ms`.",
    ),
    "retry_backoff_max_ms": OptionDoc("retry.backoff.max.ms", "The longest wait between retries."),
    "reconnect_backoff_ms": OptionDoc(
        "reconnect.backoff.ms",
        "First wait before reconnecting to a broker; doubles up to `reconnect_backoff_max_ms`.",
    ),
    "reconnect_backoff_max_ms": OptionDoc(
        "reconnect.backoff.max.ms", "The longest wait between connection attempts to a broker."
    ),
    "socket_connection_setup_timeout_ms": OptionDoc(
        "socket.connection.setup.timeout.ms",
        "Bound on opening a connection and its handshakes (ApiVersions; TLS and SASL when used).",
    ),
    "connections_max_idle_ms": OptionDoc(
        "connections.max.idle.ms",
        "Accepted for compatibility with the Java client; idle connections are kept open.",
    ),
    "metadata_max_age_ms": OptionDoc(
        "metadata.max.age.ms",
        "Refresh the cluster metadata at least this often, even without errors (errors such "
        "as NOT_LEADER_OR_FOLLOWER refresh it at once).",
    ),
    "metadata_max_idle_ms": OptionDoc(
        "metadata.max.idle.ms",
        "Stop refreshing the metadata of a topic no record was sent to for this long "
        "(at least 5000).",
    ),
    "max_request_size": OptionDoc(
        "max.request.size",
        "Bytes per Produce request, and so the largest record: a larger one raises "
        "`RecordTooLargeError` in `send()`.",
    ),
    "compression_type": OptionDoc(
        "compression.type",
        '`"none"`, `"gzip"`, `"snappy"`, `"lz4"` or `"zstd"`: how batches are compressed '
        "(per batch, so larger batches compress better).",
    ),
    "compression_level": OptionDoc(
        "compression.gzip.level / compression.lz4.level / compression.zstd.level",
        "The level for the chosen codec (gzip 1 to 9, lz4 1 to 17, zstd -131072 to 22); None uses "
        "the codec's default, as the Java client does.",
    ),
    "security_protocol": OptionDoc(
        "security.protocol",
        '`"PLAINTEXT"`, `"SSL"` (TLS), `"SASL_PLAINTEXT"` or `"SASL_SSL"` (SASL over TLS).',
    ),
    "ssl_context": OptionDoc(
        None,
        "A ready `ssl.SSLContext` for TLS, instead of the `ssl_*` file options.",
    ),
    "ssl_cafile": OptionDoc(
        "ssl.truststore.location (PEM)",
        "PEM file of the certificate authorities that signed the brokers' certificates "
        "(default: the system's).",
    ),
    "ssl_certfile": OptionDoc(
        "ssl.keystore.location (PEM)",
        "PEM file of this client's certificate, for brokers that require TLS client "
        "authentication.",
    ),
    "ssl_keyfile": OptionDoc(
        "ssl.keystore.key",
        "PEM file of the private key of `ssl_certfile` (if it is not in that file).",
    ),
    "ssl_password": OptionDoc(
        "ssl.key.password",
        "Password of the client's private key (a `str` or `Secret`; never shown in logs).",
    ),
    "ssl_check_hostname": OptionDoc(
        "ssl.endpoint.identification.algorithm",
        "Check that each broker's certificate names the host connected to.",
    ),
    "sasl_mechanism": OptionDoc(
        "sasl.mechanism",
        '`"PLAIN"`, `"SCRAM-SHA-256"`, `"SCRAM-SHA-512"` or `"OAUTHBEARER"`.',
    ),
    "sasl_plain_username": OptionDoc(
        "sasl.jaas.config (username)", "User name for PLAIN and SCRAM."
    ),
    "sasl_plain_password": OptionDoc(
        "sasl.jaas.config (password)",
        "Password for PLAIN and SCRAM (a `str` or `Secret`; never shown in logs or errors).",
    ),
    "sasl_oauth_token_provider": OptionDoc(
        "sasl.login.callback.handler.class",
        "For OAUTHBEARER: an async function returning a bearer token; awaited for each connection.",
    ),
    "partitioner": OptionDoc(
        "partitioner.class",
        '`"builtin"`: keyed records by murmur2 of the key, as the Java client (same key, '
        'same partition); unkeyed ones uniform sticky. `"murmur3"`, `"round_robin"`, or a '
        "function `(topic, key_bytes, num_partitions, available_partitions) -> partition`.",
    ),
    "partitioner_ignore_keys": OptionDoc(
        "partitioner.ignore.keys",
        "Partition keyed records like unkeyed ones (sticky), ignoring the key.",
    ),
    "allow_auto_create_topics": OptionDoc(
        None,
        "Let the brokers create a topic on its first metadata request (if the brokers "
        "allow it, `auto.create.topics.enable`). False: an unknown topic makes `send()` "
        "fail after `max_block_ms`.",
    ),
    "key_serializer": OptionDoc(
        "key.serializer",
        "A function turning a key into `bytes` (or None). Without it keys must be `bytes`, "
        "`bytearray`, `memoryview`, `str` (UTF-8) or None.",
    ),
    "value_serializer": OptionDoc(
        "value.serializer",
        "A function turning a value into `bytes` (or None); the same default as keys.",
    ),
    "interceptors": OptionDoc(
        "interceptor.classes",
        "Objects with `on_send(record)` (may return a changed record) and "
        "`on_acknowledgement(metadata, exception)`; run on the event loop, errors logged.",
    ),
}
