"""How long read_committed consumers are held back after an exactly-once write ended.

A transaction left open holds every read_committed consumer of its partitions at its first
offset (the last stable offset, LSO), other producers' records after it included. These
helpers measure, with librdkafka, the seconds until the LSO of every partition of a topic
reaches its high watermark (HW) again, and freeze or resume a session's Python workers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, TopicPartition


def _ends(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[int]:
    """Each partition's end: the HW (read_uncommitted) or the LSO (read_committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ends-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            # librdkafka's high watermark is the last stable offset when read_committed
            "isolation.level": isolation,
        }
    )
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def held_back(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """The partitions whose LSO is below their HW (an open transaction holds them)."""
    hw = _ends(bootstrap, topic, partitions, "read_uncommitted")
    lso = _ends(bootstrap, topic, partitions, "read_committed")
    return [p for p in range(partitions) if lso[p] < hw[p]]


def seconds_until_released(
    bootstrap: str, topic: str, partitions: int, since: float, limit_s: float = 60.0
) -> float:
    """Seconds from ``since`` (a ``time.monotonic()``) until no partition is held back.

    Raises:
        AssertionError: still held back after ``limit_s``.
    """
    while True:
        if not held_back(bootstrap, topic, partitions):
            return time.monotonic() - since
        if time.monotonic() - since > limit_s:
            raise AssertionError(
                f"partitions {held_back(bootstrap, topic, partitions)} of {topic} still held "
                f"back {limit_s:.0f} s after the write ended"
            )
        time.sleep(0.1)


def signal_all(pids: Iterable[int], sig: int) -> None:
    """Send ``sig`` to each process that still runs."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def freeze(pids: Iterable[int]) -> list[int]:
    """SIGSTOP each of ``pids``; the ones stopped."""
    stopped = list(pids)
    signal_all(stopped, signal.SIGSTOP)
    return stopped


def thaw(pids: Iterable[int]) -> None:
    """SIGCONT each of ``pids``."""
    signal_all(pids, signal.SIGCONT)
