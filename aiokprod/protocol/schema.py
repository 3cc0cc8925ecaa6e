"""Declarative message definitions and the one codec that drives them.

A message (or a struct inside one) is a keyword-only dataclass whose fields carry their wire
type and the versions they exist in::

    @dataclass(kw_only=True, slots=True)
    class PartitionData(Struct):
        index: int = kfield(Int32)
        records: bytes | None = kfield(NullableRecords)

For each (class, version, flexible) the codec compiles a list of per-field encoders and
decoders once and caches them. Flexible versions (KIP-482) switch strings, bytes and arrays
to their compact forms and add a tagged-field buffer to every struct; fields declared with a
``tag`` travel in that buffer and are written only when they differ from their default.
Unknown tags are skipped, as the protocol requires; tags out of order or repeated are errors.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from aiokprod.errors import ProtocolError
from aiokprod.protocol.primitives import (
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    UINT16,
    UINT32,
    Reader,
    encode_unsigned_varint,
    write_array_length,
    write_bytes,
    write_string,
)

Encoder = Callable[[bytearray, Any], None]
Decoder = Callable[[Reader], Any]

_MISSING: Any = dataclasses.MISSING


# --- field types ----------------------------------------------------------------------------


class FieldType:
    """A wire type. Subclasses build an encoder and a decoder for a given flexibility."""

    name: ClassVar[str] = "?"
    #: The fewest bytes one value takes; bounds array counts read from the wire.
    min_size: int = 1

    def encoder(self, version: int, flexible: bool) -> Encoder:
        """A function appending one value to a bytearray."""
        raise NotImplementedError

    def decoder(self, version: int, flexible: bool) -> Decoder:
        """A function reading one value from a Reader."""
        raise NotImplementedError

    def default(self) -> Any:
        """The value a field of this type has when absent from a version."""
        return None


class _Fixed(FieldType):
    def __init__(self, name: str, packer: Any, default: Any, lo: float, hi: float) -> None:
        self.name = name  # type: ignore[misc]
        self._packer = packer
        self._default = default
        self._lo = lo
        self._hi = hi
        self.min_size = packer.size

    def encoder(self, version: int, flexible: bool) -> Encoder:
        """See :meth:`FieldType.encoder`."""
        pack = self._packer.pack
        lo, hi, name = self._lo, self._hi, self.name

        def encode(out: bytearray, value: Any) -> None:
            # value != value: a NaN, which FLOAT64 carries although no range holds it.
            if not lo <= value <= hi and value == value:
                raise ValueError(f"{value!r} does not fit {name}")
            out += pack(value)

        return encode

    def decoder(self, version: int, flexible: bool) -> Decoder:
        """See :meth:`FieldType.decoder`."""
        unpack_from = self._packer.unpack_from
        size = self._packer.size

        def decode(reader: Reader) -> Any:
            return unpack_from(reader.read_view(size))[0]

        return decode

    def default(self) -> Any:
        """See :meth:`FieldType.default`."""
        return self._default


class _Bool(FieldType):
    name = "BOOL"

    def encoder(self, version: int, flexible: bool) -> Encoder:
        """See :meth:`FieldType.encoder`."""

        def encode(out: bytearray, value: Any) -> None:
            out.append(1 if value else 0)

        return encode

    def decoder(self, version: int, flexible: bool) -> Decoder:
        """See :meth:`FieldType.decoder`."""
        return Reader.read_bool

    def default(self) -> Any:
        """See :meth:`FieldType.default`."""
        return False


class _String(FieldType):
    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable
        self.name = "NULLABLE_STRING" if nullable else "STRING"  # type: ignore[misc]

    def encoder(self, version: int, flexible: bool) -> Encoder:
        """See :meth:`FieldType.encoder`."""
        nullable = self.nullable

        def encode(out: bytearray, value: Any) -> None:
            write_string(out, value, compact=flexible, nullable=nullable)

        return encode

    def decoder(self, version: int, flexible: bool) -> Decoder:
        """See :meth:`FieldType.decoder`."""
        nullable = self.nullable

        def decode(reader: Reader) -> Any:
            return reader.read_string(compact=flexible, nullable=nullable)

        return decode

    def default(self) -> Any:
        """See :meth:`FieldType.default`."""
        return None if self.nullable else ""


class _Bytes(FieldType):
    def __init__(self, nullable: bool, name: str) -> None:
        self.nullable = nullable
        self.name = name  # type: ignore[misc]

    def encoder(self, version: int, flexible: bool) -> Encoder:
        """See :meth:`FieldType.encoder`."""
        nullable = self.nullable

        def encode(out: bytearray, value: Any) -> None:
            write_bytes(out, value, compact=flexible, nullable=nullable)

        return encode

    def decoder(self, version: int, flexible: bool) -> Decoder:
        """See :meth:`FieldType.decoder`."""
        nullable = self.nullable

        def decode(reader: Reader) -> Any:
            return reader.read_bytes(compact=flexible, nullable=nullable)

        return decode

    def default(self) -> Any:
        """See :meth:`FieldType.default`."""
        return None if self.nullable else b""


class _Uuid(FieldType):
    name = "UUID"
    min_size = 16

    def encoder(self, version: int, flexible: bool) -> Encoder:
        """See :meth:`FieldType.encoder`."""

        def encode(out: bytearray, value: Any) -> None:
            out += value.bytes

        return encode

    def decoder(self, version: int, flexible: bool) -> Decoder:
        """See :meth:`FieldType.decoder`."""
        return Reader.read_uuid

    def default(self) -> Any:
        """See :meth:`FieldType.default`."""
        return ZERO_UUID


class ArrayOf(FieldType):
    """ARRAY / COMPACT_ARRAY of a field type or of a :class:`Struct` subclass."""

    def __init__(self, item: FieldType | type[Struct], *, nullable: bool = False) -> None:
        self.item: FieldType = StructType(item) if isinstance(item, type) else item
        self.nullable = nullable
        self.name = f"[]{self.item.name}"  # type: ignore[misc]

    def encoder(self, version: int, flexible: bool) -> Encoder:
        """See :meth:`FieldType.encoder`."""
        encode_item = self.item.encoder(version, flexible)
        nullable = self.nullable

        def encode(out: bytearray, value: Any) -> None:
            if value is None:
                if not nullable:
                    raise ValueError("a non-nullable array field got None")
                write_array_length(out, None, compact=flexible)
                return
            write_array_length(out, len(value), compact=flexible)
            for item in value:
                encode_item(out, item)

        return encode

    def decoder(self, version: int, flexible: bool) -> Decoder:
        """See :meth:`FieldType.decoder`."""
        decode_item = self.item.decoder(version, flexible)
        nullable = self.nullable
        min_size = self.item.min_size

        def decode(reader: Reader) -> Any:
            n = reader.read_array_length(compact=flexible, min_item_size=min_size)
            if n is None:
                if not nullable:
                    raise reader.fail("null array in a non-nullable field")
                return None
            return [decode_item(reader) for _ in range(n)]

        return decode

    def default(self) -> Any:
        """See :meth:`FieldType.default`."""
        return None if self.nullable else []


class StructType(FieldType):
    """A nested struct (an array item, or a single struct such as a tagged field)."""

    def __init__(self, cls: type[Struct]) -> None:
        self.cls = cls
        self.name = cls.__name__  # type: ignore[misc]

    def encoder(self, version: int, flexible: bool) -> Encoder:
        """See :meth:`FieldType.encoder`."""
        return _compiled_encoder(self.cls, version, flexible)

    def decoder(self, version: int, flexible: bool) -> Decoder:
        """See :meth:`FieldType.decoder`."""
        return _compiled_decoder(self.cls, version, flexible)

    def default(self) -> Any:
        """See :meth:`FieldType.default`."""
        return None


Int8 = _Fixed("INT8", INT8, 0, -(2**7), 2**7 - 1)
Int16 = _Fixed("INT16", INT16, 0, -(2**15), 2**15 - 1)
UInt16 = _Fixed("UINT16", UINT16, 0, 0, 2**16 - 1)
Int32 = _Fixed("INT32", INT32, 0, -(2**31), 2**31 - 1)
UInt32 = _Fixed("UINT32", UINT32, 0, 0, 2**32 - 1)
Int64 = _Fixed("INT64", INT64, 0, -(2**63), 2**63 - 1)
Float64 = _Fixed("FLOAT64", FLOAT64, 0.0, float("-inf"), float("inf"))
Bool = _Bool()
String = _String(nullable=False)
NullableString = _String(nullable=True)
Bytes = _Bytes(nullable=False, name="BYTES")
NullableBytes = _Bytes(nullable=True, name="NULLABLE_BYTES")
NullableRecords = _Bytes(nullable=True, name="RECORDS")
Uuid = _Uuid()
ZERO_UUID = uuid.UUID(int=0)


# --- field declarations ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class FieldSpec:
    """Where and how one field travels on the wire."""

    type: FieldType
    min_version: int = 0
    max_version: int | None = None
    tag: int | None = None

    def present_in(self, version: int) -> bool:
        """Whether the field exists in this version of its message."""
        if version < self.min_version:
            return False
        return self.max_version is None or version <= self.max_version


def kfield(
    ftype: FieldType,
    *,
    versions: str = "0+",
    tag: int | None = None,
    default: Any = _MISSING,
) -> Any:
    """Declare a wire field on a :class:`Struct` dataclass.

    Args:
        ftype: the wire type.
        versions: ``"3+"`` (from 3 on) or ``"8-10"`` (8 to 10 inclusive).
        tag: a tag number for a tagged field (flexible versions only).
        default: the value when the field is absent in a version; the type's own default
            (0, "", None, an empty list) when not given.
    """
    if versions.endswith("+"):
        lo, hi = int(versions[:-1]), None
    else:
        a, _, b = versions.partition("-")
        lo, hi = int(a), int(b or a)
    spec = FieldSpec(ftype, lo, hi, tag)
    metadata = {"kafka": spec}
    if default is not _MISSING:
        return dataclasses.field(default=default, metadata=metadata)
    value = ftype.default()
    if isinstance(value, list):
        return dataclasses.field(default_factory=list, metadata=metadata)
    return dataclasses.field(default=value, metadata=metadata)


class Struct:
    """Base class of every declared wire struct (see the module docstring)."""

    __slots__ = ()


S = TypeVar("S", bound=Struct)


def _fields(cls: type[Struct]) -> list[tuple[str, FieldSpec]]:
    cached: list[tuple[str, FieldSpec]] | None = cls.__dict__.get("_kafka_fields")
    if cached is not None:
        return cached
    result = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        spec = f.metadata.get("kafka")
        if spec is None:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with kfield()")
        result.append((f.name, spec))
    # A plain class attribute cache; slotted dataclasses still allow class attributes.
    type.__setattr__(cls, "_kafka_fields", result)
    return result


def _field_default(cls: type[Struct], name: str, spec: FieldSpec) -> Any:
    """The value a field takes when absent: its dataclass default, else its type's."""
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    return spec.type.default()


def _struct_encoder(cls: type[Struct], version: int, flexible: bool) -> Encoder:
    plain: list[tuple[str, Encoder]] = []
    tagged: list[tuple[int, str, Encoder, Any]] = []
    for name, spec in _fields(cls):
        if not spec.present_in(version):
            continue
        if spec.tag is not None:
            if flexible:
                # A tagged field is written only when it differs from the default it
                # decodes to when absent (e.g. FinalizedFeaturesEpoch defaults to -1, not 0).
                default = _field_default(cls, name, spec)
                tagged.append((spec.tag, name, spec.type.encoder(version, True), default))
            continue
        plain.append((name, spec.type.encoder(version, flexible)))
    tagged.sort(key=lambda t: t[0])

    def encode(out: bytearray, value: Any) -> None:
        for name, enc in plain:
            try:
                enc(out, getattr(value, name))
            except (ValueError, TypeError, AttributeError) as exc:
                raise ValueError(f"{cls.__name__}.{name}: {exc}") from exc
        if not flexible:
            return
        present = []
        for tag, name, enc, default in tagged:
            v = getattr(value, name)
            if v is not None and v != default:
                buf = bytearray()
                enc(buf, v)
                present.append((tag, buf))
        out += encode_unsigned_varint(len(present))
        for tag, buf in present:
            out += encode_unsigned_varint(tag)
            out += encode_unsigned_varint(len(buf))
            out += buf

    return encode


def _struct_decoder(cls: type[Struct], version: int, flexible: bool) -> Decoder:
    # Fields absent from this version are left out and take their dataclass defaults.
    plain: list[tuple[str, Decoder]] = []
    tagged: dict[int, tuple[str, Decoder]] = {}
    for name, spec in _fields(cls):
        if not spec.present_in(version) or (spec.tag is not None and not flexible):
            continue
        if spec.tag is not None:
            tagged[spec.tag] = (name, spec.type.decoder(version, True))
        else:
            plain.append((name, spec.type.decoder(version, flexible)))

    def decode(reader: Reader) -> Any:
        values: dict[str, Any] = {}
        for name, dec in plain:
            values[name] = dec(reader)
        if flexible:
            _read_tagged_fields(reader, tagged, values)
        return cls(**values)

    return decode


def _read_tagged_fields(
    reader: Reader, known: dict[int, tuple[str, Decoder]], values: dict[str, Any]
) -> None:
    count = reader.read_unsigned_varint()
    if count > reader.remaining // 2:
        raise reader.fail(f"{count} tagged fields cannot fit in {reader.remaining} bytes")
    last_tag = -1
    for _ in range(count):
        tag = reader.read_unsigned_varint()
        if tag <= last_tag:
            raise reader.fail(f"tagged field {tag} out of order or repeated after {last_tag}")
        last_tag = tag
        size = reader.read_unsigned_varint()
        payload = reader.read_view(size)
        entry = known.get(tag)
        if entry is None:
            continue  # unknown tags are skipped: newer brokers may add them
        name, dec = entry
        sub = Reader(payload, f"{reader.what} tagged field {tag}")
        values[name] = dec(sub)
        sub.expect_end()


# --- top-level codec --------------------------------------------------------------------------


_ENCODERS: dict[tuple[type[Struct], int, bool], Encoder] = {}
_DECODERS: dict[tuple[type[Struct], int, bool], Decoder] = {}


def _compiled_encoder(cls: type[Struct], version: int, flexible: bool) -> Encoder:
    key = (cls, version, flexible)
    enc = _ENCODERS.get(key)
    if enc is None:
        enc = _ENCODERS[key] = _struct_encoder(cls, version, flexible)
    return enc


def _compiled_decoder(cls: type[Struct], version: int, flexible: bool) -> Decoder:
    key = (cls, version, flexible)
    dec = _DECODERS.get(key)
    if dec is None:
        dec = _DECODERS[key] = _struct_decoder(cls, version, flexible)
    return dec


def encode_struct(value: Struct, version: int, flexible: bool, out: bytearray) -> None:
    """Append the wire form of ``value`` (a declared struct) at ``version``.

    Raises:
        ValueError: a field value does not fit its wire type (a bug in the caller).
    """
    _compiled_encoder(type(value), version, flexible)(out, value)


def decode_struct(cls: type[S], reader: Reader, version: int, flexible: bool) -> S:
    """Read one ``cls`` at ``version`` from ``reader``.

    Raises:
        ProtocolError: for any malformed or truncated input.
    """
    dec = _compiled_decoder(cls, version, flexible)
    try:
        result: S = dec(reader)
        return result
    except ProtocolError:
        raise
    except (ValueError, TypeError, OverflowError, MemoryError, RecursionError) as exc:
        raise reader.fail(f"{type(exc).__name__}: {exc}") from None
