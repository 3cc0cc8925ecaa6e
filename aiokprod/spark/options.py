"""The ``aiokprod`` data source's options: Spark's Kafka sink spelling onto producer options.

Every data source option arrives as a string, with a lower-cased name (Spark's
``CaseInsensitiveDict``). The sink takes the options of Spark's own Kafka sink:

- ``kafka.bootstrap.servers`` (required) and ``topic``;
- ``deliveryGuarantee`` (``at-least-once``, the default, or ``exactly-once``) and
  ``transactionalIdPrefix`` (required with ``exactly-once``): ours, in the same spelling;
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
from aiokprod.spark.eos_records import transactional_id
from aiokprod.spark.exactly_once import AT_LEAST_ONCE, EXACTLY_ONCE, GUARANTEES, check_prefix

__all__ = [
    "JAVA_ONLY",
    "SPARK_OPTIONS",
    "Sealed",
    "SinkOptions",
    "guarantee_options",
    "is_secret",
    "parse_sink_options",
    "seal_secrets",
    "unseal",
]

#: Options Spark itself may hand to a sink (or a Kafka sink user may carry over): accepted
#: and ignored. ``includeHeaders`` is a Kafka *source* option that Spark's sink accepts too.
SPARK_OPTIONS = frozenset({"includeheaders", "checkpointlocation", "path", "queryname"})

#: The sink's own options (lower-cased, as Spark hands them over) and their spelling.
_SINK_OPTIONS = {
    "topic": "topic",
    "deliveryguarantee": "deliveryGuarantee",
    "transactionalidprefix": "transactionalIdPrefix",
}

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
_KRB5_MODULE = "com.sun.security.auth.module.krb5loginmodule"
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
    """The sink's options, parsed: where to connect, the topic, typed producer options.

    Attributes:
        bootstrap_servers: ``kafka.bootstrap.servers``.
        topic: the ``topic`` option, or None.
        producer_options: typed producer options, credentials sealed.
        delivery_guarantee: ``deliveryGuarantee``: ``at-least-once`` or ``exactly-once``.
        transactional_id_prefix: ``transactionalIdPrefix`` (exactly-once), else None.
    """

    bootstrap_servers: str
    topic: str | None
    producer_options: Mapping[str, Any]
    delivery_guarantee: str = AT_LEAST_ONCE
    transactional_id_prefix: str | None = None

    @property
    def exactly_once(self) -> bool:
        """Whether the sink writes exactly once."""
        return self.delivery_guarantee == EXACTLY_ONCE

    def __repr__(self) -> str:  # the producer options may hold credentials
        names = ", ".join(sorted(self.producer_options))
        return (
            f"SinkOptions(bootstrap_servers={self.bootstrap_servers!r}, topic={self.topic!r}, "
            f"delivery_guarantee={self.delivery_guarantee!r}, "
            f"transactional_id_prefix={self.transactional_id_prefix!r}, producer options: {names})"
        )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Spark sink options (strings) to producer options, validated like ``Producer(...)``.

    Raises:
        ConfigError: a missing ``kafka.bootstrap.servers``, an unknown or unusable option, or
            a value the producer refuses. Credentials are never part of the message.
    """
    bootstrap: str | None = None
    sink: dict[str, str] = {}  # topic, deliveryguarantee, transactionalidprefix
    typed: dict[str, Any] = {}
    hints = typing.get_type_hints(ProducerConfig)
    for raw_name, text in options.items():
        name = raw_name.lower()
        if name in _SINK_OPTIONS:
            sink[name] = text
            continue
        if name in SPARK_OPTIONS:
            continue
        if not name.startswith("kafka."):
            raise ConfigError(
                f"unknown option {raw_name!r} for format('aiokprod'): it takes "
                + ", ".join([*_SINK_OPTIONS.values(), "kafka.bootstrap.servers"])
                + ", kafka.<Java producer option>"
            )
        java = name[len("kafka.") :]
        ours = java.replace(".", "_").replace("-", "_")
        if ours == "bootstrap_servers":
            bootstrap = text
            continue
        if ours == "transactional_id":
            raise ConfigError(
                f"option {raw_name} is not supported: every Spark task needs its own "
                "transactional id; set deliveryGuarantee=exactly-once and "
                "transactionalIdPrefix instead"
            )
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
    topic = sink.get("topic")
    if topic is not None and not topic:
        raise ConfigError("option topic: must not be empty")
    text = sink.get("deliveryguarantee", AT_LEAST_ONCE)
    guarantee = text.strip().lower()
    if guarantee not in GUARANTEES:
        raise ConfigError(
            f"option deliveryGuarantee: {text!r} is not one of {', '.join(GUARANTEES)}"
        )
    prefix = guarantee_options(guarantee, sink.get("transactionalidprefix"), typed)
    try:
        ProducerConfig.from_options(bootstrap, **typed, **_as_transactional(prefix))
    except ConfigError as exc:
        raise ConfigError(f"format('aiokprod') options: {exc}") from None
    return SinkOptions(bootstrap, topic, seal_secrets(typed), guarantee, prefix)


def guarantee_options(guarantee: str, prefix: str | None, typed: dict[str, Any]) -> str | None:
    """Check the guarantee's options.

    Exactly-once writes get their default transaction timeout where the sink knows whether it
    writes a batch job or micro-batches (:func:`aiokprod.spark.exactly_once.transaction_options`).

    Returns:
        The checked prefix (exactly-once), or None.

    Raises:
        ConfigError: a bad value, a missing prefix, or a prefix without exactly-once.
    """
    if guarantee not in GUARANTEES:
        raise ConfigError(f"deliveryGuarantee {guarantee!r} is not one of {', '.join(GUARANTEES)}")
    if guarantee != EXACTLY_ONCE:
        if prefix is not None:
            raise ConfigError(
                "option transactionalIdPrefix: only used with deliveryGuarantee=exactly-once"
            )
        return None
    return check_prefix(prefix if prefix is not None else "")


def _as_transactional(prefix: str | None) -> dict[str, Any]:
    """What makes the driver's check see the options as a task's transactional producer."""
    return {} if prefix is None else {"transactional_id": transactional_id(prefix, 0, 0, None)}


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

    Kerberos' ``Krb5LoginModule`` becomes GSSAPI with its ``principal`` and, with
    ``useKeyTab=true``, its ``keyTab``. Never echoes the text: it may hold a password.
    """
    match = _JAAS.match(text)
    module = match.group(1).lower() if match else ""
    mechanisms = _SASL_MODULES.get(module)
    if match is None or (mechanisms is None and module != _KRB5_MODULE):
        raise ConfigError(
            f"option {raw_name}: only PlainLoginModule, ScramLoginModule and Krb5LoginModule "
            "are understood (the value is not shown: it may hold a credential)"
        )
    values = {
        m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3))
        for m in _JAAS_OPTION.finditer(match.group(3))
    }
    if mechanisms is None:
        return _krb5_jaas(raw_name, values, options)
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


def _krb5_jaas(
    raw_name: str, values: Mapping[str, str], options: Mapping[str, str]
) -> dict[str, Any]:
    """``Krb5LoginModule``'s ``principal`` and ``keyTab`` as the GSSAPI options."""
    if options.get("kafka.sasl.mechanism", "GSSAPI").upper() != "GSSAPI":
        raise ConfigError(f"option {raw_name}: Krb5LoginModule is for kafka.sasl.mechanism=GSSAPI")
    typed: dict[str, Any] = {"sasl_mechanism": "GSSAPI"}
    if "principal" in values:
        typed["sasl_kerberos_principal"] = values["principal"]
    if values.get("usekeytab", "").lower() == "true" and "keytab" in values:
        typed["sasl_kerberos_keytab"] = values["keytab"]
    return typed
