"""Early flushes of a build's bytes (``rmqtool.io.writeback``): made while the build is written,
and a failed one is never lost: the fsync of that file before the install raises it."""
from __future__ import annotations

import errno
import os

import pytest

from rmqtool.io import install as inst
from rmqtool.io import writeback


@pytest.fixture
def small_flushes(monkeypatch):
    """An early flush every 4 KiB, the flushes counted per file (none from an earlier test in flight)."""
    writeback._idle.wait()
    monkeypatch.setattr(writeback, "EARLY_FLUSH_BYTES", 4096)
    flushed = []
    real = os.fdatasync

    def fdatasync(fd):
        flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)
    monkeypatch.setattr(writeback.os, "fdatasync", fdatasync)
    return flushed


def _write(path, chunks: int, chunk: int = 4096) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for k in range(chunks):
            inst.pwrite_all(fd, bytes([k % 251]) * chunk, k * chunk, start_writeback=True)
    finally:
        os.close(fd)


def test_bytes_written_are_flushed_early_in_the_background(tmp_path, small_flushes):
    _write(tmp_path / "a", 8)
    writeback._idle.wait()
    assert small_flushes and set(small_flushes) == {str(tmp_path / "a")}
    inst.fsync_path(tmp_path / "a")                  # nothing deferred: no error
    assert (tmp_path / "a").read_bytes() == b"".join(bytes([k]) * 4096 for k in range(8))


def test_writes_without_start_writeback_are_not_flushed(tmp_path, small_flushes):
    fd = os.open(tmp_path / "b", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        inst.pwrite_all(fd, b"x" * (1 << 16), 0)
    finally:
        os.close(fd)
    writeback._idle.wait()
    assert small_flushes == []


def test_a_failed_early_flush_is_raised_by_that_files_fsync(tmp_path, monkeypatch):
    writeback._idle.wait()
    monkeypatch.setattr(writeback, "EARLY_FLUSH_BYTES", 4096)

    def failing(fd):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(writeback.os, "fdatasync", failing)
    _write(tmp_path / "bad", 2)
    writeback._idle.wait()
    monkeypatch.undo()
    _write(tmp_path / "good", 1)
    inst.fsync_path(tmp_path / "good")               # another file: its fsync is clean
    with pytest.raises(OSError, match=r"Input/output error \(making .*bad durable\)") as err:
        inst.fsync_path(tmp_path / "bad")
    assert err.value.errno == errno.EIO
    inst.fsync_path(tmp_path / "bad")                # raised once, as the kernel reports it once


def test_fsync_tree_raises_a_failed_early_flush(tmp_path, monkeypatch):
    writeback._idle.wait()
    monkeypatch.setattr(writeback, "EARLY_FLUSH_BYTES", 4096)
    monkeypatch.setattr(writeback.os, "fdatasync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    (tmp_path / "tree").mkdir()
    _write(tmp_path / "tree" / "f", 3)
    writeback._idle.wait()
    monkeypatch.undo()
    with pytest.raises(OSError, match="full"):
        inst.fsync_tree(tmp_path / "tree")


def test_a_rebuild_flushed_after_every_write_is_upstreams_bytes(store_copy, tmp_path, monkeypatch):
    from conftest import reference_store
    from test_rebuild import GEOMETRY, index_contents, tree
    import rmqtool.ops.rebuild as rb
    from rmqtool.io.store import Store
    writeback._idle.wait()
    monkeypatch.setattr(writeback, "EARLY_FLUSH_BYTES", 1)
    root = store_copy("mixed")
    rb.rebuild_all(Store(root), GEOMETRY, cq_file_size=800, output=tmp_path / "out", workers=1)
    assert tree(tmp_path / "out" / "consumequeue") == tree(reference_store("mixed") / "consumequeue")
    assert index_contents(tmp_path / "out" / "index") == index_contents(reference_store("mixed") / "index")


def test_a_failed_early_flush_fails_the_rebuild_and_leaves_the_store_as_it_was(store_copy, monkeypatch):
    from test_rebuild import GEOMETRY, tree
    import rmqtool.ops.rebuild as rb
    from rmqtool.io.store import Store
    writeback._idle.wait()
    monkeypatch.setattr(writeback, "EARLY_FLUSH_BYTES", 1)
    monkeypatch.setattr(writeback.os, "fdatasync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "Input/output error")))
    root = store_copy("mixed")
    before = tree(root)
    with pytest.raises(OSError, match="Input/output error"):
        rb.rebuild_all(Store(root), GEOMETRY, cq_file_size=800, confirm=None, workers=1, allow_truncate=True)
    writeback._idle.wait()
    assert tree(root) == before


def test_an_early_flush_that_cannot_start_does_not_fail_the_write(tmp_path, monkeypatch):
    """No descriptor to spare for the flush: the write succeeds, the install's fsync makes it durable."""
    writeback._idle.wait()
    monkeypatch.setattr(writeback, "EARLY_FLUSH_BYTES", 4096)
    monkeypatch.setattr(writeback.os, "dup", lambda fd: (_ for _ in ()).throw(OSError(errno.EMFILE, "Too many open files")))
    _write(tmp_path / "c", 3)
    monkeypatch.undo()
    assert writeback._idle.is_set()
    inst.fsync_path(tmp_path / "c")
    assert (tmp_path / "c").read_bytes() == b"".join(bytes([k]) * 4096 for k in range(3))
