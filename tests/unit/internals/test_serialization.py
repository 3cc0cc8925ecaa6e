"""Default serialization, user serializers and header validation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aiokprod.errors import SerializationError
from aiokprod.internals.serialization import apply_serializer, serialize_headers, to_bytes
from aiokprod.protocol.records import encode_headers


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (b"raw", b"raw"),
        (bytearray(b"ba"), b"ba"),
        (memoryview(b"mv"), b"mv"),
        ("text é", "text é".encode()),
        ("", b""),
        (b"", b""),
        (None, None),
    ],
)
def test_default_serializer_types(obj: object, expected: bytes | None) -> None:
    result = to_bytes(obj, "value")
    assert result == expected
    if result is not None:
        assert type(result) is bytes


def test_default_serializer_keeps_bytes_object() -> None:
    data = b"x" * 100
    assert to_bytes(data, "value") is data


@pytest.mark.parametrize("obj", [1, 1.5, True, {"a": 1}, [b"x"], object()])
def test_default_serializer_rejects_other_types(obj: object) -> None:
    with pytest.raises(SerializationError, match=type(obj).__name__) as info:
        to_bytes(obj, "key")
    assert "key_serializer" in str(info.value)
    assert isinstance(info.value, TypeError)


def test_custom_serializer_result() -> None:
    def dumps(obj: Any) -> bytes:
        return json.dumps(obj).encode()

    assert apply_serializer(dumps, {"a": 1}, "value") == b'{"a": 1}'
    assert apply_serializer(lambda obj: None, 1, "value") is None
    assert apply_serializer(lambda obj: bytearray(b"ba"), 1, "value") == b"ba"
    assert type(apply_serializer(lambda obj: memoryview(b"mv"), 1, "value")) is bytes


def test_custom_serializer_error_is_wrapped() -> None:
    def broken(obj: Any) -> bytes:
        raise ValueError("cannot encode this")

    with pytest.raises(SerializationError, match="value_serializer failed") as info:
        apply_serializer(broken, 1, "value")
    assert isinstance(info.value.__cause__, ValueError)
    assert "cannot encode this" in str(info.value)


def test_custom_serializer_serialization_error_passes_through() -> None:
    original = SerializationError("mine")

    def strict(obj: Any) -> bytes:
        raise original

    with pytest.raises(SerializationError) as info:
        apply_serializer(strict, 1, "key")
    assert info.value is original


@pytest.mark.parametrize("bad", ["text", 5, [b"x"]])
def test_custom_serializer_must_return_bytes(bad: object) -> None:
    with pytest.raises(SerializationError, match=rf"key_serializer returned {type(bad).__name__}"):
        apply_serializer(lambda obj: bad, 1, "key")


def test_headers_encoded_like_the_record_codec() -> None:
    headers = [("a", b"1"), ("b", None), ("c", "text"), ("d", bytearray(b"x"))]
    expected = encode_headers([("a", b"1"), ("b", None), ("c", b"text"), ("d", b"x")])
    assert serialize_headers(headers) == expected
    assert serialize_headers([["a", b"1"]]) == encode_headers([("a", b"1")])
    assert serialize_headers((("a", b"1"),)) == encode_headers([("a", b"1")])


@pytest.mark.parametrize("empty", [None, [], ()])
def test_no_headers(empty: object) -> None:
    assert serialize_headers(empty) is None


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ("a=1", "list of"),
        (b"a", "list of"),
        ({"a": b"1"}, "list of"),
        ([("a",)], "not a .key, value. pair"),
        ([("a", b"1", b"2")], "not a .key, value. pair"),
        (["ab"], "not a .key, value. pair"),
        ([(b"a", b"1")], "key b'a' must be a str"),
        ([(None, b"1")], "must be a str"),
        ([("a", 1)], "'a' value must be bytes, str or None, not int"),
    ],
)
def test_bad_headers(headers: object, message: str) -> None:
    with pytest.raises(SerializationError, match=message):
        serialize_headers(headers)


# --- coroutine serializers and serializers that take a context (Schema Registry style) -------

from aiokprod.internals.serialization import (  # noqa: E402
    is_plain_serializer,
    serialize_special,
)
from aiokprod.types import SerializationContext  # noqa: E402


def test_plain_one_argument_functions_stay_on_the_fast_path() -> None:
    assert is_plain_serializer(None)
    assert is_plain_serializer(str.encode)  # its optional 2nd argument is not a context
    assert is_plain_serializer(lambda obj: b"x")


class ConfluentStyle:
    """Like confluent-kafka's serializers: ``__call__(obj, ctx=None)``."""

    def __call__(self, obj: object, ctx: SerializationContext | None = None) -> bytes:
        assert ctx is not None
        return f"{ctx.topic}/{ctx.field}/{obj}".encode()


class AsyncCallable:
    async def __call__(self, obj: object) -> bytes:
        return b"async-object"


async def async_with_context(obj: object, ctx: SerializationContext) -> bytes:
    return f"{ctx.topic}:{ctx.field}:{len(ctx.headers or ())}:{obj}".encode()


async def test_special_serializers_are_awaited_and_told_the_context() -> None:
    headers = [("h", b"1")]
    assert not is_plain_serializer(async_with_context)
    assert not is_plain_serializer(ConfluentStyle())
    assert not is_plain_serializer(AsyncCallable())
    got = await serialize_special(async_with_context, 5, "value", "orders", headers)
    assert got == b"orders:value:1:5"
    assert await serialize_special(ConfluentStyle(), 7, "key", "t", None) == b"t/key/7"
    assert await serialize_special(AsyncCallable(), 1, "value", "t", None) == b"async-object"


async def test_special_serializer_failures_are_typed() -> None:
    async def broken(obj: object, ctx: SerializationContext) -> bytes:
        raise RuntimeError("registry down")

    async def wrong_type(obj: object) -> str:
        return "not bytes"

    with pytest.raises(SerializationError, match=r"value_serializer failed.*registry down"):
        await serialize_special(broken, 1, "value", "t", None)
    with pytest.raises(SerializationError, match="returned str"):
        await serialize_special(wrong_type, 1, "value", "t", None)
