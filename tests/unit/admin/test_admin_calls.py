"""The admin client's arguments, options and lifecycle (no broker needed), and its types."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
from typing import Any

import pytest

import aiokprod
from aiokprod import OffsetAndMetadata, PreparedTransaction, TopicPartition
from aiokprod.admin import Admin, TransactionDescription, TransactionListing
from aiokprod.config import ProducerConfig
from aiokprod.errors import ConfigError, IllegalStateError, InvalidArgumentError
from aiokprod.internals.group_offsets import check_offsets, check_partitions
from aiokprod.internals.txn_admin import gather_bounded

TP = TopicPartition("t", 0)
PREPARED = PreparedTransaction("tx", 7, 3, 2)


def test_public_types_are_frozen_and_picklable() -> None:
    for value in (
        PREPARED,
        OffsetAndMetadata(5, "m"),
        TransactionListing("tx", 7, "Ongoing"),
        TransactionDescription("tx", "Ongoing", 7, 3, 60_000, 1, frozenset({TP})),
    ):
        assert pickle.loads(pickle.dumps(value)) == value
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, dataclasses.fields(value)[0].name, 1)
    assert OffsetAndMetadata(5) == OffsetAndMetadata(5, "")
    assert aiokprod.PreparedTransaction is PreparedTransaction
    assert aiokprod.OffsetAndMetadata is OffsetAndMetadata


def test_options_are_the_producers_and_checked_at_construction() -> None:
    with pytest.raises(ConfigError, match="lingr_ms"):
        Admin("127.0.0.1:9092", lingr_ms=5)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="max_block_ms"):
        Admin("127.0.0.1:9092", max_block_ms=-1)
    with pytest.raises(ConfigError, match="security_protocol"):
        Admin("127.0.0.1:9092", security_protocol="TLS")  # type: ignore[arg-type]
    admin = Admin("127.0.0.1:9092", request_timeout_ms=1234)
    assert admin.config.request_timeout_ms == 1234
    assert admin.config.client_id.startswith("aiokprod-admin-")
    assert Admin("127.0.0.1:9092", client_id="ops").config.client_id == "ops"
    config = ProducerConfig.from_options("127.0.0.1:9092")
    assert Admin(config=config).config is config
    with pytest.raises(IllegalStateError):
        Admin("127.0.0.1:9092", config=config)


async def test_calls_need_a_started_client() -> None:
    admin = Admin("127.0.0.1:9")
    with pytest.raises(IllegalStateError, match="not started"):
        await admin.complete_transaction(PREPARED, commit=True)
    await admin.start()
    with pytest.raises(IllegalStateError, match="started or closed already"):
        await admin.start()
    await admin.close()
    await admin.close()  # twice is fine
    with pytest.raises(IllegalStateError, match="closed"):
        await admin.list_transactions()
    with pytest.raises(IllegalStateError):
        await admin.start()


@pytest.mark.parametrize(
    ("call", "args", "match"),
    [
        ("complete_transaction", (("tx", 7, 3, 2), True), "PreparedTransaction"),
        ("complete_transaction", (PreparedTransaction("tx", 7, 3, 3), True), "protocol 1 or 2"),
        ("fence_producers", ("tx-1",), "iterable of strings"),
        ("fence_producers", (["tx-1", ""],), "non-empty str"),
        ("describe_transactions", ([None],), "non-empty str"),
        ("list_consumer_group_offsets", ("",), "group_id"),
        ("list_consumer_group_offsets", ("g", [("t", "0")]), "TopicPartition"),
        ("list_consumer_group_offsets", ("g", "t-0"), "iterable of TopicPartition"),
        ("alter_consumer_group_offsets", ("g", {TP: -1}), "int >= 0"),
        ("alter_consumer_group_offsets", ("g", {TP: OffsetAndMetadata(1, None)}), "metadata"),  # type: ignore[arg-type]
        ("alter_consumer_group_offsets", ("g", [1, 2]), "mapping"),
    ],
)
async def test_bad_arguments_fail_at_the_call_site(call: str, args: Any, match: str) -> None:
    async with Admin("127.0.0.1:9") as admin:
        if call == "complete_transaction":
            with pytest.raises(InvalidArgumentError, match=match):
                await admin.complete_transaction(args[0], commit=args[1])
        else:
            with pytest.raises(InvalidArgumentError, match=match):
                await getattr(admin, call)(*args)


async def test_bad_keyword_arguments_fail_at_the_call_site() -> None:
    async with Admin("127.0.0.1:9") as admin:
        with pytest.raises(InvalidArgumentError, match="commit"):
            await admin.complete_transaction(PREPARED, commit="yes")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="Ongoin"):
            await admin.list_transactions(states=["Ongoin"])
        with pytest.raises(InvalidArgumentError, match="producer_ids"):
            await admin.list_transactions(producer_ids=["7"])  # type: ignore[list-item]
        with pytest.raises(InvalidArgumentError, match="require_stable"):
            await admin.list_consumer_group_offsets("g", require_stable=1)  # type: ignore[arg-type]


def test_check_offsets_takes_ints_and_offsets_with_metadata() -> None:
    assert check_offsets({("t", 1): 5, TP: OffsetAndMetadata(3, "q")}) == {  # type: ignore[dict-item]
        TopicPartition("t", 1): OffsetAndMetadata(5, ""),
        TP: OffsetAndMetadata(3, "q"),
    }
    assert check_offsets([(TP, 2)]) == {TP: OffsetAndMetadata(2)}  # type: ignore[arg-type]
    for bad in ({TP: True}, {TP: 1.0}, {("t",): 1}, {TP: OffsetAndMetadata(-1)}):
        with pytest.raises(InvalidArgumentError):
            check_offsets(bad)  # type: ignore[arg-type]
    assert check_partitions((TP, ("u", 2))) == [TP, TopicPartition("u", 2)]
    with pytest.raises(InvalidArgumentError):
        check_partitions([("t", -1)])


async def test_gather_bounded_keeps_order_bounds_and_cancels_on_failure() -> None:
    running = 0
    most = 0
    cancelled = 0

    def call(i: int) -> Any:
        async def one() -> int:
            nonlocal running, most, cancelled
            running += 1
            most = max(most, running)
            try:
                await asyncio.sleep(0.001 * (i % 3))
                if i == 7:
                    raise InvalidArgumentError("seven")
                if i > 7:
                    await asyncio.sleep(10)
                return i
            except asyncio.CancelledError:
                cancelled += 1
                raise
            finally:
                running -= 1

        return one

    assert await gather_bounded([call(i) for i in range(7)], 3) == list(range(7))
    assert most == 3
    assert await gather_bounded([], 3) == []
    with pytest.raises(InvalidArgumentError, match="seven"):
        await gather_bounded([call(i) for i in range(12)], 4)
    assert running == 0
    assert cancelled >= 1  # the slow ones after the failure did not run on
