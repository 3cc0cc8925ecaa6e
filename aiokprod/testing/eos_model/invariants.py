"""What must hold at the end of every explored run (docs/spark.md, "Model-checked").

- **No duplicate**: no write's rows of a Spark partition are visible twice.
- **Committed means whole**: a micro-batch in Spark's commit log, and a batch job whose
  ``commit()`` returned, have every partition's rows visible.
- **Failed means invisible**: a batch job that failed (its driver raised, or died before
  deciding) has none of its rows visible — unless a loss was *reported*: then the visible
  rows are exactly those not reported lost, and only a transaction the coordinator aborted
  after its timeout may have been lost (a driver that stalled past its margin). A job whose
  driver died while committing may stay part-visible until the next run on the prefix
  completes its decision (or reports what timed out meanwhile): no later run, no verdict.
- **Nothing left open**: no transaction is still open at the end whose opener finished (a
  straggler that prepared after its write ended) while the driver of its write lived to
  close it, or that a driver listed and then went on without ending (a driver that did not
  crash is expected to end what it found open). What a dead process left open with nobody
  alive to end it is bounded by the transaction timeout instead.
- **No bug**: no actor raised anything but a Kafka error.
"""

from __future__ import annotations

from collections import Counter

from aiokprod.testing.eos_model.kafka import ONGOING
from aiokprod.testing.eos_model.spark import SparkModel

__all__ = ["check"]


def check(model: SparkModel) -> list[str]:
    """The violations of the run that just ended (empty: it is clean)."""
    problems = list(model.errors)
    visible = Counter(model.kafka.visible())
    for label, count in sorted(visible.items(), key=repr):
        if count > 1:
            problems.append(f"duplicate: {label} visible {count} times")
    parts = range(model.config.partitions)
    kind = "batch" if model.config.streaming else "job"
    if model.config.streaming:
        for index in sorted(set(model.commit_log)):
            missing = [p for p in parts if visible[(kind, index, p)] == 0]
            if missing:
                problems.append(
                    f"micro-batch {index} is in Spark's commit log, partitions {missing} missing"
                )
    else:
        for write in model.writes:
            shown = [p for p in parts if visible[(kind, write.index, p)]]
            if write.outcome == "committed":
                if len(shown) != len(parts):
                    problems.append(f"job {write.index} committed, only {shown} visible")
            elif shown:
                later = [w for w in model.writes if w.index > write.index and w.phase != "planning"]
                if write.outcome == "driver died" and not later:
                    continue  # its decision waits for the next run on the prefix
                problems.extend(_partial(model, write.index, write.name, shown))
    problems.extend(_left_open(model))
    return problems


def _partial(model: SparkModel, index: int, name: str, shown: list[int]) -> list[str]:
    """A failed job with rows visible: allowed only as a reported timeout loss."""
    parts = range(model.config.partitions)
    missing = [p for p in parts if p not in shown]
    if not missing:
        return []  # a decided commit completed by a later run (rolled forward): whole
    reported: set[int] = set()
    for _, _, error in model.raised:
        reported.update(getattr(error, "lost", ()) or ())
    unreported = [p for p in missing if p not in reported]
    if unreported:
        return [f"job {index} partially visible: {shown} shown, {unreported} lost silently"]
    timed_out = {r.label[2] for r in model.kafka.log if r.label[:2] == ("job", index)}
    by_timeout = [
        p
        for p in missing
        if any(
            r.label == ("job", index, p) and r.status == "aborted" and r.cause == "timeout"
            for r in model.kafka.log
        )
    ]
    if len(by_timeout) != len(missing) or not timed_out:
        return [f"job {index} partially visible: {shown} shown, {missing} lost (reported)"]
    return []


def _left_open(model: SparkModel) -> list[str]:
    problems = []
    s = model.scheduler
    outcome = {w.name: w.outcome for w in model.writes}
    for tid, state in sorted(model.kafka.ids.items()):
        if state.state != ONGOING:
            continue
        opener = state.opener
        write = ".".join(opener.split(".")[:2])
        if opener and opener not in s.dead and outcome.get(write) != "driver died":
            problems.append(f"left open: {tid}, opened by {opener}, which did not die")
            continue
        for lister in sorted(state.listed_by):
            if lister not in s.dead and _is_driver(lister):
                problems.append(f"left open: {tid}, listed open by {lister}, which went on")
                break
    return problems


def _is_driver(actor: str) -> bool:
    return actor.endswith((".plan", ".commit", ".abort"))
