"""Hostile input: every decoder may only raise ProtocolError (or a subclass), and fast.

Random bytes, and valid encodings with one byte replaced, inserted or deleted, truncated, or
with a length/count field overwritten by an extreme value, go through decode_struct (every
request and response class at every version), ClientConnection.receive_data and the record
batch reader. IndexError, struct.error, UnicodeDecodeError, ValueError, MemoryError or a hang
are failures.
"""

from __future__ import annotations

import contextlib
import gzip
import struct
import tracemalloc
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokprod.errors import ProtocolError
from aiokprod.protocol.api import ALL_APIS, API_VERSIONS, METADATA, PRODUCE, ApiSpec
from aiokprod.protocol.connection import ClientConnection
from aiokprod.protocol.messages.api_versions import ApiVersionRange, ApiVersionsResponse
from aiokprod.protocol.messages.metadata import MetadataRequest
from aiokprod.protocol.messages.produce import ProduceRequest
from aiokprod.protocol.primitives import Reader
from aiokprod.protocol.record_reader import read_record_batch, read_record_batches
from aiokprod.protocol.records import RecordBatchBuilder, encode_headers
from aiokprod.protocol.schema import Struct, decode_struct, encode_struct

from ._strategies import struct_strategy

FUZZ = settings(
    max_examples=300,
    deadline=timedelta(seconds=2),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Values that land on length and count fields: int32 max/min, -1, -2, varints of 2**32-1.
EXTREMES = [
    b"\x7f\xff\xff\xff",
    b"\x80\x00\x00\x00",
    b"\xff\xff\xff\xff",
    b"\xff\xff\xff\xfe",
    b"\xff\xff\xff\xff\x0f",
    b"\xfe\xff\xff\xff\x0f",
    b"\x80\x80\x80\x80\x80\x80",
    b"\x7f\xff",
    b"\xff\xfe",
    b"\x00",
    b"\xff",
]


def mutate(data: bytes, draw: Callable[[st.SearchStrategy[Any]], Any]) -> bytes:
    """One mutation of ``data`` (or ``data`` unchanged)."""
    kind = draw(st.sampled_from(["keep", "truncate", "replace", "insert", "delete", "extreme"]))
    if kind == "keep" or not data:
        return data if data else bytes(draw(st.binary(max_size=16)))
    i = draw(st.integers(0, len(data) - 1))
    if kind == "truncate":
        return data[:i]
    if kind == "replace":
        return data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1 :]
    if kind == "insert":
        return data[:i] + bytes([draw(st.integers(0, 255))]) + data[i:]
    if kind == "delete":
        return data[:i] + data[i + 1 :]
    pattern: bytes = draw(st.sampled_from(EXTREMES))
    return data[:i] + pattern + data[i + len(pattern) :]


def decode_or_protocol_error(cls: type[Struct], data: bytes, version: int, flexible: bool) -> None:
    reader = Reader(data, f"{cls.__name__} v{version}")
    try:
        decode_struct(cls, reader, version, flexible)
        reader.expect_end()
    except ProtocolError:
        pass


MESSAGE_CASES = [
    pytest.param(api, cls, id=f"{cls.__name__}")
    for api in ALL_APIS
    for cls in (api.request, api.response)
]


@pytest.mark.parametrize(("api", "cls"), MESSAGE_CASES)
@FUZZ
@given(data=st.data())
def test_decode_struct_random_and_mutated(
    api: ApiSpec, cls: type[Struct], data: st.DataObject
) -> None:
    version = data.draw(st.integers(api.min_version, api.max_version), label="version")
    flexible = api.is_flexible(version)
    if data.draw(st.booleans(), label="random bytes"):
        blob = data.draw(st.binary(max_size=200))
    else:
        value = data.draw(struct_strategy(cls, version, flexible))
        out = bytearray()
        encode_struct(value, version, flexible, out)
        blob = bytes(out)
        for _ in range(data.draw(st.integers(1, 3), label="mutations")):
            blob = mutate(blob, data.draw)
    decode_or_protocol_error(cls, blob, version, flexible)


# --- the connection -------------------------------------------------------------------------


def fresh_connection() -> tuple[ClientConnection, list[tuple[ApiSpec, int]]]:
    conn = ClientConnection("fuzz")
    conn.set_broker_versions(
        ApiVersionsResponse(
            api_keys=[
                ApiVersionRange(api_key=api.key, min_version=0, max_version=api.max_version)
                for api in ALL_APIS
            ]
        )
    )
    sent = []
    for api, version, request in (
        (METADATA, 12, MetadataRequest()),
        (API_VERSIONS, 3, None),
        (PRODUCE, 8, ProduceRequest(acks=1, timeout_ms=1)),
        (PRODUCE, 11, ProduceRequest(acks=1, timeout_ms=1)),
    ):
        if request is None:
            conn.api_versions_request("fuzz", "1", version=version)
        else:
            conn.send(request, version=version)
        sent.append((api, version))
    return conn, sent


@FUZZ
@given(data=st.data())
def test_receive_data_random_and_mutated(data: st.DataObject) -> None:
    conn, sent = fresh_connection()
    if data.draw(st.booleans(), label="random bytes"):
        stream = data.draw(st.binary(max_size=300))
    else:
        frames = []
        for correlation_id, (api, version) in enumerate(sent):
            body = data.draw(struct_strategy(api.response, version, api.is_flexible(version)))
            payload = bytearray(struct.pack(">i", correlation_id))
            if api.response_header_version(version):
                payload.append(0)
            encode_struct(body, version, api.is_flexible(version), payload)
            frames.append(struct.pack(">i", len(payload)) + bytes(payload))
        stream = b"".join(frames)
        for _ in range(data.draw(st.integers(1, 3), label="mutations")):
            stream = mutate(stream, data.draw)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4), label="cuts"))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    received = 0
    try:
        for chunk in chunks:
            received += len(conn.receive_data(chunk))
            if conn.broken:  # good responses came before a bad frame: handed over first
                assert conn.error is not None
                raise conn.error
    except ProtocolError:
        assert conn.broken
        with pytest.raises(ProtocolError):
            conn.receive_data(b"\x00")
    else:
        assert received + conn.in_flight == len(sent)


# --- record batches -------------------------------------------------------------------------


def fix_crc(batch: bytes) -> bytes:
    if len(batch) < 61:
        return batch
    return batch[:17] + struct.pack(">I", crc32c(batch[21:])) + batch[21:]


@st.composite
def valid_batch(draw: st.DrawFn) -> bytes:
    compressed = draw(st.booleans())
    builder = RecordBatchBuilder(
        transactional=draw(st.booleans()),
        compression=1 if compressed else 0,
        compressor=gzip.compress if compressed else None,
    )
    for _ in range(draw(st.integers(1, 6))):
        headers = draw(
            st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=6)), max_size=2)
        )
        builder.try_append(
            draw(st.integers(0, 2**42)),
            draw(st.none() | st.binary(max_size=10)),
            draw(st.none() | st.binary(max_size=30)),
            encode_headers(headers) if headers else None,
        )
    batch = builder.close()
    batch.stamp(draw(st.integers(-1, 10)), draw(st.integers(-1, 3)), draw(st.integers(-1, 99)))
    return bytes(batch.data)


DECOMPRESSORS = {1: gzip.decompress}


@FUZZ
@given(data=st.data())
def test_record_batch_reader_random_and_mutated(data: st.DataObject) -> None:
    if data.draw(st.booleans(), label="random bytes"):
        blob = data.draw(st.binary(min_size=0, max_size=200))
        if data.draw(st.booleans(), label="plausible header") and len(blob) >= 21:
            blob = blob[:16] + b"\x02" + blob[17:]
            blob = blob[:8] + struct.pack(">i", len(blob) - 12) + blob[12:]
    else:
        blob = data.draw(valid_batch())
        for _ in range(data.draw(st.integers(1, 3), label="mutations")):
            blob = mutate(blob, data.draw)
    if data.draw(st.booleans(), label="fix crc"):
        blob = fix_crc(blob)  # get past the CRC check into the record parser
    with contextlib.suppress(ProtocolError):
        read_record_batch(blob, DECOMPRESSORS)
    with contextlib.suppress(ProtocolError):
        for _ in read_record_batches(blob + blob, DECOMPRESSORS):
            pass


# --- huge length prefixes fail fast, without allocating them --------------------------------


def huge_inputs() -> list[tuple[str, Callable[[], object]]]:
    int32_max = b"\x7f\xff\xff\xff"
    varint_max = b"\xff\xff\xff\xff\x0f"
    builder = RecordBatchBuilder()
    builder.try_append(0, None, b"v")
    batch = bytearray(builder.close().data)
    huge_count = bytearray(batch)
    huge_count[23:27] = b"\x7f\xff\xff\xfe"  # last offset delta
    huge_count[57:61] = int32_max  # record count
    huge_record = bytearray(batch[:61]) + b"\xfe\xff\xff\xff\x0f" + bytes(6)
    struct.pack_into(">i", huge_record, 8, len(huge_record) - 12)
    huge_length = bytearray(batch)
    huge_length[8:12] = int32_max

    def conn_receive(data: bytes) -> Callable[[], object]:
        def run() -> object:
            conn = ClientConnection()
            conn.api_versions_request("x", "1")
            return conn.receive_data(data)

        return run

    def read(data: bytes, method: str, **kwargs: bool) -> Callable[[], object]:
        return lambda: getattr(Reader(data), method)(**kwargs)

    return [
        ("classic bytes", read(int32_max + b"ab", "read_bytes", compact=False, nullable=True)),
        ("compact bytes", read(varint_max + b"ab", "read_bytes", compact=True, nullable=True)),
        ("classic string", read(b"\x7f\xffab", "read_string", compact=False, nullable=True)),
        ("classic array", lambda: Reader(int32_max + b"ab").read_array_length(compact=False)),
        ("compact array", lambda: Reader(varint_max + b"ab").read_array_length(compact=True)),
        ("frame size", conn_receive(int32_max + b"\x00\x00\x00\x00")),
        (
            "api versions array",
            conn_receive(b"\x00\x00\x00\x0a" + b"\x00\x00\x00\x00" + b"\x00\x00" + int32_max),
        ),
        ("batch length", lambda: read_record_batch(fix_crc(bytes(huge_length)))),
        ("batches length", lambda: list(read_record_batches(bytes(huge_length)))),
        ("record count", lambda: read_record_batch(fix_crc(bytes(huge_count)))),
        ("record length", lambda: read_record_batch(fix_crc(bytes(huge_record)))),
    ]  # fmt: skip


@pytest.mark.parametrize(("name", "run"), huge_inputs(), ids=[n for n, _ in huge_inputs()])
def test_huge_length_prefix_fails_fast(name: str, run: Callable[[], object]) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError):
            run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"{name}: {peak} bytes allocated"


def test_struct_array_count_bounded_by_input() -> None:
    # ApiVersions response v0 claiming 2**31-1 api keys in 2 bytes of input
    data = b"\x00\x00" + b"\x7f\xff\xff\xff" + b"\x00\x12"
    with pytest.raises(ProtocolError, match="cannot fit"):
        decode_struct(ApiVersionsResponse, Reader(data), 0, False)
