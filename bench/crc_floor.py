"""The same-run yardsticks every bench prints: zlib.crc32 over the CommitLog bytes, read two ways.

- ``fresh``: the files read in 64 MiB chunks, each into a fresh buffer (the baseline every bench has
  printed since the first session; a fresh buffer's page faults are part of its time);
- ``floor``: read in 1 MiB chunks into one reused buffer and hashed while the chunk is in the CPU
  cache: the fastest way found here to CRC every byte once (issue 14's "floor is the CRC").

The floor is the harder yardstick; benches print their ratio to both.
"""
from __future__ import annotations

import os
import time
import zlib

FRESH_CHUNK = 64 << 20
FLOOR_CHUNK = 1 << 20


def _fresh(paths) -> float:
    t = time.perf_counter()
    for path in paths:
        with open(path, "rb") as fh:
            crc = 0
            while chunk := fh.read(FRESH_CHUNK):
                crc = zlib.crc32(chunk, crc)
    return time.perf_counter() - t


def _floor(paths) -> float:
    view = memoryview(bytearray(FLOOR_CHUNK))
    t = time.perf_counter()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            crc, pos = 0, 0
            while n := os.preadv(fd, [view], pos):
                crc = zlib.crc32(view[:n], crc)
                pos += n
        finally:
            os.close(fd)
    return time.perf_counter() - t


def crc32_rates(paths, runs: int = 2) -> dict[str, float]:
    """MB/s of each yardstick over ``paths`` (page cache warmed first; best of ``runs``)."""
    paths = [str(p) for p in paths]
    mb = sum(os.path.getsize(p) for p in paths) / 1e6
    _fresh(paths)                                   # warm the page cache
    return {"fresh": mb / min(_fresh(paths) for _ in range(runs)),
            "floor": mb / min(_floor(paths) for _ in range(runs))}


def describe(rates: dict[str, float]) -> str:
    return (f"zlib.crc32 {rates['fresh']:.0f} MB/s (64 MiB fresh reads), "
            f"{rates['floor']:.0f} MB/s (1 MiB reads into one buffer: the floor)")
