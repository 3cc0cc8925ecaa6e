"""Admin: a small asyncio admin client for transactions and consumer group offsets.

::

    from aiokprod.admin import Admin

    async with Admin("127.0.0.1:9092") as admin:
        await admin.complete_transaction(prepared, commit=True)
        lingering = await admin.list_transactions(states=["Ongoing"])

What a transactional writer needs beside the producer (docs/admin.md): complete a
transaction another producer prepared (:meth:`Admin.complete_transaction`), fence
transactional ids (:meth:`Admin.fence_producers`, KIP-618), find and describe open
transactions (:meth:`Admin.list_transactions`, :meth:`Admin.describe_transactions`,
KIP-664), and read and write a group's committed offsets. Method names follow the Java
``Admin`` client. It takes the producer's options (the same option table: security, SASL,
TLS, ``client_id``, ``request_timeout_ms``, ``retry_backoff_ms``, ``max_block_ms``...) and
uses the producer's connection pool; every operation retries what is retriable within
``max_block_ms``.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, Unpack

import anyio

from aiokprod import __version__
from aiokprod.clock import SYSTEM_CLOCK, Clock
from aiokprod.config import ProducerConfig, ProducerOptions
from aiokprod.errors import IllegalStateError, InvalidArgumentError, KafkaConnectionError
from aiokprod.internals import group_offsets, txn_admin
from aiokprod.internals.round_trips import RoundTrips
from aiokprod.logs import get_logger
from aiokprod.net.pool import ConnectionPool
from aiokprod.net.sasl import sasl_authenticator
from aiokprod.net.security import build_ssl_context
from aiokprod.net.transport import Transport
from aiokprod.types import (
    OffsetAndMetadata,
    PreparedTransaction,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)

__all__ = [
    "Admin",
    "OffsetAndMetadata",
    "PreparedTransaction",
    "TransactionDescription",
    "TransactionListing",
]

log = get_logger("aiokprod.admin")

_client_ids = itertools.count(1)


class Admin:
    """An asyncio admin client (see the module docstring and docs/admin.md).

    Args:
        bootstrap_servers: ``"host:port"``, a comma-separated list, or a list of them.
        config: a prepared :class:`ProducerConfig` instead of keyword options.
        **options: the producer's options (docs/configuration.md); those about sending
            records are accepted and unused. Unknown names, wrong types and impossible
            combinations raise :class:`~aiokprod.errors.ConfigError` here. The ones that
            matter: the security options, ``client_id`` (default ``aiokprod-admin-N``),
            ``request_timeout_ms``, ``retry_backoff_ms``/``retry_backoff_max_ms``,
            ``max_block_ms`` (the bound on each operation), the reconnect options, and
            ``transaction_timeout_ms`` (registered by :meth:`fence_producers`).

    Use it as ``async with Admin(...) as admin:`` or call :meth:`start` and :meth:`close`.
    It belongs to the event loop it was started on.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        config: ProducerConfig | None = None,
        transport: Transport | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        **options: Unpack[ProducerOptions],
    ) -> None:
        if config is None and options.get("client_id") is None:
            options["client_id"] = f"aiokprod-admin-{next(_client_ids)}"
        self._config = ProducerConfig.resolve(bootstrap_servers, config, options)
        self._transport = transport
        self._clock = clock or SYSTEM_CLOCK
        self._rng = rng or random.Random()
        self._requests: RoundTrips | None = None
        self._pool: ConnectionPool | None = None
        #: What ended the background task, if it failed (a bug): later calls report it.
        self._crash: BaseException | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._closed = False

    @property
    def config(self) -> ProducerConfig:
        """The validated options this client runs with."""
        return self._config

    # --- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the client. It connects on the first operation, not here.

        Raises:
            IllegalStateError: already started, or closed.
            ConfigError: a TLS file or key password that cannot be loaded.
        """
        if self._runner is not None or self._closed:
            raise IllegalStateError("start() on an admin client that was started or closed already")
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._stop = asyncio.Event()
        self._runner = loop.create_task(self._run(ready, self._stop), name="aiokprod-admin")
        await ready

    async def _run(self, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        """The root task: a task group for the connections' read tasks, until close()."""
        cfg = self._config
        try:
            ssl_context = build_ssl_context(cfg)
            authenticate = sasl_authenticator(cfg)
            async with anyio.create_task_group() as tg:

                def spawn(fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
                    tg.start_soon(fn)

                pool = self._pool = ConnectionPool.from_config(
                    cfg,
                    spawn=spawn,
                    software_version=__version__,
                    ssl_context=ssl_context,
                    authenticate=authenticate,
                    transport=self._transport,
                    clock=self._clock,
                    rng=self._rng,
                )
                # The pool is the admin's own: a request may be cut at the operation's
                # deadline (closing its connection) without hurting anyone else.
                self._requests = RoundTrips(pool, cfg, self._clock, self._rng, strict_deadline=True)
                ready.set_result(None)
                await stop.wait()
                pool.close_all()
                tg.cancel_scope.cancel()
        except BaseException as exc:  # noqa: BLE001 - the root task: every ending is handled
            if not ready.done():
                ready.set_exception(exc)
                return
            if isinstance(exc, asyncio.CancelledError) and stop.is_set():
                return
            # A bug in a connection's task (or the loop cancelled us): fail what is under
            # way, and make later calls say why.
            self._crash = exc
            log.error("admin client's background task stopped", error=repr(exc))
            error = KafkaConnectionError(f"the admin client stopped: {exc!r}")
            if self._requests is not None:
                self._requests.close(error)
            if self._pool is not None:
                self._pool.close_all(error)
        finally:
            self._requests = None

    async def close(self) -> None:
        """Close every connection. Operations under way fail; the client cannot restart."""
        self._closed = True
        runner, stop = self._runner, self._stop
        if runner is None or stop is None:
            return
        if self._requests is not None:
            self._requests.close(IllegalStateError("the admin client was closed"))
        stop.set()
        with anyio.CancelScope(shield=True):
            await asyncio.wait([runner])

    def _running(self, call: str) -> RoundTrips:
        requests = self._requests
        if self._crash is not None:
            raise IllegalStateError(
                f"{call}: the admin client's background task failed: {self._crash!r}"
            ) from self._crash
        if requests is None or self._closed:
            state = "closed" if self._closed or self._runner is not None else "not started"
            raise IllegalStateError(
                f"{call}: the admin client is {state} (use 'async with Admin(...)' or start())"
            )
        return requests

    # --- transactions -------------------------------------------------------------------------

    async def complete_transaction(self, prepared: PreparedTransaction, *, commit: bool) -> None:
        """Commit or abort a transaction that a producer prepared and left open.

        Sends EndTxn to the transaction's coordinator with the prepared producer id and
        epoch, at the EndTxn version its protocol needs (v4 or lower for protocol 1, v5 or
        higher for 2); the coordinator checks nothing else, whichever client sends it.
        The records become visible to read_committed readers (commit), or never (abort).

        Completing the same way twice succeeds: the coordinator accepts a retry (protocol 2:
        at the epoch before its bump, once the transaction is CompleteCommit/CompleteAbort;
        protocol 1: the same epoch). Under protocol 1, (producer id, epoch) names the
        producer session rather than one transaction: if the producer ran another
        transaction after this one, completing this one ends that one instead.

        Args:
            prepared: what ``Producer.prepare_transaction()`` returned.
            commit: True to commit, False to abort.

        Raises:
            ProducerFencedError: the transactional id moved on since the prepare (its epoch
                is higher): a newer producer or :meth:`fence_producers` ran InitProducerId,
                or (protocol 1) the coordinator aborted it after ``transaction_timeout_ms``.
            InvalidTxnStateError: the transaction already ended the other way: committing
                one that was aborted (protocol 2: also one the coordinator aborted after
                ``transaction_timeout_ms``, on Kafka 4.4), or aborting one that was
                committed. Under protocol 2, aborting a transaction the coordinator aborted
                after its timeout succeeds.
            InvalidProducerIdMappingError: the id has another producer id now (its epoch
                overflowed, or the id expired and was used again), or the coordinator does
                not know the id at all.
            InvalidProducerEpochError: what brokers older than 2.7 answer instead of
                ProducerFencedError.
            UnsupportedVersionError: protocol 2 and a coordinator without EndTxn v5.
            InvalidArgumentError: ``prepared`` is not a PreparedTransaction.
            KafkaTimeoutError: not done within ``max_block_ms``.
        """
        if not isinstance(prepared, PreparedTransaction) or prepared.protocol not in (1, 2):
            raise InvalidArgumentError(
                f"prepared must be a PreparedTransaction with protocol 1 or 2, got {prepared!r}"
            )
        if not isinstance(commit, bool):
            raise InvalidArgumentError(f"commit must be True or False, got {commit!r}")
        requests = self._running("complete_transaction()")
        await txn_admin.complete_transaction(requests, prepared, commit=commit)

    async def fence_producers(
        self, transactional_ids: Iterable[str], *, transaction_timeout_ms: int | None = None
    ) -> None:
        """Fence the producers of each transactional id, aborting their open transactions.

        Java's ``fenceProducers`` (KIP-618): InitProducerId for each id, concurrently. The
        coordinator aborts the id's open transaction (prepared or not) and bumps its epoch,
        so the producer that held it is fenced (its next request fails with
        ``ProducerFencedError``) and ``complete_transaction`` of its prepared transaction
        fails. It returns once every abort is done (the coordinator answers
        CONCURRENT_TRANSACTIONS while its abort markers are written; that is waited through).

        An id the coordinator has never seen is fine: it gets a producer id, which creates
        coordinator state for it (kept for the broker's ``transactional.id.expiration.ms``,
        7 days by default), with this client's ``transaction_timeout_ms`` (or the one given:
        the coordinator keeps it as the id's timeout, which ``describe_transactions``
        reports).

        Raises:
            InvalidArgumentError: an id that is not a non-empty string.
            TransactionalIdAuthorizationFailedError: no WRITE permission on an id.
            KafkaTimeoutError: not all done within ``max_block_ms``.
        """
        ids = _check_ids(transactional_ids)
        timeout = self._config.transaction_timeout_ms
        if transaction_timeout_ms is not None:
            if type(transaction_timeout_ms) is not int or transaction_timeout_ms <= 0:
                raise InvalidArgumentError(
                    f"transaction_timeout_ms must be a positive int, got {transaction_timeout_ms!r}"
                )
            timeout = transaction_timeout_ms
        requests = self._running("fence_producers()")
        await txn_admin.fence_producers(requests, ids, timeout)

    async def list_transactions(
        self, *, states: Iterable[str] = (), producer_ids: Iterable[int] = ()
    ) -> list[TransactionListing]:
        """Every transactional id the brokers coordinate, filtered by state and producer id.

        ListTransactions (Kafka 3.0+, KIP-664) to every broker, merged and sorted by id.

        Args:
            states: keep only these states (the coordinator's names: ``"Ongoing"``,
                ``"PrepareCommit"``, ``"PrepareAbort"``, ``"CompleteCommit"``,
                ``"CompleteAbort"``, ``"Empty"``, ``"Dead"``, ``"PrepareEpochFence"``);
                empty: all.
            producer_ids: keep only these producer ids; empty: all.

        Raises:
            InvalidArgumentError: an unknown state name or a producer id that is not an int.
            ClusterAuthorizationFailedError / UnsupportedVersionError: from a broker.
            KafkaTimeoutError: not done within ``max_block_ms``.
        """
        state_list = _check_states(states)
        pid_list = list(producer_ids) if not isinstance(producer_ids, int) else [producer_ids]
        for pid in pid_list:
            if type(pid) is not int:
                raise InvalidArgumentError(f"producer_ids must be ints, got {pid!r}")
        requests = self._running("list_transactions()")
        return await txn_admin.list_transactions(requests, state_list, pid_list)

    async def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> dict[str, TransactionDescription]:
        """The state of each transactional id at its coordinator (DescribeTransactions).

        Returns:
            ``transactional_id -> TransactionDescription``. An id the coordinator does not
            know (never used, or expired after ``transactional.id.expiration.ms``) is absent
            from the result: the coordinator has nothing of it to complete or abort.

        Raises:
            InvalidArgumentError: an id that is not a non-empty string.
            TransactionalIdAuthorizationFailedError: no DESCRIBE permission on an id.
            KafkaTimeoutError: not done within ``max_block_ms``.
        """
        ids = _check_ids(transactional_ids)
        requests = self._running("describe_transactions()")
        return await txn_admin.describe_transactions(requests, ids)

    # --- consumer group offsets ---------------------------------------------------------------

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """A consumer group's committed offsets (OffsetFetch at the group coordinator).

        Args:
            group_id: the group.
            partitions: the partitions to ask about; None: every partition the group has an
                offset for.
            require_stable: do not return an offset that an open transaction wrote
                (KIP-447 RequireStable): wait until that transaction is committed or
                aborted, retrying until ``max_block_ms``.

        Returns:
            ``TopicPartition -> OffsetAndMetadata``; partitions without a committed offset
            (or of a topic that does not exist) are absent.

        Raises:
            InvalidArgumentError: a bad group id or partition.
            KafkaTimeoutError: not done within ``max_block_ms`` (with ``require_stable``:
                an open transaction still holds an offset; the cause is
                ``UnstableOffsetCommitError``).
            GroupAuthorizationFailedError / TopicAuthorizationFailedError: from the broker.
        """
        group = _check_group(group_id)
        tps = None if partitions is None else group_offsets.check_partitions(partitions)
        if not isinstance(require_stable, bool):
            raise InvalidArgumentError(f"require_stable must be a bool, got {require_stable!r}")
        requests = self._running("list_consumer_group_offsets()")
        return await group_offsets.fetch_offsets(
            requests, group, tps, require_stable=require_stable
        )

    async def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | int]
    ) -> None:
        """Set a group's committed offsets (OffsetCommit, as Java's ``alterConsumerGroupOffsets``).

        Commits as a group without members (generation -1, no member id): a group with
        active consumers refuses it (``UnknownMemberIdError`` or ``IllegalGenerationError``
        from the broker). A group that does not exist yet is created.

        Args:
            group_id: the group.
            offsets: ``TopicPartition`` -> :class:`OffsetAndMetadata` (or an ``int`` offset,
                with no metadata). The partitions must exist.

        Raises:
            InvalidArgumentError: a bad group id or offsets.
            UnknownTopicOrPartitionError: a partition that does not exist.
            OffsetMetadataTooLargeError: metadata over the broker's
                ``offset.metadata.max.bytes`` (4096 by default).
            KafkaTimeoutError: not done within ``max_block_ms``.
        """
        group = _check_group(group_id)
        checked = group_offsets.check_offsets(offsets)
        requests = self._running("alter_consumer_group_offsets()")
        await group_offsets.commit_offsets(requests, group, checked)


def _check_ids(transactional_ids: Iterable[str]) -> list[str]:
    if isinstance(transactional_ids, str | bytes) or not hasattr(transactional_ids, "__iter__"):
        raise InvalidArgumentError(
            f"transactional_ids must be an iterable of strings, got {transactional_ids!r}"
        )
    ids = list(transactional_ids)
    for tid in ids:
        if not isinstance(tid, str) or not tid:
            raise InvalidArgumentError(f"a transactional id must be a non-empty str, got {tid!r}")
    return list(dict.fromkeys(ids))


def _check_states(states: Iterable[str]) -> list[str]:
    if isinstance(states, str):
        states = [states]
    result = list(states)
    unknown = [s for s in result if s not in txn_admin.TRANSACTION_STATES]
    if unknown:
        raise InvalidArgumentError(
            f"unknown transaction state(s) {unknown!r}; the states are "
            f"{sorted(txn_admin.TRANSACTION_STATES)}"
        )
    return result


def _check_group(group_id: str) -> str:
    if not isinstance(group_id, str) or not group_id:
        raise InvalidArgumentError(f"group_id must be a non-empty str, got {group_id!r}")
    return group_id
