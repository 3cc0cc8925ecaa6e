"""The simulator's cluster at scale, and a clock on every event-loop callback (issue 30).

:class:`ScaleWorld` runs the real :class:`~aiokprod.Producer` against a :class:`SimCluster`
of any size (1 to 100 brokers, up to 100,000 partitions or 10,000 topics) on virtual time,
without faults: what it measures is what the producer does on the loop, not what it survives
(that is the seeded simulator's job, :mod:`.runner`).

Virtual time stands still while a callback runs, so the producer's synchronous steps are
measured in real time: :class:`LoopTimer` wraps every callback the loop runs (as asyncio's
debug mode does for ``slow_callback_duration``) and keeps, apart for the simulated brokers
and for the rest (the producer, and the harness's own small tasks), the longest callback in
wall-clock and in CPU time and their totals. ``benchmarks/scale.py`` builds its table from
it; tests use the world and the counters, never the times.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from aiokprod.clock import LoopClock
from aiokprod.producer import Producer
from aiokprod.testing.sim.cluster import SimCluster
from aiokprod.testing.sim.loop import VirtualLoop
from aiokprod.testing.sim.network import ServerConnection, SimNetwork

T = TypeVar("T")


@dataclass(slots=True)
class CallbackStats:
    """Callbacks of one side (broker or producer) over one phase.

    Times exclude the cyclic garbage collector's passes that fell inside a callback: those
    visit the whole process (here the simulated cluster and its logs too) and are counted
    apart (:attr:`LoopTimer.gc`).
    """

    callbacks: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    max_wall_s: float = 0.0
    max_cpu_s: float = 0.0
    #: What ran in the callback with the longest wall-clock time.
    slowest: str = ""
    #: What ran in the callback with the longest CPU time.
    slowest_cpu: str = ""

    def add(self, wall_s: float, cpu_s: float, callback: object) -> None:
        """Count one callback."""
        self.callbacks += 1
        self.wall_s += wall_s
        self.cpu_s += cpu_s
        if cpu_s > self.max_cpu_s:
            self.max_cpu_s = cpu_s
            self.slowest_cpu = describe(callback)
        if wall_s > self.max_wall_s:
            self.max_wall_s = wall_s
            self.slowest = describe(callback)


@dataclass(slots=True)
class GcStats:
    """The cyclic garbage collector's passes: how many, their time, the longest."""

    passes: int = 0
    wall_s: float = 0.0
    max_wall_s: float = 0.0


def describe(callback: object) -> str:
    """A short name for a callback (a task's coroutine, a bound method, a function)."""
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        return f"task {getattr(coro, '__qualname__', repr(coro))}"
    name = getattr(callback, "__qualname__", None)
    return name if isinstance(name, str) else repr(callback)


#: Tasks named so are the caller's (a benchmark's sending loop), counted apart.
CALLER = "caller"


def _is_caller(callback: object) -> bool:
    owner = getattr(callback, "__self__", None)
    return isinstance(owner, asyncio.Task) and owner.get_name().startswith(CALLER)


def _is_broker(callback: object) -> bool:
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, (ServerConnection, SimCluster)):
        return True
    func = getattr(callback, "func", None)  # functools.partial of a broker's method
    return func is not None and _is_broker(func)


class LoopTimer:
    """Times every callback an event loop runs, in real (wall-clock) and CPU time.

    Used as a context manager around a run: it wraps asyncio's ``Handle._run`` (every
    ``call_soon``, timer and task step goes through it) for the process while it is active.
    Callbacks of the simulated brokers (:class:`ServerConnection`, :class:`SimCluster`) are
    counted in :attr:`broker`; steps of tasks named ``caller...`` (the code calling
    ``send()``: its steps hold the producer's per-record work as well as its own) in
    :attr:`caller`; everything else, the producer's own tasks and callbacks, in
    :attr:`producer`.
    """

    def __init__(self) -> None:
        self.producer = CallbackStats()
        self.broker = CallbackStats()
        self.caller = CallbackStats()
        self.gc = GcStats()
        self._saved: Callable[[asyncio.Handle], None] | None = None
        #: Wall and CPU seconds spent in garbage collection since the timer started.
        self._gc_wall = 0.0
        self._gc_cpu = 0.0
        self._gc_began = (0.0, 0.0)

    def reset(self) -> None:
        """Start a new phase: every counter back to zero."""
        self.producer = CallbackStats()
        self.broker = CallbackStats()
        self.caller = CallbackStats()
        self.gc = GcStats()

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_began = (time.perf_counter(), time.process_time())
            return
        wall = time.perf_counter() - self._gc_began[0]
        self._gc_wall += wall
        self._gc_cpu += time.process_time() - self._gc_began[1]
        self.gc.passes += 1
        self.gc.wall_s += wall
        self.gc.max_wall_s = max(self.gc.max_wall_s, wall)

    @contextlib.contextmanager
    def phase(self) -> Iterator[LoopTimer]:
        """Count from zero for the ``with`` block (read the counters after it)."""
        self.reset()
        yield self

    def __enter__(self) -> LoopTimer:
        handle_type = asyncio.Handle
        run = handle_type._run
        self._saved = run
        # process_time, not thread_time: the same here (one thread) and a third the cost.
        wall, cpu = time.perf_counter, time.process_time
        timer = self

        def timed_run(handle: asyncio.Handle) -> None:
            gc_wall, gc_cpu = timer._gc_wall, timer._gc_cpu
            began_wall, began_cpu = wall(), cpu()
            try:
                run(handle)
            finally:
                spent_wall = wall() - began_wall - (timer._gc_wall - gc_wall)
                spent_cpu = cpu() - began_cpu - (timer._gc_cpu - gc_cpu)
                callback = handle._callback  # type: ignore[attr-defined]
                if _is_broker(callback):
                    side = timer.broker
                elif _is_caller(callback):
                    side = timer.caller
                else:
                    side = timer.producer
                side.add(spent_wall, spent_cpu, callback)

        handle_type._run = timed_run  # type: ignore[method-assign,assignment]
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            asyncio.Handle._run = self._saved  # type: ignore[method-assign,assignment]
            self._saved = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)


class ScaleWorld:
    """A fault-free simulated cluster of any size, its network and a virtual-time loop.

    Args:
        brokers: how many brokers.
        topics: topic name -> partitions (leaders spread over the brokers).
        latency_ms: one trip's latency range on the simulated network.
        first_append_ms: the broker's extra time for a partition's first append.
        seed: the world's random source.
        placement: per topic, the replicas of all its partitions (the first leads).
    """

    def __init__(
        self,
        brokers: int,
        topics: dict[str, int],
        *,
        latency_ms: tuple[float, float] = (0.1, 0.3),
        first_append_ms: float = 0.0,
        seed: int = 1,
        placement: dict[str, list[int]] | None = None,
    ) -> None:
        rng = random.Random(seed)
        self.loop = VirtualLoop(max_steps=10**10, max_time_s=10**7)
        self.cluster = SimCluster(
            brokers,
            topics,
            now_ms=self.loop.time_ms,
            rng=random.Random(rng.getrandbits(64)),
            placement=placement,
        )
        self.cluster.first_append_ms = first_append_ms
        self.network = SimNetwork(
            self.loop,
            self.cluster,
            rng=random.Random(rng.getrandbits(64)),
            latency_ms=latency_ms,
        )
        self._rng = random.Random(rng.getrandbits(64))

    def producer(self, **options: Any) -> Producer:
        """A Producer on this world's network and virtual clock (``options``: Producer's)."""
        return Producer(
            self.cluster.bootstrap(),
            transport=self.network.transport(),
            clock=LoopClock(self.loop),
            rng=random.Random(self._rng.getrandbits(64)),
            **options,
        )

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Run ``main`` on the world's loop, as a task named ``caller`` (see LoopTimer)."""
        return self.loop.run_until_complete(self.loop.create_task(main, name=CALLER))

    def close(self) -> None:
        """Close the loop."""
        self.loop.close()

    def now_ms(self) -> int:
        """Virtual milliseconds."""
        return self.loop.time_ms()


def rss_bytes() -> int:
    """This process's resident set size now (Linux; 0 elsewhere), after a full collection."""
    gc.collect()
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except OSError:
        return 0
    import resource

    return pages * resource.getpagesize()
