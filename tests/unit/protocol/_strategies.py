"""Hypothesis strategies derived from the declared wire structs (no per-message strategies).

``struct_strategy(cls, version, flexible)`` walks the dataclass fields of a declared
:class:`~aiokprod.protocol.schema.Struct` and their ``FieldSpec`` (``field.metadata["kafka"]``)
and draws values only for fields that travel in that version: fields outside their version
range, and tagged fields in a non-flexible version, keep their dataclass defaults (which is
what the decoder gives back for them).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

from aiokprod.protocol import schema
from aiokprod.protocol.schema import FieldSpec, FieldType, Struct

MAX_LIST = 3
MAX_TEXT = 12
MAX_BYTES = 24


def field_specs(cls: type[Struct]) -> list[tuple[dataclasses.Field[Any], FieldSpec]]:
    """Every dataclass field of ``cls`` with its wire spec."""
    result = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        spec = f.metadata["kafka"]
        assert isinstance(spec, FieldSpec)
        result.append((f, spec))
    return result


def travels(spec: FieldSpec, version: int, flexible: bool) -> bool:
    """Whether a field with ``spec`` is on the wire at ``version``."""
    if not spec.present_in(version):
        return False
    return spec.tag is None or flexible


def field_default(f: dataclasses.Field[Any]) -> Any:
    """The dataclass default of a field (calling its factory)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise AssertionError(f"{f.name} has no default")


def type_strategy(
    ftype: FieldType, version: int, flexible: bool, *, canonical: bool = False
) -> st.SearchStrategy[Any]:
    """Values of one wire type (``canonical``: see :func:`struct_strategy`)."""
    if isinstance(ftype, schema.ArrayOf):
        items = st.lists(
            type_strategy(ftype.item, version, flexible, canonical=canonical), max_size=MAX_LIST
        )
        return st.none() | items if ftype.nullable else items
    if isinstance(ftype, schema.StructType):
        return struct_strategy(ftype.cls, version, flexible, canonical=canonical)
    if ftype is schema.Bool:
        return st.booleans()
    if ftype is schema.Uuid:
        return st.uuids() | st.just(schema.ZERO_UUID)
    if ftype is schema.Float64:
        return st.floats(allow_nan=False)
    if isinstance(ftype, schema._Fixed):  # the integer types
        return st.integers(int(ftype._lo), int(ftype._hi))
    if isinstance(ftype, schema._String):
        text = st.text(max_size=MAX_TEXT)
        return st.none() | text if ftype.nullable else text
    if isinstance(ftype, schema._Bytes):
        data = st.binary(max_size=MAX_BYTES)
        return st.none() | data if ftype.nullable else data
    raise AssertionError(f"no strategy for wire type {ftype.name}")


def _differs_from(default: Any) -> Any:
    def check(value: Any) -> bool:
        return bool(value != default)

    return check


@st.composite
def _build(draw: st.DrawFn, cls: type[Struct], kwargs: dict[str, st.SearchStrategy[Any]]) -> Any:
    return cls(**{name: draw(strategy) for name, strategy in kwargs.items()})


def struct_strategy(
    cls: type[Struct], version: int, flexible: bool, *, canonical: bool = False
) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` whose every on-the-wire field at ``version`` is drawn.

    Args:
        canonical: draw a tagged struct value either absent (None) or different from its
            default, as the Java generator writes it (it omits a tagged struct equal to its
            default; ours writes it, which decodes the same). Used for byte-level comparison
            with an independent encoder.
    """
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f, spec in field_specs(cls):
        if not travels(spec, version, flexible):
            continue
        strategy = type_strategy(spec.type, version, flexible, canonical=canonical)
        if spec.tag is not None and isinstance(spec.type, schema.StructType):
            if canonical:
                strategy = strategy.filter(_differs_from(spec.type.cls()))
            strategy = st.none() | strategy
        kwargs[f.name] = strategy
    return _build(cls, kwargs)
