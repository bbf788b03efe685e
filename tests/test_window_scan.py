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
