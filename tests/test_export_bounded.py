"""`export` keeps a bounded number of part files open: a store with thousands of topics exports
under a small open-file limit, and the rows are those of an export with every writer open."""
from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from conftest import run_cli

TOPICS = 1500


@pytest.fixture(scope="module")
def many_topics(tmp_path_factory):
    base = tmp_path_factory.mktemp("topics")
    rows = base / "rows.jsonl"
    with open(rows, "w") as fh:
        for i in range(2 * TOPICS):            # two messages per topic, interleaved
            fh.write(json.dumps({"topic": f"T{i % TOPICS:05d}", "body": f"m{i}"}) + "\n")
    root = base / "store"
    r = run_cli("write", root, "--from", rows, "--cq-file-size", 400)
    assert r.code == 0, r.err
    return root


def _rows(dest):
    out = {}
    for f in sorted(dest.rglob("*.jsonl")):
        topic = f.parent.name.partition("=")[2]
        out.setdefault(topic, []).extend(json.loads(line)["body"] for line in f.read_text().splitlines())
    return {topic: sorted(bodies) for topic, bodies in out.items()}


def _limit_files():
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_thousands_of_topics_under_a_small_open_file_limit(many_topics, tmp_path):
    dest = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "rmqtool", "export", str(many_topics), "--to", str(dest),
                        "-f", "jsonl", "--body", "text"], capture_output=True, text=True,
                       preexec_fn=_limit_files, timeout=300)
    assert p.returncode == 0, p.stderr
    got = _rows(dest)
    assert len(got) == TOPICS
    assert all(got[f"T{t:05d}"] == sorted([f"m{t}", f"m{t + TOPICS}"]) for t in range(TOPICS))


def test_parts_of_a_closed_writer_hold_the_same_rows(tmp_path, monkeypatch):
    """Topics coming back after their writer was closed go on in new parts; same rows."""
    from conftest import reference_store
    from rmqtool.ops import export as ex
    from rmqtool.ops.dump import RecordFilter
    from rmqtool.engines import Task
    from rmqtool.output.arrow import batch_to_arrow
    from rmqtool.records.scan import FileScan
    first = sorted((reference_store("basic") / "commitlog").iterdir())[0]
    rb = batch_to_arrow(next(iter(FileScan(first, 0))), "basic", "raw")
    slices = [rb.slice(k, 7) for k in range(0, rb.num_rows, 7)]
    task = Task(store="basic", path=str(first), file_base=0, lo=0, hi=None, task_id=3)
    outs = {}
    for cap in (64, 1):
        monkeypatch.setattr(ex, "MAX_OPEN_PARTS", cap)
        stage = ex.ExportStage(str(tmp_path / f"cap{cap}"), "jsonl", "raw", RecordFilter())
        parts = ex.PartWriters(stage, task)
        for part in slices:
            topics = part.column("topic").to_pylist()
            for topic in dict.fromkeys(topics):
                parts.write(topic, part.filter([t == topic for t in topics]))
        outs[cap] = (parts.finish(), _rows(tmp_path / f"cap{cap}"))
    assert outs[1][1] == outs[64][1] and len(outs[64][1]) > 1
    assert len(outs[1][0]) > len(outs[64][0]) == len(outs[64][1])
    names = sorted(r["file"].rsplit("/", 1)[1] for r in outs[1][0])
    assert "part-000003.jsonl" in names and "part-000003-1.jsonl" in names


def test_a_failed_export_leaves_no_parts_nor_directories(store_copy, tmp_path, monkeypatch):
    from rmqtool.ops import export as ex
    root = store_copy("basic")
    calls = {"n": 0}
    real = ex.ExportStage.write_part

    def fail_later(self, writer, part):
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(28, "No space left on device", "part")
        real(self, writer, part)

    monkeypatch.setattr(ex.ExportStage, "write_part", fail_later)
    monkeypatch.setattr(ex, "MAX_OPEN_PARTS", 1)
    dest = tmp_path / "out"
    r = run_cli("export", root, "--to", dest, "-f", "jsonl")
    assert r.code == 2, r.err
    assert not dest.exists() or not [p for p in dest.rglob("*") if p.is_file() or p.is_dir()], \
        list(dest.rglob("*"))
