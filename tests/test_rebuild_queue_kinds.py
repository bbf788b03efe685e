"""A store with light queues (%LMQ%…, multi-dispatch) and a BatchConsumeQueue topic, written by
upstream (fixtures/reference/propcrc-lmq-batchcq): rebuild refuses to drop or mis-write the
queues it cannot regenerate yet, rebuilds the other topics byte-identically and keeps them."""
from __future__ import annotations

import shutil

import pytest

from conftest import reference_store, run_cli

STORE = "propcrc-lmq-batchcq"


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("args", [
    ["rebuild", "consumequeue", "{s}", "--yes"],
    ["rebuild", "consumequeue", "{s}", "--dry-run"],
    ["rebuild", "consumequeue", "{s}", "--topic", "%LMQ%room-1", "--yes"],
    ["rebuild", "consumequeue", "{s}", "--topic", "BatchCqTopic", "--yes"],
    ["rebuild", "all", "{s}", "--yes"],
])
def test_refused_where_queues_would_be_lost(tmp_path, args):
    root = tmp_path / "s"
    shutil.copytree(reference_store(STORE), root)
    before = _tree(root)
    r = run_cli(*[a.format(s=root) for a in args])
    assert r.code == 3, r.out + r.err
    assert "rebuild does not regenerate yet" in r.err and str(root / "consumequeue") in r.err
    assert _tree(root) == before


def test_other_topics_rebuild_identically_and_the_rest_is_kept(tmp_path):
    root = tmp_path / "s"
    shutil.copytree(reference_store(STORE), root)
    before = _tree(root / "consumequeue")
    (root / "consumequeue" / "CrcTopic" / "2").rename(tmp_path / "lost")      # a damaged queue
    r = run_cli("rebuild", "consumequeue", root, "--topic", "CrcTopic", "--yes")
    assert r.code == 0, r.err
    assert _tree(root / "consumequeue") == before          # CrcTopic rebuilt as upstream wrote it; LMQ kept
    assert _tree(root / "batchconsumequeue") == _tree(reference_store(STORE) / "batchconsumequeue")


def test_index_rebuild_equals_upstream(tmp_path):
    root = reference_store(STORE)
    assert run_cli("rebuild", "index", root, "--output", tmp_path / "ix").code == 0
    assert [p.read_bytes() for p in sorted((tmp_path / "ix").iterdir())] == \
           [p.read_bytes() for p in sorted((root / "index").iterdir())]
