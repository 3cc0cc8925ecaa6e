"""Client telemetry (KIP-714) against a real broker whose plugin records every push.

The broker (Kafka 4.4 from the project's jars) loads :mod:`aiokprod.testing.telemetry_plugin`
through ``metric.reporters``; it writes each push it receives (instance id, terminating flag,
the OTLP payload as the broker hands it over) to a file, decoded here by the OpenTelemetry
reference classes (``opentelemetry-proto``). Subscriptions are made with Kafka's own
``kafka-client-metrics.sh``, each matching one client id, so the clients of one run do not
see each other's.

One run (the ``run`` fixture) drives everything at once, to keep the time it adds small:
three aiokprod producers (every producer metric; two prefixes; a subscription changed
half-way) and the Java producer (``ProducerPerformance``, the reference), all pushing every
second. The tests then read what arrived. A plugin that fails to compile or load fails the
tests under ``CI=true`` (it is never a skip there). Waits are bounded conditions, and the
interval is checked as a lower bound (a busy machine delays pushes, never hastens them).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import ssl
import statistics
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.metrics.v1 import metrics_pb2
from readback import consume_all

from aiokprod import DeliveryFuture, IllegalStateError, Producer
from aiokprod.internals.telemetry_metrics import STANDARD
from aiokprod.net.transport import ByteStream, StreamTransport
from aiokprod.protocol.messages.telemetry import kafka_uuid_text
from aiokprod.sync import SyncProducer
from aiokprod.testing import LocalKafka
from aiokprod.testing.errors import LocalKafkaError
from aiokprod.testing.pytest_plugin import in_ci
from aiokprod.testing.telemetry_plugin import (
    ReceivedPush,
    read_pushes,
    start_telemetry_kafka,
    subscribe,
)

pytestmark = [pytest.mark.broker, pytest.mark.timeout(600)]

PREFIX = "org.apache.kafka.producer."
NARROW = [PREFIX + "record.queue.time.", PREFIX + "node.request.latency."]
BEFORE_CHANGE = [PREFIX + "record.send."]
AFTER_CHANGE = [PREFIX + "request.latency."]
INTERVAL_MS = 1000
RECORDS = 3000
#: The Java reference producer's records: 10 s at 800/s, long enough for several pushes
#: even when its JVM starts slowly on a busy machine.
JAVA_RECORDS = 8000
#: Bound on every wait for pushes (a busy machine).
WAIT_S = 60.0


# --- what the plugin received, decoded --------------------------------------------------------


def decode(push: ReceivedPush) -> metrics_pb2.MetricsData:
    return metrics_pb2.MetricsData.FromString(push.payload)


def metrics_of(push: ReceivedPush) -> list[Any]:
    return [
        m for rm in decode(push).resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    ]


def names_of(push: ReceivedPush) -> set[str]:
    return {m.name for m in metrics_of(push)}


def resource_of(push: ReceivedPush) -> dict[str, str]:
    data = decode(push)
    return {
        a.key: a.value.string_value for rm in data.resource_metrics for a in rm.resource.attributes
    }


def shapes(pushes: list[ReceivedPush]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Metric name -> (gauge or sum, attribute keys), over every push."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for push in pushes:
        for metric in metrics_of(push):
            kind = metric.WhichOneof("data")
            keys = {a.key for p in getattr(metric, kind).data_points for a in p.attributes}
            out[metric.name] = (kind, tuple(sorted(keys)))
    return out


def attribute_values(pushes: list[ReceivedPush], name: str, key: str) -> set[str]:
    return {
        a.value.string_value
        for push in pushes
        for m in metrics_of(push)
        if m.name == name
        for p in getattr(m, m.WhichOneof("data")).data_points
        for a in p.attributes
        if a.key == key
    }


# --- a transport that notes every request's API key ------------------------------------------


class _NotingStream:
    def __init__(self, stream: ByteStream, keys: collections.Counter[int]) -> None:
        self._stream = stream
        self._keys = keys

    async def read(self, max_bytes: int) -> bytes:
        return await self._stream.read(max_bytes)

    def start_receiving(self, on_data: Any, on_end: Any) -> None:
        self._stream.start_receiving(on_data, on_end)

    def write(self, data: bytes | bytearray) -> None:
        self._keys[struct.unpack_from(">h", data, 4)[0]] += 1  # one whole request per write
        self._stream.write(data)

    async def drain(self) -> None:
        await self._stream.drain()

    def write_buffer_size(self) -> int:
        return self._stream.write_buffer_size()

    def is_closing(self) -> bool:
        return self._stream.is_closing()

    def abort(self) -> None:
        self._stream.abort()


class NotingTransport:
    """TCP, noting the API key of every request written (``keys``)."""

    def __init__(self) -> None:
        self.keys: collections.Counter[int] = collections.Counter()
        self._inner = StreamTransport()

    async def connect(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> ByteStream:
        stream = await self._inner.connect(
            host, port, ssl_context=ssl_context, server_hostname=server_hostname
        )
        return _NotingStream(stream, self.keys)


# --- the broker and the run --------------------------------------------------------------------


@pytest.fixture(scope="module")
def telemetry_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalKafka, Path]]:
    record_file = tmp_path_factory.mktemp("telemetry") / "pushes.txt"
    try:
        kafka = start_telemetry_kafka(record_file)
    except LocalKafkaError as exc:
        message = f"could not start a broker with the telemetry plugin: {exc}"
    else:
        try:
            yield kafka, record_file
        finally:
            kafka.stop()
        return
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@dataclass
class Client:
    """One aiokprod producer of the run and what it saw."""

    client_id: str
    instance_id: uuid.UUID | None = None
    acked: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    transport: NotingTransport = field(default_factory=NotingTransport)


@dataclass
class Run:
    topic: str
    full: Client
    narrow: Client
    change: Client
    java_id: str
    pushes: list[ReceivedPush]
    kafka: LocalKafka

    def of(self, client_id: str) -> list[ReceivedPush]:
        return [p for p in self.pushes if p.client_id == client_id]


def _wait_pushes(record_file: Path, client_id: str, what: Any, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if what([p for p in read_pushes(record_file) if p.client_id == client_id]):
            return
        time.sleep(0.2)
    raise AssertionError(f"{client_id}: the expected pushes did not arrive in {timeout_s} s")


async def _produce(kafka: LocalKafka, topic: str, client: Client, stop: asyncio.Event) -> None:
    async with Producer(
        kafka.bootstrap_servers, client_id=client.client_id, transport=client.transport
    ) as producer:
        futures: list[DeliveryFuture] = []
        while not stop.is_set() or len(futures) < RECORDS:
            futures.append(await producer.send(topic, b"x" * 100))
            await asyncio.sleep(0.002 if len(futures) < RECORDS else 0.05)
        await producer.flush()
        client.acked = sum(1 for f in futures if f.done() and f.exception() is None)
        client.instance_id = await producer.client_instance_id(30)
        client.metrics = producer.metrics()


def _java_reference(kafka: LocalKafka, topic: str, client_id: str) -> None:
    done = kafka.run_java_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic, "--num-records", str(JAVA_RECORDS), "--throughput", "800",
        "--record-size", "100",
        "--bootstrap-server", kafka.bootstrap_servers,
        "--command-property", f"client.id={client_id}",
        timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def run(telemetry_kafka: tuple[LocalKafka, Path]) -> Run:
    kafka, record_file = telemetry_kafka
    suffix = uuid.uuid4().hex[:8]
    topic = f"telemetry-{suffix}"
    kafka.create_topic(topic, 3)
    full, narrow, change = (Client(f"aiokprod-{n}-{suffix}") for n in ("full", "narrow", "chg"))
    java_id = f"java-ref-{suffix}"
    subscriptions = [
        ("full", [PREFIX], f"{full.client_id}|{java_id}"),
        ("narrow", NARROW, narrow.client_id),
        ("change", BEFORE_CHANGE, change.client_id),
    ]
    tools = [
        threading.Thread(
            target=subscribe,
            args=(kafka, f"{name}-{suffix}", metrics, INTERVAL_MS),
            kwargs={"match": {"client_id": match}},
        )
        for name, metrics, match in subscriptions
    ]
    for thread in tools:
        thread.start()
    for thread in tools:
        thread.join(120)

    async def scenario() -> None:
        stop = asyncio.Event()
        java = asyncio.create_task(asyncio.to_thread(_java_reference, kafka, topic, java_id))
        producers = [
            asyncio.create_task(_produce(kafka, topic, c, stop)) for c in (full, narrow, change)
        ]
        # Two pushes under the first subscription, then the operator changes it.
        await asyncio.to_thread(_wait_pushes, record_file, change.client_id, lambda p: len(p) >= 2)
        await asyncio.to_thread(
            subscribe, kafka, f"change-{suffix}", AFTER_CHANGE, INTERVAL_MS,
            match={"client_id": change.client_id},
        )  # fmt: skip
        await asyncio.to_thread(
            _wait_pushes,
            record_file,
            change.client_id,
            lambda p: len([q for q in p if names_of(q) & {PREFIX + "request.latency.avg"}]) >= 2,
        )
        for client in (full, narrow):
            await asyncio.to_thread(
                _wait_pushes, record_file, client.client_id, lambda p: len(p) >= 5
            )
        stop.set()
        await asyncio.gather(*producers)
        await java

    asyncio.run(scenario())
    # The terminating pushes went out within close(): give the plugin's file a moment.
    for client in (full, narrow, change):
        _wait_pushes(record_file, client.client_id, lambda p: any(q.terminating for q in p), 30)
    return Run(topic, full, narrow, change, java_id, read_pushes(record_file), kafka)


# --- the tests ----------------------------------------------------------------------------------


def test_a_push_arrives_and_decodes(run: Run) -> None:
    pushes = run.of(run.full.client_id)
    assert len(pushes) >= 5
    assert run.full.instance_id is not None
    instance = kafka_uuid_text(run.full.instance_id)
    for push in pushes:
        assert push.instance_id == instance  # as the broker knows the client
        assert resource_of(push) == {
            "client_instance_id": instance,
            "client_id": run.full.client_id,
            "client_software_name": "aiokprod",
            "client_software_version": resource_of(push)["client_software_version"],
        }
    names = set().union(*(names_of(p) for p in pushes))
    assert set(STANDARD) <= names, set(STANDARD) - names
    sums = [m for p in pushes for m in metrics_of(p) if m.WhichOneof("data") == "sum"]
    assert sums
    assert all(m.sum.is_monotonic for m in sums)
    assert {m.sum.aggregation_temporality for m in sums} == {
        metrics_pb2.AGGREGATION_TEMPORALITY_DELTA  # the broker asks for deltas
    }
    # The deltas of record.send.total over every push add up to the records acknowledged.
    sent = sum(
        p.as_double
        for m in sums
        if m.name == PREFIX + "record.send.total"
        for p in m.sum.data_points
    )
    assert sent == run.full.acked >= RECORDS
    # The requests went over the wire, and the records arrived (read back by librdkafka).
    assert run.full.transport.keys[71] >= 1
    assert run.full.transport.keys[72] >= len(pushes)
    # Accepted pushes counted before close: all but the terminating one and one in flight.
    assert run.full.metrics["telemetry-push-total"] >= len(pushes) - 2
    total = run.full.acked + run.narrow.acked + run.change.acked + JAVA_RECORDS
    read = consume_all(run.kafka.bootstrap_servers, run.topic, total, timeout_s=180)
    assert len(read) == total


def test_the_interval_is_kept(run: Run) -> None:
    for client in (run.full, run.narrow):
        pushes = [p for p in run.of(client.client_id) if not p.terminating]
        assert {p.interval_ms for p in pushes} == {INTERVAL_MS}  # the broker's context
        gaps = [b.time_ms - a.time_ms for a, b in itertools.pairwise(pushes)]
        assert len(gaps) >= 3
        # Never early: the broker would have throttled it (and no push was refused, below).
        assert min(gaps) >= 0.9 * INTERVAL_MS
        assert statistics.median(gaps) <= 3 * INTERVAL_MS  # and not starved
        assert client.metrics["telemetry-push-error-total"] == 0


def test_one_terminating_push_on_close(run: Run) -> None:
    for client in (run.full, run.narrow, run.change):
        pushes = run.of(client.client_id)
        assert [p.terminating for p in pushes].count(True) == 1
        assert pushes[-1].terminating


def test_only_subscribed_metrics_are_in_it(run: Run) -> None:
    names = set().union(*(names_of(p) for p in run.of(run.narrow.client_id)))
    assert names == {
        PREFIX + "record.queue.time.avg",
        PREFIX + "record.queue.time.max",
        PREFIX + "node.request.latency.avg",
        PREFIX + "node.request.latency.max",
    }


def test_a_subscription_change_mid_run_is_followed(run: Run) -> None:
    pushes = run.of(run.change.client_id)
    seen = [names_of(p) for p in pushes]
    before = {PREFIX + "record.send.rate", PREFIX + "record.send.total"}
    after = {PREFIX + "request.latency.avg", PREFIX + "request.latency.max"}
    first_after = next(i for i, names in enumerate(seen) if names & after)
    assert first_after >= 2
    assert all(names <= before for names in seen[:first_after])
    assert all(names <= after for names in seen[first_after:])
    assert seen[-1] == after


def test_the_java_producer_pushes_the_same_names(run: Run) -> None:
    ours = shapes(run.of(run.full.client_id))
    java_pushes = run.of(run.java_id)
    java = shapes(java_pushes)
    assert java_pushes  # its pushes, or at least its terminating one (a slow JVM start)
    assert set(STANDARD) <= set(java)
    missing = set(ours) - set(java)
    assert not missing, f"pushed by aiokprod, unknown to the Java producer: {sorted(missing)}"
    assert {name: ours[name] for name in ours} == {name: java[name] for name in ours}
    node_latency = PREFIX + "node.request.latency.avg"
    assert attribute_values(run.of(run.full.client_id), node_latency, "node_id") <= (
        attribute_values(java_pushes, node_latency, "node_id")
    )


async def test_a_broker_without_the_plugin_gets_no_telemetry_requests(
    kafka: LocalKafka, new_topic: Any
) -> None:
    topic = new_topic(partitions=1)
    transport = NotingTransport()
    async with Producer(kafka.bootstrap_servers, transport=transport) as producer:
        for _ in range(100):
            await producer.send(topic, b"v")
        await producer.flush()
        assert await producer.client_instance_id(timeout=2) is None
        await asyncio.sleep(0.5)
        assert producer.metrics()["telemetry-push-total"] == 0
    assert transport.keys[0] >= 1
    assert transport.keys[18] >= 1
    assert transport.keys[71] == 0
    assert transport.keys[72] == 0


def test_the_sync_producer_gets_its_instance_id(
    telemetry_kafka: tuple[LocalKafka, Path],
) -> None:
    kafka, _ = telemetry_kafka
    with SyncProducer(kafka.bootstrap_servers) as producer:
        # No subscription matches this client: the broker assigns an id all the same.
        instance = producer.client_instance_id(30)
        assert isinstance(instance, uuid.UUID)
        assert instance.int != 0
    with (
        SyncProducer(kafka.bootstrap_servers, enable_metrics_push=False) as producer,
        pytest.raises(IllegalStateError),
    ):
        producer.client_instance_id()
