"""Compression codecs of v2 record batches, framed exactly as Apache Kafka's Java client does.

Sans-IO: bytes in, bytes out. Every codec comes from one C/Rust-backed library, ``cramjam``
(it releases the GIL while it works, so a caller may run a compressor in a thread).

What goes after the batch header (see docs/compression.md for the reasons):

* **gzip** (id 1): one RFC 1952 member. Levels 1-9; -1 means zlib's default, 6.
* **snappy** (id 2): the *xerial* framing of ``org.xerial.snappy.SnappyOutputStream``: the
  16-byte header (magic ``82 'SNAPPY' 00``, version 1, compatible version 1) and then blocks of
  at most 32 KiB of input, each written as a big-endian int32 length plus one raw snappy block.
  Reading accepts that framing (also several streams back to back) and, like the Java
  ``SnappyInputStream``, a payload without the magic as one raw snappy block.
* **lz4** (id 3): one LZ4 frame in the Java client's layout (independent 64 KiB blocks, no
  checksums, header ``04 22 4D 18 60 40 82``), read with the Java reader's tolerance: see
  :mod:`aiokprod.protocol.lz4_frame`.
* **zstd** (id 4): one standard zstd frame. Levels -131072..22, default 3. Needs Produce v7+.

The registry (:data:`CODECS`, :func:`codec_for_name`, :func:`codec_for_id`) hands out
``compressor(level)`` and ``decompress`` callables in the shapes
:class:`~aiokprod.protocol.records.RecordBatchBuilder` and
:func:`~aiokprod.protocol.record_reader.read_record_batch` take.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import cramjam

from aiokprod.errors import ConfigError, ProtocolError

# LZ4_JAVA_HEADER, lz4_decompress and xxh32 stay importable from here (re-exported).
from aiokprod.protocol.lz4_frame import LZ4_JAVA_HEADER as LZ4_JAVA_HEADER
from aiokprod.protocol.lz4_frame import lz4_compressor
from aiokprod.protocol.lz4_frame import lz4_decompress as lz4_decompress
from aiokprod.protocol.lz4_frame import xxh32 as xxh32
from aiokprod.protocol.records import Compressor, Decompressor

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4

#: The ``compression_type`` names, in codec id order.
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
#: codec -> (lowest level, highest level, default level), as the Java client's
#: ``compression.<codec>.level`` options; gzip's default -1 means zlib's default (6).
#: ``aiokprod.config`` re-exports both; the level check itself is :meth:`Codec.check_level`.
COMPRESSION_LEVEL_RANGES: Mapping[str, tuple[int, int, int]] = {
    "gzip": (1, 9, -1),
    "lz4": (1, 17, 9),
    "zstd": (-131072, 22, 3),
}

Buffer = bytes | bytearray | memoryview

#: Batches whose records section is at least this large are "large" for
#: :func:`is_large_batch` (see docs/compression.md for the measurements behind it).
LARGE_BATCH_BYTES = 128 * 1024

# --- gzip -----------------------------------------------------------------------------------

_GZIP_DEFAULT = 6


def _gzip_compressor(level: int) -> Compressor:
    level = _GZIP_DEFAULT if level == -1 else level

    def compress(data: Buffer) -> bytes:
        return bytes(cramjam.gzip.compress(data, level=level))

    return compress


def gzip_decompress(data: bytes | memoryview) -> bytes:
    """Decode a gzip payload (several members back to back are one stream, as in Java)."""
    return bytes(cramjam.gzip.decompress(data))


# --- snappy (xerial framing) ----------------------------------------------------------------

XERIAL_MAGIC = b"\x82SNAPPY\x00"
#: Magic, then int32 BE version 1 and int32 BE minimum compatible version 1.
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
#: ``SnappyOutputStream``'s default block size: the input cut into 32 KiB pieces.
XERIAL_BLOCK_SIZE = 32 * 1024
_INT32_BE = struct.Struct(">i")


def snappy_compress(data: Buffer) -> bytes:
    """Encode as ``SnappyOutputStream`` does: xerial header, then length-prefixed blocks."""
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    compress_raw = cramjam.snappy.compress_raw
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(_INT32_BE.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def snappy_decompress(data: bytes | memoryview) -> bytes:
    """Decode xerial-framed snappy, or (without the magic) one raw snappy block.

    Raises:
        ProtocolError: a truncated or impossible block length.
    """
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    out = bytearray()
    pos = 0
    end = len(view)
    decompress_raw = cramjam.snappy.decompress_raw
    while pos < end:
        # A new xerial header may follow (streams written back to back); skip it.
        if end - pos >= 16 and bytes(view[pos : pos + 8]) == XERIAL_MAGIC:
            pos += 16
            continue
        if end - pos < 4:
            raise ProtocolError(f"xerial snappy block length truncated at byte {pos}")
        (size,) = _INT32_BE.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise ProtocolError(f"xerial snappy block of {size} bytes at byte {pos} is impossible")
        out += decompress_raw(view[pos : pos + size])
        pos += size
    return bytes(out)


# --- zstd -----------------------------------------------------------------------------------


def _zstd_compressor(level: int) -> Compressor:
    def compress(data: Buffer) -> bytes:
        return bytes(cramjam.zstd.compress(data, level=level))

    return compress


def zstd_decompress(data: bytes | memoryview) -> bytes:
    """Decode a zstd frame (with or without a content size, as Java's streams write)."""
    return bytes(cramjam.zstd.decompress(data))


# --- registry -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Codec:
    """One compression codec of the v2 batch format.

    Attributes:
        name: the ``compression_type`` name.
        id: the codec id in the batch attributes (bits 0-2).
        default_level: the level used when none is configured (None: no levels).
        level_range: the accepted levels, inclusive (None: no levels).
        decompress: decodes a records section this codec compressed.
    """

    name: str
    id: int
    default_level: int | None
    level_range: tuple[int, int] | None
    decompress: Decompressor
    _factory: Callable[[int], Compressor]

    def compressor(self, level: int | None = None) -> Compressor:
        """A callable compressing a records section at ``level`` (None: the default).

        Raises:
            ConfigError: a level out of range, or a level for a codec without levels.
        """
        return self._factory(self.check_level(level))

    def check_level(self, level: object) -> int:
        """The effective level for ``level`` (0 for a codec without levels).

        This is the one check of ``compression_level``; ``ProducerConfig.from_options``
        calls it too.

        Raises:
            ConfigError: not an int, a level out of range, or a level for a codec without
                levels.
        """
        if level is None:
            return 0 if self.default_level is None else self.default_level
        if isinstance(level, bool) or not isinstance(level, int):
            raise ConfigError(f"compression_level must be an int or None, got {level!r}")
        if self.level_range is None or self.default_level is None:
            raise ConfigError(
                f"compression_level is set ({level}) but compression_type {self.name!r} has "
                f"no levels (levels exist for {', '.join(COMPRESSION_LEVEL_RANGES)})"
            )
        lo, hi = self.level_range
        if not (lo <= level <= hi or level == self.default_level):
            raise ConfigError(
                f"compression_level for {self.name} must be between {lo} and {hi}, got {level}"
            )
        return level


def _no_compression(level: int) -> Compressor:
    def compress(data: Buffer) -> bytes:
        return bytes(data)

    return compress


def _identity(data: bytes | memoryview) -> bytes:
    return bytes(data)


def _levels(name: str) -> tuple[int | None, tuple[int, int] | None]:
    spec = COMPRESSION_LEVEL_RANGES.get(name)
    if spec is None:
        return None, None
    lo, hi, default = spec
    return default, (lo, hi)


def _codec(name: str, codec_id: int, decompress: Decompressor, factory: Any) -> Codec:
    default, level_range = _levels(name)
    return Codec(name, codec_id, default, level_range, decompress, factory)


CODECS: Mapping[str, Codec] = {
    c.name: c
    for c in (
        _codec("none", NONE, _identity, _no_compression),
        _codec("gzip", GZIP, gzip_decompress, _gzip_compressor),
        _codec("snappy", SNAPPY, snappy_decompress, lambda level: snappy_compress),
        _codec("lz4", LZ4, lz4_decompress, lz4_compressor),
        _codec("zstd", ZSTD, zstd_decompress, _zstd_compressor),
    )
}
_BY_ID: Mapping[int, Codec] = {c.id: c for c in CODECS.values()}

#: Codec id -> decoder, for :func:`aiokprod.protocol.record_reader.read_record_batch`.
DECOMPRESSORS: Mapping[int, Decompressor] = {
    c.id: c.decompress for c in CODECS.values() if c.id != NONE
}


def codec_for_name(name: str) -> Codec:
    """The codec called ``name`` (``none``, ``gzip``, ``snappy``, ``lz4``, ``zstd``).

    Raises:
        ConfigError: an unknown name.
    """
    codec = CODECS.get(name.lower()) if isinstance(name, str) else None
    if codec is None:
        raise ConfigError(f"compression_type must be one of {tuple(CODECS)}, got {name!r}")
    return codec


def codec_for_id(codec_id: int) -> Codec:
    """The codec with this attribute id.

    Raises:
        ProtocolError: an id Kafka does not define (5-7).
    """
    codec = _BY_ID.get(codec_id)
    if codec is None:
        raise ProtocolError(f"unknown compression codec id {codec_id}")
    return codec


def is_large_batch(uncompressed_size: int, threshold: int = LARGE_BATCH_BYTES) -> bool:
    """Whether a batch's records section is big enough that compressing it may stall a loop.

    The sender may compress such batches in a worker thread (cramjam releases the GIL)
    instead of on the event loop; see docs/compression.md for the measured costs.
    """
    return uncompressed_size >= threshold


#: Roughly how long compressing one KiB takes, in microseconds, on this project's 2-core
#: machine with JSON-like records (benchmarks/loop_lag.py; docs/compression.md). Only the order
#: of magnitude matters: it decides which batches are worth a trip to a worker thread.
_MICROS_PER_KIB: Mapping[str, Callable[[int], float]] = {
    "none": lambda level: 0.0,
    "snappy": lambda level: 1.0,
    "lz4": lambda level: 1.0 if level <= 9 else 40.0,
    "gzip": lambda level: 30.0 if level <= 6 else 60.0,
    "zstd": lambda level: 3.0 if level <= 5 else (50.0 if level <= 15 else 180.0),
}
#: A batch whose compression is expected to hold the loop longer than this goes to a thread.
OFFLOAD_BUDGET_MICROS = 2000.0
#: Below this a thread hop costs more than it saves, whatever the codec.
MIN_OFFLOAD_BYTES = 8 * 1024


def offload_threshold_bytes(name: str, level: int | None) -> int | None:
    """The uncompressed batch size from which compressing off the event loop pays, or None.

    None means never (no compression, or a codec too fast to matter at any batch size up to
    the 1 MiB request limit).
    """
    codec = codec_for_name(name)
    cost = _MICROS_PER_KIB[codec.name](codec.check_level(level))
    if cost <= 0:
        return None
    threshold = int(OFFLOAD_BUDGET_MICROS / cost * 1024)
    if threshold > 4 * 1024 * 1024:
        return None
    return max(threshold, MIN_OFFLOAD_BYTES)
