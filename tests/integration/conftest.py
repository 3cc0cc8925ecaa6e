"""Integration-test hooks: print the fault scenarios' counts and the version matrix."""

from __future__ import annotations

import pytest
from faults import RESULTS
from versions_report import report_lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
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
