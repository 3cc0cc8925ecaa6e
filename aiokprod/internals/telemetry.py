"""Client telemetry (KIP-714): when to ask for the subscription, when to push, what errors mean.

Synchronous decision code: every method takes the time, nothing here does I/O. The task that
talks to the broker is :mod:`aiokprod.internals.telemetry_task`; what a push holds is
:mod:`aiokprod.internals.telemetry_metrics`.

The life of a client instance, as the KIP and the Java client have it:

1. ``SUBSCRIBE``: ask one broker (GetTelemetrySubscriptions) with the zero instance id the
   first time; the broker assigns the id, and every later request carries it.
2. A subscription with metric-name prefixes moves to ``PUSH``: the first push comes after the
   push interval times a random factor between 0.5 and 1.5 (clients started together do not
   push together), the next ones a whole interval after the previous push was answered. A
   subscription to nothing means asking again after the interval (an operator may subscribe
   the client later).
3. Errors (the KIP's table, and the Java client's choices where it is silent): an unknown
   subscription id or an unsupported compression means asking again at once; throttling or a
   push too large, asking again after the interval; anything else (an invalid request or
   record, an unsupported version, an unknown code) means the broker cannot take what this
   client sends: pushing is given up (``DISABLED``). No error ever fails a record.
4. On close, one last push with ``terminating`` set (only with a subscription to push to),
   then ``TERMINATED``.

A request that got no answer (the broker went away, or timed out) changes nothing but the
time: the same request goes to another broker after a short backoff.
"""

from __future__ import annotations

import enum
import random
import uuid
from dataclasses import dataclass
from typing import Final

from aiokprod.backoff import backoff_ms
from aiokprod.protocol.messages.telemetry import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryResponse,
)
from aiokprod.protocol.schema import ZERO_UUID

#: The Java client's push interval when the broker has not said one (5 minutes).
DEFAULT_PUSH_INTERVAL_MS: Final = 300_000
#: The first push after a subscription: the interval times a factor in this range (KIP-714).
JITTER: Final = (0.5, 1.5)
#: A request without an answer is sent again after this backoff (doubling, at most the
#: push interval).
RETRY_BACKOFF_MS: Final = 100

NONE = 0
UNSUPPORTED_COMPRESSION_TYPE = 76
THROTTLING_QUOTA_EXCEEDED = 89
UNKNOWN_SUBSCRIPTION_ID = 117
TELEMETRY_TOO_LARGE = 118
#: Errors after which the subscription is asked for again at once.
_RESUBSCRIBE_NOW: Final = frozenset({UNKNOWN_SUBSCRIPTION_ID, UNSUPPORTED_COMPRESSION_TYPE})
#: Errors after which the subscription is asked for again after the push interval.
_RESUBSCRIBE_LATER: Final = frozenset({THROTTLING_QUOTA_EXCEEDED, TELEMETRY_TOO_LARGE})


class Phase(enum.Enum):
    """What the client does next."""

    SUBSCRIBE = "subscribe"
    PUSH = "push"
    TERMINATED = "terminated"
    DISABLED = "disabled"


@dataclass(frozen=True, slots=True)
class Subscription:
    """What the broker asked for (a GetTelemetrySubscriptions answer)."""

    instance_id: uuid.UUID
    subscription_id: int
    #: Codec ids the broker takes, its preferred first.
    accepted_compression: tuple[int, ...]
    push_interval_ms: int
    max_bytes: int
    delta: bool
    #: Metric-name prefixes; ``()``: nothing; ``("",)`` (or ``"*"``): everything.
    prefixes: tuple[str, ...]

    @property
    def wants_metrics(self) -> bool:
        """Whether any metric is asked for."""
        return bool(self.prefixes)

    def wants(self, name: str) -> bool:
        """Whether the metric ``name`` is asked for."""
        return any(p == "*" or name.startswith(p) for p in self.prefixes)

    def compression(self, supported: tuple[int, ...]) -> int:
        """The broker's most preferred codec that this client has, else 0 (none)."""
        for codec in self.accepted_compression:
            if codec in supported:
                return codec
        return NONE


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an answer meant, for the caller's log and metrics."""

    #: ``"subscribed"``, ``"pushed"``, ``"retry"`` (an error; asked again later),
    #: ``"disabled"`` (pushing given up), ``"ignored"`` (an answer after close).
    kind: str
    error_code: int = NONE
    wait_ms: int = 0


class TelemetryState:
    """The KIP-714 state of one client instance (see the module docstring).

    Args:
        rng: the producer's randomness (the first push's jitter, retry backoff).
    """

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self.phase = Phase.SUBSCRIBE
        #: The id the broker assigned (None until the first answer).
        self.instance_id: uuid.UUID | None = None
        self.subscription: Subscription | None = None
        #: When the next request is due (monotonic ms); 0: as soon as a broker is there.
        self.next_ms = 0
        #: Requests in a row that got no answer.
        self._failures = 0
        #: Why pushing was given up (``DISABLED``).
        self.disabled_reason: str | None = None
        #: Subscriptions received (each one a new or changed set of requested metrics).
        self.subscriptions = 0

    # --- when -------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether requests are still to be sent (neither terminated nor disabled)."""
        return self.phase in (Phase.SUBSCRIBE, Phase.PUSH)

    def due_in_ms(self, now_ms: int) -> int | None:
        """Milliseconds until the next request (0: now); None when none will follow."""
        if not self.active:
            return None
        return max(0, self.next_ms - now_ms)

    def _interval_ms(self) -> int:
        sub = self.subscription
        return sub.push_interval_ms if sub is not None else DEFAULT_PUSH_INTERVAL_MS

    # --- subscribing ------------------------------------------------------------------------

    def subscription_request(self) -> GetTelemetrySubscriptionsRequest:
        """The GetTelemetrySubscriptions request (the zero id until one is assigned)."""
        return GetTelemetrySubscriptionsRequest(client_instance_id=self.instance_id or ZERO_UUID)

    def on_subscription(self, response: GetTelemetrySubscriptionsResponse, now_ms: int) -> Outcome:
        """Take in a GetTelemetrySubscriptions answer."""
        if not self.active:
            return Outcome("ignored")
        self._failures = 0
        if response.error_code:
            return self._on_error(response.error_code, response.throttle_time_ms, now_ms)
        instance = self.instance_id
        if instance is None:
            if response.client_instance_id == ZERO_UUID:
                return self._disable("the broker assigned no client instance id", now_ms)
            instance = self.instance_id = response.client_instance_id
        interval = response.push_interval_ms
        if interval <= 0:
            interval = DEFAULT_PUSH_INTERVAL_MS
        sub = self.subscription = Subscription(
            instance_id=instance,
            subscription_id=response.subscription_id,
            accepted_compression=tuple(response.accepted_compression_types),
            push_interval_ms=interval,
            max_bytes=response.telemetry_max_bytes,
            delta=response.delta_temporality,
            prefixes=tuple(response.requested_metrics),
        )
        self.subscriptions += 1
        if sub.wants_metrics:
            self.phase = Phase.PUSH
            wait = round(self._rng.uniform(*JITTER) * interval)
        else:
            self.phase = Phase.SUBSCRIBE  # nothing asked for: ask again after the interval
            wait = interval
        self.next_ms = now_ms + max(wait, response.throttle_time_ms)
        return Outcome("subscribed", wait_ms=self.next_ms - now_ms)

    # --- pushing ----------------------------------------------------------------------------

    def on_push(self, response: PushTelemetryResponse, now_ms: int) -> Outcome:
        """Take in a PushTelemetry answer."""
        if not self.active:
            return Outcome("ignored")
        self._failures = 0
        if response.error_code:
            return self._on_error(response.error_code, response.throttle_time_ms, now_ms)
        self.next_ms = now_ms + max(self._interval_ms(), response.throttle_time_ms)
        return Outcome("pushed", wait_ms=self.next_ms - now_ms)

    def on_no_answer(self, now_ms: int) -> int:
        """A request got no answer (the broker went away or timed out); returns the backoff.

        The same kind of request goes out again, to another broker if this one is gone.
        """
        self._failures += 1
        wait = backoff_ms(self._failures, RETRY_BACKOFF_MS, self._interval_ms(), self._rng)
        self.next_ms = now_ms + wait
        return wait

    def _on_error(self, code: int, throttle_ms: int, now_ms: int) -> Outcome:
        if code in _RESUBSCRIBE_NOW:
            wait = 0
        elif code in _RESUBSCRIBE_LATER:
            wait = self._interval_ms()
        else:
            return self._disable(f"the broker answered error {code}", now_ms, code)
        self.phase = Phase.SUBSCRIBE
        self.next_ms = now_ms + max(wait, throttle_ms)
        return Outcome("retry", code, self.next_ms - now_ms)

    def _disable(self, reason: str, now_ms: int, code: int = NONE) -> Outcome:
        self.phase = Phase.DISABLED
        self.disabled_reason = reason
        self.next_ms = now_ms
        return Outcome("disabled", code)

    def give_up(self, reason: str) -> None:
        """Stop pushing for good (a failure this client cannot recover from)."""
        self.phase = Phase.DISABLED
        self.disabled_reason = reason

    # --- closing ----------------------------------------------------------------------------

    def begin_terminating(self) -> bool:
        """The producer closes: whether a terminating push is to be sent.

        Only with a subscription that asks for metrics (the KIP's terminating push tells the
        broker the instance is gone); the state ends either way.
        """
        pushing = self.phase is Phase.PUSH and self.subscription is not None
        if self.active:
            self.phase = Phase.TERMINATED
        return pushing
