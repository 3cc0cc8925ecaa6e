"""The local Kafka runner against real brokers, checked with an independent client.

confluent-kafka (librdkafka) produces and reads back here, never aiokprod: these tests
prove the harness, so that the producer's own tests can trust it.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from aiokprod.testing import LocalKafka, LocalKafkaError
from aiokprod.testing.pytest_plugin import NewTopic

WAIT = 30.0  # seconds; every wait below is bounded by this


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    """Produce (partition, key, value) records with acks=all and check every delivery."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    failures: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for partition, key, value in records:
        producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
    assert producer.flush(WAIT) == 0, "records still in flight after the flush timeout"
    assert failures == []


def _consume(
    bootstrap: str, topic: str, partitions: int, count: int
) -> list[tuple[int, bytes, bytes]]:
    """Read ``count`` records from the start of every partition (no consumer group join)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"readback-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[tuple[int, bytes, bytes]] = []
        deadline = time.monotonic() + WAIT
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            partition, key, value = msg.partition(), msg.key(), msg.value()
            assert partition is not None
            assert key is not None
            assert value is not None
            got.append((partition, key, value))
        return got
    finally:
        consumer.close()


def test_session_broker_round_trip(kafka: LocalKafka, new_topic: NewTopic) -> None:
    topic = new_topic(partitions=3)
    records = [(i % 3, f"key-{i}".encode(), f"value-{i}".encode()) for i in range(9)]

    _produce(kafka.bootstrap_servers, topic, records)
    got = _consume(kafka.bootstrap_servers, topic, partitions=3, count=len(records))

    assert sorted(got) == sorted(records)
    for partition in range(3):  # order within each partition is the produce order
        assert [r for r in got if r[0] == partition] == [r for r in records if r[0] == partition]


def test_session_broker_metadata_and_topic_lifecycle(kafka: LocalKafka) -> None:
    assert kafka.bootstrap_servers == f"127.0.0.1:{kafka.nodes[1].port}"
    name = f"lifecycle-{uuid.uuid4().hex[:8]}"

    info = kafka.create_topic(name, partitions=2, config={"retention.ms": "60000"})
    assert [p.leader for p in info.partitions] == [1, 1]
    with pytest.raises(LocalKafkaError, match="already exists"):
        kafka.create_topic(name)

    kafka.delete_topic(name)
    assert (
        name
        not in AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        .list_topics(timeout=WAIT)
        .topics
    )


def test_java_console_consumer_reads_back(kafka: LocalKafka, new_topic: NewTopic) -> None:
    topic = new_topic()
    _produce(kafka.bootstrap_servers, topic, [(0, b"k", b"first"), (0, b"k", b"second")])

    done = kafka.run_java_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server", kafka.bootstrap_servers,
        "--topic", topic,
        "--from-beginning",
        "--max-messages", "2",
        "--timeout-ms", "20000",
        timeout=60,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["first", "second"]


def test_java_producer_perf_tool_runs(kafka: LocalKafka, new_topic: NewTopic) -> None:
    topic = new_topic(partitions=2)

    done = kafka.run_java_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic,
        "--num-records", "2000",
        "--record-size", "100",
        "--throughput", "-1",
        "--bootstrap-server", kafka.bootstrap_servers,
        timeout=120,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert "2000 records sent" in done.stdout
    offsets = kafka.run_java_tool(
        "org.apache.kafka.tools.GetOffsetShell",
        "--bootstrap-server", kafka.bootstrap_servers,
        "--topic", topic,
        timeout=60,
    )  # fmt: skip
    assert offsets.returncode == 0, offsets.stderr
    total = sum(int(line.rsplit(":", 1)[1]) for line in offsets.stdout.split())
    assert total == 2000


def test_startup_failures_raise_with_output_tail(kafka: LocalKafka) -> None:
    # Requests ``kafka`` only to share its environment checks (Java, jars) and skip/fail rule.
    bad_config = LocalKafka(broker_config={"num.network.threads": "zero"})
    with pytest.raises(LocalKafkaError, match=r"(?s)lines of output.*num\.network\.threads"):
        bad_config.start()
    assert not bad_config.is_running

    jvm_refuses = LocalKafka(heap_min="64m", heap_max="32m")  # the JVM itself exits at once
    with pytest.raises(LocalKafkaError, match=r"(?s)exited with code 1.*heap size"):
        jvm_refuses.start()
    assert not jvm_refuses.is_running

    too_slow = LocalKafka(startup_timeout=0.2)
    with pytest.raises(LocalKafkaError, match="did not log 'Kafka Server started'"):
        too_slow.start()
    assert not too_slow.is_running


def test_cluster_has_three_brokers_and_replicates(
    kafka_cluster: LocalKafka, new_cluster_topic: NewTopic
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    assert set(admin.list_topics(timeout=WAIT).brokers) == {1, 2, 3}

    topic = new_cluster_topic(partitions=2)
    described = admin.list_topics(topic=topic, timeout=WAIT).topics[topic]
    assert described.error is None
    assert len(described.partitions) == 2
    for partition in described.partitions.values():
        assert sorted(partition.replicas) == [1, 2, 3]
        assert sorted(partition.isrs) == [1, 2, 3]

    records = [(p, b"k", f"v{p}".encode()) for p in (0, 1)]
    _produce(kafka_cluster.bootstrap_servers, topic, records)
    assert sorted(_consume(kafka_cluster.bootstrap_servers, topic, 2, 2)) == records


def test_cluster_node_crash_and_restart(kafka_cluster: LocalKafka) -> None:
    pid = kafka_cluster.node(3).pid
    assert pid is not None

    assert kafka_cluster.kill_node(3) == -9
    assert kafka_cluster.running_node_ids == [1, 2]
    kafka_cluster.start_node(3, timeout=90)

    assert kafka_cluster.running_node_ids == [1, 2, 3]
    assert kafka_cluster.node(3).pid != pid
    assert kafka_cluster.metadata().broker_ids == {1, 2, 3}
    assert "Kafka Server started" in kafka_cluster.log_tail(3, 2000)
