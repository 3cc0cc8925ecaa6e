"""Ending what a closed run left: the open transactions of a prefix, the ids of its attempts.

A run is closed before anything here runs (docs/design.md, "Exactly-once from Spark"): a task
that checks its run afterwards writes nothing, so what is listed or fenced here is all that
can still be open.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokprod.logs import get_logger
from aiokprod.spark.decision_store import AdminCalls
from aiokprod.spark.eos_records import RunToken, parse_transactional_id, transactional_id
from aiokprod.spark.exactly_once import TaskResult

__all__ = ["fence_attempts", "fence_open"]

log = get_logger("aiokprod.spark")


async def fence_open(admin: AdminCalls, prefix: str, run_tag: str | None) -> tuple[str, ...]:
    """Abort the prefix's open transactions (only those of run ``run_tag`` if given)."""
    listed = await admin.list_transactions(states=["Ongoing"])
    ids = []
    for listing in listed:
        name = parse_transactional_id(prefix, listing.transactional_id)
        if name is not None and (run_tag is None or name.run_tag == run_tag):
            ids.append(listing.transactional_id)
    ids.sort()
    if ids:
        log.info("aborting transactions no task will finish", prefix=prefix, ids=ids)
        await admin.fence_producers(ids)
    return tuple(ids)


async def fence_attempts(
    admin: AdminCalls,
    prefix: str,
    scope: RunToken | None,
    results: Sequence[TaskResult | None],
    attempts: int,
) -> None:
    """Fence the ids every task attempt of the run may use, open or not yet.

    ``scope``: a batch job's run (its ids carry it), None for a streaming query's ids. Every
    partition of ``results``, attempts 0 to ``attempts - 1`` (and any higher one a result
    names). A task that passed its run check just before the run was closed may open its
    transaction after the listing of open ones - and its process may die before its next
    check: its id's InitProducerId here aborts that transaction, or fences the producer
    before it writes.
    """
    highest = max([attempts - 1, *(_attempt(r) for r in results)]) + 1
    ids = [
        transactional_id(prefix, partition, attempt, scope)
        for partition in range(len(results))
        for attempt in range(highest)
    ]
    if ids:
        await admin.fence_producers(ids)


def _attempt(result: TaskResult | None) -> int:
    """The attempt of the task that wrote ``result`` (0 if it wrote nothing)."""
    if result is None or result.transaction is None:
        return 0
    name = result.transaction.transactional_id.rsplit(".", 1)[-1]
    return int(name) if name.isdigit() else 0
