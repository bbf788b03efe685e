"""Seeded random byte mutator: flips, zeroed ranges, truncations, garbage, absurd sizes.

Deterministic for a given ``random.Random`` state, so a failure is replayed from
(parser, seed, input number) alone.
"""
from __future__ import annotations

import random
import struct

from formats import commitlog as cl

INT32_MAX = (1 << 31) - 1
INTERESTING = (
    0, 1, -1, 2, 7, 8, 19, 20, 40, 127, 128, 255, 256, 0x7FFF, 0x8000, 0xFFFF, 65536,
    INT32_MAX, INT32_MAX - 1, -(1 << 31), 1 << 30, 98304, 98303, 4096,
    cl.MESSAGE_MAGIC_V1, cl.MESSAGE_MAGIC_V2, cl.BLANK_MAGIC,
    (1 << 63) - 1, -(1 << 63), 1 << 40,
)
_FORMATS = {1: ">b", 2: ">h", 4: ">i", 8: ">q"}
MAX_GROWTH = 1 << 16


def _pack(value: int, width: int) -> bytes:
    fmt = _FORMATS[width]
    bits = width * 8
    value &= (1 << bits) - 1
    if value >= 1 << (bits - 1):
        value -= 1 << bits
    return struct.pack(fmt, value)


class Mutator:
    """Apply 1-4 random operations to a seed; ``hints`` are (pos, width) of real fields."""

    def __init__(self, rng: random.Random, corpus: list[bytes] | None = None):
        self.rng = rng
        self.corpus = corpus or []
        self.ops = (self.flip, self.flip, self.set_bytes, self.zero_range, self.truncate,
                    self.garbage_range, self.interesting, self.interesting, self.interesting,
                    self.hinted, self.hinted, self.hinted, self.hinted, self.insert, self.delete,
                    self.extend, self.splice, self.duplicate)

    def mutate(self, data: bytes, hints=()) -> bytes:
        buf = bytearray(data)
        self.hints = hints
        for _ in range(self.rng.randint(1, 4)):
            self.rng.choice(self.ops)(buf)
        return bytes(buf)

    # --- operations -------------------------------------------------------------------------
    def _pos(self, buf, width=1) -> int | None:
        if len(buf) < width:
            return None
        return self.rng.randrange(0, len(buf) - width + 1)

    def flip(self, buf):
        for _ in range(self.rng.randint(1, 8)):
            p = self._pos(buf)
            if p is not None:
                buf[p] ^= 1 << self.rng.randrange(8)

    def set_bytes(self, buf):
        for _ in range(self.rng.randint(1, 4)):
            p = self._pos(buf)
            if p is not None:
                buf[p] = self.rng.choice((0, 1, 2, 0x7F, 0x80, 0xFF, self.rng.randrange(256)))

    def zero_range(self, buf):
        p = self._pos(buf)
        if p is not None:
            n = min(self.rng.choice((4, 8, 20, 64, 512, 4096, len(buf))), len(buf) - p)
            buf[p:p + n] = bytes(n)

    def garbage_range(self, buf):
        p = self._pos(buf)
        if p is not None:
            n = min(self.rng.choice((1, 4, 16, 100, 1000)), len(buf) - p)
            buf[p:p + n] = self.rng.randbytes(n)

    def truncate(self, buf):
        if buf:
            del buf[self.rng.randrange(0, len(buf)):]

    def interesting(self, buf, pos=None, width=None):
        width = width or self.rng.choice((1, 2, 4, 4, 8))
        pos = self._pos(buf, width) if pos is None else pos
        if pos is None or pos + width > len(buf):
            return
        value = self.rng.choice(INTERESTING)
        if self.rng.random() < 0.3:
            value = self.rng.choice((len(buf), len(buf) - pos, value + self.rng.randint(-3, 3)))
        buf[pos:pos + width] = _pack(value, width)

    def hinted(self, buf):
        if not self.hints:
            return self.interesting(buf)
        pos, width = self.rng.choice(self.hints)
        if self.rng.random() < 0.5:
            return self.interesting(buf, pos, width)
        if pos + width <= len(buf):           # nudge the field by a small delta
            old = int.from_bytes(buf[pos:pos + width], "big", signed=True)
            buf[pos:pos + width] = _pack(old + self.rng.choice((-2, -1, 1, 2, 8, -8, 20)), width)

    def insert(self, buf):
        p = self.rng.randint(0, len(buf))
        buf[p:p] = self.rng.randbytes(self.rng.choice((1, 3, 4, 8, 20)))

    def delete(self, buf):
        p = self._pos(buf)
        if p is not None:
            del buf[p:p + self.rng.choice((1, 3, 4, 8, 20))]

    def extend(self, buf):
        n = self.rng.choice((1, 7, 20, 100, 4096))
        buf += bytes(n) if self.rng.random() < 0.5 else self.rng.randbytes(n)

    def splice(self, buf):
        if not self.corpus:
            return self.garbage_range(buf)
        other = self.rng.choice(self.corpus)
        if not other:
            return
        a = self.rng.randrange(len(other))
        chunk = other[a:a + self.rng.choice((20, 100, 1000))]
        p = self.rng.randint(0, len(buf))
        buf[p:p + len(chunk)] = chunk

    def duplicate(self, buf):
        p = self._pos(buf)
        if p is not None and len(buf) < MAX_GROWTH * 4:
            chunk = buf[p:p + self.rng.choice((8, 20, 64, 256))]
            q = self.rng.randint(0, len(buf))
            buf[q:q] = chunk
