"""Store model: discovery, geometry, name/size/contiguity checks, multi-path, liveness."""
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import reference_store, run_cli
from rmqtool.errors import RmqError
from rmqtool.io.indexfile import infer_geometry
from rmqtool.io.store import Store


def test_geometry_inferred_from_reference_files():
    s = Store(reference_store("basic"))
    assert s.commitlog.file_size == 98304 and len(s.commitlog.files) == 38
    assert s.cq_file_size() == 800
    assert (s.index_geometry.hash_slots, s.index_geometry.index_entries) == (61, 350)
    assert not s.commitlog.problems


def test_index_geometry_inference_from_content():
    for p in Store(reference_store("mixed")).index_files():
        g = infer_geometry(p, p.stat().st_size)
        assert g is None or (g.hash_slots, g.index_entries) == (61, 350)


def test_explicit_geometry_checked_against_sizes():
    with pytest.raises(RmqError, match="index-slots"):
        Store(reference_store("basic"), index_slots=60, index_entries=350).index_geometry


def test_locate_and_multi_path(tmp_path):
    src = reference_store("basic") / "commitlog"
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    for i, f in enumerate(sorted(src.iterdir())):
        shutil.copy(f, (a if i % 2 else b) / f.name)
    s = Store(tmp_path, commitlog_dirs=f"{a},{b}")
    assert [f.name for f in s.commitlog.files] == sorted(f.name for f in src.iterdir())
    seg, pos = s.locate(98304 * 5 + 7)
    assert seg.start == 98304 * 5 and pos == 7
    assert s.locate(10 ** 12) is None


def test_layout_problems_detected(tmp_path):
    store = tmp_path / "s"
    shutil.copytree(reference_store("basic"), store)
    (store / "commitlog" / "00000000000000196608").unlink()                  # missing middle file
    with open(store / "commitlog" / "00000000000000294912", "ab") as fh:     # wrong size
        fh.write(b"x")
    (store / "commitlog" / "garbage.txt").write_text("x")
    checks = {p.check for p in Store(store).commitlog.problems}
    assert {"contiguity", "file-size", "names"} <= checks


def test_not_a_store(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(RmqError, match="not a RocketMQ store"):
        Store(tmp_path / "x")


def test_liveness_detects_a_lock_held_by_another_process(tmp_path):
    store = tmp_path / "s"
    shutil.copytree(reference_store("basic"), store)
    assert Store(store).lock_holder() is None
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(store / 'lock')!r}, os.O_RDWR)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        print("locked", flush=True)
        time.sleep(30)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert Store(store).lock_holder() == holder.pid
        info = run_cli("info", store, "-f", "jsonl").jsonl()[0]
        assert info["live"] and info["lock_holder"] == holder.pid
    finally:
        holder.kill()
        holder.wait()
    assert Store(store).lock_holder() is None
