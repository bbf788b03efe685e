"""Hostile names and paths: topics from data never reach the file system outside the destination.

Topics like ``../../x``, absolute paths, NUL, 32 KB names and case-only twins are fed to
`write` (JSONL), to `rebuild` (records in the CommitLog) and to `export`; afterwards the
only changes on disk are inside the destination. Symlinks inside a store are never written
through (a linked segment is read through, as the broker reads it), and table output escapes terminal control characters from bodies/properties.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from conftest import run_cli
from formats import commitlog as cl
from rmqtool.records.encode import Host, MessageFields, encode, patch_phy_offset
from rmqtool.io.topicpath import queue_dir, topic_path_problem

COMMITLOG_FILE_SIZE = 1 << 16
GEOMETRY = ["--commitlog-file-size", COMMITLOG_FILE_SIZE, "--cq-file-size", 800,
            "--index-slots", 61, "--index-entries", 350]


def hostile_topics(sandbox: Path) -> list[str]:
    return ["../../escaped", "../escaped2", str(sandbox / "abs-topic"), "a\x00b", ".", "..", "x/../../y",
            "t" * 300, "T" * 32_000, "bad\\name", "nl\nname"]


def tree(root: Path) -> dict[str, str]:
    """Every path under root (following no symlinks) with a content hash for files."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


def changed_outside(before: dict, after: dict, inside: str) -> list[str]:
    """Paths added, removed or changed that are neither inside ``inside`` nor a directory above it."""
    keys = set(before) | set(after)
    return sorted(k for k in keys if before.get(k) != after.get(k)
                  and not (k == inside or k.startswith(inside + os.sep) or inside.startswith(k + os.sep)))


def commitlog_with_topics(store: Path, topics: list[str]) -> None:
    """A one-file CommitLog whose records carry these topics (encoded as the broker would)."""
    raw = bytearray()
    for i, topic in enumerate(topics):
        f = MessageFields(topic=topic, body=b"payload %d" % i,
                          properties=cl.encode_properties({"KEYS": f"key-{i}", "UNIQ_KEY": f"U{i:030d}"}),
                          queue_id=0, queue_offset=0, born_timestamp=1_700_000_000_000 + i,
                          store_timestamp=1_700_000_000_000 + i, born_host=Host(bytes(4), 1),
                          store_host=Host(bytes(4), 2))
        rec = bytearray(encode(f))
        patch_phy_offset(rec, len(raw))
        raw += rec
    (store / "commitlog").mkdir(parents=True)
    (store / "commitlog" / f"{0:020d}").write_bytes(bytes(raw) + bytes(COMMITLOG_FILE_SIZE - len(raw)))


# --- the name rule itself ---------------------------------------------------------------------
@pytest.mark.parametrize("topic", ["../../x", "/abs", "a\x00b", ".", "..", "a/b", "t" * 256, "", "c\\d", "\x1b[2J"])
def test_unsafe_topics_are_named(topic, tmp_path):
    assert topic_path_problem(topic)
    with pytest.raises(Exception) as info:
        queue_dir(tmp_path, topic, 0)
    assert "cannot name" in str(info.value) or "leave" in str(info.value)


@pytest.mark.parametrize("topic", ["OrderTopic", "%RETRY%group", "a.b", "...", "é中文", "t" * 255, "Case"])
def test_safe_topics_stay_inside(topic, tmp_path):
    assert topic_path_problem(topic) is None
    assert queue_dir(tmp_path, topic, 3).parent.parent == tmp_path


# --- write -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("index", range(11))
def test_write_refuses_hostile_topics(tmp_path, index):
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    topic = hostile_topics(sandbox)[index]
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps({"topic": "ok", "body": "x"}) + "\n" + json.dumps({"topic": topic, "body": "x"}) + "\n")
    before = tree(tmp_path)
    res = run_cli("write", sandbox / "d" / "store", "--from", src, *GEOMETRY)
    assert res.code == 2 and res.err.startswith("error:") and "internal error" not in res.err, res.err
    assert changed_outside(before, tree(tmp_path), os.path.join("sandbox", "d", "store")) == []


def test_write_keeps_case_only_twins_apart(tmp_path):
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps({"topic": t, "body": t, "keys": "k"}) + "\n" for t in ("Case", "case", "CASE")))
    before = tree(tmp_path)
    res = run_cli("write", tmp_path / "store", "--from", src, *GEOMETRY)
    assert res.code == 0, res.err
    assert changed_outside(before, tree(tmp_path), "store") == []
    dumped = run_cli("dump", "consumequeue", tmp_path / "store", "-f", "jsonl").jsonl()
    assert sorted({r["topic"] for r in dumped if r["kind"] == "UNIT"}) == ["CASE", "Case", "case"]


# --- rebuild ----------------------------------------------------------------------------------------
def test_rebuild_skips_hostile_topics_and_stays_inside(tmp_path):
    sandbox = tmp_path / "sandbox"
    store = sandbox / "store"
    topics = ["good"] + hostile_topics(sandbox) + ["Case", "case"]
    commitlog_with_topics(store, topics)
    before = tree(tmp_path)
    res = run_cli("rebuild", "consumequeue", store, "--yes", "--workers", "1", "--cq-file-size", 800, "-f", "json")
    assert res.code in (0, 1), res.out + res.err
    assert "internal error" not in res.err
    assert changed_outside(before, tree(tmp_path), os.path.join("sandbox", "store")) == []
    made = sorted(p.name for p in (store / "consumequeue").iterdir())
    assert made == ["Case", "case", "good"], made
    report = res.out + res.err
    assert report.count("skipped") >= len(hostile_topics(sandbox)) - 1   # one line per skipped queue


def test_rebuild_output_dir_stays_inside(tmp_path):
    sandbox = tmp_path / "sandbox"
    store = sandbox / "store"
    commitlog_with_topics(store, ["good", "../../../outside", str(tmp_path / "abs")])
    before = tree(tmp_path)
    res = run_cli("rebuild", "consumequeue", store, "--output", sandbox / "out", "--workers", "1",
                  "--cq-file-size", 800, "-f", "json")
    assert res.code in (0, 1) and "internal error" not in res.err, res.out + res.err
    assert changed_outside(before, tree(tmp_path), os.path.join("sandbox", "out")) == []


# --- export ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_encodes_hostile_topics_inside_destination(tmp_path, fmt):
    sandbox = tmp_path / "sandbox"
    store = sandbox / "store"
    topics = ["good"] + hostile_topics(sandbox) + ["Case", "case"]
    commitlog_with_topics(store, topics)
    before = tree(tmp_path)
    res = run_cli("export", store, "--to", sandbox / "export", "-f", fmt)
    assert res.code == 0 and "internal error" not in res.err, res.out + res.err
    assert changed_outside(before, tree(tmp_path), os.path.join("sandbox", "export")) == []
    parts = [p for p in (sandbox / "export").iterdir() if p.is_dir()]
    assert len(parts) == len(set(topics)) and all(p.name.startswith("topic=") for p in parts)
    assert all(len(p.name.encode()) <= 255 for p in parts)
    names = json.loads((sandbox / "export" / "_topics.json").read_text())
    assert set(names.values() if isinstance(names, dict) else names) >= {"good", "../../escaped", "Case", "case"}


# --- symlinks inside a store ----------------------------------------------------------------------------
def test_symlinks_are_not_followed_out_of_the_store(tmp_path):
    outside = tmp_path / "outside"
    store = tmp_path / "store"
    commitlog_with_topics(store, ["good"])
    res = run_cli("rebuild", "consumequeue", store, "--yes", "--workers", "1", "--cq-file-size", 800, "-f", "json")
    assert res.code == 0, res.err
    # an outside queue directory and an outside commitlog file, linked into the store
    (outside / "q" / "0").mkdir(parents=True)
    (outside / "q" / "0" / f"{0:020d}").write_bytes(bytes(800))
    (outside / f"{COMMITLOG_FILE_SIZE:020d}").write_bytes(bytes(COMMITLOG_FILE_SIZE))
    os.symlink(outside / "q", store / "consumequeue" / "linked")
    os.symlink(outside / f"{COMMITLOG_FILE_SIZE:020d}", store / "commitlog" / f"{COMMITLOG_FILE_SIZE:020d}")
    before = tree(tmp_path)
    units = run_cli("dump", "consumequeue", store, "-f", "jsonl").jsonl()
    assert {r["topic"] for r in units} == {"good"}
    records = run_cli("dump", "commitlog", store, "-f", "jsonl")     # a linked segment is read through,
    assert records.code == 0, records.err                              # as the broker reads it (hostile-files.md)
    assert run_cli("verify", store, "-f", "jsonl").code in (0, 1)
    res = run_cli("rebuild", "consumequeue", store, "--yes", "--workers", "1", "--cq-file-size", 800, "-f", "json")
    assert res.code in (0, 1) and "internal error" not in res.err, res.err
    after = tree(tmp_path)
    assert changed_outside(before, after, "store") == []
    assert after[os.path.join("outside", "q", "0", f"{0:020d}")] == before[os.path.join("outside", "q", "0", f"{0:020d}")]


# --- terminal control characters --------------------------------------------------------------------
def test_table_output_escapes_control_sequences(tmp_path):
    evil = "\x1b[2J\x1b]0;pwned\x07\x1b[31mred\x9b1m\r\x08"
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps({"topic": "T", "body": "body" + evil, "keys": "k", "properties": {"p": evil}}) + "\n")
    assert run_cli("write", tmp_path / "store", "--from", src, *GEOMETRY).code == 0
    for args in (["dump", "commitlog", tmp_path / "store", "--body", "text"],
                 ["query-key", tmp_path / "store", "k", "--body", "text"]):
        res = run_cli(*args)
        assert res.code == 0, res.err
        for ch in ("\x1b", "\x07", "\x9b", "\x08", "\r"):
            assert ch not in res.out, f"{args[0]}: raw {ch!r} reached the terminal"
        if args[0] == "dump":                                   # body and properties shown, escaped
            assert "pwned" in res.out and "\\x1b" in res.out
    jl = run_cli("dump", "commitlog", tmp_path / "store", "--body", "text", "-f", "jsonl")
    row = next(r for r in jl.jsonl() if r["kind"] == "MESSAGE")
    assert row["body"] == "body" + evil and row["properties"]["p"] == evil      # JSON keeps data exact
