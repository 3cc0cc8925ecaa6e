"""LZ4 frames: the Java layout written at every level, and the Java reader's tolerance."""

from __future__ import annotations

import random
import struct
from typing import Any

import lz4.frame
import pytest

from aiokprod.errors import ProtocolError
from aiokprod.protocol import lz4_frame
from aiokprod.protocol.compression import codec_for_name

from ._payloads import text_payload


def test_xxh32_vectors_and_lz4_header_checksum() -> None:
    assert lz4_frame.xxh32(b"") == 0x02CC5D05
    assert lz4_frame.xxh32(b"abc") == 0x32D153FF
    # The Java client's frame descriptor checksum for FLG 0x60, BD 0x40 (protocol-facts §5).
    assert (lz4_frame.xxh32(b"\x60\x40") >> 8) & 0xFF == 0x82
    # ...and not the "broken" magic-0 variant that hashes the magic too.
    assert (lz4_frame.xxh32(b"\x04\x22\x4d\x18\x60\x40") >> 8) & 0xFF == 0x1A


@pytest.mark.parametrize("level", [None, 1, 3, 12, 17])
def test_lz4_writes_java_frame(level: int | None) -> None:
    data = text_payload(200_000) + random.Random(5).randbytes(70_000)  # last block raw
    frame = codec_for_name("lz4").compressor(level)(data)
    assert frame[:7] == bytes.fromhex("04224d18604082")
    assert frame[-4:] == b"\x00\x00\x00\x00"
    # Walk the blocks: 64 KiB of input each, sizes without checksums, raw flag on the noise.
    pos, sizes, raw = 7, [], []
    while True:
        (word,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        sizes.append(size)
        raw.append(bool(word & 0x80000000))
        pos += size
    assert pos == len(frame)
    assert len(sizes) == -(-len(data) // 65536)
    assert raw[-1]
    assert not raw[0]
    assert lz4.frame.decompress(frame) == data


def test_lz4_levels_use_hc() -> None:
    data = text_payload(500_000)
    fast = codec_for_name("lz4").compressor()(data)
    hc = codec_for_name("lz4").compressor(12)(data)
    assert len(hc) < len(fast) * 0.95  # level 9 is LZ4 fast (as Java), 12 is HC


@pytest.mark.parametrize(
    "options",
    [
        {"block_linked": False},
        {"block_linked": False, "block_checksum": True},
        {"block_linked": False, "content_checksum": True, "store_size": True},
        {"block_linked": False, "block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    ],
    ids=["plain", "block-checksum", "content-size+checksum", "4MiB-blocks"],
)
def test_lz4_reader_accepts_what_java_accepts(options: dict[str, Any]) -> None:
    data = text_payload(300_000)
    assert lz4_frame.lz4_decompress(lz4.frame.compress(data, **options)) == data


def test_lz4_reader_rejects_what_java_rejects() -> None:
    data = text_payload(100_000)
    with pytest.raises(ProtocolError, match="dependent blocks"):
        lz4_frame.lz4_decompress(lz4.frame.compress(data, block_linked=True))
    good = bytearray(codec_for_name("lz4").compressor()(data))
    broken_hc = bytearray(good)
    broken_hc[6] = 0x1A  # the magic-0 checksum
    with pytest.raises(ProtocolError, match="descriptor checksum"):
        lz4_frame.lz4_decompress(bytes(broken_hc))
    bad_magic = bytearray(good)
    bad_magic[0] ^= 0xFF
    with pytest.raises(ProtocolError, match="magic"):
        lz4_frame.lz4_decompress(bytes(bad_magic))
    with pytest.raises(ProtocolError, match="end mark"):
        lz4_frame.lz4_decompress(bytes(good[:-4]))
    reserved = bytearray(good)
    reserved[5] = 0x41  # BD reserved bit
    with pytest.raises(ProtocolError, match="BD"):
        lz4_frame.lz4_decompress(bytes(reserved))
    checksummed = bytearray(lz4.frame.compress(data, block_linked=False, block_checksum=True))
    checksummed[20] ^= 0x01  # inside the first block
    with pytest.raises(ProtocolError):
        lz4_frame.lz4_decompress(bytes(checksummed))
