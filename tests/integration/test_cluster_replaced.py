"""The cluster behind the bootstrap address is replaced (issue 29), on real brokers.

Two fresh single-node clusters behind one forwarded address (``ClusterReplacement``): the
producer writes to the old one, which is then killed while the address is switched to the
new one (a new cluster id, a new broker port). Both hand out producer ids from 0, so a
producer that kept the old cluster's id would write under the id the new cluster gives the
next idempotent producer (another service's, librdkafka here): that one's first batch then
failed with a fatal OUT_OF_ORDER_SEQUENCE_NUMBER (3 of 3 runs before the fix). Read back with
librdkafka.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio
from confluent_kafka import Producer as RdKafkaProducer
from readback import consume_all
from txn_readback import read_committed

from aiokprod import AbortableTransactionError, DeliveryFuture, Producer
from aiokprod.errors import ClusterChangedError
from aiokprod.testing import ClusterReplacement, LocalKafkaError
from aiokprod.testing.pytest_plugin import in_ci

#: Starts its own two brokers (not the session's `kafka`), but needs Java all the same.
pytestmark = pytest.mark.broker

PARTITIONS = 3
#: Topics are created by the first producer's metadata request, with 3 partitions.
BROKER_CONFIG = {"num.partitions": str(PARTITIONS)}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def clusters() -> AsyncIterator[ClusterReplacement]:
    replacement = ClusterReplacement(broker_config=BROKER_CONFIG)
    try:
        await replacement.start()
    except LocalKafkaError as exc:
        message = f"could not start two local Kafka clusters: {exc}"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    try:
        yield replacement
    finally:
        await replacement.stop()


def cluster_id(kafka: object) -> str:
    metadata = kafka.metadata([])  # type: ignore[attr-defined]
    assert metadata.cluster_id
    return str(metadata.cluster_id)


def changes_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "cluster behind bootstrap_servers changed" in r.message
    ]


def other_service_writes(bootstrap: str, topic: str, count: int) -> tuple[int, list[str]]:
    """A fresh idempotent librdkafka producer on the new cluster: (delivered, errors)."""
    producer = RdKafkaProducer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    delivered = 0
    errors: list[str] = []

    def report(err: object, msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors.append(str(err))

    try:
        for i in range(count):
            producer.produce(topic, f"other-{i}".encode(), key=b"o%d" % (i % 5), on_delivery=report)
        left = producer.flush(30)
    except Exception as exc:  # noqa: BLE001 - a fatal error: reported to the test
        return delivered, [*errors, repr(exc)]
    if left:
        errors.append(f"{left} still queued after 30 s")
    return delivered, errors


@pytest.mark.asyncio(loop_scope="module")
async def test_idempotent_records_move_to_the_new_cluster_under_an_id_it_issued(
    clusters: ClusterReplacement, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="aiokprod")
    topic = f"replaced-{uuid.uuid4().hex[:8]}"
    old_id, new_id = cluster_id(clusters.old), cluster_id(clusters.new)
    futures: list[tuple[int, DeliveryFuture]] = []
    producer = Producer(clusters.bootstrap_servers, linger_ms=5)
    async with producer:
        n = 0

        async def send_for(seconds: float, until: Callable[[], bool] = lambda: False) -> None:
            nonlocal n
            end = time.monotonic() + seconds
            while time.monotonic() < end and not until():
                for _ in range(5):  # about 1,000 records/s
                    futures.append(
                        (n, await producer.send(topic, b"%d" % n, key=b"k%d" % (n % 20)))
                    )
                    n += 1
                await asyncio.sleep(0.005)

        await send_for(1.5)
        await producer.flush(30)
        idem = producer._rt.idempotence
        assert idem is not None
        # A fresh cluster's first producer id is 0, as the new one's will be.
        assert (idem.producer_id, idem.producer_epoch) == (0, 0)
        pool = producer._rt.pool
        assert pool is not None
        clusters.replace()
        await send_for(30, until=lambda: pool.cluster_id == new_id)
        # The old cluster comes back (to be read at the end): the producer left it for good.
        restarting = asyncio.ensure_future(clusters.restart_old())
        await send_for(2.0)
        await producer.flush(30)
        delivered, errors = await asyncio.to_thread(
            other_service_writes, clusters.new.bootstrap_servers, topic, 300
        )
        assert errors == []
        assert delivered == 300
        # Our id came from the new cluster: its first one (the other service got the next).
        assert idem.producer_id == 0
        assert pool.cluster_id == new_id
        await restarting
        await send_for(0.3)
    assert all(f.done() for _, f in futures), "left pending"
    failed = [(i, f.exception()) for i, f in futures if f.exception() is not None]
    assert failed == []
    assert changes_logged(caplog)
    assert all(old_id in line and new_id in line for line in changes_logged(caplog))
    # Read both clusters back (the old one started again with its data).
    sent = len(futures)
    # (1 expected: read until every partition is at its end; nothing is written any more.)
    in_old = Counter(
        r.value
        for r in await asyncio.to_thread(consume_all, clusters.old.bootstrap_servers, topic, 1)
    )
    in_new = Counter(
        r.value
        for r in await asyncio.to_thread(consume_all, clusters.new.bootstrap_servers, topic, 1)
    )
    ours_new = Counter({v: c for v, c in in_new.items() if v and not v.startswith(b"other-")})
    assert sum(c for v, c in in_new.items() if v and v.startswith(b"other-")) == 300
    assert [v for v, c in in_old.items() if c > 1] == []
    assert [v for v, c in ours_new.items() if c > 1] == []
    missing = [i for i, _ in futures if b"%d" % i not in in_old and b"%d" % i not in ours_new]
    assert missing == []
    assert len(ours_new) > sent // 3, "most records after the switch went to the new cluster"


@pytest.mark.asyncio(loop_scope="module")
async def test_an_open_transaction_fails_abortable_and_the_next_one_commits_on_the_new_cluster(
    clusters: ClusterReplacement, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="aiokprod")
    await clusters.restart_old()
    clusters.lead_to_old()
    topic = f"replaced-txn-{uuid.uuid4().hex[:8]}"
    producer = Producer(
        clusters.bootstrap_servers, transactional_id=f"tx-{uuid.uuid4().hex[:8]}", linger_ms=5
    )
    async with producer:
        async with producer.transaction():
            for i in range(20):
                await producer.send(topic, b"first-%d" % i, key=b"%d" % i)
        await producer.begin_transaction()
        for i in range(20):
            await producer.send(topic, b"lost-%d" % i, key=b"%d" % i)
        await producer.flush()
        clusters.replace()
        # Sent after the old cluster went, before the producer noticed: they fail with the
        # cluster change, as does the transaction.
        pending = [await producer.send(topic, b"late-%d" % i) for i in range(20)]
        results = await asyncio.wait_for(
            asyncio.gather(*pending, return_exceptions=True), timeout=60
        )
        assert results
        assert all(isinstance(r, ClusterChangedError) for r in results), results
        with pytest.raises(AbortableTransactionError) as raised:
            await producer.commit_transaction()
        assert isinstance(raised.value.__cause__, ClusterChangedError)
        await producer.abort_transaction()  # starts afresh on the new cluster
        async with producer.transaction():
            for i in range(20):
                await producer.send(topic, b"next-%d" % i, key=b"%d" % i)
    assert changes_logged(caplog)
    committed = await asyncio.to_thread(
        read_committed, clusters.new.bootstrap_servers, topic, PARTITIONS, 1.0
    )
    assert sorted(committed) == sorted(b"next-%d" % i for i in range(20))
