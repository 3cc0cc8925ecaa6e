"""Keep the Python worker's per-task garbage collection from walking every module's objects.

pyspark's worker daemon runs a full ``gc.collect()`` after every task a reused worker ran
(``pyspark/daemon.py``). A full collection visits every object the collector tracks, and
a worker that has run this sink holds about 100,000 of them - pyspark, pyarrow, pandas,
the producer's modules - none of which is garbage: measured in the workers of a
``local[2]`` job, 28-32 ms of CPU per collection, 0.2-0.25 CPU s per million rows at
125,000 rows per task (docs/spark.md, "Measured").

:func:`freeze_after_first_task` moves what the worker holds after its first task (when the
task's own objects are gone) into the permanent generation (``gc.freeze()``, made for
long-lived objects created at start-up), so that later collections visit only what later
tasks create. It runs once per worker process, and only inside a Spark task: a process
that merely calls the writer (a test, a script) keeps its collector as it was. Cost: an
object alive at that point that later becomes unreachable inside a reference cycle is
never freed; what a worker holds then is its imported modules, pyspark's own state and the
producer it keeps for its tasks (:mod:`aiokprod.spark.kept_producer`). When that producer
is dropped, :func:`thaw` gives the frozen objects back to the collector (its cycles are
freed by the next collection) and the next task freezes again.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_after_first_task", "thaw"]

_frozen = False


def freeze_after_first_task() -> bool:
    """Collect, then freeze what is left, once per worker process (inside a Spark task).

    Returns:
        Whether this call froze the heap.
    """
    global _frozen
    if _frozen:
        return False
    try:
        from pyspark import TaskContext
    except ImportError:  # not a Spark worker
        return False
    if TaskContext.get() is None:
        return False
    _frozen = True
    gc.collect()
    gc.freeze()
    return True


def thaw() -> None:
    """Unfreeze what :func:`freeze_after_first_task` froze; the next task freezes again."""
    global _frozen
    if _frozen:
        _frozen = False
        gc.unfreeze()
