"""The records every client sends: a pool of values and keys, the same for every client.

Values are printable ASCII (the Java perf tool reads them from a file, one per line): small
JSON-like events whose text comes from a vocabulary of a few hundred made-up words, so that
compression has something to do (lz4 about 0.5x, zstd about 0.4x on a 16 KiB batch) without
being trivial. They are built from a fixed seed: every process builds the same ones.
"""

from __future__ import annotations

import random
import string
from pathlib import Path

from benchmarks.settings import KEY_COUNT, VALUE_POOL

_ALPHABET = string.ascii_lowercase


def _vocabulary(rng: random.Random, count: int = 300) -> list[str]:
    return ["".join(rng.choices(_ALPHABET, k=rng.randint(3, 9))) for _ in range(count)]


def values(size: int, count: int = VALUE_POOL, seed: int = 6) -> list[bytes]:
    """``count`` distinct values of exactly ``size`` bytes (printable ASCII, no newline)."""
    rng = random.Random(seed * 1_000_003 + size)
    words = _vocabulary(rng)
    pool = []
    for i in range(count):
        head = (
            f'{{"id":{i},"user":"user-{rng.randrange(10_000):04d}",'
            f'"event":"{rng.choice(("click", "view", "buy", "scroll"))}","data":"'
        )
        filler = " ".join(rng.choices(words, k=max(size // 5, 1)))
        text = (head + filler).ljust(size - 2, "x")[: max(size - 2, 0)] + '"}'
        pool.append(text.encode("ascii")[:size].ljust(size, b"x"))
    return pool


def keys(count: int = KEY_COUNT) -> list[bytes]:
    """``count`` distinct 10-byte keys."""
    return [b"key-%06d" % i for i in range(count)]


def write_payload_file(path: Path, size: int) -> Path:
    """The value pool as a ``--payload-file`` for the Java perf tool (one value per line)."""
    path.write_bytes(b"\n".join(values(size)) + b"\n")
    return path
