"""Every file kind made 1 TiB sparse, under every command that reads it, in a process whose address
space is limited to 1 GiB: each run ends with its documented exit code and either the right answer
or a one-line error naming the file and its size; never a traceback, a MemoryError, or a walk
through the holes (that ends by the timeout). The maxima are in docs/limits.md ("Bounded reads")."""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, reference_store

TIB = 1 << 40
#: the address space every run gets: the interpreter, numpy, pyarrow and the native core fit
#: (a normal run of each command here peaks at 40-160 MB resident), a 1 TiB allocation does not
AS_LIMIT = 1 << 30
#: generous: every run here takes about a second; walking the holes of 1 TiB takes an hour
TIMEOUT = 180
SIZE = str(TIB)

KINDS = ("checkpoint", "commitlog-first", "commitlog-last", "consumequeue", "index", "config")


def _limit_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run_limited(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, MALLOC_ARENA_MAX="2",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT, preexec_fn=_limit_address_space, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def sparse_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("bounded")
    probe = base / "probe"
    try:
        with open(probe, "wb") as fh:
            fh.truncate(TIB)
        blocks = os.stat(probe).st_blocks
    except OSError as exc:
        pytest.skip(f"the filesystem of {base} cannot hold a 1 TiB sparse file ({exc.strerror})")
    finally:
        probe.unlink(missing_ok=True)
    if blocks * 512 > 1 << 20:
        pytest.skip(f"the filesystem of {base} does not keep files sparse")
    return base


def make_store(base: Path, kind: str, tail: bool = False) -> tuple[Path, Path]:
    """A copy of the basic reference store (with a config/topics.json) whose file of ``kind`` is
    made 1 TiB sparse (``tail``: with 4 KiB of data at its very end, past the holes)."""
    root = base / f"store-{kind}{'-tail' if tail else ''}"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(reference_store("basic"), root)
    (root / "config").mkdir()
    (root / "config" / "topics.json").write_text(json.dumps(
        {"topicConfigTable": {"TopicTest": {"topicName": "TopicTest", "readQueueNums": 4, "writeQueueNums": 4}}}))
    segments = sorted((root / "commitlog").iterdir())
    target = {"checkpoint": root / "checkpoint",
              "commitlog-first": segments[0],
              "commitlog-last": segments[-1],
              "consumequeue": sorted((root / "consumequeue" / "TopicTest" / "0").iterdir())[0],
              "index": sorted((root / "index").iterdir())[0],
              "config": root / "config" / "topics.json"}[kind]
    os.truncate(target, TIB)
    if tail:
        with open(target, "r+b") as fh:
            fh.seek(TIB - 4096)
            fh.write(b"\x01" * 4096)
    return root, target


def check(res: subprocess.CompletedProcess, code: int, target: Path, needle: str | None = None) -> None:
    said = f"exit {res.returncode}\nstdout: {res.stdout[-2000:]}\nstderr: {res.stderr[-2000:]}"
    for bad in ("Traceback", "MemoryError", "internal error"):
        assert bad not in res.stderr, said
    assert res.returncode == code, said
    if code == 2:                       # one line naming the file and its size
        lines = [x for x in res.stderr.strip().splitlines() if not x.startswith('{"error"')]   # -f json: twin
        assert len(lines) == 1 and lines[0].startswith("error: "), said
        assert str(target) in lines[0] and SIZE in lines[0], said
    if needle is not None:
        assert needle in res.stdout + res.stderr, said


#: (kind, command) -> (exit code, what the output must say: a finding's check name, or None)
VERIFY = {"checkpoint": (0, "checkpoint.size"), "commitlog-first": (1, "commitlog.file-size"),
          "commitlog-last": (1, "commitlog.file-size"), "consumequeue": (1, "cq.file-size"),
          "index": (1, "index.file-size"), "config": (0, "store.config")}
DUMP = {"checkpoint": ("checkpoint", 2), "commitlog-first": ("commitlog", 0), "commitlog-last": ("commitlog", 0),
        "consumequeue": ("consumequeue", 2), "index": ("index", 2)}


@pytest.fixture(scope="module")
def stores(sparse_dir):
    """One read-only store per kind (and the tail variants), made once for the module."""
    made = {}

    def get(kind: str, tail: bool = False):
        if (kind, tail) not in made:
            made[kind, tail] = make_store(sparse_dir, kind, tail)
        return made[kind, tail]
    return get


def test_the_limit_leaves_room_for_normal_runs(tmp_path):
    """Under the same limit the commands run on the untouched store: a failure below is the
    file's doing, not the limit's."""
    for args in (["info", reference_store("basic")], ["verify", "--level", "deep", reference_store("basic")],
                 ["export", reference_store("basic"), "--to", tmp_path / "out"]):
        res = run_limited(*args)
        assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("tail", [False, True], ids=["holes", "data-at-1TiB"])
@pytest.mark.parametrize("kind", KINDS)
def test_info(stores, kind, tail):
    root, target = stores(kind, tail)
    res = run_limited("info", root)
    check(res, 0, target)
    if kind == "checkpoint":            # read from its first page, and said to be the wrong size
        assert f"checkpoint is {SIZE} bytes" in res.stderr, res.stderr      # the store summary is for people: stderr when piped


@pytest.mark.parametrize("level", ["shallow", "deep"])
@pytest.mark.parametrize("tail", [False, True], ids=["holes", "data-at-1TiB"])
@pytest.mark.parametrize("kind", KINDS)
def test_verify_reports_the_file(stores, kind, tail, level):
    root, target = stores(kind, tail)
    code, finding = VERIFY[kind]
    res = run_limited("verify", "--level", level, root, "-f", "jsonl")
    check(res, code, target)
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert any(r.get("check") == finding and r.get("file") == str(target) for r in rows), res.stdout[-3000:]


@pytest.mark.parametrize("what", ["file", "store"])
@pytest.mark.parametrize("tail", [False, True], ids=["holes", "data-at-1TiB"])
@pytest.mark.parametrize("kind", sorted(DUMP))
def test_dump(stores, kind, tail, what):
    root, target = stores(kind, tail)
    sub, code = DUMP[kind]
    res = run_limited("dump", sub, target if what == "file" else root, "-f", "jsonl")
    if code == 2 and what == "store" and kind in ("consumequeue", "index"):
        check(res, 1, target)           # the walk goes on past the file: one line naming it and its size
        line, = res.stderr.strip().splitlines()
        assert line.startswith(f"damaged: {target}@") and SIZE in line, res.stderr
        return
    check(res, code, target)
    if code == 0:                       # the CommitLog's records, up to where its data ends
        rows = [json.loads(line) for line in res.stdout.splitlines()]
        assert any(r["kind"] == "MESSAGE" for r in rows)


@pytest.mark.parametrize("tail", [False, True], ids=["holes", "data-at-1TiB"])
@pytest.mark.parametrize("kind", KINDS)
def test_export_stops_at_the_data_end(stores, kind, tail, tmp_path):
    """B4: export walked the holes (about 5 s per GiB): a 1 TiB CommitLog file took an hour and a half."""
    root, target = stores(kind, tail)
    res = run_limited("export", root, "--to", tmp_path / "out", "--format", "jsonl")
    check(res, 0, target, "exported 3000 records")


@pytest.mark.parametrize("kind", KINDS)
def test_rebuild_dry_run(stores, kind):
    root, target = stores(kind)
    check(run_limited("rebuild", "all", root, "--dry-run"), 0, target)


@pytest.mark.parametrize("kind", KINDS)
def test_write(tmp_path, sparse_dir, kind):
    """B3: write died with "internal error MemoryError" on a 1 TiB checkpoint."""
    root, target = make_store(tmp_path, kind)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"topic": "TopicTest", "body": "after the holes"}) + "\n")
    check(run_limited("write", root, "--from", rows), 0, target)
    res = run_limited("dump", "commitlog", root, "-f", "jsonl", "--topic", "TopicTest")
    assert res.stdout.count('"MESSAGE"') == 931, res.stdout[-2000:]


def test_checkpoint_is_read_within_its_page(sparse_dir):
    """The fields come from the first 4 KiB; the size is the file's (a finding, not a read). Run
    under the limit too: on a reader that loads the whole file this test must not take the machine."""
    _, target = make_store(sparse_dir, "checkpoint", tail=True)
    code = ("import json, sys; from rmqtool.io.checkpoint import read_checkpoint; "
            "v = read_checkpoint(sys.argv[1]); print(json.dumps(v.as_dict()))")
    env = dict(os.environ, MALLOC_ARENA_MAX="2",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    res = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True,
                         timeout=TIMEOUT, preexec_fn=_limit_address_space, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    values = json.loads(res.stdout)
    assert values["file_size"] == TIB
    assert values["physic_msg_timestamp"] > 0 and values["nonzero_bytes_after_fields"] == 0


def test_scan_tasks_do_not_multiply_with_holes(sparse_dir):
    """B4 at its root: the engines cut a CommitLog file into tasks only where it holds data; its
    holes (however many GiB) are one task each run of them."""
    from rmqtool.engines import plan_tasks
    from rmqtool.io.store import Store
    for tail in (False, True):
        root, _ = make_store(sparse_dir, "commitlog-first", tail)
        store = Store(root)
        tasks = plan_tasks([("s", store)])
        assert len(tasks) <= len(store.commitlog.files) + 2, len(tasks)
        assert sum(t.hi - t.lo for t in tasks) == sum(s.size for s in store.commitlog.files)


def test_oversized_config_file_is_not_loaded(sparse_dir):
    from rmqtool.io.store import MAX_CONFIG_SIZE, Store
    root, target = make_store(sparse_dir, "config")
    said = Store(root).config_file("topics.json")
    assert isinstance(said, str) and SIZE in said and str(MAX_CONFIG_SIZE) in said
    bak = target.with_name("topics.json.bak")
    bak.write_text('{"topicConfigTable": {"FromBak": {}}}')
    try:
        assert Store(root).config_file("topics.json") == {"topicConfigTable": {"FromBak": {}}}
    finally:
        bak.unlink()


@pytest.mark.parametrize("name", ["commitLog.txt", "consumerQueue.txt", "index.txt"])
def test_simplified_layout_files(tmp_path, sparse_dir, name):
    """The article's layout: each of its three files made 1 TiB sparse; its scans for stale bytes
    and stale units skip the holes."""
    root = tmp_path / "simplified"
    assert run_limited("write", root, "--layout", "simplified", "--synthetic", "10", "--seed", "7").returncode == 0
    os.truncate(root / name, TIB)
    for args in (["verify", root], *(["dump", kind, root, "--layout", "simplified", "-f", "jsonl"]
                                      for kind in ("commitlog", "consumequeue", "index"))):
        res = run_limited(*args)
        check(res, 0, root / name)
        if args[0] == "dump":
            assert len(res.stdout.splitlines()) >= 10, res.stdout[-2000:]
