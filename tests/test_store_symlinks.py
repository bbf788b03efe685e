"""Symlinks inside a store: never followed by a writer, listed by the readers.

`write` refuses a store holding a link (it would append through it, and the backup would share
it); `verify` reports ``store.symlink`` and `info` lists each link with its target; a
ConsumeQueue rebuild carries a linked topic it does not rebuild over as the link itself, and
refuses to rebuild through or replace one (``rmqtool.io.install.carried_files`` /
``refuse_linked_topics``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import run_cli
from rmqtool.io import install as inst
from rmqtool.errors import RefusedError
from test_hostile_names import tree  # noqa: E402  (one tree listing for both)

GEOMETRY = ["--commitlog-file-size", 1 << 16, "--cq-file-size", 800, "--index-slots", 61,
            "--index-entries", 350]


def rows(topics: list[str], n: int = 30) -> str:
    return "".join(json.dumps({"topic": topics[i % len(topics)], "body": f"b{i}", "keys": f"k{i}"}) + "\n"
                   for i in range(n))


@pytest.fixture
def linked_store(tmp_path) -> tuple[Path, Path]:
    """A store of topics A, B and Linked whose consumequeue/Linked was moved outside and linked back."""
    store = tmp_path / "store"
    res = run_cli("write", store, "--from", "-", *GEOMETRY, stdin=rows(["A", "B", "Linked"]))
    assert res.code == 0, res.err
    outside = tmp_path / "outside" / "Linked"
    outside.parent.mkdir()
    os.rename(store / "consumequeue" / "Linked", outside)
    os.symlink(outside, store / "consumequeue" / "Linked")
    return store, outside


# --- write ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("topic", ["Linked", "A"])
def test_write_refuses_a_store_holding_a_linked_topic(linked_store, tmp_path, topic):
    store, outside = linked_store
    before = tree(tmp_path)
    res = run_cli("write", store, "--from", "-", *GEOMETRY, stdin=rows([topic], 5))
    assert res.code == 3, res.err
    assert str(store / "consumequeue" / "Linked") in res.err and str(outside) in res.err
    assert tree(tmp_path) == before                     # no outside file, no stage, no backup


def test_write_refuses_a_linked_commitlog_file(tmp_path):
    store = tmp_path / "store"
    assert run_cli("write", store, "--from", "-", *GEOMETRY, stdin=rows(["A"], 5)).code == 0
    seg = sorted((store / "commitlog").iterdir())[-1]
    moved = tmp_path / "disk2" / seg.name
    moved.parent.mkdir()
    os.rename(seg, moved)
    os.symlink(moved, seg)
    before = tree(tmp_path)
    res = run_cli("write", store, "--from", "-", *GEOMETRY, stdin=rows(["A"], 5))
    assert res.code == 3 and "symlink" in res.err and str(seg) in res.err, res.err
    assert tree(tmp_path) == before


def test_link_tree_never_recreates_a_link(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "d").mkdir(parents=True)
    os.symlink(tmp_path, src / "d" / "up")
    dst.mkdir()
    with pytest.raises(RefusedError, match="symlink"):
        inst.link_tree(src, dst)


# --- verify and info -------------------------------------------------------------------------------------
def test_verify_reports_each_link_with_its_target(linked_store):
    store, outside = linked_store
    res = run_cli("verify", store, "-f", "json")
    assert res.code == 0, res.err                        # a warning: the default --fail-on is error
    found = [f for f in json.loads(res.out)["findings"] if f["check"] == "store.symlink"]
    assert [(f["severity"], f["file"]) for f in found] == [("warning", str(store / "consumequeue" / "Linked"))]
    assert repr(str(outside)) in found[0]["message"]
    assert run_cli("verify", store, "-f", "json", "--fail-on", "warning").code == 1


def test_info_lists_each_link_with_its_target(linked_store):
    store, outside = linked_store
    info = run_cli("info", store, "-f", "jsonl").jsonl()[0]
    assert info["symlinks"] == [{"path": str(store / "consumequeue" / "Linked"), "target": str(outside)}]
    table = run_cli("info", store)
    assert table.code == 0
    assert f"symlink {store / 'consumequeue' / 'Linked'} -> {outside}" in table.err     # stdout piped


def test_a_store_without_links_lists_none(tmp_path):
    store = tmp_path / "store"
    assert run_cli("write", store, "--from", "-", *GEOMETRY, stdin=rows(["A"], 5)).code == 0
    assert run_cli("info", store, "-f", "jsonl").jsonl()[0]["symlinks"] == []
    res = run_cli("verify", store, "-f", "json")
    assert not [f for f in json.loads(res.out)["findings"] if f["check"] == "store.symlink"]


# --- rebuild: what is carried over, what is refused ---------------------------------------------------------
def _queue_files(store: Path, topic: str) -> list[str]:
    base = store / "consumequeue"
    return sorted(str(p.relative_to(base)) for p in (base / topic).rglob("*") if p.is_file())


def test_a_linked_topic_not_rebuilt_is_carried_over_as_the_link(linked_store):
    store, outside = linked_store
    cq = store / "consumequeue"
    c = inst.carried_files(cq, {("A", None)}, rebuilt={("A", 0)})
    assert c.links == ["Linked"]
    assert not any(f.startswith("Linked") for f in c.files + c.replaced)   # nothing behind the link
    assert c.replaced == _queue_files(store, "A") and c.files == _queue_files(store, "B")
    inst.refuse_linked_topics(cq, {("B", None)})                           # not selected: fine
    # a full rebuild that writes nothing for the linked topic keeps it too
    inst.refuse_linked_topics(cq, None)
    full = inst.carried_files(cq, None, rebuilt={("A", 0), ("B", 0)})
    assert full.links == ["Linked"] and full.files == []
    # carrying it: the new tree holds the same link, nothing is read behind it
    build = store / "build"
    for rel in full.links:
        inst.copy_link(cq / rel, build / rel)
    assert os.readlink(build / "Linked") == str(outside)


def test_rebuilding_a_linked_topic_is_refused(linked_store):
    store, outside = linked_store
    cq = store / "consumequeue"
    for only in ({("Linked", None)}, {("Linked", 0)}):
        with pytest.raises(RefusedError, match="consumequeue/Linked is a symlink") as exc:
            inst.refuse_linked_topics(cq, only)
        assert exc.value.exit_code == 3 and exc.value.path == str(cq / "Linked")
        assert repr(str(outside)) in exc.value.message
    # a full rebuild that has records for it
    with pytest.raises(RefusedError, match="consumequeue/Linked"):
        inst.carried_files(cq, None, rebuilt={("A", 0), ("Linked", 0)})
    with pytest.raises(RefusedError, match="consumequeue/Linked"):
        inst.carried_files(cq, None)                     # rebuilt unknown: every selected queue


def test_links_inside_queues_and_a_linked_consumequeue(tmp_path, linked_store):
    store, outside = linked_store
    cq = store / "consumequeue"
    qfile = sorted((cq / "B" / "0").iterdir())[0]
    os.symlink(qfile, cq / "B" / "0" / "99999999999999999999")
    with pytest.raises(RefusedError, match="consumequeue/B/0/99999999999999999999"):
        inst.refuse_linked_topics(cq, None)
    with pytest.raises(RefusedError):
        inst.refuse_linked_topics(cq, {("B", 0)})
    c = inst.carried_files(cq, {("A", None)}, rebuilt={("A", 0)})
    assert sorted(c.links) == ["B/0/99999999999999999999", "Linked"]
    elsewhere = tmp_path / "cq-elsewhere"
    os.rename(cq, elsewhere)
    os.symlink(elsewhere, cq)
    with pytest.raises(RefusedError, match="the consumequeue directory is a symlink"):
        inst.refuse_linked_topics(cq, {("A", None)})


def test_a_linked_index_file_refuses_an_index_replacement(tmp_path):
    store = tmp_path / "store"
    assert run_cli("write", store, "--from", "-", *GEOMETRY, stdin=rows(["A"], 5)).code == 0
    inst.refuse_links_in(store / "index")
    first = sorted((store / "index").iterdir())[0]
    os.symlink(first, store / "index" / "20000101000000000")
    with pytest.raises(RefusedError, match="symlink"):
        inst.refuse_links_in(store / "index")


# --- rebuild through the CLI (rmqtool.ops.rebuild calls carried_files / refuse_linked_topics) ---------------------
def test_cli_rebuild_of_another_topic_keeps_the_link(linked_store, tmp_path):
    store, outside = linked_store
    outside_before = tree(outside)
    res = run_cli("rebuild", "consumequeue", store, "--topic", "A", "--yes", "--workers", 1)
    assert res.code == 0, res.err
    assert os.readlink(store / "consumequeue" / "Linked") == str(outside)
    assert tree(outside) == outside_before


def test_cli_rebuild_of_the_linked_topic_is_refused(linked_store, tmp_path):
    store, outside = linked_store
    before = tree(tmp_path)
    res = run_cli("rebuild", "consumequeue", store, "--topic", "Linked", "--yes", "--workers", 1)
    assert res.code == 3 and "consumequeue/Linked is a symlink" in res.err, res.err
    assert tree(tmp_path) == before
    res = run_cli("rebuild", "all", store, "--yes", "--workers", 1)      # it has records: refused
    assert res.code == 3 and "consumequeue/Linked is a symlink" in res.err, res.err
    after = tree(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith(os.path.join("store", "index"))} == \
        {k: v for k, v in before.items() if not k.startswith(os.path.join("store", "index"))}
