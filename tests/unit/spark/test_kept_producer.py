"""When the worker's kept producer is reused, replaced or dropped (aiokprod.spark.kept_producer).

The decisions of :func:`run_kept` with a stand-in producer that records its ``close``; the
writer with a real producer and broker is ``tests/integration/test_spark_kept_producer.py``.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from aiokprod.spark import kept_producer
from aiokprod.spark.kept_producer import KEPT_IDLE_S, KeptSlot, run_kept


class StandIn:
    """What the slot needs of a producer: ``close(timeout)`` on the loop it was made on."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.closes: list[float | None] = []

    async def close(self, timeout: float | None = None) -> None:
        assert asyncio.get_running_loop() is self.loop
        self.closes.append(timeout)


@pytest.fixture(autouse=True)
def nothing_kept() -> Iterator[None]:
    kept_producer.drop_kept()
    yield
    kept_producer.drop_kept()


def keep(slot: KeptSlot) -> Any:
    """A task that keeps the slot's producer, starting one if there is none."""

    async def task() -> StandIn:
        if slot.producer is None:
            slot.producer = StandIn()  # type: ignore[assignment]
        return slot.producer  # type: ignore[return-value]

    return task()


def drop(slot: KeptSlot) -> Any:
    """A task that failed: it drops (and closes) the slot's producer."""

    async def task() -> None:
        producer = slot.producer
        slot.producer = None
        if producer is not None:
            await producer.close(0)

    return task()


def test_the_same_key_reuses_the_producer_and_its_loop() -> None:
    first = run_kept("k", keep, now_s=0.0)
    second = run_kept("k", keep, now_s=1.0)
    assert first is not None
    assert second is not None
    assert second[0] is first[0]
    assert first[0].closes == []


def test_another_key_closes_the_kept_producer_first() -> None:
    first = run_kept(("servers", {"linger_ms": 1}), keep, now_s=0.0)
    second = run_kept(("servers", {"linger_ms": 2}), keep, now_s=1.0)
    assert first is not None
    assert second is not None
    assert second[0] is not first[0]
    assert first[0].closes == [0]


def test_a_producer_idle_past_the_limit_is_replaced() -> None:
    first = run_kept("k", keep)
    assert first is not None
    later = run_kept("k", keep, now_s=time.monotonic() + KEPT_IDLE_S + 1)
    assert later is not None
    assert later[0] is not first[0]
    assert first[0].closes == [0]


def test_keys_that_cannot_be_compared_are_not_the_same_producer() -> None:
    class Odd:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("no comparing")

        __hash__ = object.__hash__

    first = run_kept(Odd(), keep, now_s=0.0)
    second = run_kept(Odd(), keep, now_s=0.0)
    assert first is not None
    assert second is not None
    assert second[0] is not first[0]


def test_a_task_that_drops_the_producer_leaves_no_loop() -> None:
    assert run_kept("k", keep, now_s=0.0) is not None
    assert run_kept("k", drop, now_s=0.0) is not None
    assert kept_producer._slot.producer is None
    assert kept_producer._slot._runner is None


def test_an_exception_out_of_a_task_closes_the_producer_and_cancels_the_rest() -> None:
    first = run_kept("k", keep, now_s=0.0)
    assert first is not None
    leftover: list[asyncio.Task[None]] = []

    def failing(slot: KeptSlot) -> Any:
        async def task() -> None:
            leftover.append(asyncio.ensure_future(asyncio.sleep(3600)))
            raise KeyboardInterrupt

        return task()

    with pytest.raises(KeyboardInterrupt):
        run_kept("k", failing, now_s=0.0)
    assert first[0].closes == [0]
    assert leftover[0].cancelled()
    assert kept_producer._slot.producer is None
    again = run_kept("k", keep, now_s=0.0)
    assert again is not None
    assert again[0] is not first[0]


def test_another_thread_gets_none_while_a_task_runs() -> None:
    inside, release = threading.Event(), threading.Event()
    other: list[object] = []

    def blocking(slot: KeptSlot) -> Any:
        async def task() -> str:
            inside.set()
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)
            return "done"

        return task()

    def second() -> None:
        inside.wait(10)
        other.append(run_kept("k", keep))
        release.set()

    thread = threading.Thread(target=second)
    thread.start()
    assert run_kept("k", blocking) == ("done",)
    thread.join(10)
    assert other == [None]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_forgets_the_parents_producer_without_closing_it() -> None:
    first = run_kept("k", keep, now_s=0.0)
    assert first is not None
    pid = os.fork()
    if pid == 0:  # the child: a fresh slot, the parent's producer untouched
        slot = kept_producer._slot
        ok = slot.producer is None and slot._runner is None and first[0].closes == []
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert first[0].closes == []
    assert run_kept("k", keep, now_s=0.0) == (first[0],)


def test_dropping_the_producer_thaws_a_frozen_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from aiokprod.spark import heap

    assert run_kept("k", keep, now_s=0.0) is not None
    monkeypatch.setattr(heap, "_frozen", True)
    gc.freeze()  # as a Spark worker's heap after its first task, the producer in it
    try:
        assert run_kept("k", drop, now_s=0.0) is not None
        assert gc.get_freeze_count() == 0
        assert heap._frozen is False
    finally:
        gc.unfreeze()
