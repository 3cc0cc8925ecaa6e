"""Declared Kafka messages, one module per API or group of APIs; see ``protocol.api``."""
