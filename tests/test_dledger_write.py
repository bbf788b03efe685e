"""`write --layout dledger` writes a DLedger-mode store in upstream's exact bytes: the
upstream-written DLedger store's messages written again give its data files, entry index,
checkpoint, currterm, ConsumeQueues and IndexFiles byte for byte."""
from __future__ import annotations

import json

from conftest import dledger_store, run_cli, run_cli_process

GEOMETRY = ["--commitlog-file-size", 98304, "--index-entries", 350, "--index-slots", 61, "--cq-file-size", 800]


def _files(root):
    return {str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file()}


def test_dump_then_write_dledger_gives_upstreams_bytes(tmp_path):
    src = dledger_store()
    dump = run_cli("dump", "commitlog", src, "-f", "jsonl", "--body", "raw")
    assert dump.code == 0
    (tmp_path / "rows.jsonl").write_text(dump.out)
    r = run_cli("write", tmp_path / "s", "--from", tmp_path / "rows.jsonl", "--layout", "dledger", *GEOMETRY)
    assert r.code == 0, r.err
    ours, theirs = _files(tmp_path / "s"), _files(src)
    member = [k for k in theirs if k.startswith("dledger-n0/")]
    assert set(member) <= set(ours)
    for rel in member + [k for k in theirs if k.startswith("consumequeue/")]:
        assert ours[rel].read_bytes() == theirs[rel].read_bytes(), rel
    assert [p.read_bytes() for _, p in sorted((k, v) for k, v in ours.items() if k.startswith("index/"))] == \
           [p.read_bytes() for _, p in sorted((k, v) for k, v in theirs.items() if k.startswith("index/"))]


def test_synthetic_dledger_store_verifies_clean_and_rebuilds_identically(tmp_path):
    store = tmp_path / "s"
    r = run_cli("write", store, "--synthetic", 2500, "--layout", "dledger", "--body-size", "100-3000", *GEOMETRY)
    assert r.code == 0, r.err
    assert len(list((store / "dledger-n0" / "data").iterdir())) > 5     # files ending in the DLedger blank
    v = run_cli("verify", store, "--level", "deep", "-f", "json")
    assert v.code == 0, json.loads(v.out)["findings"]
    assert json.loads(v.out)["summary"]["commitlog"]["records"] == 2500
    out = tmp_path / "rebuilt"
    assert run_cli("rebuild", "all", store, "--output", out).code == 0
    for rel, p in _files(store / "consumequeue").items():
        assert (out / "consumequeue" / rel).read_bytes() == p.read_bytes(), rel
    text = (store / "dledger-n0" / "checkpoint").read_text()
    assert text == "committedIndex=2499\nendIndex=2499\n"


def test_write_dledger_makes_new_stores_only(tmp_path):
    store = tmp_path / "s"
    assert run_cli("write", store, "--synthetic", 10).code == 0
    r = run_cli_process("write", store, "--synthetic", 10, "--layout", "dledger")
    assert r.returncode == 2 and "makes a new store" in r.stderr, r.stderr
