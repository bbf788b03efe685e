"""`convert --to commitlog`: the upstream-written DLedger store rewritten as a classic store
holds every committed message with all its fields, verifies clean, and the source is untouched."""
from __future__ import annotations

import hashlib
import json

from conftest import dledger_copy, dledger_store, reference_store, run_cli

KEPT = ("topic", "queue_id", "queue_offset", "store_timestamp", "born_timestamp", "keys", "uniq_key", "tags",
        "tags_code", "sys_flag", "flag", "properties_raw", "body", "body_crc", "born_host", "store_host",
        "reconsume_times", "prepared_transaction_offset", "magic", "size")


def _messages(root) -> list[dict]:
    r = run_cli("dump", "commitlog", root, "-f", "jsonl", "--body", "raw")
    assert r.code == 0, r.err
    return [x for x in r.jsonl() if x["kind"] == "MESSAGE"]


def _digest(root) -> dict:
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and p.stat().st_size < (1 << 20)}


def test_convert_keeps_every_message_and_verifies_clean(tmp_path):
    src = dledger_store()
    before = _digest(src)
    r = run_cli("convert", src, "--output", tmp_path / "c", "-f", "json")
    assert r.code == 0, r.err
    assert json.loads(r.out)[0]["records"] == 400
    assert _digest(src) == before                               # the source is only read
    v = run_cli("verify", tmp_path / "c", "--level", "deep", "-f", "json")
    assert v.code == 0, json.loads(v.out)["findings"]
    assert (tmp_path / "c" / "commitlog").is_dir() and not list((tmp_path / "c").glob("dledger-*"))
    old, new = _messages(src), _messages(tmp_path / "c")
    assert [{k: m.get(k) for k in KEPT} for m in old] == [{k: m.get(k) for k in KEPT} for m in new]
    assert [m["phy_offset"] for m in new] != [m["phy_offset"] for m in old]     # no entry headers any more
    q = run_cli("query-queue", tmp_path / "c", old[9]["topic"], old[9]["queue_id"], "--offset",
                old[9]["queue_offset"], "--count", 1, "-f", "json")
    assert json.loads(q.out)[0]["uniq_key"] == old[9]["uniq_key"]


def test_only_committed_entries_unless_asked(tmp_path):
    src = dledger_copy(tmp_path / "s")
    (src / "dledger-n0" / "checkpoint").write_text("committedIndex=349\nendIndex=399\n")
    assert json.loads(run_cli("convert", src, "-o", tmp_path / "a", "-f", "json").out)[0]["records"] == 350
    r = run_cli("convert", src, "-o", tmp_path / "b", "--include-uncommitted", "-f", "json")
    assert json.loads(r.out)[0]["records"] == 400


def test_refusals(tmp_path):
    (tmp_path / "exists").mkdir()
    r = run_cli("convert", dledger_store(), "--output", tmp_path / "exists")
    assert r.code == 3 and "output exists" in r.err
    r = run_cli("convert", reference_store("basic"), "--output", tmp_path / "x")
    assert r.code == 2 and "not a DLedger-mode store" in r.err and not (tmp_path / "x").exists()
    r = run_cli("convert", dledger_store(), "--output", tmp_path / "y", "--into", "dledger")
    assert r.code == 2 and "--into must be one of commitlog, not 'dledger'" in r.err
