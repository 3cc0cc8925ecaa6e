"""aiokprod: an asyncio-native Apache Kafka producer, written from the wire protocol up.

::

    from aiokprod import Producer

    async with Producer("127.0.0.1:9092") as producer:
        delivery = await producer.send("events", b"hello", key=b"user-1")
        print(await delivery)
"""

__version__ = "0.1.0"

from aiokprod.config import ProducerConfig
from aiokprod.errors import (
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
)
from aiokprod.internals.batch import DeliveryFuture
from aiokprod.producer import Producer
from aiokprod.types import ProducerInterceptor, ProducerRecord, RecordMetadata, TopicPartition

__all__ = [
    "AuthenticationError",
    "BrokerError",
    "BufferExhaustedError",
    "ConfigError",
    "DeliveryFuture",
    "DeliveryTimeoutError",
    "IllegalStateError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "MetadataTimeoutError",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerCrashedError",
    "ProducerInterceptor",
    "ProducerRecord",
    "RecordMetadata",
    "RecordTooLargeError",
    "SaslAuthenticationError",
    "SerializationError",
    "SslAuthenticationError",
    "TopicPartition",
    "__version__",
]
