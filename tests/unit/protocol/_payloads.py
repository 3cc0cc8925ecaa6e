"""Test payloads shared by the codec tests."""

from __future__ import annotations

import random


def text_payload(size: int, seed: int = 1) -> bytes:
    """Compressible, record-like bytes (words, numbers, some noise)."""
    rng = random.Random(seed)
    words = [b"order", b"user", b"created", b"amount", b"EUR", b"status", b"ok", b"{", b"}"]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" " + str(rng.randrange(10**6)).encode() + b","
        if rng.random() < 0.05:
            out += rng.randbytes(8)
    return bytes(out[:size])
