"""MetadataFetcher: refreshes the cluster view and lets ``send()`` wait for a topic.

:class:`~aiokprod.internals.metadata.MetadataState` decides when a refresh is due and what it
asks for; the sender calls :meth:`MetadataFetcher.maybe_refresh` on every pass, which starts
at most one refresh at a time in the producer's task group. The answer's body arrives
undecoded (``MetadataRequestInSteps``) and is decoded and merged in steps, the event loop
given back between them, then swapped in at once (issue 30). ``send()`` for a topic not yet
in the view awaits :meth:`MetadataFetcher.wait_for_topic`, bounded by ``max_block_ms``.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable

from aiokprod.clock import SYSTEM_CLOCK, Clock
from aiokprod.errors import (
    AuthenticationError,
    KafkaConnectionError,
    KafkaError,
    MetadataTimeoutError,
    ProtocolError,
)
from aiokprod.internals.metadata import MetadataState, TopicInfo
from aiokprod.logs import LogEvery, get_logger
from aiokprod.net.pool import ConnectionPool, Spawn
from aiokprod.protocol.messages.metadata import (
    MetadataRequestInSteps,
    MetadataRequestTopic,
    MetadataResponse,
)
from aiokprod.protocol.metadata_fast import MetadataDecoder, MetadataResponseBody
from aiokprod.protocol.schema import Struct

log = get_logger("aiokprod.metadata")

#: Consecutive failed refreshes before a WARNING, and how often it repeats while failing.
WARN_AFTER_FAILURES = 3
WARN_EVERY_MS = 30_000
#: Idle topics whose state is released per step (the loop is given back between steps).
RELEASE_STEP_TOPICS = 500


def _answer(response: Struct) -> MetadataDecoder | MetadataResponse:
    """What a Metadata request got: a decoder past the answer's header, or a decoded answer.

    Raises:
        ProtocolError: the answer's header is malformed.
        KafkaError: the connection answered with another message.
    """
    if isinstance(response, MetadataResponseBody):
        return MetadataDecoder(response.data, response.version)
    if isinstance(response, MetadataResponse):
        return response
    raise KafkaError("Metadata answered with another message")  # pragma: no cover


class MetadataFetcher:
    """Runs metadata refreshes and wakes the coroutines waiting on topics.

    Args:
        state: when to refresh and the current snapshot.
        pool: connections to send Metadata requests on.
        spawn: starts a background coroutine in the producer's task group.
        request_timeout_ms: bound on one Metadata request.
        allow_auto_create_topics: ask the broker to create unknown topics (if it allows).
        on_update: called after each successful refresh (wakes the sender).
        on_cluster_change: called with the old and the new cluster id when a response comes
            from another cluster than before, before the response is applied (issue 29).
        on_release: called with topics that idled out of the view (a few hundred at a
            time): the producer drops what else it holds for them (issue 30).
        clock: the producer's clock.
    """

    def __init__(
        self,
        state: MetadataState,
        pool: ConnectionPool,
        spawn: Spawn,
        *,
        request_timeout_ms: int,
        allow_auto_create_topics: bool,
        on_update: Callable[[], None],
        on_cluster_change: Callable[[str, str], None] | None = None,
        on_release: Callable[[list[str]], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        self.state = state
        self._pool = pool
        self._spawn = spawn
        self._timeout_s = request_timeout_ms / 1000
        self._auto_create = allow_auto_create_topics
        self._on_update = on_update
        self._on_cluster_change = on_cluster_change
        self._on_release = on_release
        self._refreshing = False
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self.last_error: BaseException | None = None
        self._closed_error: BaseException | None = None
        self._failures = 0
        self._warn = LogEvery(WARN_EVERY_MS)

    def maybe_refresh(self, now_ms: int) -> int:
        """Start a refresh if one is due; returns ms until the next one may be due."""
        if self._refreshing:
            return self.state.retry_backoff_ms
        delay = self.state.time_to_next_update_ms(now_ms)
        if delay > 0:
            return delay
        node_id = self._pool.least_loaded_node(now_ms)
        if node_id is None:
            return max(self._pool.next_attempt_delay_ms(now_ms), 1)
        self._refreshing = True
        topics = self.state.attempt_started(now_ms)
        released = self.state.released
        if released and self._on_release is not None:
            on_release = self._on_release

            async def release() -> None:
                # Chunks with the loop given back between them: 10,000 topics idle out at
                # once when a service stops using them together.
                for start in range(0, len(released), RELEASE_STEP_TOPICS):
                    if start:
                        await asyncio.sleep(0)
                    on_release(released[start : start + RELEASE_STEP_TOPICS])

            self._spawn(release)

        async def refresh() -> None:
            await self._refresh(node_id, topics)

        self._spawn(refresh)
        return self.state.retry_backoff_ms

    async def _refresh(self, node_id: int, topics: list[str]) -> None:
        state = self.state
        try:
            conn = await self._pool.connection(node_id, self._timeout_s)
            request = MetadataRequestInSteps(
                topics=[MetadataRequestTopic(name=t) for t in topics],
                allow_auto_topic_creation=self._auto_create,
            )
            response = await conn.request(request, self._timeout_s)
            try:
                answer = _answer(response)
                self._check_cluster(answer.cluster_id, node_id)
                # Decoded and merged in steps, the loop given back between them; the view
                # changes at the last step, at once (issue 30).
                for _ in state.update_steps(answer, topics, self._clock.monotonic_ms()):
                    await asyncio.sleep(0)
            except ProtocolError as exc:
                error = KafkaConnectionError(
                    f"node {node_id} sent a broken Metadata response ({exc}); disconnecting"
                )
                error.__cause__ = exc
                conn.close(error)
                raise error from exc
        except KafkaError as exc:
            self.last_error = exc
            now_ms = self._clock.monotonic_ms()
            state.failed(now_ms)
            self._failures += 1
            if self._failures >= WARN_AFTER_FAILURES and self._warn.due("refresh", now_ms):
                log.warning(
                    "cannot fetch metadata; sends wait up to max_block_ms for it, queued "
                    "records up to delivery_timeout_ms",
                    failures=self._failures,
                    node=node_id,
                    error=str(exc),
                    topics=len(topics),
                )
            else:
                log.debug("metadata refresh failed", node=node_id, error=str(exc))
            self._refreshing = False
            if isinstance(exc, AuthenticationError):
                # Credentials will not get better by waiting out max_block_ms: fail fast.
                self._fail_topic_waiters(exc)
            self._on_update()
            return
        except BaseException:
            self._refreshing = False
            state.abandoned()
            raise
        self._refreshing = False
        self.last_error = None
        if self._failures >= WARN_AFTER_FAILURES:
            log.info("metadata fetched again", after_failures=self._failures)
        self._failures = 0
        self._warn.reset("refresh")
        # The sender passes the new brokers on to the pool (it follows ``state.version``).
        self._wake_waiters()
        self._on_update()

    def _check_cluster(self, new: str | None, node_id: int) -> None:
        """Follow the cluster id of an answer (issue 29; docs/delivery-guarantees.md).

        The first broker the producer heard from named the cluster it writes to (the pool
        asks each broker as it connects). Another one later means the cluster behind the
        bootstrap address was replaced: everything the producer holds
        from the old one (its producer id, sequences, transaction) is void there, and
        ``on_cluster_change`` settles that before the new view is applied. A cluster the
        producer left is never returned to: its answer is refused like a failed refresh.

        Raises:
            KafkaConnectionError: the answer comes from a cluster the producer left.
        """
        pool = self._pool
        old = pool.cluster_id
        if new is None or new == old:
            return
        if pool.is_retired(new):
            raise KafkaConnectionError(
                f"node {node_id} answered for cluster {new!r}, which this producer left for "
                f"cluster {old!r}: its metadata is not used"
            )
        if old is None:
            pool.set_cluster(new)
            return
        log.warning(
            "the cluster behind bootstrap_servers changed; getting a new producer id from the "
            "new cluster before writing to it",
            old_cluster_id=old,
            new_cluster_id=new,
            node=node_id,
        )
        pool.set_cluster(new)  # first: requests out to the old cluster come back now
        if self._on_cluster_change is not None:
            self._on_cluster_change(old, new)

    def _wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, {}
        for futures in waiters.values():
            for future in futures:
                if not future.done():
                    future.set_result(None)

    def _fail_topic_waiters(self, error: AuthenticationError) -> None:
        waiters, self._waiters = self._waiters, {}
        for futures in waiters.values():
            for future in futures:
                if not future.done():
                    future.set_exception(copy.copy(error))

    def fail_waiters(self, error: BaseException) -> None:
        """Wake every waiting ``send()`` with ``error`` (the producer is closing)."""
        self._closed_error = error
        waiters, self._waiters = self._waiters, {}
        for futures in waiters.values():
            for future in futures:
                if not future.done():
                    future.set_exception(error)

    async def wait_for_topic(
        self, topic: str, partition: int | None, timeout_s: float, max_block_ms: int
    ) -> TopicInfo:
        """Wait until ``topic`` (and ``partition``, if given) is in the cluster view.

        Raises:
            MetadataTimeoutError: not there within ``timeout_s``.
            BrokerError: the topic has a non-retriable error (e.g. authorization).
            AuthenticationError: connecting failed on credentials or TLS trust (at once,
                not after ``timeout_s``).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        state = self.state
        state.add_topic(topic, self._clock.monotonic_ms())
        while True:
            if self._closed_error is not None:
                raise self._closed_error
            info = state.snapshot.topics.get(topic)
            if info is not None and (partition is None or partition < info.num_partitions):
                return info
            error = state.snapshot.topic_error(topic)
            if error is not None and not error.retriable:
                raise error
            state.request_update_for(topic)
            auth_error = self._pool.auth_error
            if auth_error is not None:
                # The last connection attempt was refused on credentials: say so now. The
                # refresh requested above still runs (with reconnect backoff), and a success
                # clears the error.
                self._on_update()
                raise copy.copy(auth_error)
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.setdefault(topic, []).append(future)
            self._on_update()  # wake the sender, which starts the refresh
            remaining = deadline - loop.time()
            try:
                if remaining <= 0:
                    raise TimeoutError
                async with asyncio.timeout(remaining):
                    await future
            except TimeoutError:
                raise MetadataTimeoutError(
                    self._timeout_message(topic, partition, info, max_block_ms)
                ) from None
            finally:
                if not future.done():
                    future.cancel()

    def _timeout_message(
        self, topic: str, partition: int | None, info: TopicInfo | None, max_block_ms: int
    ) -> str:
        if info is not None and partition is not None:
            return (
                f"partition {partition} of topic {topic!r} does not exist (it has "
                f"{info.num_partitions} partitions) after {max_block_ms} ms"
            )
        reason = ""
        error = self.state.snapshot.topic_error(topic)
        if error is not None:
            reason = f" (last error: {error.name})"
        elif self.last_error is not None:
            reason = f" (last error: {self.last_error})"
        return f"topic {topic!r} not present in metadata after {max_block_ms} ms{reason}"
