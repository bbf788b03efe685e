"""The numpy kernels every bulk reader shares, one copy each: byte gathers at many
positions (as matrices or as records of a dtype), span rows of a few widths.

Nothing here knows a format: callers pass positions, widths and dtypes derived from
``formats``. Each is the fastest variant measured on the bulk paths (the scan, dispatch,
verify, the Arrow form, the simplified reader).
"""
from __future__ import annotations

import numpy as np


def strided_view(buf: np.ndarray, dtype) -> np.ndarray:
    """Every byte position of ``buf`` as the start of one ``dtype`` item (overlapping items, stride 1).

    Fancy-indexing this 1-D view copies one whole item per position (a memcpy each), several
    times faster than indexing the rows of a 2-D ``sliding_window_view``.
    """
    dt = np.dtype(dtype)
    if not buf.flags.c_contiguous:
        buf = np.ascontiguousarray(buf)
    return np.ndarray((len(buf) - dt.itemsize + 1,), dtype=dt, buffer=buf, strides=(1,))


def _clip_positions(pos: np.ndarray, limit: int) -> np.ndarray:
    pos = np.asarray(pos, dtype=np.int64)
    if len(pos) and (int(pos.min()) < 0 or int(pos.max()) > limit):
        pos = np.clip(pos, 0, limit)
    return pos


def gather_bytes(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """(n, width) uint8 matrix of the bytes at each position (positions clipped into buf)."""
    limit = len(buf) - width
    if limit < 0:
        buf = np.concatenate([buf, np.zeros(-limit, dtype=np.uint8)])
        limit = 0
    pos = _clip_positions(pos, limit)
    return strided_view(buf, f"V{width}")[pos].view(np.uint8).reshape(-1, width)


def gather_ints(buf: np.ndarray, pos: np.ndarray, dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    limit = len(buf) - dt.itemsize
    if limit < 0:
        buf = np.concatenate([buf, np.zeros(-limit, dtype=np.uint8)])
        limit = 0
    return strided_view(buf, dt)[_clip_positions(pos, limit)].astype(np.int64)


def span_rows(buf: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """(k, width) uint8 copy of ``buf[start:start + width]`` per start; bytes past the end read as 0."""
    starts = np.asarray(starts, dtype=np.int64)
    n = len(buf)
    over = starts + width > n
    if not over.any():
        return strided_view(buf, f"V{width}")[starts].view(np.uint8).reshape(-1, width)
    lo = int(starts[over].min())
    tail = np.zeros(n - lo + width, dtype=np.uint8)
    tail[:n - lo] = buf[lo:]
    rows = np.empty((len(starts), width), dtype=np.uint8)
    if not over.all():
        rows[~over] = strided_view(buf, f"V{width}")[starts[~over]].view(np.uint8).reshape(-1, width)
    rows[over] = strided_view(tail, f"V{width}")[starts[over] - lo].view(np.uint8).reshape(-1, width)
    return rows


def row_width(lengths: np.ndarray, minimum: int, steps: int = 1) -> np.ndarray:
    """Row width >= each length that groups spans into a few matrix shapes.

    With ``steps`` 1 the power of two at or above the length; with 2 or 4 that octave is cut
    into as many equal widths (less padding to copy and search, a few more shapes).
    Lengths up to 64 KiB are looked up in a table built once per (minimum, steps).
    """
    lengths = np.asarray(lengths)
    if len(lengths) and 0 <= int(lengths.min()) and int(lengths.max()) < _WIDTH_TABLE_SIZE:
        table = _WIDTH_TABLES.get((minimum, steps))
        if table is None:
            table = _WIDTH_TABLES[(minimum, steps)] = _compute_row_width(np.arange(_WIDTH_TABLE_SIZE), minimum, steps)
        return table[lengths]
    return _compute_row_width(lengths, minimum, steps)


_WIDTH_TABLE_SIZE = 1 << 16
_WIDTH_TABLES: dict = {}


def _compute_row_width(lengths: np.ndarray, minimum: int, steps: int) -> np.ndarray:
    w = np.maximum(lengths, minimum).astype(np.int64)
    top = (1 << np.ceil(np.log2(w)).astype(np.int64)).astype(np.int64)
    if steps == 1:
        return top
    q = np.maximum(top // (2 * steps), 1)
    return (w + q - 1) // q * q


def distinct_widths(widths: np.ndarray) -> list[int]:
    """Sorted distinct values of a few small non-negative ints (``np.unique`` without its hash table)."""
    if not len(widths):
        return []
    lo, hi = int(widths.min()), int(widths.max())
    if hi - lo > 1 << 20:
        return np.unique(widths).tolist()
    return (np.flatnonzero(np.bincount(widths - lo)) + lo).tolist()


def gather_records(buf: np.ndarray, pos: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Records of ``dtype`` at byte positions ``pos`` (every position inside ``buf``)."""
    return np.ascontiguousarray(strided_view(buf, dtype)[np.asarray(pos, dtype=np.int64)]).reshape(-1)


def span_matrix(buf: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """(len(starts), length) uint8: the bytes buf[s:s + length] of every start, in one gather.
    Every span must lie inside buf (IndexError otherwise, never a read outside it)."""
    if length <= 0 or len(buf) < length:
        if len(starts) and length > 0:
            raise IndexError("span past the end of the buffer")
        return np.zeros((len(starts), max(length, 0)), dtype=np.uint8)
    # every position of buf as one item of `length` bytes: the gather copies whole items
    return strided_view(buf, f"V{length}")[starts].view(np.uint8).reshape(len(starts), length)


def length_groups(lengths: np.ndarray, max_groups: int = 64, max_length: int = 512):
    """[(length, rows)] of non-negative lengths, rows ascending (None: all rows share the
    length); None when there are more than ``max_groups`` lengths or one is longer than
    ``max_length``. Lengths are counted with a bincount and rows found with one stable
    (radix) sort of 16-bit lengths, not one pass over all rows per length."""
    top = int(lengths.max())
    if top > max_length:
        return None
    counts = np.bincount(lengths, minlength=top + 1)
    distinct = np.flatnonzero(counts)
    if len(distinct) > max_groups:
        return None
    if len(distinct) == 1:
        return [(int(distinct[0]), None)]
    order = np.argsort(lengths.astype(np.uint16), kind="stable")
    ends = np.cumsum(counts[distinct])
    return [(int(length), order[end - int(counts[length]):end])
            for length, end in zip(distinct.tolist(), ends.tolist())]
