"""``ProducerOptions``: the producer's keyword options and their types, for type checkers.

The keyword options of ``Producer(...)``, ``SyncProducer(...)``, ``Admin(...)`` and
``ProducerConfig.from_options()`` (PEP 692: ``**options: Unpack[ProducerOptions]``), so that
``mypy --strict`` or pyright flag a misspelt option or a wrong type. The class is generated
from the option table's ``accepts`` types (aiokprod/config/table.py) by
``python docs/gen_config.py --write``, and tests/unit/test_typed_options.py checks it is
current: edit the table, not the class. Only the imports are written by hand (a type new to
an ``accepts`` needs its import here).
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Literal, TypedDict

from aiokprod.config.secret import PartitionerFunction, Secret, Serializer, TokenProvider
from aiokprod.types import ProducerInterceptor

if TYPE_CHECKING:
    import os
    from collections.abc import Sequence


# fmt: off
# <generated ProducerOptions>
class ProducerOptions(TypedDict, total=False):
    """The producer's keyword options and the types they accept (see docs/configuration.md)."""

    client_id: str | None
    socket_connection_setup_timeout_ms: int
    reconnect_backoff_ms: int
    reconnect_backoff_max_ms: int
    connections_max_idle_ms: int
    acks: int | Literal["all", "-1", "0", "1"]
    enable_idempotence: bool
    transactional_id: str | None
    transaction_timeout_ms: int
    delivery_timeout_ms: int
    request_timeout_ms: int
    max_in_flight_requests_per_connection: int
    retries: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    linger_ms: int
    batch_size: int
    buffer_memory: int
    max_block_ms: int
    max_request_size: int
    compression_type: Literal["none", "gzip", "snappy", "lz4", "zstd"] | None
    compression_level: int | None
    metadata_max_age_ms: int
    metadata_max_idle_ms: int
    allow_auto_create_topics: bool
    partitioner: Literal["builtin", "murmur3", "round_robin"] | PartitionerFunction
    partitioner_ignore_keys: bool
    partitioner_adaptive_partitioning: bool
    partitioner_availability_timeout_ms: int
    partitioner_working_set_size: int
    partitioner_working_set_ms: int
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
    ssl_context: ssl.SSLContext | None
    ssl_cafile: str | os.PathLike[str] | None
    ssl_certfile: str | os.PathLike[str] | None
    ssl_keyfile: str | os.PathLike[str] | None
    ssl_password: str | Secret | None
    ssl_check_hostname: bool
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]
    sasl_plain_username: str | None
    sasl_plain_password: str | Secret | None
    sasl_oauth_token_provider: TokenProvider | None
    sasl_kerberos_service_name: str
    sasl_kerberos_domain_name: str | None
    sasl_kerberos_principal: str | None
    sasl_kerberos_keytab: str | os.PathLike[str] | None
    key_serializer: Serializer | None
    value_serializer: Serializer | None
    interceptors: Sequence[ProducerInterceptor] | None
    enable_metrics_push: bool
# </generated ProducerOptions>
# fmt: on
