"""Kafka's primitive wire types: fixed-width integers, varints, strings, bytes, UUIDs.

Writers append to a ``bytearray``; decoding goes through :class:`Reader`, which checks every
length against the bytes actually present, so truncated or hostile input raises
:class:`~aiokprod.errors.ProtocolError` and never ``IndexError``, ``struct.error`` or a huge
allocation driven by a length prefix.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Final

from aiokprod.errors import ProtocolError

_INT8: Final = struct.Struct(">b")
_INT16: Final = struct.Struct(">h")
_UINT16: Final = struct.Struct(">H")
_INT32: Final = struct.Struct(">i")
_UINT32: Final = struct.Struct(">I")
_INT64: Final = struct.Struct(">q")
_FLOAT64: Final = struct.Struct(">d")

INT8: Final = _INT8
INT16: Final = _INT16
UINT16: Final = _UINT16
INT32: Final = _INT32
UINT32: Final = _UINT32
INT64: Final = _INT64
FLOAT64: Final = _FLOAT64

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
UINT32_MAX: Final = 2**32 - 1


# --- varints --------------------------------------------------------------------------------


def zigzag32(n: int) -> int:
    """Map a signed 32-bit int onto an unsigned one so small magnitudes stay small."""
    return ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF


def zigzag64(n: int) -> int:
    """Map a signed 64-bit int onto an unsigned one so small magnitudes stay small."""
    return ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF


def unzigzag(n: int) -> int:
    """Undo :func:`zigzag32` / :func:`zigzag64`."""
    return (n >> 1) ^ -(n & 1)


#: ``bytes((n,))`` for every n below 128: the one-byte varints (lengths, counts), made once.
_ONE_BYTE: Final = tuple(bytes((n,)) for n in range(0x80))


def encode_unsigned_varint(n: int) -> bytes:
    """LEB128: seven bits a byte, low group first, high bit set while more bytes follow."""
    if n < 0:
        raise ValueError(f"unsigned varint cannot hold a negative number: {n}")
    if n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_varint(n: int) -> bytes:
    """A signed 32-bit zigzag varint (the record format's VARINT)."""
    if not INT32_MIN <= n <= INT32_MAX:
        raise ValueError(f"varint out of int32 range: {n}")
    return encode_unsigned_varint(zigzag32(n))


def encode_varlong(n: int) -> bytes:
    """A signed 64-bit zigzag varint (the record format's VARLONG)."""
    if not INT64_MIN <= n <= INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {n}")
    return encode_unsigned_varint(zigzag64(n))


# Most lengths and deltas in a record are small: encoding them is a list lookup.
VARINT_CACHE_SIZE: Final = 1 << 14
_VARINT_CACHE: Final[list[bytes]] = [encode_varint(i) for i in range(VARINT_CACHE_SIZE)]
_VARINT_MINUS_ONE: Final = encode_varint(-1)


def varint_bytes(n: int) -> bytes:
    """:func:`encode_varint`, answered from a table for 0 <= n < 16384 and for -1."""
    if 0 <= n < VARINT_CACHE_SIZE:
        return _VARINT_CACHE[n]
    if n == -1:
        return _VARINT_MINUS_ONE
    return encode_varint(n)


def varlong_bytes(n: int) -> bytes:
    """:func:`encode_varlong`, answered from the varint table when n is small."""
    if 0 <= n < VARINT_CACHE_SIZE:
        return _VARINT_CACHE[n]
    return encode_varlong(n)


def varint_cache() -> list[bytes]:
    """The table behind :func:`varint_bytes` (index n holds the encoding of n)."""
    return _VARINT_CACHE


# --- writers --------------------------------------------------------------------------------


def write_string(out: bytearray, value: str | None, *, compact: bool, nullable: bool) -> None:
    """STRING / NULLABLE_STRING / COMPACT_(NULLABLE_)STRING."""
    if value is None:
        if not nullable:
            raise ValueError("a non-nullable string field got None")
        out += b"\x00" if compact else b"\xff\xff"
        return
    data = value.encode("utf-8")
    if compact:
        out += encode_unsigned_varint(len(data) + 1)
    else:
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
        out += _INT16.pack(len(data))
    out += data


def write_bytes(
    out: bytearray, value: bytes | bytearray | memoryview | None, *, compact: bool, nullable: bool
) -> None:
    """BYTES / NULLABLE_BYTES / COMPACT_(NULLABLE_)BYTES (RECORDS uses the same encoding)."""
    if value is None:
        if not nullable:
            raise ValueError("a non-nullable bytes field got None")
        out += b"\x00" if compact else b"\xff\xff\xff\xff"
        return
    if compact:
        out += encode_unsigned_varint(len(value) + 1)
    else:
        out += _INT32.pack(len(value))
    out += value


def write_array_length(out: bytearray, length: int | None, *, compact: bool) -> None:
    """The count that opens an ARRAY / COMPACT_ARRAY (None encodes a null array)."""
    if length is None:
        out += b"\x00" if compact else b"\xff\xff\xff\xff"
    elif compact:
        out += encode_unsigned_varint(length + 1)
    else:
        out += _INT32.pack(length)


def write_uuid(out: bytearray, value: uuid.UUID) -> None:
    """UUID: 16 bytes, most significant half first (the same order as ``UUID.bytes``)."""
    out += value.bytes


# --- reader ---------------------------------------------------------------------------------


class Reader:
    """A cursor over received bytes; every read is bounds-checked.

    Args:
        data: the bytes to read (kept as a memoryview, never copied as a whole).
        what: a name for error messages ("Produce response v9", "record batch").
    """

    __slots__ = ("_end", "_pos", "_view", "what")

    def __init__(self, data: bytes | bytearray | memoryview, what: str = "message") -> None:
        self._view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
        self._pos = 0
        self._end = len(self._view)
        self.what = what

    @property
    def position(self) -> int:
        """Bytes consumed so far."""
        return self._pos

    @property
    def remaining(self) -> int:
        """Bytes not yet consumed."""
        return self._end - self._pos

    def fail(self, reason: str) -> ProtocolError:
        """A ProtocolError naming what was being read and where."""
        return ProtocolError(f"malformed {self.what} at byte {self._pos}: {reason}")

    def _need(self, n: int) -> int:
        pos = self._pos
        if n < 0 or pos + n > self._end:
            raise self.fail(f"needs {n} more bytes, {self._end - pos} left")
        self._pos = pos + n
        return pos

    def read_int8(self) -> int:
        """INT8."""
        return int(_INT8.unpack_from(self._view, self._need(1))[0])

    def read_bool(self) -> bool:
        """BOOLEAN: one byte, non-zero is true."""
        return self._view[self._need(1)] != 0

    def read_int16(self) -> int:
        """INT16."""
        return int(_INT16.unpack_from(self._view, self._need(2))[0])

    def read_uint16(self) -> int:
        """UINT16."""
        return int(_UINT16.unpack_from(self._view, self._need(2))[0])

    def read_int32(self) -> int:
        """INT32."""
        return int(_INT32.unpack_from(self._view, self._need(4))[0])

    def read_uint32(self) -> int:
        """UINT32."""
        return int(_UINT32.unpack_from(self._view, self._need(4))[0])

    def read_int64(self) -> int:
        """INT64."""
        return int(_INT64.unpack_from(self._view, self._need(8))[0])

    def read_float64(self) -> float:
        """FLOAT64."""
        return float(_FLOAT64.unpack_from(self._view, self._need(8))[0])

    def read_uuid(self) -> uuid.UUID:
        """UUID."""
        pos = self._need(16)
        return uuid.UUID(bytes=bytes(self._view[pos : pos + 16]))

    def read_unsigned_varint(self, max_bytes: int = 5) -> int:
        """LEB128 of at most ``max_bytes`` bytes (5 for 32 bits, 10 for 64 bits)."""
        view = self._view
        pos = self._pos
        end = self._end
        if pos < end:
            first: int = view[pos]
            if first < 0x80:  # one byte: most lengths, counts and empty tagged-field sections
                self._pos = pos + 1
                return first
        result = 0
        shift = 0
        for i in range(max_bytes):
            if pos + i >= end:
                raise self.fail("varint runs past the end of the data")
            b = view[pos + i]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                self._pos = pos + i + 1
                if max_bytes == 5 and result > UINT32_MAX:
                    raise self.fail("varint does not fit 32 bits")
                return result
            shift += 7
        raise self.fail(f"varint longer than {max_bytes} bytes")

    def read_varint(self) -> int:
        """A signed zigzag VARINT (32 bits)."""
        return unzigzag(self.read_unsigned_varint(5))

    def read_varlong(self) -> int:
        """A signed zigzag VARLONG (64 bits)."""
        value = self.read_unsigned_varint(10)
        if value > 0xFFFFFFFFFFFFFFFF:
            raise self.fail("varlong does not fit 64 bits")
        return unzigzag(value)

    def read_raw(self, n: int) -> bytes:
        """Exactly ``n`` bytes, copied."""
        pos = self._need(n)
        return bytes(self._view[pos : pos + n])

    def read_view(self, n: int) -> memoryview:
        """Exactly ``n`` bytes, as a view into the input (no copy)."""
        pos = self._need(n)
        return self._view[pos : pos + n]

    def skip(self, n: int) -> None:
        """Skip ``n`` bytes."""
        self._need(n)

    def read_struct(self, layout: struct.Struct) -> tuple[Any, ...]:
        """Several fixed-size fields at once, as ``layout`` unpacks them.

        One call for a run of fields that a hot decoder reads every time.
        """
        return layout.unpack_from(self._view, self._need(layout.size))

    def _length(self, compact: bool, nullable: bool, kind: str) -> int | None:
        if compact:
            n = self.read_unsigned_varint() - 1
        else:
            n = self.read_int16() if kind == "string" else self.read_int32()
        if n < 0:
            if n != -1:
                raise self.fail(f"negative {kind} length {n}")
            if not nullable:
                raise self.fail(f"null {kind} in a non-nullable field")
            return None
        if n > self._end - self._pos:
            raise self.fail(f"{kind} length {n} exceeds the {self._end - self._pos} bytes left")
        return n

    def read_string(self, *, compact: bool, nullable: bool) -> str | None:
        """STRING family; UTF-8 errors are protocol errors."""
        n = self._length(compact, nullable, "string")
        if n is None:
            return None
        pos = self._need(n)
        try:
            return str(self._view[pos : pos + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"string is not UTF-8 ({exc.reason})") from None

    def read_bytes(self, *, compact: bool, nullable: bool) -> bytes | None:
        """BYTES family (copied)."""
        n = self._length(compact, nullable, "bytes")
        if n is None:
            return None
        return self.read_raw(n)

    def read_array_length(self, *, compact: bool, min_item_size: int = 1) -> int | None:
        """The count that opens an array; None for a null array.

        A count larger than the bytes left could possibly hold (each item takes at least
        ``min_item_size`` bytes) is rejected before anything is allocated.
        """
        n = self.read_unsigned_varint() - 1 if compact else self.read_int32()
        if n < 0:
            if n != -1:
                raise self.fail(f"negative array length {n}")
            return None
        if n * max(min_item_size, 0) > self._end - self._pos:
            raise self.fail(f"array of {n} items cannot fit in {self._end - self._pos} bytes")
        return n

    def expect_end(self) -> None:
        """Raise unless every byte was consumed."""
        if self._pos != self._end:
            raise self.fail(f"{self._end - self._pos} unexpected trailing bytes")
