"""Shared pytest configuration: the local Apache Kafka fixtures come from aiokprod.testing."""

pytest_plugins = ["aiokprod.testing.pytest_plugin"]
