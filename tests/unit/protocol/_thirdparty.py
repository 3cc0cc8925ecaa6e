"""Independent Kafka codecs from kafka-python and aiokafka, used as oracles.

kafka-python 3.x loads its JSON message schemas at import time through the deprecated
``importlib.resources.read_text``/``open_text``; with ``filterwarnings = error`` that
DeprecationWarning (attributed partly to ``importlib.resources._legacy``, which the
project-wide ``kafka.*`` filter does not cover) would fail collection, so the imports happen
here with DeprecationWarning silenced.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import aiokafka.record.default_records as aiokafka_records
    import kafka.errors as _kafka_errors
    import kafka.protocol as kafka_protocol
    import kafka.record.default_records as kafka_records
    from aiokafka.record import _crecords as aiokafka_crecords
    from kafka.protocol.api_message import ApiMessage as KafkaPythonApiMessage
    from kafka.record.util import encode_varint as kafka_python_encode_varint

    for _module in pkgutil.walk_packages(kafka_protocol.__path__, "kafka.protocol."):
        if _module.name.endswith(("generate_stubs", "__main__")):
            continue
        importlib.import_module(_module.name)


def _subclasses(cls: Any) -> list[Any]:
    result: list[Any] = []
    for sub in cls.__subclasses__():
        result.append(sub)
        result.extend(_subclasses(sub))
    return result


#: kafka-python's JSON-schema-driven message classes, by Kafka message name.
KAFKA_PYTHON_MESSAGES: dict[str, Any] = {
    c._json["name"]: c
    for c in _subclasses(KafkaPythonApiMessage)
    if c._class_version is None and getattr(c, "_json", None)
}

#: kafka-python's broker error table: code -> protocol name.
kafka_python_errors: dict[int, str] = {
    getattr(c, "errno"): getattr(c, "message")  # noqa: B009
    for c in vars(_kafka_errors).values()
    if inspect.isclass(c)
    and issubclass(c, _kafka_errors.BrokerResponseError)
    and isinstance(getattr(c, "errno", None), int)
}

__all__ = [
    "KAFKA_PYTHON_MESSAGES",
    "KafkaPythonApiMessage",
    "aiokafka_crecords",
    "aiokafka_records",
    "kafka_python_encode_varint",
    "kafka_python_errors",
    "kafka_records",
]
