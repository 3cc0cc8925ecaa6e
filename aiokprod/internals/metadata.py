"""When to refresh the cluster view, for which topics, and how an answer is applied.

:class:`MetadataState` decides *when* to refresh and *what* to ask for, as the Java
client's ``ProducerMetadata``:

- a topic used for the first time is asked for at once (its ``send()`` waits), together
  with every other new topic of the moment: new topics coalesce into one request, and a
  burst of them is paced (at most :data:`NEW_TOPIC_BURST` requests at once, then one per
  ``retry_backoff_ms``), so 10,000 first sends within a second make a dozen requests, not
  10,000;
- after an error on a topic (a leader moved, a topic unknown) that topic is asked for,
  not every topic (a partial refresh), once ``retry_backoff_ms`` has passed since the last
  refresh; after a disconnect, every topic;
- every ``metadata_max_age_ms`` every topic in use (a full refresh);
- after a failed refresh, with exponential backoff up to ``retry_backoff_max_ms``.

A topic not used for ``metadata_max_idle_ms`` (and with nothing queued or in flight) leaves
the refresh set and the view when the next refresh starts: :attr:`MetadataState.released`
names it for the producer to drop what else it holds for the topic (issue 30).

An answer is applied in steps (:meth:`MetadataState.update_steps`, see
:class:`~aiokprod.internals.cluster_view.SnapshotUpdate`) and swapped in at the end. It is
all synchronous and takes the time as an argument; the async fetcher lives in
``internals.metadata_fetcher``. The view's types are defined in ``internals.cluster_view``
and re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Final

from aiokprod.internals.cluster_view import (
    NO_LEADER,
    BrokerNode,
    ClusterSnapshot,
    PartitionInfo,
    SnapshotUpdate,
    TopicInfo,
    is_valid_address,
)
from aiokprod.protocol.messages.metadata import MetadataResponse
from aiokprod.protocol.metadata_fast import MetadataDecoder, topics_of
from aiokprod.types import TopicPartition

__all__ = [
    "DECODE_STEP_PARTITIONS",
    "MAX_TOPICS_PER_REQUEST",
    "NEW_TOPIC_BURST",
    "NO_LEADER",
    "BrokerNode",
    "ClusterSnapshot",
    "MetadataState",
    "PartitionInfo",
    "TopicInfo",
    "is_valid_address",
]

#: Partitions decoded per step of an update: a few milliseconds of pure Python (issue 30).
DECODE_STEP_PARTITIONS: Final = 2000
#: Refreshes for new topics that may start back to back before they are paced.
NEW_TOPIC_BURST: Final = 3
#: The most topics one Metadata request asks for: a refresh of more goes in several
#: requests, one after the other (building and encoding a request of 10,000 topics held the
#: loop for ~10 ms; each of these takes ~2 ms).
MAX_TOPICS_PER_REQUEST: Final = 2000


class MetadataState:
    """When to refresh metadata, for which topics, and the current view (no I/O).

    A request made while a refresh is in flight is kept for the next one.

    Args:
        max_age_ms: refresh every topic at least this often (``metadata_max_age_ms``).
        max_idle_ms: forget a topic not used for this long (``metadata_max_idle_ms``).
        retry_backoff_ms: pause before a refresh asked for by errors, after a failure, and
            between paced refreshes for new topics.
        retry_backoff_max_ms: the longest pause after repeated failures.
    """

    def __init__(
        self,
        max_age_ms: int,
        max_idle_ms: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int | None = None,
    ) -> None:
        self.snapshot = ClusterSnapshot()
        self.max_age_ms = max_age_ms
        self.max_idle_ms = max_idle_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_max_ms or retry_backoff_ms, retry_backoff_ms)
        #: Whether a topic still has records queued or in flight (it is then never idle).
        self.busy: Callable[[str], bool] = _never_busy
        self._topics_last_used: dict[str, int] = {}
        #: The next refresh asks for every topic in use (the first one, disconnects).
        self._full_requested = True
        #: Topics to ask for after errors, and new topics (ordered sets).
        self._partial: dict[str, None] = {}
        self._new: dict[str, None] = {}
        self._in_flight = False
        self._asked: list[str] = []
        self._asked_full = False
        #: The rest of a refresh of more than MAX_TOPICS_PER_REQUEST topics: asked next.
        self._more: list[str] = []
        self._last_full_ms = -1
        self._backoff_until_ms = 0
        self._failures = 0
        #: Pacing of refreshes for new topics: a bucket of NEW_TOPIC_BURST tokens.
        self._tokens = float(NEW_TOPIC_BURST)
        self._tokens_at_ms = 0
        #: Topics the last :meth:`attempt_started` released (idle): left out of the view;
        #: the producer drops what else it holds for them.
        self.released: list[str] = []
        #: Partitions moved by leader hints while an update is under way.
        self._hinted: list[TopicPartition] | None = None
        self.version = 0

    # --- what is in use ---------------------------------------------------------------------

    @property
    def topics(self) -> list[str]:
        """Topics in use: a full refresh asks for these."""
        return list(self._topics_last_used)

    def add_topic(self, topic: str, now_ms: int) -> bool:
        """Note that ``topic`` is in use; True if it is new (it is then asked for soon)."""
        known = topic in self._topics_last_used
        self._topics_last_used[topic] = now_ms
        if not known:
            self._new[topic] = None
        return not known

    def touch(self, topic: str, now_ms: int) -> None:
        """Note a use of a known topic (a new batch for it: it stays in the view)."""
        if topic in self._topics_last_used:
            self._topics_last_used[topic] = now_ms

    # --- what to refresh, and when ----------------------------------------------------------

    def request_update(self) -> None:
        """Ask for a full refresh at the next opportunity (disconnects, unknown cluster)."""
        self._full_requested = True

    def request_update_for(self, topics: str | list[str] | set[str]) -> None:
        """Ask for a refresh of ``topics`` only (errors on them: a partial refresh)."""
        if isinstance(topics, str):
            self._partial[topics] = None
        else:
            for topic in topics:
                self._partial[topic] = None

    def time_to_next_update_ms(self, now_ms: int) -> int:
        """0 if a refresh is due now, else how long until it is."""
        backoff_left = max(self._backoff_until_ms - now_ms, 0)
        if self._failures:
            return backoff_left
        if self._more:
            return 0  # the same refresh goes on
        if self._new:
            return self._token_delay_ms(now_ms)
        if self._full_requested or self._partial:
            return backoff_left
        if self._last_full_ms < 0:
            return 0
        return max(self._last_full_ms + self.max_age_ms - now_ms, 0)

    def _token_delay_ms(self, now_ms: int) -> int:
        self._refill(now_ms)
        if self._tokens >= 1 or self.retry_backoff_ms <= 0:
            return 0
        return max(int((1 - self._tokens) * self.retry_backoff_ms) + 1, 1)

    def _refill(self, now_ms: int) -> None:
        if self.retry_backoff_ms > 0 and now_ms > self._tokens_at_ms:
            earned = (now_ms - self._tokens_at_ms) / self.retry_backoff_ms
            self._tokens = min(float(NEW_TOPIC_BURST), self._tokens + earned)
        self._tokens_at_ms = max(self._tokens_at_ms, now_ms)

    def attempt_started(self, now_ms: int) -> list[str]:
        """A refresh starts now; returns the topics to ask for.

        Every topic in use when a full refresh is due (asked for, or ``max_age_ms`` since
        the last one), else the new topics and those asked for after errors; at most
        :data:`MAX_TOPICS_PER_REQUEST` of them, the rest right after. Topics idle for
        ``max_idle_ms`` with nothing queued or in flight leave the view here
        (:attr:`released`).
        """
        self._in_flight = True
        busy = self.busy
        idle = [
            t
            for t, used in self._topics_last_used.items()
            if now_ms - used > self.max_idle_ms and t not in self._new and not busy(t)
        ]
        for topic in idle:
            del self._topics_last_used[topic]
            self._partial.pop(topic, None)
        self.released = idle
        if idle:
            self._topics_last_used = dict(self._topics_last_used)  # a dict keeps its size
            self.snapshot = self.snapshot.without(set(idle))
            self.version += 1
        if self._new:
            self._refill(now_ms)
            self._tokens = max(self._tokens - 1, 0.0)
        full = (
            self._full_requested
            or self._last_full_ms < 0
            or now_ms >= self._last_full_ms + self.max_age_ms
        )
        in_use = self._topics_last_used
        if full:
            asked = list(in_use)
        else:
            pending = dict.fromkeys(self._more)
            pending.update(self._partial)
            pending.update(self._new)
            asked = [t for t in pending if t in in_use]
        self._more = asked[MAX_TOPICS_PER_REQUEST:]
        asked = asked[:MAX_TOPICS_PER_REQUEST]
        self._asked, self._asked_full = asked, full
        self._full_requested = False
        self._partial = {}
        self._new = {}
        return asked

    # --- applying an answer -----------------------------------------------------------------

    def update(self, response: MetadataResponse, requested: list[str], now_ms: int) -> None:
        """Apply a successful response in one go (small answers, tests)."""
        for _ in self.update_steps(response, requested, now_ms):
            pass

    def update_steps(
        self,
        answer: MetadataResponse | MetadataDecoder,
        requested: list[str],
        now_ms: int,
    ) -> Generator[None, None, None]:
        """Apply a successful answer in steps; the view changes at the last one.

        Each step decodes about :data:`DECODE_STEP_PARTITIONS` partitions of ``answer``
        (a :class:`MetadataDecoder` past its header) and merges the topics it finished;
        the caller may give the event loop back at every ``yield``. Until the generator
        ends, :attr:`snapshot` is the old view; then one assignment swaps the new one in.
        An answer from another cluster (a new cluster id: the cluster was replaced, issue
        29) starts a new view: nothing known of the old cluster's topics is kept.

        Raises:
            ProtocolError: the answer's bytes are malformed (nothing is applied).
        """
        base = self.snapshot
        cluster_id = answer.cluster_id
        if base.cluster_id is not None and cluster_id not in (None, base.cluster_id):
            base = ClusterSnapshot()
        update = SnapshotUpdate(base, answer.brokers, cluster_id, answer.controller_id, requested)
        self._hinted = []
        try:
            if isinstance(answer, MetadataResponse):
                yield from update.add(topics_of(answer))
            else:
                while not answer.done:
                    yield from update.add(answer.step(DECODE_STEP_PARTITIONS))
                    if not answer.done:
                        yield
            snapshot = update.result(self.snapshot, self._hinted)
        finally:
            self._hinted = None
        self.snapshot = snapshot
        self._in_flight = False
        if self._asked_full:
            self._last_full_ms = now_ms
        self._failures = 0
        self._backoff_until_ms = now_ms + self.retry_backoff_ms
        # Keep asking (paced by the backoff) for a requested topic with an error or a
        # partition without a leader, as right after a topic is created.
        for topic in update.incomplete:
            if topic in self._topics_last_used:
                self._partial[topic] = None
        self.version += 1

    def failed(self, now_ms: int) -> None:
        """A refresh attempt failed (no broker reachable, an error, a broken answer)."""
        self._in_flight = False
        self._failures += 1
        self._requeue()
        exponent = min(self._failures - 1, 30)
        wait = min(self.retry_backoff_ms * 2**exponent, self.retry_backoff_max_ms)
        self._backoff_until_ms = now_ms + wait

    def abandoned(self) -> None:
        """The refresh in flight ended without an outcome (the producer stops)."""
        self._in_flight = False
        self._requeue()

    def _requeue(self) -> None:
        """What the attempt asked for is asked for again."""
        if self._asked_full:
            self._full_requested = True
        for topic in self._asked:
            if topic in self._topics_last_used:
                self._partial[topic] = None
        self._asked = []

    def apply_leader_hint(
        self, tp: TopicPartition, leader: int, leader_epoch: int, node: BrokerNode | None
    ) -> bool:
        """Apply a KIP-951 hint from a Produce response; True if the view changed."""
        snapshot = self.snapshot.with_leader(tp, leader, leader_epoch, node)
        if snapshot is None:
            return False
        self.snapshot = snapshot
        if self._hinted is not None:
            self._hinted.append(tp)
        self.version += 1
        return True


def _never_busy(topic: str) -> bool:
    return False
