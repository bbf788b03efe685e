"""SIGKILL: `rebuild` and `write` leave old-or-new, never a mix.

tests/test_rebuild.py kills `rebuild` at each named install step through the
``RMQTOOL_CRASH_AT`` hook; these tests kill real processes at arbitrary points (mid-scan,
mid-file, during the swap: `rebuild` stopped before a random one of its I/O calls by
tests/pause_at.py, so every kill lands mid-run on any machine), and `write` also at each of
its hook points, and check the state after the kill and after a re-run.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pause_at
from conftest import reference_store, run_cli, run_cli_process
from rmqtool.io.install import CRASH_ENV, WRITE_CRASH_STEPS

GEOMETRY = ["--commitlog-file-size", 1 << 16, "--cq-file-size", 800, "--index-slots", 61, "--index-entries", 350]


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def contents(root: Path, kind: str):
    """The tree, or for index/ (files named by creation time) the sorted file contents."""
    t = tree(root)
    return sorted(t.values()) if kind == "index" else t


def _spawn(args):
    return subprocess.Popen([sys.executable, "-m", "rmqtool", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _kill_at(args, call: int, state: Path):
    """SIGKILL the command while it is stopped before its ``call``-th I/O call: (exit code, stderr,
    where it stopped, "" if it never did)."""
    proc, where = pause_at.start_paused(args, call, state, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, err, where


def _leftovers(root: Path) -> list[str]:
    return [p.name for p in root.iterdir() if ".rmqtool-tmp-" in p.name or "rmqtool-install" in p.name]


# --- rebuild ------------------------------------------------------------------------------------
def _rebuild_kills(tmp_path, kind: str, rounds: int, seed: int):
    rng = random.Random(seed)
    pristine = reference_store("basic")
    new = contents(pristine / kind, kind)
    # how many I/O calls a whole run makes, to spread the kills over them
    probe = tmp_path / "probe"
    subprocess.run(["cp", "-a", str(pristine), str(probe)], check=True)
    state = tmp_path / "pause-state"
    calls = pause_at.io_calls(["rebuild", kind, probe, "--yes", "--workers", "1"], state)
    for n in range(rounds):
        root = tmp_path / f"r{n}"
        subprocess.run(["cp", "-a", str(pristine), str(root)], check=True)
        target = root / kind
        victim = sorted(p for p in target.rglob("*") if p.is_file())[rng.randrange(20)]
        victim.write_bytes(bytes([rng.randrange(1, 256)]) * victim.stat().st_size)   # damage one file
        old, commitlog = contents(target, kind), tree(root / "commitlog")
        at = rng.randint(1, calls)
        code, err, where = _kill_at(["rebuild", kind, root, "--yes", "--workers", "1"], at, state)
        assert code == -signal.SIGKILL and where, \
            f"round {n}: never stopped before I/O call {at} of {calls} (exit {code}): {where or err[-500:]}"
        now = contents(target, kind)
        assert now in (old, new), f"round {n}: {kind} is a mix after SIGKILL (exit {code})"
        assert tree(root / "commitlog") == commitlog, "rebuild changed CommitLog bytes"
        res = run_cli("rebuild", kind, root, "--yes", "--workers", "1")
        assert res.code == 0, res.err
        assert contents(target, kind) == new
        assert _leftovers(root) == []
        assert tree(root / "commitlog") == commitlog
        backups = [p for p in root.iterdir() if p.name.startswith(f"{kind}.backup-")]
        if now == old:                                    # the damaged tree is kept, never deleted
            assert any(contents(b, kind) == old for b in backups)


@pytest.mark.parametrize("kind", ["consumequeue", "index"])
def test_rebuild_killed_at_random_instants(tmp_path, kind):
    _rebuild_kills(tmp_path, kind, rounds=5, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["consumequeue", "index"])
def test_rebuild_killed_at_random_instants_long(tmp_path, kind):
    _rebuild_kills(tmp_path, kind, rounds=40, seed=2)


# --- write ----------------------------------------------------------------------------------------
def _rows(start: int, count: int, stamped: bool = False) -> str:
    """JSONL rows; ``stamped`` rows carry their times (with --no-uniq-key: a deterministic store)."""
    out = []
    for i in range(start, start + count):
        row = {"topic": f"T{i % 3}", "body": "b" * (100 + i % 50), "keys": f"wk-{i}", "queue_id": i % 2}
        if stamped:
            row["store_timestamp"] = row["born_timestamp"] = 1_700_000_000_000 + i
        out.append(json.dumps(row) + "\n")
    return "".join(out)


def _visible(root: Path) -> tuple[set, int, int]:
    """Keys of the records a reader sees, CQ units, and verify's exit code."""
    recs = run_cli("dump", "commitlog", root, "-f", "jsonl").jsonl()
    keys = {r["keys"] for r in recs if r["kind"] == "MESSAGE"}
    units = [r for r in run_cli("dump", "consumequeue", root, "-f", "jsonl").jsonl() if r["kind"] == "UNIT"]
    return keys, len(units), run_cli("verify", root, "--level", "deep", "-f", "jsonl").code


def _backups(root: Path) -> list[Path]:
    return sorted(root.parent.glob(root.name + ".backup-*"))


def _as_before(backup: Path, root: Path) -> Path:
    """The store ``backup`` was made from: the backup itself when it is a whole old root, else
    a copy of ``root`` put back with `write --undo` (the manifest form)."""
    from rmqtool.io.writebackup import MANIFEST
    if not (backup / MANIFEST).exists():
        return backup
    copy = root.parent / f"{root.name}-undone-{backup.name}"
    subprocess.run(["cp", "-a", str(root), str(copy)], check=True)
    res = run_cli("write", copy, "--undo", backup)
    assert res.code == 0, res.err
    return copy


def _commitlog_files(root: Path) -> int:
    """The most commitlog files in the store or in a stage of it (a stage vanishes when installed)."""
    most = 0
    for d in [root / "commitlog"] + [p / "commitlog" for p in root.parent.glob(root.name + ".rmqtool-tmp-*")]:
        try:
            most = max(most, len(os.listdir(d)))
        except OSError:
            pass
    return most


def _kill_while_appending(args, root: Path, grown_by: int):
    """SIGKILL as soon as ``grown_by`` new commitlog files exist (mid-append, for sure)."""
    before = len(list((root / "commitlog").iterdir()))
    proc = _spawn(args)
    while proc.poll() is None and _commitlog_files(root) < before + grown_by:
        time.sleep(0.005)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, err


def _write_kills(tmp_path, rounds: int, seed: int):
    rng = random.Random(seed)
    base = tmp_path / "base"
    first, batch, more = tmp_path / "first.jsonl", tmp_path / "batch.jsonl", tmp_path / "more.jsonl"
    first.write_text(_rows(0, 300))
    batch.write_text(_rows(300, 20000))
    more.write_text(_rows(20300, 10))
    assert run_cli("write", base, "--from", first, *GEOMETRY).code == 0
    old_keys = {f"wk-{i}" for i in range(300)}
    new_keys = {f"wk-{i}" for i in range(20300)}
    for n in range(rounds):
        root = tmp_path / f"w{n}"
        subprocess.run(["cp", "-a", str(base), str(root)], check=True)
        code, err = _kill_while_appending(["write", root, "--from", batch, *GEOMETRY], root, rng.randint(1, 20))
        assert code == -signal.SIGKILL, f"round {n}: the kill came after the write had finished"
        keys, units, verdict = _visible(root)
        state = "old" if keys == old_keys else "new" if keys == new_keys else "mix"
        assert state != "mix", f"round {n}: {len(keys)} records visible after SIGKILL (exit {code})"
        assert units == len(keys) and verdict == 0, f"round {n}: {units} units for {len(keys)} records"
        for b in _backups(root):                       # a backup gives back the complete old store
            assert _visible(_as_before(b, root)) == (old_keys, len(old_keys), 0)
        # the next write reports and cleans what the crash left, and completes
        left = _leftovers(tmp_path)
        for undone in tmp_path.glob("*-undone-*"):
            subprocess.run(["rm", "-rf", str(undone)], check=True)
        res = run_cli("write", root, "--from", more, *GEOMETRY)
        assert res.code == 0, res.err
        assert _leftovers(tmp_path) == []
        if left:
            assert "recovered:" in res.out
        keys_after, units_after, verdict_after = _visible(root)
        assert keys_after == keys | {f"wk-{i}" for i in range(20300, 20310)}
        assert units_after == len(keys_after) and verdict_after == 0


def test_write_killed_at_random_instants(tmp_path):
    _write_kills(tmp_path, rounds=3, seed=3)


@pytest.mark.slow
def test_write_killed_at_random_instants_long(tmp_path):
    _write_kills(tmp_path, rounds=25, seed=4)


def _state(root: Path):
    """Every file of the store, index files by content (their names are creation times)."""
    t = tree(root)
    index = sorted(v for k, v in t.items() if k.startswith("index" + os.sep))
    return {k: v for k, v in t.items() if not k.startswith("index" + os.sep)}, index


@pytest.fixture(scope="module")
def write_case(tmp_path_factory):
    """A store of 300 stamped rows, a 3000-row batch, and the stores the batch must produce."""
    d = tmp_path_factory.mktemp("write_case")
    first, batch, empty = d / "first.jsonl", d / "batch.jsonl", d / "empty.jsonl"
    first.write_text(_rows(0, 300, stamped=True))
    batch.write_text(_rows(300, 3000, stamped=True))
    empty.write_text("")
    args = ["--no-uniq-key", *GEOMETRY]
    assert run_cli("write", d / "base", "--from", first, *args).code == 0
    subprocess.run(["cp", "-a", str(d / "base"), str(d / "appended")], check=True)
    assert run_cli("write", d / "appended", "--from", batch, *args).code == 0
    assert run_cli("write", d / "fresh", "--from", batch, *args).code == 0
    return {"dir": d, "batch": batch, "empty": empty, "args": args, "old": _state(d / "base"),
            "new": _state(d / "appended"), "fresh": _state(d / "fresh")}


@pytest.mark.parametrize("step", WRITE_CRASH_STEPS)
def test_write_sigkill_at_every_step_leaves_old_or_new(tmp_path, write_case, step):
    c = write_case
    root = tmp_path / "store"
    subprocess.run(["cp", "-a", str(c["dir"] / "base"), str(root)], check=True)
    proc = run_cli_process("write", root, "--from", c["batch"], *c["args"], env={**os.environ, CRASH_ENV: step})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    swapped = step in ("exchanged", "moved", "backup")
    assert _state(root) == (c["new"] if swapped else c["old"])
    if step == "backup":                              # the install was complete: only the backup is whole
        assert _leftovers(tmp_path) == [] and len(_backups(root)) == 1
        assert _state(_as_before(_backups(root)[0], root)) == c["old"]
        return
    assert _leftovers(tmp_path) != []                 # the crash left a stage or a journal
    # the next run reports and cleans what the crash left, then completes
    proc = run_cli_process("write", root, "--from", c["empty"] if swapped else c["batch"], *c["args"])
    assert proc.returncode == 0, proc.stderr
    assert "recovered:" in proc.stdout
    assert _leftovers(tmp_path) == []
    assert _state(root) == c["new"]
    assert any(_state(_as_before(b, root)) == c["old"] for b in _backups(root)), "the original store was not kept"


@pytest.mark.parametrize("step", ["staged", "mid-file", "build", "built"])
def test_new_store_write_killed_leaves_nothing(tmp_path, write_case, step):
    c = write_case
    root = tmp_path / "store"
    proc = run_cli_process("write", root, "--from", c["batch"], *c["args"], env={**os.environ, CRASH_ENV: step})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert not root.exists()
    proc = run_cli_process("write", root, "--from", c["batch"], *c["args"])
    assert proc.returncode == 0, proc.stderr
    assert "recovered:" in proc.stdout
    assert _leftovers(tmp_path) == [] and _backups(root) == []
    assert _state(root) == c["fresh"]


def test_undo_killed_midway_is_finished_by_running_it_again(tmp_path, write_case):
    """`write --undo` SIGKILLed after putting back one file: run again, it finishes the rest
    (recognising the file already put back) and the store is the original."""
    c = write_case
    root = tmp_path / "store"
    subprocess.run(["cp", "-a", str(c["dir"] / "base"), str(root)], check=True)
    assert run_cli("write", root, "--from", c["batch"], *c["args"]).code == 0
    backup, = _backups(root)
    proc = run_cli_process("write", root, "--undo", backup, env={**os.environ, CRASH_ENV: "undo"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert _state(root) not in (c["old"], c["new"])      # a mix, until the undo is run again
    proc = run_cli_process("write", root, "--undo", backup)
    assert proc.returncode == 0 and "already restored" in proc.stdout, proc.stderr
    assert _state(root) == c["old"]
    assert tree(root) == tree(c["dir"] / "base")
