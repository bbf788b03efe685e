"""The rmqtool writer lock: two real rmqtool processes (or rmqtool and a broker) never change one
store at the same time.

A run is caught holding the lock (its pid in the side file and the kernel's lock on ``STORE/lock``)
and stopped with SIGSTOP, so the second run meets it deterministically; it is refused (exit 3,
naming the first), the first is resumed and finishes, and the store verifies clean. A free-running
race round checks the same without the stop.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cli, run_cli_process
from rmqtool.io.liveness import lock_holder, lock_owner, read_side, side_path
from rmqtool.io.storelock import WriterLock, writer_lock
from rmqtool.errors import RefusedError

GEOMETRY = ["--commitlog-file-size", 1 << 20, "--cq-file-size", 6000, "--index-slots", 997,
            "--index-entries", 4000]
SYNTHETIC = 20_000


def _spawn(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rmqtool", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _held_by(root: Path, pid: int, timeout: float = 60.0) -> bool:
    """Wait until process ``pid`` holds the writer lock of ``root`` (side file, and the kernel's
    lock on root/lock when the root exists); False if it ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = read_side(root)
        if rec is not None and rec["pid"] == pid:
            if not (root / "lock").exists():
                return True
            owner = lock_owner(root / "lock")
            if owner is not None and owner.pid == pid:
                return True
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.002)
    return False


def _stopped_while_holding(root: Path, *args, until=lambda: True) -> subprocess.Popen:
    """Start ``rmqtool *args``; stop it once it holds the writer lock of ``root`` and ``until()``."""
    proc = _spawn(*args)
    held = _held_by(root, proc.pid)
    deadline = time.monotonic() + 60
    while held and not until() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    if not held or proc.poll() is not None or not until():
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"{args[0]} was not caught holding the writer lock (exit {proc.returncode}): {err}")
    os.kill(proc.pid, signal.SIGSTOP)
    return proc


def _resume(proc: subprocess.Popen) -> tuple[int, str, str]:
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def _deep_verify(root: Path) -> dict:
    """The deep verify summary of ``root``, which must be clean (exit 0, no error)."""
    res = run_cli("verify", root, "--level", "deep", "-f", "json")
    assert res.code == 0, res.out[-2000:] + res.err
    summary = json.loads(res.out)["summary"]
    assert summary["findings"]["error"] == 0
    return summary


def _records(root: Path) -> int:
    return _deep_verify(root)["commitlog"]["records"]


def _leftovers(parent: Path) -> list[str]:
    """Unfinished builds, journals and side files in ``parent`` and one level below."""
    names = []
    for d in [parent, *[p for p in parent.iterdir() if p.is_dir()]]:
        names += [str(p.relative_to(parent)) for p in d.iterdir()
                  if ".rmqtool-tmp-" in p.name or "rmqtool-install" in p.name or p.name.endswith(".rmqtool-lock")]
    return names


@pytest.fixture(scope="module")
def base_store(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("lockbase")
    res = run_cli_process("write", d / "store", "--synthetic", SYNTHETIC, *GEOMETRY)
    assert res.returncode == 0, res.stderr
    return d / "store"


@pytest.fixture
def store(base_store, tmp_path) -> Path:
    dest = tmp_path / "store"
    subprocess.run(["cp", "-a", str(base_store), str(dest)], check=True)
    return dest


# --- write and rebuild at once -----------------------------------------------------------------------
def test_rebuild_is_refused_while_write_runs_and_the_store_verifies_clean(store, tmp_path):
    def staged():
        return any(".rmqtool-tmp-" in p.name for p in tmp_path.iterdir())

    writer = _stopped_while_holding(store, "write", store, "--synthetic", SYNTHETIC, *GEOMETRY, until=staged)
    try:
        res = run_cli_process("rebuild", "all", store, "--yes")
        assert res.returncode == 3, res.stderr
        assert f"another rmqtool (pid {writer.pid}, `rmqtool write`)" in res.stderr
        assert "running broker" not in res.stderr
        assert staged(), "the live write's stage was removed"
    finally:
        code, out, err = _resume(writer)
    assert code == 0, err
    assert not list(tmp_path.glob("store/*.backup-*")), "a rebuild installed into the store meanwhile"
    assert _leftovers(tmp_path) == []
    _deep_verify(store)


def test_write_is_refused_while_rebuild_runs_and_the_store_verifies_clean(store, tmp_path):
    rebuild = _stopped_while_holding(store, "rebuild", "all", store, "--yes", "--workers", "1")
    try:
        res = run_cli_process("write", store, "--synthetic", 100, *GEOMETRY)
        assert res.returncode == 3, res.stderr
        assert f"another rmqtool (pid {rebuild.pid}, `rmqtool rebuild all`)" in res.stderr
    finally:
        code, out, err = _resume(rebuild)
    assert code == 0, err
    assert not list(tmp_path.glob("store.backup-*")), "a write swapped the root meanwhile"
    assert _leftovers(tmp_path) == []
    _deep_verify(store)


# --- two rebuilds, two writes ------------------------------------------------------------------------
def test_two_rebuild_all_at_once(store, tmp_path):
    first = _stopped_while_holding(store, "rebuild", "all", store, "--yes", "--workers", "1")
    try:
        res = run_cli_process("rebuild", "all", store, "--yes", "--workers", "1")
        assert res.returncode == 3, res.stderr
        assert f"another rmqtool (pid {first.pid}, `rmqtool rebuild all`)" in res.stderr
        assert "internal error" not in res.stderr
    finally:
        code, out, err = _resume(first)
    assert code == 0, err
    assert "recovered" not in out                       # nothing of the first run was taken for a crash
    assert _leftovers(tmp_path) == []
    _deep_verify(store)


def test_two_rebuild_all_racing(store, tmp_path):
    for _ in range(2):
        procs = [_spawn("rebuild", "all", store, "--yes", "--workers", "1") for _ in range(2)]
        results = [(p.wait(timeout=300), p.communicate()[1]) for p in procs]
        for code, err in results:
            assert code in (0, 3), err
            assert "internal error" not in err and "Traceback" not in err, err
        assert 0 in [code for code, _ in results]
        assert _leftovers(tmp_path) == []
    _deep_verify(store)


def test_two_writes_from_a_file_at_once(store, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"topic": "LockTopic", "body": f"m{i}", "keys": f"k{i}"}) + "\n"
                            for i in range(20_000)))
    before = _records(store)
    first = _stopped_while_holding(store, "write", store, "--from", rows,
                                   until=lambda: any(".rmqtool-tmp-" in p.name for p in tmp_path.iterdir()))
    try:
        res = run_cli_process("write", store, "--from", rows)
        assert res.returncode == 3, res.stderr
        assert f"another rmqtool (pid {first.pid}, `rmqtool write`)" in res.stderr
        assert "Bad file descriptor" not in res.stderr
    finally:
        code, out, err = _resume(first)
    assert code == 0, err
    assert _records(store) == before + 20_000
    assert _leftovers(tmp_path) == []
    _deep_verify(store)


def test_two_writes_racing_on_a_new_store(tmp_path):
    for n in range(2):
        root = tmp_path / f"new{n}"
        procs = [_spawn("write", root, "--synthetic", 3000, *GEOMETRY) for _ in range(2)]
        results = [(p.wait(timeout=300), p.communicate()[1]) for p in procs]
        for code, err in results:
            assert code in (0, 3), err
            assert "internal error" not in err and "Traceback" not in err, err
        ok = sum(code == 0 for code, _ in results)
        assert ok >= 1
        assert _records(root) == 3000 * ok
        _deep_verify(root)
    assert _leftovers(tmp_path) == []


def test_a_new_store_write_is_exclusive_before_its_root_exists(tmp_path):
    root = tmp_path / "fresh"
    first = _stopped_while_holding(root, "write", root, "--synthetic", SYNTHETIC, *GEOMETRY)
    try:
        assert not root.exists()
        res = run_cli_process("write", root, "--synthetic", 10, *GEOMETRY)
        assert res.returncode == 3, res.stderr
        assert f"another rmqtool (pid {first.pid}, `rmqtool write`)" in res.stderr
    finally:
        code, out, err = _resume(first)
    assert code == 0, err
    assert (root / "lock").read_bytes() == b"lock"          # a store write makes has the broker's lock file
    assert _leftovers(tmp_path) == []
    _deep_verify(root)


# --- a broker and rmqtool ----------------------------------------------------------------------------
BROKER = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)      # FileChannel.tryLock(0, 1, false)
    print("locked", flush=True)
    time.sleep(60)
""")


def test_a_broker_is_named_as_a_broker(store):
    broker = subprocess.Popen([sys.executable, "-c", BROKER, str(store / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert broker.stdout.readline().strip() == "locked"
        for args in (["rebuild", "all", store, "--yes"], ["write", store, "--synthetic", 10, *GEOMETRY]):
            res = run_cli_process(*args)
            assert res.returncode == 3, res.stderr
            assert f"a running broker (pid {broker.pid})" in res.stderr and "another rmqtool" not in res.stderr
        assert not side_path(store).exists()
    finally:
        broker.kill()
        broker.wait()


def test_a_broker_cannot_lock_a_store_rmqtool_is_writing(store):
    with writer_lock(store, "rmqtool rebuild all"):
        probe = subprocess.run([sys.executable, "-c", BROKER, str(store / "lock")], capture_output=True,
                               text=True, timeout=60)
        assert probe.returncode != 0 and "locked" not in probe.stdout
    assert lock_holder(store / "lock") is None and not side_path(store).exists()


# --- read-only commands on a store an rmqtool holds ---------------------------------------------------------
HOLDER = textwrap.dedent("""
    import sys, time
    from rmqtool.io.storelock import writer_lock
    with writer_lock(sys.argv[1], "rmqtool rebuild index"):
        print("locked", flush=True)
        time.sleep(60)
""")


def test_read_only_commands_work_and_name_the_rmqtool_holder(store, tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(store)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "locked"
        info = json.loads(run_cli("info", store, "-f", "json").out)[0]
        assert info["live"] and info["lock_holder"] == holder.pid
        assert info["lock_owner"] == {"kind": "rmqtool", "pid": holder.pid, "command": "rmqtool rebuild index"}
        table = run_cli("info", store)
        assert f"another rmqtool (pid {holder.pid}, `rmqtool rebuild index`)" in table.err   # stdout piped
        assert "running broker" not in table.err
        res = run_cli("verify", store, "-f", "json")
        assert res.code == 0, res.err
        summary = json.loads(res.out)["summary"]
        assert summary["live"] and summary["lock_owner"].startswith("another rmqtool")
        assert run_cli("dump", "commitlog", store, "--limit", 3, "-f", "jsonl").code == 0
        # a dry run is refused like on a live store, naming the holder; --output builds elsewhere
        res = run_cli_process("rebuild", "consumequeue", store, "--dry-run")
        assert res.returncode == 3 and f"another rmqtool (pid {holder.pid}" in res.stderr, res.stderr
        res = run_cli_process("rebuild", "index", store, "--yes", "--output", tmp_path / "elsewhere")
        assert res.returncode == 0, res.stderr
    finally:
        holder.kill()
        holder.wait()
    # a killed holder leaves its side file; it names nobody once the lock is free
    assert side_path(store).exists() and lock_holder(store / "lock") is None
    assert run_cli("info", store, "-f", "jsonl").jsonl()[0]["live"] is False
    assert run_cli_process("rebuild", "index", store, "--yes").returncode == 0
    assert not side_path(store).exists()


# --- the lock object ---------------------------------------------------------------------------------
def test_the_lock_file_is_created_with_the_broker_content_and_never_rewritten(tmp_path):
    root = tmp_path / "s"
    root.mkdir()
    with writer_lock(root, "rmqtool write"):
        assert (root / "lock").read_bytes() == b"lock"
        assert read_side(root)["command"] == "rmqtool write"
        assert lock_holder(root / "lock") is None         # this process's own lock is not "someone else"
    (root / "lock").write_bytes(b"LOCK-by-broker")
    with writer_lock(root, "rmqtool write"):
        pass
    assert (root / "lock").read_bytes() == b"LOCK-by-broker"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def test_a_second_lock_in_the_same_process_is_refused_and_a_symlinked_lock_too(tmp_path):
    root = tmp_path / "s"
    root.mkdir()
    with writer_lock(root, "rmqtool write"):
        with pytest.raises(RefusedError, match="another rmqtool"):
            WriterLock(root, "rmqtool rebuild all").acquire()
    other = tmp_path / "t"
    other.mkdir()
    (other / "lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RefusedError, match="symlink"):
        WriterLock(other, "rmqtool write").acquire()
    assert not (tmp_path / "elsewhere").exists()
    assert not side_path(other).exists()


def test_forked_children_do_not_keep_the_lock(tmp_path):
    root = tmp_path / "s"
    root.mkdir()
    ready_r, ready_w = os.pipe()
    with writer_lock(root, "rmqtool rebuild all"):
        pid = os.fork()
        if pid == 0:                                      # a worker that outlives the run
            os.write(ready_w, b"x")                       # the fork handlers have run
            time.sleep(3)
            os._exit(0)
    os.read(ready_r, 1)
    os.close(ready_r)
    os.close(ready_w)
    try:
        assert lock_holder(root / "lock") is None
        with writer_lock(root, "rmqtool write"):
            pass
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
