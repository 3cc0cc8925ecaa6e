"""The broker error table: codes, names and the Java client's classification."""

from __future__ import annotations

import pytest

from aiokprod import errors
from aiokprod.errors import (
    BrokerError,
    CorruptRecordBatchError,
    KafkaError,
    ProtocolError,
    UnknownBrokerError,
    broker_error_codes,
    error_class_for_code,
    error_for_code,
)

from ._thirdparty import kafka_python_errors

# protocol-facts.md section 7: code, name, retriable, refresh metadata (invalid_metadata).
SECTION_7 = [
    (-1, "UNKNOWN_SERVER_ERROR", False, False),
    (2, "CORRUPT_MESSAGE", True, False),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True, True),
    (5, "LEADER_NOT_AVAILABLE", True, True),
    (6, "NOT_LEADER_OR_FOLLOWER", True, True),
    (7, "REQUEST_TIMED_OUT", True, False),
    (9, "REPLICA_NOT_AVAILABLE", True, True),
    (10, "MESSAGE_TOO_LARGE", False, False),
    (13, "NETWORK_EXCEPTION", True, True),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", True, False),
    (15, "COORDINATOR_NOT_AVAILABLE", True, False),
    (16, "NOT_COORDINATOR", True, False),
    (18, "RECORD_LIST_TOO_LARGE", False, False),
    (19, "NOT_ENOUGH_REPLICAS", True, False),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True, False),
    (21, "INVALID_REQUIRED_ACKS", False, False),
    (29, "TOPIC_AUTHORIZATION_FAILED", False, False),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False, False),
    (32, "INVALID_TIMESTAMP", False, False),
    (35, "UNSUPPORTED_VERSION", False, False),
    (42, "INVALID_REQUEST", False, False),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False, False),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False, False),
    (47, "INVALID_PRODUCER_EPOCH", False, False),
    (48, "INVALID_TXN_STATE", False, False),
    (51, "CONCURRENT_TRANSACTIONS", True, False),
    (56, "KAFKA_STORAGE_ERROR", True, True),
    (59, "UNKNOWN_PRODUCER_ID", False, False),
    (74, "FENCED_LEADER_EPOCH", True, True),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", False, False),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True, True),
    (87, "INVALID_RECORD", False, False),
    (90, "PRODUCER_FENCED", False, False),
    (100, "UNKNOWN_TOPIC_ID", True, True),
    (103, "INCONSISTENT_TOPIC_ID", True, True),
    (120, "TRANSACTION_ABORTABLE", False, False),
]


@pytest.mark.parametrize(("code", "name", "retriable", "invalid_metadata"), SECTION_7)
def test_section_7_classification(
    code: int, name: str, retriable: bool, invalid_metadata: bool
) -> None:
    exc = error_for_code(code, "broker says so")
    assert isinstance(exc, BrokerError)
    assert isinstance(exc, KafkaError)
    assert type(exc) is error_class_for_code(code)
    assert exc.code == code
    assert exc.name == name
    assert exc.retriable is retriable
    assert exc.invalid_metadata is invalid_metadata
    assert exc.message == "broker says so"
    assert str(exc) == f"[Error {code}] {name}: broker says so"


def test_invalid_metadata_implies_retriable() -> None:
    # Java: InvalidMetadataException extends RefreshRetriableException extends RetriableException
    for cls in broker_error_codes().values():
        if cls.invalid_metadata:
            assert cls.retriable, cls.name


def test_every_known_code() -> None:
    table = broker_error_codes()
    assert 0 not in table
    assert set(range(1, 130)) | {-1} == set(table)
    names = set()
    for code, cls in table.items():
        exc = error_for_code(code)
        assert type(exc) is cls
        assert exc.code == code
        assert exc.message is None
        assert str(exc) == f"[Error {code}] {cls.name}"
        assert cls.__name__.endswith("Error")
        assert getattr(errors, cls.__name__) is cls  # importable by name
        names.add(cls.name)
    assert len(names) == len(table)
    table.clear()  # a copy: the module's table is untouched
    assert error_class_for_code(6) is errors.NotLeaderOrFollowerError


# Codes whose protocol name kafka-python still spells the pre-2.x way.
KAFKA_PYTHON_OLD_NAMES = {
    -1: "UNKNOWN",
    6: "NOT_LEADER_FOR_PARTITION",
    10: "MESSAGE_SIZE_TOO_LARGE",
    17: "INVALID_TOPIC",
    39: "INVALID_REPLICATION_ASSIGNMENT",
}


def test_names_match_kafka_python() -> None:
    # kafka-python's error table is independent of ours; names must agree where both know it.
    checked = 0
    for code, cls in broker_error_codes().items():
        theirs = kafka_python_errors.get(code)
        if theirs is not None:
            assert theirs == KAFKA_PYTHON_OLD_NAMES.get(code, cls.name), code
            checked += 1
    assert checked > 120


@pytest.mark.parametrize("code", [130, 999, -2, 32767])
def test_unknown_codes(code: int) -> None:
    exc = error_for_code(code, "what")
    assert isinstance(exc, UnknownBrokerError)
    assert isinstance(exc, BrokerError)
    assert exc.unknown_code == code
    assert exc.message == "what"
    assert not exc.retriable
    assert str(exc) == f"[Error {code}] unknown error code: what"
    assert error_class_for_code(code) is None


def test_code_zero_is_not_an_error() -> None:
    with pytest.raises(ValueError, match="success"):
        error_for_code(0)
    assert error_class_for_code(0) is None


def test_protocol_error_tree() -> None:
    assert issubclass(CorruptRecordBatchError, ProtocolError)
    assert issubclass(ProtocolError, KafkaError)
    assert not issubclass(ProtocolError, ValueError)  # decoders never leak ValueError
    assert not issubclass(BrokerError, ProtocolError)
