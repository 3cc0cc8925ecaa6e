"""Turning keys, values and headers into bytes, with typed errors for what cannot be.

Without a configured serializer, keys and values may be ``bytes``, ``bytearray``,
``memoryview`` or ``str`` (encoded as UTF-8), or None; anything else is a
:class:`~aiokprod.errors.SerializationError` naming the type, raised in ``send()``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from aiokprod.errors import SerializationError
from aiokprod.protocol.records import encode_headers
from aiokprod.types import SerializationContext

#: Any serializer callable (its shape is checked where it is called).
Serializer = Callable[..., Any]


def to_bytes(obj: object, what: str) -> bytes | None:
    """The default serializer: bytes-like as is, str as UTF-8, None as null."""
    if obj is None:
        return None
    if type(obj) is bytes:
        return obj
    if isinstance(obj, str):
        return obj.encode("utf-8")
    if isinstance(obj, bytes | bytearray | memoryview):
        return bytes(obj)
    raise SerializationError(
        f"{what} must be bytes, bytearray, memoryview, str or None, not {type(obj).__name__}; "
        f"set {what}_serializer to send other types"
    )


def apply_serializer(serializer: Serializer, obj: object, what: str) -> bytes | None:
    """Run a user serializer and check that it returned bytes or None."""
    try:
        result = serializer(obj)
    except SerializationError:
        raise
    except Exception as exc:
        raise _wrapped(exc, what) from exc
    return _checked(result, what)


def serialize_key(serializer: Serializer | None, key: object) -> bytes | None:
    """A record key as bytes: through ``key_serializer`` if one is set, else the default."""
    if serializer is not None:
        return apply_serializer(serializer, key, "key")
    if key is None or type(key) is bytes:
        return key
    return to_bytes(key, "key")


def serialize_value(serializer: Serializer | None, value: object) -> bytes | None:
    """A record value as bytes: through ``value_serializer`` if one is set, else the default."""
    if serializer is not None:
        return apply_serializer(serializer, value, "value")
    if value is None or type(value) is bytes:
        return value
    return to_bytes(value, "value")


def is_plain_serializer(serializer: Serializer | None) -> bool:
    """Whether ``serializer`` is a synchronous one-argument function (or None).

    Those are called on the fast path. A coroutine function, or one that takes a second
    argument (a :class:`~aiokprod.types.SerializationContext`, as confluent-kafka's Schema
    Registry serializers do), goes through :func:`serialize_special` instead; deciding this
    once, when the producer is built, costs the plain case nothing per record.
    """
    if serializer is None:
        return True
    return not (_is_async(serializer) or _takes_context(serializer))


async def serialize_special(
    serializer: Serializer,
    obj: object,
    field: str,
    topic: str,
    headers: Sequence[tuple[str, bytes | None]] | None,
) -> bytes | None:
    """Call a serializer that wants a context and/or is a coroutine function."""
    try:
        if _takes_context(serializer):
            result = serializer(obj, SerializationContext(topic, field, headers))
        else:
            result = serializer(obj)
        if inspect.isawaitable(result):
            result = await result
    except SerializationError:
        raise
    except Exception as exc:
        raise _wrapped(exc, field) from exc
    return _checked(result, field)


def _is_async(fn: Callable[..., Any]) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def _takes_context(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes a second positional argument meant for the context.

    That is one without a default (``f(obj, ctx)``), or one named ``ctx`` or ``context``
    with a default (confluent-kafka's ``__call__(obj, ctx=None)``). An optional second
    argument by any other name (``str.encode``'s ``encoding``) is left alone.
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # no signature (some builtins): called plainly
        return False
    positional = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) < 2:
        return False
    second = positional[1]
    return second.default is inspect.Parameter.empty or second.name in ("ctx", "context")


def _wrapped(exc: Exception, field: str) -> SerializationError:
    """The error a failing user serializer raises, with the original as its cause.

    The cause is set here as well as by ``raise ... from``: the compiled build
    (docs/compiled.md) does not set it from the ``from`` clause.
    """
    error = SerializationError(f"{field}_serializer failed: {exc!r}")
    error.__cause__ = exc
    return error


def _checked(result: object, field: str) -> bytes | None:
    if result is None or type(result) is bytes:
        return result
    if isinstance(result, bytearray | memoryview):
        return bytes(result)
    raise SerializationError(
        f"{field}_serializer returned {type(result).__name__}; it must return bytes or None"
    )


def serialize_headers(headers: object) -> bytes | None:
    """Validate headers (``(str, bytes | str | None)`` pairs) and encode them for a record."""
    if not headers:
        return None
    if isinstance(headers, str | bytes) or not isinstance(headers, Sequence):
        raise SerializationError("headers must be a list of (str, bytes) pairs")
    pairs: list[tuple[str, bytes | None]] = []
    for item in headers:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise SerializationError(f"header {item!r} is not a (key, value) pair")
        key, value = item
        if not isinstance(key, str):
            raise SerializationError(f"header key {key!r} must be a str")
        if value is not None and not isinstance(value, bytes):
            if isinstance(value, str):
                value = value.encode("utf-8")
            elif isinstance(value, bytearray | memoryview):
                value = bytes(value)
            else:
                raise SerializationError(
                    f"header {key!r} value must be bytes, str or None, not {type(value).__name__}"
                )
        pairs.append((key, value))
    return encode_headers(pairs)
