"""The native window scan's memory reuse and the sparse-file skip of ``first_nonzero``."""
from __future__ import annotations

import os

import numpy as np

from rmqtool.io.fileio import first_nonzero
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


def test_first_nonzero_skips_holes_and_finds_data_after_them(tmp_path):
    path = tmp_path / "sparse"
    with open(path, "wb") as fh:
        fh.write(b"\x01" + bytes(4095))
        fh.truncate(64 << 20)             # a hole to the end
    assert first_nonzero(path, 1) is None
    with open(path, "r+b") as fh:
        fh.seek(40 << 20)
        fh.write(b"\x00\x00\x07")          # data after the hole
    assert first_nonzero(path, 1) == (40 << 20) + 2
    assert first_nonzero(path, 0) == 0
    assert first_nonzero(path, 1, hi=40 << 20) is None
    assert os.path.getsize(path) == 64 << 20
