"""Mutated copies of the reference stores: flips, zeroed ranges, truncations, garbage, absurd sizes.

`dump`, `verify`, `query-key` and `rebuild --dry-run` must exit 0, 1 or 2, never with a
traceback or an internal error, within a time bound, and must not change a byte of the
store they read.
"""
from __future__ import annotations

import hashlib
import random
import shutil
import signal
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import STORE_NAMES, reference_store, run_cli, run_cli_process
from fuzz import seeds as sd
from fuzz.mutate import Mutator

TIME_BOUND = 90          # seconds per command on a 4 MB store (normal runs take ~1 s)


class Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise Hang()


def store_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _hints(kind: str, data: bytes):
    if kind == "commitlog":
        return sd.record_hints(data)
    if kind == "index" and len(data) >= 40:
        return sd.index_hints(data)
    return []


def mutate_store(root: Path, rng: random.Random) -> list[str]:
    """Mutate 1-3 files of the store in place; returns what was done (for the failure message)."""
    files = {kind: sorted(p for p in (root / kind).rglob("*") if p.is_file())
             for kind in ("commitlog", "consumequeue", "index")}
    files["checkpoint"] = [root / "checkpoint"] if (root / "checkpoint").is_file() else []
    done = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choices(["commitlog", "consumequeue", "index", "checkpoint"], [4, 2.5, 2.5, 1])[0]
        if not files[kind]:
            continue
        path = rng.choice(files[kind])
        data = path.read_bytes()
        mutated = Mutator(rng).mutate(data, _hints(kind, data))
        path.write_bytes(mutated)
        done.append(f"{path.relative_to(root)} {len(data)}->{len(mutated)}")
    return done


@lru_cache(maxsize=None)
def a_key(name: str) -> str:
    res = run_cli("dump", "commitlog", reference_store(name), "-f", "jsonl")
    return next(r["keys"].split()[0] for r in res.jsonl() if r.get("keys"))


def commands(root: Path, name: str) -> list[list]:
    return [
        ["dump", "commitlog", root, "-f", "jsonl"],
        ["dump", "consumequeue", root, "-f", "jsonl"],
        ["dump", "index", root, "-f", "jsonl"],
        ["dump", "checkpoint", root, "-f", "jsonl"],
        ["verify", root, "-f", "jsonl"],
        ["verify", root, "--level", "deep", "-f", "jsonl"],
        ["query-key", root, a_key(name), "-f", "jsonl"],
        ["rebuild", "consumequeue", root, "--dry-run", "--workers", "1", "-f", "jsonl"],
        ["rebuild", "index", root, "--dry-run", "--workers", "1", "-f", "jsonl"],
    ]


def check_outcome(args, code, err, what):
    assert code in (0, 1, 2), f"{what}: {args[:2]} exit {code}\n{err[-2000:]}"
    assert "Traceback" not in err and "internal error" not in err, f"{what}: {args[:2]}\n{err[-3000:]}"
    if code == 2:
        assert [ln for ln in err.splitlines() if ln.startswith("error:")], f"{what}: {args[:2]} no error line\n{err}"


def run_bounded(args):
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_BOUND)
    try:
        return run_cli(*args)
    except Hang:
        pytest.fail(f"{args[:2]} did not finish within {TIME_BOUND} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _campaign(tmp_path, name: str, copies: int, seed: int):
    for n in range(copies):
        rng = random.Random(f"{seed}:{name}:{n}")
        root = tmp_path / f"{name}-{n}"
        shutil.copytree(reference_store(name), root)
        done = mutate_store(root, rng)
        before = store_digest(root)
        what = f"{name} copy {n} (seed {seed}; {'; '.join(done)})"
        for args in commands(root, name):
            res = run_bounded(args)
            check_outcome(args, res.code, res.err, what)
        assert store_digest(root) == before, f"{what}: a reader changed the store"
        shutil.rmtree(root)


@pytest.mark.parametrize("name", STORE_NAMES)
def test_mutated_reference_stores(tmp_path, name):
    _campaign(tmp_path, name, copies=3, seed=11)


@pytest.mark.slow
@pytest.mark.parametrize("name", STORE_NAMES)
def test_mutated_reference_stores_long(tmp_path, name):
    _campaign(tmp_path, name, copies=40, seed=12)


def test_mutated_store_in_real_processes(tmp_path):
    """The same through the installed entry point, with a process-level time bound."""
    root = tmp_path / "basic"
    shutil.copytree(reference_store("basic"), root)
    done = mutate_store(root, random.Random(99))
    for args in commands(root, "basic")[::2]:
        proc = run_cli_process(*args, timeout=TIME_BOUND)
        check_outcome(args, proc.returncode, proc.stderr, "; ".join(done))


def test_absurd_total_size_in_store(tmp_path):
    """A TOTALSIZE of 2^31-1 mid-store: a finding/END row, exit 0/1, and the walk stops there."""
    import struct
    root = tmp_path / "basic"
    shutil.copytree(reference_store("basic"), root)
    seg = sorted((root / "commitlog").iterdir())[2]
    data = bytearray(seg.read_bytes())
    struct.pack_into(">i", data, 0, (1 << 31) - 1)
    seg.write_bytes(bytes(data))
    res = run_bounded(["dump", "commitlog", root, "-f", "jsonl"])
    check_outcome(["dump"], res.code, res.err, "absurd")
    ends = [r for r in res.jsonl() if r["kind"] == "END" and r["file"] == str(seg)]
    assert ends and ends[0]["end"] == "torn" and ends[0]["position"] == 0
    res = run_bounded(["verify", root, "-f", "jsonl"])
    check_outcome(["verify"], res.code, res.err, "absurd")
    assert res.code == 1


@pytest.mark.parametrize("text", ['{"topicConfigTable": [{"a": 1}]}', '[1, 2]', '{"topicConfigTable": 5}',
                                  '{"topicConfigTable": {"T": {}}', '\xff\xfe', ''])
def test_damaged_topics_json(tmp_path, text):
    """config/topics.json names topics for query-key; a damaged one must not crash anything."""
    root = tmp_path / "basic"
    shutil.copytree(reference_store("basic"), root)
    (root / "config").mkdir()
    (root / "config" / "topics.json").write_text(text, encoding="latin-1")
    for args in (["query-key", root, a_key("basic"), "-f", "jsonl"], ["info", root], ["verify", root, "-f", "jsonl"]):
        res = run_bounded(args)
        check_outcome(args, res.code, res.err, text)
    assert run_bounded(["query-key", root, a_key("basic"), "-f", "jsonl"]).jsonl()
