"""The real Producer pushing telemetry to simulated brokers, on virtual time.

The brokers answer as Apache Kafka's ``ClientMetricsManager`` does, and are scripted for what
a real broker rarely does: errors of every kind the KIP names, a subscription that changes, a
broker that goes away while a push is on its way. Times are virtual: a run of seconds takes
milliseconds, and the same seed gives the same run.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from typing import cast

import pytest

import aiokprod
from aiokprod import Producer
from aiokprod.errors import IllegalStateError
from aiokprod.net.pool import ConnectionPool
from aiokprod.protocol.messages.telemetry import kafka_uuid_text
from aiokprod.testing.sim.scale import ScaleWorld
from aiokprod.testing.sim.telemetry import PUSH_TELEMETRY, SimTelemetry

from ._sim import decode, metric_names, points, run, telemetry_world

PREFIX = "org.apache.kafka.producer."
RECORDS_PER_SECOND = 10


def accepted(telemetry: SimTelemetry) -> list[int]:
    """Indexes of the pushes the broker took."""
    return [i for i, p in enumerate(telemetry.pushes) if not p.error_code]


def test_pushes_at_the_interval_after_a_jittered_first_and_one_terminating_push() -> None:
    world, telemetry = telemetry_world()
    producer, acked = run(world, 8.0)
    assert acked == 8 * RECORDS_PER_SECOND
    pushes = telemetry.pushes
    assert [p.error_code for p in pushes] == [0] * len(pushes)
    (subscribed_at, _, _) = telemetry.subscriptions[0]
    assert 500 <= pushes[0].at_ms - subscribed_at <= 1500 + 50
    gaps = [b.at_ms - a.at_ms for a, b in itertools.pairwise(pushes[:-1])]
    assert gaps
    assert all(1000 <= gap <= 1050 for gap in gaps)
    assert [p.terminating for p in pushes] == [False] * (len(pushes) - 1) + [True]
    assert len(pushes) >= 7
    assert producer.metrics()["telemetry-push-total"] == len(pushes)
    assert producer.metrics()["telemetry-push-error-total"] == 0


def test_deltas_add_up_to_the_records_sent() -> None:
    world, telemetry = telemetry_world()
    run(world, 6.0)
    total = sum(
        p.as_double for push in telemetry.pushes for p in points(push, PREFIX + "record.send.total")
    )
    assert total == 6 * RECORDS_PER_SECOND


def test_first_pushes_are_spread_over_half_to_one_and_a_half_intervals() -> None:
    offsets = set()
    for seed in range(8):
        world, telemetry = telemetry_world(seed=seed)
        run(world, 2.0)
        offsets.add(telemetry.pushes[0].at_ms - telemetry.subscriptions[0][0])
    assert all(480 <= o <= 1550 for o in offsets)
    assert len(offsets) >= 6


def test_only_subscribed_metrics_are_pushed() -> None:
    prefixes = [PREFIX + "record.queue.time.", PREFIX + "node.request.latency."]
    world, telemetry = telemetry_world(metrics=prefixes)
    run(world, 4.0)
    names = set().union(*(metric_names(p) for p in telemetry.pushes))
    assert names == {
        PREFIX + "record.queue.time.avg",
        PREFIX + "record.queue.time.max",
        PREFIX + "node.request.latency.avg",
        PREFIX + "node.request.latency.max",
    }


def test_a_changed_subscription_is_followed() -> None:
    world, telemetry = telemetry_world()
    first_id = telemetry.subscription_id

    async def change(producer: Producer, elapsed: float) -> None:
        if elapsed == 3.0:
            telemetry.change(metrics=[PREFIX + "record.send."], interval_ms=500)

    run(world, 7.0, during=change)
    codes = [p.error_code for p in telemetry.pushes]
    assert 117 in codes  # the push with the old id: UNKNOWN_SUBSCRIPTION_ID, then again
    refused = codes.index(117)
    after = telemetry.pushes[refused + 1 :]
    assert after
    assert all(p.subscription_id == first_id + 1 for p in after)
    assert all(
        metric_names(p) <= {PREFIX + "record.send.rate", PREFIX + "record.send.total"}
        for p in after
    )
    gaps = [b.at_ms - a.at_ms for a, b in itertools.pairwise(after[:-1])]
    assert gaps
    assert all(500 <= gap <= 550 for gap in gaps)


def test_a_subscription_to_nothing_pushes_nothing_and_asks_again() -> None:
    world, telemetry = telemetry_world(metrics=[], interval_ms=1000)
    run(world, 5.0)
    assert telemetry.pushes == []
    assert 4 <= len(telemetry.subscriptions) <= 6


def test_a_subscription_matching_none_of_our_metrics_is_not_a_crash() -> None:
    # librdkafka 2.5.0 asserted here (fixed in 2.5.3).
    world, telemetry = telemetry_world(metrics=["org.apache.kafka.consumer."])
    _producer, acked = run(world, 4.0)
    assert acked == 4 * RECORDS_PER_SECOND
    assert telemetry.pushes
    assert all(metric_names(p) == set() for p in telemetry.pushes)
    assert all(not p.error_code for p in telemetry.pushes)


def test_throttling_waits_the_interval_then_asks_again() -> None:
    world, telemetry = telemetry_world()
    telemetry.fail_next(PUSH_TELEMETRY, 0, 89)  # the second push is throttled
    run(world, 6.0)
    throttled = next(p for p in telemetry.pushes if p.error_code == 89)
    asked = [at for at, _, _ in telemetry.subscriptions if at > throttled.at_ms]
    assert asked
    assert 1000 <= asked[0] - throttled.at_ms <= 1050
    assert sum(1 for p in telemetry.pushes if not p.error_code) >= 3


def test_too_large_asks_again_after_the_interval_and_the_limit_is_kept() -> None:
    world, telemetry = telemetry_world(max_bytes=400)
    telemetry.fail_next(PUSH_TELEMETRY, 118)
    producer, acked = run(world, 6.0)
    assert acked == 6 * RECORDS_PER_SECOND
    first = telemetry.pushes[0]
    assert first.error_code == 118
    asked = [at for at, _, _ in telemetry.subscriptions if at > first.at_ms]
    assert asked
    assert asked[0] - first.at_ms >= 1000
    taken = [telemetry.pushes[i] for i in accepted(telemetry)]
    assert taken
    assert all(p.size <= 400 for p in taken)
    assert all(PREFIX + "connection.creation.rate" in metric_names(p) for p in taken)
    assert producer.metrics()["telemetry-push-dropped-metrics-total"] > 0


def test_unsupported_compression_asks_again_at_once_and_uses_the_new_list() -> None:
    world, telemetry = telemetry_world(compression=[4])

    async def switch(producer: Producer, elapsed: float) -> None:
        if elapsed == 2.5:
            telemetry.compression = [1]  # the broker's accepted list changed

    run(world, 6.0, during=switch)
    refused = next(p for p in telemetry.pushes if p.error_code == 76)
    assert refused.compression == 4
    asked = [at for at, _, _ in telemetry.subscriptions if at >= refused.at_ms]
    assert asked
    assert asked[0] - refused.at_ms < 20
    later = [p for p in telemetry.pushes if p.at_ms > refused.at_ms and not p.error_code]
    assert later
    assert {p.compression for p in later} == {1}


def test_no_common_compression_means_none() -> None:
    world, telemetry = telemetry_world(compression=[])
    run(world, 3.0)
    assert telemetry.pushes
    assert {p.compression for p in telemetry.pushes} == {0}
    assert all(metric_names(p) for p in telemetry.pushes)


@pytest.mark.parametrize("code", [42, 87, 35])
def test_errors_that_retrying_cannot_fix_stop_pushing_with_one_warning(
    code: int, caplog: pytest.LogCaptureFixture
) -> None:
    world, telemetry = telemetry_world()
    telemetry.fail_next(PUSH_TELEMETRY, 0, code)
    with caplog.at_level(logging.DEBUG, logger="aiokprod.telemetry"):
        _producer, acked = run(world, 6.0)
    assert acked == 6 * RECORDS_PER_SECOND
    assert [p.error_code for p in telemetry.pushes] == [0, code]  # nothing after, no terminating
    assert len(telemetry.subscriptions) == 1
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "given up" in warnings[0].getMessage()
    debug = [r for r in caplog.records if "client telemetry pushed" in r.getMessage()]
    assert len(debug) == 1  # one DEBUG line per push


def test_a_broker_that_goes_away_mid_push_is_replaced() -> None:
    world, telemetry = telemetry_world(brokers=2)

    async def vanish(producer: Producer, elapsed: float) -> None:
        if elapsed == 2.0:
            telemetry.vanish_on_push = telemetry.pushes[-1].node_id

    producer, acked = run(world, 7.0, during=vanish)
    assert acked == 7 * RECORDS_PER_SECOND
    first_node = telemetry.pushes[0].node_id
    after = [p for p in telemetry.pushes if p.node_id != first_node]
    assert after
    assert all(not p.error_code for p in after)
    assert not world.cluster.brokers[first_node].alive
    # The push that was lost with the broker is covered by the next one (deltas add up).
    total = sum(
        p.as_double for push in telemetry.pushes for p in points(push, PREFIX + "record.send.total")
    )
    assert total == 7 * RECORDS_PER_SECOND
    assert producer.metrics()["telemetry-push-error-total"] >= 1


def test_cumulative_sums_when_the_broker_asks_for_them() -> None:
    world, telemetry = telemetry_world(delta=False)
    run(world, 4.0)
    totals = [
        p.as_double for push in telemetry.pushes for p in points(push, PREFIX + "record.send.total")
    ]
    assert totals == sorted(totals)
    assert totals[-1] == 4 * RECORDS_PER_SECOND
    starts = {
        p.start_time_unix_nano
        for push in telemetry.pushes
        for p in points(push, PREFIX + "record.send.total")
    }
    assert len(starts) == 1


def test_terminating_push_only_within_the_close_timeout() -> None:
    world, telemetry = telemetry_world()
    run(world, 3.0, close_timeout=0)
    assert telemetry.pushes
    assert not any(p.terminating for p in telemetry.pushes)
    world, telemetry = telemetry_world()
    run(world, 3.0, close_timeout=5)
    assert telemetry.pushes[-1].terminating


def test_off_means_no_telemetry_request_at_all() -> None:
    world, telemetry = telemetry_world()
    _producer, acked = run(world, 3.0, enable_metrics_push=False)
    assert acked == 3 * RECORDS_PER_SECOND
    assert telemetry.subscriptions == []
    assert telemetry.pushes == []


def test_client_instance_id() -> None:
    world, _telemetry = telemetry_world()
    found: list[uuid.UUID | None] = []

    async def ask(producer: Producer, elapsed: float) -> None:
        if elapsed == 0.1:
            found.append(await producer.client_instance_id(5))

    run(world, 1.0, during=ask)
    assert found == [uuid.UUID(int=0x5EED_0000_0000_4000_8000_0000_0000_0001)]
    # Brokers without a telemetry receiver: none, after the timeout.
    plain = ScaleWorld(1, {"t": 1})

    async def none() -> None:
        producer = plain.producer()
        await producer.start()
        found.append(await producer.client_instance_id(2))
        await producer.close()

    try:
        plain.run(none())
    finally:
        plain.close()
    assert found[-1] is None


async def test_client_instance_id_with_pushing_off() -> None:
    producer = Producer("127.0.0.1:9", enable_metrics_push=False)
    with pytest.raises(IllegalStateError):
        await producer.client_instance_id()


def test_resource_labels() -> None:
    world, telemetry = telemetry_world()
    run(world, 2.0, client_id="orders-1")
    (resource,) = [
        {a.key: a.value.string_value for a in rm.resource.attributes}
        for rm in decode(telemetry.pushes[0]).resource_metrics
    ]
    assert resource == {
        "client_instance_id": kafka_uuid_text(
            uuid.UUID(int=0x5EED_0000_0000_4000_8000_0000_0000_0001)
        ),
        "client_id": "orders-1",
        "client_software_name": "aiokprod",
        "client_software_version": aiokprod.__version__,
    }
    producer = Producer("127.0.0.1:9", transactional_id="tx-1")
    sender = producer._rt._start_telemetry(cast("ConnectionPool", None))
    assert sender is not None
    assert ("transactional_id", "tx-1") in sender._builder.resource
