"""The Spark benchmark's workloads: the DataFrames both sinks write.

Every workload is ``spark.range(n, numPartitions=8)`` with a binary ``value`` of the stated
size; the keyed ones add a ``key`` column as pipelines key their records (by user, order,
device: a few thousand to a few hundred thousand distinct keys, each spread over the run):

- ``key``: a string ``'k' + id % 10000`` (2-5 characters, 10,000 distinct keys);
- ``binkey``: ``id % 100000`` as 8 big-endian bytes (what Kafka's ``LongSerializer``
  writes; 100,000 distinct keys).

Both sinks hash every key with murmur2 (Spark's sink in the Java client, ours per column);
the JVM computes the columns for either sink alike.
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: Key column expressions by kind ('' : no key column).
KEYS = {
    "": None,
    "key": "concat('k', cast(id % 10000 AS string)) AS key",
    "binkey": "unhex(lpad(hex(id % 100000), 16, '0')) AS key",
}


@dataclasses.dataclass(frozen=True)
class Workload:
    """``rows`` rows of ``size``-byte values, keyed by ``key`` (a :data:`KEYS` kind)."""

    rows: int
    size: int
    key: str = ""

    def dataframe(self, spark: Any, rows: int) -> Any:
        """The DataFrame of ``rows`` rows (the workload's, scaled)."""
        columns = [f"cast(lpad(cast(id AS string), {self.size}, 'x') AS binary) AS value"]
        key = KEYS[self.key]
        if key is not None:
            columns.append(key)
        return spark.range(rows, numPartitions=8).selectExpr(*columns)


WORKLOADS = {
    "100B": Workload(1_000_000, 100),
    "1KiB": Workload(500_000, 1024),
    "100B-key": Workload(1_000_000, 100, "key"),
    "1KiB-key": Workload(500_000, 1024, "key"),
    "100B-binkey": Workload(1_000_000, 100, "binkey"),
    "1KiB-binkey": Workload(500_000, 1024, "binkey"),
}
#: What runs without ``--workloads``.
DEFAULT = ("100B", "1KiB")
