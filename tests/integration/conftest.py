"""Integration-test hooks: the event loop, and the fault scenarios' counts and version matrix.

``AIOKPROD_TEST_LOOP=uvloop`` runs every async test on uvloop instead of asyncio's own loop
(``make test-uvloop``; docs/getting-started.md, "Faster").
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from faults import RESULTS
from spark_chaos import RESULTS as CHAOS_RESULTS
from spark_chaos import save, table
from versions_report import report_lines

LOOP_ENV = "AIOKPROD_TEST_LOOP"
_LOOP = os.environ.get(LOOP_ENV, "")
if _LOOP not in ("", "asyncio", "uvloop"):
    raise pytest.UsageError(f"{LOOP_ENV}={_LOOP!r}: expected uvloop or asyncio")

if _LOOP == "uvloop":
    # Defined only for such a run: pytest-asyncio parametrizes every async test by the
    # factories this hook returns, and a run on asyncio's loop should stay as it is.
    import uvloop

    def pytest_asyncio_loop_factories(
        config: pytest.Config, item: pytest.Item
    ) -> Mapping[str, Callable[[], Any]]:
        """uvloop's loop for every async test."""
        return {"uvloop": uvloop.new_event_loop}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long Spark chaos scenarios are deselected (not skipped) outside make test-spark-chaos."""
    if os.environ.get("AIOKPROD_SPARK_CHAOS", "") == "long":
        return
    dropped = [item for item in items if item.get_closest_marker("chaos_long")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not item.get_closest_marker("chaos_long")]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if CHAOS_RESULTS:
        terminalreporter.section("Spark chaos (read back with librdkafka, read_committed)")
        for line in table(CHAOS_RESULTS):
            terminalreporter.write_line(line)
        where = os.environ.get("AIOKPROD_SPARK_CHAOS_JSON")
        if where:
            mode = os.environ.get("AIOKPROD_SPARK_CHAOS", "short")
            finished = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            save(CHAOS_RESULTS, Path(where), mode=mode, finished=finished)
            terminalreporter.write_line(f"saved to {where}")
    versions = report_lines()
    if versions:
        terminalreporter.section("broker versions (read back with librdkafka)")
        for line in versions:
            terminalreporter.write_line(line)
    if not RESULTS:
        return
    terminalreporter.section("fault scenarios (read back with librdkafka)")
    header = (
        "| scenario | records | lost | duplicated | reordered | failed | pending | "
        "retried | time s |"
    )
    terminalreporter.write_line(header)
    terminalreporter.write_line("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in RESULTS:
        terminalreporter.write_line(
            f"| {row['scenario']} | {row['records']} | {row['lost']} | {row['duplicated']} | "
            f"{row['reordered']} | {row['failed_futures']} | {row['pending_futures']} | "
            f"{row['retried']} | {row['seconds']} |"
        )
