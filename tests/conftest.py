"""Shared pytest configuration.

The local Apache Kafka fixtures (``kafka``, ``new_topic``, ...) come from aiokprod's pytest
plugin, which pytest loads through its ``pytest11`` entry point (see pyproject.toml): there is
nothing to list here.
"""
