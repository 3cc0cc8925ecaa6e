"""LZ4 frames as Apache Kafka's Java client writes and reads them (codec id 3).

Sans-IO: bytes in, bytes out, through ``cramjam``'s LZ4 block and frame codecs. The registry
of :mod:`aiokprod.protocol.compression` hands out :func:`lz4_compressor` and
:func:`lz4_decompress`; see docs/compression.md for the reasons.

**The Java layout.** A records section compressed with lz4 is one LZ4 frame as Kafka's
``Lz4BlockOutputStream`` writes it for magic 2: the header ``04 22 4D 18 60 40 82`` (magic,
FLG ``0x60``: version 1, independent blocks, no block or content checksum, no content size;
BD ``0x40``: 64 KiB blocks; the descriptor checksum ``(XXH32(FLG, BD) >> 8) & 0xFF = 0x82``,
computed over FLG and BD only - Kafka's "broken" checksum ``0x1A``, which also hashes the
magic, is only for the old magic-0 format), then 64 KiB blocks, each a little-endian size
and the compressed bytes, or the input itself with the high bit of the size set when it does
not shrink, then the end mark ``00 00 00 00``.

**Why frames are re-written.** Level 9 (the Java default) is LZ4's fast compressor, one
64 KiB block at a time, as in Java, and writes that layout directly. ``cramjam``'s block API
has no HC mode, its frame API does: any other level 1-17 goes to liblz4's frame compressor at
that level (3-12: LZ4 HC, levels above 12 behave as 12, 1-2 are liblz4's fast mode), whose
frame has its own header and block checksums, which the Java client never writes. Its blocks
are therefore copied into a frame of the Java layout above, so that every level puts the
same framing on the wire.

**Reading** follows ``Lz4BlockInputStream``: one frame, independent blocks required, block
size codes 4-7, reserved bits zero, optional content size, the descriptor checksum checked,
block checksums verified when flagged, the content checksum accepted (not checked, as in
Java). :func:`xxh32` is the frame format's checksum.
"""

from __future__ import annotations

import struct

import cramjam

from aiokprod.errors import ProtocolError
from aiokprod.protocol.records import Compressor

#: What a compressor takes (the argument of :data:`~aiokprod.protocol.records.Compressor`).
Buffer = bytes | bytearray | memoryview

LZ4_MAGIC = 0x184D2204
#: FLG 0x60: version 01, independent blocks, no checksums, no content size.
LZ4_FLG = 0x60
#: BD 0x40: 64 KiB maximum block size.
LZ4_BD = 0x40
LZ4_BLOCK_SIZE = 64 * 1024
#: Magic, FLG, BD and the descriptor checksum (XXH32(FLG, BD) >> 8 & 0xFF = 0x82).
LZ4_JAVA_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
LZ4_DEFAULT_LEVEL = 9
_UNCOMPRESSED_FLAG = 0x80000000
_UINT32_LE = struct.Struct("<I")
_END_MARK = b"\x00\x00\x00\x00"


def _lz4_fast(data: Buffer) -> bytes:
    # Java's default: one 64 KiB block at a time through LZ4's fast compressor.
    view = memoryview(data)
    parts = [LZ4_JAVA_HEADER]
    compress_block = cramjam.lz4.compress_block
    for start in range(0, len(view), LZ4_BLOCK_SIZE):
        chunk = view[start : start + LZ4_BLOCK_SIZE]
        block = bytes(compress_block(chunk, store_size=False))
        _append_block(parts, chunk, block)
    parts.append(_END_MARK)
    return b"".join(parts)


def _append_block(parts: list[bytes], chunk: memoryview, block: bytes | memoryview) -> None:
    if len(block) >= len(chunk):  # no gain: stored raw, as Lz4BlockOutputStream does
        parts.append(_UINT32_LE.pack(len(chunk) | _UNCOMPRESSED_FLAG))
        parts.append(bytes(chunk))
    else:
        parts.append(_UINT32_LE.pack(len(block)))
        parts.append(bytes(block))


def _lz4_leveled(level: int) -> Compressor:
    # cramjam's block API has no HC mode, its frame API does: compress with liblz4's frame
    # compressor (independent 64 KiB blocks), then re-write the frame in Java's layout
    # (liblz4 adds block checksums, which the Java client never writes).
    def compress(data: Buffer) -> bytes:
        encoder = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        encoder.compress(data if isinstance(data, bytes) else bytes(data))  # no memoryviews
        frame = memoryview(bytes(encoder.finish()))
        return _rewrite_lz4_frame(frame, memoryview(data))

    return compress


def _rewrite_lz4_frame(frame: memoryview, original: memoryview) -> bytes:
    flg, bd, header_end = _parse_lz4_header(frame)
    if bd != LZ4_BD:  # pragma: no cover - liblz4's default is 64 KiB blocks
        raise ProtocolError(f"liblz4 wrote block size code {bd:#x}, expected 64 KiB blocks")
    block_checksum = bool(flg & 0x10)
    parts = [LZ4_JAVA_HEADER]
    pos = header_end
    offset = 0
    while True:
        (word,) = _UINT32_LE.unpack_from(frame, pos)
        pos += 4
        if word == 0:
            break
        size = word & ~_UNCOMPRESSED_FLAG
        chunk = original[offset : offset + LZ4_BLOCK_SIZE]
        offset += len(chunk)
        if word & _UNCOMPRESSED_FLAG:
            _append_block(parts, chunk, chunk)
        else:
            _append_block(parts, chunk, frame[pos : pos + size])
        pos += size + (4 if block_checksum else 0)
    if offset != len(original):  # pragma: no cover - liblz4 cuts blocks at 64 KiB
        raise ProtocolError("liblz4 blocks do not line up with 64 KiB pieces of the input")
    parts.append(_END_MARK)
    return b"".join(parts)


def _parse_lz4_header(view: memoryview) -> tuple[int, int, int]:
    """Check a frame header as ``Lz4BlockInputStream`` does; (FLG, BD, first block offset)."""
    if len(view) < 7:
        raise ProtocolError(f"lz4 frame of {len(view)} bytes is shorter than its header")
    (magic,) = _UINT32_LE.unpack_from(view, 0)
    if magic != LZ4_MAGIC:
        raise ProtocolError(f"lz4 frame magic {magic:#010x}, expected {LZ4_MAGIC:#010x}")
    flg, bd = view[4], view[5]
    if flg >> 6 != 1:
        raise ProtocolError(f"lz4 frame version {flg >> 6} is unsupported")
    if flg & 0x03:
        raise ProtocolError("lz4 frame FLG reserved bits must be 0")
    if not flg & 0x20:
        raise ProtocolError("lz4 frame with dependent blocks (Kafka needs independent blocks)")
    if bd & 0x8F or not 4 <= (bd >> 4) & 0x07 <= 7:
        raise ProtocolError(f"lz4 frame BD byte {bd:#04x} is invalid")
    end = 6 + (8 if flg & 0x08 else 0)  # optional 8-byte content size
    if len(view) < end + 1:
        raise ProtocolError("lz4 frame header truncated")
    expected = (xxh32(bytes(view[4:end])) >> 8) & 0xFF
    if view[end] != expected:
        raise ProtocolError(
            f"lz4 frame descriptor checksum {view[end]:#04x}, expected {expected:#04x}"
        )
    return flg, bd, end + 1


def lz4_decompress(data: bytes | memoryview) -> bytes:
    """Decode one LZ4 frame with the Java reader's tolerance (see the module docstring).

    Raises:
        ProtocolError: a frame Kafka's Java client would reject, or truncated input.
    """
    view = memoryview(data)
    flg, bd, pos = _parse_lz4_header(view)
    max_block = 1 << (2 * ((bd >> 4) & 0x07) + 8)
    block_checksum = bool(flg & 0x10)
    scratch = bytearray(max_block)
    out = bytearray()
    decompress_into = cramjam.lz4.decompress_block_into
    while True:
        if len(view) - pos < 4:
            raise ProtocolError("lz4 frame truncated before its end mark")
        (word,) = _UINT32_LE.unpack_from(view, pos)
        pos += 4
        if word == 0:
            break
        size = word & ~_UNCOMPRESSED_FLAG
        if size > max_block or pos + size + (4 if block_checksum else 0) > len(view):
            raise ProtocolError(f"lz4 block of {size} bytes at byte {pos} is impossible")
        block = view[pos : pos + size]
        if block_checksum:
            (stored,) = _UINT32_LE.unpack_from(view, pos + size)
            if xxh32(bytes(block)) != stored:
                raise ProtocolError(f"lz4 block checksum mismatch at byte {pos}")
        if word & _UNCOMPRESSED_FLAG:
            out += block
        else:
            n = decompress_into(block, scratch, output_len=max_block)
            out += memoryview(scratch)[:n]
        pos += size + (4 if block_checksum else 0)
    # A content checksum (FLG bit 2) may follow; Java skips it without checking, and so do we.
    return bytes(out)


# XXH32 (seed 0), only ever run over a few header bytes, or over blocks of foreign frames
# that carry block checksums (Java never writes them): pure Python is enough there.
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """The 32-bit xxHash of ``data`` (the LZ4 frame format's checksum)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        limit = n - 16
        while pos <= limit:
            a, b, c, d = struct.unpack_from("<IIII", data, pos)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (k,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + k * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def lz4_compressor(level: int) -> Compressor:
    """The compressor for ``level``: LZ4 fast at 9 (the Java default), liblz4 otherwise."""
    return _lz4_fast if level == LZ4_DEFAULT_LEVEL else _lz4_leveled(level)
