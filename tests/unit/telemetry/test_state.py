"""TelemetryState: the KIP-714 decisions, with the time given (no I/O, no clock)."""

from __future__ import annotations

import random
import uuid

import pytest

from aiokprod.internals.telemetry import (
    DEFAULT_PUSH_INTERVAL_MS,
    Phase,
    Subscription,
    TelemetryState,
)
from aiokprod.protocol.messages.telemetry import (
    GetTelemetrySubscriptionsResponse,
    PushTelemetryResponse,
    kafka_uuid_text,
)
from aiokprod.protocol.schema import ZERO_UUID

INSTANCE = uuid.UUID("26bcdcdd-219d-4131-92c9-3d27af3a96af")


def answer(**fields: object) -> GetTelemetrySubscriptionsResponse:
    values: dict[str, object] = {
        "client_instance_id": INSTANCE,
        "subscription_id": 7,
        "accepted_compression_types": [4, 3, 1, 2],
        "push_interval_ms": 1000,
        "telemetry_max_bytes": 1 << 20,
        "delta_temporality": True,
        "requested_metrics": ["org.apache.kafka.producer."],
    }
    values.update(fields)
    return GetTelemetrySubscriptionsResponse(**values)  # type: ignore[arg-type]


def subscribed(now_ms: int = 0, seed: int = 0, **fields: object) -> TelemetryState:
    state = TelemetryState(random.Random(seed))
    state.on_subscription(answer(**fields), now_ms)
    return state


def test_the_first_request_asks_for_an_id_and_later_ones_carry_it() -> None:
    state = TelemetryState(random.Random(0))
    assert state.phase is Phase.SUBSCRIBE
    assert state.due_in_ms(0) == 0
    assert state.subscription_request().client_instance_id == ZERO_UUID
    state.on_subscription(answer(), 0)
    assert state.instance_id == INSTANCE
    assert state.subscription_request().client_instance_id == INSTANCE
    # A broker that answers another id later does not change it (it is the client's for life).
    state.on_subscription(answer(client_instance_id=uuid.uuid4()), 10)
    assert state.instance_id == INSTANCE


def test_the_first_push_is_jittered_between_half_and_one_and_a_half_intervals() -> None:
    waits = {subscribed(seed=seed).due_in_ms(0) for seed in range(50)}
    assert all(w is not None and 500 <= w <= 1500 for w in waits)
    assert len(waits) > 10  # spread, not one value


def test_then_every_interval_after_the_answer() -> None:
    state = subscribed()
    assert state.phase is Phase.PUSH
    outcome = state.on_push(PushTelemetryResponse(), 5_000)
    assert outcome.kind == "pushed"
    assert state.due_in_ms(5_000) == 1000
    state.on_push(PushTelemetryResponse(throttle_time_ms=3000), 6_000)
    assert state.due_in_ms(6_000) == 3000  # a throttle time longer than the interval wins


def test_a_subscription_to_nothing_asks_again_after_the_interval() -> None:
    state = subscribed(requested_metrics=[], push_interval_ms=2000)
    assert state.phase is Phase.SUBSCRIBE
    assert state.due_in_ms(0) == 2000
    assert state.begin_terminating() is False  # nothing to push on close either


@pytest.mark.parametrize("code", [117, 76])
def test_unknown_subscription_or_compression_asks_again_at_once(code: int) -> None:
    state = subscribed()
    outcome = state.on_push(PushTelemetryResponse(error_code=code), 100)
    assert (outcome.kind, state.phase, state.due_in_ms(100)) == ("retry", Phase.SUBSCRIBE, 0)


@pytest.mark.parametrize("code", [89, 118])
def test_throttling_or_too_large_asks_again_after_the_interval(code: int) -> None:
    state = subscribed()
    outcome = state.on_push(PushTelemetryResponse(error_code=code), 100)
    assert (outcome.kind, state.phase, state.due_in_ms(100)) == ("retry", Phase.SUBSCRIBE, 1000)
    # Without a subscription yet, the Java client's default interval.
    fresh = TelemetryState(random.Random(0))
    fresh.on_subscription(GetTelemetrySubscriptionsResponse(error_code=code), 0)
    assert fresh.due_in_ms(0) == DEFAULT_PUSH_INTERVAL_MS


@pytest.mark.parametrize("code", [42, 87, 35, 31, 9999])
def test_errors_retrying_cannot_fix_give_up(code: int) -> None:
    state = subscribed()
    outcome = state.on_push(PushTelemetryResponse(error_code=code), 100)
    assert outcome.kind == "disabled"
    assert state.phase is Phase.DISABLED
    assert state.due_in_ms(100) is None
    assert str(code) in (state.disabled_reason or "")
    assert state.begin_terminating() is False


def test_no_answer_retries_with_backoff_and_keeps_the_phase() -> None:
    state = subscribed()
    waits = [state.on_no_answer(0) for _ in range(8)]
    assert state.phase is Phase.PUSH
    assert waits[0] <= 120
    assert waits[-1] <= 1000
    assert waits[-1] > waits[0]
    state.on_push(PushTelemetryResponse(), 10)
    assert state.on_no_answer(10) <= 120  # an answer resets the backoff


def test_an_id_never_assigned_gives_up() -> None:
    state = TelemetryState(random.Random(0))
    outcome = state.on_subscription(answer(client_instance_id=ZERO_UUID), 0)
    assert outcome.kind == "disabled"


def test_terminating_once_and_answers_after_are_ignored() -> None:
    state = subscribed()
    assert state.begin_terminating() is True
    assert state.phase is Phase.TERMINATED
    assert state.due_in_ms(0) is None
    assert state.begin_terminating() is False
    assert state.on_push(PushTelemetryResponse(error_code=117), 5).kind == "ignored"
    assert state.on_subscription(answer(), 5).kind == "ignored"


def test_subscription_prefixes_and_compression() -> None:
    sub = Subscription(
        INSTANCE, 1, (5, 4, 1), 1000, 100, True, ("org.apache.kafka.producer.node.",)
    )
    assert sub.wants("org.apache.kafka.producer.node.request.latency.avg")
    assert not sub.wants("org.apache.kafka.producer.record.queue.time.avg")
    assert sub.compression((1, 2, 3, 4)) == 4  # the broker's first that we have (5: unknown)
    assert Subscription(INSTANCE, 1, (), 1, 1, True, ("",)).wants("anything")
    assert Subscription(INSTANCE, 1, (), 1, 1, True, ("*",)).wants("anything")
    assert not Subscription(INSTANCE, 1, (), 1, 1, True, ()).wants_metrics
    assert Subscription(INSTANCE, 1, (), 1, 1, True, ()).compression((1, 2, 3, 4)) == 0
    assert Subscription(INSTANCE, 1, (7,), 1, 1, True, ()).compression((1, 2, 3, 4)) == 0


def test_kafka_prints_ids_in_url_safe_base64() -> None:
    # The id the broker assigned in a real run, as the broker plugin received it.
    assert kafka_uuid_text(uuid.UUID("26bcdcdd-219d-4131-92c9-3d27af3a96af")) == (
        "Jrzc3SGdQTGSyT0nrzqWrw"
    )
