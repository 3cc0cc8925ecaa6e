"""The network layer: one connection per broker, framing, in-flight limits, reconnects.

It moves bytes between asyncio transports and the sans-IO ``aiokprod.protocol`` layer and never
imports the producer machinery above it.
"""
