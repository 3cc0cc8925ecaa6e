"""The producer machinery: metadata, partitioner, accumulator, sender (not public API).

Decision logic here (ready, drain, partition, sequence, backoff, expiry) is synchronous and
takes the time as an argument; only the sender loop and the metadata fetcher await.
"""
