"""aiokprod: an asyncio-native Apache Kafka producer, written from the wire protocol up.

::

    from aiokprod import Producer

    async with Producer("127.0.0.1:9092") as producer:
        delivery = await producer.send("events", b"hello", key=b"user-1")
        print(await delivery)

The public names below are loaded on first use (PEP 562), so that importing a lower layer
(``aiokprod.protocol.records``, say) does not pull in the producer, asyncio and anyio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from aiokprod.config import ProducerConfig, ProducerOptions
    from aiokprod.errors import (
        AbortableTransactionError,
        AuthenticationError,
        BrokerError,
        BufferExhaustedError,
        ConfigError,
        DeliveryTimeoutError,
        IllegalStateError,
        KafkaConnectionError,
        KafkaError,
        KafkaTimeoutError,
        MetadataTimeoutError,
        ProducerClosedError,
        ProducerCrashedError,
        RecordTooLargeError,
        SaslAuthenticationError,
        SerializationError,
        SslAuthenticationError,
        TransactionAbortedError,
        TransactionError,
    )
    from aiokprod.internals.batch import DeliveryFuture
    from aiokprod.producer import Producer
    from aiokprod.types import (
        ConsumerGroupMetadata,
        OffsetAndMetadata,
        PreparedTransaction,
        ProducerInterceptor,
        ProducerRecord,
        RecordMetadata,
        SerializationContext,
        TopicPartition,
    )

#: public name -> the module that defines it (imported when the name is first used)
_LAZY = {
    "AbortableTransactionError": "aiokprod.errors",
    "AuthenticationError": "aiokprod.errors",
    "BrokerError": "aiokprod.errors",
    "BufferExhaustedError": "aiokprod.errors",
    "ConfigError": "aiokprod.errors",
    "ConsumerGroupMetadata": "aiokprod.types",
    "DeliveryFuture": "aiokprod.internals.batch",
    "DeliveryTimeoutError": "aiokprod.errors",
    "IllegalStateError": "aiokprod.errors",
    "KafkaConnectionError": "aiokprod.errors",
    "KafkaError": "aiokprod.errors",
    "KafkaTimeoutError": "aiokprod.errors",
    "MetadataTimeoutError": "aiokprod.errors",
    "OffsetAndMetadata": "aiokprod.types",
    "PreparedTransaction": "aiokprod.types",
    "Producer": "aiokprod.producer",
    "ProducerClosedError": "aiokprod.errors",
    "ProducerConfig": "aiokprod.config",
    "ProducerCrashedError": "aiokprod.errors",
    "ProducerInterceptor": "aiokprod.types",
    "ProducerOptions": "aiokprod.config",
    "ProducerRecord": "aiokprod.types",
    "RecordMetadata": "aiokprod.types",
    "SerializationContext": "aiokprod.types",
    "RecordTooLargeError": "aiokprod.errors",
    "SaslAuthenticationError": "aiokprod.errors",
    "SerializationError": "aiokprod.errors",
    "SslAuthenticationError": "aiokprod.errors",
    "TopicPartition": "aiokprod.types",
    "TransactionAbortedError": "aiokprod.errors",
    "TransactionError": "aiokprod.errors",
}

__all__ = [
    "AbortableTransactionError",
    "AuthenticationError",
    "BrokerError",
    "BufferExhaustedError",
    "ConfigError",
    "ConsumerGroupMetadata",
    "DeliveryFuture",
    "DeliveryTimeoutError",
    "IllegalStateError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "MetadataTimeoutError",
    "OffsetAndMetadata",
    "PreparedTransaction",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerCrashedError",
    "ProducerInterceptor",
    "ProducerOptions",
    "ProducerRecord",
    "RecordMetadata",
    "RecordTooLargeError",
    "SaslAuthenticationError",
    "SerializationContext",
    "SerializationError",
    "SslAuthenticationError",
    "TopicPartition",
    "TransactionAbortedError",
    "TransactionError",
    "__version__",
]


if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'aiokprod' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups skip this function
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
