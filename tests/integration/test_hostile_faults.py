"""Regressions for the hostile faults of issue 11 (defects 1-5), against the real 3-node cluster.

Each test injects one fault that broke the producer at commit ec1b6fd, then reads the topic
back with librdkafka (not with our code) and counts: every record exactly once, per-key order
kept, no future failed or left pending, the producer still working afterwards.

Faults on the Produce path come from the fault proxy (``kafka_proxy.py``): a corrupted
response body, responses swallowed for a while (the broker still writes the batches),
impossible frame-size prefixes and a wrong correlation id. Leader moves use the cluster
itself: stop the leader, start it again, preferred-leader election.

Every wait is on a condition with a generous bound: these must pass on a busy machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Unpack

import pytest
from faults import (
    Stream,
    async_wait_until,
    audit,
    lead_from_preferred_replica,
    wait_full_isr,
)
from kafka_proxy import KafkaProxy
from readback import consume_all

from aiokprod import IllegalStateError, KafkaError, Producer, ProducerCrashedError
from aiokprod.config import ProducerOptions
from aiokprod.errors import InvalidArgumentError
from aiokprod.testing import LocalKafka

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PARTITIONS = 6
RECORDS = 20_000


def restore(cluster: LocalKafka) -> None:
    """Start every stopped node again (so later tests get a whole cluster)."""
    for node_id in cluster.nodes:
        if node_id not in cluster.running_node_ids:
            cluster.start_node(node_id)


@pytest.fixture
def cluster(kafka_cluster: LocalKafka):
    restore(kafka_cluster)
    yield kafka_cluster
    restore(kafka_cluster)


def proxy_for(cluster: LocalKafka, seed: int = 11) -> KafkaProxy:
    return KafkaProxy({n.node_id: (n.host, n.port) for n in cluster.nodes.values()}, seed=seed)


def crashed(stream: Stream) -> int:
    """Futures that failed with ProducerCrashedError."""
    return sum(
        1 for f in stream.futures if f.done() and isinstance(f.exception(), ProducerCrashedError)
    )


async def stream_through_fault(
    cluster: LocalKafka,
    topic: str,
    scenario: str,
    inject: Callable[[KafkaProxy], None],
    applied: Callable[[KafkaProxy], bool],
    stream: Stream,
    **producer_config: Unpack[ProducerOptions],
) -> None:
    """Stream ``stream`` through the proxy, inject a fault mid-stream, audit exactly-once."""
    wait_full_isr(cluster.bootstrap_servers, topic, 3)
    started = time.monotonic()
    async with (
        proxy_for(cluster) as proxy,
        Producer(proxy.bootstrap_servers, **producer_config) as producer,
    ):
        sending = asyncio.create_task(stream.run(producer, topic))
        await stream.wait_acknowledged(2_000)
        inject(proxy)
        await async_wait_until(lambda: applied(proxy), f"{scenario}: fault applied")
        # The producer must keep working: records are still sent after the fault.
        sent_at_fault = stream.sent
        assert sent_at_fault < stream.records, "the stream ended before the fault (too fast)"
        stream.slow.clear()
        await sending
        await producer.flush()
        metrics = producer.metrics()
        faults = dict(proxy.faults_applied)
    print(f"[{scenario}] proxy faults applied: {faults}; {sent_at_fault} records sent before")
    assert crashed(stream) == 0, f"{crashed(stream)} futures failed with ProducerCrashedError"
    failures = {type(f.exception()).__name__ for f in stream.futures if f.done() and f.exception()}
    result = audit(
        scenario, cluster.bootstrap_servers, topic, stream, time.monotonic() - started, metrics
    )
    assert result.clean, (result, failures)


# --- defect 1: one malformed Produce response --------------------------------------------------


async def test_one_corrupted_produce_response_closes_one_connection_only(
    cluster: LocalKafka, new_cluster_topic
) -> None:
    topic = new_cluster_topic(partitions=PARTITIONS)
    await stream_through_fault(
        cluster,
        topic,
        "corrupted Produce response",
        lambda proxy: proxy.corrupt_produce(1),
        lambda proxy: proxy.faults_applied["corrupted"] == 1,
        Stream(records=RECORDS, chunk=250, pause_s=0.05),
        request_timeout_ms=5000,
    )


# --- defect 2: Produce responses dropped longer than request_timeout_ms -------------------------


async def test_dropped_produce_responses_write_no_duplicates(
    cluster: LocalKafka, new_cluster_topic
) -> None:
    topic = new_cluster_topic(partitions=PARTITIONS)
    window_s = 4.0

    def inject(proxy: KafkaProxy) -> None:
        proxy.drop_produce_for(window_s)

    def applied(proxy: KafkaProxy) -> bool:
        # The window is over and it did swallow responses (the requests went through).
        return not proxy.dropping and proxy.faults_applied["dropped"] > 0

    await stream_through_fault(
        cluster,
        topic,
        "Produce responses dropped 4 s",
        inject,
        applied,
        # ~2,500 records/s on an idle machine: the stream runs on through the window.
        Stream(records=RECORDS, chunk=250, pause_s=0.1),
        request_timeout_ms=3000,
        enable_idempotence=True,
    )


# --- defect 3: broken frames (size prefix, correlation id) --------------------------------------


@pytest.mark.parametrize(
    "fault",
    ["size prefix 2147483647", "size prefix 2147483648", "size prefix -1", "wrong correlation id"],
)
async def test_broken_produce_frame_is_a_broken_connection_not_a_failure(
    cluster: LocalKafka, new_cluster_topic, fault: str
) -> None:
    topic = new_cluster_topic(partitions=PARTITIONS)

    def inject(proxy: KafkaProxy) -> None:
        if fault.startswith("size prefix"):
            proxy.bad_size_produce(int(fault.rsplit(" ", 1)[1]))
        else:
            proxy.wrong_correlation_produce(1)

    await stream_through_fault(
        cluster,
        topic,
        f"Produce response: {fault}",
        inject,
        lambda proxy: proxy.faults_applied[fault] == 1,
        Stream(records=RECORDS, chunk=250, pause_s=0.05),
        request_timeout_ms=5000,
    )


# --- defect 4: bad arguments fail at the call site, and nothing else ----------------------------


async def test_bad_timestamps_and_send_many_arguments_fail_at_the_call_site(
    cluster: LocalKafka, new_cluster_topic
) -> None:
    topic = new_cluster_topic(partitions=3)
    bootstrap = cluster.bootstrap_servers
    good = []
    async with Producer(bootstrap, linger_ms=200) as producer:
        # Good records waiting in open batches when the bad calls come.
        good += [
            await producer.send(topic, f"good-{i}".encode(), key=f"k{i % 7}".encode())
            for i in range(100)
        ]
        with pytest.raises(InvalidArgumentError):
            await producer.send(topic, b"bad", key=b"k0", timestamp_ms=2**63)
        with pytest.raises(InvalidArgumentError):
            await producer.send(topic, b"bad", timestamp_ms=-1)
        bad_calls: dict[str, Callable[[], Awaitable[object]]] = {
            "timestamp 2**63": lambda: producer.send_many(topic, [b"a", b"b"], timestamp_ms=2**63),
            "timestamp 2**64 keyed": lambda: producer.send_many(
                topic, [b"a", b"b"], keys=[b"k1", b"k2"], timestamp_ms=2**64
            ),
            "non-iterable values": lambda: producer.send_many(topic, 5),  # type: ignore[arg-type]
            "keys shorter than values": lambda: producer.send_many(
                topic, [b"a", b"b", b"c"], keys=[b"k1", b"k2"]
            ),
        }
        for what, call in bad_calls.items():
            with pytest.raises(KafkaError) as caught:
                await call()
            assert isinstance(caught.value, InvalidArgumentError), (what, caught.value)
        good += [
            await producer.send(topic, f"good-{i}".encode(), key=f"k{i % 7}".encode())
            for i in range(100, 200)
        ]
        await asyncio.wait_for(producer.flush(), 120)
        errors = [f.exception() for f in good]
        assert errors == [None] * 200, {repr(e) for e in errors if e is not None}
    values = sorted(r.value for r in consume_all(bootstrap, topic, 200, timeout_s=90))
    assert values == sorted(f"good-{i}".encode() for i in range(200))


async def test_close_after_a_cancelled_close_leaves_the_producer_closed(
    cluster: LocalKafka, new_cluster_topic
) -> None:
    topic = new_cluster_topic(partitions=3)
    bootstrap = cluster.bootstrap_servers
    producer = Producer(bootstrap, linger_ms=50)
    await producer.start()
    futures = [await producer.send(topic, f"v{i}".encode()) for i in range(2000)]
    closing = asyncio.create_task(producer.close())
    await asyncio.sleep(0.01)
    closing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await closing
    await asyncio.wait_for(producer.close(), 150)
    with pytest.raises(IllegalStateError) as caught:
        await producer.start()
    assert "closing" not in str(caught.value), caught.value
    assert "closed" in str(caught.value), caught.value
    with pytest.raises(KafkaError):
        await producer.send(topic, b"after close")
    assert all(f.done() for f in futures), "close() left futures pending"
    delivered = [f for f in futures if f.exception() is None]
    values = [r.value for r in consume_all(bootstrap, topic, len(delivered), timeout_s=90)]
    assert len(values) == len(set(values)), "a record was written twice"
    assert set(values) == {f"v{i}".encode() for i, f in enumerate(futures) if not f.exception()}


async def test_send_from_another_event_loop_is_refused(
    cluster: LocalKafka, new_cluster_topic
) -> None:
    topic = new_cluster_topic(partitions=1)
    outcome: list[BaseException | None] = []

    def other_thread(producer: Producer) -> None:
        try:
            asyncio.run(producer.send(topic, b"from another loop"))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            outcome.append(exc)

    async with Producer(cluster.bootstrap_servers) as producer:
        thread = threading.Thread(target=other_thread, args=(producer,), daemon=True)
        thread.start()
        await asyncio.to_thread(thread.join, 60)
        assert outcome, "send() from another loop neither returned nor raised within 60 s"
        assert isinstance(outcome[0], KafkaError), outcome
        record = await producer.send_and_wait(topic, b"same loop")
        assert record.has_offset


# --- defect 5: leadership returns to a restarted broker -----------------------------------------


@pytest.mark.parametrize("send_while_down", [False, True], ids=["idle while down", "sending"])
async def test_send_after_leader_restart_and_preferred_election(
    cluster: LocalKafka, new_cluster_topic, send_while_down: bool
) -> None:
    topic = new_cluster_topic(partitions=1)
    bootstrap = cluster.bootstrap_servers
    wait_full_isr(bootstrap, topic, 3)
    preferred = await asyncio.to_thread(lead_from_preferred_replica, bootstrap, topic)
    async with Producer(bootstrap, delivery_timeout_ms=120_000) as producer:
        first = await producer.send_and_wait(topic, b"before", key=b"k")
        assert first.has_offset
        await asyncio.to_thread(cluster.stop_node, preferred)
        expected = [b"before"]
        if send_while_down:
            # Leadership moves to another replica; the producer follows it.
            while_down = await asyncio.wait_for(
                producer.send_and_wait(topic, b"while down", key=b"k"), 150
            )
            assert while_down.has_offset
            expected.append(b"while down")
        await asyncio.to_thread(cluster.start_node, preferred)
        await asyncio.to_thread(wait_full_isr, bootstrap, topic, 3, 120)
        back_on = await asyncio.to_thread(lead_from_preferred_replica, bootstrap, topic)
        assert back_on == preferred
        started = time.monotonic()
        # The producer's view still names the old leader: it gets NOT_LEADER_OR_FOLLOWER and
        # must open a new connection to the restarted node. The bound is generous (a busy
        # machine), but well within delivery_timeout_ms: a stuck record takes all 120 s.
        back = await asyncio.wait_for(
            producer.send_and_wait(topic, b"after election", key=b"k"), 150
        )
        took = time.monotonic() - started
        assert back.has_offset
        assert took < 60, f"acknowledged only after {took:.1f} s"
        metrics = producer.metrics()
    print(f"[leader restart + preferred election] acknowledged in {took:.1f} s, {metrics}")
    expected.append(b"after election")
    values = [r.value for r in consume_all(bootstrap, topic, len(expected), timeout_s=90)]
    assert values == expected, values
