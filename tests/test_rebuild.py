"""`rebuild consumequeue|index` on copies of upstream's stores: byte identity, selection,
--output, --dry-run, refusal on a live store, and SIGKILL at every install step."""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import load_answers, reference_store
from formats.consumequeue import CQ_UNIT_DTYPE
from rmqtool.errors import RefusedError
from rmqtool.io.indexfile import IndexGeometry
from rmqtool.io.install import CRASH_ENV, CRASH_STEPS
from rmqtool.ops.rebuild import rebuild_consumequeue, rebuild_index
from rmqtool.io.store import Store

GEOMETRY = IndexGeometry(61, 350)
ROOT = Path(__file__).resolve().parent.parent


def tree(path: Path) -> dict[str, str]:
    """relative path -> sha1 of every file below path."""
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def index_contents(path: Path) -> list[str]:
    """sha1 of each index file in name order (names are creation times and may differ)."""
    return [hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()]


def run_cli(*args, env=None, check=True):
    e = dict(os.environ)
    e.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args)], capture_output=True,
                          text=True, env=e, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.mark.parametrize("name", ["basic", "mixed"])
def test_rebuild_consumequeue_after_delete_is_byte_identical(store_copy, name):
    root = store_copy(name)
    want = tree(reference_store(name) / "consumequeue")
    commitlog = tree(root / "commitlog")
    import shutil
    shutil.rmtree(root / "consumequeue")
    r = rebuild_consumequeue(Store(root), cq_file_size=800)
    assert tree(root / "consumequeue") == want
    assert r.units == sum(1 for m in load_answers(name)["messages"] if m["inConsumeQueue"])
    assert tree(root / "commitlog") == commitlog
    assert not [p for p in root.iterdir() if ".rmqtool-tmp-" in p.name]


def test_rebuild_one_corrupted_queue_keeps_the_others(store_copy):
    root = store_copy("basic")
    want = tree(reference_store("basic") / "consumequeue")
    victim = root / "consumequeue" / "TopicTest" / "2" / "00000000000000000800"
    victim.write_bytes(b"\xff" * 800)
    r = rebuild_consumequeue(Store(root), topics=["TopicTest"], queues=[2])
    assert tree(root / "consumequeue") == want
    assert all(f.startswith("TopicTest/2/") for f in r.files_replaced)
    assert len(r.files_kept) == len(want) - len(r.files_replaced)
    backup = Path(r.backup)
    assert (backup / "TopicTest" / "2" / "00000000000000000800").read_bytes() == b"\xff" * 800
    # untouched queues are the same inodes (carried as hard links)
    assert os.stat(root / "consumequeue/OrderTopic/0/00000000000000000000").st_ino == \
        os.stat(backup / "OrderTopic/0/00000000000000000000").st_ino


@pytest.mark.parametrize("name", ["basic", "mixed"])
def test_rebuild_index_after_corruption_is_byte_identical(store_copy, name):
    root = store_copy(name)
    want = index_contents(reference_store(name) / "index")
    files = sorted((root / "index").iterdir())
    files[1].write_bytes(bytes(len(files[1].read_bytes())))
    files[-1].unlink()
    r = rebuild_index(Store(root), GEOMETRY)
    assert index_contents(root / "index") == want
    assert r.entries == sum(a["indexCount"] - 1 for a in load_answers(name)["indexFiles"])
    assert len(list(Path(r.backup).iterdir())) == len(files) - 1


def test_rebuild_index_from_offset_keeps_earlier_files(store_copy):
    root = store_copy("basic")
    ref = sorted((reference_store("basic") / "index").iterdir())
    ans = load_answers("basic")["indexFiles"]
    cut = ans[10]["endPhyOffset"] + 1       # files 0..10 lie wholly below
    victim = sorted((root / "index").iterdir())[15]
    victim.write_bytes(os.urandom(victim.stat().st_size))
    r = rebuild_index(Store(root), GEOMETRY, from_offset=cut)
    assert r.files_kept[:11] == [p.name for p in ref[:11]]
    assert len(r.files_replaced) == len(ref) - 11
    now = sorted((root / "index").iterdir())
    assert [p.name for p in now[:11]] == [p.name for p in ref[:11]]
    assert index_contents(root / "index") == index_contents(reference_store("basic") / "index")
    assert r.range_start == ans[10]["endPhyOffset"]


def test_output_dir_leaves_store_untouched(store_copy, tmp_path):
    root = store_copy("mixed")
    before = tree(root)
    out = tmp_path / "out"
    rebuild_consumequeue(Store(root), output=out)
    rebuild_index(Store(root), GEOMETRY, output=tmp_path / "idx")
    assert tree(root) == before
    assert tree(out) == tree(reference_store("mixed") / "consumequeue")
    assert index_contents(tmp_path / "idx") == index_contents(reference_store("mixed") / "index")
    with pytest.raises(RefusedError):
        rebuild_consumequeue(Store(root), output=out)        # not empty


def test_dry_run_writes_nothing(store_copy):
    root = store_copy("basic")
    before = tree(root)
    proc = run_cli("rebuild", "index", root, "--dry-run", "--format", "json")
    assert tree(root) == before
    assert '"dry_run": true' in proc.stdout and '"entries"' in proc.stdout


def test_crashed_store_reads_only_to_the_valid_end(store_copy):
    """CQ rebuilt from the crashed log equals what upstream's own recovery dispatched."""
    root = store_copy("crashed")
    r = rebuild_consumequeue(Store(root), cq_file_size=800)
    valid_end = load_answers("crashed")["commitlog"]["maxPhyOffset"]
    assert r.range_end == valid_end
    st = Store(root)
    for q in load_answers("crashed")["consumeQueues"]:
        qdir = root / "consumequeue" / q["topic"] / str(q["queueId"])
        raw = b"".join(p.read_bytes() for p in sorted(qdir.iterdir()))
        units = np.frombuffer(raw, CQ_UNIT_DTYPE)
        got = [[i, int(u["commitlog_offset"]), int(u["size"]), int(u["tags_code"])]
               for i, u in enumerate(units) if u["size"] > 0]
        assert got == q["entries"], (q["topic"], q["queueId"])
    assert st.commitlog.files  # commitlog still there


LOCKER = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)
    print("locked", flush=True)
    time.sleep(60)
""")


def test_refuses_a_live_store_unless_output_elsewhere(store_copy, tmp_path):
    root = store_copy("basic")
    holder = subprocess.Popen([sys.executable, "-c", LOCKER, str(root / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = tree(root)
        proc = run_cli("rebuild", "consumequeue", root, "--yes", check=False)
        assert proc.returncode == 3 and "lock" in proc.stderr
        proc = run_cli("rebuild", "index", root, "--yes", check=False)
        assert proc.returncode == 3
        assert tree(root) == before
        run_cli("rebuild", "consumequeue", root, "--yes", "--output", tmp_path / "elsewhere")
        assert tree(tmp_path / "elsewhere") == tree(reference_store("basic") / "consumequeue")
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("kind", ["consumequeue", "index"])
@pytest.mark.parametrize("step", CRASH_STEPS)
def test_sigkill_at_every_install_step_leaves_old_or_new(store_copy, kind, step):
    root = store_copy("basic")
    target = root / kind
    if kind == "consumequeue":
        victim = target / "TopicTest" / "1" / "00000000000000000000"
        victim.write_bytes(b"\x00" * 800)
        old, new = tree(target), tree(reference_store("basic") / kind)
        state = lambda: tree(target)                                    # noqa: E731
    else:
        victim = sorted(target.iterdir())[3]
        victim.write_bytes(b"\x01" * victim.stat().st_size)
        old, new = index_contents(target), index_contents(reference_store("basic") / kind)
        state = lambda: index_contents(target)                          # noqa: E731
    commitlog = tree(root / "commitlog")
    proc = run_cli("rebuild", kind, root, "--yes", env={CRASH_ENV: step}, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    now = state()
    assert now in (old, new)
    assert tree(root / "commitlog") == commitlog
    # the next run reports and cleans up what the crash left, then completes
    proc = run_cli("rebuild", kind, root, "--yes")
    assert state() == new
    assert tree(root / "commitlog") == commitlog
    leftovers = [p.name for p in root.iterdir() if ".rmqtool-tmp-" in p.name or "rmqtool-install" in p.name]
    assert leftovers == []
    assert "recovered:" in proc.stdout
    backups = [p for p in root.iterdir() if p.name.startswith(f"{kind}.backup-")]
    # the original (damaged) tree is never deleted: it is in one of the backups
    if kind == "consumequeue":
        assert any(tree(b) == old for b in backups)
    else:
        assert any(index_contents(b) == old for b in backups)


def test_corruption_mid_log_ends_the_read_like_recovery(store_copy, tmp_path):
    """A bad record in a middle file is the valid end: nothing after it is dispatched."""
    root = store_copy("basic")
    msgs = load_answers("basic")["messages"]
    victim = msgs[1000]
    seg = root / "commitlog" / f"{victim['phyOffset'] // 98304 * 98304:020d}"
    data = bytearray(seg.read_bytes())
    data[victim["phyOffset"] % 98304 + 4] ^= 0xFF          # break the magic
    seg.write_bytes(bytes(data))
    for workers in (1, 2):
        out = tmp_path / f"cq{workers}"
        r = rebuild_consumequeue(Store(root), output=out, workers=workers, allow_truncate=True)
        assert r.range_end == victim["phyOffset"] and r.end_kind == "corrupt"
        assert r.records == 1000 and r.units == 1000
        assert r.damage[0]["offset"] == victim["phyOffset"] and r.before == 3000 and r.tail_records == 1999


def test_to_offset_and_workers_agree(store_copy, tmp_path):
    root = store_copy("mixed")
    cut = load_answers("mixed")["messages"][400]["phyOffset"]
    outs = []
    for workers in (1, 2):
        out = tmp_path / f"i{workers}"
        r = rebuild_index(Store(root), GEOMETRY, to_offset=cut, output=out, workers=workers)
        assert r.range_end == cut and r.records == 400
        outs.append(index_contents(out))
    assert outs[0] == outs[1]


def test_rebuild_all_in_one_pass(store_copy, tmp_path):
    root = store_copy("mixed")
    import shutil
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    run_cli("rebuild", "all", root, "--yes", "--cq-file-size", "800", "--index-slots", "61",
            "--index-entries", "350")
    assert tree(root / "consumequeue") == tree(reference_store("mixed") / "consumequeue")
    assert index_contents(root / "index") == index_contents(reference_store("mixed") / "index")


def test_no_commitlog_is_refused_not_an_empty_rebuild(store_copy):
    root = store_copy("basic")
    import shutil
    shutil.rmtree(root / "commitlog")
    (root / "commitlog").mkdir()
    before = tree(root)
    proc = run_cli("rebuild", "consumequeue", root, "--yes", check=False)
    assert proc.returncode == 2 and "nothing to rebuild" in proc.stderr
    assert tree(root) == before


@pytest.mark.parametrize("name", ["basic", "mixed"])
@pytest.mark.parametrize("workers", [1, 2])
def test_rebuild_all_with_small_reused_scan_windows_is_byte_identical(store_copy, tmp_path, monkeypatch,
                                                                      name, workers):
    """The rebuild scan reads windows into one reused buffer: with the smallest window every
    96 KiB file takes two windows, and the output is still upstream's, byte for byte."""
    import rmqtool.ops.rebuild as rb
    monkeypatch.setattr(rb, "SCAN_WINDOW", 1)          # FileScan's minimum: 64 KiB
    root = store_copy(name)
    cq, ix = rb.rebuild_all(Store(root), GEOMETRY, cq_file_size=800, output=tmp_path / "out", workers=workers)
    assert tree(tmp_path / "out" / "consumequeue") == tree(reference_store(name) / "consumequeue")
    assert index_contents(tmp_path / "out" / "index") == index_contents(reference_store(name) / "index")
    assert cq.records == ix.records == len(load_answers(name)["messages"])


def test_dispatch_results_never_alias_the_scan_window():
    """Results must outlive the reused window they were dispatched from."""
    from rmqtool.broker.dispatch import dispatch_batch
    from rmqtool.records.scan import FileScan
    st = Store(reference_store("mixed"))
    seg = st.commitlog.files[0]
    checked = 0
    for batch in FileScan(seg.path, seg.start, chunk_size=1 << 16, reuse_buffer=True):
        d = dispatch_batch(batch)
        for name, value in vars(d).items():
            if isinstance(value, np.ndarray):
                assert not np.shares_memory(value, batch.buf), name
                checked += 1
    assert checked


def test_dispatch_results_shipped_through_a_memory_file_come_back_equal(monkeypatch):
    """Workers append their results to a memory file and send only places; what the main
    process maps back equals what was shipped (dtypes, empty arrays, several tasks per
    worker); a failed write or no file falls back to sending the objects themselves."""
    import multiprocessing as mp
    import rmqtool.ops.rebuild as rb
    from rmqtool.broker.dispatch import dispatch_batch
    from rmqtool.engines import ordered
    from rmqtool.records.scan import FileScan
    st = Store(reference_store("mixed"))
    tasks = []
    for seg in st.commitlog.files[:3]:
        tasks.append([dispatch_batch(b).compact() for b in FileScan(seg.path, seg.start, chunk_size=1 << 16)])
    tasks.append([])
    empty = dispatch_batch(next(iter(FileScan(st.commitlog.files[0].path, 0))))
    empty = type(empty)(**{k: (v[:0] if isinstance(v, np.ndarray) else v) for k, v in vars(empty).items()})
    tasks.append([empty])
    fds = [os.memfd_create("test")]
    try:
        monkeypatch.setattr(ordered, "_ship_fd", None)
        monkeypatch.setattr(ordered, "_ship_end", 0)
        ordered.init_worker(fds, mp.get_context("fork").Value("i", 0))
        shipped = [ordered.ship(rb._pack(parts)) for parts in tasks]
        assert any(isinstance(s, ordered.Shipped) for s in shipped)
        for parts, s in zip(tasks, shipped):
            back = rb._unpack(ordered.unship(s, fds))
            assert len(back) == len(parts)
            for a, b in zip(parts, back):
                for name, value in vars(a).items():
                    got = getattr(b, name)
                    if isinstance(value, np.ndarray):
                        assert got.dtype == value.dtype and got.tolist() == value.tolist(), name
                    else:
                        assert got == value, name
        monkeypatch.setattr(ordered.os, "pwrite", lambda *a: (_ for _ in ()).throw(OSError(28, "full")))
        items = rb._pack(tasks[0])
        assert ordered.ship(items) is items
    finally:
        os.close(fds[0])
    monkeypatch.setattr(ordered, "_ship_fd", None)
    items = rb._pack(tasks[0])
    assert ordered.ship(items) is items and ordered.unship(items, []) is items


@pytest.mark.parametrize("seed", range(4))
def test_results_go_again_where_the_main_process_gave_them_back(monkeypatch, seed):
    """With the pool's shared table of regions given back, a worker writes each result into the first
    gap between its regions not given back yet: a result in use is never overwritten (each maps back
    as shipped, however long it is held), space given back is written again (the memory file stays
    about the size of the results in flight, not of the run), and a result given back twice changes
    nothing."""
    import multiprocessing as mp
    import random
    from collections import deque
    from rmqtool.engines import ordered
    rng = random.Random(seed)
    for name, value in (("_ship_fd", None), ("_ship_end", 0), ("_released", None), ("_regions", []), ("_number", 0)):
        monkeypatch.setattr(ordered, name, value)
    fds = [os.memfd_create("test")]
    ctx = mp.get_context("fork")
    released = ctx.Array("q", 1, lock=False)
    try:
        ordered.init_worker(fds, ctx.Value("i", 0), released)
        held, largest, in_flight = deque(), 0, 0

        def check(shipped, arrays):
            back = ordered.unship(shipped, fds)
            assert [b.tolist() for b in back[0][1]] == [a.tolist() for a in arrays]
            assert back[0][0] == ("meta", shipped.number)
        for step in range(300):
            arrays = [np.arange(rng.randrange(0, 30000), dtype=np.int64) * (step + 1),
                      np.full(rng.randrange(0, 9000), step, np.int32), np.zeros(0, np.int16)]
            shipped = ordered.ship([(("meta", ordered._number + 1), arrays)])
            assert isinstance(shipped, ordered.Shipped) and shipped.number is not None
            held.append((shipped, arrays))
            largest = max(largest, shipped.length)
            in_flight = max(in_flight, sum(s.length for s, _ in held))
            for s, a in held:                     # nothing held was overwritten
                check(s, a)
            while len(held) > rng.randrange(1, 6):
                s, a = held.popleft()
                check(s, a)
                ordered.release(s, fds, released)
                if rng.random() < 0.2:            # given back twice: no effect
                    ordered.release(s, fds, released)
        assert released[0] == held[0][0].number - 1
        assert os.fstat(fds[0]).st_size <= in_flight + 6 * (largest + (1 << 16))
    finally:
        os.close(fds[0])


def test_fsync_tree_syncs_every_file_and_directory_once(tmp_path, monkeypatch):
    """Concurrent fsyncs, same set as one after another: every directory and regular file,
    not symlinks, not carried-over hard links with skip_linked; a failure is raised."""
    from rmqtool.io import install as inst
    root = tmp_path / "t"
    for d in ("a/0", "a/1", "b"):
        (root / d).mkdir(parents=True)
        (root / d / "f").write_bytes(b"x")
    os.link(root / "b" / "f", tmp_path / "outside")
    os.symlink(root / "a" / "0" / "f", root / "a" / "link")
    for skip in (False, True):
        seen = []
        monkeypatch.setattr(inst, "fsync_path", seen.append)
        inst.fsync_tree(root, skip_linked=skip)
        want = {root, root / "a", root / "a/0", root / "a/1", root / "b", root / "a/0/f", root / "a/1/f"}
        if not skip:
            want.add(root / "b" / "f")
        assert sorted(seen) == sorted(want)

    def fail(path):
        if path.name == "1":
            raise OSError(5, "EIO")
    monkeypatch.setattr(inst, "fsync_path", fail)
    with pytest.raises(OSError):
        inst.fsync_tree(root)
