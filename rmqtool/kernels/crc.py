"""CRC32 (zlib's) of many spans of one buffer: the one loop behind every body CRC check."""
from __future__ import annotations

import zlib

import numpy as np

from rmqtool.kernels import native


def crc32_spans(buf: np.ndarray, starts, lengths, core=native.core) -> np.ndarray:
    """``zlib.crc32(buf[start:start + length])`` of every span, as uint32.

    Every span must lie inside ``buf`` (ValueError otherwise, on both paths). With the
    native ``core`` one C loop calls zlib's crc32 per span without the GIL; the numpy path
    (the reference) maps ``zlib.crc32`` over memoryview slices.
    """
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    out = np.empty(len(starts), dtype=np.uint32)
    if core is not None:
        core.crc32_spans(buf, starts, lengths, out)
        return out
    ends = starts + lengths
    bad = np.flatnonzero((starts < 0) | (lengths < 0) | (ends > len(buf)))
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"span {i} [{int(starts[i])}, +{int(lengths[i])}) is outside the {len(buf)}-byte buffer")
    spans = map(memoryview(buf).__getitem__, map(slice, starts.tolist(), ends.tolist()))
    out[:] = np.fromiter(map(zlib.crc32, spans), dtype=np.uint32, count=len(starts))
    return out
