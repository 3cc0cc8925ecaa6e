"""A Schema Registry style serializer: async, told the topic, Confluent's wire format.

Serializers may be coroutine functions and may take a second argument, a
``SerializationContext`` (topic, field, headers), as confluent-kafka's Schema Registry
serializers do. Here a stand-in registry (in process; a real one is an HTTP service, which is
why registering is ``await``-ed) gives each subject (``<topic>-value``) a schema id, and each
value is written as magic byte 0, the 4-byte schema id, then the JSON payload. The records
are read back with confluent-kafka and decoded by schema id. Run it with the project's local
Kafka::

    python -m aiokprod.testing exec --topic payments:3 -- \
        python examples/schema_registry.py payments
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import sys
from typing import Any

from aiokprod import Producer, SerializationContext

WIRE_HEADER = struct.Struct(">bI")  # magic byte 0, schema id


class StandInRegistry:
    """Subjects to schema ids, as a Schema Registry assigns them (in memory)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.schemas: dict[int, dict[str, Any]] = {}

    async def register(self, subject: str, schema: dict[str, Any]) -> int:
        await asyncio.sleep(0)  # a real registry is an HTTP round trip, done once per subject
        if subject not in self.ids:
            schema_id = len(self.schemas) + 1
            self.ids[subject] = schema_id
            self.schemas[schema_id] = schema
        return self.ids[subject]


PAYMENT_SCHEMA = {"type": "object", "required": ["id", "amount"]}


def json_serializer(registry: StandInRegistry) -> Any:
    cache: dict[str, int] = {}

    async def serialize(obj: dict[str, Any], ctx: SerializationContext) -> bytes:
        subject = f"{ctx.topic}-{ctx.field}"  # the default TopicNameStrategy
        schema_id = cache.get(subject)
        if schema_id is None:
            schema_id = cache[subject] = await registry.register(subject, PAYMENT_SCHEMA)
        missing = [k for k in PAYMENT_SCHEMA["required"] if k not in obj]
        if missing:
            raise ValueError(f"{subject}: missing {missing}")
        return WIRE_HEADER.pack(0, schema_id) + json.dumps(obj).encode()

    return serialize


def read_back(bootstrap: str, topic: str, expected: int, registry: StandInRegistry) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"schema-example-{os.getpid()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    decoded = 0
    try:
        for _ in range(300):
            for message in consumer.consume(1000, timeout=1.0):
                if message.error():
                    continue
                data = message.value()
                if data is None:
                    continue
                magic, schema_id = WIRE_HEADER.unpack_from(data)
                if magic == 0 and schema_id in registry.schemas:
                    payment = json.loads(data[WIRE_HEADER.size :])
                    decoded += "amount" in payment
            if decoded >= expected:
                break
    finally:
        consumer.close()
    return decoded


async def main(bootstrap: str, topic: str, count: int) -> int:
    registry = StandInRegistry()
    async with Producer(bootstrap, value_serializer=json_serializer(registry)) as producer:
        for i in range(count):
            await producer.send(topic, {"id": i, "amount": i * 10}, key=str(i % 7))
        await producer.flush()
    decoded = read_back(bootstrap, topic, count, registry)
    schema_id = registry.ids[f"{topic}-value"]
    print(f"{decoded} of {count} records decoded with schema id {schema_id}")
    return 0 if decoded == count else 1


if __name__ == "__main__":
    topic = sys.argv[1] if len(sys.argv) > 1 else "payments"
    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    sys.exit(asyncio.run(main(servers, topic, 1000)))
