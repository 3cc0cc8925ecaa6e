"""Producer options: names, Java 4.x defaults, and validation at construction.

Option names are the Java client's with dots turned into underscores (``linger.ms`` becomes
``linger_ms``). Every check happens in :meth:`ProducerConfig.from_options`, so a wrong name,
type or combination fails where the producer is constructed, with a message naming the option.

The package, bottom up:

* ``secret``: :class:`Secret` and the shapes of the callable options;
* ``spec``: how an option is declared (:func:`~aiokprod.config.spec.option`) and the
  per-option checks;
* ``checks``: the checks across options (idempotence, timeouts, TLS, SASL);
* ``table``: the option table itself, :class:`ProducerConfig`;
* ``typed_options``: :class:`ProducerOptions` for type checkers, generated from the table.

Everything else that knows about options reads the table (:data:`OPTIONS`): the docs page
(docs/gen_config.py), the command line's ``-X`` (:func:`option_from_text`), and Spark's
secret handling (:data:`SECRET_OPTIONS`, :data:`JAVA_NAMES`). This package sits above
``aiokprod.protocol`` (it asks the codec table about compression) and below ``aiokprod.net``.

Decisions that differ from, or go beyond, the Java client are listed in docs/configuration.md.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiokprod.config.checks import MAX_IN_FLIGHT_WITH_IDEMPOTENCE
from aiokprod.config.secret import PartitionerFunction, Secret, Serializer, TokenProvider
from aiokprod.config.spec import (
    MAX_INT32,
    PARTITIONERS,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    Option,
    closest_option,
    did_you_mean,
    parse_bootstrap_servers,
)
from aiokprod.config.table import OPTIONS, ProducerConfig
from aiokprod.config.typed_options import ProducerOptions
from aiokprod.errors import ConfigError
from aiokprod.protocol.compression import COMPRESSION_LEVEL_RANGES, COMPRESSION_TYPES

__all__ = [
    "COMPRESSION_LEVEL_RANGES",
    "COMPRESSION_TYPES",
    "JAVA_NAMES",
    "MAX_INT32",
    "MAX_IN_FLIGHT_WITH_IDEMPOTENCE",
    "OPTIONS",
    "PARTITIONERS",
    "SASL_MECHANISMS",
    "SECRET_OPTIONS",
    "SECURITY_PROTOCOLS",
    "Option",
    "PartitionerFunction",
    "ProducerConfig",
    "ProducerOptions",
    "Secret",
    "Serializer",
    "TokenProvider",
    "closest_option",
    "describe_options",
    "did_you_mean",
    "option_for_java_name",
    "option_from_text",
    "parse_bootstrap_servers",
]

#: Names of the options that hold credentials: never shown, and sealed before they travel
#: (``aiokprod.spark``). A ``str`` given for one of them is a secret too.
SECRET_OPTIONS: frozenset[str] = frozenset(name for name, o in OPTIONS.items() if o.secret)

#: The Java producer's property name -> our option name, for the properties whose values
#: mean the same here (``linger.ms`` -> ``linger_ms``). Java properties without an exact
#: equivalent (``partitioner.class``, ``sasl.jaas.config``, ...) are not in it.
JAVA_NAMES: Mapping[str, str] = {java: o.name for o in OPTIONS.values() for java in o.java}

_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


def option_for_java_name(name: str) -> str | None:
    """Our option name for a Java property name (``"linger.ms"`` -> ``"linger_ms"``), or None.

    Our own names are returned as they are.
    """
    if name in OPTIONS:
        return name
    return JAVA_NAMES.get(name)


def option_from_text(name: str, text: str) -> object:
    """A producer option's value from text (``-X name=value``, properties files, Spark).

    Booleans accept true/false/yes/no/on/off/1/0; integers are parsed, and text that is
    not a number is passed on as it is, so the option's own check says what it accepts
    (``acks=all``). Strings (and passwords) are taken as they are.

    Raises:
        ConfigError: an unknown option, an option that needs a Python object (serializers,
            interceptors, ``ssl_context``), or a malformed boolean.
    """
    spec = OPTIONS.get(name)
    if spec is None:
        raise ConfigError(f"unknown producer option: {name}{did_you_mean(name, OPTIONS)}")
    kind = spec.text_type
    if kind is None:
        raise ConfigError(f"{name} takes a Python object; it cannot be given as text")
    if kind is bool:
        lowered = text.strip().lower()
        if lowered not in _TRUE | _FALSE:
            raise ConfigError(f"{name}: expected true or false, got {text!r}")
        return lowered in _TRUE
    if kind is int:
        try:
            return int(text)
        except ValueError:
            return text
    return text


def describe_options(config: ProducerConfig) -> Mapping[str, object]:
    """The config as a plain mapping (for logs and docs; secrets are shown as ``***``)."""
    return {
        name: (
            "***"
            if name in SECRET_OPTIONS and getattr(config, name) is not None
            else getattr(config, name)
        )
        for name in OPTIONS
    }
