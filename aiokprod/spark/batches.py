"""A Spark partition's Arrow record batches as the event loop reads them.

:func:`read_ahead` reads the next batch in a worker thread while the loop sends the current
one; :func:`first_rows` finds the first batch with rows (an empty partition opens no producer
transaction). Leaves of the task write path: they import nothing of it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["first_rows", "read_ahead"]


async def read_ahead(batches: Iterator[pa.RecordBatch]) -> AsyncIterator[pa.RecordBatch]:
    """The batches, the next one read in a thread while the loop sends the current one.

    Spark hands the batches over a socket; waiting for the next one on the event loop would
    stop the producer's sender for that time. Reading in a worker thread (the read releases
    the GIL) keeps the sender running while Spark computes and ships the next batch.
    """
    loop = asyncio.get_running_loop()
    with concurrent.futures.ThreadPoolExecutor(1, "aiokprod-spark-read") as reader:
        upcoming = loop.run_in_executor(reader, next, batches, None)
        while True:
            batch = await upcoming
            if batch is None:
                return
            upcoming = loop.run_in_executor(reader, next, batches, None)
            yield batch


async def first_rows(
    batches: AsyncIterator[pa.RecordBatch],
) -> tuple[pa.RecordBatch | None, AsyncIterator[pa.RecordBatch]]:
    """The first batch with rows (None: the partition is empty) and every batch after it.

    Empty batches before it are dropped (they hold no rows to count).
    """
    async for batch in batches:
        if batch.num_rows:
            return batch, _chain(batch, batches)
    return None, batches


async def _chain(
    first: pa.RecordBatch, rest: AsyncIterator[pa.RecordBatch]
) -> AsyncIterator[pa.RecordBatch]:
    yield first
    async for batch in rest:
        yield batch
