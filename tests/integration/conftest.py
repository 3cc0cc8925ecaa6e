"""Integration-test hooks: print the fault scenarios' counts at the end of the run."""

from __future__ import annotations

import pytest
from faults import RESULTS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
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
