"""Values that options hold: :class:`Secret` and the shapes of the callable options."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiokprod.types import SerializationContext

#: A key or value serializer: ``f(obj)`` or, to be told the topic and headers as Schema
#: Registry serializers need, ``f(obj, ctx)``; either may be a coroutine function.
Serializer = (
    Callable[[Any], bytes | None]
    | Callable[[Any], Awaitable[bytes | None]]
    | Callable[[Any, SerializationContext], bytes | None]
    | Callable[[Any, SerializationContext], Awaitable[bytes | None]]
)
#: A custom partitioner: (topic, serialized key, number of partitions, available partitions)
#: -> partition.
PartitionerFunction = Callable[[str, bytes | None, int, Sequence[int]], int]

#: Returns an OAuth 2 bearer token (a JWT, usually) for OAUTHBEARER; awaited per connection.
TokenProvider = Callable[[], Awaitable[str]]


class Secret:
    """A credential whose ``repr``/``str`` is ``***``, so it never shows in logs or errors.

    Options that hold secrets (``sasl_plain_password``, ``ssl_password``) accept a plain
    ``str`` or a ``Secret``; the config always stores a ``Secret``. :meth:`reveal` is called
    only where the value goes on the wire or into OpenSSL.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret value itself."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __format__(self, spec: str) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self) -> Any:
        # Pickling would write the value out in clear; configs are not meant to travel.
        raise TypeError("a Secret cannot be pickled")

    def __copy__(self) -> Secret:
        return self  # immutable

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self
