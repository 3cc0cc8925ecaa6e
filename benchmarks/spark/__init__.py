"""The Spark sink benchmark: ``format("aiokprod")`` against Spark's own ``format("kafka")``.

Run with ``python -m benchmarks.spark`` (see ``--help``); separate from the client suite.
"""
