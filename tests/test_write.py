"""`write`: round trip of upstream's stores through JSONL, appends, synthetic stores, refusal."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import load_answers, reference_store
from formats import commitlog as cl
from formats.consumequeue import CQ_UNIT_SIZE
from rmqtool.ops.dump import RecordFilter, commitlog_rows
from rmqtool.output.schema import record_to_dict
from rmqtool.ops.rebuild import rebuild_consumequeue, rebuild_index
from rmqtool.records.scan import RecordBatch, walk_store
from rmqtool.io.store import Store
from rmqtool.ops.writer import (Geometry, StoreWriter, SyntheticSpec, UniqKeyGenerator, group_batches,
                            synthetic_fields, write_rows, write_synthetic)
from rmqtool.io.indexfile import IndexGeometry

ROOT = Path(__file__).resolve().parent.parent
REF_GEOMETRY = Geometry(98304, 800, 61, 350)


def files(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


def contents(d: Path) -> list[str]:
    return [hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())]


def dump_rows(name: str):
    """What `dump commitlog --format jsonl` prints, with raw bodies and raw properties."""
    st = Store(reference_store(name))
    raw = {}
    for b in walk_store(st):
        if isinstance(b, RecordBatch):
            for i in range(len(b)):
                p = b.span("props", i)
                raw[int(b.phy_offset[i])] = None if p is None else base64.b64encode(p).decode()
    for r in commitlog_rows(st, RecordFilter(None, None, None, None, None, None), body="raw"):
        r = json.loads(json.dumps(r))          # exactly what survives JSON
        if r.get("kind") == "MESSAGE" and "properties_raw" not in r:
            r["properties_raw"] = raw[r["phy_offset"]]
        yield f"row {r.get('phy_offset')}", r


@pytest.mark.parametrize("name", ["basic", "mixed"])
def test_round_trip_reproduces_upstream_store(tmp_path, name):
    out = tmp_path / name
    s = write_rows(out, dump_rows(name), REF_GEOMETRY)
    assert s.records == len(load_answers(name)["messages"])
    ref = reference_store(name)
    assert files(out / "commitlog") == files(ref / "commitlog")          # BLANKs, batches, V2, IPv6
    assert files(out / "consumequeue") == files(ref / "consumequeue")
    assert contents(out / "index") == contents(ref / "index")


@pytest.mark.parametrize("name", ["basic", "mixed"])
def test_cli_pipeline_dump_to_write(tmp_path, name):
    """The literal pipeline `rmqtool dump commitlog REF -f jsonl | rmqtool write NEW --from -`."""
    ref = reference_store(name)
    dump = subprocess.Popen([sys.executable, "-m", "rmqtool", "dump", "commitlog", str(ref), "--format", "jsonl"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    proc = subprocess.run([sys.executable, "-m", "rmqtool", "write", str(tmp_path / "n"), "--from", "-",
                           "--commitlog-file-size", "98304", "--cq-file-size", "800", "--index-slots", "61",
                           "--index-entries", "350", "--format", "json"], stdin=dump.stdout, capture_output=True,
                          text=True, cwd=ROOT)
    dump.stdout.close()
    assert dump.wait() == 0, dump.stderr.read()
    dump.stderr.close()
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["records"] == len(load_answers(name)["messages"])
    assert files(tmp_path / "n" / "commitlog") == files(ref / "commitlog")     # byte-identical, same names
    assert files(tmp_path / "n" / "consumequeue") == files(ref / "consumequeue")
    assert contents(tmp_path / "n" / "index") == contents(ref / "index")


def test_batches_are_detected_from_rows():
    groups = [len(g) for g in group_batches(dump_rows("mixed"))]
    puts = load_answers("mixed")["messages"]
    assert sum(groups) == len(puts)
    assert sorted(g for g in groups if g > 1) == [5, 9, 10, 12, 12, 13]


def test_append_in_two_calls_equals_one_call(tmp_path):
    spec = SyntheticSpec(3000, topics=3, queues=2, key_cardinality=50, body_min=0, body_max=900,
                         seed=7, start_ms=1_700_000_000_000)
    geometry = Geometry(65536, 400, 13, 101)
    whole = tmp_path / "whole"
    write_synthetic(whole, spec, geometry)
    parts = tmp_path / "parts"
    items = list(synthetic_fields(spec))
    w = StoreWriter(parts, geometry)
    w.append_all(items[:1234])
    w.close()
    w = StoreWriter(parts)                       # geometry inferred from the store
    w.append_all(items[1234:])
    w.close()
    assert files(parts / "commitlog") == files(whole / "commitlog")
    assert files(parts / "consumequeue") == files(whole / "consumequeue")
    assert contents(parts / "index") == contents(whole / "index")


def test_synthetic_store_is_consistent_with_rebuild(tmp_path):
    root = tmp_path / "s"
    s = write_synthetic(root, SyntheticSpec(5000, key_cardinality=700, seed=3, start_ms=1_700_000_000_000),
                        Geometry(1 << 20, 2000, 97, 1500))
    assert s.records == 5000 and s.cq_units == 5000
    assert s.index_entries == 5000 + 5000 + 2500        # UNIQ_KEY + bk + order on odd messages
    cq, idx = files(root / "consumequeue"), contents(root / "index")
    rebuild_consumequeue(Store(root), output=tmp_path / "cq")
    rebuild_index(Store(root), IndexGeometry(97, 1500), output=tmp_path / "idx")
    assert files(tmp_path / "cq") == cq
    assert contents(tmp_path / "idx") == idx
    # every file but the last ends in a BLANK, and records decode
    ends = [e for e in walk_store(Store(root)) if not isinstance(e, RecordBatch)]
    assert all(e.kind == "blank" for e in ends[:-1]) and ends[-1].kind == "zero"
    first = next(b for b in walk_store(Store(root)) if isinstance(b, RecordBatch))
    assert 400 <= int(first.body_len[0]) <= 600
    assert first.properties(1)["KEYS"] == "bk-1 order-0"


def test_minimal_rows_get_broker_defaults(tmp_path):
    rows = [("a", {"topic": "T", "body": "hello"}), ("b", {"topic": "T", "body": "x", "queue_id": 1}),
            ("c", {"topic": "T", "body": "y", "tags": "TagA", "keys": "k1 k2"}),
            ("d", {"topic": "T" * 130, "body": "", "born_host": "[::1]:9"})]
    root = tmp_path / "m"
    write_rows(root, rows, Geometry(1 << 16, 200, 7, 50))
    recs = [record_to_dict(b, i) for b in walk_store(Store(root)) if isinstance(b, RecordBatch) for i in range(len(b))]
    assert [r["queue_offset"] for r in recs] == [0, 0, 1, 0]
    assert all(len(r["uniq_key"]) == 32 for r in recs)
    assert recs[2]["tags_code"] == 2598919 and recs[2]["keys"] == "k1 k2"
    assert recs[3]["version"] == 2 and recs[3]["sys_flag"] & cl.BORNHOST_V6_FLAG
    assert recs[0]["body_crc"] == __import__("zlib").crc32(b"hello") & 0x7FFFFFFF
    cp = (root / "checkpoint").read_bytes()
    assert len(cp) == 4096 and int.from_bytes(cp[:8], "big") == recs[-1]["store_timestamp"]


def test_uniq_key_format():
    g = UniqKeyGenerator(ip=bytes([10, 1, 2, 3]), pid=4660, salt=0xCAFEBABE)
    a, b = g.next(1_717_200_000_000), g.next(1_717_200_000_001)
    assert len(a) == 32 and a.isupper() and a[:8] == "0A010203" and a[8:12] == "1234" and a[12:20] == "CAFEBABE"
    assert int(b[-4:], 16) == int(a[-4:], 16) + 1
    from rmqtool.records.ids import decode_uniq_key
    info = decode_uniq_key(a, 1_717_200_000_000)
    assert info["timestamp"] == 1_717_200_000_000 and info["pid"] == 4660


def test_bad_rows_are_usage_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rmqtool", "write", str(tmp_path / "x"), "--from", "-"],
                          input='{"body": "no topic"}\n', capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "topic" in proc.stderr and "Traceback" not in proc.stderr


LOCKER = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
    fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)
    print("locked", flush=True)
    time.sleep(60)
""")


def test_refuses_when_a_broker_holds_the_lock(store_copy):
    root = store_copy("basic")
    before = files(root)
    holder = subprocess.Popen([sys.executable, "-c", LOCKER, str(root / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = subprocess.run([sys.executable, "-m", "rmqtool", "write", str(root), "--synthetic", "10"],
                              capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 3, proc.stderr
        assert files(root) == before
    finally:
        holder.kill()
        holder.wait()


def test_lossy_or_inflated_bodies_are_refused(tmp_path):
    from rmqtool.errors import UsageError
    with pytest.raises(UsageError, match="lossy"):
        write_rows(tmp_path / "a", [("r1", {"topic": "T", "body": "\ufffd", "body_length": 1})])
    with pytest.raises(UsageError, match="inflated"):
        write_rows(tmp_path / "b", [("r1", {"topic": "T", "body": "aGVsbG8=", "body_encoding": "base64",
                                            "body_length": 3, "compression": "zlib", "sys_flag": 1})])


# --- crash-safe staging (the SIGKILL tests are in tests/test_crash_safety.py) ----------------------
def _tree_with_inodes(d: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(d)): (hashlib.sha1(p.read_bytes()).hexdigest(), p.stat().st_ino)
            for p in sorted(d.rglob("*")) if p.is_file()}


def _store_bytes(d: Path) -> dict[str, str]:
    """Every file's bytes (a sparse hole reads as zeros) and every directory, by path."""
    out = {}
    for p in sorted(d.rglob("*")):
        out[str(p.relative_to(d))] = hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def test_append_backup_holds_the_changed_bytes_and_undo_restores_the_store(store_copy, tmp_path):
    """The backup is a manifest and the old bytes of what the write changed; `write --undo`
    puts the store back byte for byte (two appends undone in reverse order)."""
    from conftest import run_cli
    from rmqtool.io.writebackup import MANIFEST, SAVED
    root = store_copy("basic")
    before = _store_bytes(root)
    s = write_rows(root, [("r1", {"topic": "TopicTest", "body": "new", "queue_id": 1, "keys": "fresh"})],
                   REF_GEOMETRY)
    assert s.backup and Path(s.backup).name.startswith("basic.backup-") and s.recovered == []
    first = Path(s.backup)
    assert sorted(os.listdir(first)) == sorted([MANIFEST, SAVED])
    manifest = json.loads((first / MANIFEST).read_text())
    changed = {f["path"] for f in manifest["files"]}
    assert "checkpoint" in changed and any(k.startswith("commitlog") for k in changed)
    assert any(k.startswith(os.path.join("consumequeue", "TopicTest", "1")) for k in changed)
    after_first = _store_bytes(root)
    assert after_first != before
    s2 = write_rows(root, [("r2", {"topic": "NewTopic", "body": "more", "queue_id": 3})], REF_GEOMETRY)
    second = Path(s2.backup)
    assert any(f["path"].startswith(os.path.join("consumequeue", "NewTopic")) and not f["existed"]
               for f in json.loads((second / MANIFEST).read_text())["files"])
    # the first write's backup cannot be applied over the second write: refused, nothing changed
    after_second = _store_bytes(root)
    r = run_cli("write", root, "--undo", first)
    assert r.code == 3 and "changed since the write" in r.err and r.err.count("\n") == 1, r.err
    assert _store_bytes(root) == after_second
    r = run_cli("write", root, "--undo", second)
    assert r.code == 0, r.err
    assert _store_bytes(root) == after_first
    r = run_cli("write", root, "--undo", first)
    assert r.code == 0, r.err
    assert _store_bytes(root) == before
    r = run_cli("write", root, "--undo", first)              # again: nothing left to do
    assert r.code == 0 and "already restored" in r.out, r.err
    assert _store_bytes(root) == before
    assert [p.name for p in tmp_path.iterdir() if ".rmqtool-tmp-" in p.name or "install" in p.name] == []


def test_backup_is_proportional_to_the_change(tmp_path):
    """100 messages appended to a store whose last CommitLog file holds ~4 MB and whose open
    index file holds 30k entries: the backup stays under 1 MiB (it used to copy both files)."""
    from conftest import run_cli
    root = tmp_path / "s"
    g = ["--commitlog-file-size", 8 << 20, "--index-slots", 5000, "--index-entries", 100_000]
    assert run_cli("write", root, "--synthetic", 12000, *g).code == 0
    assert (root / "commitlog" / f"{0:020d}").stat().st_blocks * 512 > 4 << 20
    before = _store_bytes(root)
    r = run_cli("write", root, "--synthetic", 100, "--seed", 2, "-f", "json")
    assert r.code == 0, r.err
    backup = Path(json.loads(r.out)[0]["backup"])
    used = sum(p.stat().st_blocks * 512 for p in backup.rglob("*") if p.is_file())
    assert used < 1 << 20, used
    assert json.loads(r.out)[0]["backup_bytes"] == used
    assert run_cli("write", root, "--undo", backup).code == 0
    assert _store_bytes(root) == before


def test_open_index_file_is_appended_to_without_being_loaded(tmp_path):
    """Appending keys to an existing, not full index file reads only the slot pages the keys
    reach and writes only those slots, the new entries and the header: the file is the same
    as appending with the whole file loaded."""
    from rmqtool.broker.dispatch import IndexBuilder, IndexFileWriter, SLOT_PAGE, extend_index_image, \
        open_index_image, read_index_image, build_index_image
    slots, entries = 64 * SLOT_PAGE, 50_000
    rng = np.random.default_rng(5)
    old = build_index_image(rng.integers(0, 1 << 31, 40_000), np.arange(40_000) * 100, np.full(40_000, 10**12),
                            slots, entries)
    path = tmp_path / "ix"
    with open(path, "wb") as fh:
        old.write_to(fh.fileno())
    keys, phy = rng.integers(0, 1 << 31, 30), 4_000_000 + np.arange(30) * 100
    ts = np.full(30, 10**12 + 5000)
    expected = extend_index_image(read_index_image(path, slots, entries), keys, phy, ts).to_bytes()
    image, pages = open_index_image(path, slots, entries)
    assert len(image.entries) == 0
    written = []
    out = IndexFileWriter(path, IndexGeometry(slots, entries), pages, on_write=lambda o, n: written.append((o, n)))
    b = IndexBuilder(slots, entries, lambda im: None, open_image=image, open_file=lambda: out, load_slots=pages.load)
    b.add(keys, phy, ts, phy)
    b.finish()
    assert path.read_bytes() == expected
    assert int(pages._loaded.sum()) <= 30 < len(pages._loaded)
    assert sum(n for _, n in written) < 30 * (20 + 4 * 17) + 40


@pytest.mark.parametrize("fold_keys", [700, 1_000_000])
def test_appending_to_an_open_index_file_equals_the_whole_file_path(tmp_path, fold_keys):
    """The fast path (``open_index_image``: slot pages read as keys reach them across folds,
    only touched slots written) against the reference (the file loaded whole, images written by
    ``to_bytes``), through a fill of the open file and a spill into a new one: the same bytes."""
    from rmqtool.broker.dispatch import IndexBuilder, IndexFileWriter, SLOT_PAGE, build_index_image, \
        open_index_image, read_index_image
    slots, entries = 16 * SLOT_PAGE, 50_000
    geometry = IndexGeometry(slots, entries)
    rng = np.random.default_rng(7)
    old = build_index_image(rng.integers(0, 1 << 31, 40_000), np.arange(40_000) * 100,
                            10**12 + np.arange(40_000), slots, entries)
    path = tmp_path / "open"
    with open(path, "wb") as fh:
        old.write_to(fh.fileno())
    n = 25_000                                    # 9,999 fill the open file, the rest start a new one
    keys = rng.integers(-(1 << 31), 1 << 31, n)
    phy = 4_000_000 + np.arange(n) * 100
    ts = 10**12 + 50_000 + np.arange(n)

    reference = []
    b = IndexBuilder(slots, entries, reference.append, open_image=read_index_image(path, slots, entries),
                     fold_keys=fold_keys)
    for at in range(0, n, 3_000):
        b.add(keys[at:at + 3_000], phy[at:at + 3_000], ts[at:at + 3_000], phy[at:at + 3_000])
    b.finish()
    assert len(reference) == 2

    image, pages = open_index_image(path, slots, entries)
    outs = iter([IndexFileWriter(path, geometry, pages), IndexFileWriter(tmp_path / "new", geometry)])
    b = IndexBuilder(slots, entries, lambda im: None, open_image=image, open_file=lambda: next(outs),
                     load_slots=pages.load, fold_keys=fold_keys)
    for at in range(0, n, 3_000):
        b.add(keys[at:at + 3_000], phy[at:at + 3_000], ts[at:at + 3_000], phy[at:at + 3_000])
    b.finish()
    assert path.read_bytes() == reference[0].to_bytes()
    assert (tmp_path / "new").read_bytes() == reference[1].to_bytes()


@pytest.mark.parametrize("name", ["basic", "crashed", "mixed", "propcrc-lmq-batchcq"])
def test_queue_tail_is_read_units_end(name, tmp_path):
    """write's ``queue_tail`` (one file at a time, none past the end) finds the end and the largest
    unit end ``read_units`` finds, also with the logical end cut into the middle of a queue."""
    import shutil
    from rmqtool.io.consumequeue import queue_tail, read_units
    root = tmp_path / name
    shutil.copytree(reference_store(name), root)
    st = Store(root)
    refs = list(st.queues())
    assert refs
    cut = st.queue(refs[0].topic, refs[0].queue_id).files[0].path      # a unit of zeros: the end moves there
    with open(cut, "r+b") as fh:
        fh.seek(CQ_UNIT_SIZE)
        fh.write(bytes(CQ_UNIT_SIZE))
    for ref in refs:
        q = st.queue(ref.topic, ref.queue_id)
        units = read_units(ref.topic, ref.queue_id, q)
        real = units.units[~units.pre_blank]
        max_phy = int((real["commitlog_offset"] + real["size"]).max()) if len(real) else 0
        assert queue_tail(q) == (units.end_queue_offset, max_phy), ref


def test_a_failed_write_changes_nothing(store_copy, tmp_path):
    from rmqtool.errors import UsageError
    root = store_copy("basic")
    before = files(root)
    rows = [("r1", {"topic": "T", "body": "fine"})] * 50 + [("r51", {"topic": "../x", "body": "bad"})]
    with pytest.raises(UsageError):
        write_rows(root, rows, REF_GEOMETRY)
    assert files(root) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["basic"]       # no stage, no backup
    with pytest.raises(UsageError):
        write_rows(tmp_path / "new", rows, REF_GEOMETRY)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["basic"]


def test_the_store_lock_is_held_while_writing(store_copy):
    from rmqtool.io.liveness import lock_holder
    root = store_copy("basic")
    w = StoreWriter(root, REF_GEOMETRY)
    try:
        probe = subprocess.run([sys.executable, "-c", "import sys; from rmqtool.io.liveness import lock_holder; "
                                "print(lock_holder(sys.argv[1]))", str(root / "lock")],
                               capture_output=True, text=True, cwd=ROOT)
        assert probe.stdout.strip() == str(os.getpid())        # a broker could not start meanwhile
        w.append_all(synthetic_fields(SyntheticSpec(10, start_ms=1_700_000_000_000)))
    finally:
        w.close()
    assert lock_holder(root / "lock") is None


def test_a_store_path_given_as_symlink_is_staged_beside_its_target(tmp_path):
    real = tmp_path / "disk" / "store"
    write_rows(real, [("r1", {"topic": "T", "body": "a"})], REF_GEOMETRY)
    (tmp_path / "link").symlink_to(real)
    s = write_rows(tmp_path / "link", [("r2", {"topic": "T", "body": "b"})], REF_GEOMETRY)
    assert (tmp_path / "link").is_symlink() and Path(s.backup).parent == real.parent
    assert sum(1 for b in walk_store(Store(real)) if isinstance(b, RecordBatch) for _ in range(len(b))) == 2


def test_copy_sparse_keeps_bytes_and_holes(tmp_path):
    from rmqtool.io.install import copy_sparse, make_private
    src = tmp_path / "f"
    with open(src, "wb") as fh:
        fh.truncate(64 << 20)
        fh.seek(0)
        fh.write(b"head" * 1000)
        fh.seek(40 << 20)
        fh.write(b"tail" * 1000)
    copy_sparse(src, tmp_path / "g")
    assert (tmp_path / "g").read_bytes() == src.read_bytes()
    assert (tmp_path / "g").stat().st_blocks * 512 < 4 << 20          # the holes stayed holes
    os.link(src, tmp_path / "h")
    make_private(tmp_path / "h")
    assert (tmp_path / "h").stat().st_ino != src.stat().st_ino and (tmp_path / "h").read_bytes() == src.read_bytes()


def test_write_finishes_an_interrupted_rebuild_inside_the_store(store_copy):
    root = store_copy("basic")
    stale = root / "consumequeue.rmqtool-tmp-20200101T000000000000Z"
    stale.mkdir()
    (stale / "junk").write_bytes(b"x")
    s = write_rows(root, [("r1", {"topic": "TopicTest", "body": "x"})], REF_GEOMETRY)
    assert any("consumequeue.rmqtool-tmp-" in note for note in s.recovered)
    assert not (root / stale.name).exists() and not (Path(s.backup) / stale.name).exists()


def test_summary_says_what_the_backup_holds(tmp_path):
    """A one-message append: the summary names the files the backup lists and its size on disk."""
    from rmqtool.io.writebackup import MANIFEST
    root = tmp_path / "s"
    write_rows(root, [("row 0", {"topic": "T", "body": "a"})], Geometry(8192, 400, 13, 101))
    summary = write_rows(root, [("row 1", {"topic": "T", "body": "b"})], Geometry(8192, 400, 13, 101))
    assert summary.backup
    listed = json.loads((Path(summary.backup) / MANIFEST).read_text())["files"]
    assert summary.backup_files == len(listed) >= 2          # at least the commitlog file and the checkpoint
    assert summary.backup_bytes == sum(os.lstat(p).st_blocks * 512 for p in Path(summary.backup).iterdir()) > 0
    assert any(f["path"].startswith("commitlog") for f in listed)


def test_undo_refuses_what_is_not_a_write_backup(store_copy, tmp_path):
    """`write --undo`: a directory without a manifest, a torn manifest, --undo with --from: one
    line naming the file, exit 2, the store unchanged."""
    from conftest import run_cli
    from rmqtool.io.writebackup import MANIFEST
    root = store_copy("basic")
    before = _store_bytes(root)
    empty = tmp_path / "nothing"
    empty.mkdir()
    r = run_cli("write", root, "--undo", empty)
    assert r.code == 2 and r.err.count("\n") == 1 and str(empty) in r.err and MANIFEST in r.err, r.err
    s = write_rows(root, [("r1", {"topic": "TopicTest", "body": "x"})], REF_GEOMETRY)
    after = _store_bytes(root)
    manifest = Path(s.backup) / MANIFEST
    manifest.write_text(manifest.read_text()[:100])
    r = run_cli("write", root, "--undo", s.backup)
    assert r.code == 2 and r.err.count("\n") == 1 and str(manifest) in r.err and "Traceback" not in r.err, r.err
    r = run_cli("write", root, "--undo", s.backup, "--synthetic", 1)
    assert r.code == 2 and "--undo" in r.err
    assert _store_bytes(root) == after != before


def test_a_backup_that_cannot_be_reduced_stays_whole(store_copy, monkeypatch):
    """The store is the new one once swapped in: a failure while reducing the backup (a full
    disk) is a warning, and the backup stays the whole old root."""
    import errno
    from rmqtool.io import writebackup
    root = store_copy("basic")
    before = files(root)

    def full(*_):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(writebackup, "shrink", full)
    s = write_rows(root, [("r1", {"topic": "TopicTest", "body": "x"})], REF_GEOMETRY)
    assert any("whole old store root" in w for w in s.warnings)
    assert files(Path(s.backup)) == before
