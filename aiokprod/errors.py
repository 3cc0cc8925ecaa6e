"""The exception tree of aiokprod.

This module is a leaf: it imports nothing from the rest of the package, so every layer (the
sans-IO protocol, the network, the producer machinery and the public facade) can raise these
types without an upward import.

Broker error codes map to one class each (``error_for_code``), generated from a table of the
codes Apache Kafka 4.x defines. Each class carries the code, the protocol name and the Java
client's classification: ``retriable`` (the Java class extends ``RetriableException``) and
``invalid_metadata`` (it extends ``InvalidMetadataException``, so the client refreshes metadata).
"""

from __future__ import annotations

from typing import ClassVar


class KafkaError(Exception):
    """Base class of every error aiokprod raises on purpose."""

    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False


# --- local errors -------------------------------------------------------------------------


class ConfigError(KafkaError, ValueError):
    """A producer option has a wrong type, an impossible value or conflicts with another."""


class KerberosUnavailableError(ConfigError):
    """``sasl_mechanism="GSSAPI"`` without the ``gssapi`` package: ``aiokprod[gssapi]``."""


class ProtocolError(KafkaError):
    """Bytes that do not follow the Kafka protocol: truncated, malformed or hostile input.

    Raised by the sans-IO layer for every decoding problem (never ``IndexError`` or
    ``struct.error``). A connection that produced one is not used again.
    """


class CorruptRecordBatchError(ProtocolError):
    """A record batch whose CRC-32C or framing is wrong."""


class UnsupportedVersionError(KafkaError):
    """The broker and this client share no version of a request this client needs."""


class KafkaConnectionError(KafkaError):
    """A broker could not be reached, or its connection broke while a request was pending."""

    retriable = True
    invalid_metadata = True


class KafkaTimeoutError(KafkaError, TimeoutError):
    """An operation did not finish within its bound (a ``*_ms`` option or a ``timeout``)."""

    retriable = True


class RequestTimeoutError(KafkaTimeoutError):
    """A broker did not answer one request within ``request_timeout_ms``."""


class MetadataTimeoutError(KafkaTimeoutError):
    """Metadata for a topic did not arrive within ``max_block_ms``."""

    retriable = False


class BufferExhaustedError(KafkaTimeoutError):
    """``send()`` waited ``max_block_ms`` for room in ``buffer_memory`` and got none."""

    retriable = False


class DeliveryTimeoutError(KafkaTimeoutError):
    """A record was not acknowledged within ``delivery_timeout_ms`` of its ``send()``."""

    retriable = False


class InvalidArgumentError(KafkaError, ValueError):
    """An argument to ``send()`` (partition, timestamp, headers) has a wrong type or value."""


class SerializationError(KafkaError, TypeError):
    """A key, value or header could not be turned into bytes."""


class ProducerClosedError(KafkaError):
    """The producer was closed (or never started) by its owner; nothing new is accepted."""


class ProducerCrashedError(KafkaError):
    """The producer's background sender stopped on an unexpected error (the cause is chained)."""


class IllegalStateError(KafkaError):
    """An operation that the producer's current state does not allow."""


class TransactionError(KafkaError):
    """The transaction cannot go on as asked (see docs/transactions.md)."""


class AbortableTransactionError(TransactionError):
    """The current transaction hit an error: call ``abort_transaction()``, then go on.

    The error that caused it is the ``__cause__``.
    """


class TransactionAbortedError(TransactionError):
    """A record's transaction was aborted before the record was sent."""


class ClusterChangedError(KafkaError):
    """The cluster behind ``bootstrap_servers`` was replaced by another (a new cluster id).

    What the producer did on the old cluster means nothing on the new one: the records of a
    transaction that was open then fail with this error, and ``abort_transaction()`` starts
    afresh on the new cluster (docs/transactions.md, "When the cluster is replaced").

    Attributes:
        old_cluster_id: the cluster the producer wrote to before.
        new_cluster_id: the cluster it writes to now.
    """

    def __init__(self, old_cluster_id: str | None, new_cluster_id: str | None) -> None:
        super().__init__(
            f"the cluster behind bootstrap_servers changed from {old_cluster_id!r} to "
            f"{new_cluster_id!r}: the open transaction is lost with the old cluster"
        )
        self.old_cluster_id = old_cluster_id
        self.new_cluster_id = new_cluster_id

    def __reduce__(self) -> tuple[type[ClusterChangedError], tuple[str | None, str | None]]:
        return type(self), (self.old_cluster_id, self.new_cluster_id)


class AuthenticationError(KafkaError):
    """The broker rejected this client's credentials or security handshake."""


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake with a broker failed (protocol mismatch, a rejected client cert...)."""


class SslCertificateError(SslAuthenticationError):
    """The broker's certificate is not trusted, or does not name the host connected to."""


class SaslAuthenticationError(AuthenticationError):
    """The broker rejected the SASL credentials.

    PLAIN cannot tell a wrong password from an unknown user: the broker answers the same for
    both, on purpose. SCRAM can, by the step that failed (the subclasses below).

    Attributes:
        mechanism: the SASL mechanism.
        username: the user name sent (None for OAUTHBEARER).
        broker_message: the broker's error message, if it sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        mechanism: str = "",
        username: str | None = None,
        broker_message: str | None = None,
    ) -> None:
        super().__init__(message)
        self.mechanism = mechanism
        self.username = username
        self.broker_message = broker_message

    def __reduce__(self) -> tuple[object, ...]:
        # copy.copy() and pickle rebuild it from these (keyword-only fields included).
        return (
            _rebuild_sasl_error,
            (type(self), str(self), self.mechanism, self.username, self.broker_message),
        )


def _rebuild_sasl_error(
    cls: type[SaslAuthenticationError],
    message: str,
    mechanism: str,
    username: str | None,
    broker_message: str | None,
) -> SaslAuthenticationError:
    return cls(message, mechanism=mechanism, username=username, broker_message=broker_message)


class SaslUnknownUserError(SaslAuthenticationError):
    """SCRAM: the broker has no credentials for this user and mechanism.

    It refused the client's first message, before any password was involved.
    """


class SaslWrongPasswordError(SaslAuthenticationError):
    """SCRAM: the broker knows the user but rejected the proof computed from the password."""


class SaslMechanismError(AuthenticationError):
    """The broker does not enable the configured SASL mechanism on this listener.

    Attributes:
        enabled: the mechanisms the broker offers.
    """

    def __init__(self, message: str, enabled: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.enabled = enabled

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.enabled))


class OAuthTokenError(AuthenticationError):
    """The OAUTHBEARER token provider failed, or returned something that is not a token."""


# --- broker errors --------------------------------------------------------------------------


class BrokerError(KafkaError):
    """An error code returned by a broker.

    Attributes:
        code: the Kafka error code.
        name: the protocol's name for it (``NOT_LEADER_OR_FOLLOWER``).
        message: the broker's error message, when it sent one.
    """

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"

    def __init__(self, message: str | None = None) -> None:
        self.message = message
        text = f"[Error {self.code}] {self.name}"
        if message:
            text = f"{text}: {message}"
        super().__init__(text)


class UnknownBrokerError(BrokerError):
    """A broker error code this client does not know."""

    def __init__(self, code: int, message: str | None = None) -> None:
        self.unknown_code = code
        self.message = message
        text = f"[Error {code}] unknown error code"
        if message:
            text = f"{text}: {message}"
        KafkaError.__init__(self, text)


# code, protocol name, class name, retriable, invalid metadata.
# Classification follows the Java client's exception hierarchy (Errors.java in Apache Kafka 4.x).
_BROKER_ERRORS: tuple[tuple[int, str, str, bool, bool], ...] = (
    (-1, "UNKNOWN_SERVER_ERROR", "UnknownServerError", False, False),
    (1, "OFFSET_OUT_OF_RANGE", "OffsetOutOfRangeError", False, False),
    (2, "CORRUPT_MESSAGE", "CorruptMessageError", True, False),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", "UnknownTopicOrPartitionError", True, True),
    (4, "INVALID_FETCH_SIZE", "InvalidFetchSizeError", False, False),
    (5, "LEADER_NOT_AVAILABLE", "LeaderNotAvailableError", True, True),
    (6, "NOT_LEADER_OR_FOLLOWER", "NotLeaderOrFollowerError", True, True),
    (7, "REQUEST_TIMED_OUT", "BrokerRequestTimedOutError", True, False),
    (8, "BROKER_NOT_AVAILABLE", "BrokerNotAvailableError", False, False),
    (9, "REPLICA_NOT_AVAILABLE", "ReplicaNotAvailableError", True, True),
    (10, "MESSAGE_TOO_LARGE", "RecordTooLargeError", False, False),
    (11, "STALE_CONTROLLER_EPOCH", "StaleControllerEpochError", False, False),
    (12, "OFFSET_METADATA_TOO_LARGE", "OffsetMetadataTooLargeError", False, False),
    (13, "NETWORK_EXCEPTION", "NetworkExceptionError", True, True),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", "CoordinatorLoadInProgressError", True, False),
    (15, "COORDINATOR_NOT_AVAILABLE", "CoordinatorNotAvailableError", True, False),
    (16, "NOT_COORDINATOR", "NotCoordinatorError", True, False),
    (17, "INVALID_TOPIC_EXCEPTION", "InvalidTopicError", False, False),
    (18, "RECORD_LIST_TOO_LARGE", "RecordListTooLargeError", False, False),
    (19, "NOT_ENOUGH_REPLICAS", "NotEnoughReplicasError", True, False),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "NotEnoughReplicasAfterAppendError", True, False),
    (21, "INVALID_REQUIRED_ACKS", "InvalidRequiredAcksError", False, False),
    (22, "ILLEGAL_GENERATION", "IllegalGenerationError", False, False),
    (23, "INCONSISTENT_GROUP_PROTOCOL", "InconsistentGroupProtocolError", False, False),
    (24, "INVALID_GROUP_ID", "InvalidGroupIdError", False, False),
    (25, "UNKNOWN_MEMBER_ID", "UnknownMemberIdError", False, False),
    (26, "INVALID_SESSION_TIMEOUT", "InvalidSessionTimeoutError", False, False),
    (27, "REBALANCE_IN_PROGRESS", "RebalanceInProgressError", False, False),
    (28, "INVALID_COMMIT_OFFSET_SIZE", "InvalidCommitOffsetSizeError", False, False),
    (29, "TOPIC_AUTHORIZATION_FAILED", "TopicAuthorizationFailedError", False, False),
    (30, "GROUP_AUTHORIZATION_FAILED", "GroupAuthorizationFailedError", False, False),
    (31, "CLUSTER_AUTHORIZATION_FAILED", "ClusterAuthorizationFailedError", False, False),
    (32, "INVALID_TIMESTAMP", "InvalidTimestampError", False, False),
    (33, "UNSUPPORTED_SASL_MECHANISM", "UnsupportedSaslMechanismError", False, False),
    (34, "ILLEGAL_SASL_STATE", "IllegalSaslStateError", False, False),
    (35, "UNSUPPORTED_VERSION", "BrokerUnsupportedVersionError", False, False),
    (36, "TOPIC_ALREADY_EXISTS", "TopicAlreadyExistsError", False, False),
    (37, "INVALID_PARTITIONS", "InvalidPartitionsError", False, False),
    (38, "INVALID_REPLICATION_FACTOR", "InvalidReplicationFactorError", False, False),
    (39, "INVALID_REPLICA_ASSIGNMENT", "InvalidReplicaAssignmentError", False, False),
    (40, "INVALID_CONFIG", "InvalidConfigError", False, False),
    (41, "NOT_CONTROLLER", "NotControllerError", True, False),
    (42, "INVALID_REQUEST", "InvalidRequestError", False, False),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", "UnsupportedForMessageFormatError", False, False),
    (44, "POLICY_VIOLATION", "PolicyViolationError", False, False),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", "OutOfOrderSequenceNumberError", False, False),
    (46, "DUPLICATE_SEQUENCE_NUMBER", "DuplicateSequenceNumberError", False, False),
    (47, "INVALID_PRODUCER_EPOCH", "InvalidProducerEpochError", False, False),
    (48, "INVALID_TXN_STATE", "InvalidTxnStateError", False, False),
    (49, "INVALID_PRODUCER_ID_MAPPING", "InvalidProducerIdMappingError", False, False),
    (50, "INVALID_TRANSACTION_TIMEOUT", "InvalidTransactionTimeoutError", False, False),
    (51, "CONCURRENT_TRANSACTIONS", "ConcurrentTransactionsError", True, False),
    (52, "TRANSACTION_COORDINATOR_FENCED", "TransactionCoordinatorFencedError", False, False),
    (
        53,
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "TransactionalIdAuthorizationFailedError",
        False,
        False,
    ),
    (54, "SECURITY_DISABLED", "SecurityDisabledError", False, False),
    (55, "OPERATION_NOT_ATTEMPTED", "OperationNotAttemptedError", False, False),
    (56, "KAFKA_STORAGE_ERROR", "KafkaStorageError", True, True),
    (57, "LOG_DIR_NOT_FOUND", "LogDirNotFoundError", False, False),
    (58, "SASL_AUTHENTICATION_FAILED", "SaslAuthenticationFailedError", False, False),
    (59, "UNKNOWN_PRODUCER_ID", "UnknownProducerIdError", False, False),
    (60, "REASSIGNMENT_IN_PROGRESS", "ReassignmentInProgressError", False, False),
    (61, "DELEGATION_TOKEN_AUTH_DISABLED", "DelegationTokenAuthDisabledError", False, False),
    (62, "DELEGATION_TOKEN_NOT_FOUND", "DelegationTokenNotFoundError", False, False),
    (63, "DELEGATION_TOKEN_OWNER_MISMATCH", "DelegationTokenOwnerMismatchError", False, False),
    (
        64,
        "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
        "DelegationTokenRequestNotAllowedError",
        False,
        False,
    ),
    (
        65,
        "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
        "DelegationTokenAuthorizationFailedError",
        False,
        False,
    ),
    (66, "DELEGATION_TOKEN_EXPIRED", "DelegationTokenExpiredError", False, False),
    (67, "INVALID_PRINCIPAL_TYPE", "InvalidPrincipalTypeError", False, False),
    (68, "NON_EMPTY_GROUP", "NonEmptyGroupError", False, False),
    (69, "GROUP_ID_NOT_FOUND", "GroupIdNotFoundError", False, False),
    (70, "FETCH_SESSION_ID_NOT_FOUND", "FetchSessionIdNotFoundError", True, False),
    (71, "INVALID_FETCH_SESSION_EPOCH", "InvalidFetchSessionEpochError", True, False),
    (72, "LISTENER_NOT_FOUND", "ListenerNotFoundError", True, True),
    (73, "TOPIC_DELETION_DISABLED", "TopicDeletionDisabledError", False, False),
    (74, "FENCED_LEADER_EPOCH", "FencedLeaderEpochError", True, True),
    (75, "UNKNOWN_LEADER_EPOCH", "UnknownLeaderEpochError", True, False),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", "UnsupportedCompressionTypeError", False, False),
    (77, "STALE_BROKER_EPOCH", "StaleBrokerEpochError", False, False),
    (78, "OFFSET_NOT_AVAILABLE", "OffsetNotAvailableError", True, False),
    (79, "MEMBER_ID_REQUIRED", "MemberIdRequiredError", False, False),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", "PreferredLeaderNotAvailableError", True, True),
    (81, "GROUP_MAX_SIZE_REACHED", "GroupMaxSizeReachedError", False, False),
    (82, "FENCED_INSTANCE_ID", "FencedInstanceIdError", False, False),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", "EligibleLeadersNotAvailableError", True, True),
    (84, "ELECTION_NOT_NEEDED", "ElectionNotNeededError", True, True),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", "NoReassignmentInProgressError", False, False),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", "GroupSubscribedToTopicError", False, False),
    (87, "INVALID_RECORD", "InvalidRecordError", False, False),
    (88, "UNSTABLE_OFFSET_COMMIT", "UnstableOffsetCommitError", True, False),
    (89, "THROTTLING_QUOTA_EXCEEDED", "ThrottlingQuotaExceededError", True, False),
    (90, "PRODUCER_FENCED", "ProducerFencedError", False, False),
    (91, "RESOURCE_NOT_FOUND", "ResourceNotFoundError", False, False),
    (92, "DUPLICATE_RESOURCE", "DuplicateResourceError", False, False),
    (93, "UNACCEPTABLE_CREDENTIAL", "UnacceptableCredentialError", False, False),
    (94, "INCONSISTENT_VOTER_SET", "InconsistentVoterSetError", False, False),
    (95, "INVALID_UPDATE_VERSION", "InvalidUpdateVersionError", False, False),
    (96, "FEATURE_UPDATE_FAILED", "FeatureUpdateFailedError", False, False),
    (97, "PRINCIPAL_DESERIALIZATION_FAILURE", "PrincipalDeserializationFailureError", False, False),
    (98, "SNAPSHOT_NOT_FOUND", "SnapshotNotFoundError", False, False),
    (99, "POSITION_OUT_OF_RANGE", "PositionOutOfRangeError", False, False),
    (100, "UNKNOWN_TOPIC_ID", "UnknownTopicIdError", True, True),
    (101, "DUPLICATE_BROKER_REGISTRATION", "DuplicateBrokerRegistrationError", False, False),
    (102, "BROKER_ID_NOT_REGISTERED", "BrokerIdNotRegisteredError", False, False),
    (103, "INCONSISTENT_TOPIC_ID", "InconsistentTopicIdError", True, True),
    (104, "INCONSISTENT_CLUSTER_ID", "InconsistentClusterIdError", False, False),
    (105, "TRANSACTIONAL_ID_NOT_FOUND", "TransactionalIdNotFoundError", False, False),
    (106, "FETCH_SESSION_TOPIC_ID_ERROR", "FetchSessionTopicIdError", True, False),
    (107, "INELIGIBLE_REPLICA", "IneligibleReplicaError", False, False),
    (108, "NEW_LEADER_ELECTED", "NewLeaderElectedError", False, False),
    (109, "OFFSET_MOVED_TO_TIERED_STORAGE", "OffsetMovedToTieredStorageError", False, False),
    (110, "FENCED_MEMBER_EPOCH", "FencedMemberEpochError", False, False),
    (111, "UNRELEASED_INSTANCE_ID", "UnreleasedInstanceIdError", False, False),
    (112, "UNSUPPORTED_ASSIGNOR", "UnsupportedAssignorError", False, False),
    (113, "STALE_MEMBER_EPOCH", "StaleMemberEpochError", False, False),
    (114, "MISMATCHED_ENDPOINT_TYPE", "MismatchedEndpointTypeError", False, False),
    (115, "UNSUPPORTED_ENDPOINT_TYPE", "UnsupportedEndpointTypeError", False, False),
    (116, "UNKNOWN_CONTROLLER_ID", "UnknownControllerIdError", False, False),
    (117, "UNKNOWN_SUBSCRIPTION_ID", "UnknownSubscriptionIdError", False, False),
    (118, "TELEMETRY_TOO_LARGE", "TelemetryTooLargeError", False, False),
    (119, "INVALID_REGISTRATION", "InvalidRegistrationError", False, False),
    (120, "TRANSACTION_ABORTABLE", "TransactionAbortableError", False, False),
    (121, "INVALID_RECORD_STATE", "InvalidRecordStateError", False, False),
    (122, "SHARE_SESSION_NOT_FOUND", "ShareSessionNotFoundError", True, False),
    (123, "INVALID_SHARE_SESSION_EPOCH", "InvalidShareSessionEpochError", True, False),
    (124, "FENCED_STATE_EPOCH", "FencedStateEpochError", False, False),
    (125, "INVALID_VOTER_KEY", "InvalidVoterKeyError", False, False),
    (126, "DUPLICATE_VOTER", "DuplicateVoterError", False, False),
    (127, "VOTER_NOT_FOUND", "VoterNotFoundError", False, False),
    (128, "INVALID_REGULAR_EXPRESSION", "InvalidRegularExpressionError", False, False),
    (129, "REBOOTSTRAP_REQUIRED", "RebootstrapRequiredError", False, False),
)


def _make_broker_error(
    code: int, name: str, class_name: str, retriable: bool, invalid_metadata: bool
) -> type[BrokerError]:
    doc = f"Broker error {code}, {name}."
    attrs = {
        "code": code,
        "name": name,
        "retriable": retriable,
        "invalid_metadata": invalid_metadata,
        "__doc__": doc,
        "__module__": __name__,
        "__qualname__": class_name,
    }
    return type(class_name, (BrokerError,), attrs)


_BY_CODE: dict[int, type[BrokerError]] = {}
for _row in _BROKER_ERRORS:
    _cls = _make_broker_error(*_row)
    _BY_CODE[_row[0]] = _cls
    globals()[_row[2]] = _cls
del _row, _cls

# Names that the rest of the package refers to directly, bound for type checkers.
UnknownServerError: type[BrokerError] = _BY_CODE[-1]
CorruptMessageError: type[BrokerError] = _BY_CODE[2]
UnknownTopicOrPartitionError: type[BrokerError] = _BY_CODE[3]
LeaderNotAvailableError: type[BrokerError] = _BY_CODE[5]
NotLeaderOrFollowerError: type[BrokerError] = _BY_CODE[6]
BrokerRequestTimedOutError: type[BrokerError] = _BY_CODE[7]
RecordTooLargeError: type[BrokerError] = _BY_CODE[10]
NetworkExceptionError: type[BrokerError] = _BY_CODE[13]
CoordinatorLoadInProgressError: type[BrokerError] = _BY_CODE[14]
InvalidTopicError: type[BrokerError] = _BY_CODE[17]
RecordListTooLargeError: type[BrokerError] = _BY_CODE[18]
NotEnoughReplicasError: type[BrokerError] = _BY_CODE[19]
NotEnoughReplicasAfterAppendError: type[BrokerError] = _BY_CODE[20]
TopicAuthorizationFailedError: type[BrokerError] = _BY_CODE[29]
ClusterAuthorizationFailedError: type[BrokerError] = _BY_CODE[31]
InvalidTimestampError: type[BrokerError] = _BY_CODE[32]
UnsupportedSaslMechanismError: type[BrokerError] = _BY_CODE[33]
BrokerUnsupportedVersionError: type[BrokerError] = _BY_CODE[35]
TopicAlreadyExistsError: type[BrokerError] = _BY_CODE[36]
InvalidRequestError: type[BrokerError] = _BY_CODE[42]
OutOfOrderSequenceNumberError: type[BrokerError] = _BY_CODE[45]
DuplicateSequenceNumberError: type[BrokerError] = _BY_CODE[46]
InvalidProducerEpochError: type[BrokerError] = _BY_CODE[47]
InvalidTxnStateError: type[BrokerError] = _BY_CODE[48]
InvalidProducerIdMappingError: type[BrokerError] = _BY_CODE[49]
ConcurrentTransactionsError: type[BrokerError] = _BY_CODE[51]
TransactionalIdAuthorizationFailedError: type[BrokerError] = _BY_CODE[53]
SaslAuthenticationFailedError: type[BrokerError] = _BY_CODE[58]
UnknownProducerIdError: type[BrokerError] = _BY_CODE[59]
FencedLeaderEpochError: type[BrokerError] = _BY_CODE[74]
UnsupportedCompressionTypeError: type[BrokerError] = _BY_CODE[76]
InvalidRecordError: type[BrokerError] = _BY_CODE[87]
UnstableOffsetCommitError: type[BrokerError] = _BY_CODE[88]
ProducerFencedError: type[BrokerError] = _BY_CODE[90]
TransactionalIdNotFoundError: type[BrokerError] = _BY_CODE[105]
TransactionAbortableError: type[BrokerError] = _BY_CODE[120]


def error_class_for_code(code: int) -> type[BrokerError] | None:
    """The exception class for a broker error code, or None for an unknown code (0 too)."""
    return _BY_CODE.get(code)


def error_for_code(code: int, message: str | None = None) -> BrokerError:
    """An exception instance for a non-zero broker error code.

    Raises:
        ValueError: for code 0, which means "no error".
    """
    if code == 0:
        raise ValueError("error code 0 means success, not an error")
    cls = _BY_CODE.get(code)
    if cls is None:
        return UnknownBrokerError(code, message)
    return cls(message)


def broker_error_codes() -> dict[int, type[BrokerError]]:
    """Every known broker error code and its class (a copy)."""
    return dict(_BY_CODE)
