"""How one producer option is described, and the checks the option table uses.

An option is declared once, as a field of :class:`~aiokprod.config.table.ProducerConfig`
whose default is an :func:`option` call: the field gives the name and the stored type, the
call the default, the check, the Java name, the doc text, the docs group and whether the
value is a secret. Everything else (validation, the docs page, the CLI's ``-X`` parsing, the
secret and Java-name helpers, the ``ProducerOptions`` TypedDict) is read from that table.

A check takes ``(name, value)`` and returns the value to store, or raises
:class:`~aiokprod.errors.ConfigError` naming the option. A check that returns None for None
makes None mean "not set" (the default applies).
"""

from __future__ import annotations

import builtins
import dataclasses
import difflib
import os
import ssl
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast, dataclass_transform, overload

from aiokprod.config.secret import Secret
from aiokprod.errors import ConfigError
from aiokprod.protocol.compression import codec_for_name
from aiokprod.types import ProducerInterceptor

MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**62  # "no practical limit" for durations and byte counts
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
PARTITIONERS = ("builtin", "murmur3", "round_robin")
_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1, -1: -1, 0: 0, 1: 1}

Check = Callable[[str, Any], Any]
_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True, slots=True)
class Option:
    """One row of the option table.

    Attributes:
        name: the option's name (``linger_ms``), also the ProducerConfig attribute.
        type: the stored type, as annotated on ProducerConfig.
        accepts: the type ``Producer(**options)`` accepts (``ProducerOptions``); often wider
            than ``type`` (``acks="all"``, a ``str`` password) or narrower (``Literal`` names).
        default: the default value, or ``dataclasses.MISSING`` for a required option.
        check: ``(name, value) -> stored value``; raises ConfigError.
        doc: what the option does, one Markdown paragraph (docs/configuration.md).
        group: the section of docs/configuration.md it is listed in.
        java: the Java producer's property names that mean exactly this option (values
            included), so that ``linger.ms=5`` can be read as ``linger_ms=5``.
        java_note: how the docs name the Java side when there is no exact equivalent.
        secret: the value is a credential: never shown (repr, logs, ``describe_options``)
            and sealed on its way to Spark executors.
        shown_default: how the docs show the default, when not the value itself.
    """

    name: str
    type: str
    accepts: str
    default: Any
    check: Check
    doc: str
    group: str
    java: tuple[str, ...]
    java_note: str | None
    secret: bool
    shown_default: str | None

    @property
    def required(self) -> bool:
        """Whether the option has no default."""
        return self.default is dataclasses.MISSING

    @property
    def text_type(self) -> builtins.type | None:
        """The type a text value (``-X name=value``) is read as; None: not from text."""
        parts = {part.strip() for part in self.type.split("|")}
        for kind, names in ((bool, {"bool"}), (int, {"int"}), (str, {"str", "Secret"})):
            if parts & names:
                return kind
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class _Declared:
    """What :func:`option` records; :func:`collect` completes it into an :class:`Option`."""

    check: Check
    doc: str
    group: str
    java: tuple[str, ...]
    java_note: str | None
    accepts: str | None
    secret: bool
    shown_default: str | None


@overload
def option(
    *,
    default: _T,
    check: Check,
    doc: str,
    group: str,
    java: str | tuple[str, ...] = (),
    java_note: str | None = None,
    accepts: str | None = None,
    secret: bool = False,
    shown_default: str | None = None,
) -> _T: ...
@overload
def option(
    *,
    check: Check,
    doc: str,
    group: str,
    java: str | tuple[str, ...] = (),
    java_note: str | None = None,
    accepts: str | None = None,
    secret: bool = False,
    shown_default: str | None = None,
) -> Any: ...
def option(
    *,
    default: Any = dataclasses.MISSING,
    check: Check,
    doc: str,
    group: str,
    java: str | tuple[str, ...] = (),
    java_note: str | None = None,
    accepts: str | None = None,
    secret: bool = False,
    shown_default: str | None = None,
) -> Any:
    """Declare a producer option (a dataclass field specifier; see :class:`Option`)."""
    declared = _Declared(
        check=check,
        doc=doc,
        group=group,
        java=(java,) if isinstance(java, str) else java,
        java_note=java_note,
        accepts=accepts,
        secret=secret,
        shown_default=shown_default,
    )
    return dataclasses.field(default=default, repr=not secret, metadata={"option": declared})


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(option,))
def option_table(cls: type[_T]) -> type[_T]:
    """Make ``cls`` a frozen, keyword-only dataclass of :func:`option` fields."""
    return dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(cls)


def collect(cls: type) -> dict[str, Option]:
    """The table: every field of ``cls`` declared with :func:`option`, in declaration order."""
    table = {}
    for f in dataclasses.fields(cls):
        declared = f.metadata.get("option")
        if not isinstance(declared, _Declared):
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with option()")
        annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        table[f.name] = Option(
            name=f.name,
            type=annotation,
            accepts=declared.accepts or annotation,
            default=f.default,
            check=declared.check,
            doc=declared.doc,
            group=declared.group,
            java=declared.java,
            java_note=declared.java_note,
            secret=declared.secret,
            shown_default=declared.shown_default,
        )
    return table


def closest_option(name: str, table: Mapping[str, Option]) -> str | None:
    """The option a mistyped ``name`` most likely means, or None: what "did you mean" says.

    One rule for every place that names options (``Producer(linger=5)``, the command line's
    ``-X``, option text): a Java property name (``linger.ms``) or our name with dots,
    dashes or capitals means that option; otherwise the closest name by
    :func:`difflib.get_close_matches` (``linger`` and ``lingerms`` mean ``linger_ms``).
    """
    for spec in table.values():
        if name in spec.java:
            return spec.name
    plain = name.strip().lower().replace(".", "_").replace("-", "_")
    if plain in table:
        return plain
    close = difflib.get_close_matches(plain, list(table), n=1)
    return close[0] if close else None


def did_you_mean(name: str, table: Mapping[str, Option]) -> str:
    """`` (did you mean linger_ms?)`` for an unknown ``name``, or "" when nothing is close."""
    close = closest_option(name, table)
    return f" (did you mean {close}?)" if close is not None and close != name else ""


# --- checks ---------------------------------------------------------------------------------


def int_between(lo: int, hi: int) -> Check:
    """An int from ``lo`` to ``hi`` inclusive (not a bool)."""

    def check(name: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be an int, got {value!r}")
        if not lo <= value <= hi:
            raise ConfigError(f"{name} must be between {lo} and {hi}, got {value}")
        return value

    return check


def boolean(name: str, value: object) -> bool:
    """``True`` or ``False`` (not 0/1, not a string)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be a bool, got {value!r}")
    return value


def upper_one_of(choices: tuple[str, ...]) -> Check:
    """One of ``choices``, in any case; stored upper-case."""

    def check(name: str, value: object) -> str:
        if not isinstance(value, str) or value.upper() not in choices:
            raise ConfigError(f"{name} must be one of {choices}, got {value!r}")
        return value.upper()

    return check


def optional_str(name: str, value: object) -> str | None:
    """A str, or None for "not set"."""
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{name} must be a str, got {type(value).__name__}")
    return value


def non_empty_str(name: str, value: object) -> str | None:
    """A non-empty str, or None for "not set"."""
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{name} must be a non-empty str")
    return value


def kerberos_name_part(name: str, value: object) -> str | None:
    """One component of a Kerberos principal (a service or host name): no ``/`` or ``@``."""
    text = non_empty_str(name, value)
    if text is not None and ("/" in text or "@" in text or text != text.strip()):
        raise ConfigError(f"{name} must be one principal component (no '/', '@' or blanks)")
    return text


def acks(name: str, value: object) -> int:
    """``"all"``, -1, 0 or 1 (also as strings); stored as the int."""
    key = value.lower() if isinstance(value, str) else value
    # 1.0 == 1 would find a dict entry: only ints and strs are acks values.
    if isinstance(key, bool) or not isinstance(key, int | str) or key not in _ACKS:
        raise ConfigError(f"{name} must be 'all', -1, 0 or 1, got {value!r}")
    return _ACKS[key]


def compression_type(name: str, value: object) -> str:
    """A codec name in any case (None: ``"none"``); the codec table is the protocol's."""
    if value is None:
        return "none"
    return codec_for_name(cast(str, value)).name  # which checks the type too


def compression_level(name: str, value: object) -> object:
    """Checked with ``compression_type`` by ``Codec.check_level`` (the one check)."""
    return value


def ssl_context(name: str, value: object) -> ssl.SSLContext | None:
    """An ``ssl.SSLContext`` or None."""
    if value is not None and not isinstance(value, ssl.SSLContext):
        raise ConfigError(f"{name} must be an ssl.SSLContext, got {type(value).__name__}")
    return value


def file_path(name: str, value: object) -> str | None:
    """The path of an existing file (str or os.PathLike), or None."""
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike):
        raise ConfigError(f"{name} must be a file path, got {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str) or not os.path.isfile(text):
        raise ConfigError(f"{name}: no such file: {text!r}")
    return text


def secret(name: str, value: object) -> Secret | None:
    """A str or :class:`Secret` (stored as a Secret), or None."""
    if value is None or isinstance(value, Secret):
        return value
    if isinstance(value, str):
        return Secret(value)
    # Never echo the value: it may be the password in a wrong type.
    raise ConfigError(f"{name} must be a str or Secret, got {type(value).__name__}")


def token_provider(name: str, value: object) -> object:
    """An async function returning the token, or None."""
    if value is not None and not callable(value):
        raise ConfigError(
            f"{name} must be an async function returning the token, got {type(value).__name__}"
        )
    return value


def optional_callable(name: str, value: object) -> object:
    """A callable or None."""
    if value is not None and not callable(value):
        raise ConfigError(f"{name} must be callable or None, got {value!r}")
    return value


def partitioner(name: str, value: object) -> object:
    """One of :data:`PARTITIONERS` or a callable."""
    if isinstance(value, str):
        if value not in PARTITIONERS:
            raise ConfigError(f"{name} must be one of {PARTITIONERS} or a callable")
        return value
    if callable(value):
        return value
    raise ConfigError(f"{name} must be one of {PARTITIONERS} or a callable, got {value!r}")


def interceptors(name: str, value: object) -> tuple[ProducerInterceptor, ...]:
    """A sequence of :class:`~aiokprod.types.ProducerInterceptor` (None: none)."""
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise ConfigError(f"{name} must be a sequence of ProducerInterceptor objects")
    for item in value:
        if not isinstance(item, ProducerInterceptor):
            raise ConfigError(
                f"interceptor {item!r} needs on_send(record) and "
                "on_acknowledgement(metadata, exception) methods"
            )
    return tuple(value)


def bootstrap_servers(name: str, value: object) -> tuple[tuple[str, int], ...]:
    """The check of ``bootstrap_servers`` (see :func:`parse_bootstrap_servers`)."""
    return parse_bootstrap_servers(value)


def parse_bootstrap_servers(value: object) -> tuple[tuple[str, int], ...]:
    """``"h1:9092,h2:9092"`` or a list of ``"host:port"`` into (host, port) pairs.

    Raises:
        ConfigError: missing, empty or malformed addresses.
    """
    if value is None:
        raise ConfigError("bootstrap_servers is required, e.g. '127.0.0.1:9092'")
    if isinstance(value, str):
        items = [s.strip() for s in value.split(",")]
    elif isinstance(value, Sequence) and not isinstance(value, bytes):
        items = []
        for item in value:
            if not isinstance(item, str):
                raise ConfigError(
                    f"bootstrap_servers entries must be 'host:port' strings: {item!r}"
                )
            items.extend(s.strip() for s in item.split(","))
    else:
        raise ConfigError(f"bootstrap_servers must be a str or a list of str, got {value!r}")
    result = []
    for item in items:
        if not item:
            continue
        host, sep, port_text = item.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(f"bootstrap_servers entry {item!r} is not 'host:port'")
        result.append((host, int(port_text)))
    if not result:
        raise ConfigError("bootstrap_servers is empty")
    return tuple(result)
