"""aiokprod: an asyncio-native Apache Kafka producer, written from the wire protocol up."""

__version__ = "0.1.0"
