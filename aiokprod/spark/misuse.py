"""Misuse the exactly-once sink refuses: a prefix in use, a replay with another layout.

Neither check is needed for safety - a second writer on a prefix closes the first one's run
(its tasks then write nothing more), a replay with another partitioning is refused at its
commit at the latest - but each turns a confusing failure into an early one that names what
to fix (docs/spark.md, "Limits").
"""

from __future__ import annotations

import asyncio

from aiokprod.errors import ConfigError
from aiokprod.logs import get_logger
from aiokprod.spark.decision_store import AdminCalls, DecisionStore
from aiokprod.spark.eos_records import Decision, parse_transactional_id

__all__ = ["IN_USE_WAIT_MS", "check_not_in_use", "layout_problem"]

log = get_logger("aiokprod.spark")

#: How long planning watches a run left open for the transactions its tasks begin.
IN_USE_WAIT_MS = 5_000


async def check_not_in_use(
    admin: AdminCalls, store: DecisionStore, prefix: str, wait_ms: int
) -> None:
    """Fail when another job or query is writing with ``prefix`` right now.

    A run its driver closed is over. A run left open was either cut short (its driver died:
    taking over is right) or is still being written (another job or query with the same
    prefix: a misuse). Planning watches it for ``wait_ms``: if its tasks begin transactions
    meanwhile, or another planning opens a run, the prefix is in use. A run whose tasks begin
    nothing then (its driver died, or its tasks are all in the middle of long writes) is
    taken over; its tasks then find their run closed and write nothing more.

    Raises:
        ConfigError: naming ``transactionalIdPrefix``.
    """
    if wait_ms <= 0:
        return
    state = await store.state()
    if state is None or not state.open:
        return
    before = await _open_starts(admin, prefix)
    await asyncio.sleep(wait_ms / 1000)
    after = await _open_starts(admin, prefix)
    now = await store.state()
    began = after - before
    if (now is not None and now.run != state.run) or began:
        raise ConfigError(
            f"transactionalIdPrefix {prefix!r} is in use: another job or query is writing "
            f"with it right now ({len(began)} transaction(s) began in {wait_ms} ms). A prefix "
            "is for one job or query at a time: give this one its own transactionalIdPrefix"
        )
    log.warning(
        "taking over a run another driver left open (it began nothing while watched)",
        prefix=prefix,
        run=str(state.run),
    )


async def _open_starts(admin: AdminCalls, prefix: str) -> set[tuple[str, int]]:
    """(transactional id, start time) of the prefix's open transactions."""
    listed = await admin.list_transactions(states=["Ongoing"])
    ids = [
        t.transactional_id
        for t in listed
        if parse_transactional_id(prefix, t.transactional_id) is not None
    ]
    if not ids:
        return set()
    views = await admin.describe_transactions(ids)
    return {(i, v.start_time_ms) for i, v in views.items() if v.state == "Ongoing"}


def layout_problem(
    earlier: Decision, query: str, batch_id: int | None, partitions: int
) -> str | None:
    """Why a replayed micro-batch must not commit (another partition count), or None.

    Its tasks skipped the partitions whose marker says committed: with another layout, a
    partition's rows are not the ones its marker stands for (some dropped, some twice).
    """
    if (
        batch_id is None
        or earlier.batch_id != batch_id
        or earlier.query != query
        or not earlier.partitions
        or earlier.partitions == partitions
    ):
        return None
    return (
        f"micro-batch {batch_id} is run again with {partitions} Spark partitions; it was "
        f"committed with {earlier.partitions}, and its markers stand for those partitions' "
        "rows: nothing was committed. Keep the query's partitioning as it was when the "
        "micro-batch ran first (spark.sql.shuffle.partitions, repartition()), or start the "
        "query afresh (a new checkpoint) - see docs/spark.md, 'What the query must satisfy'"
    )
