"""Files truncated, extended, replaced or deleted while rmqtool reads them.

A second process (tests/fuzz/churn.py, or ``truncate``/``rm``) changes the files for real.
The readers must never crash (no traceback, no SIGBUS: nothing is mmapped), must exit
0, 1 or 2 with a one-line error naming the file, and must never present a record that
is not on disk as valid: every MESSAGE, unit or query hit they print equals the
pristine store's.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import reference_store, run_cli

ROOT = Path(__file__).resolve().parent.parent
CHURN = ROOT / "tests" / "fuzz" / "churn.py"
KEY = "key-0011"
RECORD_FIELDS = ("phy_offset", "size", "topic", "queue_id", "queue_offset", "body_crc", "keys", "tags",
                 "uniq_key", "store_timestamp", "properties", "sys_flag", "body_length")


def _readers(store: Path) -> list[list[str]]:
    return [
        ["dump", "commitlog", store, "-f", "jsonl"],
        ["dump", "consumequeue", store, "-f", "jsonl"],
        ["dump", "index", store, "-f", "jsonl"],
        ["info", store],
        ["verify", store, "-f", "jsonl"],
        ["query-key", store, KEY, "-f", "jsonl"],
    ]


def _cli(args, timeout=120):
    return subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def _rows(out: str) -> list[dict]:
    rows = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


def _record_key(row: dict) -> tuple:
    return tuple(json.dumps(row.get(f), sort_keys=True) for f in RECORD_FIELDS)


class Pristine:
    """What the unchanged store holds: records by offset, units by (topic, queue, offset)."""

    def __init__(self, store: Path):
        res = run_cli("dump", "commitlog", store, "-f", "jsonl")
        assert res.code == 0, res.err
        self.records = {r["phy_offset"]: _record_key(r) for r in res.jsonl() if r["kind"] == "MESSAGE"}
        res = run_cli("dump", "consumequeue", store, "-f", "jsonl")
        assert res.code == 0, res.err
        self.units = {(r["topic"], r["queue_id"], r["queue_offset"]): (r["commitlog_offset"], r["size"], r["tags_code"])
                      for r in res.jsonl() if r["kind"] in ("UNIT", "PRE_BLANK")}
        assert self.records and self.units


def check_reader_result(args, proc, store: Path, pristine: Pristine) -> None:
    """The invariants every reader run must satisfy, whatever happened to the files."""
    what = " ".join(map(str, args))
    assert proc.returncode in (0, 1, 2), f"{what}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr, f"{what}: traceback\n{proc.stderr[-3000:]}"
    assert "internal error" not in proc.stderr, f"{what}: {proc.stderr[-2000:]}"
    if proc.returncode == 2:
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1, f"{what}: expected one error line\n{proc.stderr}"
        assert str(store) in errors[0], f"{what}: error does not name a file of the store: {errors[0]}"
    if args[:2] == ["dump", "commitlog"]:
        for row in _rows(proc.stdout):
            if row.get("kind") == "MESSAGE":
                assert pristine.records.get(row["phy_offset"]) == _record_key(row), \
                    f"{what}: record at {row['phy_offset']} differs from the one on disk"
    if args[:2] == ["dump", "consumequeue"]:
        for row in _rows(proc.stdout):
            if row.get("kind") in ("UNIT", "PRE_BLANK"):
                key = (row["topic"], row["queue_id"], row["queue_offset"])
                assert pristine.units.get(key) == (row["commitlog_offset"], row["size"], row["tags_code"]), \
                    f"{what}: unit {key} was never written"
    if args[0] == "query-key":
        for row in _rows(proc.stdout):
            if "phy_offset" in row:
                assert pristine.records.get(row["phy_offset"]) == _record_key(row), \
                    f"{what}: hit at {row['phy_offset']} is not the record on disk"
                keys = (row.get("keys") or "").split(" ")
                assert KEY in keys or row.get("uniq_key") == KEY


def _read_under_churn(store: Path, pristine_dir: Path, rounds: int, seed: int, kinds: str,
                      readers: list[list], check) -> int:
    """Run ``readers`` (three at a time) ``rounds`` times while churn.py changes ``store``;
    ``check(args, proc)`` judges every run. churn.py has made its first change before the first
    reader starts and stops only after the last one ended, so every run reads files that change,
    however fast or slow the machine. Returns the number of runs."""
    stop = store.with_name(store.name + ".stop-churn")
    churn = subprocess.Popen([sys.executable, str(CHURN), str(store), str(pristine_dir), str(stop), str(seed),
                              kinds], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = 0
    try:
        assert churn.stdout.readline() == "started\n", "churn.py ended before changing a file"
        with ThreadPoolExecutor(3) as pool:
            for _ in range(rounds):
                for args, proc in zip(readers, pool.map(_cli, readers)):
                    check([str(a) for a in args], proc)
                    runs += 1
    finally:
        stop.touch()
        out, err = churn.communicate(timeout=120)
    assert churn.returncode == 0, err
    actions = {k: int(v) for k, v in (kv.split("=") for kv in out.split())}
    assert sum(actions.values()) >= 1, out
    return runs


def _churn_while_reading(tmp_path, rounds: int, seed: int, kinds: str = "commitlog,consumequeue,index"):
    pristine_dir = reference_store("basic")
    store = tmp_path / "basic"
    shutil.copytree(pristine_dir, store)
    pristine = Pristine(store)
    codes = set()

    def check(args, proc):
        check_reader_result(args, proc, store, pristine)
        codes.add(proc.returncode)
    runs = _read_under_churn(store, pristine_dir, rounds, seed, kinds, _readers(store), check)
    return runs, codes


def test_readers_survive_files_changing_under_them(tmp_path):
    _churn_while_reading(tmp_path, rounds=4, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3])
def test_readers_survive_files_changing_long(tmp_path, seed):
    _churn_while_reading(tmp_path, rounds=30, seed=seed)


# --- deterministic races, each against one protection --------------------------------------------
def _truncate(path: Path, size: int) -> None:
    subprocess.run(["truncate", "-s", str(size), str(path)], check=True)


def test_commitlog_truncated_between_windows_is_an_error_naming_the_file(tmp_path):
    """The scan reads in windows; a file cut after the first window is a FileChangedError, not data."""
    from rmqtool.errors import FileChangedError
    from rmqtool.records.scan import FileScan
    path = tmp_path / "00000000000000000000"
    shutil.copy(reference_store("basic") / "commitlog" / path.name, path)
    scan = FileScan(path, 0, chunk_size=1 << 16)
    items = iter(scan)
    first = next(items)                                 # first 64 KiB window read and decoded
    assert int(first.position[-1] + first.size[-1]) <= 1 << 16
    _truncate(path, 70_000)                              # a second process cuts the file
    with pytest.raises(FileChangedError) as info:
        for batch in items:
            assert int(batch.position[-1] + batch.size[-1]) <= 70_000
    assert info.value.path == str(path) and info.value.offset is not None
    assert "shorter than expected" in str(info.value)


def test_file_deleted_after_discovery_names_the_file(tmp_path):
    from rmqtool.records.scan import walk_store
    from rmqtool.io.store import Store
    store_dir = tmp_path / "basic"
    shutil.copytree(reference_store("basic"), store_dir)
    store = Store(store_dir)
    victim = store.commitlog.files[3]
    subprocess.run(["rm", str(victim.path)], check=True)
    ends = [i for i in walk_store(store) if not hasattr(i, "columns")]
    gone = [e for e in ends if e.path == str(victim.path)]
    assert gone and gone[0].check == "commitlog.file-changed" and "vanished" in gone[0].detail


def test_dump_of_deleted_single_file_is_one_line_error(tmp_path):
    path = tmp_path / "00000000000000000000"
    shutil.copy(reference_store("basic") / "commitlog" / "00000000000000000000", path)
    res = run_cli("dump", "commitlog", path, "-f", "jsonl")
    assert res.code == 0
    path.unlink()
    res = run_cli("dump", "commitlog", path, "-f", "jsonl")
    assert res.code == 2 and res.err.splitlines()[-1].startswith("error:") and str(path) in res.err
    assert "Traceback" not in res.err


def test_index_shrunk_under_query_key(tmp_path):
    """Index files cut to their header while query-key runs: no crash, hits still confirmed."""
    store = tmp_path / "basic"
    shutil.copytree(reference_store("basic"), store)
    pristine = Pristine(store)
    for p in sorted((store / "index").iterdir())[::2]:
        _truncate(p, 40)
    args = ["query-key", str(store), KEY, "-f", "jsonl"]
    proc = _cli(args)
    check_reader_result(args, proc, store, pristine)
    assert proc.returncode == 0 and _rows(proc.stdout), proc.stderr


def test_readers_never_mmap():
    """A file shrinking under an mmap raises SIGBUS; store files are read with pread only.

    The one mmap allowed maps the ordered pool's own anonymous memfd (worker results), which no
    other process can truncate: that module must create the memfd it maps."""
    allowed = {"rmqtool/engines/ordered.py"}
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "rmqtool").rglob("*.py")
                 if re.search(r"^\s*(import mmap|from mmap )|mmap\.mmap\(", p.read_text(), re.M)]
    assert set(offenders) <= allowed, f"mmap used in {offenders}"
    for name in allowed & set(offenders):
        text = (ROOT / name).read_text()
        assert "memfd_create" in text and text.count("mmap.mmap(") == 1, name


def test_segment_deleted_between_listing_and_stat(tmp_path, monkeypatch):
    """Retention deleting a file right after the directory was listed: skipped with a warning."""
    import os as _os
    from rmqtool.io import segments
    d = tmp_path / "commitlog"
    d.mkdir()
    for start in (0, 1024, 2048):
        (d / f"{start:020d}").write_bytes(bytes(1024))
    real_scandir = _os.scandir

    def scandir_then_delete(path):
        entries = list(real_scandir(path))
        subprocess.run(["rm", str(d / f"{0:020d}")], check=True)      # a second process deletes one
        return iter(entries)
    monkeypatch.setattr(_os, "scandir", scandir_then_delete)     # the one os module segments lists with
    queue = segments.SegmentQueue.discover([d], "commitlog", 1024)
    assert [s.start for s in queue.files] == [1024, 2048]
    assert any("vanished" in p.message and p.path.endswith(f"{0:020d}") for p in queue.problems)


# --- the article's simplified store under the same churn -----------------------------------------
SIMPLIFIED_FIELDS = ("position", "size", "msg_id", "topic", "queue_offset", "body_size", "transaction_id",
                     "stored_commit_log_offset", "body")


def _simplified_key(row: dict) -> tuple:
    return tuple(row.get(f) for f in SIMPLIFIED_FIELDS)


def test_simplified_readers_survive_files_changing_under_them(tmp_path):
    """commitLog.txt, consumerQueue.txt and index.txt truncated, extended, replaced and deleted
    while dump, locate, query-key and verify read them: exit 0/1/2, one error line naming the
    file, and every record, unit or hit printed is the one written."""
    pristine_dir, store = tmp_path / "pristine", tmp_path / "store"
    assert run_cli("write", pristine_dir, "--layout", "simplified", "--synthetic", "150", "--seed", "3").code == 0
    shutil.copytree(pristine_dir, store)
    res = run_cli("dump", "commitlog", pristine_dir, "-f", "jsonl", "--body", "hex")
    records = {r["position"]: _simplified_key(r) for r in res.jsonl() if r["kind"] == "MESSAGE"}
    units = {r["queue_offset"]: (r["commit_log_offset"], r["msg_length"], r["tag_code"])
             for r in run_cli("dump", "consumequeue", pristine_dir, "-f", "jsonl").jsonl() if r["kind"] == "UNIT"}
    assert len(records) == len(units) == 150
    key = next(r["msg_id"] for r in res.jsonl() if r["kind"] == "MESSAGE")
    readers = [["dump", "commitlog", store, "-f", "jsonl", "--body", "hex"],
               ["dump", "consumequeue", store, "-f", "jsonl"], ["dump", "index", store, "-f", "jsonl"],
               ["locate", store, "20000", "-f", "jsonl"], ["locate", store, "--queue-offset", "70", "-f", "jsonl"],
               ["verify", store, "-f", "jsonl"], ["query-key", store, key, "-f", "jsonl", "--body", "hex"]]
    messages = 0

    def check(args, proc):
        nonlocal messages
        what = " ".join(args)
        assert proc.returncode in (0, 1, 2), f"{what}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, f"{what}: {proc.stderr[-3000:]}"
        if proc.returncode == 2:
            errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
            assert len(errors) == 1 and str(store) in errors[0], f"{what}: {proc.stderr}"
        for row in _rows(proc.stdout):
            if args[1] == "commitlog" and row.get("kind") == "MESSAGE" or args[0] == "query-key":
                assert records.get(row["position"]) == _simplified_key(row), \
                    f"{what}: record at {row['position']} is not the one written"
                messages += 1
            if args[1] == "consumequeue" and row.get("kind") == "UNIT":
                assert units.get(row["queue_offset"]) == (row["commit_log_offset"], row["msg_length"],
                                                          row["tag_code"]), \
                    f"{what}: unit {row['queue_offset']} was never written"
    with ThreadPoolExecutor(3) as pool:          # first once at rest: the checks see every record
        for args, proc in zip(readers, pool.map(_cli, readers)):
            check([str(a) for a in args], proc)
    assert messages == 150 + 1, messages         # dump commitlog's records and query-key's hit
    _read_under_churn(store, pristine_dir, 4, 5, "simplified", readers, check)
