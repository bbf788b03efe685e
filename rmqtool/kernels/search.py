"""Sorted-array lookups: the one ``searchsorted`` behind every record, unit and key join."""
from __future__ import annotations

import numpy as np

from rmqtool.kernels import native

#: below this many values numpy's own search is as quick as a call into the native core
_NATIVE_FROM = 64


def search_sorted(a: np.ndarray, v: np.ndarray, side: str = "left", core=native.core) -> np.ndarray:
    """``numpy.searchsorted(a, v, side)`` of an ascending int64 array ``a`` (int64 answers).

    The joins look up values in nearly ascending order (offsets in CommitLog order, keys in
    record order); the native ``core`` gallops from each answer to the next, a few steps
    per value where numpy's bisection walks down from the middle of ``a`` every time.
    numpy's formulation is the reference (``tests/test_fastpath_equivalence.py``).
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', not {side!r}")
    v = np.asarray(v)
    if (core is None or len(v) < _NATIVE_FROM or a.dtype != np.int64 or v.dtype != np.int64
            or v.ndim != 1 or a.ndim != 1):
        return np.searchsorted(a, v, side=side).astype(np.int64, copy=False)
    out = np.empty(len(v), dtype=np.int64)
    core.search_sorted(np.ascontiguousarray(a), np.ascontiguousarray(v), side == "right", out)
    return out


def is_member(values: np.ndarray, pool: np.ndarray, core=native.core) -> np.ndarray:
    """``np.isin(values, pool)`` by sorting ``pool`` and searching it (numpy's hash-based unique is
    slow on millions of int64; a stable sort is quick on the nearly sorted pools of the joins)."""
    if not len(pool) or not len(values):
        return np.zeros(len(values), dtype=bool)
    s = np.sort(pool, kind="stable")
    idx = search_sorted(s, values, core=core)
    np.minimum(idx, len(s) - 1, out=idx)
    return s[idx] == values
