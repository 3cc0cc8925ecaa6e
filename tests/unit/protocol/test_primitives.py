"""Primitive wire types: round trips, golden byte vectors, range checks, reader errors."""

from __future__ import annotations

import math
import struct
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokprod.errors import ProtocolError
from aiokprod.protocol import schema
from aiokprod.protocol.primitives import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    UINT32_MAX,
    VARINT_CACHE_SIZE,
    Reader,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    unzigzag,
    varint_bytes,
    varlong_bytes,
    write_array_length,
    write_bytes,
    write_string,
    write_uuid,
    zigzag32,
    zigzag64,
)
from aiokprod.protocol.schema import (
    ArrayOf,
    Int32,
    Int64,
    NullableString,
    String,
    Struct,
    decode_struct,
    encode_struct,
    kfield,
)

from ._thirdparty import kafka_python_encode_varint

SETTINGS = settings(max_examples=200, deadline=None)


def oracle_varlong(n: int) -> bytes:
    """kafka-python's zigzag varint writer, an encoder nobody here wrote."""
    out = bytearray()
    kafka_python_encode_varint(n, out.append)
    return bytes(out)


# --- varints --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16383, "ff7f"),
        (16384, "808001"),
        (UINT32_MAX, "ffffffff0f"),
    ],
)
def test_unsigned_varint_golden(value: int, expected: str) -> None:
    assert encode_unsigned_varint(value).hex() == expected
    reader = Reader(bytes.fromhex(expected))
    assert reader.read_unsigned_varint() == value
    assert reader.remaining == 0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (-2, "03"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (150, "ac02"),
        (INT32_MAX, "feffffff0f"),
        (INT32_MIN, "ffffffff0f"),
    ],
)
def test_zigzag_varint_golden(value: int, expected: str) -> None:
    assert encode_varint(value).hex() == expected
    assert varint_bytes(value).hex() == expected
    assert Reader(bytes.fromhex(expected)).read_varint() == value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (-1, "01"),
        (INT32_MAX + 1, "8080808010"),
        (INT64_MAX, "feffffffffffffffff01"),
        (INT64_MIN, "ffffffffffffffffff01"),
    ],
)
def test_zigzag_varlong_golden(value: int, expected: str) -> None:
    assert encode_varlong(value).hex() == expected
    assert Reader(bytes.fromhex(expected)).read_varlong() == value


def test_zigzag_mapping() -> None:
    assert [zigzag32(n) for n in (0, -1, 1, -2, 2)] == [0, 1, 2, 3, 4]
    assert zigzag32(INT32_MIN) == UINT32_MAX
    assert zigzag32(INT32_MAX) == UINT32_MAX - 1
    assert zigzag64(INT64_MIN) == 2**64 - 1
    assert zigzag64(INT64_MAX) == 2**64 - 2
    for n in (0, -1, 1, INT32_MIN, INT32_MAX):
        assert unzigzag(zigzag32(n)) == n
    for n in (INT64_MIN, INT64_MAX, INT32_MIN - 1):
        assert unzigzag(zigzag64(n)) == n


@SETTINGS
@given(st.integers(0, UINT32_MAX))
def test_unsigned_varint_round_trip(n: int) -> None:
    data = encode_unsigned_varint(n)
    assert 1 <= len(data) <= 5
    reader = Reader(data)
    assert reader.read_unsigned_varint() == n
    assert reader.remaining == 0


@SETTINGS
@given(st.integers(0, 2**64 - 1))
def test_unsigned_varint_64_round_trip(n: int) -> None:
    data = encode_unsigned_varint(n)
    assert len(data) <= 10
    assert Reader(data).read_unsigned_varint(10) == n


@SETTINGS
@given(
    st.integers(INT32_MIN, INT32_MAX)
    | st.sampled_from([INT32_MIN, INT32_MIN + 1, INT32_MAX, INT32_MAX - 1, -1, 0, 1])
)
def test_varint_round_trip_and_oracle(n: int) -> None:
    data = encode_varint(n)
    assert data == varint_bytes(n) == oracle_varlong(n)
    assert len(data) <= 5
    reader = Reader(data)
    assert reader.read_varint() == n
    assert reader.remaining == 0


@SETTINGS
@given(
    st.integers(INT64_MIN, INT64_MAX)
    | st.sampled_from([INT64_MIN, INT64_MIN + 1, INT64_MAX, INT32_MIN - 1, INT32_MAX + 1])
)
def test_varlong_round_trip_and_oracle(n: int) -> None:
    data = encode_varlong(n)
    assert data == varlong_bytes(n) == oracle_varlong(n)
    assert len(data) <= 10
    reader = Reader(data)
    assert reader.read_varlong() == n
    assert reader.remaining == 0


def test_varint_cache_matches_encoder_everywhere() -> None:
    for n in range(-1, VARINT_CACHE_SIZE + 64):
        assert varint_bytes(n) == encode_varint(n), n
        assert varlong_bytes(n) == encode_varlong(n), n


@pytest.mark.parametrize("value", [INT32_MAX + 1, INT32_MIN - 1, 2**40])
def test_varint_out_of_range(value: int) -> None:
    with pytest.raises(ValueError, match="int32"):
        encode_varint(value)
    with pytest.raises(ValueError, match="int32"):
        varint_bytes(value)


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1])
def test_varlong_out_of_range(value: int) -> None:
    with pytest.raises(ValueError, match="int64"):
        encode_varlong(value)


def test_unsigned_varint_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        encode_unsigned_varint(-1)


@pytest.mark.parametrize(
    ("data", "max_bytes"),
    [
        ("80", 5),  # truncated
        ("", 5),
        ("ffffffff1f", 5),  # 5 bytes but more than 32 bits
        ("8080808080", 5),  # sixth byte needed
        ("8080808080808080808001", 10),  # 11 bytes
    ],
)
def test_unsigned_varint_rejects(data: str, max_bytes: int) -> None:
    with pytest.raises(ProtocolError):
        Reader(bytes.fromhex(data)).read_unsigned_varint(max_bytes)


def test_varlong_rejects_more_than_64_bits() -> None:
    with pytest.raises(ProtocolError):
        Reader(bytes.fromhex("ffffffffffffffffff7f")).read_varlong()


# --- fixed-width types (through the schema field types, which carry the range checks) --------

FIXED = [
    (schema.Int8, ">b", -(2**7), 2**7 - 1),
    (schema.Int16, ">h", -(2**15), 2**15 - 1),
    (schema.UInt16, ">H", 0, 2**16 - 1),
    (schema.Int32, ">i", -(2**31), 2**31 - 1),
    (schema.UInt32, ">I", 0, 2**32 - 1),
    (schema.Int64, ">q", -(2**63), 2**63 - 1),
]

READERS = {
    "INT8": Reader.read_int8,
    "INT16": Reader.read_int16,
    "UINT16": Reader.read_uint16,
    "INT32": Reader.read_int32,
    "UINT32": Reader.read_uint32,
    "INT64": Reader.read_int64,
}


def encode_value(ftype: schema.FieldType, value: Any, flexible: bool = False) -> bytes:
    out = bytearray()
    ftype.encoder(0, flexible)(out, value)
    return bytes(out)


def decode_value(ftype: schema.FieldType, data: bytes, flexible: bool = False) -> Any:
    reader = Reader(data)
    value = ftype.decoder(0, flexible)(reader)
    reader.expect_end()
    return value


@pytest.mark.parametrize(("ftype", "fmt", "lo", "hi"), FIXED, ids=lambda x: getattr(x, "name", x))
@SETTINGS
@given(data=st.data())
def test_fixed_round_trip(
    ftype: schema.FieldType, fmt: str, lo: int, hi: int, data: st.DataObject
) -> None:
    value = data.draw(st.integers(lo, hi) | st.sampled_from([lo, hi, 0]))
    encoded = encode_value(ftype, value)
    assert encoded == struct.pack(fmt, value)  # big-endian, two's complement
    assert len(encoded) == ftype.min_size
    assert decode_value(ftype, encoded) == value
    assert READERS[ftype.name](Reader(encoded)) == value


@pytest.mark.parametrize(("ftype", "fmt", "lo", "hi"), FIXED, ids=lambda x: getattr(x, "name", x))
def test_fixed_out_of_range(ftype: schema.FieldType, fmt: str, lo: int, hi: int) -> None:
    for bad in (lo - 1, hi + 1):
        with pytest.raises(ValueError, match="does not fit"):
            encode_value(ftype, bad)


def test_fixed_golden() -> None:
    assert encode_value(schema.Int32, 1).hex() == "00000001"
    assert encode_value(schema.Int16, -2).hex() == "fffe"
    assert encode_value(schema.Int64, -1).hex() == "ff" * 8
    assert encode_value(schema.UInt16, 0xABCD).hex() == "abcd"
    assert encode_value(schema.Float64, 1.0).hex() == "3ff0000000000000"


@SETTINGS
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_float64_round_trip(value: float) -> None:
    encoded = encode_value(schema.Float64, value)
    assert len(encoded) == 8
    decoded = decode_value(schema.Float64, encoded)
    if math.isnan(value):
        assert math.isnan(decoded)
    else:
        assert decoded == value
    assert Reader(encoded).read_float64() == decoded or math.isnan(decoded)


@given(st.booleans())
def test_bool_round_trip(value: bool) -> None:
    encoded = encode_value(schema.Bool, value)
    assert encoded == (b"\x01" if value else b"\x00")
    assert decode_value(schema.Bool, encoded) is value


def test_bool_reader_any_nonzero_is_true() -> None:
    assert Reader(b"\x02").read_bool() is True
    assert Reader(b"\x00").read_bool() is False


# --- strings and bytes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "compact", "expected"),
    [
        ("a", True, "0261"),
        ("a", False, "000161"),
        ("", True, "01"),
        ("", False, "0000"),
        (None, True, "00"),
        (None, False, "ffff"),
        ("é", True, "03c3a9"),  # the length counts UTF-8 bytes
        ("é", False, "0002c3a9"),
    ],
)
def test_string_golden(value: str | None, compact: bool, expected: str) -> None:
    out = bytearray()
    write_string(out, value, compact=compact, nullable=True)
    assert out.hex() == expected
    reader = Reader(bytes(out))
    assert reader.read_string(compact=compact, nullable=True) == value
    assert reader.remaining == 0


@pytest.mark.parametrize("compact", [True, False])
@pytest.mark.parametrize("nullable", [True, False])
@SETTINGS
@given(data=st.data())
def test_string_round_trip(compact: bool, nullable: bool, data: st.DataObject) -> None:
    text = st.text(max_size=300)
    value = data.draw(st.none() | text if nullable else text)
    out = bytearray()
    write_string(out, value, compact=compact, nullable=nullable)
    reader = Reader(bytes(out))
    assert reader.read_string(compact=compact, nullable=nullable) == value
    assert reader.remaining == 0


def test_string_non_nullable_none() -> None:
    with pytest.raises(ValueError, match="non-nullable"):
        write_string(bytearray(), None, compact=True, nullable=False)
    for data, compact in ((b"\x00", True), (b"\xff\xff", False)):
        with pytest.raises(ProtocolError, match="null string"):
            Reader(data).read_string(compact=compact, nullable=False)


def test_classic_string_length_limit() -> None:
    out = bytearray()
    write_string(out, "x" * 0x7FFF, compact=False, nullable=False)
    assert out[:2] == b"\x7f\xff"
    with pytest.raises(ValueError, match="int16"):
        write_string(bytearray(), "x" * 0x8000, compact=False, nullable=False)
    # two-byte characters: 0x4000 of them are 0x8000 bytes
    with pytest.raises(ValueError, match="int16"):
        write_string(bytearray(), "é" * 0x4000, compact=False, nullable=False)


@pytest.mark.parametrize(
    ("data", "compact"),
    [
        (b"\x03\xc3", True),  # length past the end
        (b"\x00\x05ab", False),
        (b"\xff\xfe", False),  # -2
        (b"\x02\xff", True),  # not UTF-8
        (b"\x00\x02\xc3\x28", False),
    ],
)
def test_string_reader_rejects(data: bytes, compact: bool) -> None:
    with pytest.raises(ProtocolError):
        Reader(data).read_string(compact=compact, nullable=True)


@pytest.mark.parametrize(
    ("value", "compact", "expected"),
    [
        (b"", True, "01"),
        (b"", False, "00000000"),
        (b"\x01", True, "0201"),
        (b"\x01", False, "0000000101"),
        (None, True, "00"),
        (None, False, "ffffffff"),
    ],
)
def test_bytes_golden(value: bytes | None, compact: bool, expected: str) -> None:
    out = bytearray()
    write_bytes(out, value, compact=compact, nullable=True)
    assert out.hex() == expected
    assert Reader(bytes(out)).read_bytes(compact=compact, nullable=True) == value


@pytest.mark.parametrize("compact", [True, False])
@pytest.mark.parametrize("nullable", [True, False])
@SETTINGS
@given(data=st.data())
def test_bytes_round_trip(compact: bool, nullable: bool, data: st.DataObject) -> None:
    blob = st.binary(max_size=300)
    value = data.draw(st.none() | blob if nullable else blob)
    out = bytearray()
    write_bytes(out, value, compact=compact, nullable=nullable)
    reader = Reader(bytes(out))
    assert reader.read_bytes(compact=compact, nullable=nullable) == value
    assert reader.remaining == 0


def test_bytes_accepts_buffers_and_rejects_none() -> None:
    out = bytearray()
    write_bytes(out, memoryview(b"xyz"), compact=True, nullable=False)
    write_bytes(out, bytearray(b"q"), compact=False, nullable=False)
    assert out.hex() == "04" + b"xyz".hex() + "00000001" + b"q".hex()
    with pytest.raises(ValueError, match="non-nullable"):
        write_bytes(bytearray(), None, compact=False, nullable=False)
    with pytest.raises(ProtocolError, match="null bytes"):
        Reader(b"\xff\xff\xff\xff").read_bytes(compact=False, nullable=False)


# --- arrays ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "compact", "expected"),
    [(None, True, "00"), (None, False, "ffffffff"), (0, True, "01"), (3, False, "00000003")],
)
def test_array_length_golden(length: int | None, compact: bool, expected: str) -> None:
    out = bytearray()
    write_array_length(out, length, compact=compact)
    assert out.hex() == expected
    # the reader bounds the count by the bytes left, so give it room
    reader = Reader(bytes(out) + b"\x00" * 8)
    assert reader.read_array_length(compact=compact) == length


def test_array_length_bounded_by_remaining_bytes() -> None:
    with pytest.raises(ProtocolError, match="cannot fit"):
        Reader(bytes.fromhex("7fffffff") + b"\x00" * 10).read_array_length(
            compact=False, min_item_size=4
        )
    with pytest.raises(ProtocolError, match="negative"):
        Reader(bytes.fromhex("fffffffe")).read_array_length(compact=False)


@pytest.mark.parametrize("flexible", [True, False])
@pytest.mark.parametrize("nullable", [True, False])
@SETTINGS
@given(data=st.data())
def test_array_round_trip(flexible: bool, nullable: bool, data: st.DataObject) -> None:
    ftype = ArrayOf(ArrayOf(String), nullable=nullable)
    items = st.lists(st.lists(st.text(max_size=5), max_size=4), max_size=4)
    value = data.draw(st.none() | items if nullable else items)
    assert decode_value(ftype, encode_value(ftype, value, flexible), flexible) == value


def test_array_golden_and_null_rules() -> None:
    ints = ArrayOf(Int32)
    assert encode_value(ints, [1], flexible=True).hex() == "0200000001"
    assert encode_value(ints, [1, 2], flexible=False).hex() == "000000020000000100000002"
    assert encode_value(ArrayOf(Int32, nullable=True), None, flexible=True).hex() == "00"
    assert encode_value(ArrayOf(Int32, nullable=True), None, flexible=False).hex() == "ffffffff"
    with pytest.raises(ValueError, match="non-nullable"):
        encode_value(ints, None)
    with pytest.raises(ProtocolError, match="null array"):
        decode_value(ints, b"\x00", flexible=True)


# --- UUID -----------------------------------------------------------------------------------


def test_uuid_golden() -> None:
    value = uuid.UUID(int=(1 << 64) | 2)  # most significant half 1, least significant 2
    out = bytearray()
    write_uuid(out, value)
    assert out.hex() == "0000000000000001" + "0000000000000002"
    assert Reader(bytes(out)).read_uuid() == value


@SETTINGS
@given(st.uuids() | st.just(uuid.UUID(int=0)) | st.just(uuid.UUID(int=1)))
def test_uuid_round_trip(value: uuid.UUID) -> None:
    encoded = encode_value(schema.Uuid, value)
    assert len(encoded) == 16
    assert decode_value(schema.Uuid, encoded) == value


# --- reader bookkeeping ---------------------------------------------------------------------


def test_reader_bounds_and_views() -> None:
    reader = Reader(bytearray(b"\x00\x01abc"), "thing")
    assert reader.read_int16() == 1
    assert reader.position == 2
    assert reader.remaining == 3
    view = reader.read_view(2)
    assert bytes(view) == b"ab"
    with pytest.raises(ProtocolError, match="thing"):
        reader.read_int32()
    with pytest.raises(ProtocolError, match="trailing"):
        reader.expect_end()
    reader.skip(1)
    reader.expect_end()
    with pytest.raises(ProtocolError):
        Reader(b"abc").skip(-1)
    assert Reader(memoryview(b"\x00\x00\x00\x07")).read_uint32() == 7


# --- tagged fields --------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class Tagged(Struct):
    a: int = kfield(Int32)
    t0: int = kfield(Int64, tag=0, default=-1)
    t1: str | None = kfield(NullableString, tag=1)
    t5: list[int] = kfield(ArrayOf(Int32), tag=5)


def encode_tagged(value: Tagged, flexible: bool = True) -> bytes:
    out = bytearray()
    encode_struct(value, 0, flexible, out)
    return bytes(out)


def decode_tagged(data: bytes, flexible: bool = True) -> Tagged:
    reader = Reader(data)
    value = decode_struct(Tagged, reader, 0, flexible)
    reader.expect_end()
    return value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Tagged(a=1), "0000000100"),
        (Tagged(a=1, t0=0), "000000010100080000000000000000"),
        (Tagged(a=1, t1="x"), "000000010101020278"),
        (Tagged(a=1, t0=7, t5=[9]), "00000001020008000000000000000705050200000009"),
    ],
)
def test_tagged_golden(value: Tagged, expected: str) -> None:
    assert encode_tagged(value).hex() == expected
    assert decode_tagged(bytes.fromhex(expected)) == value


@SETTINGS
@given(
    st.builds(
        Tagged,
        a=st.integers(INT32_MIN, INT32_MAX),
        t0=st.integers(INT64_MIN, INT64_MAX),
        t1=st.none() | st.text(max_size=10),
        t5=st.lists(st.integers(INT32_MIN, INT32_MAX), max_size=4),
    )
)
def test_tagged_round_trip(value: Tagged) -> None:
    assert decode_tagged(encode_tagged(value)) == value


def test_tagged_fields_absent_in_non_flexible_versions() -> None:
    value = Tagged(a=5, t0=1, t1="x", t5=[1])
    assert encode_tagged(value, flexible=False).hex() == "00000005"
    assert decode_tagged(bytes.fromhex("00000005"), flexible=False) == Tagged(a=5)


def test_unknown_tags_are_skipped() -> None:
    # tag 1 = "x", unknown tag 3 with 3 bytes, tag 5 = [9]
    data = bytes.fromhex("000000010301020278030361626305050200000009")
    assert decode_tagged(data) == Tagged(a=1, t1="x", t5=[9])


@pytest.mark.parametrize(
    "data",
    [
        "00000001020102027800080000000000000000",  # out of order
        "00000001020102027801020279",  # repeated
        "000000010101030278ff",  # payload longer than the field
        "000000010100090000000000000000",  # payload past the end
        "000000010500",  # more tagged fields than bytes
    ],
)
def test_bad_tag_buffers(data: str) -> None:
    with pytest.raises(ProtocolError):
        decode_tagged(bytes.fromhex(data))


def test_encode_error_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"Tagged\.a"):
        encode_tagged(Tagged(a=2**31))
    with pytest.raises(ValueError, match=r"Tagged\.a"):
        encode_tagged(Tagged(a="nope"))  # type: ignore[arg-type]
