"""The sink's input columns: Spark's Kafka sink rules, checked on the driver."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiokprod.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

__all__ = ["COLUMNS", "check_schema"]

#: The sink's columns, in the order the executors receive them.
COLUMNS = ("value", "key", "topic", "partition", "headers")


def check_schema(schema: StructType, topic: str | None) -> tuple[str, ...]:
    """The sink columns present in ``schema``, checked against Spark's Kafka sink rules.

    ``value`` is required (string or binary); ``key`` string or binary; ``topic`` string
    (required unless ``topic`` is given, which overrides it); ``partition`` int; ``headers``
    ``array<struct<key: string, value: binary>>``. Other columns are ignored.

    Raises:
        ConfigError: naming the column, the type it must have and the type it has.
    """
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

    fields: dict[str, DataType] = {f.name.lower(): f.dataType for f in schema.fields}

    def check(name: str, ok: bool, expected: str) -> None:
        if not ok:
            got = fields[name].simpleString()
            raise ConfigError(f"column {name!r} must be {expected}, got {got}")

    if "value" not in fields:
        raise ConfigError(
            "the DataFrame needs a 'value' column (string or binary); found: " + ", ".join(fields)
        )
    for name in ("value", "key"):
        if name in fields:
            check(name, isinstance(fields[name], StringType | BinaryType), "string or binary")
    if "topic" in fields:
        check("topic", isinstance(fields["topic"], StringType), "string")
    elif topic is None:
        raise ConfigError(
            "the DataFrame has no 'topic' column: set the topic option (or pass topic=)"
        )
    if topic is not None and (not isinstance(topic, str) or not topic):
        raise ConfigError(f"topic must be a non-empty str, got {topic!r}")
    if "partition" in fields:
        check("partition", isinstance(fields["partition"], IntegerType), "int")
    if "headers" in fields:
        headers = fields["headers"]
        element = headers.elementType if isinstance(headers, ArrayType) else None
        ok = (
            isinstance(element, StructType)
            and [f.name for f in element.fields] == ["key", "value"]
            and isinstance(element.fields[0].dataType, StringType)
            and isinstance(element.fields[1].dataType, BinaryType | StringType)
        )
        check("headers", ok, "array<struct<key:string,value:binary>>")
    return tuple(name for name in COLUMNS if name in fields and not (name == "topic" and topic))
