"""The Spark benchmark's Markdown tables: batch runs per workload and sink, streaming runs."""

from __future__ import annotations

import statistics
from typing import Any


def summarize(runs: list[dict[str, Any]]) -> str:
    """Per workload and sink: rows/s min/median/max, the ratio, CPU and requests (medians)."""
    lines = [
        "| workload | sink | runs | min rec/s | median rec/s | max rec/s | median ratio "
        "| CPU s/1M rows: Spark+Python | JVM | Python | broker | Produce requests/1M rows "
        "| batches/request | load 1 min |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for workload in dict.fromkeys(r["workload"] for r in runs):
        mine = [r for r in runs if r["workload"] == workload]
        sinks = list(dict.fromkeys(r["sink"] for r in mine))
        medians = {
            sink: statistics.median(r["rows_per_s"] for r in mine if r["sink"] == sink)
            for sink in sinks
        }
        for sink in sinks:
            its = [r for r in mine if r["sink"] == sink]
            rates = [r["rows_per_s"] for r in its]
            ratio = medians[sink] / medians["kafka"] if "kafka" in medians else float("nan")
            cpu_spark = statistics.median(r["cpu_s_per_m_spark"] for r in its)
            cpu_jvm = statistics.median(r.get("cpu_s_per_m_jvm", 0) for r in its)
            cpu_python = statistics.median(r.get("cpu_s_per_m_python", 0) for r in its)
            cpu_broker = statistics.median(r["cpu_s_per_m_broker"] for r in its)
            requests = statistics.median(
                r.get("produce_requests", 0) * 1e6 / r["rows"] for r in its
            )
            per_request = statistics.median(
                r.get("partition_entries", 0) / max(r.get("produce_requests", 0), 1) for r in its
            )
            loads = [r["load1_before"] for r in its]
            build = f" ({its[0]['build']})" if its[0].get("build") else ""
            lines.append(
                f"| {workload} | {sink}{build} | {len(rates)} | {min(rates):,} | "
                f"{statistics.median(rates):,.0f} | {max(rates):,} | {ratio:.2f}x | "
                f"{cpu_spark:.2f} | {cpu_jvm:.2f} | {cpu_python:.2f} | {cpu_broker:.2f} | "
                f"{requests:,.0f} | {per_request:.1f} | "
                f"{min(loads):.1f}-{max(loads):.1f} |"
            )
    return "\n".join(lines)


def summarize_streams(streams: list[dict[str, Any]]) -> str:
    lines = [
        "| streaming sink | source rows/s | s | steady micro-batches | rows/s while running "
        "| longest micro-batch ms | in the topic | per s of wall time | load 1 min |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in streams:
        lines.append(
            f"| {s['sink']} | {s['rate']:,} | {s['seconds']:.0f} | {s['batches']} | "
            f"{s['rows_per_s_processed']:,} | {s['max_batch_ms']:,} | {s['written']:,} | "
            f"{s['written_per_s_wall']:,} | {s['load1']:.1f} |"
        )
    return "\n".join(lines)
