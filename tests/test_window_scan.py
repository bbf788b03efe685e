"""The native window scan's memory reuse."""
from __future__ import annotations

import numpy as np

from rmqtool.records.window_scan import ArrayPool


def test_array_pool_hands_out_only_arrays_nothing_holds():
    pool = ArrayPool(keep=2)
    a = pool.take((2, 100), np.int64)
    view = a[0, :10]                       # a batch's column: a view of the matrix
    del a
    b = pool.take((2, 100), np.int64)
    assert not np.shares_memory(b, view)   # the first is still held through its view
    del b
    c = pool.take((2, 50), np.int64)       # a free one at least as large is reused
    assert c.shape == (2, 100)
    d = pool.take((2, 50), np.int64, exact=True)
    assert d.shape == (2, 50)
    del view, c
    e = pool.take((2, 100), np.int64)
    assert e.shape == (2, 100) and e.dtype == np.int64


def test_a_full_pool_replaces_its_smallest_free_array_whatever_the_shapes():
    """Full, with free arrays of different shapes: the smallest goes (found by identity; comparing
    arrays of other shapes element by element raised here once)."""
    pool = ArrayPool(keep=3)
    taken = [pool.take((2, n), np.int64) for n in (90, 30, 60)]     # the smallest not first
    del taken                                   # all three free
    held = [pool.take((2, 120), np.int64) for _ in range(2)]     # none is large enough: fresh ones
    assert [a.shape[1] for a in pool._arrays] == [90, 120, 120]  # the smallest free one went, each time
    assert all(any(a is h for a in pool._arrays) for h in held)
