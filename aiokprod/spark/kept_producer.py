"""One at-least-once producer kept by a Python worker process for all the tasks it runs.

Spark's own Kafka sink keeps its producers per executor JVM, for every task of the executor,
and closes one after ``spark.kafka.producer.cache.timeout`` (10 minutes) unused. A PySpark
worker process runs its tasks one after another (``spark.python.worker.reuse``, the
default), so the at-least-once writer keeps one producer in it: a task no longer pays a
producer start, two connections with their ApiVersions, a metadata request and an
``InitProducerId`` (16-25 ms of CPU per task, measured in docs/spark.md; more than the rows
of a small streaming micro-batch cost).

- **The loop.** ``asyncio.run`` closes its loop when the task ends, and the producer lives
  on a loop, so the worker keeps its loop too (an :class:`asyncio.Runner`); each task runs
  on it. Between tasks the loop does not run: the producer's connections stay open and its
  timers wait; when the next task resumes it, it carries on as after any pause (a
  connection the broker closed meanwhile is opened again, an overdue metadata refresh
  happens).
- **Nothing of a task is left to the next.** The task flushes before it returns its counts
  (every record acknowledged or failed), as closing did before.
- **When it is dropped** (closed, and the next task starts a new one): a task that did not
  deliver every row (a failed record may leave the producer fenced, in error or with a
  partition's sequence to reset: it is not worth reasoning which), another producer
  configuration (bootstrap servers or options differ), more than :data:`KEPT_IDLE_S`
  unused, an exception out of the task (cancellation, ``KeyboardInterrupt``), the
  interpreter exiting. A forked child forgets its parent's (never touches it).
- **One thread at a time.** A second thread writing while the kept producer is in use
  gets ``None`` from :func:`run_kept`, and the writer runs a producer of its own as before.
- Exactly-once writes never use it: each task's transactional producer is its own.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, TypeVar

from aiokprod.spark.heap import thaw

if TYPE_CHECKING:
    from aiokprod.producer import Producer

__all__ = ["KEPT_IDLE_S", "KeptSlot", "drop_kept", "run_kept"]

#: A kept producer unused for longer is closed and replaced (Spark's sink: 10 minutes).
KEPT_IDLE_S: Final = 600.0

R = TypeVar("R")


class KeptSlot:
    """The worker's kept loop and producer (one per process).

    Attributes:
        producer: the running producer a task may use, or None (the task starts one and
            sets it here to keep it; it sets None to drop it, closing it itself).
    """

    __slots__ = ("_key", "_runner", "_used_s", "producer")

    def __init__(self) -> None:
        self.producer: Producer | None = None
        self._key: object = None
        self._runner: asyncio.Runner | None = None
        self._used_s = 0.0


_lock = threading.Lock()
_slot = KeptSlot()


def run_kept(
    key: object, task: Callable[[KeptSlot], Coroutine[Any, Any, R]], now_s: float | None = None
) -> tuple[R] | None:
    """Run ``task(slot)`` on the worker's kept loop; None if another thread holds it.

    Args:
        key: what the kept producer was made from (servers and options); a producer kept
            for another key is closed first.
        task: the task's coroutine function; it uses ``slot.producer`` or starts one.
        now_s: the monotonic time (default: now), for the idle limit.

    Returns:
        ``(result,)`` of the task.
    """
    if not _lock.acquire(blocking=False):
        return None
    try:
        slot = _slot
        now_s = time.monotonic() if now_s is None else now_s
        if slot.producer is not None and (
            not _same(slot._key, key) or now_s - slot._used_s > KEPT_IDLE_S
        ):
            _close(slot)
        if slot._runner is None:
            slot._runner = asyncio.Runner()
        slot._key = key
        try:
            result = slot._runner.run(task(slot))
        except BaseException:
            _close(slot)  # whatever the task left running on the loop: cancelled with it
            raise
        slot._used_s = time.monotonic()
        if slot.producer is None:  # nothing kept: no loop kept either
            _close(slot)
        return (result,)
    finally:
        _lock.release()


def drop_kept() -> None:
    """Close the kept producer and its loop (tests, and the interpreter's exit)."""
    with _lock:
        _close(_slot)


def _same(kept: object, key: object) -> bool:
    try:
        return bool(kept == key)
    except Exception:  # options that cannot be compared: not the same producer
        return False


def _close(slot: KeptSlot) -> None:
    """Close the slot's producer (nothing of a finished task is pending) and its loop."""
    runner, producer = slot._runner, slot.producer
    slot._runner = slot.producer = None
    slot._key = None
    if runner is None:
        return
    try:
        if producer is not None:
            with contextlib.suppress(Exception):  # one that fails to close is dropped anyway
                runner.run(producer.close(0))
    finally:
        runner.close()  # cancels what is left on the loop, then closes it
        thaw()  # a frozen heap holds the dropped producer: its cycles would never be freed


def _forget_in_child() -> None:
    """A forked child shares its parent's sockets: it drops the slot without closing it."""
    global _lock, _slot
    _lock = threading.Lock()
    _slot = KeptSlot()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(drop_kept)
