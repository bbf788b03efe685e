"""SIGKILL from outside at random moments: `rebuild` and `write` leave old-or-new, never a mix.

tests/test_rebuild.py kills `rebuild` at each named install step through the
``RMQTOOL_CRASH_AT`` hook; these tests kill real processes at arbitrary instants
(mid-scan, mid-file, during the swap), measured against the command's own run time,
and check the state after the kill and after a re-run.
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

from conftest import reference_store, run_cli

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


def _timed(args) -> float:
    t0 = time.monotonic()
    proc = _spawn(args)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return time.monotonic() - t0


def _kill_after(args, delay: float):
    proc = _spawn(args)
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, err


def _leftovers(root: Path) -> list[str]:
    return [p.name for p in root.iterdir() if ".rmqtool-tmp-" in p.name or "rmqtool-install" in p.name]


# --- rebuild ------------------------------------------------------------------------------------
def _rebuild_kills(tmp_path, kind: str, rounds: int, seed: int):
    rng = random.Random(seed)
    pristine = reference_store("basic")
    new = contents(pristine / kind, kind)
    # how long a whole run takes here (imports included), to spread the kills over it
    probe = tmp_path / "probe"
    subprocess.run(["cp", "-a", str(pristine), str(probe)], check=True)
    span = _timed(["rebuild", kind, probe, "--yes", "--workers", "1"])
    killed_mid_run = 0
    for n in range(rounds):
        root = tmp_path / f"r{n}"
        subprocess.run(["cp", "-a", str(pristine), str(root)], check=True)
        target = root / kind
        victim = sorted(p for p in target.rglob("*") if p.is_file())[rng.randrange(20)]
        victim.write_bytes(bytes([rng.randrange(1, 256)]) * victim.stat().st_size)   # damage one file
        old, commitlog = contents(target, kind), tree(root / "commitlog")
        code, err = _kill_after(["rebuild", kind, root, "--yes", "--workers", "1"], rng.uniform(0.2, 1.05) * span)
        killed_mid_run += code == -signal.SIGKILL
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
    assert killed_mid_run >= rounds // 3, "the kills mostly came after the process had finished"


@pytest.mark.parametrize("kind", ["consumequeue", "index"])
def test_rebuild_killed_at_random_instants(tmp_path, kind):
    _rebuild_kills(tmp_path, kind, rounds=5, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["consumequeue", "index"])
def test_rebuild_killed_at_random_instants_long(tmp_path, kind):
    _rebuild_kills(tmp_path, kind, rounds=40, seed=2)


# --- write ----------------------------------------------------------------------------------------
def _rows(start: int, count: int) -> str:
    return "".join(json.dumps({"topic": f"T{i % 3}", "body": "b" * (100 + i % 50), "keys": f"wk-{i}",
                               "queue_id": i % 2}) + "\n" for i in range(start, start + count))


def _visible(root: Path) -> tuple[set, int, int]:
    """Keys of the records a reader sees, CQ units, and verify's exit code."""
    recs = run_cli("dump", "commitlog", root, "-f", "jsonl").jsonl()
    keys = {r["keys"] for r in recs if r["kind"] == "MESSAGE"}
    units = [r for r in run_cli("dump", "consumequeue", root, "-f", "jsonl").jsonl() if r["kind"] == "UNIT"]
    return keys, len(units), run_cli("verify", root, "--level", "deep", "-f", "jsonl").code


def _kill_while_appending(args, commitlog: Path, grown_by: int):
    """SIGKILL as soon as ``grown_by`` new commitlog files exist (mid-append, for sure)."""
    before = len(list(commitlog.iterdir()))
    proc = _spawn(args)
    while proc.poll() is None and len(list(commitlog.iterdir())) < before + grown_by:
        time.sleep(0.005)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, err


def _write_kills(tmp_path, rounds: int, seed: int):
    rng = random.Random(seed)
    base = tmp_path / "base"
    first, batch = tmp_path / "first.jsonl", tmp_path / "batch.jsonl"
    first.write_text(_rows(0, 300))
    batch.write_text(_rows(300, 20000))
    assert run_cli("write", base, "--from", first, *GEOMETRY).code == 0
    old_keys = {f"wk-{i}" for i in range(300)}
    new_keys = {f"wk-{i}" for i in range(20300)}
    for n in range(rounds):
        root = tmp_path / f"w{n}"
        subprocess.run(["cp", "-a", str(base), str(root)], check=True)
        code, err = _kill_while_appending(["write", root, "--from", batch, *GEOMETRY], root / "commitlog",
                                          rng.randint(1, 20))
        keys, units, verdict = _visible(root)
        state = "old" if keys == old_keys else "new" if keys == new_keys else "mix"
        assert state != "mix", f"round {n}: {len(keys)} records visible after SIGKILL (exit {code})"
        assert units == len(keys) and verdict == 0, f"round {n}: {units} units for {len(keys)} records"


@pytest.mark.xfail(strict=True, reason="write appends in place: a SIGKILL mid-run leaves a prefix of the new "
                                       "records in the CommitLog without their ConsumeQueue units (see README)")
def test_write_killed_at_random_instants(tmp_path):
    _write_kills(tmp_path, rounds=3, seed=3)
