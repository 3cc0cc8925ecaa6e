"""How often the sender runs, with the real Producer against a simulated cluster (no faults).

Two things that cost CPU per request or per pass, not per record (issue 16):

- A tight ``send()`` loop of unkeyed records gives the sender its turn once a batch per
  partition is queued, so each Produce request carries several batches; a turn at every new
  batch made requests of one or two batches (the sticky partitioner fills one partition at a
  time) and about 4.5 times as many requests as a keyed load of the same size.
- ``send_and_wait()`` runs a sender pass itself; the sender task must not run a second,
  empty one for the same record (with ``linger_ms=0`` the new batch's linger deadline, "now",
  used to wake it every time).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Awaitable, Callable
from typing import Any

from aiokprod import DeliveryFuture, KafkaError, Producer
from aiokprod.testing.sim.world import SimWorld, Topology

PARTITIONS = 6


def run(body: Callable[[Producer], Awaitable[None]], **options: Any) -> SimWorld:
    world = SimWorld(random.Random(5), Topology(1, {"t": PARTITIONS}))

    async def main() -> None:
        producer = world.producer(random.Random(6), **options)
        await producer.start()
        await producer.partitions_for("t")
        await body(producer)
        await producer.close()

    world.run(main())
    return world


def logged_batches(world: SimWorld) -> int:
    return sum(len(world.cluster.partitions["t", p].log.batches) for p in range(PARTITIONS))


def test_a_tight_send_loop_puts_several_batches_in_each_request() -> None:
    requests = 0
    futures: list[DeliveryFuture] = []

    async def body(producer: Producer) -> None:
        nonlocal requests
        await producer.send_and_wait("t", b"warm-up")  # the connection to the leader is open
        for i in range(6000):
            futures.append(await producer.send("t", b"%05d" % i + b"v" * 95))
        await producer.flush()
        requests = int(producer.metrics()["request-total"]) - 1

    # Enough requests in flight that the in-flight limit never holds batches back (the
    # simulated broker answers in virtual time, while the loop's work takes none).
    world = run(
        body,
        batch_size=2000,
        linger_ms=5,
        enable_idempotence=False,
        max_in_flight_requests_per_connection=1000,
    )
    assert all(f.result().offset >= 0 for f in futures)
    batches = logged_batches(world)
    assert batches >= 6000 // 20  # about 18 records of 100 B fill a batch of 2000 B
    # A turn at every new batch gave 1.45 batches per request here (484 in 334 requests).
    assert batches / requests >= 3.0, (batches, requests)


def test_send_and_wait_costs_one_sender_pass() -> None:
    passes = 0

    async def body(producer: Producer) -> None:
        nonlocal passes
        sender = producer._rt.sender
        assert sender is not None
        before = sender.passes
        for i in range(200):
            metadata = await producer.send_and_wait("t", b"%05d" % i)
            assert metadata.offset >= 0
        passes = sender.passes - before

    run(body, linger_ms=0)
    # One pass per record (run by send_and_wait itself), and a few of the sender task's own
    # (a response wakes it when something is queued; the in-flight expiry scan). Two per
    # record before the timer was re-planned after send_and_wait's pass.
    assert 200 <= passes <= 230, passes


def test_send_and_wait_skips_the_hooks_it_does_not_need(monkeypatch: Any) -> None:
    """Without compression or interceptors, no per-request call asks either (issue 28).

    Each was an interpreted call per request and per response in the compiled build: the
    offload's ``holds`` per drained batch, ``on_acknowledgement`` per completed batch.
    (The module function is replaced for the pure build; the compiled module calls its own
    binding, so there this half checks nothing, the ``holds`` half checks both builds.)
    """
    import aiokprod.internals.produce_response as produce_response

    asked: list[str] = []
    monkeypatch.setattr(
        produce_response, "on_acknowledgement", lambda *args: asked.append("on_acknowledgement")
    )

    async def body(producer: Producer) -> None:
        sender = producer._rt.sender
        assert sender is not None
        offload: Any = sender._offload

        def holds(batch: object) -> bool:
            asked.append("holds")
            return False

        monkeypatch.setattr(offload, "holds", holds)
        for i in range(20):
            metadata = await producer.send_and_wait("t", b"%05d" % i)
            assert metadata.offset >= 0

    run(body, linger_ms=0)
    assert asked == []


def test_with_compression_the_offload_is_asked_per_batch(monkeypatch: Any) -> None:
    """The other side of the test above: with a codec the offload decides for each batch."""
    asked: list[int] = []

    async def body(producer: Producer) -> None:
        sender = producer._rt.sender
        assert sender is not None
        offload: Any = sender._offload
        real_holds = offload.holds

        def holds(batch: object) -> bool:
            asked.append(1)
            return bool(real_holds(batch))

        monkeypatch.setattr(offload, "holds", holds)
        # The simulated broker refuses compressed batches: the record ends with an error
        # (on virtual time), after the offload was asked.
        with contextlib.suppress(KafkaError):
            await producer.send_and_wait("t", b"x")

    run(body, linger_ms=0, compression_type="snappy")
    assert asked
