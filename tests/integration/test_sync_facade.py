"""aiokprod.sync.SyncProducer against the local broker, read back with librdkafka."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest
from readback import consume_all

from aiokprod import (
    ConfigError,
    MetadataTimeoutError,
    ProducerClosedError,
    RecordMetadata,
    RecordTooLargeError,
    SerializationError,
)
from aiokprod.errors import IllegalStateError, KafkaTimeoutError
from aiokprod.sync import SyncProducer
from aiokprod.testing import LocalKafka

pytestmark = pytest.mark.timeout(90)


def sync_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("aiokprod-sync")]


def export(
    producer: SyncProducer, topic: str, n: int
) -> list[concurrent.futures.Future[RecordMetadata]]:
    """What a user's plain (non-async) function does: send, then flush."""
    futures = [
        producer.send(
            topic,
            f"value-{i}".encode(),
            key=f"k{i % 10}",
            # a str header value is encoded as UTF-8 at run time; the Header type says bytes
            headers=[("i", str(i))],  # type: ignore[list-item]
        )
        for i in range(n)
    ]
    producer.flush(timeout=30)
    return futures


def test_plain_function_delivers_and_flushes(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=3)
    with SyncProducer(kafka.bootstrap_servers, linger_ms=50) as producer:
        assert sync_threads(), "the loop thread runs while the producer is open"
        futures = export(producer, topic, 2000)
        # flush() returned: every future is resolved, without waiting on it
        assert all(f.done() for f in futures)
        metadata = [f.result() for f in futures]
        marker = producer.send_and_wait(topic, b"marker", key=b"k0", timeout=30)
        assert producer.partitions_for(topic) == [0, 1, 2]
        assert producer.metrics()["records_sent"] >= 2001
    assert producer.closed
    assert sync_threads() == [], "close() leaves no thread running"
    assert isinstance(marker, RecordMetadata)
    assert not futures[0].cancel(), "an accepted record cannot be withdrawn"

    records = consume_all(kafka.bootstrap_servers, topic, expected=2001, timeout_s=30)
    assert len(records) == 2001
    by_position = {(r.partition, r.offset): r for r in records}
    for i, md in enumerate(metadata):
        got = by_position[(md.partition, md.offset)]
        assert got.value == f"value-{i}".encode()
        assert got.key == f"k{i % 10}".encode()
        assert got.headers == (("i", str(i).encode()),)
    assert by_position[(marker.partition, marker.offset)].value == b"marker"


def test_errors_surface_as_typed_exceptions(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=1)
    # a bad option fails in the caller, before any thread starts
    with pytest.raises(ConfigError, match="linger_ms"):
        SyncProducer(kafka.bootstrap_servers, linger_ms="soon")  # type: ignore[arg-type]
    assert sync_threads() == []

    producer = SyncProducer(
        kafka.bootstrap_servers,
        max_block_ms=1500,
        allow_auto_create_topics=False,
        max_request_size=10_000,
    )
    try:
        with pytest.raises(SerializationError, match="int"):
            producer.send(topic, 12345)
        with pytest.raises(RecordTooLargeError):
            producer.send(topic, b"x" * 20_000)
        started = time.monotonic()
        with pytest.raises(MetadataTimeoutError, match="no-such-topic"):
            producer.send(f"no-such-topic-{topic}", b"x")
        assert time.monotonic() - started < 10
        with pytest.raises(MetadataTimeoutError):
            producer.send_and_wait(f"no-such-topic-{topic}", b"x")
        # nothing accepted was lost by the failures around it
        assert producer.send_and_wait(topic, b"ok").offset == 0

        # a callback runs on the loop thread: calling back into the producer is refused
        seen: list[BaseException] = []

        def callback(future: concurrent.futures.Future[RecordMetadata]) -> None:
            try:
                producer.send(topic, b"from callback")
            except BaseException as exc:  # noqa: BLE001 - whatever it is, the test asserts on it
                seen.append(exc)

        producer.send(topic, b"with callback").add_done_callback(callback)
        producer.flush(timeout=30)
        assert len(seen) == 1
        assert isinstance(seen[0], IllegalStateError)
    finally:
        producer.close()
    assert sync_threads() == []
    with pytest.raises(ProducerClosedError):
        producer.send(topic, b"after close")
    with pytest.raises(ProducerClosedError):
        producer.flush()
    producer.close()  # closing twice is fine

    records = consume_all(kafka.bootstrap_servers, topic, expected=2, timeout_s=30)
    assert [r.value for r in records] == [b"ok", b"with callback"]


def test_send_and_wait_timeout_is_a_kafka_timeout() -> None:
    # a broker that never answers: the port of a listening socket that accepts nothing
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with SyncProducer(address, max_block_ms=60_000) as producer:
            started = time.monotonic()
            with pytest.raises(KafkaTimeoutError, match=r"within 0\.5 s"):
                producer.send_and_wait("t", b"x", timeout=0.5)
            assert time.monotonic() - started < 5
            producer.close(timeout=0)
    assert sync_threads() == []


def test_threads_share_one_producer(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=4)
    per_thread = 500
    with SyncProducer(kafka.bootstrap_servers) as producer:

        def worker(n: int) -> list[RecordMetadata]:
            futures = [producer.send(topic, f"{n}-{i}", key=f"t{n}") for i in range(per_thread)]
            return [f.result(timeout=30) for f in futures]

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(worker, range(4)))
    for metadata in results:
        # one key per thread: one partition, offsets in send order
        assert len({md.partition for md in metadata}) == 1
        offsets = [md.offset for md in metadata]
        assert offsets == sorted(offsets)

    records = consume_all(kafka.bootstrap_servers, topic, expected=4 * per_thread, timeout_s=30)
    assert sorted(r.value for r in records) == sorted(
        f"{n}-{i}".encode() for n in range(4) for i in range(per_thread)
    )


@pytest.mark.filterwarnings("ignore:.*multi-threaded.*fork:DeprecationWarning")  # Python 3.12+
def test_a_forked_child_does_not_inherit_the_producer(kafka: LocalKafka) -> None:
    import os

    with SyncProducer(kafka.bootstrap_servers) as producer:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: refused clearly, and exits without hanging on the parent's
            try:
                producer.send("t", b"x")
                code = 1
            except IllegalStateError:
                code = 0
            except BaseException:  # noqa: BLE001 - a forked child must report, never unwind
                code = 2
            os.write(write, bytes([code]))
            os._exit(0)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        assert os.read(read, 1) == b"\x00"
        os.close(read)
        assert os.waitstatus_to_exitcode(status) == 0
