"""Fault schedules: which faults a run injects, how often, and when — all drawn from the seed.

A schedule is a few :class:`FaultWindow` s (a kind, a probability, a time window) plus timed
cluster events (leader elections, broker restarts). The network and the brokers ask
:meth:`FaultSchedule.roll` at each point where a fault could strike; it answers from the run's
one ``random.Random``, so the same seed gives the same faults at the same moments.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

#: Faults applied to a response frame on its way to the client.
RESPONSE_FAULTS = (
    "drop_response",  # this frame never arrives (later ones do: a correlation mismatch;
    # only a man in the middle can do this, and the client can tell)
    "apply_drop",  # the request is applied, then the connection dies without answering
    "delay_response",  # the frame (and everything after it) arrives late
    "truncate",  # a shorter frame with a consistent size prefix
    "corrupt",  # the body replaced by random bytes of the same length
    "wrong_correlation",  # another correlation id
    "bad_frame_size",  # an impossible size prefix (2 GiB, -1, 0..3)
    "cut_mid_read",  # part of the frame arrives, then the connection breaks
)
#: Faults applied to a request on its way to the broker.
REQUEST_FAULTS = (
    "drop_request",  # the request is lost and the connection turns into a black hole
    "cut",  # the connection breaks as the request arrives
    "stall",  # the connection delivers nothing for a while (or for good)
)
#: Faults of connection setup.
CONNECT_FAULTS = ("refuse_connect", "connect_hang")
#: Faults in the broker's answers (nothing is wrong with the bytes).
BROKER_FAULTS = (
    "unknown_producer_id",  # a spurious UNKNOWN_PRODUCER_ID (nothing appended)
    "not_enough_replicas",  # NOT_ENOUGH_REPLICAS (nothing appended)
    "apply_timeout",  # appended, then answered REQUEST_TIMED_OUT (acks=all replication slow)
    "not_leader",  # NOT_LEADER_OR_FOLLOWER without a leader change (a stale broker)
)
#: The process does not get the CPU: the clock jumps before ready callbacks run.
CLOCK_FAULTS = ("starve",)
#: Cluster events at a moment of the run.
CLUSTER_EVENTS = ("election", "restart", "restart_new_port")
#: The whole cluster is replaced by another behind the same bootstrap address (issue 29):
#: drawn on its own, after everything else, so the other draws of a seed stay as they were.
REPLACE_CLUSTER = "replace_cluster"
#: In how many of the runs with faults the cluster is replaced.
REPLACE_PROBABILITY = 0.15

ALL_FAULTS = RESPONSE_FAULTS + REQUEST_FAULTS + CONNECT_FAULTS + BROKER_FAULTS + CLOCK_FAULTS
#: Not drawn by default: a 4.x broker never sends UNKNOWN_PRODUCER_ID, and a spurious one while
#: an earlier batch's outcome is unknown to the client makes the Java client write a duplicate
#: too (its epoch bump re-sequences every in-flight batch). Use it in targeted tests only.
OPT_IN_FAULTS = ("unknown_producer_id",)
DRAWN_FAULTS = tuple(k for k in ALL_FAULTS if k not in OPT_IN_FAULTS)


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """One fault kind, active with ``probability`` per chance between two virtual times."""

    kind: str
    probability: float
    start_ms: int
    end_ms: int
    #: Kind-specific magnitude: delay/stall/jump milliseconds.
    magnitude_ms: int = 0

    def active(self, now_ms: int) -> bool:
        """Whether the window is open at ``now_ms`` (relative to the run's start)."""
        return self.start_ms <= now_ms < self.end_ms


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """A topology change at ``at_ms``: an election, or a broker down for ``down_ms``.

    ``replace_cluster``: every broker stops at ``at_ms``; ``down_ms`` later a new cluster
    (a new id, producer ids from 0, one of them already given to another producer) runs
    behind the bootstrap address, its other brokers at the old addresses (``in_place``) or
    at new ones. With ``stale_after_ms`` >= 0 the old cluster runs again that long after the
    new one started, for ``stale_ms``: a stale broker answering on a known address.
    """

    kind: str
    at_ms: int
    down_ms: int = 0
    in_place: bool = False
    stale_after_ms: int = -1
    stale_ms: int = 0


@dataclass(slots=True)
class FaultSchedule:
    """The faults of one run."""

    windows: list[FaultWindow] = field(default_factory=list)
    events: list[ClusterEvent] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    #: Run start in loop milliseconds; windows are relative to it.
    origin_ms: int = 0

    def kinds(self) -> set[str]:
        """The fault kinds this schedule can inject."""
        return {w.kind for w in self.windows} | {e.kind for e in self.events}

    def roll(self, kinds: tuple[str, ...], now_ms: int) -> FaultWindow | None:
        """Draw whether one of ``kinds`` strikes now; the first that does is returned."""
        t = now_ms - self.origin_ms
        for window in self.windows:
            if window.kind in kinds and window.active(t) and self.rng.random() < window.probability:
                return window
        return None

    def healed_at_ms(self) -> int:
        """When the last fault window has closed and the last broker is back (run-relative)."""
        ends = [w.end_ms for w in self.windows]
        ends += [
            e.at_ms + e.down_ms + max(e.stale_after_ms + e.stale_ms, 0) + 1000  # + an election
            for e in self.events
        ]
        return max(ends, default=0)

    def max_starvation_ms(self) -> int:
        """The largest single clock jump this schedule can make."""
        return max((w.magnitude_ms for w in self.windows if w.kind == "starve"), default=0)

    def describe(self) -> str:
        """One line per fault, for --verbose and failure reports."""
        lines = [
            f"  {w.kind:<20} p={w.probability:.2f} {w.start_ms}-{w.end_ms} ms"
            + (f" magnitude {w.magnitude_ms} ms" if w.magnitude_ms else "")
            for w in self.windows
        ]
        lines += [
            f"  {e.kind:<20} at {e.at_ms} ms"
            + (f" down {e.down_ms} ms" if e.down_ms else "")
            + (_describe_replacement(e) if e.kind == REPLACE_CLUSTER else "")
            for e in self.events
        ]
        return "\n".join(lines) if lines else "  (no faults)"


def _describe_replacement(event: ClusterEvent) -> str:
    where = " in place" if event.in_place else " on new ports (broker 0 keeps its address)"
    stale = ""
    if event.stale_after_ms >= 0:
        stale = f", old cluster back {event.stale_after_ms} ms later for {event.stale_ms} ms"
    return where + stale


_MAGNITUDE_MS = {
    "delay_response": (50, 3000),
    "stall": (100, 6000),
    "starve": (20, 1500),
}


def draw_schedule(rng: random.Random, horizon_ms: int, nodes: int) -> FaultSchedule:
    """A fault schedule for a run whose workload spans about ``horizon_ms``.

    About one run in eight has no faults at all (a baseline that must always be clean); the
    others get one to four fault kinds, each in its own window, and maybe cluster events.
    """
    schedule = FaultSchedule(rng=rng)
    if rng.random() < 0.125:
        return schedule
    for kind in rng.sample(DRAWN_FAULTS, rng.randint(1, 4)):
        start = rng.randrange(0, max(1, horizon_ms * 3 // 4))
        end = start + rng.randint(horizon_ms // 10, horizon_ms)
        probability = rng.choice((0.02, 0.05, 0.1, 0.2, 0.4))
        low, high = _MAGNITUDE_MS.get(kind, (0, 0))
        magnitude = rng.randint(low, high) if high else 0
        schedule.windows.append(FaultWindow(kind, probability, start, end, magnitude))
    if rng.random() < 0.4:
        for _ in range(rng.randint(1, 3)):
            kind = rng.choice(CLUSTER_EVENTS if nodes > 1 else CLUSTER_EVENTS[1:2])
            down = rng.randint(50, 3000) if kind != "election" else 0
            schedule.events.append(ClusterEvent(kind, rng.randrange(0, horizon_ms), down))
    if rng.random() < REPLACE_PROBABILITY:
        stale = rng.random() < 0.5
        schedule.events.append(
            ClusterEvent(
                REPLACE_CLUSTER,
                rng.randrange(0, horizon_ms),
                rng.randint(0, 1000),
                in_place=rng.random() < 0.5,
                stale_after_ms=rng.randint(0, 2000) if stale else -1,
                stale_ms=rng.randint(50, 2000) if stale else 0,
            )
        )
    return schedule
