"""spark/heap.py freezes a worker's heap only inside a Spark task, once per process.

A process that only calls the writer (this test run, a script) keeps its collector as it
was; tests/integration/test_spark_sink.py checks that a Spark worker is frozen.
"""

from __future__ import annotations

import gc

import pytest

from aiokprod.spark import heap


def test_outside_a_spark_task_nothing_is_frozen() -> None:
    before = gc.get_freeze_count()
    assert heap.freeze_after_first_task() is False
    assert gc.get_freeze_count() == before


def test_inside_a_task_once(monkeypatch: pytest.MonkeyPatch) -> None:
    pyspark = pytest.importorskip("pyspark")
    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: object()))
    monkeypatch.setattr(heap, "_frozen", False)
    try:
        assert heap.freeze_after_first_task() is True
        assert gc.get_freeze_count() > 0
        assert heap.freeze_after_first_task() is False  # once per process
    finally:
        gc.unfreeze()  # give this test process its collector back


def test_thaw_gives_the_frozen_heap_back_and_the_next_task_freezes_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pyspark = pytest.importorskip("pyspark")
    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: object()))
    monkeypatch.setattr(heap, "_frozen", False)
    try:
        assert heap.freeze_after_first_task() is True
        heap.thaw()
        assert gc.get_freeze_count() == 0
        assert heap.freeze_after_first_task() is True  # frozen again after the next task
    finally:
        gc.unfreeze()
