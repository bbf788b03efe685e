"""A store with light queues (%LMQ%…, multi-dispatch) and a BatchConsumeQueue topic, written by
upstream (fixtures/reference/propcrc-lmq-batchcq): rebuild refuses to drop or mis-write the
queues it cannot regenerate yet, rebuilds the other topics byte-identically and keeps them."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import reference_store, run_cli

STORE = "propcrc-lmq-batchcq"


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("args", [
    ["rebuild", "consumequeue", "{s}", "--yes"],
    ["rebuild", "consumequeue", "{s}", "--topic", "%LMQ%room-1", "--yes"],
    ["rebuild", "consumequeue", "{s}", "--topic", "BatchCqTopic", "--yes"],
    ["rebuild", "all", "{s}", "--yes"],
])
def test_light_queues_rebuild_as_upstream_wrote_them_and_batch_queues_are_kept(tmp_path, args):
    """Multi-dispatch is on for a store holding light queues: every %LMQ% queue comes back
    byte for byte (fillers and out-of-order appends included); BatchCQ topics are never
    written into consumequeue/, and batchconsumequeue/ stays as it was."""
    root = tmp_path / "s"
    shutil.copytree(reference_store(STORE), root)
    before = _tree(root)
    for rel in [r for r in before if r.startswith("consumequeue/%LMQ%room-2/") or r.startswith("consumequeue/LmqParent/")]:
        (root / rel).unlink()                                  # damaged queues
    r = run_cli(*[a.format(s=root) for a in args])
    assert r.code == 0, r.out + r.err
    after = _tree(root)
    for rel, data in before.items():
        if rel.startswith(("consumequeue/", "batchconsumequeue/")):         # (index names are creation times)
            if "--topic" in args and not rel.startswith(f"consumequeue/{args[args.index('--topic') + 1]}/") \
                    and rel.startswith(("consumequeue/%LMQ%room-2/", "consumequeue/LmqParent/")):
                continue                                      # not selected: stays deleted
            assert after.get(rel) == data, rel
    assert not any(r.startswith("consumequeue/BatchCqTopic") for r in after)


def test_multi_dispatch_off_refuses_to_drop_light_queues(tmp_path):
    from rmqtool.broker.dispatch import DispatchConfig
    from rmqtool.errors import RefusedError
    from rmqtool.io.store import Store
    from rmqtool.ops.rebuild import rebuild_consumequeue
    root = tmp_path / "s"
    shutil.copytree(reference_store(STORE), root)
    with pytest.raises(RefusedError, match="light queue topic"):
        rebuild_consumequeue(Store(root), output=tmp_path / "out", config=DispatchConfig())


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


def test_batch_queues_rebuild_byte_identical_in_place_and_to_an_output(tmp_path):
    root = tmp_path / "s"
    shutil.copytree(reference_store(STORE), root)
    want = _tree(root / "batchconsumequeue")
    r = run_cli("rebuild", "batchconsumequeue", root, "--output", tmp_path / "out", "-f", "json")
    assert r.code == 0, r.err
    assert _tree(tmp_path / "out") == want
    assert json.loads(r.out)[0]["units"] == 52
    lost = root / "batchconsumequeue" / "BatchCqTopic" / "1" / f"{736:020d}"
    lost.unlink()                                              # a damaged queue
    r = run_cli("rebuild", "batchconsumequeue", root, "--yes")
    assert r.code == 0, r.err
    assert _tree(root / "batchconsumequeue") == want
    assert any(p.name.startswith("batchconsumequeue.backup-") for p in root.iterdir())


def test_batch_queue_rebuild_needs_a_batch_topic(tmp_path):
    r = run_cli("rebuild", "batchconsumequeue", reference_store("basic"), "--output", tmp_path / "out")
    assert r.code == 2 and "no BatchCQ topic" in r.err
