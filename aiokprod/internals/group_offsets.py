"""A consumer group's committed offsets: checking them, fetching and committing them.

``check_offsets`` validates what ``send_offsets_to_transaction`` and the admin client's
``alter_consumer_group_offsets`` take. The admin client reads offsets with OffsetFetch
(optionally ``require_stable``, KIP-447) and writes them with OffsetCommit as a "simple"
group (generation -1, no member id: the group must have no active members), both at the
group coordinator, over :class:`~aiokprod.internals.round_trips.RoundTrips`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aiokprod.errors import InvalidArgumentError, KafkaError, error_for_code
from aiokprod.internals.round_trips import GiveUp, RoundTrips, check_code
from aiokprod.net.connection import BrokerConnection
from aiokprod.protocol.messages.coordinator import KEY_TYPE_GROUP
from aiokprod.protocol.messages.offsets import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)
from aiokprod.protocol.schema import Struct
from aiokprod.types import OffsetAndMetadata, TopicPartition

#: UNKNOWN_TOPIC_OR_PARTITION: retriable for Produce, but for offsets the partition is absent.
UNKNOWN_TOPIC_OR_PARTITION = 3
#: GROUP_ID_NOT_FOUND: a group with no offsets at all.
GROUP_ID_NOT_FOUND = 69


def check_offsets(
    offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
) -> dict[TopicPartition, OffsetAndMetadata]:
    """``offsets`` as ``TopicPartition -> OffsetAndMetadata``.

    Raises:
        InvalidArgumentError: not a mapping of ``TopicPartition`` to an ``int >= 0`` or an
            :class:`OffsetAndMetadata` with such an offset and a ``str`` metadata.
    """
    try:
        items = list(dict(offsets).items())
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"offsets must be a mapping of TopicPartition to offsets, got {type(offsets).__name__}"
        ) from None
    checked: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in items:
        offset = value.offset if isinstance(value, OffsetAndMetadata) else value
        metadata = value.metadata if isinstance(value, OffsetAndMetadata) else ""
        if (
            not isinstance(tp, tuple)
            or len(tp) != 2
            or not isinstance(tp[0], str)
            or type(tp[1]) is not int
            or type(offset) is not int
            or offset < 0
            or not isinstance(metadata, str)
        ):
            raise InvalidArgumentError(
                "offsets must map TopicPartition(topic, partition) to an int >= 0 or an "
                f"OffsetAndMetadata(offset >= 0, metadata: str), got {tp!r}: {value!r}"
            )
        checked[TopicPartition(tp[0], tp[1])] = OffsetAndMetadata(offset, metadata)
    return checked


def check_partitions(partitions: object) -> list[TopicPartition]:
    """``partitions`` as a list of ``TopicPartition`` (InvalidArgumentError otherwise)."""
    if isinstance(partitions, str | bytes) or not hasattr(partitions, "__iter__"):
        raise InvalidArgumentError(
            f"partitions must be an iterable of TopicPartition, got {partitions!r}"
        )
    result = []
    for tp in partitions:
        if (
            not isinstance(tp, tuple)
            or len(tp) != 2
            or not isinstance(tp[0], str)
            or type(tp[1]) is not int
            or tp[1] < 0
        ):
            raise InvalidArgumentError(f"not a TopicPartition(topic, partition): {tp!r}")
        result.append(TopicPartition(tp[0], tp[1]))
    return result


async def fetch_offsets(
    requests: RoundTrips,
    group_id: str,
    partitions: Sequence[TopicPartition] | None,
    *,
    require_stable: bool,
) -> dict[TopicPartition, OffsetAndMetadata]:
    """OffsetFetch at the group coordinator; partitions without an offset are left out.

    With ``require_stable``, an offset a transaction has not completed yet is waited for:
    the classic coordinator answers UNSTABLE_OFFSET_COMMIT (retried with backoff until
    ``max_block_ms``), the KIP-848 coordinator holds the answer back itself.
    """
    topics: list[OffsetFetchRequestTopic] | None = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [
            OffsetFetchRequestTopic(name=t, partition_indexes=sorted(set(p)))
            for t, p in by_topic.items()
        ]

    def make(conn: BrokerConnection) -> tuple[Struct, int | None]:
        group = OffsetFetchRequestGroup(group_id=group_id, topics=topics)
        return OffsetFetchRequest(groups=[group], require_stable=require_stable), None

    def handle(response: Struct) -> dict[TopicPartition, OffsetAndMetadata]:
        if not isinstance(response, OffsetFetchResponse):  # pragma: no cover
            raise KafkaError("OffsetFetch answered with another message")
        result: dict[TopicPartition, OffsetAndMetadata] = {}
        for group in response.groups:
            if group.group_id != group_id:
                continue
            if group.error_code == GROUP_ID_NOT_FOUND:
                return {}
            check_code(group.error_code)
            for topic in group.topics:
                for part in topic.partitions:
                    if part.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                        continue
                    check_code(part.error_code)
                    if part.committed_offset >= 0:
                        tp = TopicPartition(topic.name, part.partition_index)
                        result[tp] = OffsetAndMetadata(part.committed_offset, part.metadata or "")
        return result

    return await requests.to_coordinator("OffsetFetch", KEY_TYPE_GROUP, group_id, make, handle)


async def commit_offsets(
    requests: RoundTrips, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
) -> None:
    """OffsetCommit for a group with no active members (generation -1, no member id)."""
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for tp, value in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            OffsetCommitRequestPartition(
                partition_index=tp.partition,
                committed_offset=value.offset,
                committed_metadata=value.metadata,
            )
        )
    topics = [OffsetCommitRequestTopic(name=t, partitions=p) for t, p in by_topic.items()]

    def make(conn: BrokerConnection) -> tuple[Struct, int | None]:
        return OffsetCommitRequest(group_id=group_id, topics=topics), None

    def handle(response: Struct) -> None:
        if not isinstance(response, OffsetCommitResponse):  # pragma: no cover
            raise KafkaError("OffsetCommit answered with another message")
        for topic in response.topics:
            for part in topic.partitions:
                if part.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                    # Not retried: committing to a partition that does not exist fails.
                    raise GiveUp(
                        error_for_code(
                            part.error_code, f"{topic.name}-{part.partition_index} does not exist"
                        )
                    )
                check_code(part.error_code)

    if topics:
        await requests.to_coordinator("OffsetCommit", KEY_TYPE_GROUP, group_id, make, handle)
