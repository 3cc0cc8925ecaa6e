"""The version matrix: the producer against every supported Apache Kafka release.

One broker per release (the newest patch of each minor line from 3.6 on, see
``aiokprod.testing.releases.TESTED_VERSIONS``), one node and three nodes. Per release:

* ApiVersions: the broker's ranges (asked by the harness's own client) and the versions
  aiokprod's connection negotiates with it, which must be the highest both sides speak;
* the core round trip: idempotent, acks=all, keyed records with every compression codec,
  read back with librdkafka and compared record by record;
* on three nodes: the same with replication factor 3 and ``min.insync.replicas=2``.

``make test`` (and so CI) runs the smoke subset (``smoke=True`` below: 3.9, 4.0 and the
newest release, three nodes on 3.9 only); ``make test-versions`` runs everything
(``pytest --kafka-versions=all``). The negotiated versions are printed at the end of the run
(``tests/integration/conftest.py``) and recorded in ``docs/compatibility.md``.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from readback import consume_all
from versions_report import VERSION_RESULTS

from aiokprod import Producer
from aiokprod.net.connection import BrokerConnection
from aiokprod.protocol.api import API_VERSIONS, METADATA, PRODUCE, ApiSpec
from aiokprod.testing import LocalKafka
from aiokprod.testing.apiversions import fetch_api_versions
from aiokprod.testing.distribution import kafka_version
from aiokprod.testing.pytest_plugin import CLUSTER_CONFIG, start_or_give_up, unique_topic_name
from aiokprod.testing.releases import SMOKE_VERSIONS, TESTED_VERSIONS, parse_version

CODECS: tuple[Literal["none", "gzip", "snappy", "lz4", "zstd"], ...] = (
    "none",
    "gzip",
    "snappy",
    "lz4",
    "zstd",
)
RECORDS_PER_CODEC = 1000
KEYS = 40
PARTITIONS = 3
CLUSTER_SMOKE = ("3.9.2",)


def _params(smoke: tuple[str, ...], suffix: str = "") -> list[Any]:
    return [
        pytest.param(v, marks=pytest.mark.kafka_version(v, smoke=v in smoke), id=f"{v}{suffix}")
        for v in TESTED_VERSIONS
    ]


@pytest.fixture(scope="module", params=_params(SMOKE_VERSIONS))
def broker(request: pytest.FixtureRequest) -> Iterator[LocalKafka]:
    """One node of the parametrised release (the session's ``kafka`` for the default one)."""
    version: str = request.param
    if version == kafka_version():
        yield request.getfixturevalue("kafka")
        return
    instance = start_or_give_up(1, version=version)
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="module", params=_params(CLUSTER_SMOKE, "-3nodes"))
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalKafka]:
    """Three nodes of the parametrised release."""
    instance = start_or_give_up(3, version=request.param, broker_config=CLUSTER_CONFIG)
    try:
        yield instance
    finally:
        instance.stop()


def _record(codec: str, i: int) -> tuple[bytes, bytes]:
    key = f"key-{i % KEYS}".encode()
    value = f"{codec}-{i}-".encode() + bytes(i % 300)
    return key, value


async def _produce_and_check(kafka: LocalKafka, topic: str) -> dict[str, int]:
    """Send keyed records with every codec (idempotent, acks=all), read back, compare.

    Returns the number of records per codec that librdkafka read back.
    """
    sent: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    order: dict[int, list[int]] = defaultdict(list)
    partitions_of_key: dict[bytes, set[int]] = defaultdict(set)
    for codec in CODECS:
        async with Producer(
            kafka.bootstrap_servers,
            acks="all",
            enable_idempotence=True,
            compression_type=codec,
            linger_ms=5,
        ) as producer:
            futures = []
            for i in range(RECORDS_PER_CODEC):
                key, value = _record(codec, i)
                futures.append(await producer.send(topic, value, key=key))
            await producer.flush()
            for i, future in enumerate(futures):
                md = await future
                key, value = _record(codec, i)
                assert (md.partition, md.offset) not in sent, "two records at one offset"
                sent[(md.partition, md.offset)] = (key, value)
                order[md.partition].append(md.offset)
                partitions_of_key[key].add(md.partition)

    consumed = consume_all(kafka.bootstrap_servers, topic, len(sent))
    got = {(r.partition, r.offset): (r.key, r.value) for r in consumed}
    assert len(consumed) == len(sent) == len(CODECS) * RECORDS_PER_CODEC
    assert got == sent
    for partition, offsets in order.items():
        assert offsets == sorted(offsets), f"partition {partition} out of send order"
    assert all(len(p) == 1 for p in partitions_of_key.values()), "a key on two partitions"
    assert len({p for ps in partitions_of_key.values() for p in ps}) == PARTITIONS
    per_codec: dict[str, int] = defaultdict(int)
    for _, value in got.values():
        assert value is not None
        per_codec[value.split(b"-", 1)[0].decode()] += 1
    return dict(per_codec)


async def _negotiated(kafka: LocalKafka, apis: tuple[ApiSpec, ...]) -> dict[str, int]:
    """The versions aiokprod's own connection picks with the first node."""
    address = kafka.nodes[min(kafka.nodes)]
    conn = BrokerConnection(
        -1,
        address.host,
        address.port,
        client_id="version-matrix",
        max_in_flight=1,
        software_version="test",
    )
    await conn.open(30.0)
    try:
        return {api.name: conn.protocol.version_for(api) for api in apis}
    finally:
        conn.close()
        await asyncio.sleep(0)


async def test_api_versions_negotiated(broker: LocalKafka) -> None:
    version = broker.kafka_version
    address = broker.nodes[min(broker.nodes)]
    offered = fetch_api_versions(address.host, address.port)
    apis = (PRODUCE, METADATA, API_VERSIONS)
    negotiated = await _negotiated(broker, apis)
    for api in apis:
        low, high = offered.api_ranges[api.key]
        expected = min(api.max_version, high)
        assert expected >= max(api.min_version, low), f"{api.name}: no common version"
        assert negotiated[api.name] == expected, api.name
    # KIP-951 leader hints ride on Produce v10+, which brokers from 3.7 on speak.
    assert (offered.max_version(PRODUCE.key) or 0) >= 10 or parse_version(version) < (3, 7)
    features = offered.finalized_features
    if parse_version(version) >= (4, 0):
        assert features.get("transaction.version", 0) >= 2, features  # KIP-890 part 2 on
    else:
        assert features.get("transaction.version", 0) == 0, features
    VERSION_RESULTS.setdefault(version, {}).update(
        {
            "produce_broker": offered.api_ranges[PRODUCE.key],
            "metadata_broker": offered.api_ranges[METADATA.key],
            "apiversions_broker": offered.api_ranges[API_VERSIONS.key],
            "negotiated": negotiated,
            "features": dict(sorted(features.items())),
        }
    )


async def test_round_trip_every_codec(broker: LocalKafka, request: pytest.FixtureRequest) -> None:
    topic = unique_topic_name(request.node.name)
    broker.create_topic(topic, partitions=PARTITIONS)
    per_codec = await _produce_and_check(broker, topic)
    assert per_codec == dict.fromkeys(CODECS, RECORDS_PER_CODEC)
    VERSION_RESULTS.setdefault(broker.kafka_version, {})["round_trip_1"] = sum(per_codec.values())


async def test_round_trip_three_nodes(cluster: LocalKafka, request: pytest.FixtureRequest) -> None:
    topic = unique_topic_name(request.node.name)
    info = cluster.create_topic(
        topic, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"}
    )
    assert all(len(p.replicas) == 3 for p in info.partitions)
    per_codec = await _produce_and_check(cluster, topic)
    assert per_codec == dict.fromkeys(CODECS, RECORDS_PER_CODEC)
    VERSION_RESULTS.setdefault(cluster.kafka_version, {})["round_trip_3"] = sum(per_codec.values())
