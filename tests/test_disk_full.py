"""A full disk never blocks a store: the write fails with one line naming the path (exit 2), the
build and journal are gone, the store is as it was, and the next run works once space is back."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import reference_store, run_cli


def _tree(path):
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _state(store):
    """The queues by path, the index files by content (a rebuilt file is named by its creation time)."""
    return _tree(store / "consumequeue"), sorted(_tree(store / "index").values())


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(mnt, leave: int):
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    with open(mnt / "filler", "wb") as fh:
        os.posix_fallocate(fh.fileno(), 0, max(free - leave, 1))


@pytest.mark.parametrize("leave", [64 << 10, 400 << 10])
def test_rebuild_on_a_full_disk(small_fs, leave):
    store = small_fs / "s"
    shutil.copytree(reference_store("basic"), store)
    before = _state(store)
    _fill(small_fs, leave)
    r = subprocess.run([sys.executable, "-m", "rmqtool", "rebuild", "all", str(store), "--yes"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "No space left on device" in r.stderr and "internal error" not in r.stderr
    assert sorted(os.listdir(small_fs)) == ["filler", "s"]
    assert not [n for n in os.listdir(store) if "rmqtool" in n]        # no build or journal left
    assert _state(store) == before      # as it was (an install that finished holds the same bytes)
    os.unlink(small_fs / "filler")
    r = run_cli("rebuild", "all", store, "--yes")
    assert r.code == 0, r.err


@pytest.mark.parametrize("leave", [400 << 10, 1800 << 10])
def test_write_on_a_full_disk(small_fs, leave):
    """`write` that runs out of space: one line, exit 2, nothing left beside or inside the
    store, the store as it was; once there is space the same write works."""
    store = small_fs / "s"
    shutil.copytree(reference_store("basic"), store)
    before = _tree(store)
    _fill(small_fs, leave)
    argv = ["write", str(store), "--synthetic", "20000"]
    r = subprocess.run([sys.executable, "-m", "rmqtool", *argv], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "No space left on device" in r.stderr and "internal error" not in r.stderr
    assert r.stderr.startswith(f"error: {small_fs}/")            # names what it was writing
    assert sorted(os.listdir(small_fs)) == ["filler", "s"]
    assert _tree(store) == before
    os.unlink(small_fs / "filler")
    r = run_cli("write", store, "--synthetic", "2000")
    assert r.code == 0, r.err


def test_export_on_a_full_disk(small_fs):
    """`export` out of space: one line naming the destination, exit 2, no parts left."""
    pytest.importorskip("pyarrow")
    _fill(small_fs, 600 << 10)
    out = small_fs / "out"
    r = subprocess.run([sys.executable, "-m", "rmqtool", "export", str(reference_store("basic")), "--to", str(out),
                        "--body", "raw"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"error: {out}") and "Traceback" not in r.stderr
    assert sorted(os.listdir(small_fs)) == ["filler"]


def test_an_incomplete_journal_from_an_older_run_is_cleaned(store_copy):
    """An empty journal (older versions wrote it in place; a full disk left 0 bytes) and a stray
    build: the next run says so, removes both and rebuilds."""
    from rmqtool.io.install import journal_path
    root = store_copy("basic")
    journal = journal_path(root / "consumequeue")
    journal.write_bytes(b"")
    (root / "consumequeue.rmqtool-tmp-20260101T000000000000Z").mkdir()
    r = run_cli("rebuild", "consumequeue", root, "--yes")
    assert r.code == 0, r.err
    assert "incomplete install journal" in r.out and "unfinished build" in r.out
    assert not journal.exists() and not list(root.glob("*.rmqtool-tmp-*"))
