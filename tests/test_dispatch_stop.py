"""A record whose dispatch fails (a non-int DELAY on the schedule topic) ends dispatch for
good: nothing after it reaches a ConsumeQueue or IndexFile, in the same file or a later
one, in ``write`` and in every rebuild walk (sequential, worker pool, engine tasks,
distributed)."""
from __future__ import annotations

from pathlib import Path

import pytest

from formats import commitlog as cl
from rmqtool.broker.dispatch import END_DISPATCH_STOP
from rmqtool.engines import get_engine
from rmqtool.io.indexfile import IndexGeometry
from rmqtool.ops.rebuild import rebuild_consumequeue, rebuild_index
from rmqtool.records.scan import RecordBatch, walk_store
from rmqtool.io.store import Store
from rmqtool.ops.writer import Geometry, write_rows

GEOMETRY = Geometry(8192, 400, 13, 101)      # ~30 records per commitlog file, 20 units per CQ file
BAD = 40                                     # the failing record: in the second commitlog file


def _rows():
    rows = []
    for i in range(100):
        row = {"topic": f"T{i % 3}", "body": "b" * (60 + i), "keys": f"k{i}", "queue_id": i % 2,
               "store_timestamp": 1_700_000_000_000 + i}
        if i == BAD:
            row.update(topic=cl.SCHEDULE_TOPIC, properties={"DELAY": "x1", "REAL_TOPIC": "T0"})
        rows.append((f"row {i}", row))
    return rows


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _index_files(path: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()]


@pytest.fixture(scope="module")
def stopped_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("stop") / "store"
    summary = write_rows(root, _rows(), GEOMETRY)
    offsets = [int(o) for b in walk_store(Store(root)) if isinstance(b, RecordBatch) for o in b.phy_offset]
    assert len(offsets) == 100 and len(Store(root).commitlog.files) >= 3
    return root, summary, offsets[BAD]


def _cq_phy_offsets(cq_root: Path) -> list[int]:
    import numpy as np
    from formats.consumequeue import CQ_UNIT_DTYPE
    out = []
    for f in (p for p in cq_root.rglob("0*") if p.is_file()):
        units = np.frombuffer(f.read_bytes(), CQ_UNIT_DTYPE)
        out += [int(u) for u in units["commitlog_offset"][units["size"] > 0]]
    return out


def test_write_dispatches_nothing_after_the_failing_record(stopped_store):
    root, summary, bad_at = stopped_store
    assert any("x1" in w and str(bad_at) in w for w in summary.warnings)
    phys = _cq_phy_offsets(root / "consumequeue")
    assert len(phys) == BAD and max(phys) < bad_at


@pytest.mark.parametrize("workers", [1, 2])
def test_rebuild_ends_at_the_failing_record(stopped_store, tmp_path, workers):
    root, _, bad_at = stopped_store
    cq = rebuild_consumequeue(Store(root), output=tmp_path / "cq", workers=workers, allow_truncate=True)
    ix = rebuild_index(Store(root), IndexGeometry(13, 101), output=tmp_path / "ix", workers=workers,
                       allow_truncate=True)
    for r in (cq, ix):
        assert (r.records, r.range_end, r.end_kind) == (BAD, bad_at, END_DISPATCH_STOP)
        assert any("x1" in w for w in r.warnings)
    assert _tree(tmp_path / "cq") == _tree(root / "consumequeue")
    assert _index_files(tmp_path / "ix") == _index_files(root / "index")


def test_engine_walks_end_at_the_failing_record(stopped_store, tmp_path):
    from rmqtool.ops.rebuild import rebuild_all
    from test_engines import task_engine
    root, _, bad_at = stopped_store
    with task_engine(2) as eng:
        cq = rebuild_consumequeue(Store(root), output=tmp_path / "cq", engine=eng, split_size=3000,
                                  allow_truncate=True)
        out, _ = rebuild_all(Store(root), IndexGeometry(13, 101), GEOMETRY.cq_file_size, output=tmp_path / "d",
                             engine=eng, split_size=3000, allow_truncate=True)
    assert (cq.records, cq.range_end, cq.end_kind) == (BAD, bad_at, END_DISPATCH_STOP)
    assert (out.records, out.range_end, out.end_kind) == (BAD, bad_at, END_DISPATCH_STOP)
    assert _tree(tmp_path / "cq") == _tree(root / "consumequeue")
    assert _tree(tmp_path / "d" / "consumequeue") == _tree(root / "consumequeue")
    assert _index_files(tmp_path / "d" / "index") == _index_files(root / "index")


@pytest.mark.parametrize("level,jobs", [("shallow", 1), ("deep", 1), ("deep", 2)])
def test_verify_info_and_rebuild_agree_on_the_stop(stopped_store, level, jobs):
    """Issue 13: one DELAY rule. verify (any level, with or without parallel jobs) reports the
    record as an error at its file and position, and its forecast ends the CommitLog there,
    as `info` and `rebuild --dry-run` do."""
    import json

    from conftest import run_cli
    root, _, bad_at = stopped_store
    seg = Store(root).commitlog.locate(bad_at)
    r = run_cli("verify", root, "--level", level, "--jobs", jobs, "--split-size", 4096, "-f", "json")
    assert r.code == 1, r.err
    report = json.loads(r.out)
    stops = [f for f in report["findings"] if f["check"] == "dispatch.stop"]
    assert [(f["severity"], f["file"], f["offset"]) for f in stops] == [("error", str(seg[0].path), seg[1])]
    fc = report["forecast"]
    info = json.loads(run_cli("info", root, "-f", "json").out)[0]["commitlog"]
    plan = json.loads(run_cli("rebuild", "all", root, "--dry-run", "-f", "json").out)
    assert (fc["valid_end"], fc["end_kind"]) == (info["valid_end"], info["end_kind"]) == (bad_at, END_DISPATCH_STOP)
    assert all((p["range_end"], p["end_kind"]) == (bad_at, END_DISPATCH_STOP) for p in plan)
    assert fc["end_detail"] == info["end_detail"]
