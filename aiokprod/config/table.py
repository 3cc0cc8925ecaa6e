"""The option table: every producer option, declared once, as a field of ProducerConfig.

Each field is a row: its name and stored type, then :func:`~aiokprod.config.spec.option`
with the default, the check, the Java name, the doc text (docs/configuration.md), the docs
group and the secret flag. Rows are in the order of the docs page. To add an option, add a
row here, then run ``python docs/gen_config.py --write`` (it regenerates
:class:`ProducerOptions` in ``typed_options.py`` and the docs page); CONTRIBUTING.md has the
details.
"""

from __future__ import annotations

import itertools
import ssl
from collections.abc import Mapping
from typing import Any

from aiokprod.config import checks
from aiokprod.config import spec as c
from aiokprod.config.secret import PartitionerFunction, Secret, Serializer, TokenProvider
from aiokprod.config.spec import MAX_INT32, MAX_INT64, Option, option, option_table
from aiokprod.errors import ConfigError, IllegalStateError
from aiokprod.types import ProducerInterceptor

_client_ids = itertools.count(1)

_CONNECTING = "Connecting"
_DELIVERY = "Delivery"
_BATCHING = "Batching and memory"
_METADATA = "Metadata and partitioning"
_SECURITY = "Security (TLS and SASL)"
_HOOKS = "Serialization and hooks"
_METRICS = "Metrics"


@option_table
class ProducerConfig:
    """Every producer option, validated. Build it with :meth:`from_options`.

    Attributes mirror the Java producer's options; see docs/configuration.md for each.
    """

    # --- Connecting -----------------------------------------------------------------------
    bootstrap_servers: tuple[tuple[str, int], ...] = option(
        check=c.bootstrap_servers,
        group=_CONNECTING,
        java="bootstrap.servers",
        shown_default="(required)",
        accepts="str | Sequence[str]",
        doc='`"host:port"`, comma-separated, or a list of them: the brokers asked for the '
        "cluster's metadata first. The first argument of `Producer(...)`; required.",
    )
    client_id: str = option(
        check=c.optional_str,
        group=_CONNECTING,
        java="client.id",
        shown_default="`aiokprod-producer-N`",
        accepts="str | None",
        doc="Sent with every request; shows in broker logs and quotas. "
        "Default: `aiokprod-producer-N` (N counts producers in the process).",
    )
    socket_connection_setup_timeout_ms: int = option(
        default=10_000,
        check=c.int_between(1, MAX_INT64),
        group=_CONNECTING,
        java="socket.connection.setup.timeout.ms",
        doc="Bound on opening a connection and its handshakes (ApiVersions; TLS and SASL when "
        "used).",
    )
    reconnect_backoff_ms: int = option(
        default=50,
        check=c.int_between(0, MAX_INT64),
        group=_CONNECTING,
        java="reconnect.backoff.ms",
        doc="First wait before reconnecting to a broker; doubles up to `reconnect_backoff_max_ms`.",
    )
    reconnect_backoff_max_ms: int = option(
        default=1000,
        check=c.int_between(0, MAX_INT64),
        group=_CONNECTING,
        java="reconnect.backoff.max.ms",
        doc="The longest wait between connection attempts to a broker.",
    )
    connections_max_idle_ms: int = option(
        default=540_000,
        check=c.int_between(-1, MAX_INT64),
        group=_CONNECTING,
        java="connections.max.idle.ms",
        doc="Accepted for compatibility with the Java client; idle connections are kept open.",
    )

    # --- Delivery -------------------------------------------------------------------------
    acks: int = option(
        default=-1,
        check=c.acks,
        group=_DELIVERY,
        java="acks",
        shown_default='`"all"` (-1)',
        accepts='int | Literal["all", "-1", "0", "1"]',
        doc='`"all"` (or -1): the leader answers once every in-sync replica has the batch; '
        "`1`: once the leader has it; `0`: no answer at all (offsets are then unknown, -1).",
    )
    enable_idempotence: bool = option(
        default=True,
        check=c.boolean,
        group=_DELIVERY,
        java="enable.idempotence",
        doc="Producer id and per-partition sequence numbers, so retries neither duplicate nor "
        "reorder records. Needs `acks=all`, `retries > 0` and at most 5 requests in flight.",
    )
    transactional_id: str | None = option(
        default=None,
        check=c.optional_str,
        group=_DELIVERY,
        java="transactional.id",
        accepts="str | None",
        doc="Makes the producer transactional (docs/transactions.md): `start()` fences older "
        "producers with the same id, and records are sent only inside `begin_transaction()` "
        "... `commit_transaction()`. Needs idempotence.",
    )
    transaction_timeout_ms: int = option(
        default=60_000,
        check=c.int_between(1, MAX_INT32),
        group=_DELIVERY,
        java="transaction.timeout.ms",
        doc="How long the transaction coordinator lets a transaction stay open before it "
        "aborts it; at most the broker's `transaction.max.timeout.ms` (default 900000).",
    )
    delivery_timeout_ms: int = option(
        default=120_000,
        check=c.int_between(0, MAX_INT32),
        group=_DELIVERY,
        java="delivery.timeout.ms",
        doc="Upper bound from `send()` returning to the record being acknowledged or failed, "
        "retries included; then it fails with `DeliveryTimeoutError`. At least "
        "`linger_ms + request_timeout_ms`.",
    )
    request_timeout_ms: int = option(
        default=30_000,
        check=c.int_between(1, MAX_INT32),
        group=_DELIVERY,
        java="request.timeout.ms",
        doc="How long to wait for the answer to one request (the connection is closed and the "
        "batches retried after it); also the Produce request's `timeout_ms` for the broker.",
    )
    max_in_flight_requests_per_connection: int = option(
        default=5,
        check=c.int_between(1, MAX_INT32),
        group=_DELIVERY,
        java="max.in.flight.requests.per.connection",
        doc="Unanswered requests per broker connection. At most 5 with idempotence (which "
        "keeps order across retries); without idempotence, more than 1 may reorder on retry.",
    )
    retries: int = option(
        default=MAX_INT32,
        check=c.int_between(0, MAX_INT32),
        group=_DELIVERY,
        java="retries",
        shown_default="`2147483647` (Java's `Integer.MAX_VALUE`)",
        doc="How often a failed batch is retried. Leave it at the maximum and bound retrying "
        "with `delivery_timeout_ms`; 0 turns idempotence off (or conflicts with it).",
    )
    retry_backoff_ms: int = option(
        default=100,
        check=c.int_between(0, MAX_INT64),
        group=_DELIVERY,
        java="retry.backoff.ms",
        doc="First wait before retrying a failed batch or metadata request; doubles on each "
        "attempt (±20% jitter) up to `retry_backoff_max_ms`.",
    )
    retry_backoff_max_ms: int = option(
        default=1000,
        check=c.int_between(0, MAX_INT64),
        group=_DELIVERY,
        java="retry.backoff.max.ms",
        doc="The longest wait between retries.",
    )

    # --- Batching and memory --------------------------------------------------------------
    linger_ms: int = option(
        default=5,
        check=c.int_between(0, MAX_INT32),
        group=_BATCHING,
        java="linger.ms",
        doc="How long a batch waits for more records before it is sent (from its first "
        "record). `send_and_wait()` and `flush()` do not wait it out.",
    )
    batch_size: int = option(
        default=16384,
        check=c.int_between(0, MAX_INT32),
        group=_BATCHING,
        java="batch.size",
        doc="Bytes of records per partition batch before the batch is closed (a larger record "
        "gets a batch of its own). Also the size after which the sticky partitioner moves "
        "unkeyed records to another partition.",
    )
    buffer_memory: int = option(
        default=32 * 1024 * 1024,
        check=c.int_between(1, MAX_INT64),
        group=_BATCHING,
        java="buffer.memory",
        doc="Bytes that all queued and in-flight batches may hold. When it is used up, "
        "`send()` waits up to `max_block_ms` for room, then raises `BufferExhaustedError`.",
    )
    max_block_ms: int = option(
        default=60_000,
        check=c.int_between(0, MAX_INT64),
        group=_BATCHING,
        java="max.block.ms",
        doc="How long `send()` (and `partitions_for()`) may wait, in total, for the topic's "
        "metadata and for buffer space.",
    )
    max_request_size: int = option(
        default=1024 * 1024,
        check=c.int_between(1, MAX_INT32),
        group=_BATCHING,
        java="max.request.size",
        doc="Bytes per Produce request, and so the largest record: a larger one raises "
        "`RecordTooLargeError` in `send()`.",
    )
    compression_type: str = option(
        default="none",
        check=c.compression_type,
        group=_BATCHING,
        java="compression.type",
        accepts='Literal["none", "gzip", "snappy", "lz4", "zstd"] | None',
        doc='`"none"`, `"gzip"`, `"snappy"`, `"lz4"` or `"zstd"`: how batches are compressed '
        "(per batch, so larger batches compress better).",
    )
    compression_level: int | None = option(
        default=None,
        check=c.compression_level,
        group=_BATCHING,
        java=("compression.gzip.level", "compression.lz4.level", "compression.zstd.level"),
        doc="The level for the chosen codec (gzip 1 to 9, lz4 1 to 17, zstd -131072 to 22); "
        "None uses the codec's default, as the Java client does.",
    )

    # --- Metadata and partitioning --------------------------------------------------------
    metadata_max_age_ms: int = option(
        default=300_000,
        check=c.int_between(0, MAX_INT64),
        group=_METADATA,
        java="metadata.max.age.ms",
        doc="Refresh the metadata of every topic in use at least this often, even without "
        "errors (an error such as NOT_LEADER_OR_FOLLOWER refreshes the topic concerned at once).",
    )
    metadata_max_idle_ms: int = option(
        default=300_000,
        check=c.int_between(5000, MAX_INT64),
        group=_METADATA,
        java="metadata.max.idle.ms",
        doc="Forget a topic no record was sent to for this long (at least 5000), once nothing "
        "of it is queued or in flight: its metadata is no longer refreshed, and what the "
        "producer holds for it (metadata, per-topic metrics, sequence numbers) is released.",
    )
    allow_auto_create_topics: bool = option(
        default=True,
        check=c.boolean,
        group=_METADATA,
        doc="Let the brokers create a topic on its first metadata request (if the brokers "
        "allow it, `auto.create.topics.enable`). False: an unknown topic makes `send()` "
        "fail after `max_block_ms`.",
    )
    partitioner: str | PartitionerFunction = option(
        default="builtin",
        check=c.partitioner,
        group=_METADATA,
        java_note="partitioner.class",
        accepts='Literal["builtin", "murmur3", "round_robin"] | PartitionerFunction',
        doc='`"builtin"`: keyed records by murmur2 of the key, as the Java client (same key, '
        'same partition); unkeyed ones uniform sticky. `"murmur3"`, `"round_robin"`, or a '
        "function `(topic, key_bytes, num_partitions, available_partitions) -> partition`.",
    )
    partitioner_ignore_keys: bool = option(
        default=False,
        check=c.boolean,
        group=_METADATA,
        java="partitioner.ignore.keys",
        doc="Partition keyed records like unkeyed ones (sticky), ignoring the key.",
    )
    partitioner_adaptive_partitioning: bool = option(
        default=True,
        check=c.boolean,
        group=_METADATA,
        java="partitioner.adaptive.partitioning.enable",
        doc="When the sticky partitioner moves unkeyed records to another partition, favour "
        "partitions with fewer batches queued (leaders that keep up), as the Java client "
        "does. False: every partition with a leader is equally likely. No effect with a "
        "custom or `round_robin` partitioner.",
    )
    partitioner_availability_timeout_ms: int = option(
        default=0,
        check=c.int_between(0, MAX_INT64),
        group=_METADATA,
        java="partitioner.availability.timeout.ms",
        doc="With adaptive partitioning: a leader that had data ready but could not take a "
        "request for longer than this is skipped by the sticky partitioner until it takes "
        "one again. 0 turns the check off.",
    )
    partitioner_working_set_size: int = option(
        default=8,
        check=c.int_between(0, MAX_INT32),
        group=_METADATA,
        doc="On a topic with more partitions than this, the sticky partitioner moves unkeyed "
        "records among this many partitions, drawn at random (adaptive or uniform, as a "
        "move is) and drawn again after `partitioner_working_set_ms`: every partition gets "
        "its share over time, while a large topic is not written to hundreds of partitions "
        "a second (a fresh 1,000-partition topic ran 5 times slower that way). 0: move "
        "among all partitions, exactly the Java client's rule (which has no such option).",
    )
    partitioner_working_set_ms: int = option(
        default=100,
        check=c.int_between(1, MAX_INT32),
        group=_METADATA,
        doc="How long the sticky partitioner keeps one working set "
        "(`partitioner_working_set_size`); a new set is drawn at its first move after this. "
        "librdkafka's `sticky.partitioning.linger.ms` serves the same end (docs/design.md).",
    )

    # --- Security (TLS and SASL) ----------------------------------------------------------
    security_protocol: str = option(
        default="PLAINTEXT",
        check=c.upper_one_of(c.SECURITY_PROTOCOLS),
        group=_SECURITY,
        java="security.protocol",
        accepts='Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]',
        doc='`"PLAINTEXT"`, `"SSL"` (TLS), `"SASL_PLAINTEXT"` or `"SASL_SSL"` (SASL over TLS).',
    )
    ssl_context: ssl.SSLContext | None = option(
        default=None,
        check=c.ssl_context,
        group=_SECURITY,
        doc="A ready `ssl.SSLContext` for TLS, instead of the `ssl_*` file options.",
    )
    ssl_cafile: str | None = option(
        default=None,
        check=c.file_path,
        group=_SECURITY,
        java_note="ssl.truststore.location (PEM)",
        accepts="str | os.PathLike[str] | None",
        doc="PEM file of the certificate authorities that signed the brokers' certificates "
        "(default: the system's).",
    )
    ssl_certfile: str | None = option(
        default=None,
        check=c.file_path,
        group=_SECURITY,
        java_note="ssl.keystore.location (PEM)",
        accepts="str | os.PathLike[str] | None",
        doc="PEM file of this client's certificate, for brokers that require TLS client "
        "authentication.",
    )
    ssl_keyfile: str | None = option(
        default=None,
        check=c.file_path,
        group=_SECURITY,
        java_note="ssl.keystore.key",
        accepts="str | os.PathLike[str] | None",
        doc="PEM file of the private key of `ssl_certfile` (if it is not in that file).",
    )
    ssl_password: Secret | None = option(
        default=None,
        check=c.secret,
        group=_SECURITY,
        java="ssl.key.password",
        secret=True,
        accepts="str | Secret | None",
        doc="Password of the client's private key (a `str` or `Secret`; never shown in logs).",
    )
    ssl_check_hostname: bool = option(
        default=True,
        check=c.boolean,
        group=_SECURITY,
        java_note="ssl.endpoint.identification.algorithm",
        doc="Check that each broker's certificate names the host connected to.",
    )
    sasl_mechanism: str = option(
        default="PLAIN",
        check=c.upper_one_of(c.SASL_MECHANISMS),
        group=_SECURITY,
        java="sasl.mechanism",
        accepts='Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]',
        doc='`"PLAIN"`, `"SCRAM-SHA-256"`, `"SCRAM-SHA-512"`, `"OAUTHBEARER"` or `"GSSAPI"` '
        "(Kerberos; needs `pip install 'aiokprod[gssapi]'`).",
    )
    sasl_plain_username: str | None = option(
        default=None,
        check=c.non_empty_str,
        group=_SECURITY,
        java_note="sasl.jaas.config (username)",
        doc="User name for PLAIN and SCRAM.",
    )
    sasl_plain_password: Secret | None = option(
        default=None,
        check=c.secret,
        group=_SECURITY,
        java_note="sasl.jaas.config (password)",
        secret=True,
        accepts="str | Secret | None",
        doc="Password for PLAIN and SCRAM (a `str` or `Secret`; never shown in logs or errors).",
    )
    sasl_oauth_token_provider: TokenProvider | None = option(
        default=None,
        check=c.token_provider,
        group=_SECURITY,
        java_note="sasl.login.callback.handler.class",
        secret=True,
        doc="For OAUTHBEARER: an async function returning a bearer token; awaited for each "
        "connection.",
    )
    sasl_kerberos_service_name: str = option(
        default="kafka",
        check=c.kerberos_name_part,
        group=_SECURITY,
        java="sasl.kerberos.service.name",
        doc="GSSAPI: the service part of the brokers' principals (`kafka/host@REALM`).",
    )
    sasl_kerberos_domain_name: str | None = option(
        default=None,
        check=c.kerberos_name_part,
        group=_SECURITY,
        doc="GSSAPI: the host part of the brokers' principals for every broker. Default: the "
        "host each connection goes to, as written (bootstrap, then advertised), no DNS.",
    )
    sasl_kerberos_principal: str | None = option(
        default=None,
        check=c.non_empty_str,
        group=_SECURITY,
        java_note="sasl.jaas.config (principal)",
        doc="GSSAPI: the client principal. Default: the ticket cache's, or the keytab's first.",
    )
    sasl_kerberos_keytab: str | None = option(
        default=None,
        check=c.file_path,
        group=_SECURITY,
        java_note="sasl.jaas.config (keyTab)",
        accepts="str | os.PathLike[str] | None",
        doc="GSSAPI: a keytab to get (and renew) tickets from. Default: the ticket cache "
        "(`kinit`, `KRB5CCNAME`), then `KRB5_CLIENT_KTNAME`.",
    )

    # --- Serialization and hooks ----------------------------------------------------------
    key_serializer: Serializer | None = option(
        default=None,
        check=c.optional_callable,
        group=_HOOKS,
        java_note="key.serializer",
        doc="A function turning a key into `bytes` (or None). Without it keys must be "
        "`bytes`, `bytearray`, `memoryview`, `str` (UTF-8) or None. It may be a coroutine "
        "function (awaited), and may take a second argument, a `SerializationContext` "
        "(topic, field, headers) as Schema Registry serializers do: a second positional "
        "parameter without a default, or one named `ctx`/`context`.",
    )
    value_serializer: Serializer | None = option(
        default=None,
        check=c.optional_callable,
        group=_HOOKS,
        java_note="value.serializer",
        doc="A function turning a value into `bytes` (or None); the same default and the "
        "same forms as `key_serializer` (coroutine functions, a `SerializationContext`). "
        "With a coroutine or context serializer `send_many()` serializes record by record.",
    )
    interceptors: tuple[ProducerInterceptor, ...] = option(
        default=(),
        check=c.interceptors,
        group=_HOOKS,
        java_note="interceptor.classes",
        accepts="Sequence[ProducerInterceptor] | None",
        doc="Objects with `on_send(record)` (may return a changed record) and "
        "`on_acknowledgement(metadata, exception)`; run on the event loop, errors logged.",
    )

    # --- Metrics --------------------------------------------------------------------------
    enable_metrics_push: bool = option(
        default=True,
        check=c.boolean,
        group=_METRICS,
        java="enable.metrics.push",
        doc="Push the producer's metrics to the cluster when its operators subscribe to them "
        "(KIP-714 client telemetry; only brokers with a telemetry receiver ask). False: no "
        "telemetry request is ever sent. [Metrics](metrics.md#pushed-to-the-broker-kip-714).",
    )

    @classmethod
    def from_options(cls, bootstrap_servers: object = None, **options: Any) -> ProducerConfig:
        """Validate keyword options into a config.

        An option given as None is as if it were not given, where the option accepts None.

        Raises:
            ConfigError: an unknown option, a wrong type, an impossible value or an
                impossible combination; the message names the option.
        """
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            named = ", ".join(name + c.did_you_mean(name, OPTIONS) for name in unknown)
            raise ConfigError(f"unknown producer option{'s' if len(unknown) > 1 else ''}: {named}")
        values: dict[str, Any] = {"bootstrap_servers": c.parse_bootstrap_servers(bootstrap_servers)}
        for name, spec in OPTIONS.items():
            if name in options:
                value = spec.check(name, options[name])
                if value is not None:
                    values[name] = value
        checks.check_all(values, lambda name: OPTIONS[name].default)
        values.setdefault("client_id", f"aiokprod-producer-{next(_client_ids)}")
        return cls(**values)

    @classmethod
    def resolve(
        cls,
        bootstrap_servers: object,
        config: ProducerConfig | None,
        options: Mapping[str, Any],
    ) -> ProducerConfig:
        """What a client constructor was given: ``config`` itself, or the options validated.

        Raises:
            IllegalStateError: both ``config`` and options (or ``bootstrap_servers``).
            ConfigError: as :meth:`from_options`.
        """
        if config is None:
            return cls.from_options(bootstrap_servers, **options)
        if bootstrap_servers is not None or options:
            raise IllegalStateError("pass either config= or options, not both")
        return config


#: The option table: option name -> :class:`~aiokprod.config.spec.Option`, in docs order.
OPTIONS: Mapping[str, Option] = c.collect(ProducerConfig)
