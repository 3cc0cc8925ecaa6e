"""Compressing large batches in a worker thread, so the event loop stays responsive.

Compressing a large batch at a slow level holds the event loop for tens or hundreds of
milliseconds; cramjam releases the GIL, so a thread keeps the loop free. A batch at least
``threshold_bytes`` large (uncompressed; the threshold depends on the codec and level, see
``protocol.compression.offload_threshold_bytes``) is sealed (later records start a new
batch), closed in a thread, and stays at the head of its queue meanwhile, so its partition's
order is kept; it is drained on the pass after it is closed.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from aiokprod.errors import KafkaError
from aiokprod.internals.batch import ProducerBatch
from aiokprod.internals.stats import ProducerStats
from aiokprod.net.pool import Spawn


class CompressionOffload:
    """Decides which batches are compressed off the loop, and runs that work.

    Args:
        threshold_bytes: batches this large are compressed in a thread (None: never).
        spawn: starts a coroutine in the producer's task group.
        stats: counts the batches compressed in a thread.
        on_done: called when a batch is ready to drain (wakes the sender).
        on_failure: called when the codec failed: the batch fails with that error.
    """

    def __init__(
        self,
        threshold_bytes: int | None,
        spawn: Spawn,
        stats: ProducerStats,
        on_done: Callable[[], None],
        on_failure: Callable[[ProducerBatch, KafkaError], None],
    ) -> None:
        self._threshold = threshold_bytes
        self._spawn = spawn
        self._stats = stats
        self._on_done = on_done
        self._on_failure = on_failure

    def holds(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` must wait: it is (or from now on is) being compressed off-loop."""
        if batch.compressing:
            return True
        threshold = self._threshold
        builder = batch.builder
        if threshold is None or builder is None or builder.size_in_bytes < threshold:
            return False
        self._start(batch)
        return True

    def _start(self, batch: ProducerBatch) -> None:
        builder = batch.builder
        if builder is None:  # pragma: no cover - checked by holds()
            return
        batch.compressing = True
        batch.is_full = True  # sealed: later records start a new batch
        self._stats.batches_compressed_in_thread += 1

        async def compress() -> None:
            try:
                closed = await anyio.to_thread.run_sync(builder.close)
            except Exception as exc:  # noqa: BLE001 - a codec failure fails only this batch
                batch.compressing = False
                self._on_failure(batch, KafkaError(f"compressing a batch failed: {exc!r}"))
                self._on_done()
                return
            batch.compressing = False
            if batch.closed is None:
                batch.closed = closed
                batch.builder = None
            self._on_done()

        self._spawn(compress)
