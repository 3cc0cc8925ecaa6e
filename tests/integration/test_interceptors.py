"""Interceptors see every record on send and every acknowledgement, like the Java client's."""

from __future__ import annotations

from dataclasses import replace

from readback import consume_all

from aiokprod import Producer, ProducerRecord, RecordMetadata
from aiokprod.testing import LocalKafka


class Tagging:
    def __init__(self) -> None:
        self.sent: list[ProducerRecord] = []
        self.acked: list[tuple[RecordMetadata | None, BaseException | None]] = []

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        self.sent.append(record)
        headers = [*(record.headers or []), ("tagged", b"yes")]
        return replace(record, headers=headers)

    def on_acknowledgement(
        self, metadata: RecordMetadata | None, exception: BaseException | None
    ) -> None:
        self.acked.append((metadata, exception))


class Broken:
    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        raise RuntimeError("interceptor bug")

    def on_acknowledgement(
        self, metadata: RecordMetadata | None, exception: BaseException | None
    ) -> None:
        raise RuntimeError("interceptor bug")


async def test_interceptors_change_records_and_see_acknowledgements(
    kafka: LocalKafka, new_topic
) -> None:
    topic = new_topic()
    tagging = Tagging()
    async with Producer(kafka.bootstrap_servers, interceptors=[Broken(), tagging]) as producer:
        futures = [await producer.send(topic, f"v{i}".encode()) for i in range(50)]
        bulk = await producer.send_many(topic, [b"b1", b"b2"])
        await producer.flush()
        await bulk
    assert [r.value for r in tagging.sent] == [f"v{i}".encode() for i in range(50)] + [
        b"b1",
        b"b2",
    ]
    offsets = sorted(md.offset for md, exc in tagging.acked if md is not None)
    assert offsets == list(range(52)), "one acknowledgement per record"
    assert all(exc is None for _, exc in tagging.acked)
    assert [f.result().offset for f in futures] == list(range(50))
    consumed = consume_all(kafka.bootstrap_servers, topic, 52)
    assert all(("tagged", b"yes") in r.headers for r in consumed)
