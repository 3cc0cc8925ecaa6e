"""The ``aiokprod`` data source's options: Spark's Kafka sink spelling onto producer options.

Every data source option arrives as a string, with a lower-cased name (Spark's
``CaseInsensitiveDict``). The sink takes the options of Spark's own Kafka sink:

- ``kafka.bootstrap.servers`` (required) and ``topic``;
- ``kafka.<Java producer option>``: the Java name with dots turned into underscores is our
  option (``kafka.linger.ms`` -> ``linger_ms``), typed from :class:`ProducerConfig`'s
  annotations and validated by :meth:`ProducerConfig.from_options`. A few Java names need a
  translation (``partitioner.class``, ``sasl.jaas.config``) or cannot be honoured
  (serializers, Java key stores): those are listed in :data:`JAVA_ONLY`.

Secrets (an option whose name holds ``password``, ``secret`` or ``token``, and
``sasl_jaas_config``) leave this module as :class:`Sealed` strings, which print as ``***``.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from aiokprod import config as config_module
from aiokprod.config import ProducerConfig
from aiokprod.errors import ConfigError

__all__ = [
    "JAVA_ONLY",
    "SPARK_OPTIONS",
    "Sealed",
    "SinkOptions",
    "is_secret",
    "parse_sink_options",
    "seal_secrets",
    "unseal",
]

#: Options Spark itself may hand to a sink (or a Kafka sink user may carry over): accepted
#: and ignored. ``includeHeaders`` is a Kafka *source* option that Spark's sink accepts too.
SPARK_OPTIONS = frozenset({"includeheaders", "checkpointlocation", "path", "queryname"})

#: Java producer options that have no aiokprod equivalent as written, and why.
JAVA_ONLY: dict[str, str] = {
    "key_serializer": "the sink sends the key column's bytes (as Spark's Kafka sink does)",
    "value_serializer": "the sink sends the value column's bytes (as Spark's Kafka sink does)",
    "ssl_truststore_location": "Java key stores are not read: use kafka.ssl.cafile (PEM)",
    "ssl_keystore_location": (
        "Java key stores are not read: use kafka.ssl.certfile and kafka.ssl.keyfile (PEM)"
    ),
    "sasl_oauth_token_provider": "needs a Python callable; use write_dataframe() for OAuth",
    "interceptors": "needs Python objects; use write_dataframe() for interceptors",
    "partitioner": "use kafka.partitioner.class (a Java class name) or an aiokprod name",
}

#: ``kafka.partitioner.class`` values: Java classes and our own names.
_PARTITIONER_CLASSES = {
    "org.apache.kafka.clients.producer.roundrobinpartitioner": "round_robin",
    "org.apache.kafka.clients.producer.internals.defaultpartitioner": "builtin",
    "org.apache.kafka.clients.producer.uniformstickypartitioner": "builtin",
    **{name: name for name in config_module.PARTITIONERS},
}
_SASL_MODULES = {
    "org.apache.kafka.common.security.plain.plainloginmodule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.scramloginmodule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
_JAAS = re.compile(r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b(.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+?))(?=\s|;|$)')
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


def is_secret(name: str) -> bool:
    """Whether option ``name`` (ours or the Java spelling) holds a credential."""
    name = name.lower().replace(".", "_")
    if name.startswith("kafka_"):
        name = name[len("kafka_") :]
    return (
        any(word in name for word in ("password", "secret", "token")) or name == "sasl_jaas_config"
    )


class Sealed(str):
    """A credential on its way to the executors: a ``str`` that never shows its value.

    ``repr``, ``str`` and f-strings print ``***``; pickling keeps the value (the executors
    need it). :func:`unseal` gives the plain text back.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "'***'"

    def __str__(self) -> str:
        return "***"

    def __format__(self, spec: str) -> str:
        return "***"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Sealed, (str.__str__(self),))


def unseal(value: Any) -> Any:
    """The plain value of a :class:`Sealed` string; anything else unchanged."""
    return str.__str__(value) if isinstance(value, Sealed) else value


def seal_secrets(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with every credential sealed (a config ``Secret`` becomes a Sealed str)."""
    secret_type = getattr(config_module, "Secret", None)
    sealed: dict[str, Any] = {}
    for name, value in options.items():
        if secret_type is not None and isinstance(value, secret_type):
            value = Sealed(value.reveal())
        elif isinstance(value, str) and not isinstance(value, Sealed) and is_secret(name):
            value = Sealed(value)
        sealed[name] = value
    return sealed


@dataclasses.dataclass(frozen=True)
class SinkOptions:
    """The sink's options, parsed: where to connect, the topic, typed producer options."""

    bootstrap_servers: str
    topic: str | None
    producer_options: Mapping[str, Any]

    def __repr__(self) -> str:  # the producer options may hold credentials
        names = ", ".join(sorted(self.producer_options))
        return f"SinkOptions(bootstrap_servers={self.bootstrap_servers!r}, topic={self.topic!r}, producer options: {names})"  # noqa: E501


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Spark sink options (strings) to producer options, validated like ``Producer(...)``.

    Raises:
        ConfigError: a missing ``kafka.bootstrap.servers``, an unknown or unusable option, or
            a value the producer refuses. Credentials are never part of the message.
    """
    bootstrap: str | None = None
    topic: str | None = None
    typed: dict[str, Any] = {}
    hints = typing.get_type_hints(ProducerConfig)
    for raw_name, text in options.items():
        name = raw_name.lower()
        if name == "topic":
            topic = text
            if not topic:
                raise ConfigError("option topic: must not be empty")
            continue
        if name in SPARK_OPTIONS:
            continue
        if not name.startswith("kafka."):
            known = ["topic", "kafka.bootstrap.servers", "kafka.<Java producer option>"]
            raise ConfigError(
                f"unknown option {raw_name!r} for format('aiokprod'): it takes " + ", ".join(known)
            )
        java = name[len("kafka.") :]
        ours = java.replace(".", "_").replace("-", "_")
        if ours == "bootstrap_servers":
            bootstrap = text
            continue
        if ours == "partitioner_class":
            typed["partitioner"] = _partitioner(raw_name, text)
            continue
        if ours == "sasl_jaas_config":
            typed.update(_jaas(raw_name, text, options))
            continue
        if ours in JAVA_ONLY:
            raise ConfigError(f"option {raw_name} is not supported: {JAVA_ONLY[ours]}")
        if ours not in hints or ours == "bootstrap_servers":
            close = difflib.get_close_matches(ours, list(hints), n=1)
            hint = f" (did you mean kafka.{close[0].replace('_', '.')}?)" if close else ""
            raise ConfigError(
                f"option {raw_name}: the producer has no option {ours}{hint}; "
                "see docs/configuration.md"
            )
        typed[ours] = _convert(raw_name, ours, text, hints[ours])
    if not bootstrap:
        raise ConfigError("option kafka.bootstrap.servers is required (host:port[,host:port])")
    try:
        ProducerConfig.from_options(bootstrap, **typed)
    except ConfigError as exc:
        raise ConfigError(f"format('aiokprod') options: {exc}") from None
    return SinkOptions(bootstrap, topic, seal_secrets(typed))


def _scalar_types(hint: Any) -> set[type]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        found: set[type] = set()
        for arg in typing.get_args(hint):
            found |= _scalar_types(arg)
        return found
    if hint in (bool, int, float, str):
        return {hint}
    if hint is getattr(config_module, "Secret", None):
        return {str}
    return set()


def _convert(raw_name: str, name: str, text: str, hint: Any) -> object:
    allowed = _scalar_types(hint)
    shown = "***" if is_secret(name) else repr(text)
    if not allowed:
        raise ConfigError(f"option {raw_name}: takes a Python object, not a string")
    if bool in allowed:
        lowered = text.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ConfigError(f"option {raw_name}: expected true or false, got {shown}")
    if int in allowed:
        try:
            return int(text.strip())
        except ValueError:
            if str not in allowed and name != "acks":
                raise ConfigError(f"option {raw_name}: expected an integer, got {shown}") from None
    if float in allowed:
        try:
            return float(text.strip())
        except ValueError:
            if str not in allowed:
                raise ConfigError(f"option {raw_name}: expected a number, got {shown}") from None
    return text


def _partitioner(raw_name: str, text: str) -> str:
    found = _PARTITIONER_CLASSES.get(text.strip().lower())
    if found is None:
        raise ConfigError(
            f"option {raw_name}: {text!r} is not a partitioner aiokprod has; use "
            "org.apache.kafka.clients.producer.RoundRobinPartitioner, the default "
            f"(unset), or one of {config_module.PARTITIONERS}"
        )
    return found


def _jaas(raw_name: str, text: str, options: Mapping[str, str]) -> dict[str, Any]:
    """``sasl.jaas.config`` (PLAIN or SCRAM login module) to username and password.

    Never echoes the text: it holds the password.
    """
    match = _JAAS.match(text)
    module = match.group(1).lower() if match else ""
    mechanisms = _SASL_MODULES.get(module)
    if match is None or mechanisms is None:
        raise ConfigError(
            f"option {raw_name}: only PlainLoginModule and ScramLoginModule are understood "
            "(the value is not shown: it holds a credential)"
        )
    values = {
        m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3))
        for m in _JAAS_OPTION.finditer(match.group(3))
    }
    if "username" not in values or "password" not in values:
        raise ConfigError(f'option {raw_name}: needs username="..." and password="..."')
    mechanism = options.get("kafka.sasl.mechanism", mechanisms[0]).upper()
    if mechanism not in mechanisms:
        raise ConfigError(
            f"option {raw_name}: the login module does not match kafka.sasl.mechanism={mechanism}"
        )
    unescape = re.compile(r"\\(.)")
    return {
        "sasl_mechanism": mechanism,
        "sasl_plain_username": unescape.sub(r"\1", values["username"]),
        "sasl_plain_password": Sealed(unescape.sub(r"\1", values["password"])),
    }
