"""Where the driver keeps its run register and decisions: round trips over an admin client.

The names and encodings are :mod:`aiokprod.spark.eos_records`'s; this module reads and
writes them with the :class:`~aiokprod.admin.Admin` calls the committer makes (the model
checker passes its own admin with the same methods).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar

from aiokprod.errors import KafkaError
from aiokprod.spark.eos_records import (
    Decision,
    RunToken,
    chunk_group,
    decision_group,
    latest_decision,
    run_register_id,
)
from aiokprod.types import (
    OffsetAndMetadata,
    PreparedTransaction,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)

__all__ = ["AdminCalls", "DecisionStore", "RegisterState", "StoredDecision", "bounded"]

#: Admin requests in flight at once (each to its own coordinator).
CONCURRENCY = 32

#: The run register's transaction timeout while a run is open, and once it is closed. The
#: register never runs a transaction: its timeout only says whether a run is open (a run
#: that never closed - its driver died - stays "open" until the next planning).
REGISTER_OPEN_MS = 1_001
REGISTER_CLOSED_MS = 1_000

T = TypeVar("T")
A = TypeVar("A")


class AdminCalls(Protocol):
    """The :class:`~aiokprod.admin.Admin` methods the driver uses."""

    async def complete_transaction(self, prepared: PreparedTransaction, *, commit: bool) -> None:
        """EndTxn."""

    async def fence_producers(
        self, transactional_ids: Iterable[str], *, transaction_timeout_ms: int | None = None
    ) -> None:
        """InitProducerId on each id."""

    async def list_transactions(
        self, *, states: Iterable[str] = (), producer_ids: Iterable[int] = ()
    ) -> list[TransactionListing]:
        """ListTransactions."""
        ...

    async def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> dict[str, TransactionDescription]:
        """DescribeTransactions."""
        ...

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """OffsetFetch."""
        ...

    async def alter_consumer_group_offsets(self, group_id: str, offsets: Any) -> None:
        """OffsetCommit."""


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterState:
    """The run register now: its token, and whether the run it names is open."""

    run: RunToken
    open: bool


@dataclasses.dataclass(frozen=True, slots=True)
class StoredDecision:
    """The newest decision header found, and the decision if it could be read whole."""

    sequence: int
    where: TopicPartition
    decision: Decision | None


class UnreadableDecisionError(KafkaError):
    """A decision's header is stored but its chunks are missing or do not match."""


class DecisionStore:
    """The run register and the decisions of one ``transactionalIdPrefix``."""

    def __init__(self, admin: AdminCalls, prefix: str) -> None:
        self.admin = admin
        self.prefix = prefix

    # --- the run register -------------------------------------------------------------------

    async def open_run(self) -> RunToken:
        """Bump the run register: a new run's token (the run before is closed)."""
        register = run_register_id(self.prefix)
        await self.admin.fence_producers([register], transaction_timeout_ms=REGISTER_OPEN_MS)
        state = await self.state()
        if state is None:  # pragma: no cover - the coordinator just answered InitProducerId
            raise KafkaError(f"the run register {register} is unknown right after its bump")
        return state.run

    async def state(self) -> RegisterState | None:
        """The run register now (None: never used)."""
        register = run_register_id(self.prefix)
        view = (await self.admin.describe_transactions([register])).get(register)
        if view is None:
            return None
        return RegisterState(
            RunToken(view.producer_id, view.producer_epoch), view.timeout_ms == REGISTER_OPEN_MS
        )

    async def close_run(self, run: RunToken | None) -> bool:
        """Close ``run`` (bump the register); False if another run holds it already.

        ``run`` None (an abort that does not know its run) closes whatever run is open.
        """
        if run is not None:
            state = await self.state()
            if state is None or state.run != run:
                return False
        register = run_register_id(self.prefix)
        await self.admin.fence_producers([register], transaction_timeout_ms=REGISTER_CLOSED_MS)
        return True

    # --- decisions ----------------------------------------------------------------------------

    async def latest(self) -> StoredDecision | None:
        """The newest decision (None: there is none)."""
        offsets = await self.admin.list_consumer_group_offsets(decision_group(self.prefix))
        found = latest_decision(offsets)
        if found is None:
            return None
        sequence, where, header = found
        count = Decision.chunks_of(header) or 0

        async def chunk(index: int) -> str | None:
            group = chunk_group(self.prefix, sequence, index)
            got = await self.admin.list_consumer_group_offsets(group, [where])
            value = got.get(where)
            return None if value is None or value.offset != sequence else value.metadata

        texts = await bounded(chunk, range(1, count + 1))
        if any(t is None for t in texts):
            return StoredDecision(sequence, where, None)
        decision = Decision.decode(self.prefix, header, [t for t in texts if t is not None])
        return StoredDecision(sequence, where, decision)

    async def store(self, where: TopicPartition, sequence: int, decision: Decision) -> None:
        """Store ``decision``: its chunks first, then the header (which makes it count)."""
        texts = decision.encode()
        if len(texts) > 1:
            await bounded(
                lambda item: self.admin.alter_consumer_group_offsets(
                    chunk_group(self.prefix, sequence, item[0]),
                    {where: OffsetAndMetadata(sequence, item[1])},
                ),
                list(enumerate(texts[1:], 1)),
            )
        await self.store_header(where, sequence, decision)

    async def store_header(self, where: TopicPartition, sequence: int, decision: Decision) -> None:
        """Store ``decision``'s header only (its chunks are stored already, unchanged)."""
        header = decision.encode()[0]
        await self.admin.alter_consumer_group_offsets(
            decision_group(self.prefix), {where: OffsetAndMetadata(sequence, header)}
        )


async def bounded(call: Callable[[A], Awaitable[T]], items: Iterable[A]) -> list[T]:
    """``call(item)`` for every item, at most ``CONCURRENCY`` at a time; results in order.

    Each call starts only once it holds the gate: when one fails, those not started never are.
    """
    gate = asyncio.Semaphore(CONCURRENCY)

    async def run(item: A) -> T:
        async with gate:
            return await call(item)

    return list(await asyncio.gather(*(run(i) for i in items)))
