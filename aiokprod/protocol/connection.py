"""The client side of one Kafka connection, as a state machine with no I/O.

:class:`ClientConnection` turns request objects into framed bytes (``send``) and received
bytes into decoded responses (``receive_data``), keeps the correlation ids, and remembers the
broker's API versions so each request goes out at the highest version both sides speak. The
network layer only moves bytes; everything that can be wrong about those bytes is decided
here, and raises :class:`~aiokprod.errors.ProtocolError`. After a ProtocolError the
connection is unusable (``broken`` is set) and must be closed.

Kafka answers the requests of one connection in the order it received them, so responses are
matched against a FIFO of pending requests and their correlation ids are checked, as the Java
client does. A Produce with acks=0 gets no response and is not queued.
"""

from __future__ import annotations

import re
import struct
from collections import deque
from dataclasses import dataclass
from typing import Final

from aiokprod.errors import ProtocolError, UnsupportedVersionError, error_for_code
from aiokprod.protocol.api import (
    API_VERSIONS,
    BY_REQUEST,
    ApiSpec,
    api_for_request,
    negotiate_version,
)
from aiokprod.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from aiokprod.protocol.primitives import INT32, Reader, write_string
from aiokprod.protocol.schema import Struct, decode_struct, encode_struct

#: Java keeps the top of the int32 range for SASL-phase requests; ordinary ids stay below.
MAX_CORRELATION_ID = 2**31 - 1 - 8
#: Largest response frame accepted (the broker's own request limit is 100 MiB).
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024 + 1024
UNSUPPORTED_VERSION_CODE = 35

#: The size prefix (filled in last), then the request header's api key, version and
#: correlation id.
_REQUEST_HEAD: Final = struct.Struct(">ihhi")

#: See _response_name.
_RESPONSE_NAMES: Final[dict[int, str]] = {}

# What ApiVersions v3+ allows in the client software name and version.
_SOFTWARE_TEXT = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


# Both are made once per request: with an ``__init__`` of their own, the compiled build
# makes them native objects (a dataclass's generated ``__init__`` runs interpreted).
@dataclass(slots=True, init=False)
class PendingRequest:
    """A request written to the connection and not yet answered."""

    correlation_id: int
    api: ApiSpec
    version: int

    def __init__(self, correlation_id: int, api: ApiSpec, version: int) -> None:
        self.correlation_id = correlation_id
        self.api = api
        self.version = version


@dataclass(slots=True, init=False)
class Response:
    """A decoded response and the request it answers."""

    correlation_id: int
    api: ApiSpec
    version: int
    body: Struct

    def __init__(self, correlation_id: int, api: ApiSpec, version: int, body: Struct) -> None:
        self.correlation_id = correlation_id
        self.api = api
        self.version = version
        self.body = body


def encode_request_frame(
    api: ApiSpec, version: int, correlation_id: int, client_id: str | None, body: Struct
) -> bytearray:
    """A size-prefixed request: int32 size, request header v1 or v2, body.

    Raises:
        UnsupportedVersionError: ``version`` is outside what this client declares for ``api``.
        ValueError: a field of ``body`` does not fit its wire type.
    """
    return _encode_frame(api, version, correlation_id, client_id_field(client_id), body)


def client_id_field(client_id: str | None) -> bytes:
    """The request header's client id, encoded.

    It stays a classic int16-length string even in header v2.
    """
    out = bytearray()
    write_string(out, client_id, compact=False, nullable=True)
    return bytes(out)


def _encode_frame(
    api: ApiSpec, version: int, correlation_id: int, client_id: bytes, body: Struct
) -> bytearray:
    if not api.min_version <= version <= api.max_version:
        raise UnsupportedVersionError(
            f"{api.name} v{version} is outside v{api.min_version}-v{api.max_version}"
        )
    # ApiSpec.is_flexible, inlined (ApiSpec is interpreted; this runs per request).
    flexible_from = api.flexible_from
    flexible = flexible_from is not None and version >= flexible_from
    out = bytearray(_REQUEST_HEAD.pack(0, api.key, version, correlation_id))  # size set below
    out += client_id
    if flexible:
        out.append(0)  # empty tagged-field buffer
    if api.encode_body is not None:
        api.encode_body(body, version, out)
    else:
        encode_struct(body, version, flexible, out)
    INT32.pack_into(out, 0, len(out) - 4)
    return out


def decode_response_body(
    api: ApiSpec, version: int, frame: bytes | bytearray | memoryview
) -> Struct:
    """Decode a response frame (without its size prefix, with its header) at ``version``.

    Raises:
        ProtocolError: the bytes are not a valid response of that API and version.
    """
    reader = Reader(frame, _response_name(api, version))
    reader.skip(4)  # correlation id, checked by the caller
    # ApiSpec.response_header_version, inlined (it runs per response): header v1, with
    # tagged fields, for flexible versions; ApiVersions always answers with header v0.
    flexible_from = api.flexible_from
    if flexible_from is not None and version >= flexible_from and api is not API_VERSIONS:
        _skip_tagged_fields(reader)
    if api.decode_body is not None:
        start = reader.position
        fast = api.decode_body(reader, version)
        if fast is not None:
            reader.expect_end()
            return fast
        reader = Reader(frame, _response_name(api, version))
        reader.skip(start)
    body = decode_struct(api.response, reader, version, api.is_flexible(version))
    reader.expect_end()
    return body


def _response_name(api: ApiSpec, version: int) -> str:
    """``"Produce response v12"``: what a ProtocolError names (made once per version)."""
    key = api.key << 16 | version
    name = _RESPONSE_NAMES.get(key)
    if name is None:
        name = _RESPONSE_NAMES[key] = f"{api.name} response v{version}"
    return name


def _skip_tagged_fields(reader: Reader) -> None:
    count = reader.read_unsigned_varint()
    for _ in range(count):
        reader.read_unsigned_varint()
        reader.skip(reader.read_unsigned_varint())


def decode_api_versions_response(
    version: int, frame: bytes | bytearray | memoryview
) -> ApiVersionsResponse:
    """Decode an ApiVersions response, falling back to the v0 layout.

    A broker that does not speak the version we sent answers in the v0 layout with
    UNSUPPORTED_VERSION; so does anything that fails to parse at the sent version.

    Raises:
        ProtocolError: the bytes parse at neither version.
    """
    try:
        body = decode_response_body(API_VERSIONS, version, frame)
        if isinstance(body, ApiVersionsResponse) and body.error_code != UNSUPPORTED_VERSION_CODE:
            return body
    except ProtocolError:
        if version == 0:
            raise
    body = decode_response_body(API_VERSIONS, 0, frame)
    if not isinstance(body, ApiVersionsResponse):  # pragma: no cover - table invariant
        raise ProtocolError("ApiVersions decoded to the wrong type")
    return body


class ClientConnection:
    """Request/response bookkeeping for one broker connection (no I/O).

    Args:
        client_id: sent in every request header (brokers log it and use it for quotas).
        max_frame_bytes: the largest response frame accepted.
    """

    def __init__(
        self, client_id: str | None = None, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    ) -> None:
        self.client_id = client_id
        self._client_id = client_id_field(client_id)  # the same in every request header
        self.max_frame_bytes = max_frame_bytes
        self.broken = False
        #: Why the connection broke (set with ``broken``).
        self.error: ProtocolError | None = None
        self._next_correlation_id = 0
        self._pending: deque[PendingRequest] = deque()
        self._buffer = bytearray()
        #: api key -> (broker min, broker max), set once ApiVersions succeeded.
        self.broker_versions: dict[int, tuple[int, int]] | None = None
        #: Finalized cluster features (name -> max version level) from ApiVersions v3+.
        self.finalized_features: dict[str, int] = {}
        self._negotiated: dict[int, int] = {}

    # --- versions ---------------------------------------------------------------------------

    def set_broker_versions(self, response: ApiVersionsResponse) -> None:
        """Record the broker's API ranges from a successful ApiVersions response.

        Raises:
            BrokerError: the response carries an error.
        """
        if response.error_code:
            raise error_for_code(response.error_code, "ApiVersions failed")
        self.broker_versions = {
            r.api_key: (r.min_version, r.max_version) for r in response.api_keys
        }
        self.finalized_features = {
            f.name: f.max_version_level for f in response.finalized_features or ()
        }
        self._negotiated.clear()

    def version_for(self, api: ApiSpec) -> int:
        """The version to send ``api`` at on this connection.

        Raises:
            UnsupportedVersionError: the broker does not speak any version we do, or the
                broker's versions are not known yet.
        """
        version = self._negotiated.get(api.key)
        if version is not None:
            return version
        if self.broker_versions is None:
            if api.key == API_VERSIONS.key:
                return API_VERSIONS.max_version
            raise UnsupportedVersionError(f"{api.name}: broker versions not known yet")
        broker = self.broker_versions.get(api.key)
        if broker is None:
            raise UnsupportedVersionError(f"the broker does not support {api.name}")
        version = negotiate_version(api, broker[0], broker[1])
        self._negotiated[api.key] = version
        return version

    def supports(self, api: ApiSpec) -> bool:
        """Whether the broker speaks some version of ``api`` that we do."""
        try:
            self.version_for(api)
        except UnsupportedVersionError:
            return False
        return True

    # --- sending ----------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Requests written and not yet answered."""
        return len(self._pending)

    def send(
        self, request: Struct, *, version: int | None = None, expect_response: bool = True
    ) -> tuple[int, bytearray]:
        """Frame ``request``; returns its correlation id and the bytes to write.

        Args:
            request: a declared request message.
            version: force a version (ApiVersions negotiation); default: the negotiated one.
            expect_response: False only for Produce with acks=0, which gets no answer.

        Raises:
            ProtocolError: the connection is broken.
            UnsupportedVersionError: no common version.
        """
        if self.broken:
            raise ProtocolError("connection is broken by an earlier protocol error")
        # api_for_request's lookup inline (api.py is interpreted; this runs per request).
        api = BY_REQUEST.get(type(request))
        if api is None:
            api = api_for_request(request)  # raises the TypeError
        if version is None:
            version = self.version_for(api)
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (
            0 if correlation_id >= MAX_CORRELATION_ID else correlation_id + 1
        )
        frame = _encode_frame(api, version, correlation_id, self._client_id, request)
        if expect_response:
            self._pending.append(PendingRequest(correlation_id, api, version))
        return correlation_id, frame

    def api_versions_request(
        self, software_name: str, software_version: str, version: int | None = None
    ) -> tuple[int, bytearray]:
        """Frame an ApiVersions request (the first request on every connection).

        Names that ApiVersions v3+ would reject are reduced to the allowed characters.
        """
        request = ApiVersionsRequest(
            client_software_name=_software_text(software_name),
            client_software_version=_software_text(software_version),
        )
        return self.send(request, version=API_VERSIONS.max_version if version is None else version)

    # --- receiving --------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Response]:
        """Feed received bytes; returns every response they complete, in order.

        If a bad frame follows good ones, the good responses are returned and the connection
        is marked ``broken`` (with ``error``); the caller closes it after handling them.

        Raises:
            ProtocolError: a frame is malformed, too large, unexpected, or answers a
                different correlation id than the oldest pending request (and no good
                response came before it in ``data``).
        """
        if self.broken:
            raise ProtocolError("connection is broken by an earlier protocol error")
        buffer = self._buffer
        # Frames are cut from ``data`` itself when nothing is left over from earlier reads
        # and it is immutable (the usual arrival: whole responses); otherwise from the
        # buffer, which keeps what is left of a frame for the next call.
        source: bytes | bytearray
        if buffer or type(data) is not bytes:
            buffer += data
            source = buffer
        else:
            source = data
        responses: list[Response] = []
        start = 0
        end = len(source)
        error: ProtocolError | None = None
        try:
            while end - start >= 4:
                size = int(INT32.unpack_from(source, start)[0])
                if size < 4 or size > self.max_frame_bytes:
                    raise ProtocolError(
                        f"response frame size {size} outside 4..{self.max_frame_bytes}"
                    )
                if end - start - 4 < size:
                    break
                # A copy: nothing decoded (or an exception's traceback) may keep a view of
                # the receive buffer alive, or resizing the buffer would fail.
                frame = source[start + 4 : start + 4 + size]
                start += 4 + size
                responses.append(self._handle_frame(frame))
        except ProtocolError as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001 - any decoding failure means broken bytes
            error = ProtocolError(f"undecodable response: {exc!r}")
            error.__cause__ = exc
        if source is buffer:
            if start:
                del buffer[:start]
        elif start < end:
            buffer += source[start:]  # the start of a frame: kept for the next call
        if error is not None:
            self.broken = True
            self.error = error
            if not responses:
                raise error
            # The responses before the bad frame are good: hand them over; the caller sees
            # ``broken`` (and ``error``) and closes the connection after handling them.
        return responses

    def _handle_frame(self, frame: bytes | bytearray) -> Response:
        correlation_id = int(INT32.unpack_from(frame, 0)[0])
        if not self._pending:
            raise ProtocolError(f"response with correlation id {correlation_id} to no request")
        pending = self._pending.popleft()
        if correlation_id != pending.correlation_id:
            raise ProtocolError(
                f"response correlation id {correlation_id} does not match the oldest "
                f"request's {pending.correlation_id} ({pending.api.name})"
            )
        if pending.api.key == API_VERSIONS.key:
            body: Struct = decode_api_versions_response(pending.version, frame)
        else:
            body = decode_response_body(pending.api, pending.version, frame)
        return Response(correlation_id, pending.api, pending.version, body)

    def fail_pending(self) -> list[PendingRequest]:
        """Forget every pending request (the connection closed); returns them."""
        pending = list(self._pending)
        self._pending.clear()
        self._buffer = bytearray()  # a new buffer: never resize one that may be exported
        return pending


def api_versions_retry_version(response: ApiVersionsResponse, sent_version: int) -> int | None:
    """After an ApiVersions error: the version to retry with, or None if retrying cannot help.

    A broker that does not know ``sent_version`` answers UNSUPPORTED_VERSION and lists its
    own ApiVersions range; retry at the top of that range (v0 when it lists nothing).
    """
    if response.error_code != UNSUPPORTED_VERSION_CODE or sent_version == 0:
        return None
    for entry in response.api_keys:
        if entry.api_key == API_VERSIONS.key:
            retry = min(entry.max_version, API_VERSIONS.max_version)
            return retry if retry < sent_version else None
    return 0


def _software_text(text: str) -> str:
    cleaned = re.sub(r"[^a-zA-Z0-9\-.]", "-", text).strip("-.")
    return cleaned if _SOFTWARE_TEXT.fullmatch(cleaned) else "unknown"
