"""Java ``String.hashCode`` over UTF-16 code units, vectorized (the scalar form: ``javastring``).

Used for the ConsumeQueue tagsCode and the IndexFile key hash (format.md §4.2, §5.2).
"""
from __future__ import annotations

import numpy as np

from rmqtool.kernels import native
from rmqtool.kernels.gather import length_groups, span_matrix

from rmqtool.kernels.javastring import (INT_MIN, index_key_hash, index_slot,  # noqa: F401
                                        java_bytes_hash, java_string_hash, tags_code, utf16_units)


# --- vectorized ---------------------------------------------------------------------------
def _pow31_table(n: int) -> np.ndarray:
    """31**i mod 2**32 for i < n (uint32 wrap-around is the modulus)."""
    table = np.full(max(n, 1), 31, dtype=np.uint32)
    table[0] = 1
    return np.cumprod(table, dtype=np.uint32)


_POW31 = _pow31_table(1 << 16)


def pow31(n: np.ndarray) -> np.ndarray:
    """31**n mod 2**32 for non-negative n (uint32)."""
    n = np.asarray(n, dtype=np.int64)
    if n.size and int(n.max()) >= len(_POW31):
        return np.array([pow(31, int(x), 1 << 32) for x in n], dtype=np.uint32)
    return _POW31[n]


def hash_spans(blob: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """hashCode of many ASCII byte spans of ``blob`` at once (uint32 wrapping Horner).

    h(s) = sum(c[j] * 31**(L-1-j)) mod 2**32. Spans may have length 0. Callers route
    non-ASCII spans through ``java_bytes_hash``.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(starts)
    out = np.zeros(n, dtype=np.uint32)
    if n == 0:
        return out.view(np.int32)
    total = int(lengths.sum())
    if total == 0:
        return out.view(np.int32)
    owner = np.repeat(np.arange(n), lengths)
    first = np.cumsum(lengths) - lengths
    pos_in_span = np.arange(total) - first[owner]
    byte_idx = starts[owner] + pos_in_span
    weights = pow31(lengths[owner] - 1 - pos_in_span)
    with np.errstate(over="ignore"):
        contrib = blob[byte_idx].astype(np.uint32) * weights
    nonempty = lengths > 0
    sums = np.add.reduceat(contrib, first[nonempty]) if nonempty.any() else np.zeros(0, np.uint32)
    out[nonempty] = sums.astype(np.uint32)
    return out.view(np.int32)


def combine_hash(prefix_hash: np.ndarray, suffix_hash: np.ndarray, suffix_units: np.ndarray) -> np.ndarray:
    """hashCode(a + b) from hashCode(a), hashCode(b) and len(b) in UTF-16 units."""
    with np.errstate(over="ignore"):
        h = (np.asarray(prefix_hash).astype(np.int64).astype(np.uint32) * pow31(suffix_units)
             + np.asarray(suffix_hash).astype(np.int64).astype(np.uint32))
    return h.astype(np.uint32).view(np.int32)


def index_key_hash_array(hashes: np.ndarray) -> np.ndarray:
    """Vectorized indexKeyHash: abs with Integer.MIN_VALUE -> 0 (int32 in, int32 out)."""
    h = np.asarray(hashes, dtype=np.int32).astype(np.int64)
    h = np.abs(h)
    h[h == (1 << 31)] = 0
    return h.astype(np.int32)


# --- spans of one buffer (UTF-8 bytes) ----------------------------------------------------


def span_hashes(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, core=native.core, known=None
                ) -> tuple[np.ndarray, np.ndarray]:
    """(Java hashCode int32, length in UTF-16 units) of every byte span decoded as UTF-8.

    ``known`` (int64 per span, e.g. a native scan's ``RecordBatch.hashes``): hashes already made of
    ASCII spans (>= 0; their units are their lengths) and -1 where not; only the others are hashed.

    With the native ``core``: one C loop hashes every span as ASCII and marks those with a
    byte >= 0x80, which are hashed from the decoded string as below.

    Spans are grouped by length (``gather.length_groups``); each group's bytes are copied out in
    one gather as a (spans, length) matrix, transposed, and hashed column by column (Horner
    in uint32); spans containing bytes >= 0x80 are recomputed with the scalar hash of the
    decoded string. Many distinct or long lengths fall back to a flat gather of all span
    bytes (``_span_hashes_flat``).
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.maximum(np.asarray(lengths, dtype=np.int64), 0)
    n = len(starts)
    if known is not None and len(known) == n and n:
        rest = np.flatnonzero(known < 0)
        hashes = known.astype(np.uint32)
        units = lengths.copy()
        if len(rest):
            h, u = span_hashes(buf, starts[rest], lengths[rest], core)
            hashes[rest], units[rest] = h.view(np.uint32), u
        return hashes.view(np.int32), units
    if n == 0 or not lengths.any():
        return np.zeros(n, np.int32), lengths.copy()
    if core is not None:
        hashes = np.empty(n, dtype=np.uint32)
        high = np.empty(n, dtype=np.uint8)
        core.java_hash_spans(buf, np.ascontiguousarray(starts), np.ascontiguousarray(lengths), hashes, high)
        units = lengths.copy()
        _fix_non_ascii(buf, starts, lengths, np.flatnonzero(high), hashes, units)
        return hashes.view(np.int32), units
    groups = length_groups(lengths)
    if groups is None:
        return _span_hashes_flat(buf, starts, lengths)
    hashes = np.zeros(n, dtype=np.uint32)
    high = np.zeros(n, dtype=bool)
    thirty_one = np.uint32(31)
    with np.errstate(over="ignore"):
        for length, rows in groups:
            if length == 0:
                continue
            cols = np.ascontiguousarray(span_matrix(buf, starts if rows is None else starts[rows], length).T)
            h = np.zeros(cols.shape[1], dtype=np.uint32)
            for j in range(length):
                h *= thirty_one
                h += cols[j]
            seen = cols.max(axis=0) >= 0x80
            if rows is None:
                hashes, high = h, seen
            else:
                hashes[rows] = h
                high[rows] = seen
    units = lengths.copy()
    _fix_non_ascii(buf, starts, lengths, np.flatnonzero(high), hashes, units)
    return hashes.view(np.int32), units


def _fix_non_ascii(buf, starts, lengths, rows, hashes, units) -> None:
    for i in rows.tolist():
        raw = buf[starts[i]:starts[i] + lengths[i]].tobytes()
        text = raw.decode("utf-8", "replace")
        hashes[i] = java_bytes_hash(raw) & 0xFFFFFFFF
        units[i] = len(text.encode("utf-16-le", "surrogatepass")) // 2


def _span_hashes_flat(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
    """span_hashes over one flat gather of every span byte (any lengths)."""
    n = len(starts)
    hashes = np.zeros(n, dtype=np.uint32)
    units = lengths.copy()
    total = int(lengths.sum())
    owner = np.repeat(np.arange(n), lengths)
    first = np.cumsum(lengths) - lengths
    pos = np.arange(total, dtype=np.int64) - first[owner]
    data = buf[starts[owner] + pos]
    weights = pow31(lengths[owner] - 1 - pos)
    with np.errstate(over="ignore"):
        contrib = data.astype(np.uint32) * weights
    nonempty = np.flatnonzero(lengths > 0)
    hashes[nonempty] = np.add.reduceat(contrib, first[nonempty])
    high = np.maximum.reduceat(data, first[nonempty]) >= 0x80
    _fix_non_ascii(buf, starts, lengths, nonempty[high], hashes, units)
    return hashes.view(np.int32), units
