"""A task's exactly-once steps (write_in_transaction) against a scripted TaskKafka."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import pytest

from aiokprod.errors import ConfigError, ProducerFencedError
from aiokprod.spark.eos_records import RunToken, marker
from aiokprod.spark.exactly_once import ExactlyOnceConfig, MicroBatch, TaskAction
from aiokprod.spark.transactional_write import StaleRunError, write_in_transaction
from aiokprod.types import OffsetAndMetadata, PreparedTransaction, TopicPartition

RUN = RunToken(10, 4)
PREPARED = PreparedTransaction("p-0.0", 77, 1, 2)


class Script:
    """A TaskKafka that records the calls; the register's token after each check is scripted."""

    def __init__(self, tokens: list[RunToken | None], marker_says: int | None = None) -> None:
        self.tokens = tokens
        self.calls: list[str] = []
        self.now = 0
        self.marker_says = marker_says
        self.fail_send = False
        self.fail_prepare = False

    async def run_token(self) -> RunToken | None:
        self.calls.append("check")
        return self.tokens.pop(0) if len(self.tokens) > 1 else self.tokens[0]

    async def start(self) -> None:
        self.calls.append("start")

    async def read_marker(
        self, group: str, tp: TopicPartition
    ) -> Mapping[TopicPartition, OffsetAndMetadata]:
        self.calls.append("marker?")
        return {} if self.marker_says is None else {tp: marker("q", self.marker_says)}

    async def begin(self) -> None:
        self.calls.append("begin")

    async def send(self, batch: str) -> bool:
        self.calls.append(f"send {batch}")
        self.now += 600  # each batch takes 0.6 s
        return not self.fail_send

    async def add_marker(self, group: str, tp: TopicPartition, value: OffsetAndMetadata) -> None:
        self.calls.append(f"marker {value.offset}")

    async def prepare(self) -> PreparedTransaction:
        self.calls.append("prepare")
        if self.fail_prepare:
            raise ProducerFencedError("fenced by a newer attempt")
        return PREPARED

    async def abort(self) -> None:
        self.calls.append("abort")

    def now_ms(self) -> int:
        return self.now


async def rows(*names: str) -> AsyncIterator[str]:
    for name in names:
        yield name


def eos(streaming: bool = False, run: RunToken | None = RUN) -> ExactlyOnceConfig:
    return ExactlyOnceConfig("p", streaming, run, check_interval_ms=1_000)


async def test_a_batch_task_checks_its_run_around_every_step() -> None:
    kafka = Script([RUN])
    got = await write_in_transaction(kafka, eos(), 0, "t", rows("a", "b", "c"), None)
    assert got == (TaskAction.WRITE, PREPARED)
    assert kafka.calls == [
        "check", "start", "check", "begin",
        "send a", "send b", "check",  # 1.2 s since the last check
        "send c", "prepare", "check",
    ]  # fmt: skip


async def test_a_straggler_of_a_closed_run_never_touches_kafka() -> None:
    kafka = Script([RunToken(10, 5)])
    with pytest.raises(StaleRunError, match="before starting"):
        await write_in_transaction(kafka, eos(), 0, "t", rows("a"), None)
    assert kafka.calls == ["check"]


async def test_a_run_closed_before_the_initproducerid_is_seen_after_it() -> None:
    kafka = Script([RUN, RunToken(10, 5)])
    with pytest.raises(StaleRunError, match="after its InitProducerId"):
        await write_in_transaction(kafka, eos(), 0, "t", rows("a"), None)
    assert kafka.calls == ["check", "start", "check"]  # no transaction was begun


async def test_a_run_closed_while_writing_aborts_the_transaction() -> None:
    kafka = Script([RUN, RUN, RunToken(10, 5)])
    with pytest.raises(StaleRunError, match="while writing"):
        await write_in_transaction(kafka, eos(), 0, "t", rows("a", "b", "c"), None)
    assert kafka.calls[-2:] == ["check", "abort"]
    assert "send c" not in kafka.calls


async def test_a_run_closed_after_the_prepare_aborts_the_transaction() -> None:
    kafka = Script([RUN, RUN, RunToken(11, 0)])
    with pytest.raises(StaleRunError, match="after preparing"):
        await write_in_transaction(kafka, eos(), 0, "t", rows("a"), None)
    assert kafka.calls[-3:] == ["prepare", "check", "abort"]


async def test_a_failed_row_aborts_and_reports_no_transaction() -> None:
    kafka = Script([RUN])
    kafka.fail_send = True
    got = await write_in_transaction(kafka, eos(), 0, "t", rows("a", "b"), None)
    assert got == (TaskAction.WRITE, None)
    assert kafka.calls[-2:] == ["send a", "abort"]


async def test_a_failed_prepare_aborts_and_raises() -> None:
    kafka = Script([RUN])
    kafka.fail_prepare = True
    with pytest.raises(ProducerFencedError):
        await write_in_transaction(kafka, eos(), 0, "t", rows("a"), None)
    assert kafka.calls[-2:] == ["prepare", "abort"]


async def test_a_micro_batch_writes_its_marker_in_the_transaction() -> None:
    kafka = Script([RUN])
    got = await write_in_transaction(kafka, eos(True), 0, "t", rows("a"), MicroBatch("q", 7))
    assert got == (TaskAction.WRITE, PREPARED)
    assert kafka.calls == [
        "check", "start", "check", "marker?", "begin", "send a", "marker 7", "prepare", "check",
    ]  # fmt: skip


async def test_a_replayed_micro_batch_that_committed_writes_nothing() -> None:
    kafka = Script([RUN], marker_says=7)
    got = await write_in_transaction(kafka, eos(True), 0, "t", rows("a"), MicroBatch("q", 7))
    assert got == (TaskAction.SKIP, None)
    assert "begin" not in kafka.calls


async def test_a_task_without_a_run_is_refused() -> None:
    with pytest.raises(ConfigError, match="no run token"):
        await write_in_transaction(Script([RUN]), eos(run=None), 0, "t", rows("a"), None)
