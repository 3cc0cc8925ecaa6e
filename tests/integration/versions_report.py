"""What the version-matrix tests observed per Kafka release, printed at the end of the run."""

from __future__ import annotations

from typing import Any

#: version -> observations (broker API ranges, negotiated versions, features, round trips).
VERSION_RESULTS: dict[str, dict[str, Any]] = {}


def _range(value: Any) -> str:
    return f"v{value[0]}-v{value[1]}" if value else "-"


def report_lines() -> list[str]:
    """A Markdown table, one row per release that was tested, oldest first."""
    if not VERSION_RESULTS:
        return []
    lines = [
        "| Kafka | Produce (broker) | Metadata (broker) | ApiVersions (broker) | negotiated "
        "Produce / Metadata / ApiVersions | finalized features | 1-node round trip | "
        "3-node round trip |",
        "|---|---|---|---|---|---|---:|---:|",
    ]

    def order(version: str) -> tuple[int, ...]:
        return tuple(int(p) for p in version.split("-")[0].split(".") if p.isdigit())

    for version in sorted(VERSION_RESULTS, key=order):
        row = VERSION_RESULTS[version]
        negotiated = row.get("negotiated", {})
        picked = " / ".join(
            f"v{negotiated[name]}" if name in negotiated else "-"
            for name in ("Produce", "Metadata", "ApiVersions")
        )
        features = ", ".join(f"{k}={v}" for k, v in row.get("features", {}).items()) or "-"
        lines.append(
            f"| {version} | {_range(row.get('produce_broker'))} | "
            f"{_range(row.get('metadata_broker'))} | {_range(row.get('apiversions_broker'))} | "
            f"{picked} | {features} | {row.get('round_trip_1', '-')} | "
            f"{row.get('round_trip_3', '-')} |"
        )
    return lines
