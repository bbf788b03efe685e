"""The native window scan's memory reuse."""
from __future__ import annotations

import numpy as np
import pytest

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


# --- a window's pieces read ahead by a second thread (fileio.READ_AHEAD) ---------------------------

def _walk(root, read_ahead: bool, monkeypatch, **kw) -> list:
    """Every batch's columns and every FileEnd of a store walk, with read-ahead on or off."""
    from rmqtool.io import fileio
    from rmqtool.io.store import Store
    from rmqtool.records.scan import RecordBatch, walk_store
    monkeypatch.setattr(fileio, "READ_AHEAD", read_ahead)
    out = []
    for item in walk_store(Store(root), check_crc=True, **kw):
        if isinstance(item, RecordBatch):
            out.append((item.path, item.buf_base, bytes(item.buf),
                        {k: np.asarray(v).tolist() for k, v in sorted(item.columns.items())}))
        else:
            out.append(item)
    return out


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed"])
@pytest.mark.parametrize("chunk", [1 << 16, 3 << 16])
def test_read_ahead_gives_the_walk_the_reference_reads_give(name, chunk, monkeypatch):
    """Windows of several pieces (``PIECE`` made small), so the reader thread runs; the same batches
    and ends as the caller reading each piece itself."""
    from conftest import reference_store
    from rmqtool.records import window_scan
    monkeypatch.setattr(window_scan, "PIECE", 1 << 12)
    want = _walk(reference_store(name), False, monkeypatch, chunk_size=chunk)
    assert _walk(reference_store(name), True, monkeypatch, chunk_size=chunk) == want


class _Flaky:
    """A file handle whose reads fail past ``fail_at`` (a file that shrank under the reader)."""
    remote = None

    def __init__(self, data: bytes, fail_at: int):
        self.data, self.fail_at, self.reads = data, fail_at, []

    def read_into(self, view, pos):
        from rmqtool.errors import FileChangedError
        self.reads.append((pos, len(view)))
        if pos + len(view) > self.fail_at:
            raise FileChangedError("file shorter than expected", "f", self.fail_at)
        view[:] = self.data[pos:pos + len(view)]


@pytest.mark.parametrize("read_ahead", [False, True])
def test_a_failed_piece_is_raised_where_its_bytes_are_needed_and_not_before(read_ahead, monkeypatch):
    from rmqtool.errors import FileChangedError
    from rmqtool.io import fileio
    from rmqtool.records.window_scan import _Pieces
    monkeypatch.setattr(fileio, "READ_AHEAD", read_ahead)
    data = bytes(range(256)) * 64                    # 16 KiB: 16 pieces of 1 KiB
    window = memoryview(bytearray(len(data)))
    fh = _Flaky(data, fail_at=5 * 1024)
    pieces = _Pieces(fh, window, 0, 1024)
    try:
        assert pieces.through(1024) >= 1024
        assert pieces.through(5 * 1024) >= 5 * 1024        # the reader may have failed further on
        assert bytes(window[:5 * 1024]) == data[:5 * 1024]
        with pytest.raises(FileChangedError):
            pieces.through(6 * 1024)
    finally:
        pieces.close()
    assert [p for p, _ in fh.reads] == [k * 1024 for k in range(6)]   # in order, one piece at a time


def test_close_stops_the_reader_before_the_window_is_reused(monkeypatch):
    from rmqtool.io import fileio
    from rmqtool.records.window_scan import _Pieces
    monkeypatch.setattr(fileio, "READ_AHEAD", True)
    data = bytes(1 << 20)
    fh = _Flaky(data, fail_at=len(data))
    pieces = _Pieces(fh, memoryview(bytearray(len(data))), 0, 4096)
    pieces.through(4096)
    pieces.close()
    n = len(fh.reads)
    assert pieces._thread is None and len(fh.reads) == n      # nothing reads after close


def _read_ahead_here() -> bool:
    from rmqtool.io import fileio
    return fileio.READ_AHEAD


def test_pool_workers_read_their_own_pieces(monkeypatch):
    """A pool worker's walks take no second thread: the pool gives every CPU a walk."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from rmqtool.engines.interrupts import start_worker
    from rmqtool.io import fileio
    monkeypatch.setattr(fileio, "READ_AHEAD", True)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"), initializer=start_worker) as pool:
        assert pool.submit(_read_ahead_here).result() is False
